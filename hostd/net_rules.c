/* The pure part of hostd/net.h: the nftables ruleset for a set of
 * machines, as text (net.c applies it). */
#include "hostd/net.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "common/util.h"
#include "common/banned.h"

void net_ip_text(uint32_t ip, char *out, size_t outlen)
{
	struct in_addr a = { .s_addr = htonl(ip) };

	if (!inet_ntop(AF_INET, &a, out, (socklen_t)outlen))
		snprintf(out, outlen, "?");
}

uint32_t net_machine_ip(const struct net_conf *c, int index)
{
	return c->gateway + (uint32_t)index;
}

int net_max_index(const struct net_conf *c)
{
	uint64_t hosts = (uint64_t)1 << (32 - c->prefix);

	/* Not the network's address, the gateway or the broadcast. */
	return hosts > 3 ? (int)(hosts - 3 > 65535 ? 65535 : hosts - 3) : 0;
}

void net_tap_name(const struct net_conf *c, int index, char *out, size_t outlen)
{
	xsnprintf(out, outlen, "%s%d", c->tap_prefix, index);
}

void net_domain_set(const char *domain, char *out, size_t outlen)
{
	uint64_t h = 1469598103934665603ULL;     /* FNV-1a */

	for (const char *p = domain; *p; p++) {
		h ^= (unsigned char)(*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
		h *= 1099511628211ULL;
	}
	xsnprintf(out, outlen, "d-%016llx", (unsigned long long)h);
}

static void cidr_text(const struct egress_rule *r, char *out, size_t outlen)
{
	char a[INET6_ADDRSTRLEN];

	inet_ntop(r->kind == EG_NET6 ? AF_INET6 : AF_INET, r->addr, a, sizeof(a));
	xsnprintf(out, outlen, "%s/%d", a, r->prefix);
}

static void ports_text(const struct egress_rule *r, char *out, size_t outlen)
{
	if (!r->port_lo)
		xsnprintf(out, outlen, "0-65535");
	else if (r->port_lo == r->port_hi)
		xsnprintf(out, outlen, "%u", r->port_lo);
	else
		xsnprintf(out, outlen, "%u-%u", r->port_lo, r->port_hi);
}

/* The rule of machine M's chain that lets through the networks of P's
 * rules with the ports of rule K (the first of that port range): one
 * anonymous set of them (nft merges what overlaps). */
static void nets_rule(const struct net_conf *c, int i, const struct egress *p, size_t k,
		      struct buf *b)
{
	const struct egress_rule *r0 = &p->rule[k];
	char cidr[64], ports[16];
	bool first = true;

	if (r0->port_lo) {
		ports_text(r0, ports, sizeof(ports));
		buf_printf(b, "add rule inet %s m%d meta l4proto { tcp, udp } ip daddr { ", c->table,
			   i);
	} else {
		buf_printf(b, "add rule inet %s m%d ip daddr { ", c->table, i);
	}
	for (size_t j = k; j < p->n; j++) {
		const struct egress_rule *r = &p->rule[j];
		if ((r->kind != EG_NET4 && r->kind != EG_ANY) || r->port_lo != r0->port_lo ||
		    r->port_hi != r0->port_hi)
			continue;
		if (r->kind == EG_ANY)
			xsnprintf(cidr, sizeof(cidr), "0.0.0.0/0");
		else
			cidr_text(r, cidr, sizeof(cidr));
		buf_printf(b, "%s%s", first ? "" : ", ", cidr);
		first = false;
	}
	if (r0->port_lo)
		buf_printf(b, " } th dport %s goto m%d-ok\n", ports, i);
	else
		buf_printf(b, " } goto m%d-ok\n", i);
}

/* Whether an earlier network rule of P than K has K's ports. */
static bool ports_seen(const struct egress *p, size_t k)
{
	for (size_t j = 0; j < k; j++)
		if ((p->rule[j].kind == EG_NET4 || p->rule[j].kind == EG_ANY) &&
		    p->rule[j].port_lo == p->rule[k].port_lo &&
		    p->rule[j].port_hi == p->rule[k].port_hi)
			return true;
	return false;
}

/* The sets and chains of machine M (the table exists); REPLACE: its
 * chains emptied first. */
static void machine_body(const struct net_conf *c, const struct net_machine *m, bool replace,
			 struct buf *b)
{
	const struct egress *p = m->egress;
	const char *t = c->table;
	char ports[16], set[32];
	int i = m->index;

	/* What it reached and what it was refused, with counts (berth egress
	 * log): one element per destination, the first packet of each flow. */
	buf_printf(b, "add set inet %s m%d-ok { type ipv4_addr . inet_proto . inet_service; "
		   "flags dynamic,timeout; timeout 1h; size 1024; counter; }\n", t, i);
	buf_printf(b, "add set inet %s m%d-deny { type ipv4_addr . inet_proto . inet_service; "
		   "flags dynamic,timeout; timeout 1h; size 1024; counter; }\n", t, i);
	buf_printf(b, "add chain inet %s m%d\nadd chain inet %s m%d-ok\nadd chain inet %s m%d-deny\n",
		   t, i, t, i, t, i);
	if (replace)
		buf_printf(b, "flush chain inet %s m%d\nflush chain inet %s m%d-ok\n"
			   "flush chain inet %s m%d-deny\n", t, i, t, i, t, i);
	/* The closed ranges first, whatever the policy. */
	buf_printf(b, "add rule inet %s m%d ip daddr @closed4 goto m%d-deny\n", t, i, i);
	for (size_t k = 0; p->mode == EGRESS_LIST && k < p->n; k++) {
		const struct egress_rule *r = &p->rule[k];
		if ((r->kind == EG_NET4 || r->kind == EG_ANY) && !ports_seen(p, k))
			nets_rule(c, i, p, k, b);
		if (r->kind != EG_NAME && r->kind != EG_SUFFIX)
			continue;
		net_domain_set(r->name, set, sizeof(set));
		if (r->port_lo) {
			ports_text(r, ports, sizeof(ports));
			buf_printf(b, "add rule inet %s m%d meta l4proto { tcp, udp } ip daddr @%s "
				   "th dport %s goto m%d-ok\n", t, i, set, ports, i);
		} else {
			buf_printf(b, "add rule inet %s m%d ip daddr @%s goto m%d-ok\n", t, i, set, i);
		}
	}
	buf_printf(b, "add rule inet %s m%d goto m%d-%s\n", t, i, i,
		   p->mode == EGRESS_OPEN ? "ok" : "deny");
	buf_printf(b, "add rule inet %s m%d-ok meta l4proto { tcp, udp } update @m%d-ok "
		   "{ ip daddr . meta l4proto . th dport }\n", t, i, i);
	buf_printf(b, "add rule inet %s m%d-ok accept\n", t, i);
	buf_printf(b, "add rule inet %s m%d-deny meta l4proto { tcp, udp } update @m%d-deny "
		   "{ ip daddr . meta l4proto . th dport }\n", t, i, i);
	buf_printf(b, "add rule inet %s m%d-deny meta l4proto tcp reject with tcp reset\n", t, i);
	buf_printf(b, "add rule inet %s m%d-deny reject with icmpx admin-prohibited\n", t, i);
}

/* The sets the resolver fills for the domains P names. */
static void domain_sets(const struct net_conf *c, const struct egress *p, struct buf *b)
{
	char set[32];

	for (size_t k = 0; p->mode == EGRESS_LIST && k < p->n; k++) {
		if (p->rule[k].kind != EG_NAME && p->rule[k].kind != EG_SUFFIX)
			continue;
		net_domain_set(p->rule[k].name, set, sizeof(set));
		buf_printf(b, "add set inet %s %s { type ipv4_addr; flags timeout; timeout 1h; }\n",
			   c->table, set);
	}
}

/* Machine M's elements in the table's maps and sets. */
static void machine_elements(const struct net_conf *c, const struct net_machine *m,
			     struct buf *b)
{
	char tap[32], ip[16], alias[16];
	const char *t = c->table;

	net_tap_name(c, m->index, tap, sizeof(tap));
	net_ip_text(net_machine_ip(c, m->index), ip, sizeof(ip));
	/* Its tap, address and MAC: the only source its packets may have.  A
	 * live fork's guest still uses its source's MAC (and address, which
	 * the host maps to the fork's). */
	buf_printf(b, "add element inet %s guests { \"%s\" . %s . %s }\n", t, tap, ip,
		   m->alias_ip ? m->alias_mac : m->mac);
	buf_printf(b, "add element inet %s egress { \"%s\" : jump m%d }\n", t, tap, m->index);
	/* Before conntrack, for each packet from its tap (one lookup): its
	 * zone, and a live fork's guest-side address mapped to its own. */
	buf_printf(b, "add chain inet %s r%d\nflush chain inet %s r%d\n", t, m->index, t, m->index);
	if (m->alias_ip) {
		net_ip_text(m->alias_ip, alias, sizeof(alias));
		buf_printf(b, "add rule inet %s r%d ip saddr %s ip saddr set %s\n", t, m->index, alias, ip);
		buf_printf(b, "add chain inet %s a%d\nflush chain inet %s a%d\n"
			   "add rule inet %s a%d ip daddr %s ip daddr set %s\n"
			   "add element inet %s aliases { \"%s\" : jump a%d }\n",
			   t, m->index, t, m->index, t, m->index, ip, alias, t, tap, m->index);
	}
	buf_printf(b, "add rule inet %s r%d ct original zone set %d\n", t, m->index, m->index);
	buf_printf(b, "add element inet %s raw_taps { \"%s\" : jump r%d }\n", t, tap, m->index);
}

void net_machine_script(const struct net_conf *c, const struct net_machine *m, bool add,
			struct buf *out)
{
	domain_sets(c, m->egress, out);
	machine_body(c, m, !add, out);
	if (add)
		machine_elements(c, m, out);
}

void net_machine_remove_script(const struct net_conf *c, const struct net_machine *m,
			       struct buf *b)
{
	char tap[32];
	const char *t = c->table;
	int i = m->index;

	net_tap_name(c, i, tap, sizeof(tap));
	/* Whatever of it is there: "destroy", no error for what is not, is
	 * newer than nft 1.0.6, so everything is (re)added first, then
	 * deleted, in one transaction. */
	buf_printf(b, "add chain inet %s m%d\nadd chain inet %s m%d-ok\nadd chain inet %s m%d-deny\n",
		   t, i, t, i, t, i);
	machine_elements(c, m, b);
	buf_printf(b, "delete element inet %s egress { \"%s\" }\n", t, tap);
	buf_printf(b, "delete element inet %s raw_taps { \"%s\" }\n", t, tap);
	buf_printf(b, "flush chain inet %s r%d\ndelete chain inet %s r%d\n", t, i, t, i);
	buf_printf(b, "delete element inet %s guests { \"%s\" . ", t, tap);
	char ip[16];
	net_ip_text(net_machine_ip(c, i), ip, sizeof(ip));
	buf_printf(b, "%s . %s }\n", ip, m->alias_ip ? m->alias_mac : m->mac);
	if (m->alias_ip)
		buf_printf(b, "delete element inet %s aliases { \"%s\" }\n"
			   "flush chain inet %s a%d\ndelete chain inet %s a%d\n", t, tap, t, i, t, i);
	buf_printf(b, "flush chain inet %s m%d\ndelete chain inet %s m%d\n"
		   "flush chain inet %s m%d-ok\ndelete chain inet %s m%d-ok\n"
		   "flush chain inet %s m%d-deny\ndelete chain inet %s m%d-deny\n",
		   t, i, t, i, t, i, t, i, t, i, t, i);
	buf_printf(b, "add set inet %s m%d-ok { type ipv4_addr . inet_proto . inet_service; "
		   "flags dynamic,timeout; timeout 1h; size 1024; counter; }\ndelete set inet %s m%d-ok\n",
		   t, i, t, i);
	buf_printf(b, "add set inet %s m%d-deny { type ipv4_addr . inet_proto . inet_service; "
		   "flags dynamic,timeout; timeout 1h; size 1024; counter; }\n"
		   "delete set inet %s m%d-deny\n", t, i, t, i);
}

/* The set of IPv4 networks no guest reaches: this-network, loopback,
 * link-local, multicast and reserved, the guest network, and C's closed
 * list (egress_closed and the host's own networks). */
static void closed4_set(const struct net_conf *c, struct buf *b)
{
	char net[16];

	net_ip_text(c->net, net, sizeof(net));
	buf_adds(b, "\tset closed4 { type ipv4_addr; flags interval; auto-merge; elements = {"
		    " 0.0.0.0/8, 127.0.0.0/8, 169.254.0.0/16, 224.0.0.0/4, 240.0.0.0/4");
	buf_printf(b, ", %s/%d", net, c->prefix);
	for (size_t i = 0; i < c->n_closed; i++)
		buf_printf(b, ", %s", c->closed[i]);
	buf_adds(b, " } }\n");
}

void net_ruleset(const struct net_conf *c, const struct net_machine *ms, size_t n,
		 struct buf *b)
{
	const char *t = c->table, *px = c->tap_prefix;
	char net[16], gw[16];

	net_ip_text(c->net, net, sizeof(net));
	net_ip_text(c->gateway, gw, sizeof(gw));
	/* Replaced whole, in one transaction. */
	buf_printf(b, "add table inet %s\ndelete table inet %s\n", t, t);
	buf_printf(b, "table inet %s {\n", t);
	closed4_set(c, b);
	buf_adds(b, "\tset guests { type ifname . ipv4_addr . ether_addr; }\n"
		    "\tmap egress { type ifname : verdict; }\n"
		    "\tmap raw_taps { type ifname : verdict; }\n"
		    "\tmap aliases { type ifname : verdict; }\n");
	/* Before conntrack: each tap's chain (r<index>, one lookup) sets its
	 * zone and maps a live fork's guest-side address to its own. */
	buf_printf(b, "\tchain raw { type filter hook prerouting priority raw; policy accept;\n"
		      "\t\tiifname \"%s*\" iifname vmap @raw_taps\n\t}\n", px);
	buf_printf(b, "\tchain input { type filter hook input priority filter; policy accept;\n"
		      "\t\tiifname \"%s*\" jump guest_in\n"
		      "\t\tip daddr %s counter drop\n\t}\n", px, gw);
	buf_printf(b, "\tchain guest_in {\n"
		      "\t\tmeta nfproto ipv6 counter drop\n"
		      "\t\tudp sport 68 udp dport 67 accept\n"
		      "\t\tiifname . ip saddr . ether saddr != @guests counter drop\n"
		      "\t\tct state established,related accept\n"
		      "\t\tip daddr %s udp dport 53 accept\n"
		      "\t\tip daddr %s tcp dport 53 accept\n", gw, gw);
	/* The credential broker (berth-web's): after the source check, so
	 * the address it sees is the machine's own. */
	if (c->broker_port > 0)
		buf_printf(b, "\t\tip daddr %s tcp dport %d accept\n", gw, c->broker_port);
	buf_adds(b, "\t\tcounter drop\n\t}\n");
	buf_printf(b, "\tchain forward { type filter hook forward priority filter; policy accept;\n"
		      "\t\tiifname \"%s*\" jump guest_fwd\n"
		      "\t\toifname \"%s*\" jump to_guest\n\t}\n", px, px);
	buf_adds(b, "\tchain guest_fwd {\n"
		    "\t\tct state established,related accept\n"
		    "\t\tmeta nfproto ipv6 counter drop\n"
		    "\t\tiifname . ip saddr . ether saddr != @guests counter drop\n"
		    "\t\toifname \"bt*\" counter drop\n"
		    "\t\tiifname vmap @egress\n"
		    "\t\tcounter drop\n\t}\n"
		    "\tchain to_guest {\n"
		    "\t\tct state established,related accept\n"
		    "\t\tcounter drop\n\t}\n");
	/* From the host: DHCP answers, any TCP port from root (hostd: SSH,
	 * berth exec, the previews' connections it hands berth-web), SSH from
	 * berth-sshgw; no other local user, berth-web's included. */
	buf_printf(b, "\tchain output { type filter hook output priority filter; policy accept;\n"
		      "\t\toifname \"%s*\" jump guest_out\n\t}\n", px);
	buf_adds(b, "\tchain guest_out {\n");
	/* Segments from the broker's port come from berth-web's socket (or
	 * root's) or from nobody's: a local user who took the port while
	 * berth-web was down (a port below 1024 needs a capability; one above
	 * does not) gets no SYN-ACK out, so no guest's request.  Before the
	 * conntrack rule, which would pass a reply (skuid is the listener's
	 * for a SYN-ACK). */
	if (c->broker_port > 0) {
		if (c->has_web_uid && c->web_uid != 0)
			buf_printf(b, "\t\tip saddr %s tcp sport %d meta skuid != { 0, %u } "
				      "counter drop\n", gw, c->broker_port, c->web_uid);
		else
			buf_printf(b, "\t\tip saddr %s tcp sport %d meta skuid != 0 counter drop\n",
				   gw, c->broker_port);
	}
	buf_adds(b, "\t\tct state established,related accept\n"
		    "\t\tudp sport 67 udp dport 68 accept\n");
	/* The broker's answers on a connection conntrack lost (a policy
	 * change flushes the machine's zone; another instance's flush of a
	 * zone of the same number too): taken up again, never a new one (no
	 * SYN: the host opens no connection from the broker's port). */
	if (c->broker_port > 0)
		buf_printf(b, "\t\tip saddr %s tcp sport %d tcp flags & syn == 0 accept\n", gw,
			   c->broker_port);
	buf_adds(b, "\t\tmeta skuid 0 meta l4proto tcp accept\n");
	if (c->has_gw_uid)
		buf_printf(b, "\t\tmeta skuid %u tcp dport 22 accept\n", c->gw_uid);
	buf_adds(b, "\t\tcounter drop\n\t}\n");
	/* After NAT: to a live fork's guest, its source's address. */
	buf_printf(b, "\tchain alias { type filter hook postrouting priority 300; policy accept;\n"
		      "\t\toifname \"%s*\" oifname vmap @aliases\n\t}\n", px);
	buf_printf(b, "\tchain nat { type nat hook postrouting priority srcnat; policy accept;\n"
		      "\t\tip saddr %s/%d oifname != \"%s*\" masquerade\n\t}\n", net, c->prefix, px);
	buf_adds(b, "}\n");
	for (size_t i = 0; i < n; i++) {
		domain_sets(c, ms[i].egress, b);
		machine_body(c, &ms[i], false, b);
		machine_elements(c, &ms[i], b);
	}
}

void net_user_ruleset(const struct net_conf *c, uint32_t uid_lo, uint32_t uid_hi,
		      char resolvers[][48], size_t nres, const int *ports, size_t nports,
		      struct buf *b)
{
	const char *t = c->table;

	buf_printf(b, "add table inet %s\ndelete table inet %s\n", t, t);
	buf_printf(b, "table inet %s {\n", t);
	closed4_set(c, b);
	/* Loopback, v4-mapped, unique-local, link-local, multicast. */
	buf_adds(b, "\tset closed6 { type ipv6_addr; flags interval; auto-merge; elements = {"
		    " ::/127, ::ffff:0.0.0.0/96, 64:ff9b::/96, fc00::/7, fe80::/10, ff00::/8 } }\n");
	buf_adds(b, "\tset ssh_forwards { type inet_service;");
	for (size_t i = 0; i < nports; i++)
		buf_printf(b, "%s%d", i ? ", " : " elements = { ", ports[i]);
	buf_adds(b, nports ? " } }\n" : " }\n");
	buf_printf(b, "\tchain output { type filter hook output priority filter; policy accept;\n"
		      "\t\tmeta skuid %u-%u jump qemu_out\n", uid_lo, uid_hi);
	/* A new connection to a machine's SSH forward: root (hostd, berth
	 * exec) and berth-sshgw only. */
	if (c->has_gw_uid)
		buf_printf(b, "\t\tct state new ip daddr 127.0.0.0/8 tcp dport @ssh_forwards "
			      "meta skuid != { 0, %u } counter reject with tcp reset\n", c->gw_uid);
	else
		buf_adds(b, "\t\tct state new ip daddr 127.0.0.0/8 tcp dport @ssh_forwards "
			    "meta skuid != 0 counter reject with tcp reset\n");
	buf_adds(b, "\t}\n");
	/* Replies (the SSH forward's accepted connections) first; then the
	 * host's resolvers on port 53 (QEMU's 10.0.2.3 forwards there); then
	 * no address of the host's own, and no closed range. */
	buf_adds(b, "\tchain qemu_out {\n\t\tct state established,related accept\n");
	for (size_t i = 0; i < nres; i++)
		buf_printf(b, "\t\t%s daddr %s meta l4proto { tcp, udp } th dport 53 accept\n",
			   strchr(resolvers[i], ':') ? "ip6" : "ip", resolvers[i]);
	buf_adds(b, "\t\tfib daddr type { local, broadcast, multicast, anycast } counter reject\n"
		    "\t\tip daddr @closed4 counter reject\n"
		    "\t\tip6 daddr @closed6 counter reject\n\t}\n}\n");
}
