/* E2B's control plane, the subset its SDKs use (e2b 2.51.0 and the older
 * unversioned paths of 2.45), served by berth-web on the host api.DOMAIN
 * (DOMAIN: berth.conf's preview_domain).  docs/api.md "E2B compatibility"
 * says what maps to what; docs/research/e2b-sdk.md what the SDK sends.
 *
 * An E2B API key is "e2b_" + the 64 hex digits of a berth API token
 * "berth_HEX" (hostd/tokens.h): each request is made to hostd over
 * web.sock with that token, as its user U, as web/proxy.c does for /v1;
 * berth-web decides nothing of who calls.  A sandbox is U's machine NAME,
 * its id "NAME-U" (the preview label's form without the port): an id
 * that does not end in "-U" is no sandbox of U's (404, as another user's
 * is: no existence oracle).  Sandboxes made here are named "e2b-" and 8
 * random hex digits.  Its E2B timeout is the machine's deadline, autoPause
 * its expire_action (hostd/attrs.h); metadata and envVars its metadata
 * and env.
 *
 * Answers are JSON; errors {"code": STATUS, "message": ...} with the
 * status the SDK maps to its exceptions: 401 AuthenticationError, 404
 * (with that body) SandboxNotFoundError or kill() false, 409 pause()
 * false, 429 with Retry-After (a quota) RateLimitError, 400 bad input. */
#ifndef BERTH_WEB_E2B_H
#define BERTH_WEB_E2B_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

struct e2b_req;

/* The preview domain (NULL or "": "localhost" stays). */
void e2b_configure(const char *domain);
/* Whether C's request is for api.DOMAIN (any port, any case). */
bool e2b_host(struct MHD_Connection *c);
/* The request, as libmicrohttpd's handler gets it: METHOD and TARGET
 * (the path with its query, as sent); the body gathered (at most 64 KiB)
 * then answered, acting through hostd's SOCK (web.sock).  *RP: the
 * request's state, NULL at first (e2b_done frees it). */
enum MHD_Result e2b_handle(struct MHD_Connection *c, const char *sock, const char *method,
			   const char *target, const char *upload_data,
			   size_t *upload_data_size, struct e2b_req **rp);
void e2b_done(struct e2b_req *r);

#endif
