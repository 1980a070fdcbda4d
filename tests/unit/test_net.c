/*
 * Unit tests of the network ruleset (hostd/net_rules.c): the rules each
 * guest meets, a policy's chain line by line, names; and, as root with nft
 * at hand, that the kernel takes the whole table, and that a machine's
 * add, policy and remove scripts apply twice without error (they are what
 * hostd runs), in a table of the test's own, removed after.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/buf.h"
#include "hostd/egress.h"
#include "hostd/net.h"
#include "tests/unit/tap.h"

static struct net_conf conf(void)
{
	struct net_conf c;

	memset(&c, 0, sizeof(c));
	snprintf(c.table, sizeof(c.table), "berth-unit%ld", (long)getpid());
	snprintf(c.tap_prefix, sizeof(c.tap_prefix), "btzz-");
	c.net = (10u << 24) | (87u << 16);
	c.prefix = 16;
	c.mask = 0xffff0000u;
	c.gateway = c.net + 1;
	c.has_gw_uid = true;
	c.gw_uid = 998;
	snprintf(c.closed[c.n_closed++], sizeof(c.closed[0]), "10.0.0.0/8");
	snprintf(c.closed[c.n_closed++], sizeof(c.closed[0]), "192.0.2.0/24");
	return c;
}

static struct egress *policy(const char *text)
{
	struct egress *p = calloc(1, sizeof(*p));
	struct err e = { 0 };

	if (!p || egress_parse(text, p, &e) < 0) {
		diag("policy '%s': %s", text, e.msg);
		abort();
	}
	return p;
}

static bool has(const char *hay, const char *needle)
{
	return strstr(hay, needle) != NULL;
}

static void test_rules(void)
{
	struct net_conf c = conf();
	struct egress *open_p = policy("open"), *list = policy("allowed.test:443,*.cdn.test,"
							    "198.51.100.0/24,198.51.100.7:5432-5440,*:53");
	struct net_machine ms[2] = {
		{ .index = 1, .mac = "52:54:00:00:00:01", .egress = open_p },
		{ .index = 2, .mac = "52:54:00:00:00:02", .egress = list,
		  .alias_ip = c.net + 2, .alias_mac = "52:54:00:00:00:01" },
	};
	struct buf b = BUF_INIT;
	const char *r;
	char set[32];

	net_ruleset(&c, ms, 2, &b);
	r = buf_str(&b);
	check(has(r, "add table inet ") && has(r, "delete table inet "),
	      "the table is replaced whole, in one transaction");
	check(has(r, "iifname \"btzz-*\" jump guest_in") &&
	      has(r, "\t\tudp sport 68 udp dport 67 accept\n") &&
	      has(r, "\t\tip daddr 10.87.0.1 udp dport 53 accept\n") &&
	      has(r, "\t\tip daddr 10.87.0.1 tcp dport 53 accept\n"),
	      "to the host: DHCP and DNS on the gateway");
	check(has(r, "chain guest_in {\n\t\tmeta nfproto ipv6 counter drop\n") &&
	      has(r, "\t\tcounter drop\n\t}\n\tchain forward"),
	      "to the host: IPv6 and everything else dropped");
	check(!has(r, "dport 9480"), "no broker port: no rule for it");
	{
		/* The broker: on the gateway only, after the source check (a
		 * spoofed address never reaches it) and before the final drop. */
		struct net_conf cb = conf();
		struct buf bb = BUF_INIT;
		cb.broker_port = 9480;
		cb.has_web_uid = true;
		cb.web_uid = 998;
		net_ruleset(&cb, ms, 2, &bb);
		const char *rb = buf_str(&bb);
		const char *in = strstr(rb, "chain guest_in {");
		const char *spoof = in ? strstr(in, "iifname . ip saddr . ether saddr != @guests "
						"counter drop") : NULL;
		const char *broker = in ? strstr(in, "\t\tip daddr 10.87.0.1 tcp dport 9480 "
						 "accept\n") : NULL;
		const char *drop = broker ? strstr(broker, "\t\tcounter drop\n\t}") : NULL;
		const char *end = in ? strstr(in, "\t}") : NULL;
		check(spoof && broker && drop && spoof < broker && broker < end && drop == end - 15,
		      "the broker: its port on the gateway, after the source check, before the "
		      "drop, in guest_in only");
		check(strstr(rb, "dport 9480") == strstr(broker, "dport 9480") &&
		      !strstr(strstr(broker, "dport 9480") + 1, "dport 9480"),
		      "the broker's port is opened nowhere else");
		const char *out = strstr(rb, "chain guest_out {");
		const char *est = out ? strstr(out, "ct state established,related accept\n") : NULL;
		const char *pick = out ? strstr(out, "\t\tip saddr 10.87.0.1 tcp sport 9480 tcp flags "
						"& syn == 0 accept\n") : NULL;
		check(est && pick && est < pick && pick < strstr(out, "\t}"),
		      "its answers to guests: taken up again after a conntrack flush, never "
		      "a new connection (no SYN)");
		const char *own = out ? strstr(out, "\t\tip saddr 10.87.0.1 tcp sport 9480 meta skuid "
						"!= { 0, 998 } counter drop\n") : NULL;
		check(own && est && own < est && out + strlen("chain guest_out {\n") == own,
		      "segments from the broker's port: berth-web's user's and root's only, "
		      "before conntrack's replies (a squatter's SYN-ACK is one)");
		buf_free(&bb);
	}
	check(has(r, "iifname . ip saddr . ether saddr != @guests counter drop"),
	      "a packet from a tap must have its machine's address and MAC");
	check(has(r, "\"btzz-1\" . 10.87.0.2 . 52:54:00:00:00:01"),
	      "machine 1: its tap, address and MAC");
	check(has(r, "\"btzz-2\" . 10.87.0.3 . 52:54:00:00:00:01") &&
	      has(r, "add rule inet berth-unit") && has(r, " r2 ip saddr 10.87.0.2 ip saddr set 10.87.0.3") &&
	      has(r, " a2 ip daddr 10.87.0.3 ip daddr set 10.87.0.2"),
	      "a live fork: its source's address and MAC mapped to its own both ways");
	check(has(r, "oifname \"bt*\" counter drop"), "nothing from a tap to any tap");
	check(has(r, "ct state established,related accept\n\t\tmeta nfproto ipv6") &&
	      has(r, " r1 ct original zone set 1") && has(r, " r2 ct original zone set 2"),
	      "established flows first, each tap its conntrack zone");
	check(has(r, "0.0.0.0/8, 127.0.0.0/8, 169.254.0.0/16, 224.0.0.0/4, 240.0.0.0/4, "
		     "10.87.0.0/16, 10.0.0.0/8, 192.0.2.0/24 }"),
	      "closed: loopback, link-local, multicast, the guest network, the configured ones");
	check(has(r, "udp sport 67 udp dport 68 accept\n\t\tmeta skuid 0 meta l4proto tcp accept\n"
		     "\t\tmeta skuid 998 tcp dport 22 accept\n\t\tcounter drop"),
	      "from the host to a guest: any TCP port from root (SSH, previews), SSH from the "
	      "gateway user, nothing from other users");
	check(has(r, "ip saddr 10.87.0.0/16 oifname != \"btzz-*\" masquerade"),
	      "masqueraded on the way out");
	/* Machine 1, open. */
	check(has(r, " m1 ip daddr @closed4 goto m1-deny\n") && has(r, " m1 goto m1-ok\n"),
	      "open: closed ranges refused, the rest allowed");
	/* Machine 2's list, rule by rule. */
	net_domain_set("allowed.test", set, sizeof(set));
	check(has(r, " m2 ip daddr @closed4 goto m2-deny\n"), "list: closed ranges first");
	char want[160];
	snprintf(want, sizeof(want), " m2 meta l4proto { tcp, udp } ip daddr @%s th dport 443 "
		 "goto m2-ok\n", set);
	check(has(r, want), "list: a domain with its port");
	net_domain_set("cdn.test", set, sizeof(set));
	snprintf(want, sizeof(want), " m2 ip daddr @%s goto m2-ok\n", set);
	check(has(r, want), "list: a domain without a port: every protocol");
	check(has(r, " m2 ip daddr { 198.51.100.0/24 } goto m2-ok\n") &&
	      has(r, " m2 meta l4proto { tcp, udp } ip daddr { 198.51.100.7/32 } th dport "
		     "5432-5440 goto m2-ok\n") &&
	      has(r, " m2 meta l4proto { tcp, udp } ip daddr { 0.0.0.0/0 } th dport 53 goto m2-ok\n"),
	      "list: networks grouped by their ports");
	check(has(r, " m2 goto m2-deny\n"), "list: the rest refused");
	check(has(r, " m2-deny meta l4proto tcp reject with tcp reset\n") &&
	      has(r, " m2-deny reject with icmpx admin-prohibited\n"),
	      "refused at once: a TCP reset, an ICMP error");
	check(has(r, "update @m2-ok { ip daddr . meta l4proto . th dport }") &&
	      has(r, "update @m2-deny { ip daddr . meta l4proto . th dport }"),
	      "both sides counted per destination");
	char a[32], b2[32];
	net_domain_set("Allowed.Test", a, sizeof(a));
	net_domain_set("allowed.test", b2, sizeof(b2));
	check(!strcmp(a, b2) && strlen(a) == 18, "a domain's set name: case-blind, d- and 16 hex");
	buf_free(&b);

	/* The scripts, for real when possible. */
	if (getuid() != 0 || access("/usr/sbin/nft", X_OK) != 0) {
		skip("the kernel takes the table", "needs root and nft");
		free(open_p);
		free(list);
		return;
	}
	struct buf full = BUF_INIT, add = BUF_INIT, rm = BUF_INIT, rp = BUF_INIT;
	char f[4][64], del[128];
	c.broker_port = 9480;	/* with the broker's rules */
	c.has_web_uid = true;
	c.web_uid = 998;
	net_ruleset(&c, ms, 2, &full);
	net_machine_script(&c, &ms[1], true, &add);
	net_machine_script(&c, &ms[0], false, &rp);
	net_machine_remove_script(&c, &ms[1], &rm);
	const struct buf *scripts[4] = { &full, &rm, &add, &rp };
	for (int i = 0; i < 4; i++) {
		snprintf(f[i], sizeof(f[i]), "/tmp/berth-test-net-%ld-%d.nft", (long)getpid(), i);
		write_file(f[i], scripts[i]->data, scripts[i]->len);
	}
	char *const load[] = { "/usr/sbin/nft", "-f", f[0], NULL };
	char *const remove1[] = { "/usr/sbin/nft", "-f", f[1], NULL };
	char *const add1[] = { "/usr/sbin/nft", "-f", f[2], NULL };
	char *const replace1[] = { "/usr/sbin/nft", "-f", f[3], NULL };
	char *out = NULL;
	check(tool_run(load, NULL, &out) == 0, "the kernel takes the whole table");
	free(out);
	out = NULL;
	check(tool_run(remove1, NULL, &out) == 0 && tool_run(remove1, NULL, NULL) == 0,
	      "a machine's removal applies, and again when it is gone");
	free(out);
	check(tool_run(add1, NULL, NULL) == 0 && tool_run(add1, NULL, NULL) == 0,
	      "its addition applies, and again when it is there");
	check(tool_run(replace1, NULL, NULL) == 0 && tool_run(replace1, NULL, NULL) == 0,
	      "a policy's replacement applies, twice");
	snprintf(del, sizeof(del), "%s", c.table);
	char *const drop[] = { "/usr/sbin/nft", "delete", "table", "inet", del, NULL };
	check(tool_run(drop, NULL, NULL) == 0, "the test's table is removed");
	for (int i = 0; i < 4; i++)
		unlink(f[i]);
	buf_free(&full);
	buf_free(&add);
	buf_free(&rm);
	buf_free(&rp);
	free(open_p);
	free(list);
}

