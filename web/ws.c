#include "web/ws.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>

#include "common/banned.h"

/* ---- the handshake --------------------------------------------------------- */

/* RFC 6455 section 1.3: appended to the client's key before hashing. */
static const char ws_guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

void ws_accept(const char *key, char accept[WS_ACCEPT_SIZE])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned mdlen = 0;
	struct buf in = BUF_INIT, out = BUF_INIT;

	buf_adds(&in, key);
	buf_adds(&in, ws_guid);
	if (EVP_Digest(in.data, in.len, md, &mdlen, EVP_sha1(), NULL) != 1 || mdlen != 20)
		abort();	/* libcrypto without SHA-1: nothing works */
	buf_add_base64(&out, md, mdlen);
	snprintf(accept, WS_ACCEPT_SIZE, "%s", buf_str(&out));
	buf_free(&in);
	buf_free(&out);
}

/* True when the comma-separated header value LIST has the token WANT (case
 * is not significant; spaces and tabs around a token are not part of it). */
static bool has_token(const char *list, const char *want)
{
	size_t wlen = strlen(want);

	while (list && *list) {
		const char *end = strchr(list, ',');
		size_t n = end ? (size_t)(end - list) : strlen(list);
		while (n && (*list == ' ' || *list == '\t')) {
			list++;
			n--;
		}
		while (n && (list[n - 1] == ' ' || list[n - 1] == '\t'))
			n--;
		if (n == wlen && !strncasecmp(list, want, n))
			return true;
		list = end ? end + 1 : NULL;
	}
	return false;
}

/* V without the spaces and tabs around it, into OUT (OUTLEN bytes): false
 * when it does not fit. */
static bool trimmed(const char *v, char *out, size_t outlen)
{
	size_t n;

	while (*v == ' ' || *v == '\t')
		v++;
	n = strlen(v);
	while (n && (v[n - 1] == ' ' || v[n - 1] == '\t'))
		n--;
	if (n >= outlen)
		return false;
	memcpy(out, v, n);
	out[n] = '\0';
	return true;
}

int ws_upgrade_check(const struct ws_upgrade *u, char accept[WS_ACCEPT_SIZE], char *why,
		     size_t whylen)
{
	struct buf raw = BUF_INIT;
	char v[32];
	bool key_ok;

	accept[0] = '\0';
	if (!u->method || strcmp(u->method, "GET")) {
		snprintf(why, whylen, "a WebSocket is opened with GET");
		return 405;
	}
	if (!has_token(u->upgrade, "websocket")) {
		snprintf(why, whylen, "not a WebSocket request: the header \"Upgrade: websocket\" "
			 "is missing");
		return 400;
	}
	if (!has_token(u->connection, "upgrade")) {
		snprintf(why, whylen, "not a WebSocket request: the header Connection does not "
			 "have \"Upgrade\"");
		return 400;
	}
	if (!u->version || !trimmed(u->version, v, sizeof(v)) || strcmp(v, "13")) {
		snprintf(why, whylen, "Sec-WebSocket-Version must be 13 (RFC 6455)");
		return 426;
	}
	/* 16 bytes are 24 characters of base64, the last two "==". */
	key_ok = u->key && trimmed(u->key, v, sizeof(v)) && strlen(v) == 24 &&
		 buf_add_unbase64(&raw, v, 24) == 0 && raw.len == 16;
	buf_free(&raw);
	if (!key_ok) {
		snprintf(why, whylen, "Sec-WebSocket-Key must be 16 bytes in base64");
		return 400;
	}
	ws_accept(v, accept);
	return 0;
}

/* ---- UTF-8 and close codes --------------------------------------------------- */

bool ws_utf8_valid(const void *s, size_t len)
{
	const unsigned char *p = s, *end = p + len;

	while (p < end) {
		unsigned char c = *p;
		size_t n;
		unsigned cp, min;

		if (c < 0x80) {
			p++;
			continue;
		}
		if (c >= 0xC2 && c <= 0xDF) {
			n = 1;
			cp = c & 0x1F;
			min = 0x80;
		} else if (c >= 0xE0 && c <= 0xEF) {
			n = 2;
			cp = c & 0x0F;
			min = 0x800;
		} else if (c >= 0xF0 && c <= 0xF4) {
			n = 3;
			cp = c & 0x07;
			min = 0x10000;
		} else {
			return false;	/* a continuation byte first, C0, C1, F5-FF */
		}
		if ((size_t)(end - p) <= n)
			return false;
		for (size_t i = 1; i <= n; i++) {
			if ((p[i] & 0xC0) != 0x80)
				return false;
			cp = cp << 6 | (p[i] & 0x3F);
		}
		if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
			return false;
		p += n + 1;
	}
	return true;
}

bool ws_close_code_valid(int code)
{
	/* 1004-1006 and 1015 are never sent; 1012-1014 IANA registered
	 * after RFC 6455; 3000-3999 registered, 4000-4999 private. */
	return (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) ||
	       (code >= 3000 && code <= 4999);
}

/* ---- the parser ---------------------------------------------------------------- */

