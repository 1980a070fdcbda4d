/* The desktop's privileged half: one-time viewer tokens, and the socket
 * over which berth-desktop (unprivileged) gets connected descriptors of
 * QEMU's VNC sockets, which are root's.
 *
 * Tokens live in memory only: a token is bound to a user and one of that
 * user's machines, must be redeemed within cfg.desktop_token_ttl_s seconds
 * (monotonic clock), and only once.  An owner holds at most 16 live ones:
 * a 17th evicts that owner's oldest (refused as token_expired).
 *
 * Redeeming a token makes a grant: the right to attach to that machine
 * for the viewer it let in, named by an id and used with a one-use handle
 * (256 bits); each attach spends its handle and answers the grant's next
 * one.  A grant ends when the bridge stops holding it (60 s without a hold
 * or an attach), or with desktop_revoke.  Grants are kept in
 * STATE/desktop-grants.json (root's, 0600) across hostd's restarts.
 *
 * STATE/desktop.sock (mode 0666; only root and berth-desktop's user
 * (desktop_user) are answered, by SO_PEERCRED) takes one request per connection, one JSON
 * line, and answers one JSON line:
 *   {"op":"redeem","token","user","machine"} -> {"user","machine","state",
 *       "grant","handle"}
 *       the token is spent whatever the outcome (a wrong user or machine
 *       burns it too); refusals: 403 invalid_token, token_used,
 *       token_expired, token_revoked, wrong_machine.
 *   {"op":"attach","user","machine","wake","handle"} -> {"state","woke_ms",
 *       "agent","handle"}: HANDLE, a grant's for USER/MACHINE, is spent;
 *       the answer's (an error's too, once HANDLE was good) is its next.
 *       403 invalid_handle without one, with an unknown, spent or expired
 *       one, or one for another user or machine (which burns it).  Then,
 *       in the same message (SCM_RIGHTS), a descriptor connected to
 *       the machine's VNC socket, then, when "agent" is true, one connected
 *       to its SPICE agent port's socket (the clipboard; a machine whose
 *       domain predates that port has none).  "wake" starts a stopped or
 *       suspended machine first; without it one that is not running is
 *       409 not_running.
 *   {"op":"hold","grants":[ID...]} -> {"cut":[ID...]}: the grants that
 *       still are are held 60 s more; "cut" lists those that are not
 *       (revoked, ended), whose viewers the bridge must drop.
 * Errors are {"error":{"status","code","message"}}.  One thread per
 * connection: a wake takes seconds and must not hold up the others. */
#ifndef BERTH_DESKTOP_H
#define BERTH_DESKTOP_H

#include <stdint.h>

#include "common/err.h"

struct hostd;
struct desktop;

/* Listen on PATH (replacing a stale socket).  NULL with E on failure. */
struct desktop *desktop_start(struct hostd *h, const char *path, struct err *e);
/* Stop listening and free D (requests in flight finish on their own
 * threads, which hold no reference to D's table); NULL is fine. */
void desktop_stop(struct desktop *d);

/* Mint a token for OWNER's machine NAME: TOKEN (TOKLEN >= 44 bytes) and
 * *EXPIRES (seconds since the epoch).  FAMILY: the id of the API token
 * that asks (0: a local user on the socket), which desktop_revoke names.
 * 404 when OWNER has no such machine, 503 "too_many_tokens" when the
 * table is full of live tokens (each owner holds at most 16 of them:
 * minting evicts OWNER's oldest beyond that). */
int desktop_mint(struct desktop *d, const char *owner, const char *name, int64_t family,
		 char *token, size_t toklen, int64_t *expires, struct err *e);

/* Void OWNER's live tokens and end their grants (the bridge then drops
 * those viewers within seconds, and their resume keys): those of machine
 * NAME (NULL: every machine) minted with API token FAMILY (0: however
 * minted).  *NTOKENS, *NGRANTS (either may be NULL): how many.  D may be
 * NULL (nothing to do).  Returns 0. */
int desktop_revoke(struct desktop *d, const char *owner, const char *name, int64_t family,
		   int *ntokens, int *ngrants);

#endif
