#include "web/preview.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "web/conns.h"
#include "web/hostctl.h"
#include "web/reply.h"
#include "web/request.h"
#include "web/upgrade.h"
#include "web/upstream.h"
#include "common/banned.h"

/* hostd/preview.h's PREVIEW_LOGIN_PATH. */
#define LOGIN_PATH "/__berth/login"
/* The cookie: over HTTPS __Host- (the browser takes it only from this very
 * host, Secure, Path=/: no other name under the domain can set or toss
 * it); plain HTTP cannot have that prefix. */
#define COOKIE_HTTPS "__Host-berth_preview"
#define COOKIE_HTTP "berth_preview"
/* Cookies of ours a request may carry (others' guests may toss some over
 * HTTP): hostd tries each. */
#define COOKIES_MAX 8
/* What is read from a guest at once; its answer's head must fit. */
#define IO_BUF UPSTREAM_HEAD_MAX
/* How long a held request may wait for hostd (a wake, then the boot
 * opening the port); a write to a guest that takes nothing. */
#define CONNECT_WAIT_MS (15 * 60 * 1000)
#define SEND_TIMEOUT_S 60

/* A connection to a guest's port that hostd handed over, known to the
 * watch thread (P.links, under P.lock). */
struct link {
	int fd;
	char grant[17];
	atomic_bool active;       /* bytes moved since the last report */
	bool cut;                 /* hostd said its access no longer stands */
	struct link *prev, *next;
};

/* The module's settings and connections. */
static struct {
	char domain[200];
	char ctl[108];            /* STATE/webctl.sock (a sun_path) */
	bool tls;
	const char *cookie;       /* our cookie's name over this scheme */
	const char *other;        /* the other scheme's, dropped as well */
	pthread_mutex_t lock;
	struct link *links;
	atomic_int splices;       /* upgraded connections' threads running */
} P = { .domain = "localhost", .lock = PTHREAD_MUTEX_INITIALIZER };

/* A client connection: the guest connection kept for its next request. */
struct preview_conn {
	struct link *up;
	char label[64];
	char keys[COOKIES_MAX * 66];   /* the cookies it was let in with, joined */
};

struct preview_req {
	struct MHD_Connection *c;
	struct preview_conn *conn;
	struct link *up;          /* this request's guest connection */
	int client_fd;            /* watched for the client's going */
	char label[64];
	char keys[COOKIES_MAX][65];
	size_t nkeys;
	struct buf cookie_rest;   /* the client's other cookies, passed on */
	struct buf head;          /* the request head as sent (for one retry) */
	bool head_req, has_body, up_chunked, upgrade, idempotent;
	bool browser;             /* a browser's page: a wake answers "waking" */
	bool reused;              /* on the connection a former request left */
	bool broken;              /* a write to the guest failed */
	bool answered;            /* a response is queued */
	bool upgraded;            /* the splice thread has the guest connection */
	bool keep;                /* the guest connection serves the next request */
	uint64_t left;            /* of a body with a Content-Length, the bytes still to pass */
	char *buf;                /* the guest's bytes not used yet: buf[off, len) */
	size_t off, len;
	bool any;                 /* the guest sent anything for this request */
	struct upstream_head h;
	struct upstream_body body;
};

/* ---- pure pieces ---------------------------------------------------------- */

bool preview_label_of(const char *host, const char *domain, char *label, size_t labellen)
{
	char h[256];
	size_t n, dn = strlen(domain);
	char *colon;

	if (!host || host[0] == '[' || strlen(host) >= sizeof(h))
		return false;
	for (n = 0; host[n]; n++)
		h[n] = (char)((host[n] >= 'A' && host[n] <= 'Z') ? host[n] + 32 : host[n]);
	h[n] = '\0';
	if ((colon = strchr(h, ':')))
		*colon = '\0';
	n = strlen(h);
	if (n > 0 && h[n - 1] == '.')       /* the absolute form, "x.localhost." */
		h[--n] = '\0';
	if (n <= dn + 1 || h[n - dn - 1] != '.' || strcmp(h + n - dn, domain) != 0)
		return false;
	h[n - dn - 1] = '\0';
	/* Cut to fit, a longer label would be a second name of a preview
	 * whose label is its first 63 characters. */
	if (n - dn - 1 > 63 || n - dn - 1 >= labellen)
		label[0] = '\0';
	else
		snprintf(label, labellen, "%s", h);
	return true;
}

/* [S, E) trimmed of spaces and tabs. */
static void span_trim(const char **s, const char **e)
{
	while (*s < *e && (**s == ' ' || **s == '\t'))
		(*s)++;
	while (*e > *s && ((*e)[-1] == ' ' || (*e)[-1] == '\t'))
		(*e)--;
}

size_t preview_cookies(const char *header, const char *name, const char *drop,
		       char vals[][65], size_t max, struct buf *rest)
{
	size_t n = 0, nl = strlen(name), dl = drop ? strlen(drop) : 0;
	const char *p = header;

	while (p && *p) {
		const char *end = strchr(p, ';'), *s = p, *eq;
		if (!end)
			end = p + strlen(p);
		span_trim(&s, &end);
		eq = memchr(s, '=', (size_t)(end - s));
		if (s < end) {
			const char *ne = eq ? eq : end, *ns = s;
			span_trim(&ns, &ne);
			size_t len = (size_t)(ne - ns);
			if (len == nl && !memcmp(ns, name, nl)) {
				const char *vs = eq ? eq + 1 : end, *ve = end;
				span_trim(&vs, &ve);
				if (n < max && (size_t)(ve - vs) <= 64) {
					memcpy(vals[n], vs, (size_t)(ve - vs));
					vals[n++][ve - vs] = '\0';
				}
			} else if (!(dl && len == dl && !memcmp(ns, drop, dl)) && rest) {
				if (rest->len)
					buf_adds(rest, "; ");
				buf_add(rest, s, (size_t)(end - s));
			}
		}
		p = *end ? end + 1 : end;
	}
	return n;
}

