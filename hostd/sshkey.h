/* SSH key pairs hostd makes: each machine's host key, given to it in its
 * seed and pinned (hostd/machine.c). */
#ifndef BERTH_SSHKEY_H
#define BERTH_SSHKEY_H

#include <stddef.h>

#include "common/err.h"

/* A new ed25519 key pair: *PRIV the private key as OpenSSH PEM text, *PUB
 * the public key line "ssh-ed25519 BASE64" (both malloc'd; the caller frees
 * them).  0, or -1 with E and both NULL. */
int sshkey_ed25519(char **priv, char **pub, struct err *e);

#endif
