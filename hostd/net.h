/* The network around machines (network = routed): what a guest reaches.
 *
 * Each machine has a tap of its own, made and kept by hostd, with no bridge:
 * the host routes the machine's one IPv4 address (GUESTNET + 1 + its index)
 * to its tap, and every tap carries the same gateway address (GUESTNET + 1,
 * a /32), so no two guests share a link.  dnsmasq (started by hostd, one
 * per instance) answers DHCP with each machine's fixed address and DNS on
 * the gateway, and fills the nftables sets of the domains egress policies
 * name with the addresses it answered.  One nftables table per instance
 * (inet berth-INSTANCE) decides, for every packet:
 *  - from a guest to the host: DHCP and DNS to the gateway, and the
 *    credential broker (broker_port, hostd/secrets.h) there, after the
 *    check of its source; nothing else;
 *  - from a guest onwards: only from its own tap, address and MAC (other
 *    packets are dropped), never to another tap, never to the ranges the
 *    host keeps closed (loopback, link-local, the host's own networks,
 *    egress_closed: by default the private ones), then its egress policy
 *    (hostd/egress.h), a chain of its own; what it refuses gets a TCP reset
 *    or an ICMP error at once;
 *  - from the host to a guest: SSH from root and the gateway user, DHCP
 *    answers, replies; no other local user reaches a guest, and only
 *    berth-web's user (and root) may answer from the broker's port;
 *  - out: masqueraded behind the host.
 * Connections already allowed are let through by conntrack (each tap its
 * own zone, so one guest cannot match another's connections); a policy
 * change flushes the machine's connections, and those still allowed are
 * taken up again at their next packet while the others get a reset.
 *
 * The rules are applied with libnftables, in one transaction each. */
#ifndef BERTH_NET_H
#define BERTH_NET_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/err.h"
#include "hostd/egress.h"

struct hostd;
struct machine;

/* What the ruleset is made of: the pure part, for net_ruleset. */
struct net_conf {
	char table[48];          /* "berth-INSTANCE" */
	char tap_prefix[16];     /* "btXXXX-": this instance's taps */
	uint32_t net, mask;      /* the guest network, host order */
	int prefix;
	uint32_t gateway;        /* net + 1 */
	uint32_t gw_uid;         /* the gateway user's uid (SSH to guests) */
	bool has_gw_uid;
	int broker_port;         /* the credential broker's on the gateway (TCP); 0: none */
	uint32_t web_uid;        /* berth-web's user's uid: the broker's answers are its */
	bool has_web_uid;
	/* Closed to every guest: the configured egress_closed and the host's
	 * own networks, CIDRs as text ("10.0.0.0/8"). */
	char closed[64][20];
	size_t n_closed;
};

/* One machine as the ruleset sees it. */
struct net_machine {
	int index;               /* 1..: its address and tap */
	char mac[18];
	/* A live fork, until its first cold boot, runs with its source's
	 * address and MAC in its memory: the host maps them (1:1) to its own. */
	uint32_t alias_ip;       /* 0: none */
	char alias_mac[18];
	const struct egress *egress;
};

/* Check the network configuration (guest_network, egress_closed,
 * egress_default) into C.  400 "invalid_config" naming the key. */
int net_conf_make(struct hostd *h, struct net_conf *c, struct err *e);
/* The whole table for machines MS[0..N), as an nft script that replaces
 * it (one transaction), appended to OUT.  Pure. */
void net_ruleset(const struct net_conf *c, const struct net_machine *ms, size_t n,
		 struct buf *out);
/* The script that adds machine M (ADD: its sets, chains and elements) or
 * replaces its policy (its chains and its allow sets). */
void net_machine_script(const struct net_conf *c, const struct net_machine *m, bool add,
			struct buf *out);
/* The script that removes machine M from the table, whatever of it is
 * there. */
void net_machine_remove_script(const struct net_conf *c, const struct net_machine *m,
			       struct buf *out);
/* The set name the resolver fills for DOMAIN: "d-" and 16 hex digits. */
void net_domain_set(const char *domain, char *out, size_t outlen);

/* network = user: the table that keeps QEMU's own connections (uids
 * UID_LO..UID_HI: every guest connection is one of its QEMU's) from the
 * host's addresses and the closed ranges, but for port 53 of the host's
 * resolvers RESOLVERS[0..NRES) (IPv4 or IPv6 text); and the machines' SSH
 * forwards on loopback (PORTS[0..NPORTS)) from every local user but root
 * and berth-sshgw's (C's gw_uid), who could otherwise fill a guest sshd's
 * unauthenticated slots and lock the gateway out.  As an nft script that
 * replaces the table.  Pure. */
void net_user_ruleset(const struct net_conf *c, uint32_t uid_lo, uint32_t uid_hi,
		      char resolvers[][48], size_t nres, const int *ports, size_t nports,
		      struct buf *out);
/* network = user: the table again, with the machines' SSH forwards of now
 * (a machine made, or its port moved).  No-op with network = routed. */
int net_user_refresh(struct hostd *h, struct err *e);

/* Names of machine INDEX: its tap and its address (dotted). */
void net_tap_name(const struct net_conf *c, int index, char *out, size_t outlen);
void net_ip_text(uint32_t ip, char *out, size_t outlen);
uint32_t net_machine_ip(const struct net_conf *c, int index);
/* The largest index the guest network has room for. */
int net_max_index(const struct net_conf *c);

/* Whether machines are on network = routed. */
bool net_routed(const struct hostd *h);
/* The running configuration (network = routed and net_start done). */
const struct net_conf *net_conf(const struct hostd *h);

/* Start the network: IPv4 forwarding on, this instance's table loaded for
 * every machine, its taps made, dnsmasq (re)started.  With network = user,
 * only the table of the uid filter (net_user_ruleset). */
int net_start(struct hostd *h, struct err *e);
/* Stop dnsmasq; when no machine runs, remove the taps and the table too
 * (machines that run keep their network: hostd restarts find it).  With
 * network = user, the table goes when no machine runs. */
void net_stop(struct hostd *h);

/* A free index for a new machine, or -1 (503 "no_address") when the guest
 * network is full. */
int net_pick_index(struct hostd *h, struct err *e);
/* Machine M (with its net_index) joins: its tap, route, DHCP entry and
 * rules.  On failure nothing of it is left. */
int net_machine_add(struct hostd *h, const struct machine *m, struct err *e);
/* Machine M leaves: its rules, DHCP entry, route and tap (best effort;
 * the first failure is logged). */
void net_machine_remove(struct hostd *h, const struct machine *m);
/* Apply machine M's egress policy P (its rules replaced in one
 * transaction, its connections flushed so that what P no longer allows is
 * cut).  On failure the rules in force stay as they were. */
int net_machine_policy(struct hostd *h, const struct machine *m, const struct egress *p,
		       struct err *e);
/* What machine M's guest tried lately: {"allowed": [...], "denied": [...]},
 * each destination with its protocol, port, count and the seconds since.
 * A new reference, or NULL with E. */
json_t *net_egress_log(struct hostd *h, const struct machine *m, struct err *e);

#endif
