#include "hostd/secrets.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "common/sshexec.h"
#include "common/util.h"
#include "hostd/callcap.h"
#include "hostd/db.h"
#include "hostd/hostd.h"
#include "hostd/idle.h"
#include "hostd/machine.h"
#include "hostd/net.h"
#include "hostd/webctl.h"
#include "common/banned.h"

/* A broker call's end is waited for at most this long (the broker cuts
 * its own calls at 4 hours). */
#define CALL_MAX_MS (4LL * 3600 * 1000 + 60 * 1000)
/* Each machine's calls (and refusals, which are logged) come at most
 * RATE a second, BURST at once: past that 429, not logged, so that a
 * guest cannot fill the log or the disk's fsyncs. */
#define RATE 10.0
#define BURST 50.0
#define BUCKETS 1024
/* Writing a machine's variables: tries after a failure wait from 5 s to
 * 5 minutes, doubling; the thread looks every 5 s. */
#define SYNC_TICK_MS 5000
#define BACKOFF_MIN_MS 5000
#define BACKOFF_MAX_MS (5 * 60 * 1000)
#define BACKOFFS 256

struct bucket {
	int index;             /* the machine's network index; 0: free */
	double tokens;
	int64_t t_ms;
	int64_t dropped;       /* calls refused for the rate since the last note */
	int64_t noted_ms;
};

struct backoff {
	char id[37];           /* "": free */
	int64_t next_ms, wait_ms;
};

struct secrets {
	pthread_t thread;
	bool running;
	pthread_mutex_t lock;  /* quit, kick, the buckets and the backoffs */
	pthread_cond_t cv;
	bool quit, kick;
	pthread_mutex_t sync_lock;  /* one write into a machine at a time */
	struct bucket bucket[BUCKETS];
	struct backoff backoff[BACKOFFS];
	struct callcap *calls;  /* the calls open, under their caps */
};

static bool broker_on(const struct hostd *h)
{
	return h->cfg.broker_port > 0 && net_routed(h) && h->net;
}

/* "http://GATEWAY:PORT", what guests reach the broker at. */
static void broker_base(const struct hostd *h, char *out, size_t outlen)
{
	char gw[16];

	net_ip_text(net_conf(h)->gateway, gw, sizeof(gw));
	snprintf(out, outlen, "http://%s:%d", gw, h->cfg.broker_port);
}

static void kick(struct hostd *h)
{
	struct secrets *s = h->secrets;

	if (!s)
		return;
	pthread_mutex_lock(&s->lock);
	s->kick = true;
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->lock);
}

/* Machine MACHINE_ID's variables should be what its grants say now. */
static int want_update(struct hostd *h, const char *machine_id, struct err *e)
{
	char (*names)[64] = NULL, base[64];
	size_t n = 0;
	struct buf text = BUF_INIT;
	int rc;

	if (db_machine_secrets(h->db, machine_id, &names, &n, e) < 0)
		return -1;
	if (broker_on(h)) {
		broker_base(h, base, sizeof(base));
		secrets_env_text(base, names, n, &text);
	}
	rc = db_secret_env_want(h->db, machine_id, buf_str(&text), e);
	free(names);
	buf_free(&text);
	kick(h);
	return rc;
}

/* ---- the routes' work ---------------------------------------------------- */

static json_t *secret_json(const struct db_secret *s, json_t *machines)
{
	json_t *pairs = json_loads(s->headers, 0, NULL), *names = json_array(), *p;
	char var[96];
	size_t i;

	/* The names only: a value is never answered. */
	json_array_foreach(pairs, i, p)
		json_array_append(names, json_array_get(p, 0));
	json_decref(pairs);
	secrets_env_var(s->name, var, sizeof(var));
	return json_pack("{s:s, s:s, s:o, s:o, s:s, s:I}", "name", s->name, "url", s->url,
			 "headers", names, "machines", machines, "variable", var,
			 "created", (json_int_t)s->created);
}

static json_t *names_json(char (*names)[64], size_t n)
{
	json_t *a = json_array();

	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, json_string(names[i]));
	return a;
}

