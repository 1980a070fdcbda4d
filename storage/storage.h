/* Storage backends behind one table of operations (STYLE.md #2).
 *
 * A backend keeps named volumes in a pool.  Image bases are volumes made
 * from a file; machine disks are volumes made from a base in O(1), whatever
 * their size (a qcow2 overlay, a thin snapshot).  hostd only ever calls the
 * storage_*() wrappers below; they are the only callers of the pointers and
 * turn an absent optional operation into a "not supported" error.
 *
 * Volume names are chosen by hostd ("base-tiny", "m-<uuid>") and are
 * [a-z0-9-]; the backend maps them to its own objects. */
#ifndef BERTH_STORAGE_H
#define BERTH_STORAGE_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"

struct storage;

/* What libvirt needs to attach a volume, and what it costs. */
struct storage_vol_info {
	char path[4096];          /* file or block device */
	const char *format;       /* "qcow2" or "raw": the disk driver type */
	bool block;               /* a block device (disk type='block') */
	uint64_t virtual_bytes;   /* size the guest sees */
	uint64_t allocated_bytes; /* bytes really allocated for this volume */
};

struct storage_pool_info {
	uint64_t total_bytes;     /* capacity of the pool (filesystem or thin pool) */
	uint64_t used_bytes;
};

/* Options of a pool; NULL means the defaults. */
struct storage_opts {
	int max_fill;   /* refuse creations above this data/metadata use, in %
			   (thin pools); 0 = 90 */
	unsigned qemu_gid; /* the group every QEMU runs in: bases and frozen
			      volumes are root's, readable by it (0440), a qcow2
			      pool's directory root:qemu_gid 0710 (QEMU may
			      traverse it, not list it); 0 = root: nobody else */
};

struct storage_ops {
	const char *name;

	/* Required.  Open (creating if needed) the pool at LOCATION; PRIV
	 * receives the backend's state.  O is never NULL. */
	int (*open)(const char *location, const struct storage_opts *o, void **priv,
		    struct err *e);
	/* Optional.  Release PRIV. */
	void (*close)(void *priv);

	/* Required.  Make base volume VOL from the image file SRC of format
	 * SRC_FORMAT ("qcow2" or "raw").  The base is read-only afterwards.
	 * Removes the partial volume on failure. */
	int (*base_import)(void *priv, const char *vol, const char *src,
			   const char *src_format, struct err *e);
	/* Required.  Make an empty base VOL of BYTES that reads as zeros, to
	 * be filled through INFO's path (in INFO's format) and then sealed.
	 * Until base_seal it is not a volume a restart keeps: a crash leaves
	 * nothing under VOL's name that start-up would not collect.  The
	 * caller removes it with vol_remove when filling fails.  qcow2: a
	 * sparse raw file (format "raw"); lvm-thin: a thin LV (a block
	 * device, "raw"). */
	int (*base_create)(void *priv, const char *vol, uint64_t bytes,
			   struct storage_vol_info *info, struct err *e);
	/* Required.  Make the filled VOL a read-only base. */
	int (*base_seal)(void *priv, const char *vol, struct err *e);
	/* Required.  Make VOL of BYTES from BASE in O(1).  BYTES must be at
	 * least the base's virtual size.  Removes the partial volume on
	 * failure; fails with 409 "exists" when VOL exists.  VOL is root's,
	 * mode 0600, until vol_own gives it to a QEMU (which also freezes
	 * BASE when VOL is layered on it). */
	int (*vol_create)(void *priv, const char *vol, const char *base,
			  uint64_t bytes, struct err *e);
	/* Optional.  Make SNAP a frozen copy of VOL's current content in O(1);
	 * VOL stays writable and independent of SNAP (a thin snapshot).  VOL
	 * may be in use by a paused guest.  A backend without it is checkpointed
	 * by layering: hostd freezes VOL and writes to a new volume on top.
	 * Removes a partial SNAP on failure. */
	int (*snapshot)(void *priv, const char *vol, const char *snap, struct err *e);
	/* Required.  Remove VOL; a missing VOL is success. */
	int (*vol_remove)(void *priv, const char *vol, struct err *e);
	/* Required.  Whether VOL exists. */
	bool (*vol_exists)(void *priv, const char *vol);
	/* Required.  Fill INFO for VOL; 404 "not_found" when missing. */
	int (*vol_info)(void *priv, const char *vol,
			struct storage_vol_info *info, struct err *e);
	/* Required.  Call FN for every volume in the pool (for the orphan
	 * sweep at start-up). */
	int (*vol_list)(void *priv, void (*fn)(const char *vol, void *data),
			void *data, struct err *e);
	/* Optional.  The volume VOL is layered on (its qcow2 backing file),
	 * into PARENT; "" when none.  A backend whose volumes never depend on
	 * each other (thin snapshots are independent) leaves this NULL. */
	int (*vol_parent)(void *priv, const char *vol, char *parent, size_t len,
			  struct err *e);
	/* Optional.  How VOL's allocated bytes split: EXCLUSIVE (held for VOL
	 * alone) and SHARED (held for VOL and other volumes too: its base and
	 * checkpoints it reads through, or blocks a thin snapshot shares).
	 * Costlier than vol_info (lvm-thin reads a metadata snapshot). */
	int (*vol_usage)(void *priv, const char *vol, uint64_t *exclusive, uint64_t *shared,
			 struct err *e);
	/* Optional.  Mark the pool as TAG's (a hostd instance), refusing
	 * (409 "pool_taken") a pool another tag claimed: start-up collects
	 * volumes nothing names, so two instances must never share a pool. */
	int (*claim)(void *priv, const char *tag, struct err *e);
	/* Optional.  Make VOL the disk of a QEMU running as UID and GID: VOL
	 * owned by UID:GID, mode 0600 (no other QEMU may read it), and every
	 * volume VOL reads through root's and read-only, readable by the
	 * pool's qemu_gid (storage_opts).
	 * Cheap when nothing needs to change (a stat per file, a header read
	 * per layer): hostd calls it before every start. */
	int (*vol_own)(void *priv, const char *vol, unsigned uid, unsigned gid,
		       struct err *e);
	/* Optional.  Capacity and use of the pool. */
	int (*pool_info)(void *priv, struct storage_pool_info *info,
			 struct err *e);
};

