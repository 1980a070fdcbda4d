/*
 * Unit tests for web/ws.c, berth-web's RFC 6455 server side: the upgrade
 * request's checks and Sec-WebSocket-Accept (RFC 6455's own example), the
 * parser of client frames on RFC 6455 section 5.7's examples (masked, as a
 * client sends them) fed whole, a byte at a time and in random pieces,
 * every refusal with its close code (1002, 1007, 1009), and the encoder on
 * the same examples (unmasked, as a server sends them).
 *
 * Built by the Makefile as build/default/tests/test_ws.
 */
#include "web/ws.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/tap.h"
#include "common/banned.h"

/* RFC 6455 section 5.7: the mask of its masked examples. */
static const unsigned char rfc_mask[4] = { 0x37, 0xfa, 0x21, 0x3d };

/* A client's frame: first byte B0 (FIN, RSV, opcode), masked with MASK,
 * the length in its shortest form (or in FORCE_LEN bytes: 2 or 8). */
static void frame_len(struct buf *out, unsigned b0, const void *data, size_t len,
		      const unsigned char mask[4], int force_len)
{
	unsigned char h[14];
	size_t n = 0;
	const unsigned char *p = data;

	h[n++] = (unsigned char)b0;
	if (len < 126 && !force_len) {
		h[n++] = (unsigned char)(0x80 | len);
	} else if ((len <= 0xFFFF && force_len != 8) || force_len == 2) {
		h[n++] = 0x80 | 126;
		h[n++] = (unsigned char)(len >> 8);
		h[n++] = (unsigned char)len;
	} else {
		h[n++] = 0x80 | 127;
		for (int i = 7; i >= 0; i--)
			h[n++] = (unsigned char)((uint64_t)len >> (8 * i));
	}
	memcpy(h + n, mask, 4);
	n += 4;
	buf_add(out, h, n);
	for (size_t i = 0; i < len; i++) {
		unsigned char c = p[i] ^ mask[i & 3];
		buf_add(out, &c, 1);
	}
}

static void frame(struct buf *out, unsigned b0, const void *data, size_t len)
{
	frame_len(out, b0, data, len, rfc_mask, 0);
}

/* Everything the parser gives for LEN bytes of DATA fed in pieces of STEP
 * bytes (0: all at once; -1: random), one line per message:
 * "text:Hello", "binary:N", "ping:x", "pong:x", "close:1000:bye",
 * "error:1002".  Into OUT. */
static void parse_all(const void *data, size_t len, size_t max, long step, struct buf *out)
{
	struct ws_parser *p = ws_parser_new(max);
	const unsigned char *in = data;
	size_t off = 0, piece_end = 0;
	struct ws_msg m;

	buf_reset(out);
	for (;;) {
		if (off == piece_end && off < len) {
			size_t s = step == 0 ? len : step > 0 ? (size_t)step : 1 + (size_t)rand() % 7;
			piece_end = off + s > len ? len : off + s;
		}
		size_t n = ws_parser_feed(p, in + off, piece_end - off, &m);
		off += n;
		switch (m.kind) {
		case WS_NONE:
			if (off == len)
				goto out;
			break;
		case WS_TEXT:
			buf_printf(out, "text:%.*s\n", (int)m.len, (const char *)m.data);
			break;
		case WS_BINARY:
			buf_printf(out, "binary:%zu\n", m.len);
			break;
		case WS_PING:
			buf_printf(out, "ping:%.*s\n", (int)m.len, (const char *)m.data);
			break;
		case WS_PONG:
			buf_printf(out, "pong:%.*s\n", (int)m.len, (const char *)m.data);
			break;
		case WS_CLOSE:
			buf_printf(out, "close:%d:%s\n", m.code, m.why);
			goto out;
		case WS_ERROR:
			buf_printf(out, "error:%d\n", m.code);
			goto out;
		}
	}
out:
	ws_parser_free(p);
}

/* parse_all whole, a byte at a time and in random pieces: all three give
 * WANT. */
