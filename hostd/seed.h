/* The cloud-init NoCloud seed a machine reads at first boot: an ISO 9660
 * volume labelled "cidata" with meta-data and user-data.  It carries the
 * machine's hostname, instance id and the gateway public key, the way
 * cloud images expect them. */
#ifndef BERTH_SEED_H
#define BERTH_SEED_H

#include "common/buf.h"
#include "common/err.h"

struct seed {
	const char *instance_id;   /* the machine UUID */
	const char *hostname;      /* the machine name (a DNS label) */
	const char *user;          /* the image's default user */
	const char *const *keys;   /* authorized public keys, NULL-terminated */
};

/* Render meta-data and user-data (appended to META and USER).  Values are
 * validated: a key with a newline or quote is refused (400). */
int seed_render(const struct seed *s, struct buf *meta, struct buf *user,
		struct err *e);
/* Write DIR/seed.iso atomically (genisoimage from argv).  0 or -1 with E. */
int seed_write(const struct seed *s, const char *dir, struct err *e);

#endif
