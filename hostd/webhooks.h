/* Lifecycle-event webhooks: a user registers a URL (and which events of
 * which machine it wants); every event of theirs that matches (hostd/
 * events.h) is queued in the database for it, and hostd's delivery
 * threads POST it there, signed with the webhook's secret (HMAC-SHA256),
 * retried with exponential backoff (berth.conf's webhook_retry, doubling,
 * webhook_attempts tries in all), in order per webhook, with a bounded
 * log of the deliveries.  Nothing queued is lost to a crash or a restart:
 * pending deliveries resume when hostd starts (one in flight at a crash is
 * sent again: at least once).
 *
 * hostd runs as root and the URL is a user's: it connects only to
 * addresses common/netpolicy.h allows (not loopback, private, link-local,
 * the guest network, egress_closed, the host's own...) unless berth.conf's
 * webhook_allow opens them, checked on the address each connection is
 * made to; it follows no redirect, uses no proxy, verifies https
 * certificates, and reads at most a small part of an answer. */
#ifndef BERTH_HOSTD_WEBHOOKS_H
#define BERTH_HOSTD_WEBHOOKS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "hostd/db.h"

struct hostd;

#define WEBHOOK_MAX_PER_USER 16
#define WEBHOOK_URL_MAX 500
#define WEBHOOK_LOG_KEEP 100        /* finished deliveries kept per webhook */
#define WEBHOOK_PENDING_MAX 1000    /* queued per webhook; more are dropped (failed) */
#define WEBHOOK_TIMEOUT_S 10        /* a delivery's whole request */
#define WEBHOOK_SECRET_HEX 64       /* 32 random bytes in hex */

/* Start the delivery threads (they deliver what is pending at once).
 * 0, or -1 with E (a bad webhook_allow, no thread). */
int webhooks_start(struct hostd *h, struct err *e);
/* Stop them: a delivery in flight is cut (it stays pending). */
void webhooks_stop(struct hostd *h);

/* Queue EV (recorded, with its id) for each of its owner's webhooks that
 * wants it, and wake the threads.  A failure is logged. */
void webhooks_enqueue(struct hostd *h, const struct db_event *ev);

/* POST /v1/webhooks: REQ {"url", "events"?, "machine"?} for OWNER.  The
 * new webhook's JSON with its "secret" (shown this once): a new
 * reference; NULL with E: 400 naming the field (invalid_url,
 * invalid_events, invalid_name; a URL whose host resolves to a closed
 * address: url_refused), 409 too_many_webhooks. */
json_t *webhook_create(struct hostd *h, const char *owner, json_t *req, struct err *e);
/* OWNER's webhooks {"webhooks": [...]} without their secrets. */
json_t *webhook_list(struct hostd *h, const char *owner, struct err *e);
/* Remove OWNER's webhook ID and its queue.  404 no_webhook for anyone
 * else's. */
int webhook_delete(struct hostd *h, const char *owner, int64_t id, struct err *e);
/* The last LIMIT deliveries of OWNER's webhook ID, oldest first:
 * {"deliveries": [...]}.  404 no_webhook for anyone else's. */
json_t *webhook_deliveries(struct hostd *h, const char *owner, int64_t id, int limit,
			   struct err *e);

/* ---- pure parts (unit-tested) ---- */

/* URL's parts when it is http:// or https://, a host (a name, an IPv4
 * address or an [IPv6] one), an optional port, an optional path and
 * query; no user or password, no fragment, printable ASCII, at most
 * WEBHOOK_URL_MAX bytes.  0, or -1 with E 400 "invalid_url" saying what
 * is wrong. */
struct webhook_url {
	bool https;
	char host[256];     /* without the brackets of an IPv6 address */
	int port;           /* the URL's, or 80/443 */
};
int webhook_url_parse(const char *url, struct webhook_url *u, struct err *e);
/* Whether KIND is an event kind (hostd/events.h). */
bool webhook_kind_valid(const char *kind);
/* SIG (72 bytes) = "sha256=" and the hex HMAC-SHA256, keyed with SECRET
 * (the string), of TIMESTAMP (decimal) "." BODY (LEN bytes). */
void webhook_sign(const char *secret, int64_t timestamp, const char *body, size_t len,
		  char sig[72]);

#endif
