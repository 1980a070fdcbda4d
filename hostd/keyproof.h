/* Proof of possession for users' SSH keys.  A public key is public
 * (github.com/USER.keys), so registering one proves nothing: whoever
 * registered a key first would own it, and its holder's `ssh NAME@host`
 * would land in their machine.  `berth key add` therefore asks for a
 * challenge, signs it with the key (`ssh-keygen -Y sign`: the key file or
 * the agent), and hostd verifies the signature (`ssh-keygen -Y verify`,
 * run as nobody) before it adds the key.
 *
 * A challenge is bound to the user who asked for it, lives
 * KEYPROOF_TTL_S seconds and is spent by its first use, whatever the
 * outcome.  In memory only: a restart of hostd voids them (ask again). */
#ifndef BERTH_KEYPROOF_H
#define BERTH_KEYPROOF_H

#include <stddef.h>

#include "common/err.h"
#include "hostd/db.h"

/* The namespace of the signature (ssh-keygen -Y sign -n), so a signature
 * made for something else (git commits, files) is not a proof here. */
#define KEYPROOF_NAMESPACE "berth-key-add@berth"
#define KEYPROOF_TTL_S 300
/* "berth key add for USER: " and 64 hex digits. */
#define KEYPROOF_CHALLENGE_MAX 160
/* An armored SSHSIG of an RSA-16384 key is under 6 KiB. */
#define KEYPROOF_SIGNATURE_MAX 16384

struct keyproof;

struct keyproof *keyproof_new(void);
void keyproof_free(struct keyproof *kp);

/* A new challenge for OWNER to sign with key K, into OUT
 * (KEYPROOF_CHALLENGE_MAX bytes).  An owner holds at most 8 live ones: a
 * 9th replaces their oldest. */
int keyproof_challenge(struct keyproof *kp, const char *owner, const struct userkey *k,
		       char *out, size_t len, struct err *e);

/* Whether SIGNATURE (armored, as ssh-keygen -Y sign writes it) is K's
 * signature of CHALLENGE, which OWNER got from keyproof_challenge for K.
 * The challenge is spent.  0; 400 "invalid_challenge" for a challenge
 * that is not OWNER's for K, has expired or was used; keyproof_refuse's error for a
 * signature that is not K's of it. */
int keyproof_check(struct keyproof *kp, const char *owner, const char *challenge,
		   const struct userkey *k, const char *signature, struct err *e);

/* 400 "invalid_key": the signature does not prove its holder signed.  The
 * one answer too for a key that someone else registered, so that nothing
 * tells a caller who uses which key. */
int keyproof_refuse(const struct userkey *k, struct err *e);

#endif