extern const struct storage_ops storage_qcow2;
extern const struct storage_ops storage_lvm_thin;

/* Look up a backend by name ("qcow2"); NULL when unknown. */
const struct storage_ops *storage_find(const char *name);

/* Open backend NAME at LOCATION with options O (NULL: defaults).  Returns
 * NULL with E set on failure. */
struct storage *storage_open_opts(const char *name, const char *location,
				  const struct storage_opts *o, struct err *e);
/* The same with the default options. */
struct storage *storage_open(const char *name, const char *location,
			     struct err *e);
/* Close; accepts NULL. */
void storage_close(struct storage *st);
const char *storage_name(const struct storage *st);
const char *storage_location(const struct storage *st);

int storage_base_import(struct storage *st, const char *vol, const char *src,
			const char *src_format, struct err *e);
int storage_base_create(struct storage *st, const char *vol, uint64_t bytes,
			struct storage_vol_info *info, struct err *e);
int storage_base_seal(struct storage *st, const char *vol, struct err *e);
int storage_vol_create(struct storage *st, const char *vol, const char *base,
		       uint64_t bytes, struct err *e);
/* Whether the backend makes frozen copies itself (storage_ops.snapshot). */
bool storage_can_snapshot(const struct storage *st);
int storage_snapshot(struct storage *st, const char *vol, const char *snap,
		     struct err *e);
int storage_vol_remove(struct storage *st, const char *vol, struct err *e);
/* storage_ops.vol_own; a backend without it accepts (its volumes need no
 * owner). */
int storage_vol_own(struct storage *st, const char *vol, unsigned uid, unsigned gid,
		    struct err *e);
bool storage_vol_exists(struct storage *st, const char *vol);
int storage_vol_info(struct storage *st, const char *vol,
		     struct storage_vol_info *info, struct err *e);
int storage_vol_list(struct storage *st,
		     void (*fn)(const char *vol, void *data), void *data,
		     struct err *e);
int storage_pool_info(struct storage *st, struct storage_pool_info *info,
		      struct err *e);
/* VOL's exclusive and shared allocation (storage_ops.vol_usage); 501
 * "not_supported" when the backend cannot tell. */
int storage_vol_usage(struct storage *st, const char *vol, uint64_t *exclusive,
		      uint64_t *shared, struct err *e);
/* Claim the pool for TAG (see storage_ops.claim); a backend without the
 * operation accepts any. */
int storage_claim(struct storage *st, const char *tag, struct err *e);
/* VOL's parent volume into PARENT ("" when none, or when the backend's
 * volumes are independent). */
int storage_vol_parent(struct storage *st, const char *vol, char *parent,
		       size_t len, struct err *e);
/* Number of volumes layered directly on VOL (0 for independent volumes),
 * or -1 with E set.  A volume with dependents must not be removed. */
int storage_vol_dependents(struct storage *st, const char *vol, struct err *e);

#endif
