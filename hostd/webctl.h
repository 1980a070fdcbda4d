/* STATE/webctl.sock: what berth-web (unprivileged) asks hostd that is not
 * a token's request, and that takes descriptors: JSON lines, with
 * SCM_RIGHTS descriptors beside them.
 *
 * The socket is mode 0666, but only root and berth-web's user (web_user)
 * are answered, by SO_PEERCRED at accept: anyone else gets one error line
 * and the end of the connection, without a thread of hostd's.  One
 * request per connection: a JSON object on one line, {"op": NAME, ...},
 * with the descriptor(s) the op takes passed in the same message; the op's
 * handler answers, and may go on talking on the connection (the broker's
 * op waits there for the call's end).  Errors are {"error": {"status",
 * "code", "message"}}.  Ops are rows of one table (webctl.c, ops[]):
 *   "broker"  the credential broker's call: the guest's connection in, the
 *             secret's URL and header lines out (hostd/secrets.h,
 *             secrets_broker_call);
 *   "preview", "preview_login", "preview_watch"
 *             previews: a connection to a preview's guest port for a request
 *             it admits, a link redeemed for a cookie, the connections'
 *             reports and cuts (hostd/preview.h).
 * One thread per connection (at most WEBCTL_MAX_CONNS at once): an op may
 * wake a machine or wait for the end of a call.  The broker's calls hold
 * at most WEBCTL_MAX_CONNS less webctl_reserved_connections (berth.conf,
 * 64) of them, the rest being the previews' and the watch's; a machine's
 * and a user's calls have caps of their own (hostd/callcap.h). */
#ifndef BERTH_WEBCTL_H
#define BERTH_WEBCTL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"

struct hostd;
struct webctl;

#define WEBCTL_MAX_CONNS 512

/* Listen on PATH (replacing a stale socket).  NULL with E on failure. */
struct webctl *webctl_start(struct hostd *h, const char *path, struct err *e);
/* Stop listening and free W; connections in flight end on their own
 * threads (which hold no reference to W).  NULL is fine. */
void webctl_stop(struct webctl *w);

/* For the ops' handlers (which get W): hostd's context, and whether hostd
 * is stopping (an op that waits must end within a second of it). */
struct hostd *webctl_hostd(const struct webctl *w);
bool webctl_stopping(const struct webctl *w);
/* J (not consumed) as one line on connection FD,
 * with the NFDS (at most 2) descriptors FDS passed along.  0 or -1. */
int webctl_send(int fd, json_t *j, const int *fds, size_t nfds);
/* E as an error line on FD. */
void webctl_send_err(int fd, const struct err *e);
/* The next line on FD as a JSON object into *OUT (a new reference), within
 * TIMEOUT_MS.  0; 1 when the peer closed the connection (or a line was not
 * JSON); -1 on timeout. */
int webctl_read(int fd, int timeout_ms, json_t **out);

#endif