bool preview_setcookie_ours(const char *v, const char *name, const char *drop)
{
	const char *s = v, *e = strchr(v, '=');

	if (!e)
		e = v + strlen(v);
	span_trim(&s, &e);
	return ((size_t)(e - s) == strlen(name) && !strncasecmp(s, name, strlen(name))) ||
	       (drop && (size_t)(e - s) == strlen(drop) && !strncasecmp(s, drop, strlen(drop)));
}

/* ---- the links ------------------------------------------------------------ */

static struct link *link_add(int fd, const char *grant)
{
	struct link *l = calloc(1, sizeof(*l));
	struct timeval tv = { .tv_sec = SEND_TIMEOUT_S };

	if (!l)
		abort();
	l->fd = fd;
	snprintf(l->grant, sizeof(l->grant), "%s", grant);
	/* A guest that takes nothing for a minute loses the request. */
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	pthread_mutex_lock(&P.lock);
	l->next = P.links;
	if (P.links)
		P.links->prev = l;
	P.links = l;
	pthread_mutex_unlock(&P.lock);
	return l;
}

/* Close L's connection and forget it.  NULL is fine. */
static void link_close(struct link *l)
{
	if (!l)
		return;
	pthread_mutex_lock(&P.lock);
	if (l->prev)
		l->prev->next = l->next;
	else
		P.links = l->next;
	if (l->next)
		l->next->prev = l->prev;
	close(l->fd);
	pthread_mutex_unlock(&P.lock);
	free(l);
}

/* Whether L, kept since its last answer, can carry a request: nothing
 * arrived on it meanwhile (the guest's close, or bytes it had no reason
 * to send) and hostd did not cut it. */
static bool link_fresh(struct link *l)
{
	struct pollfd pf = { .fd = l->fd, .events = POLLIN | POLLRDHUP };
	bool cut;

	pthread_mutex_lock(&P.lock);
	cut = l->cut;
	pthread_mutex_unlock(&P.lock);
	return !cut && poll(&pf, 1, 0) == 0;
}

/* ---- the watch thread ----------------------------------------------------- */

/* One report of the links to hostd on connection S, and its cuts done.
 * 0, or -1 when the connection failed. */
static int report(int s)
{
	json_t *live = json_array(), *active = json_array(), *rep = NULL, *ans = NULL, *v;
	char err[256];
	size_t i;
	int rc = -1;

	pthread_mutex_lock(&P.lock);
	for (struct link *l = P.links; l; l = l->next) {
		if (l->cut)
			continue;
		json_array_append_new(live, json_string(l->grant));
		if (atomic_exchange(&l->active, false))
			json_array_append_new(active, json_string(l->grant));
	}
	pthread_mutex_unlock(&P.lock);
	if (json_array_size(live) == 0) {
		json_decref(live);
		json_decref(active);
		/* Nothing to say; see whether hostd is still there. */
		struct pollfd pf = { .fd = s, .events = POLLIN };
		return poll(&pf, 1, 0) == 0 ? 0 : -1;
	}
	rep = json_pack("{s:o, s:o}", "live", live, "active", active);
	if (!rep || hostctl_say(s, rep, &ans, 10000, err, sizeof(err)) < 0) {
		log_warn("preview: reporting connections to berth-hostd: %s", rep ? err : "no memory");
		goto out;
	}
	pthread_mutex_lock(&P.lock);
	json_array_foreach(json_object_get(ans, "cut"), i, v) {
		const char *g = json_string_value(v);
		for (struct link *l = P.links; g && l; l = l->next) {
			if (strcmp(l->grant, g) != 0 || l->cut)
				continue;
			/* Its thread sees the end and closes it. */
			l->cut = true;
			shutdown(l->fd, SHUT_RDWR);
			log_info("preview: a connection cut (grant %s): its access no longer stands",
				 g);
		}
	}
	pthread_mutex_unlock(&P.lock);
	rc = 0;
out:
	json_decref(rep);
	json_decref(ans);
	return rc;
}

static void *watch_thread(void *arg)
{
	bool said = false;

	(void)arg;
	for (;;) {
		json_t *req = json_pack("{s:s}", "op", "preview_watch"), *ans = NULL;
		char err[256];
		int s = hostctl_open(P.ctl, req, -1, &ans, NULL, 0, 10000, err, sizeof(err));
		json_decref(req);
		if (s >= 0 && !json_is_true(json_object_get(ans, "watching"))) {
			snprintf(err, sizeof(err), "berth-hostd does not watch previews' connections");
			close(s);
			s = -1;
		}
		json_decref(ans);
		if (s < 0) {
			if (!said)
				log_warn("preview: %s (trying again every second)", err);
			said = true;
			sleep(1);
			continue;
		}
		if (said)
			log_info("preview: berth-hostd watches previews' connections again");
		said = false;
		while (report(s) == 0)
			sleep(1);
		close(s);
	}
	return NULL;
}

