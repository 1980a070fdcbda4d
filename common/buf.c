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
