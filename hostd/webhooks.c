/* Lifecycle-event webhooks (hostd/webhooks.h).
 *
 * Threads: WORKERS delivery threads share one queue, the database's
 * pending deliveries.  Each takes the first pending delivery of a webhook
 * no other thread is delivering (so one webhook's go one at a time, in
 * order) whose next attempt is due, posts it, records the outcome, and
 * sleeps until the next one is due or webhooks_enqueue wakes it. */
#include "hostd/webhooks.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <netdb.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include "common/buf.h"
#include "common/log.h"
#include "common/netpolicy.h"
#include "common/util.h"
#include "hostd/events.h"
#include "hostd/hostd.h"
#include "hostd/net.h"
#include "common/banned.h"

#define WORKERS 4
#define HEADS_MAX 64            /* pending heads looked at per pass */
#define ANSWER_HEAD_MAX 16384   /* bytes of an answer's head read */
#define ANSWER_BODY_MAX 4096    /* and of its body, then the connection is cut */
#define BACKOFF_MAX_MS (3600 * 1000LL)

static const char *const kinds[] = { "created", "started", "woke", "suspended", "stopped",
				     "restarted", "checkpointed", "restored", "forked",
				     "deleted", "quota_refused", NULL };

/* The delivery threads' shared state: one per process (events_emit calls
 * webhooks_enqueue from any thread, before the threads start too). */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t wake;
	bool stopping;
	bool started;
	int64_t busy[WORKERS];         /* the webhook each thread delivers (0: none) */
	char busy_owner[WORKERS][64];  /* and whose it is */
	pthread_t threads[WORKERS];
	int nthreads;
	struct netpolicy *policy;      /* where deliveries may connect */
	struct hostd *h;
	int64_t retry_ms;              /* the first backoff */
	int attempts;                  /* tries in all */
} W = { .lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER };

static int64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- pure parts ------------------------------------------------------------ */

static bool is_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

bool webhook_kind_valid(const char *kind)
{
	for (size_t i = 0; kinds[i]; i++)
		if (!strcmp(kinds[i], kind))
			return true;
	return false;
}

void webhook_sign(const char *secret, int64_t timestamp, const char *body, size_t len,
		  char sig[72])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	char ts[24];
	int tl = snprintf(ts, sizeof(ts), "%lld.", (long long)timestamp);
	EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
	EVP_MAC_CTX *ctx = mac ? EVP_MAC_CTX_new(mac) : NULL;
	OSSL_PARAM params[] = { OSSL_PARAM_construct_utf8_string("digest", (char *)"SHA256", 0),
				OSSL_PARAM_construct_end() };
	size_t outl = 0;

	if (!ctx || !EVP_MAC_init(ctx, (const unsigned char *)secret, strlen(secret), params) ||
	    !EVP_MAC_update(ctx, (const unsigned char *)ts, (size_t)tl) ||
	    !EVP_MAC_update(ctx, (const unsigned char *)body, len) ||
	    !EVP_MAC_final(ctx, md, &outl, sizeof(md)) || outl != 32)
		abort();        /* libcrypto without HMAC-SHA256: nothing to sign with */
	mdlen = (unsigned int)outl;
	EVP_MAC_CTX_free(ctx);
	EVP_MAC_free(mac);
	memcpy(sig, "sha256=", 7);
	for (unsigned int i = 0; i < mdlen; i++)
		snprintf(sig + 7 + 2 * i, 3, "%02x", md[i]);
}

