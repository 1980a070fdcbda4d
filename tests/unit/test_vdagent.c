/*
 * Unit tests for desktop/vdagent.c, the host side of the SPICE agent
 * protocol the bridge speaks for the clipboard: the messages it sends
 * (chunked at 2048 bytes, as spice-vdagentd requires), the clipboard flow
 * both ways, input split at every byte, and a guest that sends nonsense
 * (bad ports, sizes, protocol, truncated and oversized messages): an error
 * or a skipped message, never a crash (run it under `make asan` too).
 * Also the Latin-1 <-> UTF-8 conversions.
 *
 * Built by the Makefile as build/default/tests/test_vdagent.
 */
#include "desktop/vdagent.h"

#include <stdint.h>
#include <string.h>

#include "tests/unit/tap.h"
#include "common/banned.h"

static void put32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
	p[2] = (unsigned char)(v >> 16);
	p[3] = (unsigned char)(v >> 24);
}

static uint32_t get32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

/* One guest message (as spice-vdagentd writes it: one chunk) into B. */
static void guest_msg(struct buf *b, uint32_t port, uint32_t type, const void *data,
		      uint32_t size)
{
	unsigned char h[28] = { 0 };

	put32(h, port);
	put32(h + 4, 20 + size);
	put32(h + 8, 1);
	put32(h + 12, type);
	put32(h + 24, size);
	buf_add(b, h, sizeof(h));
	if (size)
		buf_add(b, data, size);
}

static void guest_u32s(struct buf *b, uint32_t type, uint32_t v0, uint32_t v1, int n)
{
	unsigned char d[8];

	put32(d, v0);
	put32(d + 4, v1);
	guest_msg(b, 1, type, d, (uint32_t)(4 * n));
}

/* The messages in the host's output OUT, de-chunked: their types in
 * TYPES (at most MAX), the data of the last one in LAST.  -1 when a chunk
 * is over 2048 bytes or the framing is off. */
static int host_msgs(const struct buf *out, uint32_t *types, int max, struct buf *last)
{
	struct buf stream = BUF_INIT;
	size_t i = 0;
	int n = 0, rc = 0;

	while (i < out->len) {
		if (out->len - i < 8)
			return -1;
		const unsigned char *h = (const unsigned char *)out->data + i;
		uint32_t size = get32(h + 4);
		if (get32(h) != 1 || size > 2048 || size == 0 || out->len - i - 8 < size)
			return -1;
		buf_add(&stream, h + 8, size);
		i += 8 + size;
	}
	i = 0;
	while (i < stream.len) {
		const unsigned char *m = (const unsigned char *)stream.data + i;
		if (stream.len - i < 20 || get32(m) != 1) {
			rc = -1;
			break;
		}
		uint32_t size = get32(m + 16);
		if (stream.len - i - 20 < size) {
			rc = -1;
			break;
		}
		if (n < max)
			types[n] = get32(m + 4);
		n++;
		buf_reset(last);
		buf_add(last, m + 20, size);
		i += 20 + size;
	}
	buf_free(&stream);
	return rc < 0 ? -1 : n;
}

static void test_hello(void)
{
	struct vdagent *a = vdagent_new();
	struct buf out = BUF_INIT, last = BUF_INIT;
	uint32_t t[4];

	vdagent_hello(a, &out);
	check(host_msgs(&out, t, 4, &last) == 1 && t[0] == 6 && last.len == 8 &&
	      get32((unsigned char *)last.data) == 1 &&
	      get32((unsigned char *)last.data + 4) == (1u << 5),
	      "hello: capabilities (by demand), asking for the guest's");
	buf_free(&out);
	buf_free(&last);
	vdagent_free(a);
}

/* Host to guest: offer, then the guest announces, is sent a grab,
 * requests, and gets the text. */