void preview_configure(const char *domain)
{
	if (domain && domain[0])
		snprintf(P.domain, sizeof(P.domain), "%s", domain);
}

int preview_start(const char *state, bool tls)
{
	struct rlimit rl;
	pthread_attr_t attr;
	pthread_t t;

	if (snprintf(P.ctl, sizeof(P.ctl), "%s/webctl.sock", state) >= (int)sizeof(P.ctl)) {
		log_error("preview: %s/webctl.sock is too long a socket path", state);
		return -1;
	}
	P.tls = tls;
	P.cookie = tls ? COOKIE_HTTPS : COOKIE_HTTP;
	P.other = tls ? COOKIE_HTTP : COOKIE_HTTPS;
	/* A preview's client connection holds a guest's connection too. */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max && rl.rlim_cur < 65536) {
		rl.rlim_cur = rl.rlim_max < 65536 ? rl.rlim_max : 65536;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			log_warn("preview: cannot raise the open-file limit: %s", strerror(errno));
	}
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 512 << 10);
	if (pthread_create(&t, &attr, watch_thread, NULL) != 0) {
		pthread_attr_destroy(&attr);
		log_error("preview: cannot start the watch thread");
		return -1;
	}
	pthread_attr_destroy(&attr);
	log_info("previews at PORT-NAME-USER.%s, connections from berth-hostd at %s", P.domain,
		 P.ctl);
	return 0;
}

void preview_stop(int wait_ms)
{
	pthread_mutex_lock(&P.lock);
	for (struct link *l = P.links; l; l = l->next) {
		l->cut = true;
		shutdown(l->fd, SHUT_RDWR);
	}
	pthread_mutex_unlock(&P.lock);
	for (int i = 0; i < wait_ms / 50 && atomic_load(&P.splices) > 0; i++)
		usleep(50 * 1000);
	if (atomic_load(&P.splices) > 0)
		log_warn("preview: %d upgraded connections still open at the stop",
			 atomic_load(&P.splices));
}

/* ---- berth-web's own answers ---------------------------------------------- */

static bool wants_html(struct MHD_Connection *c)
{
	const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Accept");

	return a && strstr(a, "text/html");
}

static void html_escaped(struct buf *b, const char *s)
{
	buf_add_xml(b, s);
}

/* An answer of berth-web's own about the preview: a page for a browser,
 * else the JSON error /v1 gives.  WAKING: the page reloads itself. */