int webhook_url_parse(const char *url, struct webhook_url *u, struct err *e)
{
	const char *h, *p, *end, *hs, *he;
	size_t len = strlen(url);
	int shown = (int)(strcspn(url, "?") < 100 ? strcspn(url, "?") : 100);
	const char *more = url[shown] ? "…" : "";

	memset(u, 0, sizeof(*u));
	if (len == 0)
		return err_set(e, 400, "invalid_url", "url is empty: give an http:// or https:// URL");
	if (len > WEBHOOK_URL_MAX)
		return err_set(e, 400, "invalid_url", "url is longer than %d bytes", WEBHOOK_URL_MAX);
	for (p = url; *p; p++)
		if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f)
			return err_set(e, 400, "invalid_url", "url must be printable ASCII without "
				       "spaces");
	if (!strncasecmp(url, "https://", 8)) {
		u->https = true;
		h = url + 8;
	} else if (!strncasecmp(url, "http://", 7)) {
		h = url + 7;
	} else {
		return err_set(e, 400, "invalid_url", "url must be http:// or https://: '%.*s%s'",
			       shown, url, more);
	}
	if (strchr(url, '#'))
		return err_set(e, 400, "invalid_url", "url may have no fragment (#...)");
	end = h + strcspn(h, "/?");
	if (memchr(h, '@', (size_t)(end - h)))
		return err_set(e, 400, "invalid_url", "url may have no user or password (put a "
			       "token in its path or query; the signature says it is berth)");
	p = h;
	if (*p == '[') {
		hs = ++p;
		while (p < end && *p != ']' && strchr("0123456789abcdefABCDEF:.", *p))
			p++;
		if (p >= end || *p != ']' || p == hs)
			return err_set(e, 400, "invalid_url", "url's host is not an IPv6 address in "
				       "brackets: '%.*s%s'", shown, url, more);
		he = p++;
	} else {
		hs = p;
		while (p < end && (is_alnum(*p) || *p == '-' || *p == '.'))
			p++;
		he = p;
		if (p == hs || *hs == '.' || *hs == '-' || p[-1] == '-' || p - hs > 253)
			return err_set(e, 400, "invalid_url", "url has no valid host: '%.*s%s'",
				       shown, url, more);
	}
	u->port = u->https ? 443 : 80;
	if (p < end && *p == ':') {
		long port = 0;
		const char *d = ++p;
		while (p < end && *p >= '0' && *p <= '9' && port <= 65535)
			port = port * 10 + (*p++ - '0');
		if (p == d || p != end || port < 1 || port > 65535)
			return err_set(e, 400, "invalid_url", "url's port must be 1 to 65535: "
				       "'%.*s%s'", shown, url, more);
		u->port = (int)port;
	}
	if (p != end)
		return err_set(e, 400, "invalid_url", "url has no valid host: '%.*s%s'", shown, url,
			       more);
	if ((size_t)(he - hs) >= sizeof(u->host))
		return err_set(e, 400, "invalid_url", "url's host is too long");
	memcpy(u->host, hs, (size_t)(he - hs));
	u->host[he - hs] = '\0';
	if (hs[-1] == '[') {
		struct in6_addr a6;
		if (inet_pton(AF_INET6, u->host, &a6) != 1)
			return err_set(e, 400, "invalid_url", "url's host [%s] is not an IPv6 "
				       "address", u->host);
	}
	return 0;
}

/* ---- the address check --------------------------------------------------- */

/* Whether every address U's host resolves to now may be posted to: 0, or
 * -1 with E (400 url_refused naming the address and why). */
static int url_addresses_allowed(const struct webhook_url *u, struct err *e)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	struct addrinfo *res = NULL;
	char why[200];
	int rc, ret = 0;

	if (!W.policy)
		return err_set(e, 503, "starting", "hostd's webhooks are not started");
	rc = getaddrinfo(u->host, NULL, &hints, &res);
	if (rc != 0)
		return err_set(e, 400, "url_refused", "url's host %s does not resolve: %s", u->host,
			       gai_strerror(rc));
	for (struct addrinfo *a = res; a; a = a->ai_next) {
		if (a->ai_family != AF_INET && a->ai_family != AF_INET6)
			continue;
		if (!netpolicy_allows(W.policy, a->ai_addr, why, sizeof(why))) {
			ret = err_set(e, 400, "url_refused", "url's host %s: hostd does not post "
				      "there: %s; berth.conf's webhook_allow opens a network to it",
				      u->host, why);
			break;
		}
	}
	freeaddrinfo(res);
	return ret;
}

