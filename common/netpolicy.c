#include "common/netpolicy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/banned.h"

/* Every range is kept as IPv6: an IPv4 one as its v4-mapped form
 * (::ffff:a.b.c.d), its prefix plus 96. */
struct range {
	uint8_t a[16];
	int prefix;
	const char *name;      /* why it is closed ("loopback"); NULL: a list's */
};

struct netpolicy {
	struct range *closed, *allow;
	size_t n_closed, n_allow;
};

/* Closed always, whatever berth.conf says (RFC 6890's special-purpose
 * ranges that are not the internet's). */
static const struct {
	const char *cidr, *name;
} always[] = {
	{ "127.0.0.0/8", "loopback" },
	{ "0.0.0.0/8", "this network" },
	{ "169.254.0.0/16", "link-local (a cloud's instance metadata)" },
	{ "10.0.0.0/8", "private" },
	{ "172.16.0.0/12", "private" },
	{ "192.168.0.0/16", "private" },
	{ "100.64.0.0/10", "shared address space (carrier-grade NAT)" },
	{ "192.0.0.0/24", "IETF protocol assignments" },
	{ "198.18.0.0/15", "benchmarking" },
	{ "224.0.0.0/4", "multicast" },
	{ "240.0.0.0/4", "reserved" },
	{ "::1/128", "loopback" },
	{ "::/96", "unspecified or IPv4-compatible" },
	{ "64:ff9b:1::/48", "local NAT64" },
	{ "fc00::/7", "unique local (private)" },
	{ "fe80::/10", "link-local" },
	{ "fec0::/10", "site-local" },
	{ "ff00::/8", "multicast" },
};

static const uint8_t mapped_prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
static const uint8_t nat64_prefix[12] = { 0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0 };

/* TEXT, "ADDR" or "ADDR/PREFIX", into R.  false when malformed (or host
 * bits are set: "10.1.0.0/8" is a mistake, not a range). */
static bool parse_range(const char *text, struct range *r)
{
	char a[64];
	const char *slash = strchr(text, '/');
	size_t alen = slash ? (size_t)(slash - text) : strlen(text);
	long p = -1;
	struct in_addr v4;
	int max;

	memset(r, 0, sizeof(*r));
	if (alen == 0 || alen >= sizeof(a))
		return false;
	memcpy(a, text, alen);
	a[alen] = '\0';
	if (inet_pton(AF_INET, a, &v4) == 1) {
		memcpy(r->a, mapped_prefix, 12);
		memcpy(r->a + 12, &v4, 4);
		max = 32;
	} else if (inet_pton(AF_INET6, a, r->a) == 1) {
		max = 128;
	} else {
		return false;
	}
	if (slash) {
		char *end;
		if (!slash[1] || slash[1] == '-' || slash[1] == '+')
			return false;
		p = strtol(slash + 1, &end, 10);
		if (*end || p < 0 || p > max)
			return false;
	}
	r->prefix = (int)(slash ? p : max) + (max == 32 ? 96 : 0);
	for (int bit = r->prefix; bit < 128; bit++)
		if (r->a[bit / 8] & (0x80 >> (bit % 8)))
			return false;
	return true;
}

static bool in_range(const uint8_t a[16], const struct range *r)
{
	int full = r->prefix / 8, rest = r->prefix % 8;

	if (memcmp(a, r->a, (size_t)full) != 0)
		return false;
	return !rest || ((a[full] ^ r->a[full]) & (0xff << (8 - rest)) & 0xff) == 0;
}

/* LIST's ranges appended to *OUT (*N of them); KEY names it in errors. */
static int parse_list(const char *key, const char *list, struct range **out, size_t *n,
		      struct err *e)
{
	const char *s = list ? list : "";

