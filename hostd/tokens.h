/* API tokens: what hostd accepts on berth-web's socket (web.sock) as
 * `Authorization: Bearer SECRET`.  A token acts as the user it was made
 * for, never with root's privileges.  The secret is TOKEN_PREFIX and 64
 * hex digits (32 random bytes); the database keeps only its sha256. */
#ifndef BERTH_TOKENS_H
#define BERTH_TOKENS_H

#include <jansson.h>
#include <stddef.h>

#include "hostd/hostd.h"

#define TOKEN_PREFIX "berth_"
#define TOKEN_SECRET_LEN (sizeof(TOKEN_PREFIX) - 1 + 64)
#define TOKEN_MAX_PER_USER 100

/* A new token for OWNER named NAME (NULL or "": "token"): *T is filled and
 * SECRET (at least TOKEN_SECRET_LEN + 1 bytes) gets the secret, which
 * exists nowhere else.  400 "invalid_token_name" for a name that is not
 * 1 to 63 printable characters; 409 "too_many_tokens". */
int token_create(struct hostd *h, const char *owner, const char *name, struct token *t,
		 char *secret, size_t secretlen, struct err *e);
/* The token whose secret is SECRET, into *T; records its use (at most
 * once a minute, to spare the disk).  401 "invalid_token" for a malformed,
 * unknown or revoked secret. */
int token_check(struct hostd *h, const char *secret, struct token *t, struct err *e);
/* {"id", "name", "created", "last_used" (null: never)}: a new reference. */
json_t *token_json(const struct token *t);

#endif
