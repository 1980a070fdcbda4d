#include "web/multipart.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common/banned.h"

/* Token characters of RFC 9110, for unquoted parameter values. */
static bool tchar(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* RFC 2046's bchars. */
static bool bchar(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c && strchr("'()+_,-./:=? ", c));
}

int multipart_boundary(const char *ct, char *out, size_t outlen)
{
	const char *p;
	size_t n = 0;

	if (!ct || strncasecmp(ct, "multipart/form-data", 19) ||
	    (ct[19] && ct[19] != ';' && ct[19] != ' '))
		return -1;
	for (p = ct + 19; *p; p++) {
		while (*p == ' ' || *p == ';' || *p == '\t')
			p++;
		if (!strncasecmp(p, "boundary=", 9)) {
			p += 9;
			bool q = *p == '"';
			p += q;
			while (*p && (q ? *p != '"' : *p != ';' && *p != ' ')) {
				if (!bchar(*p) || n + 1 >= outlen || n >= MULTIPART_BOUNDARY_MAX)
					return -1;
				out[n++] = *p++;
			}
			if (q && *p != '"')
				return -1;
			out[n] = '\0';
			/* A boundary does not end with a space (RFC 2046). */
			return n && out[n - 1] != ' ' ? 0 : -1;
		}
		while (*p && *p != ';')
			p++;
		if (!*p)
			break;
	}
	return -1;
}

static const char *find(const char *h, size_t hl, const char *n, size_t nl)
{
	return memmem(h, hl, n, nl);
}

/* Parameter KEY of the header value [V, E) into OUT: a quoted string (a
 * backslash escapes the next character) or a token.  1 found, 0 not, -1
 * malformed or too long. */
static int param(const char *v, const char *e, const char *key, char *out, size_t outlen)
{
	size_t kl = strlen(key);
	const char *p = v;

	out[0] = '\0';
	while (p < e) {
		while (p < e && *p != ';')
			p++;
		if (p >= e)
			return 0;
		p++;
		while (p < e && (*p == ' ' || *p == '\t'))
			p++;
		if ((size_t)(e - p) > kl && !strncasecmp(p, key, kl) && p[kl] == '=') {
			size_t n = 0;
			p += kl + 1;
			if (p < e && *p == '"') {
				for (p++; p < e && *p != '"'; p++) {
					if (*p == '\\' && p + 1 < e)
						p++;
					if ((unsigned char)*p < 0x20 || *p == 0x7f || n + 1 >= outlen)
						return -1;
					out[n++] = *p;
				}
				if (p >= e)
					return -1;
			} else {
				for (; p < e && tchar(*p); p++) {
					if (n + 1 >= outlen)
						return -1;
					out[n++] = *p;
				}
			}
			out[n] = '\0';
			return 1;
		}
	}
	return 0;
}

/* The header block [H, E) of a part into P. 0 or -1 with WHY. */
static int part_head(const char *h, const char *e, struct multipart_part *p, char *why,
		     size_t whylen)
{
	p->name[0] = p->filename[0] = '\0';
	while (h < e) {
		const char *eol = find(h, (size_t)(e - h), "\r\n", 2);
		if (!eol)
			eol = e;
		const char *colon = memchr(h, ':', (size_t)(eol - h));
		if (!colon) {
			snprintf(why, whylen, "a part's header line has no ':'");
			return -1;
		}
		if ((size_t)(colon - h) == 19 && !strncasecmp(h, "Content-Disposition", 19)) {
			const char *v = colon + 1;
			while (v < eol && (*v == ' ' || *v == '\t'))
				v++;
			if ((size_t)(eol - v) < 9 || strncasecmp(v, "form-data", 9)) {
				snprintf(why, whylen, "a part's Content-Disposition is not form-data");
				return -1;
			}
			if (param(v, eol, "name", p->name, sizeof(p->name)) < 0 ||
			    param(v, eol, "filename", p->filename, sizeof(p->filename)) < 0) {
				snprintf(why, whylen, "a part's Content-Disposition has a malformed "
					 "or too long name or filename");
				return -1;
			}
		}
		h = eol + 2;
	}
	return 0;
}

int multipart_parse(const char *body, size_t len, const char *boundary,
		    struct multipart_part *parts, int max, char *why, size_t whylen)
{
	char delim[MULTIPART_BOUNDARY_MAX + 5];
	size_t dl;
	const char *p, *end = body + len;
	int n = 0;

	if (!boundary || !*boundary || strlen(boundary) > MULTIPART_BOUNDARY_MAX) {
		snprintf(why, whylen, "no multipart boundary");
		return -1;
	}
	dl = (size_t)snprintf(delim, sizeof(delim), "\r\n--%s", boundary);
	/* The first delimiter may open the body (without the CRLF before). */
	if (len >= dl - 2 && !memcmp(body, delim + 2, dl - 2))
		p = body + dl - 2;
	else if ((p = find(body, len, delim, dl)))
		p += dl;
	else {
		snprintf(why, whylen, "the body has no multipart delimiter");
		return -1;
	}
	for (;;) {
		/* After a delimiter: "--" (the end) or CRLF (a part). */
		if (end - p >= 2 && p[0] == '-' && p[1] == '-')
			return n;
		while (p < end && (*p == ' ' || *p == '\t'))
			p++;
		if (end - p < 2 || p[0] != '\r' || p[1] != '\n') {
			snprintf(why, whylen, "a multipart delimiter is not followed by CRLF");
			return -1;
		}
		p += 2;
		size_t room = (size_t)(end - p);
		const char *hstart = p, *he;
		if (room >= 2 && p[0] == '\r' && p[1] == '\n')
			he = p - 2;      /* no header line at all */
		else
			he = find(p, room < MULTIPART_HEAD_MAX + 4 ? room : MULTIPART_HEAD_MAX + 4,
				  "\r\n\r\n", 4);
		if (!he) {
			snprintf(why, whylen, "a part's headers do not end within %d bytes",
				 MULTIPART_HEAD_MAX);
			return -1;
		}
		if (n >= max) {
			snprintf(why, whylen, "more than %d parts", max);
			return -1;
		}
		if (he >= hstart && part_head(hstart, he, &parts[n], why, whylen) < 0)
			return -1;
		if (he < hstart)
			parts[n].name[0] = parts[n].filename[0] = '\0';
		const char *data = he + 4;
		const char *de = find(data, (size_t)(end - data), delim, dl);
		if (!de) {
			snprintf(why, whylen, "a part does not end with its delimiter");
			return -1;
		}
		parts[n].data = data;
		parts[n].len = (size_t)(de - data);
		n++;
		p = de + dl;
	}
}
