/* A machine's egress policy: where its guest may connect to beyond berth's
 * own services.  Pure: parsing, the canonical text and matching; hostd/net.c
 * turns a policy into nftables sets and berth's resolver asks it which
 * names it may answer.
 *
 * The text a user writes (`berth set NAME --egress SPEC`, berth.conf's
 * egress_default):
 *   open              anything outside the ranges the host keeps closed
 *   none              nothing
 *   RULE[,RULE...]    exactly what the rules allow, where RULE is
 *                     DEST[:PORTS] and
 *     DEST  = a domain name, which covers itself and every name below it
 *             (github.com: github.com, api.github.com; *.github.com is
 *             accepted and means the same: berth's resolver, dnsmasq, matches
 *             names this way), an IPv4 or IPv6 address,
 *             a CIDR (198.51.100.0/24, 2001:db8::/32; an IPv6 one in brackets
 *             when a port follows: [2001:db8::/32]:443), or * (anywhere)
 *     PORTS = N or N-M (1..65535), TCP and UDP alike; none: every port.
 * Domain names are ASCII (IDNs in their xn-- form), case-insensitive, kept in
 * lower case.  Spaces around commas are allowed.  The ranges the host keeps
 * closed (link-local, and by default the private ones) stay closed whatever
 * a policy says. */
#ifndef BERTH_EGRESS_H
#define BERTH_EGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/err.h"

#define EGRESS_MAX_RULES 256
#define EGRESS_NAME_MAX 254

enum egress_mode { EGRESS_OPEN, EGRESS_NONE, EGRESS_LIST };

enum egress_kind {
	EG_NAME,      /* a domain name: it and the names below it */
	EG_SUFFIX,    /* *.DOMAIN: the same, as written */
	EG_NET4,      /* an IPv4 network (an address is a /32) */
	EG_NET6,      /* an IPv6 network (an address is a /128) */
	EG_ANY,       /* * */
};

struct egress_rule {
	enum egress_kind kind;
	char name[EGRESS_NAME_MAX];   /* EG_NAME, EG_SUFFIX: the domain, lower case */
	uint8_t addr[16];             /* EG_NET4 (4 bytes), EG_NET6: network address */
	int prefix;                   /* its prefix length */
	uint16_t port_lo, port_hi;    /* 0, 0: every port */
};

struct egress {
	enum egress_mode mode;
	size_t n;
	struct egress_rule rule[EGRESS_MAX_RULES];
};

/* Parse SPEC into *OUT.  400 "invalid_egress" naming the first rule that
 * is wrong and why (not a domain, a CIDR that does not parse or has host
 * bits set, a port out of range, too many rules); *OUT is then untouched,
 * so a policy in force stays as it was. */
int egress_parse(const char *spec, struct egress *out, struct err *e);
/* The canonical text of P ("open", "none" or the rules as they parse
 * back), appended to OUT. */
void egress_format(const struct egress *p, struct buf *out);
/* Whether the domain NAME (lower or upper case, no trailing dot) is one a
 * rule of P covers (EG_NAME, EG_SUFFIX: the rule's domain or a name below
 * it); with *PORT_LO and *PORT_HI set to that rule's ports (the first
 * matching rule's).  False for open and none:
 * their resolver answers do not depend on the name. */
bool egress_name_allowed(const struct egress *p, const char *name, uint16_t *port_lo,
			 uint16_t *port_hi);
/* Whether NAME is a valid domain name (labels of 1..63 letters, digits
 * and '-', not starting or ending with '-', at most 253 bytes, at least
 * two labels, not all digits in the last). */
bool egress_domain_valid(const char *name);

#endif
