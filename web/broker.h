/* The credential broker, berth-web's half (hostd/secrets.h has hostd's):
 * plain HTTP on the guests' gateway address, which the boundary opens to
 * guests only (hostd/net_rules.c).  A guest calls
 * http://GATEWAY:PORT/NAME/PATH; for each call the broker
 *
 *   - passes the guest's connection (the accepted socket itself) to hostd
 *     over STATE/webctl.sock (op "broker", with NAME, the method and
 *     PATH): hostd reads the peer's address, knows the machine, and
 *     answers the secret's URL and header lines, or a refusal (403 for a
 *     machine not allowed NAME, or no such secret), which the guest gets;
 *   - forwards the request to that URL + PATH (query included), to an
 *     address common/netpolicy.h allows (checked on the resolved address
 *     at each connect: not loopback, link-local, a private or closed
 *     network, nor the host's own, unless allowed), over TLS
 *     verified against the system's CAs (or ca_file), libcurl: the guest's
 *     headers but the hop-by-hop ones, Host, Expect, Authorization,
 *     x-api-key and those the secret sets, then the secret's; the body
 *     streams as it arrives (up to max_body);
 *   - streams the answer back as it comes (server-sent events event by
 *     event): the upstream's status, its headers but the hop-by-hop ones,
 *     its body; 502 when the upstream cannot be reached or its certificate
 *     is not trusted, 504 when it stays silent for timeout_s (before or
 *     during its answer: then the stream is cut);
 *   - reports the call's end on the same webctl connection (status, bytes
 *     each way, why it failed), which hostd logs (`berth secret log`).
 *
 * libmicrohttpd, one thread per connection (at most 512, 32 per guest
 * address), and one more per call for libcurl's transfer, which the
 * connection's thread feeds (the request's body) and drains (the answer's)
 * through two bounded buffers.  A secret's header values live in berth-web
 * only for the call that uses them. */
#ifndef BERTH_WEB_BROKER_H
#define BERTH_WEB_BROKER_H

#include <stdint.h>

struct broker;

struct broker_conf {
	const char *webctl_sock;   /* STATE/webctl.sock */
	const char *ca_file;       /* the upstreams' CAs; NULL or "": the system's */
	int timeout_s;             /* how long an upstream may stay silent */
	uint64_t max_body;         /* the largest request body forwarded */
	const char *closed;        /* networks never connected to, CIDRs (hostd's: the
				      guest network, egress_closed, the host's);
				      NULL: none but common/netpolicy.h's own */
	const char *allow;         /* networks connected to although closed
				      (berth.conf's broker_allow); NULL: none */
};

/* A listening socket on ADDR:PORT (IPv4), bound with IP_FREEBIND: the
 * gateway address exists only while a machine's tap carries it.  Called as
 * root, before berth-web drops to its user.  -1 (logged) on error. */
int broker_listen(const char *spec);

/* Serve the broker on LISTEN_FD (broker_listen's; the broker's from now
 * on) with its own threads.  C's strings are copied.  NULL (logged) on
 * failure. */
struct broker *broker_start(int listen_fd, const struct broker_conf *c);
/* Stop serving and free B (calls in progress are cut); NULL is fine. */
void broker_stop(struct broker *b);

#endif