json_t *secrets_add(struct hostd *h, const char *owner, json_t *req, struct err *e)
{
	struct db_secret s = { 0 }, *have = NULL;
	json_t *name = json_object_get(req, "name"), *url = json_object_get(req, "url");
	json_t *headers = json_object_get(req, "headers"), *pairs = NULL, *v;
	char hname[65], hvalue[4097];
	char *text = NULL;
	size_t i, n = 0;

	if (!json_is_string(name) || !secrets_name_valid(json_string_value(name))) {
		err_set(e, 400, "invalid_name", "a secret's name is 1 to 63 of a-z, 0-9 and '-', "
			"starting with a letter, not ending with '-' (it names the variable "
			"NAME_BASE_URL in machines), and not 'log'");
		return NULL;
	}
	if (!json_is_string(url)) {
		err_set(e, 400, "invalid_url", "url (a string, https://...) is required");
		return NULL;
	}
	if (!json_is_array(headers) || json_array_size(headers) == 0 ||
	    json_array_size(headers) > SECRETS_MAX_HEADERS) {
		err_set(e, 400, "invalid_header", "headers is required: 1 to %d lines 'Name: value'",
			SECRETS_MAX_HEADERS);
		return NULL;
	}
	snprintf(s.owner, sizeof(s.owner), "%s", owner);
	snprintf(s.name, sizeof(s.name), "%s", json_string_value(name));
	if (secrets_url_check(json_string_value(url), s.url, sizeof(s.url), e) < 0)
		return NULL;
	pairs = json_array();
	json_array_foreach(headers, i, v) {
		if (!json_is_string(v)) {
			err_set(e, 400, "invalid_header", "each header is a string 'Name: value'");
			goto fail;
		}
		if (secrets_header_parse(json_string_value(v), hname, sizeof(hname), hvalue,
					 sizeof(hvalue), e) < 0)
			goto fail;
		for (size_t k = 0; k < json_array_size(pairs); k++)
			if (!strcasecmp(json_string_value(json_array_get(json_array_get(pairs, k), 0)),
					hname)) {
				err_set(e, 400, "invalid_header", "header %s is given twice", hname);
				goto fail;
			}
		json_array_append_new(pairs, json_pack("[s, s]", hname, hvalue));
	}
	text = json_dumps(pairs, JSON_COMPACT);
	if (!text || strlen(text) >= sizeof(s.headers)) {
		err_set(e, 400, "invalid_header", "the headers together are longer than %zu bytes",
			sizeof(s.headers) - 64);
		goto fail;
	}
	snprintf(s.headers, sizeof(s.headers), "%s", text);
	if (db_secret_list(h->db, owner, &have, &n, e) < 0)
		goto fail;
	free(have);
	if (n >= SECRETS_MAX_PER_USER) {
		err_set(e, 403, "quota_exceeded", "%s has %zu secrets, the most one user may have",
			owner, n);
		goto fail;
	}
	if (db_secret_insert(h->db, &s, SECRETS_MAX_PER_USER, e) < 0)
		goto fail;
	log_info("secret %s/%s added: %s, %zu header lines", owner, s.name, s.url,
		 json_array_size(pairs));
	json_t *r = secret_json(&s, json_array());
	json_decref(pairs);
	explicit_bzero(text, strlen(text));
	free(text);
	explicit_bzero(hvalue, sizeof(hvalue));
	explicit_bzero(s.headers, sizeof(s.headers));
	return r;
fail:
	if (text)
		explicit_bzero(text, strlen(text));
	free(text);
	json_decref(pairs);
	explicit_bzero(hvalue, sizeof(hvalue));
	return NULL;
}

json_t *secrets_list(struct hostd *h, const char *owner, struct err *e)
{
	struct db_secret *ss = NULL;
	size_t n = 0;
	json_t *a;

	if (db_secret_list(h->db, owner, &ss, &n, e) < 0)
		return NULL;
	a = json_array();
	for (size_t i = 0; i < n; i++) {
		char (*names)[64] = NULL;
		size_t nn = 0;
		if (db_secret_machines(h->db, ss[i].id, &names, &nn, e) < 0) {
			json_decref(a);
			a = NULL;
			break;
		}
		json_array_append_new(a, secret_json(&ss[i], names_json(names, nn)));
		free(names);
	}
	if (ss)
		explicit_bzero(ss, n * sizeof(*ss));
	free(ss);
	return a ? json_pack("{s:o}", "secrets", a) : NULL;
}

