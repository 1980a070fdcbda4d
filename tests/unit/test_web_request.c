/*
 * Unit tests of web/request.h, berth-web's checks of a client's request
 * head before it goes on (to hostd, a preview's guest, the broker's
 * upstream): the pure pieces (tokens, values, framing), and
 * web_request_check on heads as the libmicrohttpd this is built with
 * parses them (a daemon of the test's own on loopback, fed raw bytes):
 * that is where "X-Forwarded-For : 1.2.3.4" keeps its space and
 * "Transfer-Encoding: gzip" its body up to the close.
 */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/buf.h"
#include "web/request.h"
#include "tests/unit/tap.h"

static void test_tokens(void)
{
	check(web_token_ok("X-Forwarded-For", 15), "a header name is a token");
	check(web_token_ok("!#$%&'*+-.^_`|~09azAZ", 21), "every tchar is");
	check(!web_token_ok("X-Forwarded-For ", 16), "a name with a space after it is not");
	check(!web_token_ok("Foo\rX-Injected", 14), "nor one with a CR inside");
	check(!web_token_ok("", 0) && !web_token_ok(NULL, 0), "nor nothing");
	check(!web_token_ok("a\0b", 3), "nor one with a NUL");
	const char *no = "\"(),/:;<=>?@[\\]{} \t\x7f\x80";
	bool any = false;
	for (const char *p = no; *p; p++)
		any |= web_token_ok(p, 1);
	check(!any, "no delimiter, space, DEL or byte above 0x7f is a tchar");
	check(web_value_ok("a value\twith a tab", 18), "a value with a tab is fine");
	check(!web_value_ok("a\rb", 3) && !web_value_ok("a\nb", 3) && !web_value_ok("a\0b", 3),
	      "a value with CR, LF or NUL is not");
}

static int framing(const char *te, const char *cl, struct web_framing *f)
{
	char why[128];

	return web_framing_parse(te, cl, f, why, sizeof(why));
}

static void test_framing(void)
{
	struct web_framing f;

	check(framing(NULL, NULL, &f) == 0 && !f.has_body && !f.chunked && f.length == 0,
	      "no framing: no body");
	check(framing("chunked", NULL, &f) == 0 && f.has_body && f.chunked, "chunked");
	check(framing("ChUnKeD", NULL, &f) == 0 && f.chunked, "chunked in any case");
	check(framing(NULL, "5", &f) == 0 && f.has_body && !f.chunked && f.length == 5,
	      "Content-Length: 5");
	check(framing(NULL, "0", &f) == 0 && !f.has_body && f.length == 0, "Content-Length: 0");
	check(framing(NULL, "18446744073709551615", &f) == 400, "a length of 20 digits: 400");
	check(framing(NULL, "9223372036854775807", &f) == 0 && f.length == 9223372036854775807ULL,
	      "2^63 - 1 fits");
	check(framing(NULL, "9223372036854775808", &f) == 400, "2^63 does not: 400");
	check(framing("gzip", NULL, &f) == 400 && !f.has_body, "gzip: 400");
	check(framing("gzip, chunked", NULL, &f) == 400, "gzip, chunked: 400");
	check(framing("chunked, chunked", NULL, &f) == 400, "chunked twice in one value: 400");
	check(framing("identity", NULL, &f) == 400, "identity: 400");
	check(framing("", NULL, &f) == 400, "an empty Transfer-Encoding: 400");
	check(framing("chunked", "5", &f) == 400 && !f.has_body, "chunked with a length: 400");
	check(framing("gzip", "5", &f) == 400, "gzip with a length: 400");
	check(framing(NULL, "5x", &f) == 400 && framing(NULL, "-5", &f) == 400 &&
	      framing(NULL, "+5", &f) == 400 && framing(NULL, " 5", &f) == 400 &&
	      framing(NULL, "", &f) == 400 && framing(NULL, "5, 5", &f) == 400,
	      "a Content-Length that is not digits alone: 400");
}

/* ---- the check on libmicrohttpd's parse ----------------------------------- */

/* The daemon's answer to each request: 200 "ok BODY CHUNKED LENGTH", or
 * 400 "refused: WHY", queued at the head (libmicrohttpd then closes, as it
 * does for berth-web's refusals). */
static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
			       const char *method, const char *version, const char *data,
			       size_t *data_size, void **state)
{
	struct web_framing f;
	char why[256], text[400];
	struct MHD_Response *r;
	enum MHD_Result ret;
	int st;

	(void)cls;
	(void)url;
	(void)version;
	(void)data;
	(void)data_size;
	(void)state;
	st = web_request_check(c, method, &f, why, sizeof(why));
	if (st)
		snprintf(text, sizeof(text), "refused: %s", why);
	else
		snprintf(text, sizeof(text), "ok %d %d %llu", f.has_body, f.chunked,
			 (unsigned long long)f.length);
	r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_COPY);
	ret = MHD_queue_response(c, st ? 400u : 200u, r);
	MHD_destroy_response(r);
	return ret;
}

static unsigned short port;

/* REQ (LEN bytes) to the daemon; its whole answer (until it closes, 5 s at
 * most) into OUT. */
static void ask(const char *req, size_t len, struct buf *out)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	int s = socket(AF_INET, SOCK_STREAM, 0);
	char b[4096];

	buf_reset(out);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (s < 0 || connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		buf_adds(out, "no connection");
		goto out;
	}
	if (send(s, req, len, MSG_NOSIGNAL) != (ssize_t)len) {
		buf_adds(out, "not sent");
		goto out;
	}
	for (;;) {
		struct pollfd p = { .fd = s, .events = POLLIN };
		if (poll(&p, 1, 5000) <= 0)
			break;
		ssize_t n = read(s, b, sizeof(b));
		if (n <= 0)
			break;
		buf_add(out, b, (size_t)n);
	}