static void test_host_to_guest(void)
{
	struct vdagent *a = vdagent_new();
	struct buf in = BUF_INIT, out = BUF_INIT, last = BUF_INIT;
	char *text = NULL, err[128];
	size_t tl;
	uint32_t t[8];

	check(vdagent_offer(a, "h\xc3\xa9llo", 6, &out) == 0 && out.len == 0,
	      "offer before the guest announced: nothing sent yet");
	guest_u32s(&in, 6, 1, 1u << 5, 2);
	check(vdagent_feed(a, in.data, in.len, &out, &text, &tl, err, sizeof(err)) == 0 &&
	      !text, "guest announce: taken");
	check(vdagent_ready(a), "guest announce: ready");
	check(host_msgs(&out, t, 8, &last) == 2 && t[0] == 6 && t[1] == 7 &&
	      get32((unsigned char *)last.data) == 1,
	      "guest announce (request): answered with caps, then the pending grab (utf8)");
	buf_reset(&in);
	buf_reset(&out);
	guest_u32s(&in, 8, 1, 0, 1);
	vdagent_feed(a, in.data, in.len, &out, &text, &tl, err, sizeof(err));
	check(host_msgs(&out, t, 8, &last) == 1 && t[0] == 4 && last.len == 10 &&
	      get32((unsigned char *)last.data) == 1 && !memcmp(last.data + 4, "h\xc3\xa9llo", 6),
	      "guest request: the text, as utf8");
	/* A request for something else: an empty answer. */
	buf_reset(&in);
	buf_reset(&out);
	guest_u32s(&in, 8, 2, 0, 1);
	vdagent_feed(a, in.data, in.len, &out, &text, &tl, err, sizeof(err));
	check(host_msgs(&out, t, 8, &last) == 1 && t[0] == 4 && last.len == 4 &&
	      get32((unsigned char *)last.data) == 0, "request for a png: answered empty");
	/* The agent restarts: announces again, is answered, not grabbed (its
	 * own grab at its start would cross ours). */
	buf_reset(&in);
	buf_reset(&out);
	guest_u32s(&in, 6, 1, 1u << 5, 2);
	vdagent_feed(a, in.data, in.len, &out, &text, &tl, err, sizeof(err));
	check(host_msgs(&out, t, 8, &last) == 1 && t[0] == 6,
	      "a restarted agent is answered, not grabbed again");
	size_t hl;
	const char *ht = vdagent_host_text(a, &hl);
	check(ht && hl == 6 && !memcmp(ht, "h\xc3\xa9llo", 6), "the host's text is the clipboard");
	/* The guest grabs: the host's text is not the clipboard any more. */
	buf_reset(&in);
	buf_reset(&out);
	guest_u32s(&in, 7, 1, 0, 1);
	vdagent_feed(a, in.data, in.len, &out, &text, &tl, err, sizeof(err));
	check(!vdagent_host_text(a, &hl) && hl == 0, "after the guest's grab the host has no text");
	buf_reset(&in);
	buf_reset(&out);
	guest_u32s(&in, 8, 1, 0, 1);
	vdagent_feed(a, in.data, in.len, &out, &text, &tl, err, sizeof(err));
	check(host_msgs(&out, t, 8, &last) == 1 && t[0] == 4 && last.len == 4 &&
	      get32((unsigned char *)last.data) == 0, "and answers the guest's request empty");
	/* A big text: chunks of at most 2048 bytes, whole at the other end. */
	size_t big = 100000;
	char *b = malloc(big);
	for (size_t i = 0; i < big; i++)
		b[i] = (char)('a' + i % 26);
	buf_reset(&out);
	check(vdagent_offer(a, b, big, &out) == 0 && host_msgs(&out, t, 8, &last) == 1 &&
	      t[0] == 7, "a new offer: a grab");
	buf_reset(&in);
	buf_reset(&out);
	guest_u32s(&in, 8, 1, 0, 1);
	vdagent_feed(a, in.data, in.len, &out, &text, &tl, err, sizeof(err));
	check(host_msgs(&out, t, 8, &last) == 1 && last.len == big + 4 &&
	      !memcmp(last.data + 4, b, big), "100 kB: chunked at 2048 bytes, whole");
	check(vdagent_offer(a, b, VDAGENT_TEXT_MAX + 1, &out) == -1, "over 1 MiB: refused");
	free(b);
	buf_free(&in);
	buf_free(&out);
	buf_free(&last);
	vdagent_free(a);
}

/* Guest to host: a grab is answered with a request; the clipboard message
 * is the text; fed one byte at a time too. */
static void test_guest_to_host(void)
{
	struct buf in = BUF_INIT, out = BUF_INIT, last = BUF_INIT;
	char *text = NULL, err[128];
	size_t tl = 0;
	uint32_t t[8];
	unsigned char clip[4 + 10];

	guest_u32s(&in, 6, 0, 1u << 5, 2);
	guest_u32s(&in, 7, 3, 1, 2);  /* a grab: png, utf8 */
	put32(clip, 1);
	memcpy(clip + 4, "gu\xc3\xa9st \xe2\x82\xac", 10);
	guest_msg(&in, 1, 4, clip, sizeof(clip));
	for (int bytewise = 0; bytewise < 2; bytewise++) {
		struct vdagent *a = vdagent_new();
		char *got = NULL;
		size_t gotlen = 0;
		int rc = 0;
		buf_reset(&out);
		if (bytewise) {
			for (size_t i = 0; i < in.len && rc == 0; i++) {
				rc = vdagent_feed(a, in.data + i, 1, &out, &text, &tl, err, sizeof(err));
				if (text) {
					free(got);
					got = text;
					gotlen = tl;
				}
			}
		} else {
			rc = vdagent_feed(a, in.data, in.len, &out, &text, &tl, err, sizeof(err));
			got = text;
			gotlen = tl;
		}
		check(rc == 0 && got && gotlen == 10 && !memcmp(got, "gu\xc3\xa9st \xe2\x82\xac", 11),
		      "guest clipboard arrives (%s)", bytewise ? "a byte at a time" : "at once");
		check(host_msgs(&out, t, 8, &last) == 1 && t[0] == 8 &&
		      get32((unsigned char *)last.data) == 1,
		      "the grab is answered by a request for utf8 (%s)",
		      bytewise ? "a byte at a time" : "at once");
		free(got);
		vdagent_free(a);
	}
	buf_free(&in);
	buf_free(&out);
	buf_free(&last);
}

