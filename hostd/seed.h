/* The cloud-init NoCloud seed a machine reads at first boot: an ISO 9660
 * volume labelled "cidata" with meta-data and user-data.  It carries the
 * machine's hostname (and asks cloud-init to keep /etc/hosts naming it),
 * instance id, the gateway public key and the machine's own SSH host key
 * (cloud-init's ssh_keys), the way cloud images expect them. */
#ifndef BERTH_SEED_H
#define BERTH_SEED_H

#include "common/buf.h"
#include "common/err.h"

struct seed {
	const char *instance_id;   /* the machine UUID */
	const char *hostname;      /* the machine name (a DNS label) */
	const char *user;          /* the image's default user */
	const char *const *keys;   /* authorized public keys, NULL-terminated */
	/* The machine's SSH host key (ed25519): OpenSSH PEM text and its
	 * public line; both NULL for none. */
	const char *host_key_private, *host_key_public;
};

/* Render meta-data and user-data (appended to META and USER).  Values are
 * validated: a key with a newline or quote is refused (400), and so is a
 * host key that is not PEM text. */
int seed_render(const struct seed *s, struct buf *meta, struct buf *user,
		struct err *e);
/* Write DIR/seed.iso atomically (genisoimage from argv), and beside it
 * meta-data and user-data (mode 0600: user-data holds the host key's
 * private half).  0 or -1 with E. */
int seed_write(const struct seed *s, const char *dir, struct err *e);

#endif