static enum MHD_Result own_answer(struct preview_req *r, unsigned status, const char *code,
				  const char *msg)
{
	struct MHD_Response *resp;
	struct buf b = BUF_INIT;
	enum MHD_Result ret;
	bool waking = !strcmp(code, "waking");
	const char *title = waking ? "Waking…" :
			    !strcmp(code, "login_needed") ? "This preview is private" :
			    !strcmp(code, "invalid_link") ? "This link cannot be used" :
			    !strcmp(code, "no_preview") ? "No such preview" :
			    !strcmp(code, "port_closed") ? "Nothing answers on this port" :
			    "This preview cannot be reached";

	r->answered = true;
	if (!wants_html(r->c))
		return web_error(r->c, status, code, msg);
	buf_adds(&b, "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n");
	if (waking)
		buf_adds(&b, "<meta http-equiv=\"refresh\" content=\"1\">\n");
	buf_adds(&b, "<title>");
	html_escaped(&b, title);
	buf_adds(&b, "</title>\n<style>body{font:16px/1.5 system-ui,sans-serif;max-width:40em;"
		     "margin:4em auto;padding:0 1em;color:#222}code{background:#eee;padding:0 .2em}"
		     "</style></head>\n<body><h1>");
	html_escaped(&b, title);
	buf_adds(&b, "</h1>\n<p>");
	html_escaped(&b, msg);
	if (waking)
		buf_adds(&b, "</p>\n<p>This page reloads until the machine answers.");
	buf_adds(&b, "</p>\n<p><small>berth preview ");
	html_escaped(&b, r->label);
	buf_adds(&b, "</small></p></body></html>\n");
	size_t len = b.len;   /* before buf_detach empties it */
	resp = MHD_create_response_from_buffer(len, buf_detach(&b), MHD_RESPMEM_MUST_FREE);
	MHD_add_response_header(resp, "Content-Type", "text/html; charset=utf-8");
	MHD_add_response_header(resp, "Cache-Control", "no-store");
	MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
	MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
	MHD_add_response_header(resp, "Content-Security-Policy",
				"default-src 'none'; style-src 'unsafe-inline'");
	if (waking)
		MHD_add_response_header(resp, "Retry-After", "1");
	ret = MHD_queue_response(r->c, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

/* GET /__berth/login?token=SECRET: the link spent for a cookie of this host,
 * and a redirect to /. */
static enum MHD_Result login(struct preview_req *r, const char *method)
{
	const char *token = MHD_lookup_connection_value(r->c, MHD_GET_ARGUMENT_KIND, "token");
	const char *code, *msg;
	json_t *req, *ans = NULL;
	struct MHD_Response *resp;
	char err[256], cookie[256];
	enum MHD_Result ret;
	int s, st;

	if (strcmp(method, "GET") != 0)
		return own_answer(r, 405, "method_not_allowed", "a preview's link is opened "
				  "with GET");
	req = json_pack("{s:s, s:s, s:s}", "op", "preview_login", "label", r->label, "token",
			token ? token : "");
	s = hostctl_open(P.ctl, req, -1, &ans, NULL, 0, 30000, err, sizeof(err));
	json_decref(req);
	if (s < 0) {
		log_warn("preview %s: login: %s", r->label, err);
		return own_answer(r, 502, "hostd_unreachable", err);
	}
	close(s);
	if ((st = hostctl_error(ans, &code, &msg))) {
		ret = own_answer(r, (unsigned)st, code, msg);
		json_decref(ans);
		return ret;
	}
	const char *secret = json_string_value(json_object_get(ans, "cookie"));
	snprintf(cookie, sizeof(cookie), "%s=%s; Path=/; Max-Age=%lld; HttpOnly; SameSite=Lax%s",
		 P.cookie, secret ? secret : "",
		 (long long)json_integer_value(json_object_get(ans, "max_age")),
		 P.tls ? "; Secure" : "");
	json_decref(ans);
	resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
	MHD_add_response_header(resp, "Location", "/");
	MHD_add_response_header(resp, "Set-Cookie", cookie);
	MHD_add_response_header(resp, "Cache-Control", "no-store");
	/* The link's token must not travel on in a Referer. */
	MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
	explicit_bzero(cookie, sizeof(cookie));
	r->answered = true;
	ret = MHD_queue_response(r->c, 303, resp);
	MHD_destroy_response(resp);
	return ret;
}

/* ---- the request to the guest --------------------------------------------- */

/* A header value safe to copy into a request head. */
static bool value_ok(const char *v)
{
	for (; *v; v++)
		if ((unsigned char)*v < 0x20 && *v != '\t')
			return false;
	return true;
}

struct head_make {
	struct preview_req *r;
	struct buf *b;
	const char *conn_tokens;  /* the client's Connection header */
};

/* The client's headers not passed on: hop-by-hop ones, the framing (made
 * anew), the cookies (passed without berth's), what berth-web sets. */
static bool header_dropped(const char *k, const char *conn_tokens)
{
	static const char *const dropped[] = {
		"Connection", "Keep-Alive", "Proxy-Connection", "TE", "Trailer",
		"Transfer-Encoding", "Upgrade", "Proxy-Authorization", "Content-Length", "Expect",
		"Cookie", "X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host",
		"X-Forwarded-Port", "X-Forwarded-Server", "X-Real-IP", "Forwarded", NULL
	};
	size_t kl = strlen(k);

	for (size_t i = 0; dropped[i]; i++)
		if (!strcasecmp(dropped[i], k))
			return true;
	/* A header the client's Connection names is hop-by-hop too. */
	for (const char *p = conn_tokens; p && *p;) {
		const char *s = p, *e = strchr(p, ',');
		if (!e)
			e = p + strlen(p);
		span_trim(&s, &e);
		if ((size_t)(e - s) == kl && !strncasecmp(s, k, kl))
			return true;
		p = *e ? e + 1 : e;
	}
	return false;
}

static enum MHD_Result head_header(void *cls, enum MHD_ValueKind kind, const char *k,
				   const char *v)
{
	struct head_make *m = cls;

	(void)kind;
	if (!strcasecmp(k, "Cookie")) {
		struct preview_req *r = m->r;
		if (v && r->nkeys < COOKIES_MAX)
			r->nkeys += preview_cookies(v, P.cookie, P.other, r->keys + r->nkeys,
						    COOKIES_MAX - r->nkeys, &r->cookie_rest);
		else if (v)
			preview_cookies(v, P.cookie, P.other, NULL, 0, &r->cookie_rest);
		return MHD_YES;
	}
	if (v && !header_dropped(k, m->conn_tokens) && value_ok(v))
		buf_printf(m->b, "%s: %s\r\n", k, v);
	return MHD_YES;
}

/* The request's head for the guest into R->head (and its cookies into
 * R->keys). */
static void make_head(struct preview_req *r, const char *method, const char *target,
		      const char *peer, uint64_t length)
{
	struct head_make m = { r, &r->head, MHD_lookup_connection_value(r->c, MHD_HEADER_KIND,
									 "Connection") };
	const char *host = MHD_lookup_connection_value(r->c, MHD_HEADER_KIND, "Host");

	buf_reset(&r->head);
	buf_reset(&r->cookie_rest);
	r->nkeys = 0;
	buf_printf(&r->head, "%s %s HTTP/1.1\r\n", method, target);
	MHD_get_connection_values(r->c, MHD_HEADER_KIND, head_header, &m);
	if (r->cookie_rest.len)
		buf_printf(&r->head, "Cookie: %s\r\n", buf_str(&r->cookie_rest));
	if (peer[0])
		buf_printf(&r->head, "X-Forwarded-For: %s\r\n", peer);
	buf_printf(&r->head, "X-Forwarded-Proto: %s\r\n", P.tls ? "https" : "http");
	if (host && value_ok(host))
		buf_printf(&r->head, "X-Forwarded-Host: %s\r\n", host);
	if (r->upgrade) {
		const char *up = MHD_lookup_connection_value(r->c, MHD_HEADER_KIND, "Upgrade");
		buf_printf(&r->head, "Connection: Upgrade\r\nUpgrade: %s\r\n", up);
	}
	if (r->up_chunked)
		buf_adds(&r->head, "Transfer-Encoding: chunked\r\n");
	else if (r->has_body)
		buf_printf(&r->head, "Content-Length: %llu\r\n", (unsigned long long)length);
	buf_adds(&r->head, "\r\n");
}

/* LEN bytes of DATA to the guest; -1 when it does not take them. */
static int to_guest(void *ctx, const void *data, size_t len)
{
	struct preview_req *r = ctx;

	if (fd_write_all(r->up->fd, data, len) < 0)
		return -1;
	atomic_store(&r->up->active, true);
	return 0;
}

/* A connection to the guest for R from hostd (waking the machine: a
 * browser's request gets "waking" at once, another is held).  0, or -1
 * with the refusal queued. */
static int connect_guest(struct preview_req *r, bool browser, enum MHD_Result *ret)
{
	json_t *keys = json_array(), *req, *ans = NULL;
	const char *code, *msg, *grant;
	char err[256];
	int s, fd = -1, st;

	for (size_t i = 0; i < r->nkeys; i++)
		json_array_append_new(keys, json_string(r->keys[i]));
	req = json_pack("{s:s, s:s, s:o, s:s}", "op", "preview", "label", r->label, "cookies",
			keys, "wake", browser ? "start" : "wait");
	/* hostd serves WEBCTL_MAX_CONNS at once: a burst of new connections
	 * beyond that waits a little rather than fail. */
	for (int tries = 0;; tries++) {
		/* While hostd wakes the machine (it says "waiting"), a client
		 * that goes ends the wait: its thread and its place are not
		 * held for a wake it no longer waits for. */
		s = hostctl_open_held(P.ctl, req, &ans, &fd, 1, CONNECT_WAIT_MS, r->client_fd, err,
				      sizeof(err));
		if (s < 0 || tries == 100 || hostctl_error(ans, &code, &msg) != 503 ||
		    strcmp(code, "too_many_connections") != 0)
			break;
		close(s);
		json_decref(ans);
		usleep(50 * 1000);
	}
	json_decref(req);
	if (s == -2) {
		log_info("preview %s: the client went while its machine woke", r->label);
		*ret = MHD_NO;
		return -1;
	}
	if (s < 0) {
		log_warn("preview %s: %s", r->label, err);
		*ret = own_answer(r, 502, "hostd_unreachable", err);
		return -1;
	}
	close(s);
	if ((st = hostctl_error(ans, &code, &msg)) || fd < 0) {
		*ret = st ? own_answer(r, (unsigned)st, code, msg)
			  : own_answer(r, 502, "bad_gateway", "berth-hostd passed no connection");
		json_decref(ans);
		if (fd >= 0)
			close(fd);
		return -1;
	}
	grant = json_string_value(json_object_get(ans, "grant"));
	r->up = link_add(fd, grant ? grant : "");
	r->reused = false;
	json_decref(ans);
	return 0;
}

/* More of the guest's answer into R->buf, waiting for it: the number of
 * bytes, 0 when the guest closed, -1 on an error or when the client
 * went. */
static ssize_t fill(struct preview_req *r)
{
	if (r->off == r->len) {
		r->off = r->len = 0;
	} else if (r->off > 0) {
		memmove(r->buf, r->buf + r->off, r->len - r->off);
		r->len -= r->off;
		r->off = 0;
	}
	if (r->len == IO_BUF)
		return -1;
	for (;;) {
		/* The client's socket is watched for its going only: one that
		 * shut down its sending side after its request (POLLRDHUP)
		 * still waits for the answer; one that went is found when a
		 * write to it fails (a reset: POLLHUP, POLLERR). */
		struct pollfd p[2] = { { .fd = r->up->fd, .events = POLLIN },
				       { .fd = r->client_fd, .events = 0 } };
		nfds_t np = r->client_fd >= 0 ? 2 : 1;
		if (poll(p, np, -1) < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		/* The client went: closing the guest's connection tells the
		 * guest too. */
		if (np == 2 && (p[1].revents & (POLLHUP | POLLERR | POLLNVAL)))
			return -1;
		if (!p[0].revents)
			continue;
		ssize_t n = read(r->up->fd, r->buf + r->len, IO_BUF - r->len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n > 0) {
			r->len += (size_t)n;
			r->any = true;
			atomic_store(&r->up->active, true);
		}
		return n;
	}
}

/* The answer ended as its framing says: the connection can serve the next
 * request when both sides keep it and nothing more came. */
static void body_ended(struct preview_req *r)
{
	r->keep = r->h.keep_alive && !r->broken && r->off == r->len;
}

/* libmicrohttpd's reader of the answer's body: the guest's, decoded, as it
 * comes. */
static ssize_t body_read(void *cls, uint64_t pos, char *out, size_t max)
{
	struct preview_req *r = cls;
	char why[128];

	(void)pos;
	for (;;) {
		if (r->off < r->len) {
			size_t avail = r->len - r->off, used, n;
			const char *data;
			int rc = upstream_body_step(&r->body, r->buf + r->off, avail < max ? avail : max,
						    &used, &data, &n, why, sizeof(why));
			if (rc < 0) {
				log_info("preview %s: the guest's body is malformed: %s", r->label, why);
				return MHD_CONTENT_READER_END_WITH_ERROR;
			}
			if (n)
				memmove(out, data, n);
			r->off += used;
			/* Its end: libmicrohttpd does not call again for a body of
			 * known length, so the connection's fate is decided now. */
			if (rc == 1)
				body_ended(r);
			if (n)
				return (ssize_t)n;
			if (rc == 1)
				return MHD_CONTENT_READER_END_OF_STREAM;
			continue;
		}
		if (r->body.done) {
			body_ended(r);
			return MHD_CONTENT_READER_END_OF_STREAM;
		}
		ssize_t got = fill(r);
		if (got < 0)
			return MHD_CONTENT_READER_END_WITH_ERROR;
		if (got == 0) {
			if (upstream_body_eof(&r->body) < 0)
				return MHD_CONTENT_READER_END_WITH_ERROR;  /* cut short */
			return MHD_CONTENT_READER_END_OF_STREAM;
		}
	}
}

/* The splice of an upgraded connection (a WebSocket): bytes both ways
 * until both sides ended or one failed. */
struct splice {
	struct link *up;
	int client;
	struct MHD_UpgradeResponseHandle *urh;
	char label[64];
	/* Bytes to the guest and to the client, not written yet. */
	char *to_up, *to_client;
	size_t up_off, up_len, cl_off, cl_len;
};

/* The splice's thread: one buffer each way, each filled when empty and
 * written out before the next read (a slow side holds the other back);
 * an end on one side is passed on as a half close. */
static void *splice_thread(void *arg)
{
	struct splice *s = arg;
	bool up_eof = false, cl_eof = false;

	fcntl(s->up->fd, F_SETFL, fcntl(s->up->fd, F_GETFL) | O_NONBLOCK);
	fcntl(s->client, F_SETFL, fcntl(s->client, F_GETFL) | O_NONBLOCK);
	for (;;) {
		struct pollfd p[2] = { { .fd = s->client }, { .fd = s->up->fd } };
		/* client -> to_up -> guest; guest -> to_client -> client. */
		if (s->up_off < s->up_len)
			p[1].events |= POLLOUT;
		else if (!cl_eof)
			p[0].events |= POLLIN;
		if (s->cl_off < s->cl_len)
			p[0].events |= POLLOUT;
		else if (!up_eof)
			p[1].events |= POLLIN;
		if (!p[0].events && !p[1].events)
			break;      /* both sides ended and everything was written */
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if ((p[0].revents | p[1].revents) & (POLLERR | POLLNVAL))
			break;
		if (p[0].revents & (POLLIN | POLLHUP) && s->up_off == s->up_len && !cl_eof) {
			ssize_t n = read(s->client, s->to_up, IO_BUF);
			if (n > 0) {
				s->up_off = 0;
				s->up_len = (size_t)n;
			} else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
				cl_eof = true;
				shutdown(s->up->fd, SHUT_WR);
			}
		}
		if (p[1].revents & (POLLIN | POLLHUP) && s->cl_off == s->cl_len && !up_eof) {
			ssize_t n = read(s->up->fd, s->to_client, IO_BUF);
			if (n > 0) {
				s->cl_off = 0;
				s->cl_len = (size_t)n;
				atomic_store(&s->up->active, true);
			} else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
				up_eof = true;
				shutdown(s->client, SHUT_WR);
			}
		}
		if (s->up_off < s->up_len) {
			ssize_t n = send(s->up->fd, s->to_up + s->up_off, s->up_len - s->up_off,
					 MSG_NOSIGNAL);
			if (n > 0) {
				s->up_off += (size_t)n;
				atomic_store(&s->up->active, true);
			} else if (n < 0 && errno != EAGAIN && errno != EINTR) {
				break;
			}
		}
		if (s->cl_off < s->cl_len) {
			ssize_t n = send(s->client, s->to_client + s->cl_off, s->cl_len - s->cl_off,
					 MSG_NOSIGNAL);
			if (n > 0)
				s->cl_off += (size_t)n;
			else if (n < 0 && errno != EAGAIN && errno != EINTR)
				break;
		}
		if (up_eof && cl_eof && s->up_off == s->up_len && s->cl_off == s->cl_len)
			break;
	}
	log_debug("preview %s: an upgraded connection ended", s->label);
	web_upgrade_close(s->urh);
	link_close(s->up);
	free(s->to_up);
	free(s->to_client);
	free(s);
	atomic_fetch_sub(&P.splices, 1);
	return NULL;
}

/* libmicrohttpd's: the 101 went to the client, SOCK is its connection
 * now; the splice runs on a thread of its own (this must return). */
static void upgraded(void *cls, struct MHD_Connection *c, void *con_cls, const char *extra_in,
		     size_t extra_in_size, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
	struct preview_req *r = cls;
	struct splice *s = calloc(1, sizeof(*s));
	pthread_attr_t attr;
	pthread_t t;

	(void)con_cls;
	conns_upgraded(c);
	if (!s || !(s->to_up = malloc(IO_BUF)) || !(s->to_client = malloc(IO_BUF)))
		abort();
	s->up = r->up;
	s->client = sock;
	s->urh = urh;
	snprintf(s->label, sizeof(s->label), "%s", r->label);
	/* What either side sent after its head is the first to pass. */
	if (extra_in_size > IO_BUF)
		extra_in_size = IO_BUF;
	memcpy(s->to_up, extra_in, extra_in_size);
	s->up_len = extra_in_size;
	s->cl_len = r->len - r->off;
	memcpy(s->to_client, r->buf + r->off, s->cl_len);
	r->up = NULL;
	r->upgraded = true;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 256 << 10);
	atomic_fetch_add(&P.splices, 1);
	if (pthread_create(&t, &attr, splice_thread, s) != 0) {
		atomic_fetch_sub(&P.splices, 1);
		log_warn("preview %s: cannot start a thread for an upgraded connection", r->label);
		web_upgrade_close(urh);
		link_close(s->up);
		free(s->to_up);
		free(s->to_client);
		free(s);
	}
	pthread_attr_destroy(&attr);
}

