/*
 * Unit tests of common/netpolicy.c, where the credential broker may
 * connect: the ranges closed always (loopback, link-local, private, ...,
 * in IPv4, IPv6, v4-mapped and NAT64 forms), a closed list of hostd's, an
 * allow list that wins over both, the reasons given (the address, the
 * range), malformed lists refused naming the element; and the host's own
 * addresses asked of the kernel (loopback, an address of this host's
 * interfaces, which no range closes).
 */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <string.h>

#include "common/netpolicy.h"
#include "tests/unit/tap.h"

static struct sockaddr_storage ss;

/* TEXT as a socket address (IPv4 or IPv6, port 443). */
static const struct sockaddr *sa(const char *text)
{
	struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;

	memset(&ss, 0, sizeof(ss));
	if (inet_pton(AF_INET, text, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons(443);
	} else if (inet_pton(AF_INET6, text, &s6->sin6_addr) == 1) {
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(443);
	}
	return (const struct sockaddr *)&ss;
}

static void test_ranges(void)
{
	struct err e = { 0 };
	struct netpolicy *p = netpolicy_new("203.0.113.0/24, 2001:db8:1::/48", NULL, &e);
	char why[256];
	static const char *const closed[] = {
		"127.0.0.1", "127.255.0.9", "0.0.0.0", "169.254.169.254", "10.1.2.3",
		"172.16.0.1", "172.31.255.254", "192.168.1.1", "100.64.0.1", "192.0.0.170",
		"198.18.0.1", "224.0.0.1", "239.1.2.3", "255.255.255.255", "::1", "::",
		"::127.0.0.1", "fd00::1", "fe80::1", "fec0::1", "ff02::1",
		"::ffff:127.0.0.1", "::ffff:169.254.169.254", "::ffff:10.0.0.1",
		"64:ff9b::a9fe:a9fe", "64:ff9b::7f00:1", "64:ff9b:1::1",
		"203.0.113.9", "2001:db8:1::5",
	};
	static const char *const open[] = {
		"1.1.1.1", "93.184.216.34", "172.32.0.1", "172.15.255.255", "100.128.0.1",
		"198.51.100.170", "11.0.0.1", "2606:4700::1111", "::ffff:1.1.1.1",
		"64:ff9b::101:101", "2001:db8:2::1", "203.0.114.1",
	};

	check(p != NULL, "a policy with a closed list of IPv4 and IPv6 networks");
	if (!p)
		return;
	for (size_t i = 0; i < sizeof(closed) / sizeof(closed[0]); i++)
		if (!check(!netpolicy_ranges_allow(p, sa(closed[i]), why, sizeof(why)),
			   "closed: %s", closed[i]))
			diag("allowed");
	for (size_t i = 0; i < sizeof(open) / sizeof(open[0]); i++)
		if (!check(netpolicy_ranges_allow(p, sa(open[i]), why, sizeof(why)), "open: %s",
			   open[i]))
			diag("%s", why);
	netpolicy_ranges_allow(p, sa("169.254.169.254"), why, sizeof(why));
	check_str(why, "169.254.169.254 is link-local (a cloud's instance metadata) "
		  "(169.254.0.0/16)", "the reason names the address and the range");
	netpolicy_ranges_allow(p, sa("::ffff:127.0.0.1"), why, sizeof(why));
	check_str(why, "::ffff:127.0.0.1 is loopback (127.0.0.0/8)",
		  "a v4-mapped address is its IPv4 address");
	netpolicy_ranges_allow(p, sa("203.0.113.9"), why, sizeof(why));
	check_str(why, "203.0.113.9 is in 203.0.113.0/24, closed on this host (egress_closed, "
		  "the host's networks, the guest network)", "the closed list's reason");
	netpolicy_ranges_allow(p, sa("fd12::1"), why, sizeof(why));
	check_str(why, "fd12::1 is unique local (private) (fc00::/7)", "an IPv6 reason");
	netpolicy_free(p);
}

static void test_allow(void)
{
	struct err e = { 0 };
	struct netpolicy *p = netpolicy_new("198.51.100.0/24",
					    "10.9.8.7/32 127.0.0.1,fd00:1::/64,198.51.100.170", &e);
	char why[256];

	check(p != NULL, "a policy with an allow list (commas and spaces)");
	if (!p)
		return;
	check(netpolicy_ranges_allow(p, sa("10.9.8.7"), why, sizeof(why)) &&
	      netpolicy_allows(p, sa("127.0.0.1"), why, sizeof(why)) &&
	      netpolicy_ranges_allow(p, sa("fd00:1::9"), why, sizeof(why)),
	      "allowed explicitly: a private address, loopback (also as the host's own), a "
	      "unique-local network");
	check(netpolicy_ranges_allow(p, sa("198.51.100.170"), why, sizeof(why)) &&
	      !netpolicy_ranges_allow(p, sa("198.51.100.171"), why, sizeof(why)),
	      "an address alone is a /32, over a closed network that holds it");
	check(!netpolicy_ranges_allow(p, sa("10.9.8.6"), why, sizeof(why)) &&
	      !netpolicy_allows(p, sa("127.0.0.2"), why, sizeof(why)) &&
	      !netpolicy_ranges_allow(p, sa("fd00:2::1"), why, sizeof(why)),
	      "its neighbours stay closed");
	check(netpolicy_ranges_allow(p, sa("::ffff:10.9.8.7"), why, sizeof(why)),
	      "v4-mapped, allowed as its IPv4 address");
	netpolicy_free(p);
}

static void test_lists(void)
{
	struct err e = { 0 };
	static const char *const bad[] = {
		"10.0.0.0/33", "10.0.0.1/8", "example.com", "10.0.0.0/", "10.0.0.0/-1",
		"fd00::1/64", "::/129", "1.2.3", "10.0.0.0/8x",
	};

	check(netpolicy_check_list("broker_allow", "", &e) == 0 &&
	      netpolicy_check_list("broker_allow", NULL, &e) == 0 &&
	      netpolicy_check_list("broker_allow", " 10.0.0.0/8 , ::1 ,fd00::/8", &e) == 0,
	      "lists: empty, none, and spaced ones");
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct err be = { 0 };
		char want[64];
		snprintf(want, sizeof(want), "'%s' is not a network", bad[i]);
		check(netpolicy_check_list("broker_allow", bad[i], &be) < 0 && be.status == 400 &&
		      !strcmp(be.code, "invalid_config") && strstr(be.msg, "broker_allow: ") &&
		      strstr(be.msg, want), "refused, named: %s", bad[i]);
	}
	err_clear(&e);
	check(netpolicy_new(NULL, "1.2.3.4/40", &e) == NULL && strstr(e.msg, "1.2.3.4/40"),
	      "a policy with a malformed allow list is not made");
}

