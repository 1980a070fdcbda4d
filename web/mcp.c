#include "web/mcp.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/buf.h"
#include "common/hostapi.h"
#include "common/log.h"
#include "common/mcp.h"
#include "common/util.h"
#include "web/reply.h"
#include "web/request.h"
#include "web/wsexec.h"
#include "common/banned.h"

struct webmcp_req {
	struct MHD_Connection *c;
	char token[512];
	int client_fd;          /* the client's socket, watched for its going */
	int64_t deadline;       /* the body is owed by then (mono_ms) */
	struct buf body;
	size_t reserved;        /* of WEBMCP_BODY_TOTAL, held for the body */
	bool refused;           /* an answer was queued at the head */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static size_t body_total;       /* reserved by every request's body */
static bool stopping, tls_on;
static char domain[256];

void webmcp_configure(bool tls, const char *d)
{
	tls_on = tls;
	snprintf(domain, sizeof(domain), "%s", d ? d : "");
}

bool webmcp_route(const char *url)
{
	return !strcmp(url, "/mcp");
}

/* N more bytes of WEBMCP_BODY_TOTAL for R: true, or false when they are
 * not free. */
static bool reserve(struct webmcp_req *r, size_t n)
{
	bool ok;

	pthread_mutex_lock(&lock);
	ok = body_total + n <= WEBMCP_BODY_TOTAL;
	if (ok) {
		body_total += n;
		r->reserved += n;
	}
	pthread_mutex_unlock(&lock);
	return ok;
}

static bool is_stopping(void)
{
	bool s;

	pthread_mutex_lock(&lock);
	s = stopping;
	pthread_mutex_unlock(&lock);
	return s;
}

void webmcp_stop_all(void)
{
	pthread_mutex_lock(&lock);
	stopping = true;
	pthread_mutex_unlock(&lock);
}

/* The exec tool's mcp_host.gone: berth-web stops, or the client went.
 * Nothing is written to the client while the command runs, so its going
 * shows only as its FIN (POLLRDHUP: with TLS too, whose close_notify
 * comes before it) or a reset.  Unlike /v1's proxy, a client that shut
 * down only its sending side after its request counts as gone: an MCP
 * client has no reason to, and a command must not outlive its caller. */
static bool gone(void *data)
{
	struct webmcp_req *r = data;
	struct pollfd p = { .fd = r->client_fd, .events = POLLRDHUP };

	if (is_stopping())
		return true;
	return r->client_fd >= 0 && poll(&p, 1, 0) > 0 &&
	       (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* Whether the LEN bytes of NAME are an IP literal ([v6] or v4), localhost
 * or DOM ("": none). */
static bool host_name_ok(const char *name, size_t len, const char *dom)
{
	char s[256];
	struct in_addr a4;
	struct in6_addr a6;

	if (len == 0 || len >= sizeof(s))
		return false;
	if (name[0] == '[') {
		if (len < 3 || name[len - 1] != ']')
			return false;
		memcpy(s, name + 1, len - 2);
		s[len - 2] = '\0';
		return inet_pton(AF_INET6, s, &a6) == 1;
	}
	memcpy(s, name, len);
	s[len] = '\0';
	return inet_pton(AF_INET, s, &a4) == 1 || !strcasecmp(s, "localhost") ||
	       (dom[0] && !strcasecmp(s, dom));
}

bool webmcp_origin_ok(const char *origin, const char *host, bool tls, const char *dom)
{
	const char *scheme = tls ? "https://" : "http://", *auth, *port;
	if (!origin || !host || strncasecmp(origin, scheme, strlen(scheme)))
		return false;
	auth = origin + strlen(scheme);
	if (strcasecmp(auth, host) != 0)
		return false;
	/* host[:port], [v6][:port] */
	if (host[0] == '[') {
		const char *end = strchr(host, ']');
		if (!end)
			return false;
		port = end[1] == ':' ? end + 1 : end[1] ? NULL : end + 1;
	} else {
		port = strchr(host, ':');
		if (!port)
			port = host + strlen(host);
	}
	if (!port || (*port && strspn(port + 1, "0123456789") != strlen(port + 1)))
		return false;
	return host_name_ok(host, (size_t)(port - host), dom ? dom : "");
}

/* Queue STATUS with BODY (taken; NULL: no body) as JSON, never cached;
 * WWW_AUTH: a WWW-Authenticate header's value (NULL: none).  Allow: POST
 * on a 405. */
static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, json_t *body,
			     const char *www_auth)
{
	char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	struct MHD_Response *r;
	enum MHD_Result ret;

	json_decref(body);
	if (body && !text)
		return MHD_NO;
	r = text ? MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE)
		 : MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
	if (text)
		MHD_add_response_header(r, "Content-Type", "application/json");
	MHD_add_response_header(r, "Cache-Control", "no-store");
	MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
	if (www_auth)
		MHD_add_response_header(r, "WWW-Authenticate", www_auth);
	if (status == 405)
		MHD_add_response_header(r, "Allow", "POST");
	ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

/* berth's error body {"error": {"code", "message"}}, as web_error, with
 * the headers reply() adds. */
static enum MHD_Result refuse(struct webmcp_req *r, unsigned status, const char *code,
			      const char *msg, const char *www_auth)
{
	r->refused = true;
	return reply(r->c, status, json_pack("{s:{s:s, s:s}}", "error", "code", code,
					     "message", msg), www_auth);
}

static const char *header(struct MHD_Connection *c, const char *name)
{
	return MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
}

/* The request's head: its checks, in the order web/mcp.h says. */
static enum MHD_Result begin(struct webmcp_req *r, const char *method)
{
	struct MHD_Connection *c = r->c;
	const char *origin = header(c, "Origin"), *auth = header(c, "Authorization");
	const char *version = header(c, "MCP-Protocol-Version");
	const char *ctype = header(c, "Content-Type");
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	struct web_framing f;
	char why[256];

	r->client_fd = ci ? ci->connect_fd : -1;
	if (web_request_check(c, method, &f, why, sizeof(why)))
		return refuse(r, 400, "invalid_request", why, NULL);
	if (strcmp(method, "POST"))
		return refuse(r, 405, "method_not_allowed", "/mcp takes POST only: one JSON-RPC "
			      "message a request (no SSE stream, no session to end)", NULL);
	if (origin && !webmcp_origin_ok(origin, header(c, "Host"), tls_on, domain)) {
		log_warn("mcp: refused Origin %.200s (Host %.200s)", origin,
			 header(c, "Host") ? header(c, "Host") : "none");
		return refuse(r, 403, "forbidden_origin", "this Origin may not call /mcp: a page "
			      "must be served by this server itself", NULL);
	}
	if (!auth || strncasecmp(auth, "Bearer ", 7))
		return refuse(r, 401, "unauthorized", "an API token is needed: Authorization: "
			      "Bearer TOKEN (berth token create)", "Bearer");
	for (auth += 7; *auth == ' '; auth++)
		;
	if (!wsexec_token_ok(auth))
		return refuse(r, 400, "invalid_token", "the token has characters that no token "
			      "has", "Bearer error=\"invalid_request\"");
	snprintf(r->token, sizeof(r->token), "%s", auth);
	if (version && !mcp_version_known(version)) {
		snprintf(why, sizeof(why), "MCP-Protocol-Version '%.40s' is not one this server "
			 "speaks (2025-11-25, 2025-06-18, 2025-03-26, 2024-11-05)", version);
		return refuse(r, 400, "unsupported_protocol_version", why, NULL);
	}
	if (ctype && strncasecmp(ctype, "application/json", 16) != 0)
		return refuse(r, 415, "unsupported_media_type", "the body is a JSON-RPC message: "
			      "Content-Type: application/json", NULL);
	if (!f.has_body)
		return refuse(r, 400, "invalid_request", "the body is a JSON-RPC message, and "
			      "there is none", NULL);
	if (f.length > WEBMCP_BODY_MAX) {
		snprintf(why, sizeof(why), "a message is at most %u bytes", WEBMCP_BODY_MAX);
		return refuse(r, 413, "body_too_large", why, NULL);
	}
	if (is_stopping())
		return refuse(r, 503, "stopping", "berth-web is stopping", NULL);
	if (f.length && !reserve(r, f.length))
		return refuse(r, 503, "busy", "berth-web is reading too many MCP messages at "
			      "once: try again", NULL);
	r->deadline = mono_ms() + WEBMCP_BODY_S * 1000;
	return MHD_YES;
}

/* The body is in: hostd's word on the token, then the message's answer. */
static enum MHD_Result answer(struct webmcp_req *r, const char *web_sock)
{
	struct mcp_host h = { .sock = web_sock, .token = r->token, .gone = gone, .data = r };
	json_t *resp = NULL, *msg, *out;
	json_int_t code;
	json_error_t je;
	long status = 0;
	char err[512];

	/* (a cheap route that every token's user may call) */
	if (hostapi_call_as(web_sock, r->token, "GET", "/v1/quota", NULL, &status, &resp, err,
			    sizeof(err)) < 0) {
		log_warn("mcp: %s", err);
		return refuse(r, 502, "hostd_unreachable", err, NULL);
	}
	if (status == 401) {
		char msg401[256];
		snprintf(msg401, sizeof(msg401), "%s", hostapi_message(resp, "invalid token"));
		json_decref(resp);
		return refuse(r, 401, "invalid_token", msg401, "Bearer error=\"invalid_token\"");
	}
	if (status != 200) {
		char why[300];
		snprintf(why, sizeof(why), "berth-hostd answered %ld to the token's check: %s",
			 status, hostapi_message(resp, "no message"));
		json_decref(resp);
		return refuse(r, status == 403 ? 403 : 502, status == 403 ? "forbidden" :
			      "bad_gateway", why, NULL);
	}
	json_decref(resp);
	msg = json_loadb(r->body.data ? r->body.data : "", r->body.len, JSON_REJECT_DUPLICATES,
			 &je);
	if (!msg)
		return reply(r->c, 400, mcp_error(NULL, MCP_PARSE_ERROR, "parse error: not JSON"),
			     NULL);
	out = mcp_answer(&h, msg);
	json_decref(msg);
	if (!out)
		return reply(r->c, 202, NULL, NULL);
	/* A message that is no request (a batch, no method) is the client's
	 * error: 400, its JSON-RPC error as the body. */
	code = json_integer_value(json_object_get(json_object_get(out, "error"), "code"));
	return reply(r->c, code == MCP_INVALID_REQUEST ? 400 : 200, out, NULL);
}

enum MHD_Result webmcp_handle(struct MHD_Connection *c, const char *method,
			      const char *web_sock, const char *upload_data,
			      size_t *upload_data_size, struct webmcp_req **state)
{
	struct webmcp_req *r = *state;

	if (!r) {
		r = calloc(1, sizeof(*r));
		if (!r)
			abort();
		r->c = c;
		r->client_fd = -1;
		*state = r;
		return begin(r, method);
	}
	if (r->refused) {
		/* (libmicrohttpd closes the connection after a refusal at the
		 * head; nothing of a body is kept) */
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (*upload_data_size) {
		size_t n = *upload_data_size;
		/* A chunked body over the limit, or past its time: the
		 * connection is closed (an answer cannot overtake the body). */
		if (r->body.len + n > WEBMCP_BODY_MAX || mono_ms() > r->deadline ||
		    (r->body.len + n > r->reserved && !reserve(r, r->body.len + n - r->reserved)))
			return MHD_NO;
		buf_add(&r->body, upload_data, n);
		*upload_data_size = 0;
		return MHD_YES;
	}
	return answer(r, web_sock);
}

void webmcp_req_free(struct webmcp_req *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&lock);
	body_total -= r->reserved;
	pthread_mutex_unlock(&lock);
	buf_free(&r->body);
	free(r);
}
