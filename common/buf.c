#include "common/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/banned.h"

static void buf_grow(struct buf *b, size_t extra)
{
	size_t need = b->len + extra + 1;

	if (need <= b->cap)
		return;
	size_t cap = b->cap ? b->cap : 64;
	while (cap < need)
		cap *= 2;
	char *p = realloc(b->data, cap);
	if (!p)
		abort();
	b->data = p;
	b->cap = cap;
}

void buf_reserve(struct buf *b, size_t extra)
{
	buf_grow(b, extra);
	b->data[b->len] = '\0';
}

void buf_add(struct buf *b, const void *data, size_t len)
{
	buf_grow(b, len);
	if (len)
		memcpy(b->data + b->len, data, len);
	b->len += len;
	b->data[b->len] = '\0';
}

void buf_adds(struct buf *b, const char *s)
{
	buf_add(b, s, strlen(s));
}

void buf_printf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		abort();
	buf_grow(b, (size_t)n);
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

void buf_add_xml(struct buf *b, const char *s)
{
	for (; *s; s++) {
		switch (*s) {
		case '&': buf_adds(b, "&amp;"); break;
		case '<': buf_adds(b, "&lt;"); break;
		case '>': buf_adds(b, "&gt;"); break;
		case '\'': buf_adds(b, "&apos;"); break;
		case '"': buf_adds(b, "&quot;"); break;
		default: buf_add(b, s, 1);
		}
	}
}

void buf_add_shquoted(struct buf *b, const char *s)
{
	if (*s && strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
			   "0123456789-_./=:,+@%") == strlen(s)) {
		buf_adds(b, s);
		return;
	}
	buf_adds(b, "'");
	for (; *s; s++) {
		if (*s == '\'')
			buf_adds(b, "'\\''");
		else
			buf_add(b, s, 1);
	}
	buf_adds(b, "'");
}

static const char b64_chars[] =
	"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

void buf_add_base64(struct buf *b, const void *data, size_t len)
{
	const unsigned char *p = data;
	char q[4];
	size_t i;

	buf_reserve(b, (len + 2) / 3 * 4);
	for (i = 0; i + 2 < len; i += 3) {
		q[0] = b64_chars[p[i] >> 2];
		q[1] = b64_chars[(p[i] & 3) << 4 | p[i + 1] >> 4];
		q[2] = b64_chars[(p[i + 1] & 15) << 2 | p[i + 2] >> 6];
		q[3] = b64_chars[p[i + 2] & 63];
		buf_add(b, q, 4);
	}
	if (i < len) {
		q[0] = b64_chars[p[i] >> 2];
		if (i + 1 < len) {
			q[1] = b64_chars[(p[i] & 3) << 4 | p[i + 1] >> 4];
			q[2] = b64_chars[(p[i + 1] & 15) << 2];
		} else {
			q[1] = b64_chars[(p[i] & 3) << 4];
			q[2] = '=';
		}
		q[3] = '=';
		buf_add(b, q, 4);
	}
}

static int b64_value(char c)
{
	const char *p = c ? strchr(b64_chars, c) : NULL;

	return p ? (int)(p - b64_chars) : -1;
}

int buf_add_unbase64(struct buf *b, const char *s, size_t len)
{
	size_t i, start = b->len;
	unsigned acc = 0;
	int bits = 0, v;
	unsigned char c;

	size_t pad = 0;

	/* Padding: at most two '=', only at the end, to a multiple of 4. */
	while (len > 0 && s[len - 1] == '=') {
		len--;
		pad++;
	}
	if (pad > 2 || (pad && ((len + pad) & 3)) || (len & 3) == 1)
		return -1;
	for (i = 0; i < len; i++) {
		v = b64_value(s[i]);
		if (v < 0) {
			b->len = start;
			if (b->data)
				b->data[start] = '\0';
			return -1;
		}
		acc = acc << 6 | (unsigned)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			c = (unsigned char)(acc >> bits);
			buf_add(b, &c, 1);
			acc &= (1u << bits) - 1;
		}
	}
	return 0;
}

const char *buf_str(const struct buf *b)
{
	return b->data ? b->data : "";
}

char *buf_detach(struct buf *b)
{
	char *p = b->data;

	if (!p) {
		p = strdup("");
		if (!p)
			abort();
	}
	b->data = NULL;
	b->len = b->cap = 0;
	return p;
}

void buf_reset(struct buf *b)
{
	b->len = 0;
	if (b->data)
		b->data[0] = '\0';
}

void buf_free(struct buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
}

/* The length of the valid UTF-8 sequence at P (1 to 4), or 0 when it is
 * not one (overlong, surrogate, above U+10FFFF, cut short). */
static size_t utf8_len(const unsigned char *p)
{
	if (p[0] < 0x80)
		return 1;
	if (p[0] >= 0xc2 && p[0] <= 0xdf)
		return (p[1] & 0xc0) == 0x80 ? 2 : 0;
	if (p[0] >= 0xe0 && p[0] <= 0xef) {
		if ((p[1] & 0xc0) != 0x80 || (p[2] & 0xc0) != 0x80)
			return 0;
		if ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] >= 0xa0))
			return 0;
		return 3;
	}
	if (p[0] >= 0xf0 && p[0] <= 0xf4) {
		if ((p[1] & 0xc0) != 0x80 || (p[2] & 0xc0) != 0x80 || (p[3] & 0xc0) != 0x80)
			return 0;
		if ((p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] >= 0x90))
			return 0;
		return 4;
	}
	return 0;
}

void buf_add_json_str(struct buf *b, const char *s)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *p = (const unsigned char *)s, *run = p;

	buf_add(b, "\"", 1);
	while (*p) {
		size_t n = utf8_len(p);
		if (n > 1 || (n == 1 && *p >= 0x20 && *p != '"' && *p != '\\')) {
			p += n;
			continue;
		}
		buf_add(b, run, (size_t)(p - run));
		switch (n ? *p : 0x100) {
		case '"': buf_add(b, "\\\"", 2); break;
		case '\\': buf_add(b, "\\\\", 2); break;
		case '\n': buf_add(b, "\\n", 2); break;
		case '\t': buf_add(b, "\\t", 2); break;
		case 0x100: buf_add(b, "\\ufffd", 6); break;  /* not UTF-8 */
		default: {
			char u[6] = { '\\', 'u', '0', '0', hex[*p >> 4], hex[*p & 15] };
			buf_add(b, u, sizeof(u));
		}
		}
		run = ++p;
	}
	buf_add(b, run, (size_t)(p - run));
	buf_add(b, "\"", 1);
}
