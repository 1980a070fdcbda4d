/* hostd's JSON API over HTTP/1.1 on UNIX sockets (libmicrohttpd, one
 * thread per connection): hostd.sock for local users, web.sock for the
 * bearer tokens berth-web passes on (hostd listens on no TCP port).
 * Routes and bodies are documented in docs/api.md.
 *
 * Every route is a row of one table (api_routes): method, path, who may
 * call it and the handler.  Who calls is decided once per request
 * (caller(): the peer's uid on the socket, the token's user over HTTP),
 * and whether they may is decided only by api_authorize, which reads the
 * row; handlers parse, call the modules and encode. */
#ifndef BERTH_API_H
#define BERTH_API_H

#include <jansson.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "hostd/hostd.h"

struct api;

/* Who calls: the classes of caller a route admits (bits). */
enum api_caller {
	CALLER_ROOT = 1 << 0,     /* uid 0 on the socket (may act for a user
				     with X-Berth-User) */
	CALLER_USER = 1 << 1,     /* any other local user on the socket, as
				     themselves */
	CALLER_TOKEN = 1 << 2,    /* a bearer token's user, over HTTP (berth-web's
				     web.sock) */
	CALLER_SSHGW = 1 << 3,    /* berth-sshgw's user (sshgw_user) on the
				     socket */
	CALLER_DESKTOP = 1 << 4,  /* berth-desktop's user (desktop_user) on
				     the socket */
};
#define CALLER_GATEWAYS (CALLER_SSHGW | CALLER_DESKTOP)

struct call;
struct reply;

/* A request body's sink (an upload route's): FEED with each piece as it
 * arrives; ABORT when the client went before the end.  The handler, called
 * at the end, finishes it (the call's "upload"). */
struct upload {
	void *ctx;
	void (*feed)(void *ctx, const void *data, size_t len);
	void (*abort)(void *ctx);
};

/* One route.  PATH's segments are literals or {param}; {name} is a machine
 * name (checked: 400 "invalid_name").  A caller whose class is not in WHO
 * gets 403 with REFUSAL (or a generic message); over HTTP a SOCKET_ONLY
 * route does not exist (404).  QUERY_ALL: the row matches only requests
 * with ?all=1 (a wider scope than the same path's other row).  UPLOAD: the
 * body streams, as it arrives, into the sink this makes when the head is
 * in (an image's import, a file being written) instead of being buffered;
 * it returns false with *EARLY set to refuse the request.
 * CATCH_ALL: no route of its own but the 404 for what no row above matched
 * on that path (a better message); not in docs/api.md. */
struct api_route {
	const char *method;
	const char *path;
	unsigned who;
	bool socket_only;
	const char *refusal;
	bool query_all;
	bool (*upload)(struct call *c, struct upload *u, struct reply *early);
	bool catch_all;
	struct reply (*fn)(struct call *c);
};

/* The table, N rows (for the unit tests and the docs check). */
const struct api_route *api_routes(size_t *n);
/* May a caller of class WHO (over HTTP when HTTP) use route R?  0, or -1
 * with E: 404 for a socket-only route over HTTP, 403 with the reason
 * otherwise.  URL (the request's; NULL: R's pattern) is for the
 * messages. */
int api_authorize(const struct api_route *r, enum api_caller who, bool http,
		  const char *url, struct err *e);
/* The route for METHOD and PATH (no query string; ALL: the query has
 * all=1), with its parameters' values into ARGS[0..3] (pointers into
 * SCRATCH, SCRATCH_LEN bytes).  NULL with E: 404 for no route, 400 for an
 * invalid machine name, 414 for a path too long. */
const struct api_route *api_route_find(const char *method, const char *path, bool all,
				       char *scratch, size_t scratch_len, const char *args[4],
				       struct err *e);

/* Listen on the UNIX socket PATH (refusing when another hostd answers
 * there).  WEB: berth-web's socket (STATE/web.sock): answered only for
 * web_user and root, and every caller is the user of the bearer token of
 * the request (CALLER_TOKEN: never root's privileges, no socket-only
 * route); else hostd.sock, every local user's, each as themselves.  NULL
 * with E set. */
struct api *api_start(struct hostd *h, const char *path, bool web, struct err *e);
void api_stop(struct api *a);

/* Request bodies (exposed for the unit tests).  api_parse_body parses BODY
 * as a JSON object ({} when empty) and refuses keys not in the
 * NULL-terminated ALLOWED (400 "unknown_field"), malformed JSON (400
 * "invalid_json", with line and column) and non-objects.  Returns a new
 * reference or NULL with E set. */
json_t *api_parse_body(const struct buf *body, const char *const *allowed,
		       struct err *e);
/* Size field KEY of J: a positive JSON integer (bytes) or a string such as
 * "512M" (a bare number in a string counts in UNIT bytes).  *OUT = 0 when
 * absent; 400 "invalid_KEY" when malformed. */
int api_get_size(json_t *j, const char *key, uint64_t unit, uint64_t *out,
		 struct err *e);
/* GET /v1/usage's query values SINCE_S and STEP_S (NULL when absent) at
 * time NOW: *SINCE (0 when absent) and *STEP (0: no buckets).  400
 * "invalid_since" for a since that is not a decimal time from 0 to NOW,
 * "invalid_step" for a step that is not 60 s to 31 days or gives over
 * 1000 buckets. */
int api_usage_range(const char *since_s, const char *step_s, int64_t now, int64_t *since,
		    int64_t *step, struct err *e);

#endif