/* Nonsense from the guest, IN, followed by a good clipboard message "ok":
 * RESYNC: the stream is out of step, picked up again at the good message,
 * and the agent is asked to announce itself again; else the bad message
 * is ignored.  Either way the good one counts. */
static void bad(const char *what, const struct buf *in0, bool resync)
{
	struct vdagent *a = vdagent_new();
	struct buf in = BUF_INIT, out = BUF_INIT, last = BUF_INIT;
	char *text = NULL, err[128] = "";
	size_t tl;
	unsigned char ok[6];
	uint32_t t[4];

	put32(ok, 1);
	memcpy(ok + 4, "ok", 2);
	buf_add(&in, in0->data, in0->len);
	guest_msg(&in, 1, 4, ok, sizeof(ok));
	int rc = vdagent_feed(a, in.data, in.len, &out, &text, &tl, err, sizeof(err));
	check(rc == 0 && text && !strcmp(text, "ok"), "malformed: %s: %s, the next message counts",
	      what, resync ? "picked up again" : "ignored");
	int n = host_msgs(&out, t, 4, &last);
	if (resync)
		check(n == 1 && t[0] == 6 && get32((unsigned char *)last.data) == 1,
		      "malformed: %s: the agent is asked to announce itself again", what);
	else
		check(n == 0, "malformed: %s: nothing sent", what);
	free(text);
	buf_free(&in);
	buf_free(&out);
	buf_free(&last);
	vdagent_free(a);
}