/* Queue the guest's answer (R->h, its body still to come) for the client. */
static enum MHD_Result answer(struct preview_req *r)
{
	struct upstream_head *h = &r->h;
	struct MHD_Response *resp;
	enum MHD_Result ret;
	uint64_t size;

	if (h->status == 101) {
		resp = MHD_create_response_for_upgrade(upgraded, r);
	} else if (!r->head_req && h->framing == UPSTREAM_NONE) {
		resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
	} else {
		size = h->framing == UPSTREAM_LENGTH ||
		       (r->head_req && upstream_head_get(h, "Content-Length")) ? h->length
									: MHD_SIZE_UNKNOWN;
		upstream_body_init(&r->body, h);
		resp = MHD_create_response_from_callback(size, IO_BUF, body_read, r, NULL);
	}
	if (!resp)
		return MHD_NO;
	for (size_t i = 0; i < h->n; i++) {
		const char *k = h->name[i];
		/* Clear-Site-Data: "cookies" clears a site's cookies, and every
		 * preview under the domain is one site: a guest's would clear
		 * the others' cookies. */
		if (upstream_hop_by_hop(h, k) || !strcasecmp(k, "Content-Length") ||
		    !strcasecmp(k, "Date") || !strcasecmp(k, "Clear-Site-Data") ||
		    (!strcasecmp(k, "Set-Cookie") &&
		     preview_setcookie_ours(h->value[i], P.cookie, P.other)))
			continue;
		MHD_add_response_header(resp, k, h->value[i]);
	}
	if (h->status == 101) {
		const char *up = upstream_head_get(h, "Upgrade");
		MHD_add_response_header(resp, "Upgrade", up ? up : "websocket");
		MHD_add_response_header(resp, "Connection", "Upgrade");
	}
	if (h->framing == UPSTREAM_NONE && !r->head_req)
		r->keep = h->keep_alive && !r->broken && h->status != 101 && r->off == r->len;
	r->answered = true;
	ret = MHD_queue_response(r->c, (unsigned)h->status, resp);
	MHD_destroy_response(resp);
	return ret;
}

