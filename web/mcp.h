/* POST /mcp: berth's MCP server (common/mcp.h) over MCP's Streamable HTTP
 * transport (revision 2025-06-18), stateless: each POST carries one
 * JSON-RPC message and gets its answer as one application/json body (202
 * and no body for a notification or a client's answer); no SSE stream (GET
 * is 405), no session id.  The tools act as the user of the request's
 * bearer token: they call hostd on STATE/web.sock with it, as /v1 does.
 *
 * Before a message is read: 405 for a method other than POST (Allow:
 * POST), 403 `forbidden_origin` for an Origin that is not this server's
 * own (DNS rebinding: below), 401 `unauthorized` without a token
 * (WWW-Authenticate: Bearer), 400 `invalid_token` for one with characters
 * no token has, 400 `unsupported_protocol_version` for an
 * MCP-Protocol-Version this server does not speak, 415 for a Content-Type
 * other than application/json, 413 for a body over WEBMCP_BODY_MAX, 503
 * `busy` while the bodies being read hold WEBMCP_BODY_TOTAL.  Then hostd
 * checks the token (401 `invalid_token`, WWW-Authenticate: Bearer
 * error="invalid_token", for one it does not know), and the message is
 * answered: HTTP 400 with JSON-RPC -32700 for a body that is not JSON,
 * -32600 for a batch, as `berth mcp` answers them.
 *
 * Origin: a browser sends it with every POST; clients that are no browser
 * (Claude Code, Codex, the SDK under Node) do not, and are let in.  An
 * Origin is let in when it is SCHEME://HOST of the request itself (https
 * with TLS) and that host is an IP address, "localhost" or the preview
 * domain: a page that rebinds its own name to this server has its own
 * name in both Origin and Host, which is none of these.
 *
 * A tool call runs on its connection's thread (berth-web's one thread a
 * connection) for as long as hostd takes; a command (exec) counts in
 * hostd's max_execs like any POST .../exec, and its connection in
 * berth-web's per-address share.  It ends (hostd kills the command) when
 * the client goes or berth-web stops (webmcp_stop_all). */
#ifndef BERTH_WEB_MCP_H
#define BERTH_WEB_MCP_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

/* A request's body, at most (write_file's content: a file of a few MiB). */
#define WEBMCP_BODY_MAX (8u << 20)
/* Every request's body being read, at most, together. */
#define WEBMCP_BODY_TOTAL (64u << 20)
/* A body must have come within this long of its request's head. */
#define WEBMCP_BODY_S 60

struct webmcp_req;

/* Set once at the start: whether berth-web serves TLS, and the preview
 * domain (an Origin whose host it is, is let in; NULL: none). */
void webmcp_configure(bool tls, const char *domain);

/* True when URL (the path, without its query) is /mcp. */
bool webmcp_route(const char *url);

/* libmicrohttpd's access handler for a /mcp request: METHOD, the body as
 * it arrives, *STATE the request's (NULL at first; webmcp_req_free it at
 * the request's end).  WEB_SOCK: hostd's socket for berth-web. */
enum MHD_Result webmcp_handle(struct MHD_Connection *c, const char *method,
			      const char *web_sock, const char *upload_data,
			      size_t *upload_data_size, struct webmcp_req **state);

/* Free R (NULL: nothing). */
void webmcp_req_free(struct webmcp_req *r);

/* berth-web stops: a running command ends within about a second, and a
 * new request is 503 `stopping`.  Before libmicrohttpd's stop, which
 * waits for the connections' threads. */
void webmcp_stop_all(void);

/* Whether ORIGIN (a header's value) may call: its scheme is https when
 * TLS, else http, its authority is HOST (the Host header, any case), and
 * its host is an IP literal, localhost, or DOMAIN (NULL: none).  For the
 * unit test. */
bool webmcp_origin_ok(const char *origin, const char *host, bool tls, const char *domain);

#endif