static void test_local(void)
{
	struct err e = { 0 };
	struct netpolicy *p = netpolicy_new(NULL, NULL, &e);
	struct ifaddrs *ifs = NULL;
	char why[256], own[INET6_ADDRSTRLEN] = "";

	check(netpolicy_local(sa("127.0.0.1")) && netpolicy_local(sa("127.0.0.53")),
	      "loopback is the host's own");
	check(!netpolicy_local(sa("192.0.2.1")) && !netpolicy_local(sa("2001:db8::1")),
	      "a documentation address is not");
	/* An address of an interface that no range closes (the test
	 * machine's own public or documentation address), when there is one. */
	if (getifaddrs(&ifs) == 0) {
		for (struct ifaddrs *i = ifs; i && !own[0]; i = i->ifa_next) {
			if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET ||
			    (i->ifa_flags & IFF_LOOPBACK))
				continue;
			if (netpolicy_ranges_allow(p, i->ifa_addr, why, sizeof(why)))
				inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, own,
					  sizeof(own));
		}
		freeifaddrs(ifs);
	}
	if (!own[0]) {
		skip("an address of this host's that no range closes is refused",
		     "no such address on this machine");
	} else {
		check(netpolicy_local(sa(own)) && !netpolicy_allows(p, sa(own), why, sizeof(why)),
		      "an address of this host's that no range closes is refused (%s)", own);
		char want[128];
		snprintf(want, sizeof(want), "%s is an address of this host", own);
		check_str(why, want, "  saying so");
	}
	netpolicy_free(p);
}

int main(void)
{
	test_ranges();
	test_allow();
	test_lists();
	test_local();
	return tap_done("test_netpolicy");
}
