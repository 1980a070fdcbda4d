#include "web/upstream.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/banned.h"

/* Where a chunked body's decoder is. */
enum {
	CH_SIZE,       /* the size line's digits */
	CH_EXT,        /* after the digits: whitespace, an extension, up to CR */
	CH_SIZE_LF,    /* the size line's CR was seen */
	CH_DATA,       /* a chunk's data */
	CH_DATA_CR,    /* the CRLF after it */
	CH_DATA_LF,
	CH_TRAILER,    /* a trailer line, or the empty line that ends them */
	CH_TRAILER_LF,
};

static int fail(char *why, size_t whylen, const char *msg)
{
	snprintf(why, whylen, "%s", msg);
	return -1;
}

/* RFC 9110's tchar. */
static bool is_tchar(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* A field value's byte: VCHAR, obs-text, SP or HTAB. */
static bool is_vbyte(unsigned char c)
{
	return c == '\t' || (c >= 0x20 && c != 0x7f);
}

static void trim(char **s)
{
	char *p = *s, *end = p + strlen(p);

	while (*p == ' ' || *p == '\t')
		p++;
	while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
		*--end = '\0';
	*s = p;
}

const char *upstream_head_get(const struct upstream_head *h, const char *name)
{
	for (size_t i = 0; h && i < h->n; i++)
		if (!strcasecmp(h->name[i], name))
			return h->value[i];
	return NULL;
}

bool upstream_list_has(const char *list, const char *token)
{
	size_t tl = strlen(token);

	while (list && *list) {
		while (*list == ' ' || *list == '\t' || *list == ',')
			list++;
		const char *end = list;
		while (*end && *end != ',')
			end++;
		const char *last = end;
		while (last > list && (last[-1] == ' ' || last[-1] == '\t'))
			last--;
		if ((size_t)(last - list) == tl && !strncasecmp(list, token, tl))
			return true;
		list = end;
	}
	return false;
}

bool upstream_head_has_token(const struct upstream_head *h, const char *name,
			     const char *token)
{
	for (size_t i = 0; h && i < h->n; i++)
		if (!strcasecmp(h->name[i], name) && upstream_list_has(h->value[i], token))
			return true;
	return false;
}

bool upstream_hop_by_hop(const struct upstream_head *h, const char *name)
{
	static const char *const hop[] = { "Connection", "Keep-Alive", "Proxy-Connection", "TE",
					   "Trailer", "Transfer-Encoding", "Upgrade",
					   "Proxy-Authenticate", NULL };

	for (size_t i = 0; hop[i]; i++)
		if (!strcasecmp(hop[i], name))
			return true;
	return upstream_head_has_token(h, "Connection", name);
}

void upstream_head_free(struct upstream_head *h)
{
	if (!h)
		return;
	free(h->text);
	memset(h, 0, sizeof(*h));
}

/* Header lines NAME: VALUE in TEXT (NUL-terminated lines, CRLFs gone) into
 * H; -1 with WHY. */
static int parse_fields(struct upstream_head *h, char *line, const char *end, char *why,
			size_t whylen)
{
	while (line < end) {
		char *colon, *value, *next = line + strlen(line) + 1;
		if (line[0] == ' ' || line[0] == '\t')
			return fail(why, whylen, "obsolete line folding");
		if (h->n == UPSTREAM_HEADERS_MAX)
			return fail(why, whylen, "too many header lines");
		for (colon = line; is_tchar((unsigned char)*colon); colon++)
			;
		if (colon == line || *colon != ':')
			return fail(why, whylen, "a header line is not NAME: VALUE (a token, then a "
				    "colon)");
		*colon = '\0';
		value = colon + 1;
		for (const char *p = value; *p; p++)
			if (!is_vbyte((unsigned char)*p))
				return fail(why, whylen, "a control character in a header's value");
		trim(&value);
		h->name[h->n] = line;
		h->value[h->n++] = value;
		line = next;
	}
	return 0;
}

/* The body's framing and whether the connection is kept, from H's
 * fields; -1 with WHY. */
static int framing(struct upstream_head *h, bool head_request, char *why, size_t whylen)
{
	const char *te = NULL, *cl = NULL;
	int ntes = 0;

	for (size_t i = 0; i < h->n; i++) {
		if (!strcasecmp(h->name[i], "Transfer-Encoding")) {
			te = h->value[i];
			ntes++;
		} else if (!strcasecmp(h->name[i], "Content-Length")) {
			if (cl && strcmp(cl, h->value[i]) != 0)
				return fail(why, whylen, "Content-Lengths that disagree");
			cl = h->value[i];
		}
	}
	if (te && cl)
		return fail(why, whylen, "both Content-Length and Transfer-Encoding");
	if (ntes > 1 || (te && strcasecmp(te, "chunked") != 0))
		return fail(why, whylen, "a Transfer-Encoding other than chunked");
	if (cl) {
		const char *p;
		h->length = 0;
		for (p = cl; *p >= '0' && *p <= '9'; p++) {
			if (h->length > (UINT64_MAX - 9) / 10)
				return fail(why, whylen, "a Content-Length too large");
			h->length = h->length * 10 + (uint64_t)(*p - '0');
		}
		if (p == cl || *p)
			return fail(why, whylen, "a Content-Length that is not a number");
	}
	h->keep_alive = h->minor >= 1 ? !upstream_head_has_token(h, "Connection", "close")
				      : upstream_head_has_token(h, "Connection", "keep-alive");
	if (head_request || h->status < 200 || h->status == 204 || h->status == 304)
		h->framing = UPSTREAM_NONE;
	else if (te)
		h->framing = UPSTREAM_CHUNKED;
	else if (cl)
		h->framing = UPSTREAM_LENGTH;
	else
		h->framing = UPSTREAM_CLOSE;
	if (h->framing == UPSTREAM_CLOSE)
		h->keep_alive = false;
	return 0;
}

ssize_t upstream_head_parse(const char *buf, size_t len, bool head_request,
			    struct upstream_head *h, char *why, size_t whylen)
{
	size_t i, o, start = 0, hlen = 0;
	char *text, *p, *end;

	memset(h, 0, sizeof(*h));
	why[0] = '\0';
	/* Find the blank line, each line checked as it goes: CRLF only, no
	 * line too long, the head within bounds. */
	for (i = 0; i < len; i++) {
		if (buf[i] == '\n') {
			if (i == start || buf[i - 1] != '\r')
				return fail(why, whylen, "a line that does not end in CRLF");
			if (i - start == 1) {
				if (start == 0)
					return fail(why, whylen, "an empty line before the status line");
				hlen = i + 1;
				break;
			}
			start = i + 1;
		} else if (buf[i] == '\0') {
			return fail(why, whylen, "a NUL byte in the head");
		} else if (i - start >= UPSTREAM_LINE_MAX) {
			return fail(why, whylen, "a line of the head is too long");
		}
		if (i + 1 >= UPSTREAM_HEAD_MAX)
			return fail(why, whylen, "the head is too large");
	}
	if (!hlen)
		return 0;
	text = malloc(hlen + 1);
	if (!text)
		abort();
	/* Lines become strings in place: each CRLF one NUL (a lone CR stays,
	 * for the checks below to refuse). */
	for (i = 0, o = 0; i < hlen; i++) {
		if (buf[i] == '\r' && buf[i + 1] == '\n') {
			text[o++] = '\0';
			i++;
		} else {
			text[o++] = buf[i];
		}
	}
	h->text = text;
	/* The status line: HTTP/1.x SSS[ reason]. */
	if (strncmp(text, "HTTP/1.", 7) != 0 || (text[7] != '0' && text[7] != '1') ||
	    text[8] != ' ' || !(text[9] >= '1' && text[9] <= '5') ||
	    !(text[10] >= '0' && text[10] <= '9') || !(text[11] >= '0' && text[11] <= '9') ||
	    (text[12] != ' ' && text[12] != '\0')) {
		fail(why, whylen, "a malformed status line (not HTTP/1.0 or HTTP/1.1, a "
		     "three-digit status and a reason)");
		goto bad;
	}
	for (p = text + 12; *p; p++)
		if (!is_vbyte((unsigned char)*p)) {
			fail(why, whylen, "a control character in the reason");
			goto bad;
		}
	h->minor = text[7] - '0';
	h->status = (text[9] - '0') * 100 + (text[10] - '0') * 10 + (text[11] - '0');
	/* The fields: from after the status line to the blank line's NUL. */
	p = text + strlen(text) + 1;
	end = text + o - 1;
	if (parse_fields(h, p, end, why, whylen) < 0 ||
	    framing(h, head_request, why, whylen) < 0)
		goto bad;
	return (ssize_t)hlen;
bad:
	upstream_head_free(h);
	return -1;
}

void upstream_body_init(struct upstream_body *b, const struct upstream_head *h)
{
	memset(b, 0, sizeof(*b));
	b->framing = h->framing;
	b->left = h->framing == UPSTREAM_LENGTH ? h->length : 0;
	b->state = CH_SIZE;
	b->done = h->framing == UPSTREAM_NONE ||
		  (h->framing == UPSTREAM_LENGTH && h->length == 0);
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int upstream_body_step(struct upstream_body *b, const char *in, size_t inlen, size_t *used,
		       const char **out, size_t *outlen, char *why, size_t whylen)
{
	size_t i = 0;

	*used = 0;
	*out = NULL;
	*outlen = 0;
	if (b->done)
		return 1;
	switch (b->framing) {
	case UPSTREAM_NONE:
		b->done = true;
		return 1;
	case UPSTREAM_CLOSE:
		*out = in;
		*outlen = *used = inlen;
		return 0;
	case UPSTREAM_LENGTH: {
		size_t n = inlen < b->left ? inlen : (size_t)b->left;
		*out = in;
		*outlen = *used = n;
		b->left -= n;
		b->done = b->left == 0;
		return b->done ? 1 : 0;
	}
	case UPSTREAM_CHUNKED:
		break;
	}
	/* Chunked: the framing byte by byte, a chunk's data at once. */
	while (i < inlen) {
		char c = in[i];
		if (b->state == CH_DATA) {
			size_t n = inlen - i < b->left ? inlen - i : (size_t)b->left;
			*out = in + i;
			*outlen = n;
			b->left -= n;
			if (!b->left)
				b->state = CH_DATA_CR;
			*used = i + n;
			return 0;
		}
		i++;
		if (b->state != CH_DATA_CR && b->state != CH_DATA_LF && ++b->line > UPSTREAM_LINE_MAX)
			return fail(why, whylen, "a chunk's size or trailer line is too long");
		switch (b->state) {
		case CH_SIZE: {
			int v = hexval(c);
			if (v >= 0) {
				if (++b->digits > 16)
					return fail(why, whylen, "a chunk size of more than 16 hex digits");
				b->left = b->left << 4 | (uint64_t)v;
				break;
			}
			if (!b->digits)
				return fail(why, whylen, "a chunk size line without a size");
			/* The byte after the digits is the extension's. */
			b->state = CH_EXT;
		}
			/* fall through */
		case CH_EXT:
			if (c == '\r')
				b->state = CH_SIZE_LF;
			else if (c == '\n' || !is_vbyte((unsigned char)c))
				return fail(why, whylen, "a malformed chunk size line");
			break;
		case CH_SIZE_LF:
			if (c != '\n')
				return fail(why, whylen, "a chunk size line that does not end in CRLF");
			b->line = 0;
			b->digits = 0;
			b->state = b->left ? CH_DATA : CH_TRAILER;
			break;
		case CH_DATA_CR:
			if (c != '\r')
				return fail(why, whylen, "a chunk's data not followed by CRLF");
			b->state = CH_DATA_LF;
			break;
		case CH_DATA_LF:
			if (c != '\n')
				return fail(why, whylen, "a chunk's data not followed by CRLF");
			b->state = CH_SIZE;
			b->line = 0;
			break;
		case CH_TRAILER:
			if (c == '\r') {
				b->state = CH_TRAILER_LF;
			} else if (c == '\n' || !is_vbyte((unsigned char)c)) {
				return fail(why, whylen, "a malformed trailer line");
			} else if (++b->trailer > UPSTREAM_HEAD_MAX) {
				return fail(why, whylen, "trailers too large");
			}
			break;
		case CH_TRAILER_LF:
			if (c != '\n')
				return fail(why, whylen, "a trailer line that does not end in CRLF");
			if (b->line == 2) {      /* the empty line: the end */
				b->done = true;
				*used = i;
				return 1;
			}
			if (++b->trailers > UPSTREAM_HEADERS_MAX)
				return fail(why, whylen, "too many trailer lines");
			b->line = 0;
			b->state = CH_TRAILER;
			break;
		}
	}
	*used = i;
	return 0;
}

int upstream_body_eof(const struct upstream_body *b)
{
	return b->done || b->framing == UPSTREAM_CLOSE ? 1 : -1;
}