/* Send R's head (and, with RETRY, once more on a new connection when a
 * kept one turned out closed).  0, or -1 with the refusal queued. */
static int send_head(struct preview_req *r, bool browser, enum MHD_Result *ret)
{
	if (to_guest(r, r->head.data, r->head.len) == 0)
		return 0;
	if (r->reused && r->idempotent) {
		link_close(r->up);
		r->up = NULL;
		if (connect_guest(r, browser, ret) < 0)
			return -1;
		if (to_guest(r, r->head.data, r->head.len) == 0)
			return 0;
	}
	*ret = own_answer(r, 502, "bad_gateway", "the machine's port closed the connection "
			  "before the request was sent");
	return -1;
}

/* The guest's answer's head (interim ones skipped; a 101 only to an
 * upgrade), then the answer queued.  A kept connection the guest had
 * closed meanwhile is replaced once, for a request that may be sent
 * again. */
static enum MHD_Result respond(struct preview_req *r, bool browser)
{
	char why[160];
	enum MHD_Result ret;

	for (;;) {
		ssize_t hl;
		while ((hl = upstream_head_parse(r->buf + r->off, r->len - r->off, r->head_req,
						  &r->h, why, sizeof(why))) == 0) {
			ssize_t got = fill(r);
			if (got > 0)
				continue;
			if (got == 0 && !r->any && r->reused && r->idempotent) {
				/* The kept connection was closed by the guest. */
				link_close(r->up);
				r->up = NULL;
				if (connect_guest(r, browser, &ret) < 0 || send_head(r, browser, &ret) < 0)
					return ret;
				continue;
			}
			return own_answer(r, 502, "bad_gateway", got == 0 ?
					  "the machine's port closed the connection without an "
					  "answer" : "the machine's answer did not arrive");
		}
		if (hl < 0) {
			char msg[256];
			log_info("preview %s: a malformed answer: %s", r->label, why);
			snprintf(msg, sizeof(msg), "the machine's answer is malformed: %s", why);
			return own_answer(r, 502, "bad_gateway", msg);
		}
		r->off += (size_t)hl;
		if (r->h.status >= 200 || (r->h.status == 101 && r->upgrade))
			break;
		upstream_head_free(&r->h);  /* 100, 102, 103: not passed on */
	}
	return answer(r);
}

