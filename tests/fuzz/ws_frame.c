/*
 * Fuzz harness: the WebSocket frames a client sends berth-web (web/ws.c
 * ws_parser_feed; anyone who reaches berth-web's port and passes the
 * handshake, before any token is checked).  The input's first byte sets
 * the largest message allowed (64 to 16,384 bytes, in steps of 64), its
 * second how the rest is cut into reads (1 to 256 bytes, as a socket may
 * return them).  The same bytes go whole through a second parser: both must
 * give the same messages, or the harness aborts.  Each message is checked
 * against what the parser promises (text is UTF-8, a data message is within
 * the maximum, a control frame's payload within 125 bytes whatever the
 * maximum) and answered as berth-web answers it (ws_frame_add,
 * ws_close_add).  The input, as text, is also tried as a Sec-WebSocket-Key
 * and a Connection header (ws_upgrade_check).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "web/ws.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* One parser's messages, one after the other, into OUT: kind, code and
 * the data, each checked. */
static void run(const uint8_t *data, size_t size, size_t max, size_t step, struct buf *out)
{
	struct ws_parser *p = ws_parser_new(max);
	struct buf reply = BUF_INIT;
	size_t off = 0, end = 0;
	struct ws_msg m;

	for (;;) {
		if (off == end && off < size)
			end = size - off < step ? size : off + step;
		off += ws_parser_feed(p, data + off, end - off, &m);
		if (m.kind == WS_NONE) {
			if (off == size)
				break;
			continue;
		}
		if ((m.kind == WS_TEXT && !ws_utf8_valid(m.data, m.len)) ||
		    ((m.kind == WS_TEXT || m.kind == WS_BINARY) && m.len > max) ||
		    ((m.kind == WS_PING || m.kind == WS_PONG) && m.len > 125) || m.data[m.len])
			abort();
		unsigned char k = (unsigned char)m.kind;
		buf_add(out, &k, 1);
		buf_add(out, &m.code, sizeof(m.code));
		buf_add(out, &m.len, sizeof(m.len));
		buf_add(out, m.data, m.len);
		if (m.kind == WS_PING)
			ws_frame_add(&reply, WS_OP_PONG, m.data, m.len);
		else if (m.kind == WS_TEXT || m.kind == WS_BINARY)
			ws_frame_add(&reply, m.kind == WS_TEXT ? WS_OP_TEXT : WS_OP_BINARY, m.data,
				     m.len);
		if (m.kind == WS_CLOSE || m.kind == WS_ERROR) {
			if (!m.why)
				abort();
			ws_close_add(&reply, m.kind == WS_CLOSE ? WS_CLOSE_NORMAL : m.code, m.why);
			break;
		}
		buf_reset(&reply);
	}
	buf_free(&reply);
	ws_parser_free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct buf a = BUF_INIT, b = BUF_INIT;
	char text[256], acc[WS_ACCEPT_SIZE], why[256];

	if (size < 2)
		return 0;
	size_t max = ((size_t)data[0] + 1) * 64, step = (size_t)data[1] + 1;
	run(data + 2, size - 2, max, step, &a);
	run(data + 2, size - 2, max, size, &b);
	if (a.len != b.len || (a.len && memcmp(a.data, b.data, a.len)))
		abort();	/* cut into reads, the bytes said something else */
	buf_free(&a);
	buf_free(&b);

	size_t n = size - 2 < sizeof(text) - 1 ? size - 2 : sizeof(text) - 1;
	memcpy(text, data + 2, n);
	text[n] = '\0';
	struct ws_upgrade u = { "GET", "websocket", text, "13", text };
	ws_upgrade_check(&u, acc, why, sizeof(why));
	return 0;
}