static void check_parse(const struct buf *in, size_t max, const char *want, const char *what)
{
	struct buf got = BUF_INIT;

	parse_all(in->data, in->len, max, 0, &got);
	check_str(buf_str(&got), want, what);
	parse_all(in->data, in->len, max, 1, &got);
	if (!check(!strcmp(buf_str(&got), want), "  the same a byte at a time"))
		diag("got [%s]", buf_str(&got));
	for (int i = 0; i < 20; i++) {
		parse_all(in->data, in->len, max, -1, &got);
		if (strcmp(buf_str(&got), want))
			break;
	}
	if (!check(!strcmp(buf_str(&got), want), "  the same in random pieces"))
		diag("got [%s]", buf_str(&got));
	buf_free(&got);
}

static void test_handshake(void)
{
	char acc[WS_ACCEPT_SIZE], why[256];
	struct ws_upgrade u = { "GET", "websocket", "Upgrade", "13", "dGhlIHNhbXBsZSBub25jZQ==" };
	struct ws_upgrade v;

	ws_accept("dGhlIHNhbXBsZSBub25jZQ==", acc);
	check_str(acc, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", "Sec-WebSocket-Accept: RFC 6455's example");
	check(ws_upgrade_check(&u, acc, why, sizeof(why)) == 0, "RFC 6455's request is accepted");
	check_str(acc, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", "  with its Accept");

	v = u;
	v.upgrade = "WebSocket";
	v.connection = "keep-alive, Upgrade";
	v.key = " dGhlIHNhbXBsZSBub25jZQ== ";
	check(ws_upgrade_check(&v, acc, why, sizeof(why)) == 0 &&
	      !strcmp(acc, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="),
	      "any case, Connection as a list (Firefox's keep-alive, Upgrade), spaces around "
	      "the key");

	v = u;
	v.method = "POST";
	check(ws_upgrade_check(&v, acc, why, sizeof(why)) == 405 && !acc[0], "POST: 405");
	check_has(why, "GET", "  saying GET");
	v = u;
	v.upgrade = NULL;
	check(ws_upgrade_check(&v, acc, why, sizeof(why)) == 400, "no Upgrade: 400");
	check_has(why, "Upgrade: websocket", "  naming the header");
	v.upgrade = "h2c";
	check(ws_upgrade_check(&v, acc, why, sizeof(why)) == 400, "Upgrade: h2c: 400");
	v = u;
	v.connection = "keep-alive";
	check(ws_upgrade_check(&v, acc, why, sizeof(why)) == 400, "Connection without upgrade: 400");
	check_has(why, "Connection", "  naming the header");
	v.connection = "upgrades";
	check(ws_upgrade_check(&v, acc, why, sizeof(why)) == 400,
	      "Connection: upgrades (a token, not a substring): 400");
	v.connection = NULL;
	check(ws_upgrade_check(&v, acc, why, sizeof(why)) == 400, "no Connection: 400");
	v = u;
	v.version = "8";
	check(ws_upgrade_check(&v, acc, why, sizeof(why)) == 426, "version 8: 426");
	check_has(why, "13", "  saying 13");
	v.version = NULL;
	check(ws_upgrade_check(&v, acc, why, sizeof(why)) == 426, "no version: 426");
	v.version = "130";
	check(ws_upgrade_check(&v, acc, why, sizeof(why)) == 426, "version 130: 426");
	v = u;
	v.key = NULL;
	check(ws_upgrade_check(&v, acc, why, sizeof(why)) == 400, "no key: 400");
	check_has(why, "Sec-WebSocket-Key", "  naming the header");
	v.key = "dGhlIHNhbXBsZSBub25jZQ";
	check(ws_upgrade_check(&v, acc, why, sizeof(why)) == 400, "a key without its padding: 400");
	v.key = "AAAAAAAAAAAAAAAAAAAAAAAA";
	check(ws_upgrade_check(&v, acc, why, sizeof(why)) == 400,
	      "a key of 24 characters that is 18 bytes: 400");
	v.key = "dGhlIHNhbXBsZSBub25jZQ!=";
	check(ws_upgrade_check(&v, acc, why, sizeof(why)) == 400, "a key that is not base64: 400");
	v.key = "dGhlIHNhbXBsZSBub25jZQ==dGhlIHNhbXBsZSBub25jZQ==";
	check(ws_upgrade_check(&v, acc, why, sizeof(why)) == 400 && !acc[0], "a key of 32 bytes: 400");
}

static void test_examples(void)
{
	struct buf in = BUF_INIT;
	unsigned char big[65536];
	char want[64];

	/* RFC 6455 5.7: "A single-frame masked text message". */
	const unsigned char hello[] = { 0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d,
					0x51, 0x58 };
	buf_add(&in, hello, sizeof(hello));
	check_parse(&in, 1024, "text:Hello\n", "RFC 6455 5.7: a masked text frame \"Hello\"");

	/* "A fragmented unmasked text message", masked as a client's. */
	buf_reset(&in);
	frame(&in, 0x01, "Hel", 3);
	frame(&in, 0x80, "lo", 2);
	check_parse(&in, 1024, "text:Hello\n", "RFC 6455 5.7: \"Hel\" + \"lo\" in two fragments");

	/* "Unmasked Ping request and masked Ping response". */
	buf_reset(&in);
	frame(&in, 0x89, "Hello", 5);
	const unsigned char pong[] = { 0x8a, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d,
				       0x51, 0x58 };
	buf_add(&in, pong, sizeof(pong));
	check_parse(&in, 1024, "ping:Hello\npong:Hello\n", "RFC 6455 5.7: ping and pong \"Hello\"");

	/* "256 bytes binary message in a single unmasked frame" (7E 0100). */
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (unsigned char)(i * 7);
	buf_reset(&in);
	frame(&in, 0x82, big, 256);
	check(in.len == 256 + 8 && (unsigned char)in.data[1] == 0xFE && in.data[2] == 1 &&
	      in.data[3] == 0, "256 bytes: a 16-bit length (7E 0100)");
	check_parse(&in, 1 << 20, "binary:256\n", "RFC 6455 5.7: 256 bytes of binary");

	/* "64KiB binary message in a single unmasked frame" (7F 0000000000010000). */
	buf_reset(&in);
	frame(&in, 0x82, big, sizeof(big));
	check(in.len == sizeof(big) + 14 && (unsigned char)in.data[1] == 0xFF &&
	      in.data[7] == 1 && in.data[8] == 0, "64 KiB: a 64-bit length");
	check_parse(&in, 1 << 20, "binary:65536\n", "RFC 6455 5.7: 64 KiB of binary");
	{
		struct ws_parser *p = ws_parser_new(1 << 20);
		struct ws_msg m;
		size_t n = ws_parser_feed(p, in.data, in.len, &m);
		check(n == in.len && m.kind == WS_BINARY && m.len == sizeof(big) &&
		      !memcmp(m.data, big, sizeof(big)), "  unmasked byte for byte");
		ws_parser_free(p);
	}

	/* A ping between the fragments of a message; several messages in one
	 * read; an empty message. */
	buf_reset(&in);
	frame(&in, 0x02, big, 100);
	frame(&in, 0x89, "x", 1);
	frame(&in, 0x00, big, 100);
	frame(&in, 0x80, big, 56);
	frame(&in, 0x81, "", 0);
	frame(&in, 0x81, "second", 6);
	frame(&in, 0x88, "\x03\xe8" "bye", 5);
	check_parse(&in, 1024, "ping:x\nbinary:256\ntext:\ntext:second\nclose:1000:bye\n",
		    "a ping inside a fragmented message, an empty one, several in one read, "
		    "then a close");
	{
		struct ws_parser *p = ws_parser_new(1024);
		struct ws_msg m;
		size_t off = 0, n;
		n = ws_parser_feed(p, in.data, in.len, &m);
		check(m.kind == WS_PING && n == 6 + 100 + 6 + 1,
		      "a call stops at the end of a message (the ping: %zu bytes taken)", n);
		off += n;
		n = ws_parser_feed(p, in.data + off, in.len - off, &m);
		check(m.kind == WS_BINARY && m.len == 256 && !memcmp(m.data, big, 100) &&
		      !memcmp(m.data + 100, big, 100) && !memcmp(m.data + 200, big, 56),
		      "  the fragments joined in order");
		off += n;
		while (off < in.len && m.kind != WS_CLOSE) {
			n = ws_parser_feed(p, in.data + off, in.len - off, &m);
			off += n;
		}
		check(m.kind == WS_CLOSE && off == in.len, "  the close is the end");
		n = ws_parser_feed(p, "\x81\x80xxxx", 6, &m);
		check(n == 0 && m.kind == WS_CLOSE && m.code == 1000,
		      "after a close nothing is taken");
		ws_parser_free(p);
	}

	/* UTF-8 split between fragments is fine: the message is checked. */
	buf_reset(&in);
	frame(&in, 0x01, "caf\xc3", 4);
	frame(&in, 0x00, "\xa9 \xf0\x9f\x98", 5);
	frame(&in, 0x80, "\x80", 1);
	snprintf(want, sizeof(want), "text:caf\xc3\xa9 \xf0\x9f\x98\x80\n");
	check_parse(&in, 1024, want, "a character split between fragments");
	/* Binary messages are not UTF-8. */
	buf_reset(&in);
	frame(&in, 0x82, "\xff\xfe\xc0", 3);
	check_parse(&in, 1024, "binary:3\n", "a binary message need not be UTF-8");
	buf_free(&in);
}

/* One frame sequence, the parser's verdict. */
static void refused(unsigned b0, const void *data, size_t len, size_t max, const char *want,
		    const char *what)
{
	struct buf in = BUF_INIT;

	frame(&in, b0, data, len);
	check_parse(&in, max, want, what);
	buf_free(&in);
}

static void test_refusals(void)
{
	struct buf in = BUF_INIT, got = BUF_INIT;
	unsigned char big[2048] = { 0 };
	struct ws_parser *p;
	struct ws_msg m;
	size_t n;

	/* RFC 6455 5.7's unmasked "Hello": a server's frame, not a client's. */
	const unsigned char unmasked[] = { 0x81, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f };
	buf_add(&in, unmasked, sizeof(unmasked));
	check_parse(&in, 1024, "error:1002\n", "an unmasked frame (RFC 6455 5.7's): 1002");
	p = ws_parser_new(1024);
	n = ws_parser_feed(p, unmasked, sizeof(unmasked), &m);
	check(m.kind == WS_ERROR && n == 2 && strstr(m.why, "masked"),
	      "  refused at its second byte, saying why (%s)", m.why);
	ws_parser_free(p);

	refused(0xC1, "x", 1, 1024, "error:1002\n", "RSV1 (compression, not agreed): 1002");
	refused(0xA1, "x", 1, 1024, "error:1002\n", "RSV2: 1002");
	refused(0x91, "x", 1, 1024, "error:1002\n", "RSV3: 1002");
	refused(0x83, "x", 1, 1024, "error:1002\n", "opcode 3 (reserved): 1002");
	refused(0x87, "x", 1, 1024, "error:1002\n", "opcode 7 (reserved): 1002");
	refused(0x8B, "x", 1, 1024, "error:1002\n", "opcode 0xB (reserved control): 1002");
	refused(0x8F, "x", 1, 1024, "error:1002\n", "opcode 0xF (reserved control): 1002");
	refused(0x80, "x", 1, 1024, "error:1002\n", "a continuation without a message: 1002");
	refused(0x09, "x", 1, 1024, "error:1002\n", "a ping without FIN: 1002");
	refused(0x89, big, 126, 1024, "error:1002\n", "a ping of 126 bytes: 1002");
	refused(0x81, "\xc0\xaf", 2, 1024, "error:1007\n", "an overlong '/' in text: 1007");
	refused(0x81, "\xed\xa0\x80", 3, 1024, "error:1007\n", "a surrogate in text: 1007");
	refused(0x81, "\xf4\x90\x80\x80", 4, 1024, "error:1007\n", "past U+10FFFF in text: 1007");
	refused(0x81, "ab\xc3", 3, 1024, "error:1007\n", "text cut inside a character: 1007");
	refused(0x81, "\xff", 1, 1024, "error:1007\n", "byte FF in text: 1007");
	refused(0x88, "\x03", 1, 1024, "error:1002\n", "a close of 1 byte: 1002");
	refused(0x88, "\x03\xed", 2, 1024, "error:1002\n", "close code 1005 (never sent): 1002");
	refused(0x88, "\x03\xe7", 2, 1024, "error:1002\n", "close code 999: 1002");
	refused(0x88, "\x0b\xb7", 2, 1024, "error:1002\n", "close code 2999: 1002");
	refused(0x88, "\x03\xe8\xff", 3, 1024, "error:1007\n", "a close reason not UTF-8: 1007");
	refused(0x88, "\x0f\xa0", 2, 1024, "close:4000:\n", "close code 4000 (private) is fine");
	refused(0x88, "", 0, 1024, "close:1005:\n", "a close without a code: 1005");

	/* A new message inside a fragmented one. */
	buf_reset(&in);
	frame(&in, 0x01, "a", 1);
	frame(&in, 0x81, "b", 1);
	check_parse(&in, 1024, "error:1002\n", "a text frame inside a fragmented message: 1002");

	/* The maximum: refused at the head, before any payload is read. */
	refused(0x82, big, 1025, 1024, "error:1009\n", "a frame of 1025 bytes, 1024 allowed: 1009");
	refused(0x82, big, 1024, 1024, "binary:1024\n", "  1024 bytes pass");
	buf_reset(&in);
	frame(&in, 0x02, big, 1000);
	frame(&in, 0x80, big, 25);
	check_parse(&in, 1024, "error:1009\n", "fragments of 1025 bytes in all: 1009");
	buf_reset(&in);
	frame(&in, 0x82, big, 1025);
	p = ws_parser_new(1024);
	n = ws_parser_feed(p, in.data, in.len, &m);
	check(m.kind == WS_ERROR && m.code == 1009 && n == 8,
	      "  refused after its head (%zu bytes of %zu taken)", n, in.len);
	ws_parser_free(p);
	{
		/* A head that claims 2^62 bytes: refused before it is believed. */
		const unsigned char huge[] = { 0x82, 0xFF, 0x40, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4 };
		buf_reset(&in);
		buf_add(&in, huge, sizeof(huge));
		check_parse(&in, 1 << 20, "error:1009\n", "a length of 2^62: 1009");
		const unsigned char top[] = { 0x82, 0xFF, 0x80, 0, 0, 0, 0, 0, 0, 1, 1, 2, 3, 4 };
		buf_reset(&in);
		buf_add(&in, top, sizeof(top));
		check_parse(&in, 1 << 20, "error:1002\n", "a 64-bit length with its top bit set: 1002");
	}
	/* Lengths not in their shortest form. */
	buf_reset(&in);
	frame_len(&in, 0x82, "hello", 5, rfc_mask, 2);
	check_parse(&in, 1024, "error:1002\n", "5 bytes with a 16-bit length: 1002");
	buf_reset(&in);
	frame_len(&in, 0x82, big, 300, rfc_mask, 8);
	check_parse(&in, 1024, "error:1002\n", "300 bytes with a 64-bit length: 1002");

	/* After an error nothing more is taken. */
	p = ws_parser_new(1024);
	ws_parser_feed(p, "\xC1\x81", 2, &m);
	n = ws_parser_feed(p, "\x81\x80xxxx", 6, &m);
	check(n == 0 && m.kind == WS_ERROR && m.code == 1002, "after an error nothing is taken");
	ws_parser_free(p);
	buf_free(&in);
	buf_free(&got);
}

static void test_encoder(void)
{
	struct buf out = BUF_INIT;
	unsigned char big[65536] = { 0 };
	char reason[400];

	/* RFC 6455 5.7's unmasked frames, as a server sends them. */
	ws_frame_add(&out, WS_OP_TEXT, "Hello", 5);
	check(out.len == 7 && !memcmp(out.data, "\x81\x05" "Hello", 7),
	      "text \"Hello\": 81 05 48 65 6c 6c 6f (RFC 6455 5.7)");
	buf_reset(&out);
	ws_frame_add(&out, WS_OP_PING, "Hello", 5);
	check(out.len == 7 && !memcmp(out.data, "\x89\x05" "Hello", 7), "ping \"Hello\": 89 05 ...");
	buf_reset(&out);
	ws_frame_add(&out, WS_OP_BINARY, big, 256);
	check(out.len == 260 && !memcmp(out.data, "\x82\x7e\x01\x00", 4),
	      "256 bytes of binary: 82 7E 0100");
	buf_reset(&out);
	ws_frame_add(&out, WS_OP_BINARY, big, 125);
	check(out.len == 127 && !memcmp(out.data, "\x82\x7d", 2), "125 bytes: a 7-bit length");
	buf_reset(&out);
	ws_frame_add(&out, WS_OP_BINARY, big, 65535);
	check(out.len == 65539 && !memcmp(out.data, "\x82\x7e\xff\xff", 4),
	      "65535 bytes: a 16-bit length");
	buf_reset(&out);
	ws_frame_add(&out, WS_OP_BINARY, big, 65536);
	check(out.len == 65546 && !memcmp(out.data, "\x82\x7f\0\0\0\0\0\x01\0\0", 10),
	      "64 KiB of binary: 82 7F 0000000000010000");
	buf_reset(&out);
	ws_close_add(&out, 1000, "");
	check(out.len == 4 && !memcmp(out.data, "\x88\x02\x03\xe8", 4), "close 1000: 88 02 03 E8");
	buf_reset(&out);
	ws_close_add(&out, 4404, "no machine m");
	check(out.len == 16 && !memcmp(out.data, "\x88\x0e\x11\x34no machine m", 16),
	      "close 4404 with a reason");
	/* A reason too long for a close frame: cut at a character. */
	reason[0] = '\0';
	for (int i = 0; i < 100; i++)
		snprintf(reason + strlen(reason), sizeof(reason) - strlen(reason), "\xc3\xa9");
	buf_reset(&out);
	ws_close_add(&out, 1008, reason);
	check(out.len == 2 + 2 + 122 && ws_utf8_valid(out.data + 4, out.len - 4),
	      "a reason of 200 bytes is cut to 122, not inside a character (frame of %zu bytes)",
	      out.len);
	buf_free(&out);
}

static void test_utf8_codes(void)
{
	check(ws_utf8_valid("", 0) && ws_utf8_valid("plain", 5) &&
	      ws_utf8_valid("\xc2\x80\xdf\xbf\xe0\xa0\x80\xef\xbf\xbf\xf0\x90\x80\x80\xf4\x8f\xbf\xbf",
			    18), "UTF-8: the edges of 2, 3 and 4 bytes");
	check(ws_utf8_valid("\x00", 1), "UTF-8: NUL is a character");
	check(!ws_utf8_valid("\xc1\xbf", 2) && !ws_utf8_valid("\xe0\x9f\xbf", 3) &&
	      !ws_utf8_valid("\xf0\x8f\xbf\xbf", 4), "UTF-8: overlong forms refused");
	check(!ws_utf8_valid("\x80", 1) && !ws_utf8_valid("\xf8\x88\x80\x80\x80", 5) &&
	      !ws_utf8_valid("\xe2\x28\xa1", 3), "UTF-8: stray and bad continuation bytes refused");
	check(ws_close_code_valid(1000) && ws_close_code_valid(1003) && ws_close_code_valid(1007) &&
	      ws_close_code_valid(1011) && ws_close_code_valid(3000) && ws_close_code_valid(4999),
	      "close codes a client may send");
	check(!ws_close_code_valid(0) && !ws_close_code_valid(999) && !ws_close_code_valid(1004) &&
	      !ws_close_code_valid(1005) && !ws_close_code_valid(1006) &&
	      !ws_close_code_valid(1015) && !ws_close_code_valid(2999) && !ws_close_code_valid(5000),
	      "close codes a client may not send");
}

/* A round trip: random messages framed with random masks and lengths,
 * parsed in random pieces. */
static void test_random(void)
{
	struct buf in = BUF_INIT, want = BUF_INIT, got = BUF_INIT;
	unsigned char data[3000], mask[4];

	srand(6455);
	for (int i = 0; i < 200; i++) {
		size_t len = (size_t)rand() % sizeof(data);
		for (size_t j = 0; j < len; j++)
			data[j] = (unsigned char)('a' + rand() % 26);
		for (int j = 0; j < 4; j++)
			mask[j] = (unsigned char)rand();
		if (rand() % 2) {
			frame_len(&in, 0x81, data, len, mask, 0);
			buf_printf(&want, "text:%.*s\n", (int)len, (const char *)data);
		} else {
			size_t cut = len ? (size_t)rand() % len : 0;
			frame_len(&in, 0x02, data, cut, mask, 0);
			frame_len(&in, 0x89, "p", 1, mask, 0);
			frame_len(&in, 0x80, data + cut, len - cut, mask, 0);
			buf_printf(&want, "ping:p\nbinary:%zu\n", len);
		}
	}
	parse_all(in.data, in.len, sizeof(data), -1, &got);
	check(!strcmp(buf_str(&got), buf_str(&want)),
	      "200 random messages (%zu bytes) in random pieces come out as they went in", in.len);
	buf_free(&in);
	buf_free(&want);
	buf_free(&got);
}

int main(void)
{
	test_handshake();
	test_examples();
	test_refusals();
	test_encoder();
	test_utf8_codes();
	test_random();
	return tap_done("test_ws");
}