/* The head of a request arrived. */
static enum MHD_Result begin(struct preview_req *r, const char *method, const char *target,
			     const char *peer)
{
	const char *host = MHD_lookup_connection_value(r->c, MHD_HEADER_KIND, "Host");
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(r->c, MHD_CONNECTION_INFO_CONNECTION_FD);
	size_t plen = strcspn(target, "?");
	struct web_framing f;
	char why[256];
	enum MHD_Result ret = MHD_NO;
	bool browser;

	r->client_fd = ci ? ci->connect_fd : -1;
	void **slot = conns_slot(r->c);
	r->conn = slot ? *slot : NULL;
	r->head_req = !strcmp(method, "HEAD");
	if (!preview_label_of(host, P.domain, r->label, sizeof(r->label)))
		return own_answer(r, 400, "invalid_label", "no preview's host name");
	if (!r->label[0])
		return own_answer(r, 400, "invalid_label", "a preview's label is at most 63 "
				  "characters");
	/* Framing and names the guest would read otherwise (web/request.h). */
	if (web_request_check(r->c, method, &f, why, sizeof(why)))
		return own_answer(r, 400, "invalid_request", why);
	/* Methods that echo the request back (TRACK is IIS's TRACE): the
	 * broker refuses them too. */
	if (!strcasecmp(method, "TRACE") || !strcasecmp(method, "TRACK"))
		return own_answer(r, 405, "method_not_allowed", "a preview does not forward TRACE "
				  "or TRACK");
	if (plen == strlen(LOGIN_PATH) && !strncmp(target, LOGIN_PATH, plen))
		return login(r, method);
	if (!value_ok(target) || (target[0] != '/' && strcmp(target, "*") != 0))
		return own_answer(r, 400, "invalid_path", "invalid request target");
	browser = r->browser = wants_html(r->c) && (!strcmp(method, "GET") || r->head_req);
	r->has_body = f.has_body;
	r->up_chunked = f.chunked;
	r->left = f.length;
	/* An upgrade (a WebSocket): Upgrade, and Connection naming it. */
	r->upgrade = MHD_lookup_connection_value(r->c, MHD_HEADER_KIND, "Upgrade") &&
		     upstream_list_has(MHD_lookup_connection_value(r->c, MHD_HEADER_KIND,
								   "Connection"), "upgrade");
	r->idempotent = !r->has_body && (!strcmp(method, "GET") || r->head_req ||
					 !strcmp(method, "OPTIONS"));
	make_head(r, method, target, peer, f.length);
	/* The guest's connection: the one this client connection kept, when
	 * it is for the same preview and the same cookies, else hostd's. */
	char keys[sizeof(r->conn->keys)];
	size_t kl = 0;
	keys[0] = '\0';
	for (size_t i = 0; i < r->nkeys; i++)
		kl += (size_t)snprintf(keys + kl, sizeof(keys) - kl, "%s,", r->keys[i]);
	if (r->conn && r->conn->up) {
		if (!strcmp(r->conn->label, r->label) && !strcmp(r->conn->keys, keys) &&
		    link_fresh(r->conn->up)) {
			r->up = r->conn->up;
			r->reused = true;
		} else {
			link_close(r->conn->up);
		}
		r->conn->up = NULL;
	}
	if (!r->up && connect_guest(r, browser, &ret) < 0)
		return ret;
	if (r->conn) {
		snprintf(r->conn->label, sizeof(r->conn->label), "%s", r->label);
		snprintf(r->conn->keys, sizeof(r->conn->keys), "%s", keys);
	}
	if (!(r->buf = malloc(IO_BUF)))
		abort();
	if (send_head(r, browser, &ret) < 0)
		return ret;
	/* The answer is queued at the request's end, even without a body:
	 * libmicrohttpd closes a connection whose answer was queued at its
	 * head's call. */
	return MHD_YES;
}

