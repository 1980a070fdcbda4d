/* Previews: a program listening on port P in OWNER's machine NAME, reached
 * through berth-web at http(s)://P-NAME-OWNER.DOMAIN/ (preview_domain in
 * berth.conf; "localhost" by default, whose names browsers and curl
 * resolve to loopback).
 *
 * hostd keeps the previews (db.h, struct db_preview) and decides every
 * access; berth-web only carries bytes.  A preview is public (anyone) or
 * private: then a browser gets in with a cookie, which a one-time link
 * (PREVIEW_LINK_TTL_S, one use) sets for that host alone; the cookie's
 * secret is valid PREVIEW_COOKIE_TTL_S, and both are kept as sha256 only.
 * Removing the preview, or its machine, voids its links and cookies.
 *
 * berth-web asks on STATE/webctl.sock (hostd/webctl.h), root's and
 * web_user's alone; each op answers one JSON line:
 *   {"op":"preview","label","cookies":[SECRET...],"wake":"wait"|"start"}
 *       -> {"grant","owner","machine","port","public","woke_ms"} with,
 *       passed beside it, a TCP socket hostd connected to the machine's
 *       port: only for a request the preview admits (public, or one of
 *       COOKIES is a valid key of it), and only then is a sleeping
 *       machine woken.  "wait": the wake is waited for (a client's
 *       request is held; {"waiting":true} goes first, once admitted, so
 *       that berth-web stops waiting when its client goes, and a
 *       closed connection is the end of it for berth-web, the wake goes
 *       on); "start": a wake is started and 503 "waking"
 *       answered at once (a browser's page then reloads).  Refusals: 400
 *       "invalid_label" (no PORT-NAME-OWNER), "invalid_port"; 404
 *       "no_preview"; 403 "login_needed"; 409 "preview_needs_routed";
 *       502 "port_closed" (nothing answers on the port), "wake_failed".
 *   {"op":"preview_login","label","token"} -> {"cookie","max_age",...}:
 *       the link's TOKEN is spent and a cookie's secret made; 403
 *       "invalid_link" for one unknown, used, expired or another
 *       preview's.
 *   {"op":"preview_watch"} -> {"watching":true}, then berth-web reports
 *       its connections every second, {"live":[GRANT...],"active":[GRANT
 *       ...]}, and each report is answered {"cut":[GRANT...]}: the live
 *       ones whose access no longer stands (the preview removed or made
 *       private, the cookie expired, the machine deleted; a grant this
 *       hostd did not give, after a restart) or whose machine no longer
 *       runs (suspended, stopped: the client's next request, on a new
 *       connection, wakes it), which berth-web closes.
 *       The machines of the active ones (bytes moved since the last
 *       report) are active for the idle policy.
 *
 * Connections go from hostd (root) to the guest's address: the tap's
 * output chain lets only root reach a guest's ports beyond SSH
 * (hostd/net_rules.c), so berth-web's user (and every other user) reaches
 * no guest port itself.  network = user has no path to a guest's ports
 * but QEMU's forwards: previews are refused there (409
 * "preview_needs_routed"). */
#ifndef BERTH_PREVIEW_H
#define BERTH_PREVIEW_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"
#include "hostd/config.h"

struct hostd;
struct webctl;

/* How long a link may wait for its one use, and how long the cookie it
 * sets lets a browser in. */
#define PREVIEW_LINK_TTL_S (15 * 60)
#define PREVIEW_COOKIE_TTL_S (7 * 24 * 3600)
/* The path on a preview's host that redeems a link (?token=SECRET):
 * berth-web's, never the guest's (web/preview.c has the same). */
#define PREVIEW_LOGIN_PATH "/__berth/login"

/* The in-memory part (connections handed out, wakes in progress), into
 * H->previews.  0, or -1 with E. */
int previews_start(struct hostd *h, struct err *e);
/* Free it, waiting a few seconds for wakes in progress.  NULL is fine. */
void previews_stop(struct hostd *h);

/* S as a port, 1 to 65535 in decimal.  0, or -1 with E: 400
 * "invalid_port". */
int preview_port_parse(const char *s, int *port, struct err *e);
/* The host name label of OWNER's machine NAME's PORT, "PORT-NAME-OWNER",
 * into OUT (64 bytes at least).  0, or -1 with E: 409
 * "owner_not_a_host_name" for an owner that is no DNS label (upper case,
 * '_', '.'), 409 "label_too_long" past 63 characters. */
int preview_label(const char *owner, const char *name, int port, char *out, size_t outlen,
		  struct err *e);
/* The URL of LABEL with PATH ("/", PREVIEW_LOGIN_PATH "?token=..."): the
 * scheme and port of http_listen (the port left out when it is the
 * scheme's own), the host LABEL.preview_domain.  Pure. */
void preview_url(const struct config *cfg, const char *label, const char *path, char *out,
		 size_t outlen);

/* Make OWNER's preview of machine NAME's PORT, or set whether it is
 * PUBLIC_.  The answer: {"machine","port","public","label","url",
 * "created"} and, for a private one, "link" (a one-time link that lets a
 * browser in: printed once, kept as a hash) and "link_expires".  NULL
 * with E: 404 no such machine, 409 "preview_needs_routed", preview_label's,
 * 409 "label_taken". */
json_t *preview_put(struct hostd *h, const char *owner, const char *name, int port,
		    bool public_, struct err *e);
/* {"previews": [...]} of OWNER (NULL: everyone's, with "owner"). */
json_t *preview_list(struct hostd *h, const char *owner, struct err *e);
/* Remove OWNER's preview of NAME's PORT: its links and cookies go, and
 * berth-web cuts its connections within a second or two.  404 no such
 * machine, 404 "no_preview". */
int preview_remove(struct hostd *h, const char *owner, const char *name, int port,
		   struct err *e);

/* The ops of STATE/webctl.sock (rows of hostd/webctl.c's table), as above:
 * each answers on CFD and takes no descriptor (FD is -1). */
void preview_op_connect(struct webctl *w, int cfd, json_t *req, int fd);
void preview_op_login(struct webctl *w, int cfd, json_t *req, int fd);
void preview_op_watch(struct webctl *w, int cfd, json_t *req, int fd);

#endif