enum stage { ST_HEAD, ST_PAYLOAD };

struct ws_parser {
	size_t max;
	enum stage stage;
	/* The frame's head as it arrives: 2 bytes, then up to 8 of length
	 * and 4 of mask. */
	unsigned char head[14];
	size_t head_len, head_need;
	/* The frame. */
	unsigned op;
	bool fin;
	uint64_t plen, pgot;
	unsigned char mask[4];
	/* The data message being put together (msg_op 0: none), and whether
	 * it was handed out by the last call (emptied at the next). */
	unsigned msg_op;
	struct buf msg;
	bool msg_given;
	/* A control frame's payload (and a NUL). */
	unsigned char ctl[126];
	size_t ctl_len;
	char reason[124];
	/* After a close or an error: what every later call answers. */
	bool done;
	struct ws_msg last;
};

struct ws_parser *ws_parser_new(size_t max_message)
{
	struct ws_parser *p = calloc(1, sizeof(*p));

	if (!p)
		abort();
	p->max = max_message;
	p->stage = ST_HEAD;
	p->head_need = 2;
	return p;
}

void ws_parser_free(struct ws_parser *p)
{
	if (!p)
		return;
	buf_free(&p->msg);
	free(p);
}

/* The parser stops on an error: MSG says it, and so will every later call.
 * Returns false, for the checks' one-line refusals. */
static bool fail(struct ws_parser *p, struct ws_msg *msg, int code, const char *why)
{
	*msg = (struct ws_msg){ .kind = WS_ERROR, .data = (const unsigned char *)"", .code = code,
				.why = why };
	p->done = true;
	p->last = *msg;
	return false;
}

/* The head is whole (HEAD_LEN == HEAD_NEED): the frame's length and mask,
 * checked.  False after fail(). */
static bool head_parse(struct ws_parser *p, struct ws_msg *msg)
{
	unsigned len7 = p->head[1] & 0x7F;
	const unsigned char *h = p->head + 2;
	uint64_t n = len7;

	if (len7 == 126) {
		n = (uint64_t)h[0] << 8 | h[1];
		h += 2;
		if (n < 126)
			return fail(p, msg, WS_CLOSE_PROTOCOL, "a length not in its shortest form");
	} else if (len7 == 127) {
		n = 0;
		for (int i = 0; i < 8; i++)
			n = n << 8 | h[i];
		h += 8;
		if (n >> 63)
			return fail(p, msg, WS_CLOSE_PROTOCOL, "a 64-bit length with its top bit "
				    "set");
		if (n <= 0xFFFF)
			return fail(p, msg, WS_CLOSE_PROTOCOL, "a length not in its shortest form");
	}
	memcpy(p->mask, h, 4);
	p->plen = n;
	p->pgot = 0;
	if (!(p->op & 8) && n > p->max - p->msg.len)
		return fail(p, msg, WS_CLOSE_TOO_BIG, "a message over the size allowed");
	if (p->op & 8)
		p->ctl_len = 0;
	return true;
}

/* The first two bytes of a head: what they say is checked at once. */
static bool head_start(struct ws_parser *p, struct ws_msg *msg)
{
	unsigned b0 = p->head[0], b1 = p->head[1], len7 = b1 & 0x7F;

	p->fin = b0 & 0x80;
	p->op = b0 & 0x0F;
	if (b0 & 0x70)
		return fail(p, msg, WS_CLOSE_PROTOCOL, "a reserved bit is set (no extension was "
			    "agreed)");
	if (p->op != WS_OP_CONT && p->op != WS_OP_TEXT && p->op != WS_OP_BINARY &&
	    p->op != WS_OP_CLOSE && p->op != WS_OP_PING && p->op != WS_OP_PONG)
		return fail(p, msg, WS_CLOSE_PROTOCOL, "a reserved opcode");
	if (!(b1 & 0x80))
		return fail(p, msg, WS_CLOSE_PROTOCOL, "a client's frame must be masked");
	if (p->op & 8) {
		if (!p->fin)
			return fail(p, msg, WS_CLOSE_PROTOCOL, "a fragmented control frame");
		if (len7 > 125)
			return fail(p, msg, WS_CLOSE_PROTOCOL, "a control frame over 125 bytes");
	} else if (p->op == WS_OP_CONT && !p->msg_op) {
		return fail(p, msg, WS_CLOSE_PROTOCOL, "a continuation frame without a message "
			    "to continue");
	} else if (p->op != WS_OP_CONT && p->msg_op) {
		return fail(p, msg, WS_CLOSE_PROTOCOL, "a new message before the end of a "
			    "fragmented one");
	}
	p->head_need = 2 + (len7 == 126 ? 2 : len7 == 127 ? 8 : 0) + 4;
	return true;
}

/* The frame's payload is all in: a message to give, or none yet.  False
 * after fail(). */