int secrets_remove(struct hostd *h, const char *owner, const char *name, struct err *e)
{
	struct db_secret s;
	char (*ids)[64] = NULL;
	size_t n = 0;

	if (!secrets_name_valid(name))
		return err_set(e, 404, "no_secret", "no secret %.63s", name);
	if (db_secret_get(h->db, owner, name, &s, e) < 0 ||
	    db_secret_grantees(h->db, s.id, &ids, &n, e) < 0)
		return -1;
	explicit_bzero(s.headers, sizeof(s.headers));
	if (db_secret_delete(h->db, owner, name, e) < 0) {
		free(ids);
		return -1;
	}
	for (size_t i = 0; i < n; i++)
		want_update(h, ids[i], NULL);
	free(ids);
	log_info("secret %s/%s removed (it was allowed to %zu machines)", owner, name, n);
	return 0;
}

/* Write machine ID's variables now (sync_machine); for a grant. */
static int sync_machine(struct hostd *h, const char *id, int timeout_ms, struct err *e);

/* Whether M may be allowed (ALLOW) or refused secret NAME: its id into
 * *ID, or -1 with E. */
static int allow_check(struct hostd *h, const struct machine *m, const char *name, bool allow,
		       int64_t *id, struct err *e)
{
	struct db_secret s;
	char (*names)[64] = NULL;
	size_t n = 0;

	if (allow && !broker_on(h))
		return err_set(e, 409, "broker_off", "the credential broker is off on this host "
			       "(it needs network = routed and a broker_port)");
	if (!secrets_name_valid(name))
		return err_set(e, 404, "no_secret", "no secret %.63s", name);
	if (db_secret_get(h->db, m->owner, name, &s, e) < 0)
		return -1;
	explicit_bzero(s.headers, sizeof(s.headers));
	*id = s.id;
	if (allow) {
		if (db_machine_secrets(h->db, m->id, &names, &n, e) < 0)
			return -1;
		free(names);
		if (n >= SECRETS_MAX_PER_MACHINE)
			return err_set(e, 403, "quota_exceeded", "machine %s may use %zu secrets, "
				       "the most one machine may", m->name, n);
	}
	return 0;
}

int secrets_allow_check(struct hostd *h, const struct machine *m, const char *name,
			bool allow, struct err *e)
{
	int64_t id;

	return allow_check(h, m, name, allow, &id, e);
}

int secrets_allow(struct hostd *h, const struct machine *m, const char *name, bool allow,
		  struct err *e)
{
	bool changed = false;
	int64_t id;

	if (allow_check(h, m, name, allow, &id, e) < 0)
		return -1;
	if (db_secret_grant(h->db, id, m->id, allow, SECRETS_MAX_PER_MACHINE, &changed, e) < 0 ||
	    want_update(h, m->id, e) < 0)
		return -1;
	if (changed)
		log_info("machine %s/%s %s secret %s", m->owner, m->name,
			 allow ? "may use" : "may no longer use", name);
	/* A running machine gets its variables now when it answers; else
	 * the thread writes them when it does. */
	if (changed && m->state == MS_RUNNING) {
		struct err se = { 0 };
		if (sync_machine(h, m->id, 10000, &se) < 0)
			log_info("machine %s/%s: broker variables not written yet (%s): later",
				 m->owner, m->name, se.msg);
	}
	return 0;
}

json_t *secrets_of_machine(struct hostd *h, const struct machine *m)
{
	char (*names)[64] = NULL;
	size_t n = 0;
	json_t *a;

	if (db_machine_secrets(h->db, m->id, &names, &n, NULL) < 0)
		return json_array();
	a = names_json(names, n);
	free(names);
	return a;
}

