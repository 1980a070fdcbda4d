/* Users' SSH public keys: parsing an OpenSSH public key line
 * ("TYPE BASE64 [COMMENT]", as in id_ed25519.pub) into a struct userkey
 * (hostd/db.h), checked with libssh, with the fingerprint ssh-keygen -l
 * prints.  Pure logic: no database, no I/O. */
#ifndef BERTH_USERKEYS_H
#define BERTH_USERKEYS_H

#include <jansson.h>

#include "common/err.h"
#include "hostd/db.h"

/* Accepted types: ssh-ed25519, ssh-rsa (2048 to 16384 bits),
 * ecdsa-sha2-nistp256/384/521, sk-ssh-ed25519@openssh.com and
 * sk-ecdsa-sha2-nistp256@openssh.com. */

/* Parse LINE into K's type, blob (canonical base64), comment and
 * fingerprint; id, owner and created are cleared.  Leading and trailing
 * blanks (and a final newline) are ignored.  400 "invalid_key" naming the
 * cause: an options prefix (authorized_keys style), an unknown or refused
 * type, base64 that does not decode, key data of another type than the
 * line says or that libssh refuses, an RSA key under 2048 bits, a comment
 * that is not printable UTF-8 or longer than USERKEY_COMMENT_CHARS. */
int userkey_parse(const char *line, struct userkey *k, struct err *e);

/* {"id", "type", "fingerprint", "comment", "created"}: a new reference. */
json_t *userkey_json(const struct userkey *k);

#endif
