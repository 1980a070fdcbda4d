#include "hostd/egress.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/banned.h"

bool egress_domain_valid(const char *name)
{
	size_t len = strlen(name), labels = 0, lab = 0;
	bool digits_only = true;

	if (len == 0 || len > 253)
		return false;
	for (size_t i = 0; i <= len; i++) {
		char c = name[i];
		if (c == '.' || c == '\0') {
			if (lab == 0 || lab > 63 || name[i - 1] == '-')
				return false;
			labels++;
			if (c == '\0')
				break;
			lab = 0;
			digits_only = true;
			continue;
		}
		if (lab == 0 && c == '-')
			return false;
		if (!isalnum((unsigned char)c) && c != '-')
			return false;
		if (!isdigit((unsigned char)c))
			digits_only = false;
		lab++;
	}
	/* A name, not an address: the top-level label is not all digits. */
	return labels >= 2 && !digits_only;
}

/* PORTS ("443", "8000-8999") into *LO, *HI; false when malformed. */
static bool parse_ports(const char *s, uint16_t *lo, uint16_t *hi)
{
	char *end;
	long a, b;

	if (!isdigit((unsigned char)*s))
		return false;
	errno = 0;
	a = strtol(s, &end, 10);
	b = a;
	if (*end == '-') {
		if (!isdigit((unsigned char)end[1]))
			return false;
		b = strtol(end + 1, &end, 10);
	}
	if (errno || *end || a < 1 || a > 65535 || b < a || b > 65535)
		return false;
	*lo = (uint16_t)a;
	*hi = (uint16_t)b;
	return true;
}

/* Whether the bits of ADDR (LEN bytes) past PREFIX are all zero. */
static bool host_bits_clear(const uint8_t *addr, size_t len, int prefix)
{
	for (size_t bit = (size_t)prefix; bit < len * 8; bit++)
		if (addr[bit / 8] & (0x80 >> (bit % 8)))
			return false;
	return true;
}

/* An address or CIDR DEST into R; false when it is neither.  WHY says what
 * is wrong with something that looks like one. */
static bool parse_net(const char *dest, struct egress_rule *r, const char **why)
{
	char a[INET6_ADDRSTRLEN + 8];
	const char *slash = strchr(dest, '/');
	size_t alen = slash ? (size_t)(slash - dest) : strlen(dest);
	bool v6;
	long prefix;
	char *end;

	*why = NULL;
	if (alen >= sizeof(a))
		return false;
	memcpy(a, dest, alen);
	a[alen] = '\0';
	v6 = strchr(a, ':') != NULL;
	if (inet_pton(v6 ? AF_INET6 : AF_INET, a, r->addr) != 1)
		return false;
	r->kind = v6 ? EG_NET6 : EG_NET4;
	r->prefix = v6 ? 128 : 32;
	if (slash) {
		errno = 0;
		prefix = strtol(slash + 1, &end, 10);
		if (!isdigit((unsigned char)slash[1]) || errno || *end || prefix < 0 ||
		    prefix > r->prefix) {
			*why = v6 ? "its prefix length is not 0 to 128" : "its prefix length is not 0 to 32";
			return false;
		}
		r->prefix = (int)prefix;
	}
	if (!host_bits_clear(r->addr, v6 ? 16 : 4, r->prefix)) {
		*why = "it has bits set past its prefix length (write the network's address)";
		return false;
	}
	return true;
}

/* One rule, TEXT (LEN bytes, trimmed), into R. */
static int parse_rule(const char *text, size_t len, struct egress_rule *r, struct err *e)
{
	char rule[EGRESS_NAME_MAX + 64], dest[EGRESS_NAME_MAX + 64];
	const char *ports = NULL, *why = NULL;
	char *colon;

	memset(r, 0, sizeof(*r));
	if (len >= sizeof(rule))
		return err_set(e, 400, "invalid_egress", "egress rule '%.40s...' is too long", text);
	memcpy(rule, text, len);
	rule[len] = '\0';
	/* DEST[:PORTS]: an IPv6 DEST with a port is in brackets; a bare one
	 * has more than one ':' and no port. */
	if (rule[0] == '[') {
		char *close = strchr(rule, ']');
		if (!close || (close[1] && close[1] != ':'))
			return err_set(e, 400, "invalid_egress", "egress rule '%s': a '[' without "
				       "its ']' (write [IPV6]:PORT or [CIDR]:PORT)", rule);
		snprintf(dest, sizeof(dest), "%.*s", (int)(close - rule - 1), rule + 1);
		if (close[1] == ':')
			ports = close + 2;
		if (!strchr(dest, ':'))
			return err_set(e, 400, "invalid_egress", "egress rule '%s': brackets are for "
				       "IPv6 addresses", rule);
	} else if ((colon = strchr(rule, ':')) && strchr(colon + 1, ':')) {
		snprintf(dest, sizeof(dest), "%s", rule);
	} else {
		if (colon) {
			*colon = '\0';
			ports = colon + 1;
		}
		snprintf(dest, sizeof(dest), "%s", rule);
		if (colon)
			*colon = ':';
	}
	if (ports && !parse_ports(ports, &r->port_lo, &r->port_hi))
		return err_set(e, 400, "invalid_egress", "egress rule '%s': the port '%s' is not "
			       "a number or range from 1 to 65535", rule, ports);
	if (!dest[0])
		return err_set(e, 400, "invalid_egress", "egress rule '%s' has no destination "
			       "(write * for anywhere)", rule);
	if (strcmp(dest, "*") == 0) {
		r->kind = EG_ANY;
		return 0;
	}
	if (parse_net(dest, r, &why))
		return 0;
	if (why)
		return err_set(e, 400, "invalid_egress", "egress rule '%s': %s", rule, why);
	if (isdigit((unsigned char)dest[0]) && strspn(dest, "0123456789./") == strlen(dest))
		return err_set(e, 400, "invalid_egress", "egress rule '%s': '%s' is not an IPv4 "
			       "address or CIDR", rule, dest);
	if (strchr(dest, ':') || strchr(dest, '/'))
		return err_set(e, 400, "invalid_egress", "egress rule '%s': '%s' is not an "
			       "address or CIDR", rule, dest);
	const char *name = dest;
	if (strncmp(dest, "*.", 2) == 0) {
		r->kind = EG_SUFFIX;
		name = dest + 2;
	} else {
		r->kind = EG_NAME;
	}
	if (strlen(name) > 253 || !egress_domain_valid(name))
		return err_set(e, 400, "invalid_egress", "egress rule '%s': '%s' is not a domain "
			       "name (letters, digits and '-' in dot-separated labels; *.DOMAIN "
			       "for every name below one)", rule, name);
	for (size_t i = 0; name[i]; i++)
		r->name[i] = (char)tolower((unsigned char)name[i]);
	return 0;
}

