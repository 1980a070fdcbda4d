/* A suspended machine's memory, kept by hostd: libvirt saves the guest's
 * memory raw into the machine's directory, hostd compresses it (zstd,
 * hostd/zmem.c), and a wake restores it through a FIFO that a thread fills
 * while decompressing.  The rule behind the crash handling: while an image
 * file exists, the guest has not run since it was saved, so restoring it
 * is right.  With suspend_compress = false, libvirt's managed save is used
 * instead and none of this applies (but memimage_bytes).
 *
 * All of it is for the files of the machine module (machine_steps.h): the
 * caller holds the machine's busy mark, but for memimage_find and
 * memimage_bytes. */
#ifndef BERTH_MEMIMAGE_H
#define BERTH_MEMIMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hostd/db.h"
#include "hostd/hostd.h"
#include "hostd/virt.h"

/* Whether machine ID has a memory image to wake from; its path into PATH
 * (may be NULL). */
bool memimage_find(struct hostd *h, const char *id, char *path, size_t len);
/* Remove every memory image file of machine ID, durably (its guest runs,
 * or ran since).  How many there were. */
int memimage_discard(struct hostd *h, const char *id);
/* Suspend the running M: libvirt saves its memory, hostd compresses it.
 * A failed compression keeps the raw image (the machine is suspended all
 * the same and wakes from it); a failed save leaves M running.  -1 with
 * E. */
int memimage_suspend(struct hostd *h, struct machine *m, struct err *e);
/* Wake M from its memory image (memimage_find said it has one).  The
 * guest runs only once the image proved whole and is gone; a restore that
 * fails leaves M suspended, an image that fails its check leaves M stopped
 * with its disk as it was suspended (500 "memory_image"). */
int memimage_wake(struct hostd *h, struct machine *m, struct err *e);
/* What a suspended machine's saved memory takes on disk (hostd's image or
 * libvirt's managed save); -1 when it is not suspended or nothing tells. */
int64_t memimage_bytes(struct hostd *h, const struct machine *m);

/* Start-up, first for each machine M: a restore of M that still waits in
 * libvirt for a wake a crash cut short (its FIFO has no writer) is ended,
 * so it does not hold the domain's job for good. */
void memimage_end_feed(struct hostd *h, const struct machine *m);
/* Start-up, for M whose libvirt state is *VS (RAN as virt_state_ran says):
 * finish or undo a suspend or wake cut short, drop images the guest ran
 * since, and make *VS VS_SUSPENDED when M keeps one. */
void memimage_reconcile(struct hostd *h, const struct machine *m, enum vstate *vs, bool ran);

#endif