json_t *secrets_log(struct hostd *h, const char *owner, const char *secret,
		    const char *machine, int limit, struct err *e)
{
	struct db_broker_call *c = NULL;
	size_t n = 0;
	json_t *a;

	if (db_broker_log_list(h->db, owner, secret, machine, limit, &c, &n, e) < 0)
		return NULL;
	a = json_array();
	for (size_t i = 0; i < n; i++) {
		json_t *row = json_pack("{s:I, s:I, s:s, s:s, s:s, s:s, s:i, s:I, s:I}",
					"time", (json_int_t)c[i].t, "ms", (json_int_t)c[i].ms,
					"machine", c[i].machine, "secret", c[i].secret,
					"method", c[i].method, "path", c[i].path,
					"status", c[i].status, "bytes_in", (json_int_t)c[i].bytes_in,
					"bytes_out", (json_int_t)c[i].bytes_out);
		if (row && c[i].error[0])
			json_object_set_new(row, "error", json_string(c[i].error));
		if (row)
			json_array_append_new(a, row);
	}
	free(c);
	return json_pack("{s:o}", "calls", a);
}

json_t *secrets_broker_settings(struct hostd *h)
{
	char gw[16], listen[40];

	if (!broker_on(h))
		return json_null();
	const struct net_conf *c = net_conf(h);
	struct buf closed = BUF_INIT;
	char net[16];
	json_t *j;

	net_ip_text(c->gateway, gw, sizeof(gw));
	snprintf(listen, sizeof(listen), "%s:%d", gw, h->cfg.broker_port);
	/* What guests may not reach, the broker may not either: the guest
	 * network, egress_closed and the host's networks (berth-web adds the
	 * ranges closed always and the host's own addresses). */
	net_ip_text(c->net, net, sizeof(net));
	buf_printf(&closed, "%s/%d", net, c->prefix);
	for (size_t i = 0; i < c->n_closed; i++)
		buf_printf(&closed, ",%s", c->closed[i]);
	j = json_pack("{s:s, s:s, s:I, s:I, s:s, s:s}", "listen", listen,
		      "ca_file", h->cfg.broker_ca_file,
		      "timeout_s", (json_int_t)h->cfg.broker_timeout_s,
		      "max_body", (json_int_t)h->cfg.broker_max_body,
		      "closed", buf_str(&closed), "allow", h->cfg.broker_allow);
	buf_free(&closed);
	return j;
}

/* ---- the broker's calls ----------------------------------------------------- */

/* Which machine's connection GUEST_FD is: the broker's own (the gateway
 * address and broker_port locally), a TCP connection from an address of
 * the guest network, whose index goes into *INDEX.  The address is the
 * kernel's, read here: berth-web does not say it. */
static int identify(struct hostd *h, int fd, int *index, struct err *e)
{
	const struct net_conf *c = net_conf(h);
	struct sockaddr_in local, peer;
	socklen_t ll = sizeof(local), pl = sizeof(peer), ol = sizeof(int);
	int type = 0, listening = 1;

	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &ol) < 0 || type != SOCK_STREAM ||
	    getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &ol) < 0 || listening ||
	    getsockname(fd, (struct sockaddr *)&local, &ll) < 0 || local.sin_family != AF_INET ||
	    getpeername(fd, (struct sockaddr *)&peer, &pl) < 0 || peer.sin_family != AF_INET)
		return err_set(e, 400, "invalid_socket", "the descriptor is no connected TCP "
			       "socket over IPv4");
	if (ntohl(local.sin_addr.s_addr) != c->gateway ||
	    ntohs(local.sin_port) != h->cfg.broker_port)
		return err_set(e, 400, "invalid_socket", "the connection is not to the broker "
			       "(the gateway address, port %d)", h->cfg.broker_port);
	uint32_t ip = ntohl(peer.sin_addr.s_addr);
	if ((ip & c->mask) != c->net || ip <= c->gateway ||
	    (int64_t)(ip - c->gateway) > net_max_index(c))
		return err_set(e, 400, "invalid_socket", "the connection is not from the guest "
			       "network");
	*index = (int)(ip - c->gateway);
	return 0;
}