/* ---- the API's -------------------------------------------------------------- */

static json_t *hook_json(const struct db_webhook *w)
{
	json_t *ev = json_array();
	char list[sizeof(w->events)], *s, *save = NULL;

	if (w->events[0]) {
		snprintf(list, sizeof(list), "%s", w->events);
		for (s = strtok_r(list, ",", &save); s; s = strtok_r(NULL, ",", &save))
			json_array_append_new(ev, json_string(s));
	} else {
		for (size_t i = 0; kinds[i]; i++)
			json_array_append_new(ev, json_string(kinds[i]));
	}
	return json_pack("{s:I, s:s, s:o, s:o, s:I}", "id", (json_int_t)w->id, "url", w->url,
			 "events", ev, "machine", w->machine[0] ? json_string(w->machine) :
			 json_null(), "created", (json_int_t)w->created);
}

json_t *webhook_create(struct hostd *h, const char *owner, json_t *req, struct err *e)
{
	json_t *url = json_object_get(req, "url"), *evs = json_object_get(req, "events");
	json_t *machine = json_object_get(req, "machine"), *v, *r;
	struct db_webhook w = { 0 };
	struct webhook_url u;
	unsigned char raw[WEBHOOK_SECRET_HEX / 2];
	size_t i;

	if (!json_is_string(url))
		return err_set(e, 400, "invalid_url", "url (a string, http:// or https://) is "
			       "required"), NULL;
	if (webhook_url_parse(json_string_value(url), &u, e) < 0)
		return NULL;
	if (evs && !json_is_null(evs)) {
		struct buf list = BUF_INIT;
		if (!json_is_array(evs) || json_array_size(evs) == 0)
			return err_set(e, 400, "invalid_events", "events must be a list of event "
				       "kinds (created, started, woke, suspended, ...), not empty; "
				       "leave it out for all"), NULL;
		json_array_foreach(evs, i, v) {
			if (!json_is_string(v) || !webhook_kind_valid(json_string_value(v))) {
				buf_free(&list);
				return err_set(e, 400, "invalid_events", "events[%zu] is not an event "
					       "kind: one of created, started, woke, suspended, "
					       "stopped, restarted, checkpointed, restored, forked, "
					       "deleted, quota_refused", i), NULL;
			}
			/* Each once. */
			struct buf wrap = BUF_INIT;
			char pat[32];
			bool dup;
			buf_printf(&wrap, ",%s,", buf_str(&list));
			snprintf(pat, sizeof(pat), ",%s,", json_string_value(v));
			dup = strstr(buf_str(&wrap), pat) != NULL;
			buf_free(&wrap);
			if (dup)
				continue;
			buf_printf(&list, "%s%s", list.len ? "," : "", json_string_value(v));
		}
		snprintf(w.events, sizeof(w.events), "%s", buf_str(&list));
		buf_free(&list);
	}
	if (machine && !json_is_null(machine)) {
		if (!json_is_string(machine) || !name_valid(json_string_value(machine)))
			return err_set(e, 400, "invalid_name", "machine must be a machine's name"),
			       NULL;
		snprintf(w.machine, sizeof(w.machine), "%s", json_string_value(machine));
	}
	if (url_addresses_allowed(&u, e) < 0)
		return NULL;
	snprintf(w.owner, sizeof(w.owner), "%s", owner);
	snprintf(w.url, sizeof(w.url), "%s", json_string_value(url));
	if (random_bytes(raw, sizeof(raw)) < 0)
		return err_errno(e, errno, "random bytes for a webhook's secret"), NULL;
	for (i = 0; i < sizeof(raw); i++)
		snprintf(w.secret + 2 * i, 3, "%02x", raw[i]);
	explicit_bzero(raw, sizeof(raw));
	if (db_webhook_insert(h->db, &w, WEBHOOK_MAX_PER_USER, e) < 0) {
		explicit_bzero(w.secret, sizeof(w.secret));
		return NULL;
	}
	/* Not its query, which may hold the receiver's token. */
	log_info("webhook %lld of %s added: %.*s%s", (long long)w.id, owner,
		 (int)strcspn(w.url, "?"), w.url, strchr(w.url, '?') ? "?…" : "");
	r = hook_json(&w);
	json_object_set_new(r, "secret", json_string(w.secret));
	explicit_bzero(w.secret, sizeof(w.secret));
	return r;
}