	while (*s) {
		char item[80];
		size_t l;
		s += strspn(s, ", \t");
		l = strcspn(s, ", \t");
		if (!l)
			break;
		if (l >= sizeof(item))
			return err_set(e, 400, "invalid_config", "%s: '%.*s...' is not a network "
				       "(such as 203.0.113.7/32 or 2001:db8::/32)", key, 40, s);
		memcpy(item, s, l);
		item[l] = '\0';
		s += l;
		struct range r;
		if (!parse_range(item, &r))
			return err_set(e, 400, "invalid_config", "%s: '%s' is not a network (such as "
				       "203.0.113.7/32 or 2001:db8::/32; no host bits after the "
				       "prefix)", key, item);
		if (out) {
			struct range *g = realloc(*out, (*n + 1) * sizeof(**out));
			if (!g)
				return err_set(e, 500, "internal", "out of memory");
			*out = g;
			(*out)[(*n)++] = r;
		}
	}
	return 0;
}

int netpolicy_check_list(const char *key, const char *list, struct err *e)
{
	return parse_list(key, list, NULL, NULL, e);
}

struct netpolicy *netpolicy_new(const char *closed, const char *allow, struct err *e)
{
	struct netpolicy *p = calloc(1, sizeof(*p));

	if (!p) {
		err_set(e, 500, "internal", "out of memory");
		return NULL;
	}
	for (size_t i = 0; i < sizeof(always) / sizeof(always[0]); i++) {
		struct range *g = realloc(p->closed, (p->n_closed + 1) * sizeof(*g));
		if (!g || !parse_range(always[i].cidr, &g[p->n_closed])) {
			if (g)
				p->closed = g;
			err_set(e, 500, "internal", "netpolicy: %s", always[i].cidr);
			netpolicy_free(p);
			return NULL;
		}
		p->closed = g;
		p->closed[p->n_closed++].name = always[i].name;
	}
	if (parse_list("closed", closed, &p->closed, &p->n_closed, e) < 0 ||
	    parse_list("broker_allow", allow, &p->allow, &p->n_allow, e) < 0) {
		netpolicy_free(p);
		return NULL;
	}
	return p;
}

void netpolicy_free(struct netpolicy *p)
{
	if (!p)
		return;
	free(p->closed);
	free(p->allow);
	free(p);
}

/* SA's address as IPv6 (IPv4 v4-mapped) into A and as text into TEXT.
 * false for another family. */
static bool addr_of(const struct sockaddr *sa, uint8_t a[16], char *text, size_t textlen)
{
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)(const void *)sa;
		memcpy(a, mapped_prefix, 12);
		memcpy(a + 12, &s4->sin_addr, 4);
		inet_ntop(AF_INET, &s4->sin_addr, text, (socklen_t)textlen);
		return true;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)(const void *)sa;
		memcpy(a, &s6->sin6_addr, 16);
		inet_ntop(AF_INET6, &s6->sin6_addr, text, (socklen_t)textlen);
		return true;
	}
	return false;
}

static void cidr_text(const struct range *r, char *out, size_t outlen)
{
	char t[INET6_ADDRSTRLEN];

	if (!memcmp(r->a, mapped_prefix, 12) && r->prefix >= 96) {
		inet_ntop(AF_INET, r->a + 12, t, sizeof(t));
		snprintf(out, outlen, "%s/%d", t, r->prefix - 96);
	} else {
		inet_ntop(AF_INET6, r->a, t, sizeof(t));
		snprintf(out, outlen, "%s/%d", t, r->prefix);
	}
}