out:
	if (s >= 0)
		close(s);
}

/* The request head LINES (each "Name: value\r\n"), then BODY, to the
 * daemon: true when its answer starts with STATUS and holds WANT. */
static bool answers(const char *lines, const char *body, const char *status, const char *want)
{
	struct buf req = BUF_INIT, out = BUF_INIT;
	bool ok;

	buf_printf(&req, "POST /x HTTP/1.1\r\nHost: t\r\n%s\r\n%s", lines, body);
	ask(req.data, req.len, &out);
	ok = out.len && !strncmp(buf_str(&out), status, strlen(status)) &&
	     strstr(buf_str(&out), want);
	if (!ok)
		diag("the answer: %s", out.len ? buf_str(&out) : "(none)");
	buf_free(&req);
	buf_free(&out);
	return ok;
}

static void test_mhd(void)
{
	struct MHD_Daemon *d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD |
						MHD_USE_THREAD_PER_CONNECTION, 0, NULL, NULL,
						handler, NULL, MHD_OPTION_CONNECTION_TIMEOUT, 5u,
						MHD_OPTION_END);
	const union MHD_DaemonInfo *di = d ? MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT)
					   : NULL;

	if (!d || !di) {
		check(false, "a libmicrohttpd daemon on loopback");
		return;
	}
	port = di->port;
	const char *ok200 = "HTTP/1.1 200", *no400 = "HTTP/1.1 400";
	check(answers("Content-Length: 5\r\n", "hello", ok200, "ok 1 0 5"),
	      "Content-Length: 5 is a body of 5");
	check(answers("Transfer-Encoding: chunked\r\n", "5\r\nhello\r\n0\r\n\r\n", ok200,
		      "ok 1 1 0"), "chunked is chunked");
	check(answers("X-Forwarded-For: 1.2.3.4\r\nCookie: a=1\r\n", "", ok200, "ok 0 0 0"),
	      "plain headers, no body: passed");
	/* What the review reproduced against berth-web. */
	check(answers("Transfer-Encoding: gzip\r\nContent-Length: 5\r\n",
		      "helloGET /smuggled HTTP/1.1\r\nHost: t\r\n\r\n", no400,
		      "both Transfer-Encoding and Content-Length"),
	      "gzip with a Content-Length: 400");
	check(answers("Transfer-Encoding: gzip\r\n", "GET /smuggled HTTP/1.1\r\n\r\n", no400,
		      "must be \"chunked\""), "gzip alone: 400");
	check(answers("Transfer-Encoding: chunked\r\nContent-Length: 3\r\n", "0\r\n\r\n", no400,
		      "both"), "chunked with a Content-Length: 400");
	check(answers("Content-Length: 3\r\nContent-Length: 3\r\n", "abc", no400,
		      "Content-Length more than once"), "Content-Length twice: 400");
	check(answers("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
		      "0\r\n\r\n", no400, "Transfer-Encoding more than once"),
	      "Transfer-Encoding twice: 400");
	check(answers("X-Forwarded-For : 6.6.6.6\r\n", "", no400, "not a token"),
	      "X-Forwarded-For with a space before its colon: 400 (libmicrohttpd keeps the space "
	      "in the name)");
	check(answers("Cookie : berth_preview=x\r\n", "", no400, "not a token"),
	      "Cookie with a space before its colon: 400");
	check(answers("Content-Length : 30\r\n", "", no400, "not a token"),
	      "Content-Length with a space before its colon: 400");
	check(answers("Content-Length\t: 30\r\n", "", no400, "not a token"),
	      "and with a tab: 400");
	check(answers("Foo\rX-Injected: 1\r\n", "", no400, ""),
	      "a bare CR inside a name: 400");
	check(answers("X-A: a\rb\r\n", "", no400, ""), "a bare CR inside a value: 400");
	MHD_stop_daemon(d);
}

/* A writer into a buffer (CTX), failing once FAIL_AT bytes are in it. */
struct sink {
	struct buf b;
	size_t fail_at;
};

static int sink_write(void *ctx, const void *data, size_t len)
{
	struct sink *k = ctx;

	if (k->fail_at && k->b.len + len > k->fail_at)
		return -1;
	buf_add(&k->b, data, len);
	return 0;
}

static void test_body(void)
{
	struct sink k = { .b = BUF_INIT };
	uint64_t left = 0;

	check(web_body_pass(true, &left, "abc", 3, sink_write, &k) == 0 &&
	      web_body_pass(true, &left, "0123456789abcdefg", 17, sink_write, &k) == 0 &&
	      web_body_end(true, sink_write, &k) == 0 &&
	      !strcmp(buf_str(&k.b), "3\r\nabc\r\n11\r\n0123456789abcdefg\r\n0\r\n\r\n"),
	      "body: chunked, each piece a chunk (hex length), then the last chunk");
	buf_free(&k.b);
	left = 5;
	check(web_body_pass(false, &left, "abc", 3, sink_write, &k) == 0 && left == 2 &&
	      web_body_pass(false, &left, "defg", 4, sink_write, &k) == 0 && left == 0 &&
	      web_body_pass(false, &left, "h", 1, sink_write, &k) == 0 &&
	      web_body_end(false, sink_write, &k) == 0 && !strcmp(buf_str(&k.b), "abcde"),
	      "body: with a length, never past it, and no end of its own");
	buf_free(&k.b);
	k.fail_at = 4;
	check(web_body_pass(true, &left, "abc", 3, sink_write, &k) < 0,
	      "body: a write that fails says so");
	buf_free(&k.b);
}

int main(void)
{
	test_tokens();
	test_framing();
	test_body();
	test_mhd();
	return tap_done("test_web_request");
}