json_t *webhook_list(struct hostd *h, const char *owner, struct err *e)
{
	struct db_webhook *ws = NULL;
	size_t n = 0;
	json_t *arr;

	if (db_webhook_list(h->db, owner, &ws, &n, e) < 0)
		return NULL;
	arr = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, hook_json(&ws[i]));
	if (ws)
		explicit_bzero(ws, n * sizeof(*ws));
	free(ws);
	return json_pack("{s:o}", "webhooks", arr);
}

int webhook_delete(struct hostd *h, const char *owner, int64_t id, struct err *e)
{
	if (db_webhook_delete(h->db, owner, id, e) < 0)
		return -1;
	log_info("webhook %lld of %s removed", (long long)id, owner);
	return 0;
}

/* MS (milliseconds since the epoch) as seconds, null for 0. */
static json_t *secs(int64_t ms)
{
	return ms ? json_integer(ms / 1000) : json_null();
}

json_t *webhook_deliveries(struct hostd *h, const char *owner, int64_t id, int limit,
			   struct err *e)
{
	struct db_webhook w;
	struct db_delivery *ds = NULL;
	size_t n = 0;
	json_t *arr;

	if (db_webhook_get(h->db, owner, id, &w, e) < 0)
		return NULL;
	explicit_bzero(w.secret, sizeof(w.secret));
	if (db_delivery_list(h->db, id, limit, &ds, &n, e) < 0)
		return NULL;
	arr = json_array();
	for (size_t i = 0; i < n; i++) {
		const struct db_delivery *d = &ds[i];
		bool pending = !strcmp(d->state, "pending");
		json_array_append_new(arr, json_pack(
			"{s:I, s:I, s:s, s:s, s:i, s:o, s:o, s:o, s:o, s:o}", "id",
			(json_int_t)d->id, "event_id", (json_int_t)d->event_id, "kind", d->kind,
			"state", d->state, "attempts", d->attempts, "last_status",
			d->last_status ? json_integer(d->last_status) : json_null(), "last_error",
			d->last_error[0] ? json_string(d->last_error) : json_null(), "created",
			secs(d->created), "last_attempt", secs(d->last_attempt), "next_attempt",
			pending ? secs(d->next_attempt) : json_null()));
	}
	free(ds);
	return json_pack("{s:I, s:o}", "webhook", (json_int_t)id, "deliveries", arr);
}

void webhooks_enqueue(struct hostd *h, const struct db_event *ev)
{
	struct err e = { 0 };
	json_t *j = events_json(ev);
	char *body = j ? json_dumps(j, JSON_COMPACT) : NULL;
	int n = 0;

	json_decref(j);
	if (!body) {
		log_warn("event %lld: no JSON for its webhooks", (long long)ev->id);
		return;
	}
	if (db_delivery_enqueue(h->db, ev, body, wall_ms(), WEBHOOK_PENDING_MAX, WEBHOOK_LOG_KEEP,
				&n, &e) < 0)
		log_warn("event %lld (%s of %s/%s): not queued for webhooks: %s",
			 (long long)ev->id, ev->kind, ev->owner, ev->machine, e.msg);
	free(body);
	if (n > 0) {
		pthread_mutex_lock(&W.lock);
		pthread_cond_broadcast(&W.wake);
		pthread_mutex_unlock(&W.lock);
	}
}

/* ---- delivery ----------------------------------------------------------------- */