/* Whether machine INDEX may make a call now (RATE, BURST). */
static bool rate_ok(struct hostd *h, int index)
{
	struct secrets *s = h->secrets;
	struct bucket *b;
	int64_t now = mono_ms();
	bool ok;

	if (!s)
		return true;
	pthread_mutex_lock(&s->lock);
	b = &s->bucket[index % BUCKETS];
	if (b->index != index) {
		memset(b, 0, sizeof(*b));
		b->index = index;
		b->tokens = BURST;
		b->t_ms = now;
	}
	b->tokens += (double)(now - b->t_ms) * RATE / 1000.0;
	if (b->tokens > BURST)
		b->tokens = BURST;
	b->t_ms = now;
	ok = b->tokens >= 1.0;
	if (ok) {
		b->tokens -= 1.0;
	} else {
		b->dropped++;
		if (now - b->noted_ms > 10000) {
			log_warn("broker: the machine at network index %d calls more than %.0f times "
				 "a second: %lld calls refused (429), not logged", index, RATE,
				 (long long)b->dropped);
			b->noted_ms = now;
			b->dropped = 0;
		}
	}
	pthread_mutex_unlock(&s->lock);
	return ok;
}

static void log_call(struct hostd *h, struct db_broker_call *c)
{
	struct err e = { 0 };

	if (db_broker_log_add(h->db, c, SECRETS_LOG_KEEP, &e) < 0)
		log_warn("broker: cannot log a call of %s/%s: %s", c->owner, c->machine, e.msg);
}

/* The call's end, on CFD: {"status", "bytes_in", "bytes_out", "error"?}
 * into C; the call is held active for the idle policy meanwhile. */
static void await_end(struct webctl *w, int cfd, const char *machine_id,
		      struct db_broker_call *c)
{
	struct hostd *h = webctl_hostd(w);
	int64_t t0 = mono_ms(), touched = t0;
	json_t *end = NULL;
	int r = -1;

	for (;;) {
		r = webctl_read(cfd, 1000, &end);
		if (r >= 0 || webctl_stopping(w) || mono_ms() - t0 > CALL_MAX_MS)
			break;
		if (mono_ms() - touched > 60000) {
			idle_touch(h, machine_id, "broker");
			touched = mono_ms();
		}
	}
	if (r == 0) {
		json_int_t status = 0, in = 0, out = 0;
		const char *why = NULL;
		json_unpack(end, "{s?I, s?I, s?I, s?s}", "status", &status, "bytes_in", &in,
			    "bytes_out", &out, "error", &why);
		c->status = status >= 0 && status < 1000 ? (int)status : 0;
		c->bytes_in = in >= 0 ? in : 0;
		c->bytes_out = out >= 0 ? out : 0;
		if (why)
			snprintf(c->error, sizeof(c->error), "%s", why);
	} else {
		snprintf(c->error, sizeof(c->error), "%s", r > 0 ? "berth-web ended the call "
			 "without its end" : webctl_stopping(w) ? "berth-hostd stopped" :
			 "the call outlived its longest time");
	}
	c->ms = mono_ms() - t0;
	json_decref(end);
	idle_touch(h, machine_id, "broker");
}

