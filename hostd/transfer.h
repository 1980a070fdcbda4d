/* Moving disk images in and out: `berth image import` streams a raw, qcow2
 * or zstd-compressed file into a new base volume, and `berth image export`
 * streams a machine's (or a checkpoint's) disk out as one zstd frame.  Both
 * run in constant memory whatever the image's size. */
#ifndef BERTH_TRANSFER_H
#define BERTH_TRANSFER_H

#include <stdint.h>
#include <sys/types.h>

#include "hostd/hostd.h"

struct import_opts {
	const char *name;     /* the new image */
	const char *sha256;   /* expected sha256 of the bytes fed; NULL: none */
	const char *format;   /* "raw" or "qcow2" to insist; NULL: recognised */
	const char *origin;   /* what the bytes are, for messages ("disk.zst") */
	uint64_t length;      /* how many bytes will be fed; 0: unknown */
	/* How machines of the image boot: boot "direct" with kernel and
	 * initrd (files copied into the catalog) and cmdline, or "firmware"
	 * (the disk's own boot loader).  user: the default login user. */
	const char *boot, *kernel, *initrd, *cmdline, *user;
};

struct import;

/* Start importing image O->name.  NULL with E set (nothing made). */
struct import *import_begin(struct hostd *h, const struct import_opts *o, struct err *e);
/* The next LEN bytes of the file.  After a failure the rest is read and
 * dropped: import_end reports the failure. */
void import_feed(struct import *im, const void *data, size_t len);
/* All bytes fed: check and register the image into OUT.  On failure
 * nothing is left (no volume, file or row).  Frees IM. */
int import_end(struct import *im, struct image *out, struct err *e);
/* Give up (the client went away): remove what was made, free IM. */
void import_abort(struct import *im);
/* Import the file PATH (a recipe's root, say) the same way. */
int import_file(struct hostd *h, const struct import_opts *o, const char *path,
		struct image *out, struct err *e);

struct export;

/* Start exporting OWNER's machine NAME, or its checkpoint CKPT (NULL: the
 * disk as it is, which needs the machine not running).  Holds the
 * machine's busy mark until export_end.  At most cfg.max_host_exports run at
 * once (each compresses with a worker thread per CPU): 503
 * "too_many_exports" past that.  NULL with E set. */
struct export *export_begin(struct hostd *h, const char *owner, const char *name,
			    const char *ckpt, struct err *e);
/* The raw size being exported (the zstd frame's content size). */
uint64_t export_size(const struct export *x);
/* The next compressed bytes into BUF (at most MAX): how many, 0 at the
 * end, -1 on a failure (logged). */
ssize_t export_read(struct export *x, void *buf, size_t max);
void export_end(struct export *x);

#endif