/* One POST in progress. */
struct post {
	char refused[240];      /* why the policy closed an address ("" none) */
	size_t head, body;      /* bytes of the answer read */
	bool too_big;
};

static curl_socket_t open_checked(void *arg, curlsocktype purpose, struct curl_sockaddr *a)
{
	struct post *p = arg;
	char why[200];

	if (purpose != CURLSOCKTYPE_IPCXN || !netpolicy_allows(W.policy, &a->addr, why,
								  sizeof(why))) {
		if (!p->refused[0])
			snprintf(p->refused, sizeof(p->refused), "refused: hostd does not post "
				 "there: %.200s", purpose == CURLSOCKTYPE_IPCXN ? why : "not a TCP "
				 "connection");
		return CURL_SOCKET_BAD;
	}
	return socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
}

static size_t on_head(char *data, size_t size, size_t n, void *arg)
{
	struct post *p = arg;

	(void)data;
	p->head += size * n;
	return p->head > ANSWER_HEAD_MAX ? 0 : size * n;
}

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
	struct post *p = arg;

	(void)data;
	p->body += size * n;
	if (p->body > ANSWER_BODY_MAX) {
		p->too_big = true;
		return 0;       /* enough: the status is what counts */
	}
	return size * n;
}

static int on_progress(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
	bool stop;

	(void)arg;
	(void)dt;
	(void)dn;
	(void)ut;
	(void)un;
	pthread_mutex_lock(&W.lock);
	stop = W.stopping;
	pthread_mutex_unlock(&W.lock);
	return stop;
}

/* Post D to W's URL once: D's attempts, last_status, last_error,
 * last_attempt, next_attempt and state as they are after it. */
