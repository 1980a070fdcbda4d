#include "web/request.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common/banned.h"

/* RFC 9110's tchar. */
static bool is_tchar(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

bool web_token_ok(const char *s, size_t len)
{
	if (!s || len == 0)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!is_tchar((unsigned char)s[i]))
			return false;
	return true;
}

bool web_value_ok(const char *v, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (v[i] == '\r' || v[i] == '\n' || v[i] == '\0')
			return false;
	return true;
}

static int refuse(struct web_framing *f, char *why, size_t whylen, const char *msg)
{
	*f = (struct web_framing){ 0 };
	snprintf(why, whylen, "%s", msg);
	return 400;
}

int web_framing_parse(const char *te, const char *cl, struct web_framing *f, char *why,
		      size_t whylen)
{
	uint64_t v = 0;

	*f = (struct web_framing){ 0 };
	if (te && cl)
		return refuse(f, why, whylen, "a request with both Transfer-Encoding and "
			      "Content-Length is refused");
	if (te) {
		/* libmicrohttpd decodes "chunked" alone; any other coding it
		 * would read until the connection closes. */
		if (strcasecmp(te, "chunked") != 0)
			return refuse(f, why, whylen, "Transfer-Encoding must be \"chunked\"");
		f->has_body = f->chunked = true;
		return 0;
	}
	if (cl) {
		size_t n = strlen(cl);
		if (n == 0 || n > 19 || strspn(cl, "0123456789") != n)
			return refuse(f, why, whylen, "Content-Length must be a number of bytes");
		for (size_t i = 0; i < n; i++)
			v = v * 10 + (uint64_t)(cl[i] - '0');
		/* (a length signed 64 bits hold: libcurl's and off_t's) */
		if (v > INT64_MAX)
			return refuse(f, why, whylen, "Content-Length is too large");
		f->length = v;
		f->has_body = v > 0;
	}
	return 0;
}

/* What the walk over the headers found. */
struct walk {
	const char *te, *cl;
	int n_te, n_cl;
	const char *bad;          /* the first refusal's reason, or NULL */
};

static enum MHD_Result walk_header(void *cls, enum MHD_ValueKind kind, const char *key,
				   size_t key_size, const char *value, size_t value_size)
{
	struct walk *w = cls;

	(void)kind;
	if (!web_token_ok(key, key_size) || (key && strlen(key) != key_size)) {
		w->bad = "a header's name is not a token (no space before its colon, no control "
			 "character)";
		return MHD_NO;
	}
	if (value && (!web_value_ok(value, value_size) || strlen(value) != value_size)) {
		w->bad = "a header's value has a CR, LF or NUL";
		return MHD_NO;
	}
	if (!strcasecmp(key, "Transfer-Encoding")) {
		w->te = value ? value : "";
		w->n_te++;
	} else if (!strcasecmp(key, "Content-Length")) {
		w->cl = value ? value : "";
		w->n_cl++;
	}
	return MHD_YES;
}

int web_request_check(struct MHD_Connection *c, const char *method, struct web_framing *f,
		      char *why, size_t whylen)
{
	struct walk w = { 0 };

	*f = (struct web_framing){ 0 };
	if (!method || !web_token_ok(method, strlen(method)))
		return refuse(f, why, whylen, "the method is not a token");
	MHD_get_connection_values_n(c, MHD_HEADER_KIND, walk_header, &w);
	if (w.bad)
		return refuse(f, why, whylen, w.bad);
	if (w.n_te > 1 || w.n_cl > 1)
		return refuse(f, why, whylen, w.n_te > 1 ? "Transfer-Encoding more than once" :
			      "Content-Length more than once");
	return web_framing_parse(w.te, w.cl, f, why, whylen);
}

int web_body_pass(bool chunked, uint64_t *left, const char *data, size_t len,
		  web_write_fn *write, void *ctx)
{
	char frame[32];
	int n;

	if (!chunked) {
		if (len > *left)
			len = (size_t)*left;
		*left -= len;
	}
	if (!len)
		return 0;
	n = snprintf(frame, sizeof(frame), "%zx\r\n", len);
	if ((chunked && write(ctx, frame, (size_t)n) < 0) || write(ctx, data, len) < 0 ||
	    (chunked && write(ctx, "\r\n", 2) < 0))
		return -1;
	return 0;
}

int web_body_end(bool chunked, web_write_fn *write, void *ctx)
{
	return chunked ? write(ctx, "0\r\n\r\n", 5) : 0;
}