/* network = user: QEMU's uids meet the host's addresses and closed ranges
 * with a reject, but replies and the resolvers' port 53. */
static void test_user_rules(void)
{
	struct net_conf c = conf();
	struct buf b = BUF_INIT;
	char res[2][48] = { "10.255.255.53", "fd00::53" };
	const char *r;

	int ports[] = { 40022, 40023 };

	c.has_gw_uid = true;
	c.gw_uid = 992;
	net_user_ruleset(&c, 2013265920, 2030043135, res, 2, ports, 2, &b);
	r = buf_str(&b);
	check(has(r, "meta skuid 2013265920-2030043135 jump qemu_out"),
	      "user: only QEMU's uids meet the filter");
	const char *est = strstr(r, "ct state established,related accept");
	const char *dns = strstr(r, "ip daddr 10.255.255.53 meta l4proto { tcp, udp } th dport 53 accept");
	const char *dns6 = strstr(r, "ip6 daddr fd00::53 meta l4proto { tcp, udp } th dport 53 accept");
	const char *local = strstr(r, "fib daddr type { local, broadcast, multicast, anycast } counter reject");
	const char *c4 = strstr(r, "ip daddr @closed4 counter reject");
	const char *c6 = strstr(r, "ip6 daddr @closed6 counter reject");
	check(est && dns && dns6 && local && c4 && c6 && est < dns && dns < dns6 && dns6 < local &&
	      local < c4 && c4 < c6,
	      "user: replies, then the resolvers' port 53, then no host address, no closed range");
	check(has(r, "127.0.0.0/8") && has(r, "169.254.0.0/16") && has(r, "10.0.0.0/8") &&
	      has(r, "192.0.2.0/24") && has(r, "fe80::/10") && has(r, "fc00::/7") && has(r, "::/127"),
	      "user: loopback, link-local, private and the host's networks are closed");
	check(!has(r, "hook forward") && !has(r, "hook prerouting"), "user: no other hook");
	check(has(r, "set ssh_forwards { type inet_service; elements = { 40022, 40023 } }") &&
	      has(r, "ct state new ip daddr 127.0.0.0/8 tcp dport @ssh_forwards meta skuid != "
		     "{ 0, 992 } counter reject with tcp reset"),
	      "user: the machines' SSH forwards are for root and berth-sshgw only");
	if (getuid() != 0 || access("/usr/sbin/nft", X_OK) != 0) {
		skip("the kernel takes the user-mode table", "needs root and nft");
		buf_free(&b);
		return;
	}
	char f[64], del[128];
	snprintf(f, sizeof(f), "/tmp/berth-test-net-%ld-user.nft", (long)getpid());
	write_file(f, b.data, b.len);
	char *const load[] = { "/usr/sbin/nft", "-f", f, NULL };
	check(tool_run(load, NULL, NULL) == 0 && tool_run(load, NULL, NULL) == 0,
	      "user: the kernel takes the table, and again over itself");
	snprintf(del, sizeof(del), "%s", c.table);
	char *const drop[] = { "/usr/sbin/nft", "delete", "table", "inet", del, NULL };
	check(tool_run(drop, NULL, NULL) == 0, "user: the test's table is removed");
	unlink(f);
	buf_free(&b);
}

int main(void)
{
	test_rules();
	test_user_rules();
	return tap_done("test_net");
}