static void test_malformed(void)
{
	struct buf in = BUF_INIT;
	unsigned char h[28] = { 0 };

	guest_msg(&in, 0, 6, NULL, 0);
	bad("port 0", &in, true);
	buf_reset(&in);
	guest_msg(&in, 7, 6, NULL, 0);
	bad("port 7", &in, true);
	buf_reset(&in);
	put32(h, 1);
	put32(h + 4, 0xffffffffu);
	buf_add(&in, h, 8);
	bad("a 4 GiB chunk", &in, true);
	buf_reset(&in);
	put32(h + 4, 0);
	buf_add(&in, h, 8);
	bad("an empty chunk", &in, true);
	buf_reset(&in);
	guest_msg(&in, 1, 6, "abcd", 4);
	put32((unsigned char *)in.data + 8, 2);
	bad("protocol 2", &in, true);
	buf_reset(&in);
	guest_msg(&in, 1, 4, "abcdefgh", 8);
	put32((unsigned char *)in.data + 4, 20 + 8 + 4);  /* chunk longer than message */
	buf_add(&in, "xxxx", 4);
	bad("a chunk longer than its message", &in, true);
	buf_reset(&in);
	/* What t700 once saw: the tail of a message whose head went to the
	 * port's previous connection. */
	buf_add(&in, "from the guest: \xc3\xbc \xe2\x82\xac", 22);
	bad("a message's tail", &in, true);
	buf_reset(&in);
	{
		/* Out of step again and again: given up the 21st time. */
		struct vdagent *a = vdagent_new();
		struct buf out = BUF_INIT;
		char *text = NULL, err[128] = "";
		size_t tl;
		unsigned char zero[8] = { 0 };
		int rc = 0, i;
		for (i = 0; i < 30 && rc == 0; i++)
			rc = vdagent_feed(a, zero, sizeof(zero), &out, &text, &tl, err, sizeof(err));
		check(rc == -1 && i == 21 && err[0], "out of step 21 times: given up (%s)", err);
		buf_free(&out);
		vdagent_free(a);
	}
	guest_msg(&in, 1, 6, "abc", 3);
	bad("capabilities of 3 bytes", &in, false);
	buf_reset(&in);
	guest_msg(&in, 1, 7, "abcdef", 6);
	bad("a grab of 6 bytes", &in, false);
	buf_reset(&in);
	guest_msg(&in, 1, 8, "ab", 2);
	bad("a request of 2 bytes", &in, false);
	buf_reset(&in);
	guest_msg(&in, 1, 4, "ab", 2);
	bad("a clipboard of 2 bytes", &in, false);
	buf_reset(&in);
	guest_msg(&in, 1, 99, "abcdabcd", 8);
	bad("an unknown type", &in, false);
	buf_reset(&in);
	/* Header says 1 GiB of data: skipped, never allocated; then a good
	 * message is still understood. */
	{
		struct vdagent *a = vdagent_new();
		struct buf out = BUF_INIT;
		char *text = NULL, err[128];
		size_t tl;
		unsigned char d[2048] = { 0 };
		uint32_t big = 1u << 30;
		int rc;
		put32(h, 1);
		put32(h + 4, 20 + 2048);   /* first chunk: header + 2048 */
		put32(h + 8, 1);
		put32(h + 12, 4);
		put32(h + 24, big);
		buf_add(&in, h, 28);
		buf_add(&in, d, sizeof(d));
		rc = vdagent_feed(a, in.data, in.len, &out, &text, &tl, err, sizeof(err));
		check(rc == 0 && !text, "a message of 1 GiB: read on, not kept");
		/* The rest is not sent: the parser still waits for it. */
		vdagent_free(a);
		buf_free(&out);
		buf_reset(&in);
	}
	{
		/* A 2 MiB clipboard in one chunk (as spice-vdagentd sends it):
		 * over the limit, skipped; the next message still counts. */
		struct vdagent *a = vdagent_new();
		struct buf out = BUF_INIT;
		char *text = NULL, err[128] = "";
		size_t tl, n = 2u << 20;
		unsigned char *d = calloc(1, n);
		unsigned char small[6];
		put32(d, 1);
		guest_msg(&in, 1, 4, d, (uint32_t)n);
		free(d);
		put32(small, 1);
		memcpy(small + 4, "ok", 2);
		guest_msg(&in, 1, 4, small, sizeof(small));
		int rc = vdagent_feed(a, in.data, in.len, &out, &text, &tl, err, sizeof(err));
		check(rc == 0 && text && tl == 2 && !strcmp(text, "ok"),
		      "a 2 MiB clipboard: skipped, and the next one arrives (%s)", err);
		free(text);
		vdagent_free(a);
		buf_free(&out);
		buf_reset(&in);
	}
	{
		unsigned char hh[8];
		put32(hh, 1);
		put32(hh + 4, (16u << 20) + 1);
		buf_add(&in, hh, 8);
		bad("a chunk over 16 MiB", &in, true);
		buf_reset(&in);
	}
	{
		/* Random bytes: whatever happens, no crash, and any error says
		 * something. */
		uint32_t x = 12345;
		int errors = 0;
		for (int round = 0; round < 200; round++) {
			struct vdagent *a = vdagent_new();
			struct buf out = BUF_INIT;
			char *text = NULL, err[128] = "";
			size_t tl;
			unsigned char r[512];
			for (size_t i = 0; i < sizeof(r); i++) {
				x = x * 1103515245u + 12345u;
				r[i] = (unsigned char)(x >> 16);
			}
			/* Some start with a believable chunk header. */
			if (round % 2) {
				put32(r, 1);
				put32(r + 4, 20 + (round % 40));
				put32(r + 8, 1);
				put32(r + 24, (uint32_t)(round % 40));
			}
			if (vdagent_feed(a, r, sizeof(r), &out, &text, &tl, err, sizeof(err)) < 0) {
				errors++;
				if (!err[0])
					errors = -100000;
			}
			free(text);
			buf_free(&out);
			vdagent_free(a);
		}
		check(errors >= 0, "200 random inputs: no crash, %d given up, each with a reason",
		      errors);
	}
	buf_free(&in);
}

static void test_convert(void)
{
	size_t n;
	char *s;

	s = vdagent_latin1_to_utf8("caf\xe9 \xff!", 7, &n);
	check(s && n == 9 && !strcmp(s, "caf\xc3\xa9 \xc3\xbf!"), "latin1 -> utf8");
	free(s);
	s = vdagent_utf8_to_latin1("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80.", 15, &n);
	check(s && !strcmp(s, "caf\xe9 ? ?."), "utf8 -> latin1, '?' for what does not fit (%s)",
	      s ? s : "NULL");
	free(s);
	s = vdagent_utf8_to_latin1("a\x80" "b\xc3", 4, &n);
	check(s && n == 4 && !strcmp(s, "a?b?"), "utf8 -> latin1: broken sequences are '?'");
	free(s);
	s = vdagent_latin1_to_utf8("", 0, &n);
	check(s && n == 0 && !*s, "empty");
	free(s);
}

int main(void)
{
	test_hello();
	test_host_to_guest();
	test_guest_to_host();
	test_malformed();
	test_convert();
	return tap_done("test_vdagent");
}
