/* The desktop's privileged half: one-time viewer tokens, and the socket
 * over which berth-desktop (unprivileged) gets connected descriptors of
 * QEMU's VNC sockets, which are root's.
 *
 * Tokens live in memory only: a token is bound to a user and one of that
 * user's machines, must be redeemed within cfg.desktop_token_ttl_s seconds
 * (monotonic clock), and only once.  An owner holds at most 16 live ones:
 * a 17th evicts that owner's oldest (refused as token_expired).
 *
 * STATE/desktop.sock (mode 0666; only root and berth-desktop's user
 * (desktop_user) are answered, by SO_PEERCRED) takes one request per connection, one JSON
 * line, and answers one JSON line:
 *   {"op":"redeem","token","user","machine"} -> {"user","machine","state"}
 *       the token is spent whatever the outcome (a wrong user or machine
 *       burns it too); refusals: 403 invalid_token, token_used,
 *       token_expired, wrong_machine.
 *   {"op":"attach","user","machine","wake"} -> {"state","woke_ms","agent"}
 *       and, in the same message (SCM_RIGHTS), a descriptor connected to
 *       the machine's VNC socket, then, when "agent" is true, one connected
 *       to its SPICE agent port's socket (the clipboard; a machine whose
 *       domain predates that port has none).  "wake" starts a stopped or
 *       suspended machine first; without it one that is not running is
 *       409 not_running.
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
 * *EXPIRES (seconds since the epoch).  404 when OWNER has no such machine,
 * 503 "too_many_tokens" when the table is full of live tokens (each owner
 * holds at most 16 of them: minting evicts OWNER's oldest beyond that). */
int desktop_mint(struct desktop *d, const char *owner, const char *name, char *token,
		 size_t toklen, int64_t *expires, struct err *e);

#endif
