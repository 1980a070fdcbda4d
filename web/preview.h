/* berth-web's previews: a request whose Host is PORT-NAME-USER.DOMAIN
 * (DOMAIN: preview_domain, from hostd's settings) goes to port PORT of
 * USER's machine NAME, through a connection hostd makes and hands over
 * (STATE/webctl.sock, hostd/preview.h): berth-web's user reaches no guest
 * port itself, and hostd decides who gets in.
 *
 *   - Every request on such a host goes to the guest (/v1 included), but
 *     /__berth/login?token=SECRET, which spends a preview's one-time link
 *     for a cookie of that host alone (HttpOnly, SameSite=Lax, Path=/;
 *     over HTTPS Secure and named __Host-berth_preview, which no other
 *     host can set; over HTTP berth_preview) and redirects to /.
 *   - A request hostd refuses gets berth-web's page (a browser: Accept
 *     text/html) or JSON error: no such preview, login needed, nothing
 *     listening.  A sleeping machine is woken: a browser gets a "waking…"
 *     page that reloads itself, any other client's request is held until
 *     the machine answers.
 *   - HTTP/1.1 to the guest: the client's request head made anew (its
 *     headers but the hop-by-hop ones, berth's cookie taken out of Cookie,
 *     X-Forwarded-For, -Proto and -Host set by berth-web, the client's own
 *     dropped), the body streamed as it arrives; the answer parsed by
 *     web/upstream.h (untrusted: bounded, strict) and streamed back, its
 *     hop-by-hop headers and any Set-Cookie of berth's cookie dropped.
 *   - The connection to the guest is kept for the client connection's next
 *     request when the answer's framing allows it (keep-alive both ways);
 *     a next request for another preview or with other cookies gets a new
 *     one from hostd.
 *   - WebSocket (any Upgrade): the guest's 101 is passed on through
 *     libmicrohttpd's upgrade, and a thread of berth-web's splices the
 *     bytes both ways until either side ends.
 *   - A watch thread reports the connections to hostd every second (which
 *     moved bytes: activity for the idle policy) and closes those hostd
 *     says no longer stand (the preview removed or made private, the
 *     cookie expired, the machine deleted).
 *
 * Functions run on the client connection's thread (thread per connection)
 * unless said otherwise. */
#ifndef BERTH_WEB_PREVIEW_H
#define BERTH_WEB_PREVIEW_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/buf.h"

struct preview_req;

/* Before preview_start: the previews' domain (NULL or "": localhost). */
void preview_configure(const char *domain);
/* Start: hostd's webctl socket in STATE, TLS (the cookie's name and
 * Secure, X-Forwarded-Proto), the watch thread.  Raises the open-file
 * limit (each connection to a guest is a second descriptor).  Call after
 * becoming berth-web's user.  0, or -1 (logged). */
int preview_start(const char *state, bool tls);

/* At berth-web's stop, before libmicrohttpd's: every guest connection is
 * shut down, so that upgraded ones (WebSockets) end and their threads give
 * their sockets back to libmicrohttpd, waited for up to WAIT_MS. */
void preview_stop(int wait_ms);

/* Whether connection C's request is for a preview's host (its Host is a
 * name under the domain): preview_handle answers it. */
bool preview_host(struct MHD_Connection *c);
/* libmicrohttpd's access handler for such a request, as proxy_handle
 * (*STATE NULL at its head; each piece of its body; once more at its end).
 * TARGET: the request target as received; PEER: the client's address. */
enum MHD_Result preview_handle(struct MHD_Connection *c, const char *method, const char *target,
			       const char *peer, const char *upload_data,
			       size_t *upload_data_size, struct preview_req **state);
/* The request is over (libmicrohttpd's completion callback).  NULL is
 * fine. */
void preview_done(struct preview_req *r);
/* libmicrohttpd's MHD_OPTION_NOTIFY_CONNECTION callback: a client
 * connection's state (the guest connection kept for its next request),
 * made at its start and freed, with what it keeps, at its end. */
void preview_notify(void *cls, struct MHD_Connection *c, void **socket_context,
		    enum MHD_ConnectionNotificationCode toe);

/* Pure pieces, for the unit tests. */

/* The label of HOST ("8080-m-alice.localhost:8080") under DOMAIN, in lower
 * case, into LABEL (LABELLEN bytes): true when HOST is a name under DOMAIN
 * (the label may still name no preview; "" when it is over 63 characters
 * or LABELLEN - 1, which no preview's is), false otherwise (DOMAIN itself,
 * another name, an address). */
bool preview_label_of(const char *host, const char *domain, char *label, size_t labellen);
/* Cookie header value HEADER: the values of cookie NAME (at most MAX, each
 * at most 64 characters; longer ones dropped) into VALS, the number
 * returned; the other cookies, "a=1; b=2", appended to REST (NULL:
 * dropped).  Cookies named DROP (NULL: none) are dropped too. */
size_t preview_cookies(const char *header, const char *name, const char *drop,
		       char vals[][65], size_t max, struct buf *rest);
/* Whether Set-Cookie value V sets a cookie named NAME or DROP (whatever
 * its case): one the guest may not set. */
bool preview_setcookie_ours(const char *v, const char *name, const char *drop);

#endif
