/*
 * Unit tests of berth-web's previews without a network: the reader of a
 * guest's answer (web/upstream.h: heads, framing, chunked bodies cut at
 * every byte, every refusal), and the pure pieces of web/preview.h (a
 * preview's host name, berth's cookie taken out of Cookie, a guest's
 * Set-Cookie of it refused).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "web/preview.h"
#include "web/upstream.h"
#include "tests/unit/tap.h"

static ssize_t parse(const char *s, bool head, struct upstream_head *h, char *why)
{
	return upstream_head_parse(s, strlen(s), head, h, why, 128);
}

static void test_heads(void)
{
	struct upstream_head h;
	char why[128];
	const char *ok1 = "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 12\r\n"
			  "Set-Cookie: a=1\r\nSet-Cookie: b=2\r\n\r\nhello world!";

	check(parse(ok1, false, &h, why) == (ssize_t)(strlen(ok1) - 12) && h.status == 200 &&
	      h.minor == 1 && h.n == 4 && h.framing == UPSTREAM_LENGTH && h.length == 12 &&
	      h.keep_alive && !strcmp(upstream_head_get(&h, "content-type"), "text/html") &&
	      !strcmp(h.value[3], "b=2"), "a head with Content-Length: its fields, kept alive");
	upstream_head_free(&h);
	check(parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n", false, &h, why) > 0 &&
	      h.framing == UPSTREAM_CHUNKED && h.keep_alive, "chunked");
	upstream_head_free(&h);
	check(parse("HTTP/1.1 200 OK\r\nServer: x\r\n\r\n", false, &h, why) > 0 &&
	      h.framing == UPSTREAM_CLOSE && !h.keep_alive, "no length: until the close");
	upstream_head_free(&h);
	check(parse("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\n", false,
		    &h, why) > 0 && h.framing == UPSTREAM_LENGTH && !h.keep_alive,
	      "Connection: close is not kept");
	upstream_head_free(&h);
	check(parse("HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\n", false, &h, why) > 0 &&
	      !h.keep_alive && h.minor == 0, "HTTP/1.0 is not kept");
	upstream_head_free(&h);
	check(parse("HTTP/1.0 200 OK\r\nContent-Length: 5\r\nConnection: Keep-Alive\r\n\r\n",
		    false, &h, why) > 0 && h.keep_alive, "HTTP/1.0 with keep-alive is");
	upstream_head_free(&h);
	check(parse("HTTP/1.1 204 No Content\r\n\r\n", false, &h, why) > 0 &&
	      h.framing == UPSTREAM_NONE && h.keep_alive, "204: no body");
	upstream_head_free(&h);
	check(parse("HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n", true, &h, why) > 0 &&
	      h.framing == UPSTREAM_NONE && h.length == 99, "HEAD: no body, its length kept");
	upstream_head_free(&h);
	check(parse("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
		    "Connection: Upgrade\r\nSec-WebSocket-Accept: x\r\n\r\n", false, &h, why) > 0 &&
	      h.status == 101 && upstream_head_has_token(&h, "connection", "upgrade") &&
	      upstream_hop_by_hop(&h, "Upgrade") && !upstream_hop_by_hop(&h, "Sec-WebSocket-Accept"),
	      "101: Upgrade is hop-by-hop, the accept key is not");
	upstream_head_free(&h);
	check(parse("HTTP/1.1 200\r\nX: y\r\n\r\n", false, &h, why) > 0 && h.status == 200,
	      "a status line without a reason");
	upstream_head_free(&h);
	check(parse("HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Secret\r\nX-Secret: 1\r\n"
		    "Content-Length: 0\r\n\r\n", false, &h, why) > 0 &&
	      upstream_hop_by_hop(&h, "x-secret") && !upstream_hop_by_hop(&h, "Content-Type"),
	      "a header Connection names is hop-by-hop");
	upstream_head_free(&h);
	check(parse("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", false,
		    &h, why) > 0 && h.length == 5, "two equal Content-Lengths");
	upstream_head_free(&h);
	check(parse("HTTP/1.1 200 OK\r\nX:  spaced  \r\n\r\n", false, &h, why) > 0 &&
	      !strcmp(h.value[0], "spaced"), "values trimmed");
	upstream_head_free(&h);

	/* Not all there yet. */
	check(parse("", false, &h, why) == 0, "nothing yet: 0");
	check(parse("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n", false, &h, why) == 0,
	      "no blank line yet: 0");
	check(parse("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r", false, &h, why) == 0,
	      "half the blank line: 0");

	static const struct {
		const char *head, *what;
	} bad[] = {
		{ "HTTP/1.1 200 OK\nContent-Length: 5\r\n\r\n", "a bare LF" },
		{ "HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n", "obsolete line folding" },
		{ "HTTP/1.1 200 OK\r\nX : a\r\n\r\n", "whitespace before the colon" },
		{ "HTTP/1.1 200 OK\r\n: a\r\n\r\n", "an empty name" },
		{ "HTTP/1.1 200 OK\r\nX(y): a\r\n\r\n", "a name that is no token" },
		{ "HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n", "a CR in a value" },
		{ "HTTP/1.1 200 OK\r\nX: a\x01" "b\r\n\r\n", "a control character in a value" },
		{ "HTTP/2 200 OK\r\n\r\n", "HTTP/2" },
		{ "HTTP/1.1 20 OK\r\n\r\n", "a two-digit status" },
		{ "HTTP/1.1 600 OK\r\n\r\n", "status 600" },
		{ "HTTP/1.1 200OK\r\n\r\n", "no space after the status" },
		{ "http/1.1 200 OK\r\n\r\n", "lower-case protocol" },
		{ "\r\nHTTP/1.1 200 OK\r\n\r\n", "an empty line first" },
		{ "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
		  "both framings" },
		{ "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", "another coding" },
		{ "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
		  "two Transfer-Encodings" },
		{ "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
		  "Content-Lengths that disagree" },
		{ "HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n", "a Content-Length list" },
		{ "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "a negative Content-Length" },
		{ "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
		  "a Content-Length past 64 bits" },
		{ NULL, NULL },
	};
	for (int i = 0; bad[i].head; i++) {
		check(parse(bad[i].head, false, &h, why) < 0 && why[0], "refused: %s (%s)",
		      bad[i].what, why);
		upstream_head_free(&h);
	}
	check(upstream_head_parse("HTTP/1.1 200 OK\r\nX: a\0b\r\n\r\n", 26, false, &h, why, 128) < 0,
	      "refused: a NUL byte");

	/* The bounds. */
	struct buf b = BUF_INIT;
	buf_adds(&b, "HTTP/1.1 200 OK\r\n");
	for (int i = 0; i < UPSTREAM_HEADERS_MAX; i++)
		buf_printf(&b, "X-%d: v\r\n", i);
	buf_adds(&b, "\r\n");
	check(upstream_head_parse(b.data, b.len, false, &h, why, 128) > 0 &&
	      h.n == UPSTREAM_HEADERS_MAX, "%d header lines pass", UPSTREAM_HEADERS_MAX);
	upstream_head_free(&h);
	buf_reset(&b);
	buf_adds(&b, "HTTP/1.1 200 OK\r\n");
	for (int i = 0; i <= UPSTREAM_HEADERS_MAX; i++)
		buf_printf(&b, "X-%d: v\r\n", i);
	buf_adds(&b, "\r\n");
	check(upstream_head_parse(b.data, b.len, false, &h, why, 128) < 0,
	      "%d are refused (%s)", UPSTREAM_HEADERS_MAX + 1, why);
	buf_reset(&b);
	buf_adds(&b, "HTTP/1.1 200 OK\r\nX: ");
	for (int i = 0; i < UPSTREAM_LINE_MAX; i++)
		buf_adds(&b, "a");
	check(upstream_head_parse(b.data, b.len, false, &h, why, 128) < 0,
	      "a line over %d bytes is refused before its end (%s)", UPSTREAM_LINE_MAX, why);
	buf_reset(&b);
	buf_adds(&b, "HTTP/1.1 200 OK\r\n");
	while (b.len < UPSTREAM_HEAD_MAX)
		buf_adds(&b, "X: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
	check(upstream_head_parse(b.data, b.len, false, &h, why, 128) < 0,
	      "a head over %d bytes is refused before its end (%s)", UPSTREAM_HEAD_MAX, why);
	buf_free(&b);
}

/* Decode BODY (a chunked body and what follows it) fed in pieces of STEP
 * bytes: the data into OUT; the decoder's last result. */
static int dechunk(const char *body, size_t len, size_t step, struct buf *out, size_t *consumed,
		   char *why)
{
	struct upstream_head h = { .framing = UPSTREAM_CHUNKED };
	struct upstream_body b;
	size_t pos = 0;
	int rc = 0;

	upstream_body_init(&b, &h);
	buf_reset(out);
	while (pos < len) {
		size_t n = len - pos < step ? len - pos : step, used;
		const char *data;
		size_t dlen;
		rc = upstream_body_step(&b, body + pos, n, &used, &data, &dlen, why, 128);
		if (rc < 0)
			return rc;
		if (dlen)
			buf_add(out, data, dlen);
		pos += used;
		if (rc == 1)
			break;
	}
	*consumed = pos;
	return rc;
}

static void test_chunked(void)
{
	static const char body[] = "5\r\nhello\r\n1;ext=\"x y\"\r\n \r\nA \r\n0123456789\r\n"
				   "0\r\nTrailer-One: 1\r\nTrailer-Two: 2\r\n\r\nNEXT";
	struct buf out = BUF_INIT;
	size_t used, len = sizeof(body) - 1;
	char why[128];
	bool all = true;

	for (size_t step = 1; step <= len; step++) {
		int rc = dechunk(body, len, step, &out, &used, why);
		if (rc != 1 || strcmp(buf_str(&out), "hello 0123456789") != 0 || used != len - 4) {
			all = false;
			diag("step %zu: rc %d, '%s', used %zu", step, rc, buf_str(&out), used);
		}
	}
	check(all, "a chunked body with extensions and trailers decodes the same in pieces of "
	      "any size, and what follows it is left");

	static const struct {
		const char *body, *what;
	} bad[] = {
		{ "g\r\n", "a size that is no hex" },
		{ "\r\n", "no size" },
		{ "5\nhello\r\n0\r\n\r\n", "a size line ending in a bare LF" },
		{ "5\r\nhelloX\r\n0\r\n\r\n", "data not followed by CRLF" },
		{ "11111111111111111\r\n", "17 hex digits" },
		{ "5;\x01\r\n", "a control character in an extension" },
		{ "0\r\nX: 1\n\r\n", "a trailer ending in a bare LF" },
		{ NULL, NULL },
	};
	for (int i = 0; bad[i].body; i++)
		check(dechunk(bad[i].body, strlen(bad[i].body), 3, &out, &used, why) < 0,
		      "refused: %s (%s)", bad[i].what, why);
	check(dechunk("ffffffffffffffff\r\nabc", 21, 64, &out, &used, why) == 0 &&
	      !strcmp(buf_str(&out), "abc"), "16 hex digits: a size of 2^64-1 is taken, data flows");

	struct buf big = BUF_INIT;
	for (int i = 0; i < UPSTREAM_LINE_MAX + 10; i++)
		buf_adds(&big, i == 0 ? "1;" : "x");
	check(dechunk(big.data, big.len, 100, &out, &used, why) < 0,
	      "a size line over %d bytes is refused (%s)", UPSTREAM_LINE_MAX, why);
	buf_reset(&big);
	buf_adds(&big, "0\r\n");
	for (int i = 0; i <= UPSTREAM_HEADERS_MAX; i++)
		buf_printf(&big, "T%d: v\r\n", i);
	check(dechunk(big.data, big.len, 100, &out, &used, why) < 0,
	      "over %d trailer lines are refused (%s)", UPSTREAM_HEADERS_MAX, why);
	buf_free(&big);

	/* A chunked body cut short, and one that ended. */
	struct upstream_head h = { .framing = UPSTREAM_CHUNKED };
	struct upstream_body b;
	const char *data;
	size_t dlen;
	upstream_body_init(&b, &h);
	upstream_body_step(&b, "5\r\nhel", 6, &used, &data, &dlen, why, 128);
	check(upstream_body_eof(&b) < 0, "a close in the middle of a chunk: cut short");
	buf_free(&out);
}

static void test_lengths(void)
{
	struct upstream_head h = { .framing = UPSTREAM_LENGTH, .length = 5 };
	struct upstream_body b;
	const char *data;
	size_t used, dlen;
	char why[128];

	upstream_body_init(&b, &h);
	check(upstream_body_step(&b, "hel", 3, &used, &data, &dlen, why, 128) == 0 && dlen == 3 &&
	      upstream_body_eof(&b) < 0, "Content-Length: 3 of 5, a close now is cut short");
	check(upstream_body_step(&b, "loEXTRA", 7, &used, &data, &dlen, why, 128) == 1 &&
	      dlen == 2 && used == 2 && upstream_body_eof(&b) == 1,
	      "the last 2, and bytes after it not consumed");
	h.framing = UPSTREAM_CLOSE;
	upstream_body_init(&b, &h);
	check(upstream_body_step(&b, "abc", 3, &used, &data, &dlen, why, 128) == 0 && dlen == 3 &&
	      upstream_body_eof(&b) == 1, "close-delimited: everything, ended by the close");
	h.framing = UPSTREAM_LENGTH;
	h.length = 0;
	upstream_body_init(&b, &h);
	check(b.done && upstream_body_step(&b, "x", 1, &used, &data, &dlen, why, 128) == 1 &&
	      used == 0, "Content-Length: 0 is done at once");
}

static void test_hosts(void)
{
	char l[64];

	check(preview_label_of("8080-m-alice.localhost:8080", "localhost", l, sizeof(l)) &&
	      !strcmp(l, "8080-m-alice"), "8080-m-alice.localhost:8080");
	check(preview_label_of("8080-M-Alice.LOCALHOST", "localhost", l, sizeof(l)) &&
	      !strcmp(l, "8080-m-alice"), "case-blind, in lower case");
	check(preview_label_of("8080-m-alice.localhost.", "localhost", l, sizeof(l)) &&
	      !strcmp(l, "8080-m-alice"), "the absolute form");
	check(preview_label_of("a.b.preview.example.com", "preview.example.com", l, sizeof(l)) &&
	      !strcmp(l, "a.b"), "two labels deep is still the domain's (hostd refuses it)");
	check(!preview_label_of("localhost:8080", "localhost", l, sizeof(l)), "the domain itself "
	      "is not a preview");
	check(!preview_label_of("127.0.0.1:8080", "localhost", l, sizeof(l)), "an address is not");
	check(!preview_label_of("[::1]:8080", "localhost", l, sizeof(l)), "an IPv6 address is not");
	check(!preview_label_of("evillocalhost", "localhost", l, sizeof(l)), "a name ending in "
	      "the domain without a dot is not");
	check(!preview_label_of("x.example.com", "localhost", l, sizeof(l)), "another domain");
	check(!preview_label_of(NULL, "localhost", l, sizeof(l)), "no Host");
	/* A machine name of 53 characters makes a label of 63 with root's. */
	char name[54], host[128], want[64];
	memset(name, 'n', 53);
	name[53] = '\0';
	snprintf(want, sizeof(want), "8080-%s-root", name);
	snprintf(host, sizeof(host), "%s.localhost", want);
	check(strlen(want) == 63 && preview_label_of(host, "localhost", l, sizeof(l)) &&
	      !strcmp(l, want), "a label of 63 characters");
	snprintf(host, sizeof(host), "%sxyz.localhost:8080", want);
	check(preview_label_of(host, "localhost", l, sizeof(l)) && l[0] == '\0',
	      "a label of 66: a preview's host, with no label (not the 63-character one it "
	      "starts with)");
	snprintf(host, sizeof(host), "%sx.localhost", want);
	check(preview_label_of(host, "localhost", l, sizeof(l)) && l[0] == '\0',
	      "a label of 64: none either");
}

static void test_cookies(void)
{
	char v[4][65];
	struct buf rest = BUF_INIT;
	size_t n;

	n = preview_cookies("a=1; berth_preview=abc;b=2;  berth_preview = def ; __Host-berth_preview=x",
			    "berth_preview", "__Host-berth_preview", v, 4, &rest);
	check(n == 2 && !strcmp(v[0], "abc") && !strcmp(v[1], "def") &&
	      !strcmp(buf_str(&rest), "a=1; b=2"),
	      "berth's cookies out (both names), the others passed on: '%s'", buf_str(&rest));
	buf_reset(&rest);
	n = preview_cookies("Berth_preview=1; berth_previewx=2", "berth_preview", NULL, v, 4, &rest);
	check(n == 0 && !strcmp(buf_str(&rest), "Berth_preview=1; berth_previewx=2"),
	      "names are exact: others' cookies of like names stay");
	buf_reset(&rest);
	n = preview_cookies("berth_preview=1; berth_preview=2; berth_preview=3", "berth_preview",
			    NULL, v, 2, &rest);
	check(n == 2 && rest.len == 0, "at most MAX values, the rest dropped, not passed on");
	buf_reset(&rest);
	char longv[200];
	snprintf(longv, sizeof(longv), "berth_preview=%0100d; x=1", 0);
	n = preview_cookies(longv, "berth_preview", NULL, v, 4, &rest);
	check(n == 0 && !strcmp(buf_str(&rest), "x=1"), "a value too long for a secret dropped");
	buf_free(&rest);

	check(preview_setcookie_ours("berth_preview=evil; Path=/", "berth_preview", NULL),
	      "a guest's Set-Cookie of berth's cookie is caught");
	check(preview_setcookie_ours(" BERTH_PREVIEW =x", "berth_preview", NULL),
	      "whatever its case and spaces");
	check(preview_setcookie_ours("__Host-berth_preview=x; Secure; Path=/", "berth_preview",
				     "__Host-berth_preview"), "the other scheme's name too");
	check(!preview_setcookie_ours("session=x; Path=/", "berth_preview", "__Host-berth_preview"),
	      "the app's own cookies pass");
}

int main(void)
{
	test_heads();
	test_chunked();
	test_lengths();
	test_hosts();
	test_cookies();
	return tap_done("test_web_preview");
}
