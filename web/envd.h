/* E2B's data plane (what E2B's in-sandbox daemon, envd, answers), served by
 * berth-web on the host side: the e2b SDK's process and filesystem calls,
 * /files and /health, each turned into requests to hostd (STATE/web.sock)
 * as the user of the caller's token, onto a berth machine's exec and files
 * routes (over its SSH and SFTP).  docs/api.md "E2B compatibility: the data
 * plane" says what is supported; docs/architecture.md why host side.
 *
 * A request is envd's when its Host is 49983-ID.DOMAIN (DOMAIN:
 * preview_domain), or, on any other host that is not a preview's, when it
 * carries E2b-Sandbox-Id: ID (the SDK's E2B_SANDBOX_URL, one endpoint for
 * every sandbox, as E2B's own sandbox.DOMAIN routes).  ID is NAME-OWNER:
 * the machine NAME of user OWNER, who must be the token's user.
 *
 *   - Auth: X-Access-Token: berth_HEX (or e2b_HEX, the same token) on every
 *     request; none or a wrong one is unauthenticated (401).  Another
 *     user's sandbox is not found, as a missing one.
 *   - The user a command runs as: Authorization: Basic base64("USER:")
 *     (/files: ?username=USER), default the image's login user.
 *   - Connect protocol, JSON codec, HTTP/1.1: unary calls application/json;
 *     server streams application/connect+json envelopes, chunked, an
 *     end-stream envelope always (errors: 200 + its error), a keepalive
 *     message after Keepalive-Ping-Interval seconds of silence.
 *
 * Runs on the client connection's thread (thread per connection); a stream
 * has a thread of its own that reads hostd. */
#ifndef BERTH_WEB_ENVD_H
#define BERTH_WEB_ENVD_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

struct envd_req;

/* Before any request: the previews' DOMAIN (NULL or "": localhost) and
 * hostd's socket for berth-web, WEB_SOCK (copied). */
void envd_configure(const char *domain, const char *web_sock);

/* Whether C's request is envd's (above): a new request state for it, or
 * NULL (not envd's). */
struct envd_req *envd_route(struct MHD_Connection *c);

/* libmicrohttpd's access handler for R's request (each call: the head,
 * each piece of its body, once more at its end).  URL without the query. */
enum MHD_Result envd_handle(struct envd_req *r, struct MHD_Connection *c, const char *method,
			    const char *url, const char *upload_data, size_t *upload_data_size);

/* The request is over (libmicrohttpd's completion callback); NULL is fine. */
void envd_done(struct envd_req *r);

/* Pure pieces, for the unit tests and the fuzz harness. */

/* The sandbox id of HOST when it is 49983-ID.DOMAIN, into ID: true, or
 * false. */
bool envd_host_id(const char *host, const char *domain, char *id, size_t idlen);
/* The token of an X-Access-Token value V ("berth_" or "e2b_" and 64 lower
 * hex digits) as berth_HEX into OUT (71 bytes at least): true, or false. */
bool envd_token_of(const char *v, char *out, size_t outlen);

#endif