bool netpolicy_ranges_allow(const struct netpolicy *p, const struct sockaddr *sa, char *why,
			    size_t whylen)
{
	uint8_t a[16], v4[16];
	char text[INET6_ADDRSTRLEN], cidr[INET6_ADDRSTRLEN + 16];
	const uint8_t *forms[2] = { a, NULL };

	if (!addr_of(sa, a, text, sizeof(text))) {
		snprintf(why, whylen, "an address of family %d is not IP", sa->sa_family);
		return false;
	}
	/* NAT64's well-known prefix carries an IPv4 address: it is closed or
	 * open as that address is (the IPv6 range too, as for v4-mapped). */
	if (!memcmp(a, nat64_prefix, 12)) {
		memcpy(v4, mapped_prefix, 12);
		memcpy(v4 + 12, a + 12, 4);
		forms[1] = v4;
	}
	for (size_t i = 0; i < p->n_allow; i++)
		if (in_range(a, &p->allow[i]))
			return true;
	for (size_t f = 0; f < 2 && forms[f]; f++) {
		for (size_t i = 0; i < p->n_closed; i++) {
			const struct range *r = &p->closed[i];
			if (!in_range(forms[f], r))
				continue;
			cidr_text(r, cidr, sizeof(cidr));
			if (r->name)
				snprintf(why, whylen, "%s is %s (%s)", text, r->name, cidr);
			else
				snprintf(why, whylen, "%s is in %s, closed on this host (egress_closed, "
					 "the host's networks, the guest network)", text, cidr);
			return false;
		}
	}
	return true;
}

/* Whether the kernel binds addresses it does not have (the
 * ip_nonlocal_bind sysctl of FAMILY): then a bind tells nothing. */
static bool nonlocal_bind(int family)
{
	FILE *f = fopen(family == AF_INET ? "/proc/sys/net/ipv4/ip_nonlocal_bind"
					  : "/proc/sys/net/ipv6/ip_nonlocal_bind", "re");
	int c = f ? fgetc(f) : '0';

	if (f)
		fclose(f);
	return c != '0';
}

bool netpolicy_local(const struct sockaddr *sa)
{
	struct sockaddr_storage to, me;
	socklen_t len = sa->sa_family == AF_INET ? sizeof(struct sockaddr_in)
						 : sizeof(struct sockaddr_in6), ml = sizeof(me);
	int fd;
	bool local = false;

	if (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)
		return false;
	memcpy(&to, sa, len);
	/* The port does not matter to the route (a UDP connect sends
	 * nothing), but 0 is refused by some stacks. */
	if (sa->sa_family == AF_INET)
		((struct sockaddr_in *)&to)->sin_port = htons(9);
	else
		((struct sockaddr_in6 *)&to)->sin6_port = htons(9);
	fd = socket(sa->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return false;
	/* A route to an address of the host's own is a local one, whose
	 * source address is that address (RFC 6724's rule 1 for IPv6). */
	if (connect(fd, (struct sockaddr *)&to, len) == 0 &&
	    getsockname(fd, (struct sockaddr *)&me, &ml) == 0 && me.ss_family == sa->sa_family) {
		if (sa->sa_family == AF_INET)
			local = ((struct sockaddr_in *)&me)->sin_addr.s_addr ==
				((struct sockaddr_in *)&to)->sin_addr.s_addr;
		else
			local = !memcmp(&((struct sockaddr_in6 *)&me)->sin6_addr,
					&((struct sockaddr_in6 *)&to)->sin6_addr, 16);
	}
	close(fd);
	if (local)
		return true;
	/* A local route whose source is another address (127.0.0.53 is
	 * 127.0.0.0/8's, whose source is 127.0.0.1; an AnyIP range): the
	 * kernel binds only local addresses, unless told to bind any. */
	if (nonlocal_bind(sa->sa_family))
		return false;
	((struct sockaddr_in *)&to)->sin_port = 0;
	if (sa->sa_family == AF_INET6)
		((struct sockaddr_in6 *)&to)->sin6_port = 0;
	fd = socket(sa->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return false;
	local = bind(fd, (struct sockaddr *)&to, len) == 0;
	close(fd);
	return local;
}

bool netpolicy_allows(const struct netpolicy *p, const struct sockaddr *sa, char *why,
		      size_t whylen)
{
	uint8_t a[16];
	char text[INET6_ADDRSTRLEN];

	if (!netpolicy_ranges_allow(p, sa, why, whylen))
		return false;
	if (!addr_of(sa, a, text, sizeof(text)))
		return false;
	for (size_t i = 0; i < p->n_allow; i++)
		if (in_range(a, &p->allow[i]))
			return true;
	if (netpolicy_local(sa)) {
		snprintf(why, whylen, "%s is an address of this host", text);
		return false;
	}
	return true;
}
