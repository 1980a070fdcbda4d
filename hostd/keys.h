/* hostd's gateway key: the one SSH key every machine trusts (handed in
 * through its seed) and with which `berth exec` and the SSH gateway reach
 * machines.  Generated once (ed25519) and kept in STATE/keys/. */
#ifndef BERTH_KEYS_H
#define BERTH_KEYS_H

#include "common/err.h"

struct gateway_key {
	char *private_pem;  /* OpenSSH private key text */
	char *public_line;  /* "ssh-ed25519 AAAA... berth-gateway" */
};

/* Load the key from DIR (gateway, gateway.pub), generating it on first use.
 * Fills K (free with keys_free). */
int keys_load_or_create(const char *dir, struct gateway_key *k, struct err *e);
void keys_free(struct gateway_key *k);

#endif
