/*
 * Fuzz harness: what users and guests give the credential broker's rules
 * (hostd/secrets_rules.c): a secret's URL and header lines (POST
 * /v1/secrets, `berth secret add`), a guest's path after its secret's
 * name (each call).  The input is all three at once (a NUL ends it).
 * Invariants, abort() otherwise: a URL taken is https://, has no user
 * ('@' before its path), query, fragment or dot segment, and is its own
 * canonical form; a header
 * taken has a token for a name and no control byte in its value; a path
 * taken, joined to a URL, leaves no "." or ".." segment before its query
 * and no encoded '/'.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "hostd/secrets.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Whether the path part of S (up to '?') has a "." or ".." segment, %2e
 * read as the dot it may become upstream. */
static int dot_segment(const char *raw)
{
	char s[8192];
	size_t n = 0;

	for (const char *p = raw; *p && n + 1 < sizeof(s); p++) {
		if (p[0] == '%' && p[1] == '2' && (p[2] == 'e' || p[2] == 'E')) {
			s[n++] = '.';
			p += 2;
		} else {
			s[n++] = *p;
		}
	}
	s[n] = '\0';
	size_t q = strcspn(s, "?");

	for (size_t i = 0; i < q; i++) {
		if (s[i] != '/')
			continue;
		size_t l = strcspn(s + i + 1, "/?");
		if ((l == 1 && s[i + 1] == '.') || (l == 2 && s[i + 1] == '.' && s[i + 2] == '.'))
			return 1;
	}
	return 0;
}

static void fail(const char *what, const char *s)
{
	fprintf(stderr, "%s: '%s'\n", what, s);
	abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *in = malloc(size + 1), canon[512], again[512], name[65], value[4097], log[512];
	char url[8192];
	struct err e = { 0 };

	if (!in)
		return 0;
	memcpy(in, data, size);
	in[size] = '\0';
	if (secrets_url_check(in, canon, sizeof(canon), &e) == 0) {
		size_t auth = strcspn(canon + 8, "/");
		if (strncmp(canon, "https://", 8) != 0 || strpbrk(canon, "?# ") ||
		    memchr(canon + 8, '@', auth) || dot_segment(canon + 8 + auth))
			fail("a URL taken that should not be", canon);
		if (secrets_url_check(canon, again, sizeof(again), &e) < 0 || strcmp(canon, again))
			fail("a canonical URL that is not its own canonical form", canon);
	}
	if (secrets_header_parse(in, name, sizeof(name), value, sizeof(value), &e) == 0) {
		for (const char *p = value; *p; p++)
			if ((unsigned char)*p < 0x20 && *p != '\t')
				fail("a header value with a control byte", in);
		if (!name[0] || strpbrk(name, " \t\r\n:"))
			fail("a header name that is no token", name);
	}
	if (secrets_request_check("POST", in, log, sizeof(log), &e) == 0 &&
	    secrets_url_join("https://x.test/v1", in, url, sizeof(url), &e) == 0) {
		char *q = strchr(url, '?');
		if (q)
			*q = '\0';	/* an encoded '/' in the query is the query's */
		if (dot_segment(url + 14) || strstr(url, "%2f") || strstr(url, "%2F"))
			fail("a path that leaves its secret's URL", url);
		if (strpbrk(log, "?"))
			fail("a logged path with its query", log);
	}
	free(in);
	return 0;
}
