/* hostd's gateway key: the one SSH key every machine trusts (handed in
 * through its seed) and with which `berth exec` and the SSH gateway reach
 * machines.  Generated once (ed25519) and kept in STATE/keys/. */
#ifndef BERTH_GWKEY_H
#define BERTH_GWKEY_H

#include "common/err.h"

struct gateway_key {
	char *private_pem;  /* OpenSSH private key text */
	char *public_line;  /* "ssh-ed25519 AAAA... berth-gateway" */
};

/* Load the key from DIR (gateway, gateway.pub), generating it on first use.
 * Fills K (free with gwkey_free). */
int gwkey_load_or_create(const char *dir, struct gateway_key *k, struct err *e);
void gwkey_free(struct gateway_key *k);

#endif