static bool frame_end(struct ws_parser *p, struct ws_msg *msg)
{
	p->stage = ST_HEAD;
	p->head_len = 0;
	p->head_need = 2;
	if (p->op & 8) {
		p->ctl[p->ctl_len] = '\0';
		*msg = (struct ws_msg){ .data = p->ctl, .len = p->ctl_len };
		if (p->op == WS_OP_PING) {
			msg->kind = WS_PING;
		} else if (p->op == WS_OP_PONG) {
			msg->kind = WS_PONG;
		} else {
			msg->kind = WS_CLOSE;
			msg->code = WS_CLOSE_NO_STATUS;
			msg->why = p->reason;
			p->reason[0] = '\0';
			if (p->ctl_len == 1)
				return fail(p, msg, WS_CLOSE_PROTOCOL, "a close frame of 1 byte");
			if (p->ctl_len >= 2) {
				msg->code = p->ctl[0] << 8 | p->ctl[1];
				if (!ws_close_code_valid(msg->code))
					return fail(p, msg, WS_CLOSE_PROTOCOL, "a close code that "
						    "may not be sent");
				if (!ws_utf8_valid(p->ctl + 2, p->ctl_len - 2))
					return fail(p, msg, WS_CLOSE_INVALID_DATA, "a close "
						    "reason that is not UTF-8");
				memcpy(p->reason, p->ctl + 2, p->ctl_len - 2);
				p->reason[p->ctl_len - 2] = '\0';
			}
			p->done = true;
			p->last = *msg;
		}
		return true;
	}
	if (p->op != WS_OP_CONT)
		p->msg_op = p->op;
	if (!p->fin)
		return true;
	if (p->msg_op == WS_OP_TEXT && !ws_utf8_valid(buf_str(&p->msg), p->msg.len))
		return fail(p, msg, WS_CLOSE_INVALID_DATA, "a text message that is not UTF-8");
	*msg = (struct ws_msg){ .kind = p->msg_op == WS_OP_TEXT ? WS_TEXT : WS_BINARY,
				.data = (const unsigned char *)buf_str(&p->msg), .len = p->msg.len };
	p->msg_op = 0;
	p->msg_given = true;
	return true;
}

size_t ws_parser_feed(struct ws_parser *p, const void *data, size_t len, struct ws_msg *msg)
{
	const unsigned char *in = data;
	size_t used = 0;

	*msg = (struct ws_msg){ .kind = WS_NONE, .data = (const unsigned char *)"" };
	if (p->done) {
		*msg = p->last;
		return 0;
	}
	if (p->msg_given) {
		buf_reset(&p->msg);
		p->msg_given = false;
	}
	while (msg->kind == WS_NONE) {
		if (p->stage == ST_HEAD) {
			if (used == len)
				break;
			p->head[p->head_len++] = in[used++];
			if (p->head_len == 2 && !head_start(p, msg))
				break;
			if (p->head_len < p->head_need)
				continue;
			if (!head_parse(p, msg))
				break;
			p->stage = ST_PAYLOAD;
		}
		/* ST_PAYLOAD (a frame of 0 bytes ends here with none). */
		size_t take = len - used;
		if (take > p->plen - p->pgot)
			take = (size_t)(p->plen - p->pgot);
		if (take) {
			unsigned char *dst;
			if (p->op & 8) {
				dst = p->ctl + p->ctl_len;
				p->ctl_len += take;
			} else {
				buf_reserve(&p->msg, take);
				dst = (unsigned char *)p->msg.data + p->msg.len;
				p->msg.len += take;
			}
			for (size_t i = 0; i < take; i++)
				dst[i] = in[used + i] ^ p->mask[(p->pgot + i) & 3];
			if (!(p->op & 8))
				p->msg.data[p->msg.len] = '\0';
			used += take;
			p->pgot += take;
		}
		if (p->pgot < p->plen)
			break;
		frame_end(p, msg);
	}
	return used;
}

/* ---- frames to a client ------------------------------------------------------ */

void ws_frame_add(struct buf *out, enum ws_opcode op, const void *data, size_t len)
{
	unsigned char h[10];
	size_t n = 0;

	if ((op & 8) && len > 125)
		abort();
	h[n++] = (unsigned char)(0x80 | op);
	if (len < 126) {
		h[n++] = (unsigned char)len;
	} else if (len <= 0xFFFF) {
		h[n++] = 126;
		h[n++] = (unsigned char)(len >> 8);
		h[n++] = (unsigned char)len;
	} else {
		h[n++] = 127;
		for (int i = 7; i >= 0; i--)
			h[n++] = (unsigned char)((uint64_t)len >> (8 * i));
	}
	buf_reserve(out, n + len);
	buf_add(out, h, n);
	buf_add(out, data, len);
}

void ws_close_add(struct buf *out, int code, const char *reason)
{
	unsigned char p[125];
	size_t n = strlen(reason);

	if (n > sizeof(p) - 2) {
		n = sizeof(p) - 2;
		/* Not in the middle of a character. */
		while (n && ((unsigned char)reason[n] & 0xC0) == 0x80)
			n--;
	}
	p[0] = (unsigned char)(code >> 8);
	p[1] = (unsigned char)code;
	memcpy(p + 2, reason, n);
	ws_frame_add(out, WS_OP_CLOSE, p, n + 2);
}
