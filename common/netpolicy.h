/* Which addresses a daemon may connect to on a user's word: the credential
 * broker's upstreams (web/broker.c), whose URL any user with a token sets
 * (berth secret add NAME --url ...).  Without a policy such a URL points
 * berth-web, and the secret it attaches, at the host's loopback, its own
 * addresses, a cloud's instance metadata (169.254.169.254) or whatever
 * private network the host reaches (server-side request forgery).
 *
 * An address is refused when it is in a range closed always (loopback,
 * this-network, link-local, private and shared ranges, multicast,
 * reserved; IPv6 alike, v4-mapped and NAT64 addresses as their IPv4 one),
 * or in the policy's CLOSED list (hostd's: egress_closed, the host's own
 * networks, the guest network), or when it is an address of this host
 * (asked of the kernel at the time of the check: the host's addresses
 * change), unless it is in the policy's ALLOW list (berth.conf's
 * broker_allow), which wins over all of these.  The check is made on the
 * address a connect(2) is about to use, after the name was resolved, so
 * a name that resolves to a closed address (DNS rebinding included)
 * gets nothing. */
#ifndef BERTH_NETPOLICY_H
#define BERTH_NETPOLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include "common/err.h"

struct netpolicy;

/* Check LIST, comma- or space-separated CIDRs (IPv4 "10.0.0.0/8", IPv6
 * "fd00::/8"; an address alone is a /32 or /128), naming KEY in the
 * error.  0, or -1 with E (400 "invalid_config" naming the element). */
int netpolicy_check_list(const char *key, const char *list, struct err *e);

/* A policy of CLOSED and ALLOW (netpolicy_check_list's lists; NULL or ""
 * for none).  NULL with E on a malformed element.  Free with
 * netpolicy_free (NULL is fine). */
struct netpolicy *netpolicy_new(const char *closed, const char *allow, struct err *e);
void netpolicy_free(struct netpolicy *p);

/* Whether the ranges of P (those closed always, its CLOSED, its ALLOW)
 * let SA (AF_INET or AF_INET6) be connected to: true; false with WHY
 * ("127.0.0.1 is loopback (127.0.0.0/8)").  Pure: the host's own
 * addresses are netpolicy_local's. */
bool netpolicy_ranges_allow(const struct netpolicy *p, const struct sockaddr *sa, char *why,
			    size_t whylen);
/* Whether SA is an address of this host, as the kernel says: a UDP
 * socket connected to it gets it as its own address, or one binds to it
 * (unless the ip_nonlocal_bind sysctl lets any address be bound).  Makes
 * two sockets at most; no packet is sent. */
bool netpolicy_local(const struct sockaddr *sa);
/* Both: whether a connection to SA is allowed; false with WHY. */
bool netpolicy_allows(const struct netpolicy *p, const struct sockaddr *sa, char *why,
		      size_t whylen);

#endif