static void post_once(const struct db_webhook *w, struct db_delivery *d)
{
	CURL *cu = curl_easy_init();
	struct curl_slist *hdrs = NULL;
	struct post p = { 0 };
	char line[160], sig[72], cerr[CURL_ERROR_SIZE] = "";
	int64_t ts = now_s();
	long status = 0;
	CURLcode cc = CURLE_FAILED_INIT;
	size_t len = strlen(d->body);

	d->attempts++;
	d->last_attempt = wall_ms();
	webhook_sign(w->secret, ts, d->body, len, sig);
	hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
	snprintf(line, sizeof(line), "X-Berth-Event: %s", d->kind);
	hdrs = curl_slist_append(hdrs, line);
	snprintf(line, sizeof(line), "X-Berth-Delivery: %lld", (long long)d->id);
	hdrs = curl_slist_append(hdrs, line);
	snprintf(line, sizeof(line), "X-Berth-Timestamp: %lld", (long long)ts);
	hdrs = curl_slist_append(hdrs, line);
	snprintf(line, sizeof(line), "X-Berth-Signature: %s", sig);
	hdrs = curl_slist_append(hdrs, line);
	hdrs = curl_slist_append(hdrs, "Expect:");
	if (cu && hdrs) {
		curl_easy_setopt(cu, CURLOPT_URL, w->url);
		curl_easy_setopt(cu, CURLOPT_PROTOCOLS_STR, "http,https");
		curl_easy_setopt(cu, CURLOPT_OPENSOCKETFUNCTION, open_checked);
		curl_easy_setopt(cu, CURLOPT_OPENSOCKETDATA, &p);
		curl_easy_setopt(cu, CURLOPT_PROXY, "");
		curl_easy_setopt(cu, CURLOPT_FOLLOWLOCATION, 0L);
		curl_easy_setopt(cu, CURLOPT_SSL_VERIFYPEER, 1L);
		curl_easy_setopt(cu, CURLOPT_SSL_VERIFYHOST, 2L);
		curl_easy_setopt(cu, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(cu, CURLOPT_CONNECTTIMEOUT, (long)WEBHOOK_TIMEOUT_S);
		curl_easy_setopt(cu, CURLOPT_TIMEOUT, (long)WEBHOOK_TIMEOUT_S);
		curl_easy_setopt(cu, CURLOPT_ERRORBUFFER, cerr);
		curl_easy_setopt(cu, CURLOPT_USERAGENT, "berth-webhooks/1");
		curl_easy_setopt(cu, CURLOPT_HTTPHEADER, hdrs);
		curl_easy_setopt(cu, CURLOPT_POSTFIELDS, d->body);
		curl_easy_setopt(cu, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
		curl_easy_setopt(cu, CURLOPT_HEADERFUNCTION, on_head);
		curl_easy_setopt(cu, CURLOPT_HEADERDATA, &p);
		curl_easy_setopt(cu, CURLOPT_WRITEFUNCTION, on_body);
		curl_easy_setopt(cu, CURLOPT_WRITEDATA, &p);
		curl_easy_setopt(cu, CURLOPT_NOPROGRESS, 0L);
		curl_easy_setopt(cu, CURLOPT_XFERINFOFUNCTION, on_progress);
		cc = curl_easy_perform(cu);
		curl_easy_getinfo(cu, CURLINFO_RESPONSE_CODE, &status);
	}
	d->last_status = (int)status;
	d->last_error[0] = '\0';
	/* A body cut at our cap still has its status. */
	if ((cc == CURLE_OK || (cc == CURLE_WRITE_ERROR && p.too_big)) && status >= 200 &&
	    status < 300) {
		snprintf(d->state, sizeof(d->state), "delivered");
		d->next_attempt = 0;
	} else {
		if (p.refused[0])
			snprintf(d->last_error, sizeof(d->last_error), "%s", p.refused);
		else if (cc == CURLE_OPERATION_TIMEDOUT)
			snprintf(d->last_error, sizeof(d->last_error), "no answer within %d s",
				 WEBHOOK_TIMEOUT_S);
		else if (cc != CURLE_OK && !(cc == CURLE_WRITE_ERROR && p.too_big))
			snprintf(d->last_error, sizeof(d->last_error), "%.200s",
				 cerr[0] ? cerr : curl_easy_strerror(cc));
		else
			snprintf(d->last_error, sizeof(d->last_error), "HTTP status %ld", status);
		if (d->attempts >= W.attempts) {
			snprintf(d->state, sizeof(d->state), "failed");
			d->next_attempt = 0;
		} else {
			int64_t wait = W.retry_ms;
			for (int i = 1; i < d->attempts && wait < BACKOFF_MAX_MS; i++)
				wait *= 2;
			if (wait > BACKOFF_MAX_MS)
				wait = BACKOFF_MAX_MS;
			snprintf(d->state, sizeof(d->state), "pending");
			d->next_attempt = wall_ms() + wait;
		}
	}
	curl_slist_free_all(hdrs);
	curl_easy_cleanup(cu);
}

/* Whether a thread delivers webhook ID now, or OWNER's webhooks hold half
 * the threads: one user's receivers that never answer (10 s each try)
 * leave the other half to everyone else's. */
static bool hook_busy(int64_t id, const char *owner)
{
	int mine = 0;

	for (int i = 0; i < WORKERS; i++) {
		if (W.busy[i] == id)
			return true;
		if (W.busy[i] && !strcmp(W.busy_owner[i], owner))
			mine++;
	}
	return mine >= WORKERS / 2;
}

static void *worker(void *arg)
{
	int me = (int)(intptr_t)arg;
	struct hostd *h = W.h;

	pthread_mutex_lock(&W.lock);
	while (!W.stopping) {
		struct db_delivery *ds = NULL, d;
		struct db_webhook *ws = NULL, w;
		struct err e = { 0 };
		size_t n = 0, pick = SIZE_MAX;
		int64_t now = wall_ms(), next = now + 60000;

		if (db_delivery_heads(h->db, HEADS_MAX, &ds, &ws, &n, &e) < 0) {
			log_warn("webhooks: %s", e.msg);
			n = 0;
		}
		for (size_t i = 0; i < n; i++) {
			if (hook_busy(ds[i].webhook_id, ws[i].owner))
				continue;
			if (ds[i].next_attempt <= now) {
				pick = i;
				break;
			}
			if (ds[i].next_attempt < next)
				next = ds[i].next_attempt;
		}
		if (pick == SIZE_MAX) {
			free(ds);
			free(ws);
			struct timespec until = { .tv_sec = next / 1000,
						  .tv_nsec = (long)(next % 1000) * 1000000 };
			pthread_cond_timedwait(&W.wake, &W.lock, &until);
			continue;
		}
		d = ds[pick];
		w = ws[pick];
		explicit_bzero(ws, n * sizeof(*ws));
		free(ds);
		free(ws);
		W.busy[me] = w.id;
		snprintf(W.busy_owner[me], sizeof(W.busy_owner[me]), "%s", w.owner);
		pthread_mutex_unlock(&W.lock);

		post_once(&w, &d);
		explicit_bzero(w.secret, sizeof(w.secret));
		pthread_mutex_lock(&W.lock);
		/* Cut by hostd's stop: it stays as it was, pending. */
		if (!W.stopping) {
			if (!strcmp(d.state, "failed") || d.attempts > 1 ||
			    strcmp(d.state, "delivered") != 0)
				log_info("webhook %lld delivery %lld (event %lld %s) attempt %d: %s%s%s",
					 (long long)w.id, (long long)d.id, (long long)d.event_id,
					 d.kind, d.attempts, d.state, d.last_error[0] ? ": " : "",
					 d.last_error);
			if (db_delivery_update(h->db, &d, WEBHOOK_LOG_KEEP, &e) < 0)
				log_warn("webhook %lld delivery %lld: %s", (long long)w.id,
					 (long long)d.id, e.msg);
		}
		W.busy[me] = 0;
		pthread_cond_broadcast(&W.wake);
	}
	pthread_mutex_unlock(&W.lock);
	return NULL;
}

int webhooks_start(struct hostd *h, struct err *e)
{
	struct buf closed = BUF_INIT;

	/* What guests may not reach is closed to webhooks too: the guest
	 * network, egress_closed and the host's networks (as the broker's,
	 * secrets_broker_settings), with every range netpolicy closes always
	 * and the host's own addresses. */
	buf_printf(&closed, "%s", h->cfg.guest_network);
	if (net_routed(h) && h->net) {
		const struct net_conf *c = net_conf(h);
		for (size_t i = 0; i < c->n_closed; i++)
			buf_printf(&closed, ",%s", c->closed[i]);
	} else if (h->cfg.egress_closed[0]) {
		buf_printf(&closed, ",%s", h->cfg.egress_closed);
	}
	W.policy = netpolicy_new(buf_str(&closed), h->cfg.webhook_allow, e);
	buf_free(&closed);
	if (!W.policy)
		return -1;
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
		netpolicy_free(W.policy);
		W.policy = NULL;
		return err_set(e, 500, "internal", "libcurl does not initialize");
	}
	W.h = h;
	W.retry_ms = h->cfg.webhook_retry_s * 1000;
	W.attempts = h->cfg.webhook_attempts;
	W.stopping = false;
	for (int i = 0; i < WORKERS; i++) {
		int rc = pthread_create(&W.threads[i], NULL, worker, (void *)(intptr_t)i);
		if (rc != 0) {
			err_errno(e, rc, "start a webhook delivery thread");
			webhooks_stop(h);
			return -1;
		}
		W.nthreads++;
	}
	W.started = true;
	return 0;
}

void webhooks_stop(struct hostd *h)
{
	(void)h;
	pthread_mutex_lock(&W.lock);
	W.stopping = true;
	pthread_cond_broadcast(&W.wake);
	pthread_mutex_unlock(&W.lock);
	for (int i = 0; i < W.nthreads; i++)
		pthread_join(W.threads[i], NULL);
	W.nthreads = 0;
	if (W.policy) {
		netpolicy_free(W.policy);
		W.policy = NULL;
		curl_global_cleanup();
	}
	W.started = false;
}