void secrets_broker_call(struct webctl *w, int cfd, json_t *req, int guest_fd)
{
	struct hostd *h = webctl_hostd(w);
	struct err e = { 0 };
	const char *secret = NULL, *method = NULL, *path = NULL;
	struct db_broker_call c = { 0 };
	struct machine m;
	struct db_secret s;
	bool allowed = false;
	char url[sizeof(s.url) + 4096];
	json_t *headers = NULL, *ans = NULL;
	int index = 0;
	struct callcap *calls = h->secrets ? h->secrets->calls : NULL;
	bool held = false;

	memset(&s, 0, sizeof(s));
	if (!broker_on(h)) {
		err_set(&e, 409, "broker_off", "the credential broker is off on this host");
		goto out;
	}
	if (identify(h, guest_fd, &index, &e) < 0)
		goto out;
	close(guest_fd);
	guest_fd = -1;
	if (json_unpack(req, "{s:s, s:s, s:s}", "secret", &secret, "method", &method, "path",
			&path) < 0) {
		err_set(&e, 400, "invalid_json", "secret, method and path are required");
		goto out;
	}
	if (!secrets_name_valid(secret)) {
		err_set(&e, 400, "invalid_name", "invalid secret name");
		goto out;
	}
	if (secrets_request_check(method, path, c.path, sizeof(c.path), &e) < 0)
		goto out;
	if (!rate_ok(h, index)) {
		err_set(&e, 429, "too_many_calls", "more than %.0f calls a second from this machine",
			RATE);
		goto out;
	}
	if (db_broker_lookup(h->db, index, secret, &m, &s, &allowed, &e) < 0) {
		if (e.status == 404) {
			err_clear(&e);
			err_set(&e, 403, "forbidden", "no machine has this address");
		}
		goto out;
	}
	c.t = now_s();
	snprintf(c.owner, sizeof(c.owner), "%s", m.owner);
	snprintf(c.machine, sizeof(c.machine), "%s", m.name);
	snprintf(c.secret, sizeof(c.secret), "%s", secret);
	snprintf(c.method, sizeof(c.method), "%s", method);
	if (!s.id || !allowed) {
		/* The same answer whether the owner has such a secret or not. */
		err_set(&e, 403, "forbidden", "machine %s may not use secret %s (its owner allows "
			"it with: berth set %s --secret %s)", m.name, secret, m.name, secret);
		c.status = 403;
		snprintf(c.error, sizeof(c.error), "not allowed");
		log_call(h, &c);
		log_info("broker: %s/%s refused secret %s (%s %s)", m.owner, m.name, secret, method,
			 c.path);
		goto out;
	}
	/* Each call holds this connection (and a thread) until it ends: a
	 * machine, an owner and the broker as a whole hold at most their
	 * caps, so that neither one user's guests nor all of them starve the
	 * rest, and previews keep webctl_reserved_connections. */
	if (calls) {
		struct callcap_limits lim = {
			.per_machine = h->cfg.broker_max_calls_per_machine,
			.per_user = h->cfg.broker_max_calls_per_user,
			.total = WEBCTL_MAX_CONNS - h->cfg.webctl_reserved_connections,
			.reserved = h->cfg.webctl_reserved_connections,
		};
		if (callcap_take(calls, m.owner, m.id, m.name, &lim, &e) < 0) {
			c.status = e.status;
			snprintf(c.error, sizeof(c.error), "%s", e.code);
			log_call(h, &c);
			goto out;
		}
		held = true;
	}
	if (secrets_url_join(s.url, path, url, sizeof(url), &e) < 0)
		goto out;
	headers = json_loads(s.headers, 0, NULL);
	ans = json_pack("{s:s, s:O, s:s, s:s}", "url", url, "headers", headers ? headers :
			json_array(), "machine", m.name, "owner", m.owner);
	if (!ans || webctl_send(cfd, ans, NULL, 0) < 0) {
		snprintf(c.error, sizeof(c.error), "the answer could not be sent to berth-web");
		log_call(h, &c);
		goto out;
	}
	idle_touch(h, m.id, "broker");
	await_end(w, cfd, m.id, &c);
	log_call(h, &c);
	json_t *done = json_pack("{s:b}", "logged", 1);
	if (done)
		webctl_send(cfd, done, NULL, 0);
	json_decref(done);
out:
	if (err_isset(&e))
		webctl_send_err(cfd, &e);
	if (held)
		callcap_give(calls, m.owner, m.id);
	if (guest_fd >= 0)
		close(guest_fd);
	explicit_bzero(s.headers, sizeof(s.headers));
	json_decref(headers);
	json_decref(ans);
}

/* ---- the broker's variables in machines ----------------------------------- */

/* The backoff slot of machine ID (made when MAKE). */
static struct backoff *backoff_of(struct secrets *s, const char *id, bool make)
{
	struct backoff *free_slot = NULL, *oldest = &s->backoff[0];

	for (int i = 0; i < BACKOFFS; i++) {
		struct backoff *b = &s->backoff[i];
		if (!strcmp(b->id, id))
			return b;
		if (!b->id[0] && !free_slot)
			free_slot = b;
		if (b->next_ms < oldest->next_ms)
			oldest = b;
	}
	if (!make)
		return NULL;
	if (!free_slot) {
		free_slot = oldest;
		memset(free_slot, 0, sizeof(*free_slot));
	}
	snprintf(free_slot->id, sizeof(free_slot->id), "%s", id);
	return free_slot;
}

