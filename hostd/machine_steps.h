/* The steps machines' operations are made of, shared by the files of the
 * machine module and no one else: machine.c (lifecycle), memimage.c
 * (suspend and wake), reconcile.c (start-up and libvirt's events) and
 * checkpoint.c (checkpoints, restore, forks).  Everyone else uses
 * machine.h.  Unless said otherwise, the caller holds the machine's busy
 * mark (machine_begin) while a step runs. */
#ifndef BERTH_MACHINE_STEPS_H
#define BERTH_MACHINE_STEPS_H

#include <stdbool.h>
#include <stddef.h>

#include "common/buf.h"
#include "hostd/db.h"
#include "hostd/hostd.h"
#include "hostd/machine.h"
#include "hostd/virt.h"

/* STATE/machines/ID: the machine's seed, console log, sockets and memory
 * images. */
void machine_dir(struct hostd *h, const char *id, char *out, size_t outlen);
/* M's libvirt domain name, "berth-INSTANCE-OWNER.NAME". */
void machine_dom_name(struct hostd *h, const struct machine *m, char *out, size_t outlen);

/* libvirt's state of domain ID counting hostd's memory images: a shut-off
 * domain with an image it has not run since is VS_SUSPENDED. */
int machine_vstate(struct hostd *h, const char *id, enum vstate *vs, struct err *e);
/* The machine state libvirt's state VS stands for; false for VS_MISSING
 * and VS_BUSY, which are not states a machine is recorded in. */
bool machine_state_of(enum vstate vs, enum mstate *out);

/* The uid M's QEMU runs as (qemu_uid_base + its number), into *UID. */
int machine_qemu_uid(struct hostd *h, const struct machine *m, unsigned *uid,
		     struct err *e);
/* Give volume VOL to M's QEMU (storage_vol_own: its uid's alone, the
 * layers under it frozen): for a new top a running QEMU is moved onto. */
int machine_own_volume(struct hostd *h, const struct machine *m, const char *vol,
		       struct err *e);
/* M's domain XML, as machine_define defines it, into XML; the files it
 * names are made ready for M's QEMU first (owners, modes). */
int machine_xml(struct hostd *h, const struct machine *m, struct buf *xml, struct err *e);
/* The same, for restoring the save image PATH: without the agent's channel
 * when the image has none (saved before berth had one; libvirt refuses a
 * restore whose devices differ), with the image's VM generation id, or
 * (NEW_GENID: another machine's image, which has one) a new one. */
int machine_xml_for_image(struct hostd *h, const struct machine *m, const char *path,
			  bool new_genid, struct buf *xml, struct err *e);
/* Define (or redefine, same UUID) M's domain from hostd's XML. */
int machine_define(struct hostd *h, const struct machine *m, struct err *e);

/* network=user: when another program took M's SSH port, move M to a free
 * one (recorded in the database and in M).  0 when it stays, 1 when it
 * moved, -1 with E (503 "no_port" when none is free).  Other networks: 0. */
int machine_port_refresh(struct hostd *h, struct machine *m, struct err *e);

/* Start M from libvirt state VS: a cold boot from stopped (the domain is
 * redefined so its XML follows the config), a wake from suspended. */
int machine_do_start(struct hostd *h, struct machine *m, enum vstate vs, struct err *e);
/* Stop M from VS: ACPI, forced after TIMEOUT_S; a suspended machine's
 * saved memory is discarded. */
int machine_do_stop(struct hostd *h, struct machine *m, enum vstate vs, int timeout_s,
		    struct err *e);
/* Wait up to TIMEOUT_S for M's sshd to answer (no busy mark needed).  409
 * "not_running" when it stops meanwhile, 504 "timeout". */
int machine_wait_ready(struct hostd *h, const struct machine *m, int timeout_s,
		       struct err *e);

/* Create machine R->name with its disk layered on volume BASE (NULL: the
 * image's base), as machine_create does, without starting it. */
int machine_create_from(struct hostd *h, const struct create_req *r, const char *base,
			struct machine *out, struct err *e);
/* Remove every resource of M (domain, machine dir, row, checkpoints) and
 * then its volumes, unless other volumes still depend on them.  Keeps going
 * after a failure and reports the first. */
int machine_destroy_all(struct hostd *h, const struct machine *m, struct err *e);
/* Remove volume VOL if no row names it and no volume depends on it, then
 * its parent the same way, up the chain. */
void volume_gc(struct hostd *h, const char *vol);

#endif