int egress_parse(const char *spec, struct egress *out, struct err *e)
{
	struct egress *p = calloc(1, sizeof(*p));
	const char *s = spec;
	int rc = -1;

	if (!p)
		abort();
	while (*s == ' ' || *s == '\t')
		s++;
	if (strcmp(s, "open") == 0 || strcmp(s, "none") == 0) {
		p->mode = s[0] == 'o' ? EGRESS_OPEN : EGRESS_NONE;
		goto done;
	}
	if (!*s) {
		err_set(e, 400, "invalid_egress", "the egress policy is empty: open, none, or "
			"rules such as github.com,*.npmjs.org:443,198.51.100.0/24");
		goto out;
	}
	p->mode = EGRESS_LIST;
	while (*s) {
		size_t len = strcspn(s, ",");
		const char *next = s + len + (s[len] == ',');
		while (len && (s[len - 1] == ' ' || s[len - 1] == '\t'))
			len--;
		while (len && (*s == ' ' || *s == '\t')) {
			s++;
			len--;
		}
		if (len == 0) {
			err_set(e, 400, "invalid_egress", "the egress policy has an empty rule "
				"(two commas, or one at an end)");
			goto out;
		}
		if (p->n == EGRESS_MAX_RULES) {
			err_set(e, 400, "invalid_egress", "the egress policy has more than %d rules",
				EGRESS_MAX_RULES);
			goto out;
		}
		if (memchr(s, ' ', len) || memchr(s, '\t', len)) {
			err_set(e, 400, "invalid_egress", "egress rule '%.*s' has a space in it "
				"(rules are separated by commas)", (int)len, s);
			goto out;
		}
		if (parse_rule(s, len, &p->rule[p->n], e) < 0)
			goto out;
		p->n++;
		s = next;
		if (s[-1] == ',' && !*s) {
			err_set(e, 400, "invalid_egress", "the egress policy has an empty rule "
				"(two commas, or one at an end)");
			goto out;
		}
	}
done:
	*out = *p;
	rc = 0;
out:
	free(p);
	return rc;
}

void egress_format(const struct egress *p, struct buf *out)
{
	char a[INET6_ADDRSTRLEN];

	if (p->mode != EGRESS_LIST) {
		buf_adds(out, p->mode == EGRESS_OPEN ? "open" : "none");
		return;
	}
	for (size_t i = 0; i < p->n; i++) {
		const struct egress_rule *r = &p->rule[i];
		bool bracket = r->kind == EG_NET6 && r->port_lo;
		if (i)
			buf_adds(out, ",");
		if (bracket)
			buf_adds(out, "[");
		switch (r->kind) {
		case EG_NAME: buf_adds(out, r->name); break;
		case EG_SUFFIX: buf_printf(out, "*.%s", r->name); break;
		case EG_ANY: buf_adds(out, "*"); break;
		case EG_NET4:
		case EG_NET6:
			inet_ntop(r->kind == EG_NET4 ? AF_INET : AF_INET6, r->addr, a, sizeof(a));
			buf_adds(out, a);
			if (r->prefix != (r->kind == EG_NET4 ? 32 : 128))
				buf_printf(out, "/%d", r->prefix);
			break;
		}
		if (bracket)
			buf_adds(out, "]");
		if (r->port_lo == r->port_hi && r->port_lo)
			buf_printf(out, ":%u", r->port_lo);
		else if (r->port_lo)
			buf_printf(out, ":%u-%u", r->port_lo, r->port_hi);
	}
}

bool egress_name_allowed(const struct egress *p, const char *name, uint16_t *port_lo,
			 uint16_t *port_hi)
{
	size_t len = strlen(name);

	if (p->mode != EGRESS_LIST)
		return false;
	for (size_t i = 0; i < p->n; i++) {
		const struct egress_rule *r = &p->rule[i];
		size_t rl = strlen(r->name);
		bool hit = false;
		if (r->kind == EG_NAME || r->kind == EG_SUFFIX)
			hit = strcasecmp(name, r->name) == 0 ||
			      (len > rl + 1 && name[len - rl - 1] == '.' &&
			       strcasecmp(name + len - rl, r->name) == 0);
		if (hit) {
			*port_lo = r->port_lo;
			*port_hi = r->port_hi;
			return true;
		}
	}
	return false;
}
