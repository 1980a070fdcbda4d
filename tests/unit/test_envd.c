/*
 * Unit tests of berth-web's envd pieces that parse bytes from the network
 * (web/envd.h, web/multipart.h): the envd host's sandbox id, the access
 * token's forms, the multipart boundary of a Content-Type, and multipart
 * bodies as the e2b SDK sends them (one part, two, a relative filename),
 * and refused (cut short, no delimiter, headers too long, too many parts).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "web/envd.h"
#include "web/multipart.h"
#include "tests/unit/tap.h"

static void test_host(void)
{
	char id[128];

	check(envd_host_id("49983-m-alice.localhost:8080", "localhost", id, sizeof(id)) &&
	      !strcmp(id, "m-alice"), "49983-m-alice.localhost:8080 is sandbox m-alice's envd");
	check(envd_host_id("49983-E2B-1234abcd-BOB.Berth.Test", "berth.test", id, sizeof(id)) &&
	      !strcmp(id, "e2b-1234abcd-bob"), "case does not matter");
	check(!envd_host_id("3000-m-alice.localhost", "localhost", id, sizeof(id)),
	      "another port is a preview's");
	check(!envd_host_id("49983-.localhost", "localhost", id, sizeof(id)), "no id: none");
	check(!envd_host_id("49983-m-alice.other.test", "localhost", id, sizeof(id)),
	      "another domain: none");
	check(!envd_host_id("api.localhost", "localhost", id, sizeof(id)), "api.DOMAIN: none");
}

static void test_token(void)
{
	char t[80], hex[65];

	memset(hex, 'a', 64);
	hex[64] = '\0';
	char v[80];
	snprintf(v, sizeof(v), "e2b_%s", hex);
	check(envd_token_of(v, t, sizeof(t)) && !strncmp(t, "berth_", 6) && !strcmp(t + 6, hex),
	      "e2b_HEX is the token berth_HEX");
	snprintf(v, sizeof(v), "berth_%s", hex);
	check(envd_token_of(v, t, sizeof(t)) && !strcmp(t, v), "berth_HEX as it is");
	snprintf(v, sizeof(v), "berth_%.63s", hex);
	check(!envd_token_of(v, t, sizeof(t)), "63 digits: refused");
	snprintf(v, sizeof(v), "berth_%.63sA", hex);
	check(!envd_token_of(v, t, sizeof(t)), "upper case: refused");
	snprintf(v, sizeof(v), "berth_%.63s\r", hex);
	check(!envd_token_of(v, t, sizeof(t)), "a CR: refused");
	check(!envd_token_of("tok123", t, sizeof(t)) && !envd_token_of(NULL, t, sizeof(t)),
	      "anything else: refused");
}

static void test_boundary(void)
{
	char b[MULTIPART_BOUNDARY_MAX + 1];

	check(multipart_boundary("multipart/form-data; boundary=----abc123", b, sizeof(b)) == 0 &&
	      !strcmp(b, "----abc123"), "a plain boundary");
	check(multipart_boundary("multipart/form-data; charset=x; boundary=\"a b:c\"", b,
				 sizeof(b)) == 0 && !strcmp(b, "a b:c"), "a quoted one after another parameter");
	check(multipart_boundary("application/json; boundary=x", b, sizeof(b)) < 0,
	      "not multipart/form-data: refused");
	check(multipart_boundary("multipart/form-data", b, sizeof(b)) < 0, "no boundary: refused");
	check(multipart_boundary("multipart/form-data; boundary=\"abc", b, sizeof(b)) < 0,
	      "an unclosed quote: refused");
	char longer[200];
	snprintf(longer, sizeof(longer), "multipart/form-data; boundary=%071d", 0);
	check(multipart_boundary(longer, b, sizeof(b)) < 0, "71 characters: refused");
}

static void test_parse(void)
{
	struct multipart_part p[4];
	char why[256];
	const char *two = "--XX\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n"
			  "Content-Type: application/octet-stream\r\n\r\nhello\r\n"
			  "--XX\r\nContent-Disposition: form-data; name=\"file\"; "
			  "filename=\"/tmp/b.bin\"\r\n\r\nbin\r\nary\r\n--XX--\r\n";
	int n = multipart_parse(two, strlen(two), "XX", p, 4, why, sizeof(why));

	check(n == 2, "two parts (%d: %s)", n, n < 0 ? why : "");
	check(n == 2 && !strcmp(p[0].name, "file") && !strcmp(p[0].filename, "a.txt") &&
	      p[0].len == 5 && !memcmp(p[0].data, "hello", 5), "  the first: name, filename, bytes");
	check(n == 2 && !strcmp(p[1].filename, "/tmp/b.bin") && p[1].len == 8 &&
	      !memcmp(p[1].data, "bin\r\nary", 8), "  the second keeps a CRLF inside");
	const char *empty = "--XX\r\nContent-Disposition: form-data; name=\"file\"; "
			    "filename=\"e\"\r\n\r\n\r\n--XX--";
	n = multipart_parse(empty, strlen(empty), "XX", p, 4, why, sizeof(why));
	check(n == 1 && p[0].len == 0, "an empty part");
	const char *cut = "--XX\r\nContent-Disposition: form-data; name=\"file\"; filename=\"c\"\r\n\r\nabc";
	check(multipart_parse(cut, strlen(cut), "XX", p, 4, why, sizeof(why)) < 0 &&
	      strstr(why, "delimiter"), "a body cut short: refused (%s)", why);
	check(multipart_parse("hello", 5, "XX", p, 4, why, sizeof(why)) < 0,
	      "no delimiter: refused");
	check(multipart_parse(two, strlen(two), "XX", p, 1, why, sizeof(why)) < 0 &&
	      strstr(why, "more than 1"), "more parts than allowed: refused");
	char *big = malloc(20000);
	size_t off = (size_t)snprintf(big, 20000, "--XX\r\nX-Long: ");
	memset(big + off, 'a', 10000);
	off += 10000;
	off += (size_t)snprintf(big + off, 20000 - off, "\r\n\r\nx\r\n--XX--");
	check(multipart_parse(big, off, "XX", p, 4, why, sizeof(why)) < 0,
	      "a header block over 8 KiB: refused");
	free(big);
	const char *ctl = "--XX\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\x01\"\r\n\r\nx\r\n--XX--";
	check(multipart_parse(ctl, strlen(ctl), "XX", p, 4, why, sizeof(why)) < 0,
	      "a control character in a filename: refused");
}

int main(void)
{
	test_host();
	test_token();
	test_boundary();
	test_parse();
	return tap_done("test_envd");
}
