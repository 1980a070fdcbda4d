/* RFC 6455 (WebSocket), the server's side, without I/O: the checks of an
 * upgrade request and its Sec-WebSocket-Accept value, an incremental
 * parser of the frames a client sends, and the encoding of the frames a
 * server sends.  No extension is negotiated (no permessage-deflate): a
 * frame with a reserved bit set is a protocol error.  berth-web calls these
 * on bytes from the network: every length is checked before it is used,
 * and a message is bounded by the parser's maximum. */
#ifndef BERTH_WEB_WS_H
#define BERTH_WEB_WS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"

/* Close codes (RFC 6455 section 7.4.1). */
#define WS_CLOSE_NORMAL 1000
#define WS_CLOSE_GOING_AWAY 1001
#define WS_CLOSE_PROTOCOL 1002      /* a frame RFC 6455 does not allow */
#define WS_CLOSE_NO_STATUS 1005     /* never sent: a close frame without a code */
#define WS_CLOSE_INVALID_DATA 1007  /* a text message that is not UTF-8 */
#define WS_CLOSE_POLICY 1008
#define WS_CLOSE_TOO_BIG 1009       /* a message over the parser's maximum */
#define WS_CLOSE_INTERNAL 1011
#define WS_CLOSE_TRY_LATER 1013

/* Frame opcodes. */
enum ws_opcode {
	WS_OP_CONT = 0x0,
	WS_OP_TEXT = 0x1,
	WS_OP_BINARY = 0x2,
	WS_OP_CLOSE = 0x8,
	WS_OP_PING = 0x9,
	WS_OP_PONG = 0xA,
};

/* ---- the handshake --------------------------------------------------------- */

/* Sec-WebSocket-Accept's value: 28 characters of base64. */
#define WS_ACCEPT_SIZE 29

/* The parts of an upgrade request that RFC 6455 section 4.2.1 checks, as
 * the request had them (NULL: the header is absent). */
struct ws_upgrade {
	const char *method;
	const char *upgrade;      /* Upgrade: must name "websocket" */
	const char *connection;   /* Connection: must have the token "upgrade" */
	const char *version;      /* Sec-WebSocket-Version: must be "13" */
	const char *key;          /* Sec-WebSocket-Key: base64 of 16 bytes */
};

/* Checks U.  0 with ACCEPT (WS_ACCEPT_SIZE bytes, NUL-terminated) the
 * Sec-WebSocket-Accept to answer with "101 Switching Protocols"; or the
 * HTTP status to refuse with: 405 for a method other than GET, 426 for a
 * version other than 13 (the answer then carries "Sec-WebSocket-Version:
 * 13"), 400 otherwise; WHY (WHYLEN bytes) then says what is wrong, naming
 * the header. */
int ws_upgrade_check(const struct ws_upgrade *u, char accept[WS_ACCEPT_SIZE], char *why,
		     size_t whylen);

/* The Sec-WebSocket-Accept for KEY (as sent, not decoded): the base64 of
 * SHA-1(KEY + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"), into ACCEPT. */
void ws_accept(const char *key, char accept[WS_ACCEPT_SIZE]);

/* ---- frames from a client ---------------------------------------------------- */

enum ws_kind {
	WS_NONE,      /* no message yet: more bytes are needed */
	WS_TEXT,      /* a whole text message (valid UTF-8) */
	WS_BINARY,    /* a whole binary message */
	WS_PING,      /* answer with a pong of the same data */
	WS_PONG,
	WS_CLOSE,     /* the client closes: code and reason */
	WS_ERROR,     /* the bytes break RFC 6455 (or the maximum): close with code */
};

/* What ws_parser_feed found.  DATA (LEN bytes, unmasked; a NUL follows
 * them) is the parser's and stays valid until the next call. */
struct ws_msg {
	enum ws_kind kind;
	const unsigned char *data;
	size_t len;
	int code;          /* WS_CLOSE: the client's code (1005 when it gave none);
			    * WS_ERROR: the code to close with (1002, 1007, 1009) */
	const char *why;   /* WS_ERROR: what was wrong (a static string);
			    * WS_CLOSE: the client's reason ("" when none) */
};

struct ws_parser;

/* A parser of client frames, for messages (all of a fragmented message's
 * frames together) of at most MAX_MESSAGE bytes.  Client frames must be
 * masked.  Free with ws_parser_free. */
struct ws_parser *ws_parser_new(size_t max_message);
void ws_parser_free(struct ws_parser *p);

/* Reads from DATA (LEN bytes) until a message is whole or the bytes run
 * out; returns how many bytes it took, and *MSG.  Call again with the rest
 * while LEN is not all taken, or MSG has a message.  A control frame (ping,
 * pong, close) may come between the frames of a fragmented message: it is
 * given at once, and the message goes on after it.  After WS_ERROR, or a
 * WS_CLOSE, the parser takes nothing more (returns 0 and the same kind). */
size_t ws_parser_feed(struct ws_parser *p, const void *data, size_t len, struct ws_msg *msg);

/* ---- frames to a client ------------------------------------------------------ */

/* Appends to OUT a whole (FIN), unmasked frame of opcode OP with the LEN
 * bytes of DATA.  A control frame's payload must be at most 125 bytes
 * (longer is a bug of the caller's: abort). */
void ws_frame_add(struct buf *out, enum ws_opcode op, const void *data, size_t len);
/* Appends a close frame of CODE with REASON, cut to the 123 bytes a close
 * frame has room for (at a character's boundary; REASON is UTF-8). */
void ws_close_add(struct buf *out, int code, const char *reason);

/* True when the LEN bytes of S are UTF-8 (RFC 3629: no overlong forms, no
 * surrogates, nothing past U+10FFFF). */
bool ws_utf8_valid(const void *s, size_t len);
/* True when a client may send CODE in a close frame (1000-1003, 1007-1011,
 * 3000-4999). */
bool ws_close_code_valid(int code);

#endif
