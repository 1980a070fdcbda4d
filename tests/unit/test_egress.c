/*
 * Unit tests of egress policies (hostd/egress.h): what parses, its
 * canonical text, what is refused and with which message, and name
 * matching for the resolver.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostd/egress.h"
#include "tests/unit/tap.h"

/* SPEC parses, and formats as WANT. */
static void parses(const char *spec, const char *want)
{
	struct egress *p = calloc(1, sizeof(*p));
	struct buf b = BUF_INIT;
	struct err e = { 0 };
	int rc = egress_parse(spec, p, &e);

	if (rc == 0)
		egress_format(p, &b);
	if (!check(rc == 0 && strcmp(buf_str(&b), want) == 0, "parses: '%s' -> '%s'", spec, want))
		diag("rc %d (%s), got '%s'", rc, e.msg, buf_str(&b));
	buf_free(&b);
	free(p);
}

/* SPEC is refused with a message containing WANT, and leaves the policy
 * it was to replace as it was. */
static void refused(const char *spec, const char *want)
{
	struct egress *p = calloc(1, sizeof(*p));
	struct err e = { 0 };
	int rc;

	p->mode = EGRESS_NONE;
	rc = egress_parse(spec, p, &e);
	if (!check(rc < 0 && e.status == 400 && !strcmp(e.code, "invalid_egress") &&
		   strstr(e.msg, want) && p->mode == EGRESS_NONE && p->n == 0,
		   "refused: '%s' (%s)", spec, want))
		diag("rc %d, %d %s: %s", rc, e.status, e.code, e.msg);
	free(p);
}

static void test_parse(void)
{
	parses("open", "open");
	parses("none", "none");
	parses("  none", "none");
	parses("github.com", "github.com");
	parses("GitHub.COM", "github.com");
	parses("*.npmjs.org", "*.npmjs.org");
	parses("github.com , *.npmjs.org:443,198.51.100.0/24",
	       "github.com,*.npmjs.org:443,198.51.100.0/24");
	parses("198.51.100.7", "198.51.100.7");
	parses("198.51.100.7/32:5432", "198.51.100.7:5432");
	parses("0.0.0.0/0", "0.0.0.0/0");
	parses("2001:db8::/32", "2001:db8::/32");
	parses("2001:db8::1", "2001:db8::1");
	parses("[2001:db8::/32]:443", "[2001:db8::/32]:443");
	parses("[2001:DB8::1]:8000-8999", "[2001:db8::1]:8000-8999");
	parses("*:53", "*:53");
	parses("*", "*");
	parses("example.com:1-65535", "example.com:1-65535");
	parses("xn--bcher-kva.example", "xn--bcher-kva.example");
	parses("a-b.c-d.example", "a-b.c-d.example");
}

static void test_refusals(void)
{
	refused("", "empty");
	refused("github.com,,npmjs.org", "empty rule");
	refused("github.com,", "empty rule");
	refused(",github.com", "empty rule");
	refused("github.com npmjs.org", "has a space");
	refused("github", "'github' is not a domain name");
	refused("-bad.example", "not a domain name");
	refused("bad-.example", "not a domain name");
	refused("bad..example", "not a domain name");
	refused("b_d.example", "not a domain name");
	refused("*.", "not a domain name");
	refused("*.com.", "not a domain name");
	refused("**.example.com", "not a domain name");
	refused("ex*ample.com", "not a domain name");
	refused("1.2.3.4.5", "not an IPv4 address or CIDR");
	refused("256.1.1.1", "not an IPv4 address or CIDR");
	refused("198.51.100.0/33", "prefix length is not 0 to 32");
	refused("198.51.100.1/24", "bits set past its prefix length");
	refused("2001:db8::1/32", "bits set past its prefix length");
	refused("2001:db8::/129", "prefix length is not 0 to 128");
	refused("2001:zz8::", "not an address or CIDR");
	refused("github.com:0", "the port '0'");
	refused("github.com:65536", "the port '65536'");
	refused("github.com:http", "the port 'http'");
	refused("github.com:9-1", "the port '9-1'");
	refused("github.com:", "the port ''");
	refused(":443", "has no destination");
	refused("[198.51.100.1]:443", "brackets are for IPv6");
	refused("[2001:db8::1:443", "without its ']'");
	refused("example.com/24", "not an address or CIDR");
	char big[70 * 300];
	size_t o = 0;
	for (int i = 0; i < EGRESS_MAX_RULES + 1; i++)
		o += (size_t)snprintf(big + o, sizeof(big) - o, "%sh%d.example", i ? "," : "", i);
	refused(big, "more than 256 rules");
	char label[100];
	memset(label, 'a', 64);
	snprintf(label + 64, sizeof(label) - 64, ".example");
	refused(label, "not a domain name");
}

static void test_names(void)
{
	struct egress *p = calloc(1, sizeof(*p));
	struct err e = { 0 };
	uint16_t lo = 0, hi = 0;

	check(egress_parse("allowed.test:443,*.cdn.test,198.51.100.0/24", p, &e) == 0,
	      "names: a policy");
	check(egress_name_allowed(p, "allowed.test", &lo, &hi) && lo == 443 && hi == 443,
	      "names: the name, with its port");
	check(egress_name_allowed(p, "ALLOWED.Test", &lo, &hi), "names: case does not matter");
	check(egress_name_allowed(p, "www.allowed.test", &lo, &hi) && lo == 443,
	      "names: a name covers the names below it");
	check(egress_name_allowed(p, "a.cdn.test", &lo, &hi) && lo == 0 && hi == 0 &&
	      egress_name_allowed(p, "x.y.cdn.test", &lo, &hi),
	      "names: *.DOMAIN covers every name below it, on every port");
	check(egress_name_allowed(p, "cdn.test", &lo, &hi),
	      "names: *.DOMAIN covers DOMAIN too (the resolver cannot tell them apart)");
	check(!egress_name_allowed(p, "evilcdn.test", &lo, &hi) &&
	      !egress_name_allowed(p, "test", &lo, &hi),
	      "names: not a name that only ends like it, nor the level above");
	check(!egress_name_allowed(p, "blocked.test", &lo, &hi), "names: another name is not");
	egress_parse("open", p, &e);
	check(!egress_name_allowed(p, "allowed.test", &lo, &hi), "names: open lists no names");
	free(p);
}

int main(void)
{
	test_parse();
	test_refusals();
	test_names();
	return tap_done("test_egress");
}
