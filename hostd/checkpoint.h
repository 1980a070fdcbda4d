/* Checkpoints, restore and forks.
 *
 * A checkpoint freezes the machine's current volume and moves the machine
 * onto a new volume layered on it (for a running machine through libvirt's
 * external disk-only snapshot, the guest paused only for that moment).
 * Restore gives the machine a new volume layered on the checkpoint's; a fork
 * is a new machine whose volume is layered on a checkpoint's (or on a
 * freshly frozen one): both are checkpoint_* since both start from a
 * frozen volume.  Volumes that no row names and no volume needs are
 * collected (volume_gc), so deleting a machine or checkpoint that others
 * depend on keeps what they need. */
#ifndef BERTH_CHECKPOINT_H
#define BERTH_CHECKPOINT_H

#include <jansson.h>
#include <stdbool.h>

#include "hostd/db.h"
#include "hostd/hostd.h"

/* Checkpoint OWNER's machine NAME as CKPT (NULL: "ckpt-YYYYMMDD-HHMMSS").
 * Stopped, running or paused; 409 for a suspended machine.  With MEMORY
 * (a running machine; layering backends), its memory too. */
int checkpoint_create(struct hostd *h, const char *owner, const char *name,
		      const char *ckpt, bool memory, struct checkpoint *out, struct err *e);
int checkpoint_delete(struct hostd *h, const char *owner, const char *name,
		      const char *ckpt, struct err *e);
/* {"checkpoints": [...]} of the machine (a new reference), or NULL with E. */
json_t *checkpoint_list_json(struct hostd *h, const char *owner, const char *name,
			     struct err *e);
json_t *checkpoint_json(const struct checkpoint *c);

/* Return OWNER's machine NAME to checkpoint CKPT.  A running machine is
 * powered off (its current state is being discarded), restored and started
 * again; with WAIT, until SSH answers.  A checkpoint with memory returns
 * it running as it was. */
int checkpoint_restore(struct hostd *h, const char *owner, const char *name,
		       const char *ckpt, bool wait, struct machine *out, struct err *e);

struct fork_req {
	const char *owner;
	const char *name;      /* the machine forked */
	const char *new_name;  /* the fork, a machine of the same owner */
	const char *from;      /* a checkpoint of NAME; NULL: NAME as it is now */
	bool live;             /* a running NAME, FROM NULL: the fork starts with
				  NAME's memory, both run on */
	bool start, wait;      /* start the fork (and wait for its SSH) */
};

/* Fork R->name into a new machine R->new_name with its own id, MAC, SSH
 * port and seed, its disk layered on R->from's (or on NAME frozen now).
 * Its storage is sampled at once.  A fork asked to start runs, or is not
 * there.  Fills OUT. */
int checkpoint_fork(struct hostd *h, const struct fork_req *r, struct machine *out,
		    struct err *e);

/* "IP MAC" of the guest network SRC's running guest uses (its own, or a
 * live fork's source's), into OUT ("" when off the routed network): what a
 * live fork of it maps to its own. */
void checkpoint_source_alias(struct hostd *h, const struct machine *src, char *out,
			     size_t outlen);
/* How a machine started from another's memory gets its own identity. */
struct live_identity {
	const char *source_key;       /* the host key the saved guest presents */
	/* Its own host key's private half (OpenSSH PEM, the one in its seed):
	 * the image's berth-identity is handed it, with the hostname, root's
	 * authorized keys and host randomness, in one SSH command.  NULL, or an
	 * image without berth-identity: berth-seed --live re-reads the seed. */
	const char *host_key_private;
	bool machine_id;              /* and a new /etc/machine-id (templates) */
	bool applied;                 /* out: berth-identity took all of it */
};

/* Start F (a new, stopped machine whose disk is layered on the volume
 * saved with the memory image MEM, another machine's) running from MEM
 * with no boot: the host maps ALIAS ("IP MAC" the saved guest uses; NULL
 * or "" none) to F's own address, and F is re-keyed as ID says (over SSH
 * pinned to ID->source_key; ID->applied tells what was done) and presents
 * its own host key before this returns, else that key stays pinned and
 * SSH to it is refused until it does.  MEM is not changed.  With WAIT,
 * until SSH answers.  On failure F is deleted. */
int checkpoint_live_start(struct hostd *h, struct machine *f, const char *mem,
			  const char *alias, struct live_identity *id, bool wait, struct err *e);

/* Image IMAGE made from OWNER's machine NAME as it is now (crash-consistent
 * when it runs), or from its checkpoint CKPT (not NULL): its disk frozen,
 * as for a fork, with the boot settings of the machine's image.  Private
 * to OWNER until root publishes it.  400 invalid_name, 409 "exists". */
int checkpoint_image(struct hostd *h, const char *owner, const char *name, const char *image,
		     const char *ckpt, struct image *out, struct err *e);

#endif