enum MHD_Result preview_handle(struct MHD_Connection *c, const char *method, const char *target,
			       const char *peer, const char *upload_data,
			       size_t *upload_data_size, struct preview_req **state)
{
	struct preview_req *r = *state;

	if (!r) {
		r = calloc(1, sizeof(*r));
		if (!r)
			abort();
		r->c = c;
		*state = r;
		return begin(r, method, target, peer);
	}
	if (*upload_data_size) {
		/* The body, as it arrives, never past the length the guest was
		 * told; a guest that stops taking it gets its answer read at the
		 * end. */
		if (!r->answered && !r->broken &&
		    web_body_pass(r->up_chunked, &r->left, upload_data, *upload_data_size,
				  to_guest, r) < 0)
			r->broken = true;
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (r->answered)
		return MHD_YES;
	if (!r->broken && web_body_end(r->up_chunked, to_guest, r) < 0)
		r->broken = true;
	return respond(r, r->browser);
}

void preview_done(struct preview_req *r)
{
	if (!r)
		return;
	/* A guest connection that may serve the client's next request stays
	 * with the client connection; any other is closed. */
	if (r->up && r->keep && r->conn && !r->upgraded) {
		r->conn->up = r->up;
		r->up = NULL;
	}
	link_close(r->up);
	upstream_head_free(&r->h);
	buf_free(&r->head);
	buf_free(&r->cookie_rest);
	free(r->buf);
	free(r);
}

bool preview_host(struct MHD_Connection *c)
{
	char label[64];

	return preview_label_of(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host"), P.domain,
				label, sizeof(label));
}

void preview_notify(void *cls, struct MHD_Connection *c, void **socket_context,
		    enum MHD_ConnectionNotificationCode toe)
{
	struct preview_conn *pc = *socket_context;

	(void)cls;
	(void)c;
	if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
		*socket_context = calloc(1, sizeof(struct preview_conn));
		if (!*socket_context)
			abort();
	} else if (toe == MHD_CONNECTION_NOTIFY_CLOSED && pc) {
		link_close(pc->up);
		free(pc);
		*socket_context = NULL;
	}
}