static int sync_machine(struct hostd *h, const char *id, int timeout_ms, struct err *e)
{
	struct secrets *s = h->secrets;
	struct db_secret_env *rows = NULL, *row = NULL;
	struct machine m;
	struct machine_ssh ms;
	struct buf script = BUF_INIT;
	char err[512] = "";
	int pfd[2] = { -1, -1 }, status = -1, rc = -1;
	size_t n = 0;

	if (!s)
		return err_set(e, 503, "not_ready", "the broker's variables are not written yet");
	pthread_mutex_lock(&s->sync_lock);
	if (db_machine_get_id(h->db, id, &m, e) < 0 || db_secret_env_list(h->db, false, &rows,
									   &n, e) < 0)
		goto out;
	for (size_t i = 0; i < n; i++)
		if (!strcmp(rows[i].machine_id, id))
			row = &rows[i];
	if (!row || !strcmp(row->want, row->written)) {
		rc = 0;
		goto out;
	}
	if (machine_ssh(h, m.owner, m.name, false, &ms, e) < 0)
		goto out;
	if (!sshexec_banner_ready(ms.host, ms.port, 1500)) {
		err_set(e, 503, "unreachable", "its sshd does not answer yet");
		goto out;
	}
	secrets_env_script(row->want, &script);
	/* The script through stdin (a pipe holds it whole: a few KiB). */
	if (pipe2(pfd, O_CLOEXEC) < 0 || fd_write_all(pfd[1], script.data, script.len) < 0) {
		err_errno(e, errno, "pipe");
		goto out;
	}
	close(pfd[1]);
	pfd[1] = -1;
	struct sshexec_target t = { .host = ms.host, .port = ms.port, .user = ms.user,
				    .key_b64 = h->key.private_pem, .connect_timeout_ms = timeout_ms,
				    .host_key = ms.m.host_key };
	if (sshexec_run(&t, "s=; [ \"$(id -u)\" = 0 ] || s='sudo -n'; exec $s sh -s", pfd[0], -1,
			-1, &status, err, sizeof(err)) < 0) {
		err_set(e, 503, "ssh_failed", "%s", err);
		goto out;
	}
	if (status != 0) {
		err_set(e, 502, "write_failed", "the script that writes them exited %d (its image's "
			"user may not be root nor sudo without a password)", status);
		goto out;
	}
	if (db_secret_env_written(h->db, id, row->want, e) < 0)
		goto out;
	log_info("machine %s/%s: broker variables written (%s)", m.owner, m.name,
		 row->want[0] ? "some secrets" : "none left");
	rc = 0;
out:
	pthread_mutex_unlock(&s->sync_lock);
	if (pfd[0] >= 0)
		close(pfd[0]);
	if (pfd[1] >= 0)
		close(pfd[1]);
	buf_free(&script);
	free(rows);
	return rc;
}

/* One pass: every running machine whose variables are stale, unless it
 * failed lately. */
static void sync_pass(struct hostd *h)
{
	struct secrets *s = h->secrets;
	struct db_secret_env *rows = NULL;
	size_t n = 0;

	if (db_secret_env_list(h->db, true, &rows, &n, NULL) < 0)
		return;
	for (size_t i = 0; i < n; i++) {
		struct err e = { 0 };
		int64_t now = mono_ms();
		pthread_mutex_lock(&s->lock);
		struct backoff *b = backoff_of(s, rows[i].machine_id, false);
		bool wait = b && b->next_ms > now;
		bool quit = s->quit;
		pthread_mutex_unlock(&s->lock);
		if (quit)
			break;
		if (wait)
			continue;
		int rc = sync_machine(h, rows[i].machine_id, 10000, &e);
		pthread_mutex_lock(&s->lock);
		b = backoff_of(s, rows[i].machine_id, rc < 0);
		if (rc == 0 && b) {
			memset(b, 0, sizeof(*b));
		} else if (rc < 0) {
			/* A machine still booting is tried again at the next tick. */
			if (!strcmp(e.code, "unreachable")) {
				b->next_ms = mono_ms() + SYNC_TICK_MS;
			} else {
				b->wait_ms = b->wait_ms ? b->wait_ms * 2 : BACKOFF_MIN_MS;
				if (b->wait_ms > BACKOFF_MAX_MS)
					b->wait_ms = BACKOFF_MAX_MS;
				b->next_ms = mono_ms() + b->wait_ms;
				log_warn("machine %s: cannot write the broker's variables (%s); "
					 "again in %lld s", rows[i].machine_id, e.msg,
					 (long long)(b->wait_ms / 1000));
			}
		}
		pthread_mutex_unlock(&s->lock);
	}
	free(rows);
}

static void *sync_thread(void *arg)
{
	struct hostd *h = arg;
	struct secrets *s = h->secrets;

	for (;;) {
		struct timespec ts;
		pthread_mutex_lock(&s->lock);
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += SYNC_TICK_MS / 1000;
		while (!s->quit && !s->kick)
			if (pthread_cond_timedwait(&s->cv, &s->lock, &ts) == ETIMEDOUT)
				break;
		bool quit = s->quit;
		s->kick = false;
		pthread_mutex_unlock(&s->lock);
		if (quit)
			break;
		sync_pass(h);
	}
	return NULL;
}

int secrets_start(struct hostd *h, struct err *e)
{
	struct secrets *s = calloc(1, sizeof(*s));
	struct db_secret_env *rows = NULL;
	size_t n = 0;

	if (!s)
		return err_set(e, 500, "internal", "out of memory");
	pthread_mutex_init(&s->lock, NULL);
	pthread_mutex_init(&s->sync_lock, NULL);
	pthread_cond_init(&s->cv, NULL);
	h->secrets = s;
	if (!(s->calls = callcap_new()))
		return err_set(e, 500, "internal", "out of memory");
	/* What every machine should have, as this configuration says (its
	 * gateway or broker_port may have changed). */
	if (db_secret_env_list(h->db, false, &rows, &n, e) < 0)
		return -1;
	for (size_t i = 0; i < n; i++)
		want_update(h, rows[i].machine_id, NULL);
	free(rows);
	if (pthread_create(&s->thread, NULL, sync_thread, h) != 0)
		return err_set(e, 500, "internal", "cannot start the broker variables' thread");
	s->running = true;
	if (broker_on(h)) {
		char base[64];
		broker_base(h, base, sizeof(base));
		log_info("credential broker: guests reach it at %s (berth-web serves it)", base);
	} else {
		log_info("credential broker: off (%s)", h->cfg.broker_port ? "network = user" :
			 "broker_port = 0");
	}
	return 0;
}

void secrets_stop(struct hostd *h)
{
	struct secrets *s = h->secrets;

	if (!s)
		return;
	if (s->running) {
		pthread_mutex_lock(&s->lock);
		s->quit = true;
		pthread_cond_signal(&s->cv);
		pthread_mutex_unlock(&s->lock);
		pthread_join(s->thread, NULL);
	}
	h->secrets = NULL;
	pthread_cond_destroy(&s->cv);
	pthread_mutex_destroy(&s->lock);
	pthread_mutex_destroy(&s->sync_lock);
	/* A call webctl_stop left running still gives its place back. */
	if (s->calls && callcap_count(s->calls, NULL, NULL) > 0)
		log_warn("broker: %d calls still open at stop", callcap_count(s->calls, NULL, NULL));
	else
		callcap_free(s->calls);
	free(s);
}

void secrets_machine_forked(struct hostd *h, const char *from_id, const char *to_id,
			    bool as_is)
{
	struct err e = { 0 };

	if (db_secret_env_forked(h->db, from_id, to_id, &e) < 0 ||
	    (!as_is && db_secret_env_unknown(h->db, to_id, &e) < 0))
		log_warn("fork %s: broker variables: %s", to_id, e.msg);
	kick(h);
}

void secrets_machine_restored(struct hostd *h, const char *id)
{
	struct err e = { 0 };

	if (db_secret_env_unknown(h->db, id, &e) < 0)
		log_warn("restore %s: broker variables: %s", id, e.msg);
	kick(h);
}
