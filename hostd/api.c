#include "hostd/api.h"
#include "hostd/attrs.h"

#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/log.h"
#include "common/sshexec.h"
#include "common/util.h"
#include "hostd/checkpoint.h"
#include "hostd/db.h"
#include "hostd/desktop.h"
#include "hostd/events.h"
#include "hostd/exec.h"
#include "hostd/files.h"
#include "hostd/idle.h"
#include "hostd/keyproof.h"
#include "hostd/image.h"
#include "hostd/template.h"
#include "hostd/machine.h"
#include "hostd/machine_json.h"
#include "hostd/memimage.h"
#include "hostd/net.h"
#include "hostd/preview.h"
#include "hostd/prometheus.h"
#include "hostd/quota.h"
#include "hostd/secrets.h"
#include "hostd/sessions.h"
#include "hostd/tokens.h"
#include "hostd/transfer.h"
#include "hostd/usage.h"
#include "hostd/userkeys.h"
#include "hostd/webhooks.h"
#include "common/banned.h"


/* A connection on a UNIX socket: whose it is and the deadline of the
 * request head it owes (api_start's comment says why). */
struct conn {
	struct conn *prev, *next;
	int fd;
	uid_t uid;
	bool admitted;          /* counted; false: refused, closing */
	bool in_request;        /* its head arrived, the request is served */
	bool cut;               /* shut down at its head deadline */
	int64_t head_deadline_ms;
};

/* Connections on the socket per uid. */
struct uid_count {
	uid_t uid;
	unsigned n;             /* admitted */
	unsigned refused;       /* refused, not closed yet */
};

struct owner_count {
	char owner[64];
	unsigned n;             /* requests in progress */
};

struct api {
	struct hostd *h;
	struct MHD_Daemon *d;
	int fd;
	char path[108];
	bool http;      /* berth-web's socket (web.sock): callers are the bearer
			   tokens it passes on, its peers only web_user and root */
	/* The socket's connections (conn_*), under LOCK. */
	pthread_mutex_t lock;
	pthread_cond_t wake;    /* the reaper's sleep; signalled at stop */
	bool stopping;
	pthread_t reaper;
	bool has_reaper;
	struct conn *conns;
	struct uid_count *uids;
	size_t nuids, uids_cap;
	/* web.sock: every peer is berth-web's uid, so the share of each
	 * token's user is counted by request, by owner (under LOCK). */
	struct owner_count *owners;
	size_t nowners, owners_cap;
	unsigned total, users;  /* admitted: all, and those of neither root nor gateway */
	int64_t refusal_logged_ms;
	unsigned refusals_unlogged;
};

/* The uid of every caller through berth-web: no one's, so neither root's
 * routes nor the gateway's answer it. */
#define HTTP_UID ((uid_t)-1)

/* What a handler returns: status and a JSON body (reference taken), or a
 * response that streams its body (an export). */
struct reply {
	int status;
	json_t *body;
	struct MHD_Response *stream;
	char *text;            /* a body already encoded (malloc'd), instead of BODY */
};

/* A request in progress, from its head to its answer. */
struct req {
	int64_t t0;
	char owner[64];             /* the caller (caller()) */
	uid_t uid;
	const struct api_route *route;
	const char *args[4];        /* its {params}, pointing into scratch */
	char scratch[1024];
	struct buf body;
	bool too_big;
	/* An upload's body streams into a sink instead of being
	 * buffered (ctx NULL: none). */
	struct upload up;
	/* An answer decided at the head (a refusal): kept while the body is
	 * read and dropped. */
	bool has_early;
	struct reply early;
	bool owner_counted;         /* among its owner's requests on web.sock */
};

static struct reply ok(int status, json_t *body)
{
	return (struct reply){ status, body, NULL };
}

static struct reply fail_now(int status, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Replace every byte of S that is not part of valid UTF-8 with '?': error
 * messages quote URLs, request values and tools' stderr, and may have been
 * cut in the middle of a character; JSON strings must be UTF-8. */
static void utf8_sanitize(char *s)
{
	unsigned char *p = (unsigned char *)s;

	while (*p) {
		int n = *p < 0x80 ? 1 : (*p & 0xe0) == 0xc0 && *p >= 0xc2 ? 2 :
			(*p & 0xf0) == 0xe0 ? 3 : (*p & 0xf8) == 0xf0 && *p <= 0xf4 ? 4 : 0;
		int i;
		for (i = 1; i < n; i++)
			if ((p[i] & 0xc0) != 0x80)
				break;
		if (n == 0 || i < n) {
			*p++ = '?';
			continue;
		}
		p += n;
	}
}

static struct reply fail(const struct err *e)
{
	int status = e->status ? e->status : 500;
	char code[sizeof(e->code)], msg[sizeof(e->msg)];

	snprintf(code, sizeof(code), "%s", e->code[0] ? e->code : "internal");
	snprintf(msg, sizeof(msg), "%s", e->msg);
	utf8_sanitize(code);
	utf8_sanitize(msg);
	return (struct reply){ status, json_pack("{s:{s:s, s:s}}", "error", "code", code,
						 "message", msg) };
}

static struct reply fail_now(int status, const char *code, const char *fmt, ...)
{
	struct err e = { 0 };
	va_list ap;

	e.status = status;
	snprintf(e.code, sizeof(e.code), "%s", code);
	va_start(ap, fmt);
	vsnprintf(e.msg, sizeof(e.msg), fmt, ap);
	va_end(ap);
	return fail(&e);
}

/* The user on whose behalf the request acts: the peer's user name; root
 * (hostd's trusted local clients: the CLI as root, the gateways later) may
 * act for another user with the X-Berth-User header. */
static int peer_owner(struct MHD_Connection *c, char *out, size_t outlen, uid_t *uid,
		      struct err *e)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	struct ucred cred;
	socklen_t len = sizeof(cred);
	struct passwd pw, *res = NULL;
	char pwbuf[4096];
	const char *as;

	if (!ci || getsockopt(ci->connect_fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return err_set(e, 403, "forbidden", "cannot read the caller's credentials");
	*uid = cred.uid;
	as = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Berth-User");
	if (as && cred.uid == 0) {
		if (!name_valid(as))
			return err_set(e, 400, "invalid_user", "invalid X-Berth-User '%s'", as);
		snprintf(out, outlen, "%s", as);
		return 0;
	}
	if (getpwuid_r(cred.uid, &pw, pwbuf, sizeof(pwbuf), &res) != 0 || !res)
		snprintf(out, outlen, "uid%u", (unsigned)cred.uid);
	else
		snprintf(out, outlen, "%s", res->pw_name);
	return 0;
}

/* Who is calling, decided here for both sockets.  On hostd.sock: the
 * peer's user (peer_owner).  On web.sock (berth-web's HTTP): the user of
 * the bearer token
 * (`Authorization: Bearer SECRET`), with *UID = HTTP_UID; 401
 * "unauthorized" without one, 401 "invalid_token" for a bad or revoked
 * one, 403 for an X-Berth-User header (no one acts for others over HTTP). */
static int caller(struct api *a, struct MHD_Connection *c, char *out, size_t outlen,
		  uid_t *uid, struct err *e)
{
	const char *auth, *p;
	struct token t;

	if (!a->http)
		return peer_owner(c, out, outlen, uid, e);
	*uid = HTTP_UID;
	if (MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Berth-User"))
		return err_set(e, 403, "forbidden", "X-Berth-User is not accepted over HTTP");
	/* berth-web sends what its client sent, and never a token of its
	 * own: it cannot act as anyone without one. */
	auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
	if (!auth || strncasecmp(auth, "Bearer ", 7) != 0)
		return err_set(e, 401, "unauthorized", "an API token is required: "
			       "Authorization: Bearer TOKEN (berth token create makes one)");
	for (p = auth + 7; *p == ' '; p++)
		;
	if (token_check(a->h, p, &t, e) < 0)
		return -1;
	snprintf(out, outlen, "%s", t.owner);
	return 0;
}

/* Parse BODY as a JSON object (an empty body is {}).  Unknown keys (not in
 * the NULL-terminated ALLOWED) are refused: a typo must not be ignored. */
json_t *api_parse_body(const struct buf *body, const char *const *allowed,
		       struct err *e)
{
	json_error_t je;
	json_t *j;
	const char *key;
	json_t *val;

	if (body->len == 0)
		return json_object();
	j = json_loadb(body->data, body->len, JSON_REJECT_DUPLICATES, &je);
	if (!j) {
		err_set(e, 400, "invalid_json", "malformed JSON body: %s (line %d, column %d)",
			je.text, je.line, je.column);
		return NULL;
	}
	if (!json_is_object(j)) {
		json_decref(j);
		err_set(e, 400, "invalid_json", "the JSON body must be an object");
		return NULL;
	}
	json_object_foreach(j, key, val) {
		size_t i;
		for (i = 0; allowed[i]; i++)
			if (strcmp(allowed[i], key) == 0)
				break;
		if (!allowed[i]) {
			err_set(e, 400, "unknown_field", "unknown field '%s'", key);
			json_decref(j);
			return NULL;
		}
	}
	return j;
}

/* A size field: a JSON integer (bytes, or UNIT for bare numbers in a
 * string) or a string like "512M".  0 when absent. */
int api_get_size(json_t *j, const char *key, uint64_t unit, uint64_t *out,
		 struct err *e)
{
	json_t *v = json_object_get(j, key);

	*out = 0;
	if (!v)
		return 0;
	if (json_is_integer(v) && json_integer_value(v) > 0) {
		*out = (uint64_t)json_integer_value(v);
		return 0;
	}
	if (json_is_string(v) && size_parse(json_string_value(v), unit, out) == 0 && *out > 0)
		return 0;
	char code[40];
	snprintf(code, sizeof(code), "invalid_%s", key);
	return err_set(e, 400, code, "%s must be a size such as \"512M\" or \"4G\"", key);
}

static int get_bool(json_t *j, const char *key, bool *out, struct err *e)
{
	json_t *v = json_object_get(j, key);

	if (!v)
		return 0;
	if (!json_is_boolean(v))
		return err_set(e, 400, "invalid_json", "%s must be true or false", key);
	*out = json_is_true(v);
	return 0;
}

static int get_int(json_t *j, const char *key, int lo, int hi, int *out, struct err *e)
{
	json_t *v = json_object_get(j, key);

	if (!v)
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
		char code[40];
		snprintf(code, sizeof(code), "invalid_%s", key);
		return err_set(e, 400, code, "%s must be an integer from %d to %d", key, lo, hi);
	}
	*out = (int)json_integer_value(v);
	return 0;
}

/* "idle": a duration ("15m", "90s", seconds as a number), "never", or
 * "default" (the config's idle_timeout); into struct machine's encoding.
 * *SET tells whether the key was there. */
static int get_idle(json_t *j, int64_t *out, bool *set, struct err *e)
{
	json_t *v = json_object_get(j, "idle");
	int64_t s;

	*set = v != NULL;
	if (!v)
		return 0;
	if (json_is_integer(v) && json_integer_value(v) > 0 &&
	    json_integer_value(v) <= 366LL * 86400) {
		*out = json_integer_value(v);
		return 0;
	}
	if (json_is_string(v) && strcmp(json_string_value(v), "default") == 0) {
		*out = 0;
		return 0;
	}
	if (json_is_string(v) && duration_parse(json_string_value(v), &s) == 0 && s != 0 &&
	    s <= 366LL * 86400) {
		*out = s;
		return 0;
	}
	return err_set(e, 400, "invalid_idle", "idle must be a duration from 1s to 366d "
		       "(e.g. 90s, 15m, 2h), \"never\" or \"default\"");
}

/* One request as a handler sees it. */
struct call {
	struct api *a;
	struct hostd *h;
	struct MHD_Connection *conn;
	const char *method, *url;
	const struct api_route *route;
	const char *owner;          /* on whose behalf it acts */
	uid_t uid;                  /* the socket peer's (HTTP_UID over HTTP) */
	enum api_caller who;        /* its class */
	const char *arg[4];         /* the route's {params}, in order */
	const struct buf *body;     /* the body (empty for an upload) */
	struct upload *upload;      /* an upload's sink, fed as it arrived (the
				       handler finishes it) */
};

/* GET /v1/quota: the caller's quotas, each with its limit and use. */
static struct reply do_quota(struct call *c)
{
	struct err e = { 0 };
	json_t *j = quota_json(c->h, c->owner, &e);

	return j ? ok(200, j) : fail(&e);
}

/* Where berth-web serves the dashboard, as berth.conf says ("" when
 * http_listen is empty), into OUT. */
static void dashboard_url(const struct config *cfg, char *out, size_t outlen)
{
	if (!cfg->http_listen[0])
		snprintf(out, outlen, "%s", "");
	else
		snprintf(out, outlen, "%s://%s/", cfg->tls_cert[0] ? "https" : "http",
			 cfg->http_listen);
}

static struct reply do_info(struct call *c)
{
	struct hostd *h = c->h;
	struct storage_pool_info pi;
	json_t *st = json_pack("{s:s, s:s}", "backend", storage_name(h->st),
			       "location", storage_location(h->st));
	char dashboard[160];

	dashboard_url(&h->cfg, dashboard, sizeof(dashboard));
	if (storage_pool_info(h->st, &pi, NULL) == 0) {
		json_object_set_new(st, "total", json_integer((json_int_t)pi.total_bytes));
		json_object_set_new(st, "used", json_integer((json_int_t)pi.used_bytes));
	}
	return ok(200, json_pack("{s:s, s:s, s:i, s:s, s:s, s:o, s:s, s:s, s:s, s:I, s:s, s:s?, s:s}",
				 "user", c->owner,
				 "version", BERTH_VERSION, "schema", db_schema_version(),
				 "hypervisor", virt_hypervisor(h->virt),
				 "libvirt", virt_version(h->virt), "storage", st,
				 "network", h->cfg.network, "instance", h->instance,
				 "state_dir", h->cfg.state_dir,
				 "uptime_ms", (json_int_t)(mono_ms() - h->started_ms),
				 "hypervisor_note", virt_why_tcg(h->virt),
				 "dashboard", dashboard[0] ? dashboard : NULL,
				 "desktop_url", h->cfg.desktop_url));
}

/* GET /v1/web/settings (root's: berth-web asks as root, before it drops
 * to its user): what berth.conf says of berth-web's listener.  berth-web
 * reads the TLS files itself, as root, and binds. */
static struct reply do_web_settings(struct call *c)
{
	const struct config *cfg = &c->h->cfg;
	char dashboard[160];

	dashboard_url(cfg, dashboard, sizeof(dashboard));
	return ok(200, json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:o, s:s}",
				 "http_listen", cfg->http_listen, "tls_cert", cfg->tls_cert,
				 "tls_key", cfg->tls_key, "web_dir", cfg->web_dir,
				 "web_user", cfg->web_user, "dashboard", dashboard,
				 "broker", secrets_broker_settings(c->h),
				 "preview_domain", cfg->preview_domain));
}

/* What machine M's JSON says beyond its row (machine_json.h), from the
 * modules that know it.  USER: its image's login user; ALLOCATED: its
 * storage (-1: unknown). */
static void facts_of(struct hostd *h, const struct machine *m, const char *user,
		     int64_t allocated, struct machine_facts *f)
{
	memset(f, 0, sizeof(*f));
	f->user = user;
	f->allocated = allocated;
	f->memory_bytes = memimage_bytes(h, m);
	f->sessions = sessions_count(h->sessions, m->id);
	f->egress = m->egress[0] ? m->egress : h->cfg.egress_default;
	f->egress_long = m->egress_long;
	idle_view(h, m, &f->idle);
	if (!busy_get(h->busy, m->id, &f->op, &f->done, &f->total))
		f->op = NULL;
}

/* Machine M's JSON, its storage read live. */
static json_t *machine_out(struct hostd *h, const struct machine *m)
{
	struct storage_vol_info vi;
	struct image img;
	struct machine_facts f;

	facts_of(h, m, db_image_get(h->db, m->image, &img, NULL) == 0 ? img.user : "root",
		 storage_vol_info(h->st, m->volume, &vi, NULL) == 0
			 ? (int64_t)vi.allocated_bytes : -1, &f);
	return machine_json(h, m, &f);
}

/* M's JSON with READY_MS (>= 0: the time until its SSH answered). */
static struct reply machine_reply(struct call *c, int status, const struct machine *m,
				  int64_t ready_ms)
{
	struct reply rep = ok(status, machine_out(c->h, m));

	if (ready_ms >= 0)
		json_object_set_new(rep.body, "ready_ms", json_integer(ready_ms));
	return rep;
}

static struct reply do_list(struct call *c)
{
	struct machine *ms = NULL;
	struct image *imgs = NULL;
	struct db_latest_sample *samples = NULL;
	struct db_attrs_row *attrs = NULL;
	size_t n = 0, ni = 0, ns = 0, na = 0;
	struct err e = { 0 };
	struct buf out = BUF_INIT;
	struct reply rep = { .status = 200 };
	struct machine_facts f;

	/* Thousands of machines (bench/billing.py): the images and the
	 * storage samples are read once, not per machine, and the reply is
	 * written as text, without a JSON tree to build and free.  A listed
	 * machine's "allocated" is its last storage sample (at most a
	 * minute old: what it is billed for); GET of one reads it live. */
	if (db_machine_list(c->h->db, c->owner, &ms, &n, &e) < 0 ||
	    db_image_list(c->h->db, &imgs, &ni, &e) < 0 ||
	    db_samples_latest(c->h->db, &samples, &ns, &e) < 0 ||
	    db_attrs_all(c->h->db, &attrs, &na, &e) < 0) {
		free(ms);
		free(imgs);
		free(samples);
		return fail(&e);
	}
	buf_reserve(&out, 64 + n * 512);
	buf_adds(&out, "{\"machines\":[");
	for (size_t i = 0; i < n; i++) {
		const char *user = "root";
		for (size_t k = 0; k < ni; k++)
			if (strcmp(imgs[k].name, ms[i].image) == 0)
				user = imgs[k].user;
		const struct db_latest_sample *s = db_sample_find(samples, ns, ms[i].id);
		if (i)
			buf_adds(&out, ",");
		facts_of(c->h, &ms[i], user, s ? (int64_t)s->bytes : -1, &f);
		f.attrs = db_attrs_find(attrs, na, ms[i].id);
		f.attrs_all = true;
		machine_json_write(c->h, &ms[i], &f, &out);
	}
	buf_adds(&out, "]}");
	free(ms);
	free(imgs);
	free(samples);
	db_attrs_all_free(attrs, na);
	rep.text = buf_detach(&out);
	return rep;
}

static struct reply do_create(struct call *c)
{
	static const char *const allowed[] = { "name", "image", "vcpus", "memory", "disk",
					       "start", "wait", "idle", "egress", "template", "expires_in",
					       "expire_action", "metadata", "env", NULL };
	struct err e = { 0 };
	struct machine m;
	struct create_req r = { .owner = c->owner, .image = "tiny", .vcpus = 1,
				.memory = 512ULL << 20 };
	json_t *j = api_parse_body(c->body, allowed, &e), *v;
	int64_t ready = -1;
	uint64_t mem = 0;
	bool idle_set;
	struct attrs_req ar = { 0 };

	if (!j)
		return fail(&e);
	if (attrs_parse(j, &ar, &e) < 0)
		goto out;
	v = json_object_get(j, "name");
	if (!v || !json_is_string(v)) {
		err_set(&e, 400, "invalid_name", "name is required (a string)");
		goto out;
	}
	r.name = json_string_value(v);
	v = json_object_get(j, "image");
	if (v && !json_is_string(v)) {
		err_set(&e, 400, "invalid_image", "image must be a string");
		goto out;
	}
	if (v)
		r.image = json_string_value(v);
	v = json_object_get(j, "egress");
	if (v && !json_is_string(v)) {
		err_set(&e, 400, "invalid_egress", "egress must be a string: open, none or rules");
		goto out;
	}
	if (v && strcmp(json_string_value(v), "default") != 0)
		r.egress = json_string_value(v);
	if (get_idle(j, &r.idle_timeout, &idle_set, &e) < 0 ||
	    get_int(j, "vcpus", 1, 1 << 20, &r.vcpus, &e) < 0 ||
	    api_get_size(j, "memory", 1ULL << 20, &mem, &e) < 0 ||
	    api_get_size(j, "disk", 1, &r.disk, &e) < 0 ||
	    get_bool(j, "start", &r.start, &e) < 0 || get_bool(j, "wait", &r.wait, &e) < 0)
		goto out;
	if (mem)
		r.memory = mem;
	v = json_object_get(j, "template");
	if (v) {
		/* A live fork of the template's saved state: its image, size
		 * and memory are the template's. */
		int64_t t0 = mono_ms();
		if (!json_is_string(v))
			err_set(&e, 400, "invalid_template", "template must be a string");
		else if (json_object_get(j, "image") || json_object_get(j, "vcpus") ||
			 json_object_get(j, "memory") || json_object_get(j, "disk") ||
			 json_object_get(j, "egress") || idle_set)
			err_set(&e, 400, "invalid_template", "a machine from a template has the "
				"template's image, vcpus, memory and disk");
		else if (template_instantiate(c->h, c->owner, json_string_value(v), r.name,
					      r.wait, &m, &e) == 0)
			ready = r.wait ? mono_ms() - t0 : -1;
		goto out;
	}
	machine_create(c->h, &r, &m, &ready, &e);
out:
	/* A machine made (no error so far): its attributes (hostd/attrs.h),
	 * written once it exists; should that fail, it goes again (a machine
	 * is made whole or not at all). */
	if (!err_isset(&e) && attrs_any(&ar) && attrs_apply(c->h, m.id, &ar, &e) < 0) {
		struct err e2 = { 0 };
		if (machine_delete(c->h, c->owner, m.name, &e2) < 0)
			log_warn("machine %s/%s: its attributes: %s; deleting it: %s", c->owner,
				 m.name, e.msg, e2.msg);
	}
	json_decref(j);
	if (err_isset(&e))
		return fail(&e);
	return machine_reply(c, 201, &m, ready);
}

static struct reply do_show(struct call *c)
{
	struct err e = { 0 };
	struct machine m;
	struct reply rep;

	if (db_machine_get(c->h->db, c->owner, c->arg[0], &m, &e) < 0)
		return fail(&e);
	rep = ok(200, machine_out(c->h, &m));
	/* One machine: its cost so far, its rate and its allocation split
	 * (the list skips them); the secrets it may use through the broker. */
	usage_machine(c->h, &m, rep.body);
	json_object_set_new(rep.body, "secrets", secrets_of_machine(c->h, &m));
	return rep;
}

/* PATCH /v1/machines/NAME: change a setting of a machine (its idle
 * timeout, its egress policy), whatever its state.  Each change is whole
 * or not at all: an egress policy is applied (at once, to a running
 * machine) before it is recorded, and a policy that does not parse or
 * apply leaves the one in force. */
static struct reply do_patch(struct call *c)
{
	static const char *const allowed[] = { "idle", "egress", "secret", "no_secret",
					       "expires_in", "expire_action", "metadata", "env",
					       NULL };
	struct err e = { 0 };
	struct machine m;
	int64_t idle = 0;
	bool idle_set;
	json_t *j = api_parse_body(c->body, allowed, &e), *v;
	const char *egress = NULL, *secret = NULL, *no_secret = NULL;
	struct attrs_req ar;
	struct reply rep;

	if (!j || get_idle(j, &idle, &idle_set, &e) < 0 || attrs_parse(j, &ar, &e) < 0)
		goto out;
	v = json_object_get(j, "egress");
	if (v && !json_is_string(v)) {
		err_set(&e, 400, "invalid_egress", "egress must be a string: open, none, rules, "
			"or default");
		goto out;
	}
	egress = v ? json_string_value(v) : NULL;
	/* A secret the machine may use (the broker's), or no more. */
	if (json_unpack_ex(j, NULL, 0, "{s?s, s?s}", "secret", &secret, "no_secret",
			   &no_secret) < 0) {
		err_set(&e, 400, "invalid_name", "secret and no_secret are secrets' names");
		goto out;
	}
	if (!idle_set && !egress && !secret && !no_secret && !attrs_any(&ar)) {
		err_set(&e, 400, "nothing_to_change", "nothing to change: give \"idle\", "
			"\"egress\", \"secret\", \"no_secret\", \"expires_in\", "
			"\"expire_action\", \"metadata\" or \"env\"");
		goto out;
	}
	/* Everything is checked before anything changes: a refusal leaves the
	 * machine as it was. */
	if (db_machine_get(c->h->db, c->owner, c->arg[0], &m, &e) < 0 ||
	    (egress && machine_egress_check(c->h, egress, &e) < 0) ||
	    (secret && secrets_allow_check(c->h, &m, secret, true, &e) < 0) ||
	    (no_secret && secrets_allow_check(c->h, &m, no_secret, false, &e) < 0) ||
	    (egress && machine_set_egress(c->h, &m, egress, &e) < 0) ||
	    (secret && secrets_allow(c->h, &m, secret, true, &e) < 0) ||
	    (no_secret && secrets_allow(c->h, &m, no_secret, false, &e) < 0) ||
	    (idle_set && db_machine_set_idle(c->h->db, m.id, idle, &e) < 0) ||
	    attrs_apply(c->h, m.id, &ar, &e) < 0 ||
	    db_machine_get_id(c->h->db, m.id, &m, &e) < 0)
		goto out;
	if (idle_set)
		log_info("machine %s/%s: idle timeout %lld (0: default, -1: never)", c->owner,
			 c->arg[0], (long long)idle);
out:
	json_decref(j);
	if (err_isset(&e))
		return fail(&e);
	rep = machine_reply(c, 200, &m, -1);
	json_object_set_new(rep.body, "secrets", secrets_of_machine(c->h, &m));
	return rep;
}

/* GET /v1/machines/NAME/egress: its policy, and what its guest reached and
 * was refused lately. */
static struct reply do_egress(struct call *c)
{
	struct err e = { 0 };
	struct machine m;
	struct buf text = BUF_INIT;
	json_t *log;
	struct reply rep;

	if (db_machine_get(c->h->db, c->owner, c->arg[0], &m, &e) < 0 ||
	    db_machine_egress(c->h->db, m.id, &text, &e) < 0)
		return fail(&e);
	log = net_egress_log(c->h, &m, &e);
	if (!log) {
		buf_free(&text);
		return fail(&e);
	}
	json_object_set_new(log, "machine", json_string(m.name));
	json_object_set_new(log, "policy", json_string(text.len ? buf_str(&text)
								 : c->h->cfg.egress_default));
	json_object_set_new(log, "default", json_boolean(text.len == 0));
	rep = ok(200, log);
	buf_free(&text);
	return rep;
}

static struct reply do_delete(struct call *c)
{
	struct err e = { 0 };

	if (machine_delete(c->h, c->owner, c->arg[0], &e) < 0)
		return fail(&e);
	return ok(200, json_pack("{s:s}", "deleted", c->arg[0]));
}

/* POST /v1/machines/NAME/ACTION: ACTION is the route's last segment, or
 * the catch-all's {action}. */
static struct reply do_action(struct call *c)
{
	static const char *const allowed[] = { "timeout", "wait", NULL };
	const char *action = c->arg[1] ? c->arg[1] : strrchr(c->route->path, '/') + 1;
	struct err e = { 0 };
	enum machine_action act;
	struct act_opts o = { 0 };
	struct machine m;
	int64_t ready = -1;
	json_t *j;

	if (machine_action_parse(action, &act) < 0)
		return fail_now(404, "not_found", "no action '%s' (start, stop, suspend, "
				"resume, restart)", action);
	j = api_parse_body(c->body, allowed, &e);
	if (!j)
		return fail(&e);
	if (get_int(j, "timeout", 1, 3600, &o.timeout_s, &e) < 0 ||
	    get_bool(j, "wait", &o.wait, &e) < 0) {
		json_decref(j);
		return fail(&e);
	}
	json_decref(j);
	if (machine_act(c->h, c->owner, c->arg[0], act, &o, &m, &ready, &e) < 0)
		return fail(&e);
	return machine_reply(c, 200, &m, ready);
}

/* The SSH credential of OWNER's machine NAME: its endpoint, the image's
 * user and the gateway's private key, the key to every machine.  WAKE
 * starts a stopped or suspended machine and waits for its SSH first;
 * without it a machine that is not running is 409 "not_running" with its
 * "state".  For the gateway (GATEWAY), a machine OWNER does not have is
 * 404 "no_machine", "no machine NAME": the same whoever else has one. */
static struct reply ssh_credential(struct hostd *h, const char *owner, const char *name,
				   bool wake, bool gateway)
{
	struct err e = { 0 };
	struct machine_ssh s;
	struct reply rep;

	if (machine_ssh(h, owner, name, wake, &s, &e) == 0)
		return ok(200, json_pack("{s:s, s:i, s:s, s:s, s:s, s:I}", "host", s.host,
					 "port", s.port, "user", s.user,
					 "private_key", h->key.private_pem,
					 "host_key", s.m.host_key, "woke_ms", (json_int_t)s.woke_ms));
	/* No such machine (or it went while waking): the gateway's answer
	 * must not tell another owner's machine from none. */
	if (gateway && e.status == 404)
		return fail_now(404, "no_machine", "no machine %s", name);
	rep = fail(&e);
	if (!strcmp(e.code, "not_running"))
		json_object_set_new(rep.body, "state", json_string(mstate_name(s.m.state)));
	return rep;
}

/* POST /v1/machines/NAME/ssh: the credential `berth exec` uses. */
static struct reply do_ssh(struct call *c)
{
	static const char *const allowed[] = { "wake", NULL };
	struct err e = { 0 };
	bool wake = false;
	json_t *j;
	struct reply rep;
	struct machine m;
	struct ucred cred;
	socklen_t len = sizeof(cred);

	j = api_parse_body(c->body, allowed, &e);
	if (!j || get_bool(j, "wake", &wake, &e) < 0) {
		json_decref(j);
		return fail(&e);
	}
	json_decref(j);
	rep = ssh_credential(c->h, c->owner, c->arg[0], wake, false);
	/* berth exec holds the machine active while its process lives. */
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (rep.status == 200 && ci &&
	    getsockopt(ci->connect_fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 &&
	    db_machine_get(c->h->db, c->owner, c->arg[0], &m, NULL) == 0)
		idle_exec(c->h, m.id, cred.pid);
	return rep;
}

/* POST /v1/machines/NAME/desktop: a one-time URL of the machine's screen
 * (hostd/desktop.h). */
static struct reply do_desktop(struct call *c)
{
	static const char *const allowed[] = { NULL };
	struct err e = { 0 };
	char token[64], url[512];
	int64_t expires, family = 0;
	json_t *j = api_parse_body(c->body, allowed, &e);

	if (!j)
		return fail(&e);
	json_decref(j);
	/* An API token's URL is of its family: revoking the token cuts the
	 * viewers it let in (desktop_revoke).  caller() checked the token;
	 * its id is read again here. */
	if (c->who == CALLER_TOKEN) {
		const char *auth = MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND,
							       MHD_HTTP_HEADER_AUTHORIZATION);
		struct token t;
		const char *p = auth && strlen(auth) > 7 ? auth + 7 : "";
		while (*p == ' ')
			p++;
		if (token_check(c->h, p, &t, &e) < 0)
			return fail(&e);
		family = t.id;
	}
	if (desktop_mint(c->h->desktop, c->owner, c->arg[0], family, token, sizeof(token),
			 &expires, &e) < 0)
		return fail(&e);
	/* The token rides in the fragment: browsers never send it in a
	 * request line or a Referer. */
	snprintf(url, sizeof(url), "%s/%s/%s/#token=%s", c->h->cfg.desktop_url, c->owner,
		 c->arg[0], token);
	return ok(200, json_pack("{s:s, s:s, s:I}", "url", url, "token", token,
				 "expires", (json_int_t)expires));
}

/* DELETE /v1/machines/NAME/desktop: the machine's viewers are cut (within
 * seconds) and its unredeemed desktop tokens voided. */
static struct reply do_desktop_revoke(struct call *c)
{
	struct err e = { 0 };
	struct machine m;
	int nt = 0, ng = 0;

	if (db_machine_get(c->h->db, c->owner, c->arg[0], &m, &e) < 0)
		return fail(&e);
	desktop_revoke(c->h->desktop, c->owner, c->arg[0], 0, &nt, &ng);
	return ok(200, json_pack("{s:s, s:i, s:i}", "machine", c->arg[0], "tokens", nt,
				 "viewers", ng));
}

static const char *query_arg(struct MHD_Connection *c, const char *key)
{
	const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, key);

	return v && *v ? v : NULL;
}

/* An export streaming: counted in its owner's max_exports until it ends. */
struct export_call {
	struct export *x;
	struct hostd *h;
	char owner[64];
};

static ssize_t export_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct export_call *xc = cls;
	ssize_t n = export_read(xc->x, buf, max);

	(void)pos;
	if (n < 0)
		return MHD_CONTENT_READER_END_WITH_ERROR;
	return n == 0 ? MHD_CONTENT_READER_END_OF_STREAM : n;
}

static void export_free(void *cls)
{
	struct export_call *xc = cls;

	export_end(xc->x);
	quota_end(xc->h, xc->owner, QUOTA_EXPORTS);
	free(xc);
}

/* POST /v1/machines/NAME/exec: the command's NDJSON stream (hostd/exec.h),
 * read while it runs; the client's going ends it. */
struct exec_call {
	struct exec *x;
	struct exec_attach *a;  /* a detached command's reader (X is the pump's) */
	int fd;                 /* the client's connection, watched */
};

static ssize_t exec_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct exec_call *xc = cls;
	ssize_t n = xc->a ? exec_attach_read(xc->a, xc->fd, buf, max)
			  : exec_read(xc->x, xc->fd, buf, max);

	(void)pos;
	if (n > 0)
		return n;
	return n == 0 ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
}

static void exec_done(void *cls)
{
	struct exec_call *xc = cls;

	if (xc->a)
		exec_detach(xc->a);
	else
		exec_release(xc->x);
	free(xc);
}

/* The NDJSON response streaming XC. */
static struct reply exec_response(struct exec_call *xc)
{
	struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 << 10,
								       exec_reader, xc, exec_done);
	if (!resp) {
		exec_done(xc);
		return fail_now(500, "internal", "cannot create the exec response");
	}
	MHD_add_response_header(resp, "Content-Type", "application/x-ndjson");
	MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
	MHD_add_response_header(resp, "Cache-Control", "no-store");
	return (struct reply){ 200, NULL, resp };
}

static struct reply do_exec(struct call *c)
{
	struct err e = { 0 };
	json_t *j = api_parse_body(c->body, exec_fields, &e);
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	struct exec *x;

	if (!j)
		return fail(&e);
	x = exec_start(c->h, c->owner, c->arg[0], j, &e);
	json_decref(j);
	if (!x)
		return fail(&e);
	struct exec_call *xc = calloc(1, sizeof(*xc));
	if (!xc)
		abort();
	*xc = (struct exec_call){ .x = x, .fd = ci ? ci->connect_fd : -1 };
	if (exec_is_detached(x))
		xc->a = exec_first_reader(x);
	return exec_response(xc);
}

/* The id of {id} in an exec route: a positive number, or 0 (E set). */
static int64_t exec_id(const char *s, struct err *e)
{
	char *end;
	long long id = strtoll(s, &end, 10);

	if (end == s || *end || id <= 0) {
		err_set(e, 400, "invalid_id", "invalid command id '%s'", s);
		return 0;
	}
	return id;
}

/* GET /v1/machines/NAME/exec/ID/output: a detached command's stream, from
 * now on (hostd/exec.h exec_attach). */
static struct reply do_exec_output(struct call *c)
{
	struct err e = { 0 };
	int64_t id = exec_id(c->arg[1], &e);
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	struct exec_attach *a;

	if (!id)
		return fail(&e);
	if (!(a = exec_attach(c->h->execs, c->owner, c->arg[0], id, &e)))
		return fail(&e);
	struct exec_call *xc = calloc(1, sizeof(*xc));
	if (!xc)
		abort();
	*xc = (struct exec_call){ .a = a, .fd = ci ? ci->connect_fd : -1 };
	return exec_response(xc);
}

/* POST /v1/machines/NAME/exec/ID/stdin[?eof=1]: the body (bytes) to its
 * stdin; then its EOF with eof=1. */
static struct reply do_exec_stdin(struct call *c)
{
	struct err e = { 0 };
	const char *eof = query_arg(c->conn, "eof");
	int64_t id = exec_id(c->arg[1], &e);
	ssize_t n;

	if (!id)
		return fail(&e);
	if (eof && strcmp(eof, "1") && strcmp(eof, "0") && strcmp(eof, "true") &&
	    strcmp(eof, "false"))
		return fail_now(400, "invalid_query", "eof must be 1 or 0");
	n = exec_stdin(c->h->execs, c->owner, c->arg[0], id, c->body->data, c->body->len,
		       eof && (!strcmp(eof, "1") || !strcmp(eof, "true")), &e);
	if (n < 0)
		return fail(&e);
	if ((size_t)n < c->body->len) {
		struct reply rep = fail_now(503, "stdin_full", "command %lld took %zd of %zu "
					    "bytes in 5 s (it does not read its stdin); send the "
					    "rest again", (long long)id, n, c->body->len);
		json_object_set_new(rep.body, "written", json_integer(n));
		return rep;
	}
	return ok(200, json_pack("{s:I}", "written", (json_int_t)n));
}

/* POST /v1/machines/NAME/exec/ID/signal {"signal": "TERM"}. */
static struct reply do_exec_signal(struct call *c)
{
	static const char *const allowed[] = { "signal", NULL };
	struct err e = { 0 };
	int64_t id = exec_id(c->arg[1], &e);
	json_t *j;
	int sig;

	if (!id)
		return fail(&e);
	j = api_parse_body(c->body, allowed, &e);
	if (!j)
		return fail(&e);
	json_t *s = json_object_get(j, "signal");
	sig = json_is_string(s) ? sshexec_signal_number(json_string_value(s)) : 0;
	if (!sig) {
		json_decref(j);
		return fail_now(400, "invalid_signal", "\"signal\" must name a signal (TERM, KILL, "
				"INT, HUP, USR1...)");
	}
	json_decref(j);
	if (exec_signal(c->h->execs, c->owner, c->arg[0], id, sig, &e) < 0)
		return fail(&e);
	return ok(200, json_pack("{s:I, s:s}", "id", (json_int_t)id, "signal",
				 sshexec_signal_name(sig)));
}

/* POST /v1/machines/NAME/exec/ID/resize {"cols", "rows"}. */
static struct reply do_exec_resize(struct call *c)
{
	static const char *const allowed[] = { "cols", "rows", NULL };
	struct err e = { 0 };
	int64_t id = exec_id(c->arg[1], &e);
	json_int_t cols = 0, rows = 0;
	json_t *j;

	if (!id)
		return fail(&e);
	j = api_parse_body(c->body, allowed, &e);
	if (!j)
		return fail(&e);
	if (json_unpack(j, "{s:I, s:I}", "cols", &cols, "rows", &rows) < 0 || cols < 1 || cols > 1000 ||
	    rows < 1 || rows > 1000) {
		json_decref(j);
		return fail_now(400, "invalid_size", "cols and rows must be numbers (1 to 1000)");
	}
	json_decref(j);
	if (exec_resize(c->h->execs, c->owner, c->arg[0], id, (int)cols, (int)rows, &e) < 0)
		return fail(&e);
	return ok(200, json_pack("{s:I, s:I, s:I}", "id", (json_int_t)id, "cols", cols, "rows",
				 rows));
}

/* GET /v1/machines/NAME/exec: the commands running in it. */
static struct reply do_exec_list(struct call *c)
{
	struct err e = { 0 };
	struct machine m;

	if (db_machine_get(c->h->db, c->owner, c->arg[0], &m, &e) < 0)
		return fail(&e);
	return ok(200, exec_list_json(c->h->execs, c->owner, m.id));
}

/* ---- files (hostd/files.h) ---- */

/* A mode given as octal text ("644", "0755") into *MODE; DEF when absent. */
static int mode_arg(const char *s, unsigned def, unsigned *mode, struct err *e)
{
	char *end;
	unsigned long v;

	*mode = def;
	if (!s)
		return 0;
	v = strtoul(s, &end, 8);
	if (!*s || *end || v > 07777)
		return err_set(e, 400, "invalid_mode", "mode '%s' is not a permission mode (octal, "
			       "0 to 7777)", s);
	*mode = (unsigned)v;
	return 0;
}

static bool flag_arg(struct MHD_Connection *c, const char *key)
{
	const char *v = query_arg(c, key);

	return v && (!strcmp(v, "1") || !strcmp(v, "true"));
}

static ssize_t file_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
	ssize_t n = files_read(cls, buf, max);

	(void)pos;
	if (n > 0)
		return n;
	return n == 0 ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
}

static void file_reader_done(void *cls)
{
	files_read_end(cls);
}

/* GET /v1/machines/NAME/files?path=P: the file's bytes, streamed. */
static struct reply do_file_get(struct call *c)
{
	struct err e = { 0 };
	uint64_t size;
	char len[32];
	struct file_read *r = files_read_begin(c->h, c->owner, c->arg[0],
					       query_arg(c->conn, "path"), &size, &e);

	if (!r)
		return fail(&e);
	struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 << 10,
								       file_reader, r,
								       file_reader_done);
	if (!resp) {
		files_read_end(r);
		return fail_now(500, "internal", "cannot create the file's response");
	}
	snprintf(len, sizeof(len), "%llu", (unsigned long long)size);
	MHD_add_response_header(resp, "Content-Type", "application/octet-stream");
	MHD_add_response_header(resp, "X-Berth-File-Size", len);
	return (struct reply){ 200, NULL, resp };
}

static void file_feed_cb(void *ctx, const void *data, size_t len)
{
	files_write_feed(ctx, data, len);
}

static void file_abort_cb(void *ctx)
{
	files_write_abort(ctx);
}

/* PUT /v1/machines/NAME/files?path=P&mode=644: at the head, the file is
 * opened (a temporary one beside P); the body streams into it. */
static bool file_upload(struct call *c, struct upload *u, struct reply *early)
{
	struct err e = { 0 };
	unsigned mode;
	struct file_write *w = NULL;

	if (mode_arg(query_arg(c->conn, "mode"), 0644, &mode, &e) == 0)
		w = files_write_begin(c->h, c->owner, c->arg[0], query_arg(c->conn, "path"), mode,
				      &e);
	if (!w) {
		*early = fail(&e);
		return false;
	}
	*u = (struct upload){ w, file_feed_cb, file_abort_cb };
	return true;
}

static struct reply do_file_put(struct call *c)
{
	struct err e = { 0 };
	uint64_t size;

	if (files_write_end(c->upload->ctx, &size, &e) < 0)
		return fail(&e);
	return ok(201, json_pack("{s:s, s:I}", "path", query_arg(c->conn, "path"), "size",
				 (json_int_t)size));
}

/* DELETE /v1/machines/NAME/files?path=P[&recursive=1]. */
static struct reply do_file_delete(struct call *c)
{
	struct err e = { 0 };
	int64_t n;

	if (files_remove(c->h, c->owner, c->arg[0], query_arg(c->conn, "path"),
			 flag_arg(c->conn, "recursive"), &n, &e) < 0)
		return fail(&e);
	return ok(200, json_pack("{s:s, s:I}", "deleted", query_arg(c->conn, "path"),
				 "entries", (json_int_t)n));
}

static struct reply do_file_list(struct call *c)
{
	struct err e = { 0 };
	json_t *j = files_list(c->h, c->owner, c->arg[0], query_arg(c->conn, "path"), &e);

	return j ? ok(200, j) : fail(&e);
}

static struct reply do_file_stat(struct call *c)
{
	struct err e = { 0 };
	json_t *j = files_stat(c->h, c->owner, c->arg[0], query_arg(c->conn, "path"), &e);

	return j ? ok(200, j) : fail(&e);
}

/* POST /v1/machines/NAME/files/mkdir {"path", "parents"?, "mode"?}. */
static struct reply do_file_mkdir(struct call *c)
{
	static const char *const allowed[] = { "path", "parents", "mode", NULL };
	struct err e = { 0 };
	json_t *j = api_parse_body(c->body, allowed, &e);
	const char *path = NULL, *mode_s = NULL;
	int parents = 0;
	unsigned mode;
	struct reply rep;

	if (!j)
		return fail(&e);
	if (json_unpack(j, "{s:s, s?b, s?s}", "path", &path, "parents", &parents, "mode",
			&mode_s) < 0) {
		json_decref(j);
		return fail_now(400, "invalid_json", "path must be a string, parents true or false, "
				"mode an octal string (\"755\")");
	}
	if (mode_arg(mode_s, 0755, &mode, &e) < 0 ||
	    files_mkdir(c->h, c->owner, c->arg[0], path, parents, mode, &e) < 0)
		rep = fail(&e);
	else
		rep = ok(201, json_pack("{s:s}", "path", path));
	json_decref(j);
	return rep;
}

/* POST /v1/machines/NAME/files/move {"from", "to"}. */
static struct reply do_file_move(struct call *c)
{
	static const char *const allowed[] = { "from", "to", NULL };
	struct err e = { 0 };
	json_t *j = api_parse_body(c->body, allowed, &e);
	const char *from = NULL, *to = NULL;
	struct reply rep;

	if (!j)
		return fail(&e);
	if (json_unpack(j, "{s:s, s:s}", "from", &from, "to", &to) < 0) {
		json_decref(j);
		return fail_now(400, "invalid_json", "from and to must be strings (paths)");
	}
	if (files_move(c->h, c->owner, c->arg[0], from, to, &e) < 0)
		rep = fail(&e);
	else
		rep = ok(200, json_pack("{s:s, s:s}", "from", from, "to", to));
	json_decref(j);
	return rep;
}

static ssize_t tar_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
	ssize_t n = files_tar_read(cls, buf, max);

	(void)pos;
	if (n > 0)
		return n;
	return n == 0 ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
}

static void tar_reader_done(void *cls)
{
	files_tar_end(cls, NULL);
}

/* GET /v1/machines/NAME/files/tar?path=DIR: the directory as tar. */
static struct reply do_tar_get(struct call *c)
{
	struct err e = { 0 };
	struct file_tar *t = files_tar_read_begin(c->h, c->owner, c->arg[0],
						  query_arg(c->conn, "path"), &e);

	if (!t)
		return fail(&e);
	struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 << 10,
								       tar_reader, t,
								       tar_reader_done);
	if (!resp) {
		files_tar_end(t, NULL);
		return fail_now(500, "internal", "cannot create the tar's response");
	}
	MHD_add_response_header(resp, "Content-Type", "application/x-tar");
	return (struct reply){ 200, NULL, resp };
}

static void tar_feed_cb(void *ctx, const void *data, size_t len)
{
	files_tar_feed(ctx, data, len);
}

static void tar_abort_cb(void *ctx)
{
	files_tar_end(ctx, NULL);
}

static bool tar_upload(struct call *c, struct upload *u, struct reply *early)
{
	struct err e = { 0 };
	struct file_tar *t = files_tar_write_begin(c->h, c->owner, c->arg[0],
						   query_arg(c->conn, "path"), &e);

	if (!t) {
		*early = fail(&e);
		return false;
	}
	*u = (struct upload){ t, tar_feed_cb, tar_abort_cb };
	return true;
}

/* PUT /v1/machines/NAME/files/tar?path=DIR: the body (a tar) unpacked there. */
static struct reply do_tar_put(struct call *c)
{
	struct err e = { 0 };

	if (files_tar_end(c->upload->ctx, &e) < 0)
		return fail(&e);
	return ok(201, json_pack("{s:s}", "path", query_arg(c->conn, "path")));
}

/* GET /v1/machines/NAME/export[?checkpoint=C]: the disk as one zstd frame.
 * A failure half-way ends the chunked body without its last chunk, which
 * a client sees as a truncated transfer. */
static struct reply do_export(struct call *c)
{
	struct err e = { 0 };
	const char *ckpt = query_arg(c->conn, "checkpoint");
	struct export *x;
	char size[32];

	if (ckpt && !name_valid(ckpt))
		return fail_now(400, "invalid_name", "invalid checkpoint name '%s'", ckpt);
	if (quota_begin(c->h, c->owner, QUOTA_EXPORTS, &e) < 0)
		return fail(&e);
	x = export_begin(c->h, c->owner, c->arg[0], ckpt, &e);
	if (!x) {
		quota_end(c->h, c->owner, QUOTA_EXPORTS);
		return fail(&e);
	}
	struct export_call *xc = calloc(1, sizeof(*xc));
	if (!xc)
		abort();
	*xc = (struct export_call){ .x = x, .h = c->h };
	snprintf(xc->owner, sizeof(xc->owner), "%s", c->owner);
	struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 1 << 20,
								       export_reader, xc,
								       export_free);
	if (!resp) {
		export_free(xc);
		return fail_now(500, "internal", "cannot create the export response");
	}
	snprintf(size, sizeof(size), "%llu", (unsigned long long)export_size(x));
	MHD_add_response_header(resp, "Content-Type", "application/zstd");
	MHD_add_response_header(resp, "X-Berth-Disk-Size", size);
	return (struct reply){ 200, NULL, resp };
}

static struct reply do_checkpoint(struct call *c)
{
	static const char *const allowed[] = { "name", "memory", NULL };
	struct err e = { 0 };
	struct checkpoint ck;
	const char *ckpt = NULL;
	int memory = 0;
	json_t *j = api_parse_body(c->body, allowed, &e);
	struct reply rep;

	if (!j)
		return fail(&e);
	if (json_unpack(j, "{s?s, s?b}", "name", &ckpt, "memory", &memory) < 0) {
		json_decref(j);
		return fail_now(400, "invalid_json", "name must be a string, memory true or false");
	}
	int64_t t0 = mono_us();
	if (checkpoint_create(c->h, c->owner, c->arg[0], ckpt, memory, &ck, &e) < 0) {
		rep = fail(&e);
	} else {
		rep = ok(201, checkpoint_json(&ck));
		json_object_set_new(rep.body, "took_ms", json_real((double)(mono_us() - t0) / 1000.0));
	}
	json_decref(j);
	return rep;
}

static struct reply do_checkpoints(struct call *c)
{
	struct err e = { 0 };
	json_t *l = checkpoint_list_json(c->h, c->owner, c->arg[0], &e);

	return l ? ok(200, l) : fail(&e);
}

static struct reply do_checkpoint_delete(struct call *c)
{
	struct err e = { 0 };

	if (checkpoint_delete(c->h, c->owner, c->arg[0], c->arg[1], &e) < 0)
		return fail(&e);
	return ok(200, json_pack("{s:s}", "deleted", c->arg[1]));
}

static struct reply do_restore(struct call *c)
{
	static const char *const allowed[] = { "checkpoint", "wait", NULL };
	struct err e = { 0 };
	struct machine m;
	const char *ckpt = NULL;
	int wait = 0;
	json_t *j = api_parse_body(c->body, allowed, &e);
	struct reply rep;

	if (!j)
		return fail(&e);
	if (json_unpack(j, "{s:s, s?b}", "checkpoint", &ckpt, "wait", &wait) < 0) {
		json_decref(j);
		return fail_now(400, "invalid_json", "checkpoint (a string) is required");
	}
	if (checkpoint_restore(c->h, c->owner, c->arg[0], ckpt, wait, &m, &e) < 0)
		rep = fail(&e);
	else
		rep = machine_reply(c, 200, &m, -1);
	json_decref(j);
	return rep;
}

static struct reply do_fork(struct call *c)
{
	static const char *const allowed[] = { "name", "from", "live", "start", "wait", NULL };
	struct err e = { 0 };
	struct machine m;
	struct fork_req r = { .owner = c->owner, .name = c->arg[0] };
	int start = 0, wait = 0, live = 0;
	json_t *j = api_parse_body(c->body, allowed, &e);
	struct reply rep;

	if (!j)
		return fail(&e);
	if (json_unpack(j, "{s:s, s?s, s?b, s?b, s?b}", "name", &r.new_name, "from", &r.from,
			"live", &live, "start", &start, "wait", &wait) < 0) {
		json_decref(j);
		return fail_now(400, "invalid_json", "name (a string) is required; from is a "
				"string, start and wait are true or false");
	}
	r.live = live;
	r.start = start;
	r.wait = wait;
	int64_t t0 = mono_us();
	if (checkpoint_fork(c->h, &r, &m, &e) < 0) {
		rep = fail(&e);
	} else {
		rep = machine_reply(c, 201, &m, -1);
		json_object_set_new(rep.body, "took_ms", json_real((double)(mono_us() - t0) / 1000.0));
	}
	json_decref(j);
	return rep;
}

static struct reply do_images(struct call *c)
{
	struct image *imgs;
	size_t n;
	struct err e = { 0 };
	json_t *arr;

	if (db_image_list(c->h->db, &imgs, &n, &e) < 0)
		return fail(&e);
	arr = json_array();
	for (size_t i = 0; i < n; i++)
		if (image_visible(&imgs[i], c->owner))
			json_array_append_new(arr, image_json(c->h, &imgs[i]));
	free(imgs);
	return ok(200, json_pack("{s:o}", "images", arr));
}

/* Image ARG of the call as the caller may see it: another user's private
 * image is 404 like a missing one. */
static int visible_image(struct call *c, struct image *img, struct err *e)
{
	if (db_image_get(c->h->db, c->arg[0], img, e) < 0)
		return -1;
	if (!image_visible(img, c->owner))
		return err_set(e, 404, "not_found", "no image %s", c->arg[0]);
	return 0;
}

static struct reply do_image_show(struct call *c)
{
	struct err e = { 0 };
	struct image img;

	if (visible_image(c, &img, &e) < 0)
		return fail(&e);
	return ok(200, image_json(c->h, &img));
}

/* PATCH /v1/images/NAME {"public"}: root publishes an image made from a
 * user's machine (or takes it back). */
static struct reply do_image_patch(struct call *c)
{
	static const char *const allowed[] = { "public", NULL };
	struct err e = { 0 };
	struct image img;
	json_t *j = api_parse_body(c->body, allowed, &e), *v;
	bool pub;

	if (!j)
		return fail(&e);
	v = json_object_get(j, "public");
	pub = json_is_true(v);
	json_decref(j);
	if (!json_is_boolean(v))
		return fail_now(400, "invalid_json", "public (true or false) is required");
	if (db_image_get(c->h->db, c->arg[0], &img, &e) < 0 ||
	    db_image_set_public(c->h->db, c->arg[0], pub, &e) < 0)
		return fail(&e);
	log_info("image %s is %s", img.name, pub ? "public" : "private to its owner");
	img.public_ = pub;
	return ok(200, image_json(c->h, &img));
}

/* POST /v1/machines/NAME/image {"name", "checkpoint"?}: an image of the
 * machine's disk, private to its owner. */
static struct reply do_machine_image(struct call *c)
{
	static const char *const allowed[] = { "name", "checkpoint", NULL };
	struct err e = { 0 };
	struct image img;
	const char *name = NULL, *ckpt = NULL;
	json_t *j = api_parse_body(c->body, allowed, &e);
	struct reply rep;

	if (!j)
		return fail(&e);
	if (json_unpack(j, "{s:s, s?s}", "name", &name, "checkpoint", &ckpt) < 0) {
		json_decref(j);
		return fail_now(400, "invalid_json", "name (a string: the image's) is required; "
				"checkpoint, when given, a string");
	}
	if (checkpoint_image(c->h, c->owner, c->arg[0], name, ckpt, &img, &e) < 0)
		rep = fail(&e);
	else
		rep = ok(201, image_json(c->h, &img));
	json_decref(j);
	return rep;
}

static struct reply do_image_build(struct call *c)
{
	static const char *const allowed[] = { "recipe", "name", NULL };
	struct err e = { 0 };
	struct image img;
	const char *recipe = NULL, *name = NULL;
	json_t *j;
	struct reply rep;

	j = api_parse_body(c->body, allowed, &e);
	if (!j)
		return fail(&e);
	if (json_unpack(j, "{s:s, s?s}", "recipe", &recipe, "name", &name) < 0) {
		json_decref(j);
		return fail_now(400, "invalid_json", "recipe (a string) is required");
	}
	if (image_build(c->h, recipe, name ? name : recipe, &img, &e) < 0)
		rep = fail(&e);
	else
		rep = ok(201, image_json(c->h, &img));
	json_decref(j);
	return rep;
}

static void import_feed_cb(void *ctx, const void *data, size_t len)
{
	import_feed(ctx, data, len);
}

static void import_abort_cb(void *ctx)
{
	import_abort(ctx);
}

/* PUT /v1/images/NAME?sha256=&format=&like=&user=&origin=: the body is the
 * image file.  Boot settings come from the image LIKE (its kernel, initrd,
 * command line and user), else the disk boots by its own boot loader.
 * Called when the head arrived: false with *EARLY set when refused. */
static bool image_upload(struct call *call, struct upload *u, struct reply *early)
{
	struct hostd *h = call->h;
	struct MHD_Connection *c = call->conn;
	const char *name = call->arg[0];
	struct import_opts o = { .name = name, .boot = "firmware", .user = "root" };
	struct image like;
	struct err e = { 0 };
	const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
						     MHD_HTTP_HEADER_CONTENT_LENGTH);
	struct import *im;

	o.sha256 = query_arg(c, "sha256");
	o.format = query_arg(c, "format");
	o.origin = query_arg(c, "origin");
	o.length = cl ? strtoull(cl, NULL, 10) : 0;
	const char *like_name = query_arg(c, "like");
	if (like_name) {
		if (db_image_get(h->db, like_name, &like, &e) < 0) {
			*early = fail(&e);
			return NULL;
		}
		o.boot = like.boot;
		o.kernel = like.kernel;
		o.initrd = like.initrd;
		o.cmdline = like.cmdline;
		o.user = like.user;
	}
	if (query_arg(c, "user"))
		o.user = query_arg(c, "user");
	im = import_begin(h, &o, &e);
	if (!im) {
		*early = fail(&e);
		return false;
	}
	*u = (struct upload){ im, import_feed_cb, import_abort_cb };
	return true;
}

/* The end of PUT /v1/images/NAME: the whole body was fed to the import. */
static struct reply do_image_put(struct call *c)
{
	struct image img;
	struct err e = { 0 };

	if (import_end(c->upload->ctx, &img, &e) < 0)
		return fail(&e);
	return ok(201, image_json(c->h, &img));
}

/* DELETE /v1/images/NAME: root any image, a user their own. */
static struct reply do_image_delete(struct call *c)
{
	struct err e = { 0 };
	struct image img;

	if (c->who != CALLER_ROOT || strcmp(c->owner, "root") != 0) {
		if (visible_image(c, &img, &e) < 0)
			return fail(&e);
		if (strcmp(img.owner, c->owner) != 0)
			return fail_now(403, "forbidden", "image %s is root's: only root may delete "
					"it", img.name);
	}
	if (image_delete(c->h, c->arg[0], &e) < 0)
		return fail(&e);
	return ok(200, json_pack("{s:s}", "deleted", c->arg[0]));
}

/* ---- templates (hostd/template.h) ---- */

static struct reply do_templates(struct call *c)
{
	struct template *ts;
	size_t n;
	struct err e = { 0 };
	json_t *arr;

	if (db_template_list(c->h->db, &ts, &n, &e) < 0)
		return fail(&e);
	arr = json_array();
	for (size_t i = 0; i < n; i++)
		if (template_visible(&ts[i], c->owner))
			json_array_append_new(arr, template_json(&ts[i]));
	free(ts);
	return ok(200, json_pack("{s:o}", "templates", arr));
}

static struct reply do_template_show(struct call *c)
{
	struct err e = { 0 };
	struct template t;

	if (db_template_get(c->h->db, c->arg[0], &t, &e) < 0) {
		/* One being built answers with its stage. */
		json_t *b = e.status == 404 ? template_building_json(c->arg[0], c->owner) : NULL;
		return b ? ok(200, b) : fail(&e);
	}
	if (!template_visible(&t, c->owner))
		return fail_now(404, "no_template", "no template %s", c->arg[0]);
	return ok(200, template_json(&t));
}

/* POST /v1/templates {"name", "image", "run"?, "vcpus"?, "memory"?, "disk"?,
 * "public"?}: boots, runs the setup, saves; the answer has the setup's
 * output. */
static struct reply do_template_create(struct call *c)
{
	static const char *const allowed[] = { "name", "image", "run", "vcpus", "memory",
					       "disk", "public", "timeout", NULL };
	struct err e = { 0 };
	struct template t;
	struct template_req r = { .owner = c->owner, .image = "tiny", .vcpus = 1,
				  .memory = 512ULL << 20, .timeout_s = 1800 };
	struct buf output = BUF_INIT;
	json_t *j = api_parse_body(c->body, allowed, &e), *v;
	uint64_t mem = 0;
	int64_t t0 = mono_ms();
	struct reply rep;

	if (!j)
		return fail(&e);
	v = json_object_get(j, "name");
	if (!v || !json_is_string(v)) {
		err_set(&e, 400, "invalid_name", "name is required (a string)");
		goto out;
	}
	r.name = json_string_value(v);
	v = json_object_get(j, "image");
	if (v && !json_is_string(v)) {
		err_set(&e, 400, "invalid_image", "image must be a string");
		goto out;
	}
	if (v)
		r.image = json_string_value(v);
	v = json_object_get(j, "run");
	if (v && !json_is_string(v)) {
		err_set(&e, 400, "invalid_setup", "run must be a string (a shell line)");
		goto out;
	}
	if (v)
		r.setup = json_string_value(v);
	if (get_int(j, "vcpus", 1, 1 << 20, &r.vcpus, &e) < 0 ||
	    api_get_size(j, "memory", 1ULL << 20, &mem, &e) < 0 ||
	    api_get_size(j, "disk", 1, &r.disk, &e) < 0 || get_bool(j, "public", &r.public_, &e) < 0 ||
	    get_int(j, "timeout", 1, 7 * 86400, &r.timeout_s, &e) < 0)
		goto out;
	if (mem)
		r.memory = mem;
	if (r.public_ && strcmp(c->owner, "root") != 0) {
		err_set(&e, 403, "forbidden", "only root may make a public template");
		goto out;
	}
	template_create(c->h, &r, &t, &output, &e);
out:
	json_decref(j);
	if (err_isset(&e)) {
		rep = fail(&e);
		/* What the setup wrote helps most when it failed. */
		if (rep.body && output.len)
			json_object_set_new(rep.body, "output", json_stringn(output.data, output.len));
		buf_free(&output);
		return rep;
	}
	rep = ok(201, template_json(&t));
	json_object_set_new(rep.body, "output", json_stringn(output.len ? output.data : "",
							     output.len));
	json_object_set_new(rep.body, "took_ms", json_integer(mono_ms() - t0));
	buf_free(&output);
	return rep;
}

static struct reply do_template_delete(struct call *c)
{
	struct err e = { 0 };

	if (template_delete(c->h, c->owner, c->arg[0], &e) < 0)
		return fail(&e);
	return ok(200, json_pack("{s:s}", "deleted", c->arg[0]));
}

static void ledger_row(const char *id, const char *owner, const char *name,
		       enum mstate state, int64_t start, int64_t end, void *data)
{
	json_array_append_new(data, json_pack("{s:s, s:s, s:s, s:s, s:I, s:o}",
		"machine_id", id, "owner", owner, "name", name, "state", mstate_name(state),
		"start", (json_int_t)start, "end", end ? json_integer(end) : json_null()));
}

static struct reply do_ledger(struct call *c)
{
	struct err e = { 0 };
	json_t *all = json_array(), *mine = json_array();
	size_t i;
	json_t *row;

	if (db_ledger_walk(c->h->db, NULL, ledger_row, all, &e) < 0) {
		json_decref(all);
		json_decref(mine);
		return fail(&e);
	}
	json_array_foreach(all, i, row)
		if (strcmp(json_string_value(json_object_get(row, "owner")), c->owner) == 0)
			json_array_append(mine, row);
	json_decref(all);
	return ok(200, json_pack("{s:o}", "ledger", mine));
}

/* A follower of the events (GET /v1/events?follow=1): server-sent events,
 * one an event ("id: N", "event: KIND", "data: JSON"), a comment line
 * now and then while there are none. */
struct events_call {
	struct hostd *h;
	char owner[64];         /* "" for root's view of everyone's */
	char machine[64];       /* "" for every machine */
	int64_t after;          /* the last event sent */
	int64_t seen;           /* events_last() when last asked */
	int64_t said_ms;        /* when something was last sent */
	int fd;                 /* the client's connection, watched */
	struct buf out;
	size_t off;
};

static ssize_t events_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct events_call *ec = cls;
	int64_t keepalive_ms = (int64_t)ec->h->cfg.api_send_timeout_s * 1000 / 2;

	(void)pos;
	if (keepalive_ms > 15000)
		keepalive_ms = 15000;
	while (ec->off == ec->out.len) {
		struct db_event *evs = NULL;
		struct err e = { 0 };
		size_t n = 0;

		buf_free(&ec->out);
		ec->off = 0;
		if (db_event_list(ec->h->db, ec->owner[0] ? ec->owner : NULL,
				  ec->machine[0] ? ec->machine : NULL, ec->after, true, 100, &evs,
				  &n, &e) < 0) {
			log_warn("events stream: %s", e.msg);
			return MHD_CONTENT_READER_END_WITH_ERROR;
		}
		for (size_t i = 0; i < n; i++) {
			json_t *j = events_json(&evs[i]);
			char *text = json_dumps(j, JSON_COMPACT);
			buf_printf(&ec->out, "id: %lld\nevent: %s\ndata: %s\n\n",
				   (long long)evs[i].id, evs[i].kind, text);
			free(text);
			json_decref(j);
			ec->after = evs[i].id;
		}
		free(evs);
		int64_t now = mono_ms();
		if (ec->out.len == 0 && now - ec->said_ms >= keepalive_ms)
			buf_adds(&ec->out, ": keepalive\n\n");
		if (ec->out.len > 0) {
			ec->said_ms = now;
			break;
		}
		ec->seen = events_wait(ec->seen, 500);
		if (ec->seen < 0)
			return MHD_CONTENT_READER_END_OF_STREAM;	/* hostd stops */
		struct pollfd p = { .fd = ec->fd, .events = POLLRDHUP };
		if (ec->fd >= 0 && poll(&p, 1, 0) > 0 &&
		    (p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
			return MHD_CONTENT_READER_END_WITH_ERROR;	/* the client went */
	}
	size_t k = ec->out.len - ec->off < max ? ec->out.len - ec->off : max;
	memcpy(buf, ec->out.data + ec->off, k);
	ec->off += k;
	return (ssize_t)k;
}

static void events_done(void *cls)
{
	struct events_call *ec = cls;

	buf_free(&ec->out);
	free(ec);
}

/* C's events as they come, those after AFTER first (-1: only new ones;
 * a Last-Event-ID header says where a reconnecting client was). */
static struct reply events_follow(struct call *c, const char *machine, int64_t after)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	const char *last = MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND,
						       "Last-Event-ID");
	struct events_call *ec = calloc(1, sizeof(*ec));
	struct db_event *evs = NULL;
	struct err e = { 0 };
	size_t n = 0;

	if (!ec)
		abort();
	if (last) {
		char *end;
		long long v = strtoll(last, &end, 10);
		if (end == last || *end || v < 0) {
			free(ec);
			return fail_now(400, "invalid_header", "Last-Event-ID must be an event's id");
		}
		after = v;
	}
	*ec = (struct events_call){ .h = c->h, .fd = ci ? ci->connect_fd : -1,
				    .seen = events_last(), .said_ms = mono_ms(), .out = BUF_INIT };
	snprintf(ec->owner, sizeof(ec->owner), "%s", c->route->query_all ? "" : c->owner);
	snprintf(ec->machine, sizeof(ec->machine), "%s", machine ? machine : "");
	if (after < 0) {
		/* Only what comes: start after the newest there is. */
		if (db_event_list(c->h->db, ec->owner[0] ? ec->owner : NULL, machine, 0, false, 1,
				  &evs, &n, &e) < 0) {
			free(ec);
			return fail(&e);
		}
		after = n ? evs[0].id : 0;
		free(evs);
	}
	ec->after = after;
	/* The head goes at once: a comment says the stream is open. */
	buf_adds(&ec->out, ": berth events\n\n");
	struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 << 10,
								       events_reader, ec, events_done);
	if (!resp) {
		events_done(ec);
		return fail_now(500, "internal", "cannot create the events stream");
	}
	MHD_add_response_header(resp, "Content-Type", "text/event-stream");
	MHD_add_response_header(resp, "Cache-Control", "no-store");
	MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
	return (struct reply){ 200, NULL, resp };
}

/* GET /v1/events[?machine=NAME][&after=ID][&limit=N]: the caller's
 * lifecycle events (hostd/events.h), oldest first: the first LIMIT (100,
 * at most 10000) after id AFTER, or without it the newest LIMIT; with
 * ?all=1, root's view of everyone's. */
static struct reply do_events(struct call *c)
{
	const char *machine = query_arg(c->conn, "machine");
	const char *after_s = query_arg(c->conn, "after");
	const char *limit_s = query_arg(c->conn, "limit");
	const char *follow = query_arg(c->conn, "follow");
	struct db_event *evs = NULL;
	long long after = 0, limit = 100;
	struct err e = { 0 };
	size_t n = 0;
	char *end;
	json_t *arr;

	if (machine && !name_valid(machine))
		return fail_now(400, "invalid_name", "machine must be a machine's name");
	if (after_s) {
		after = strtoll(after_s, &end, 10);
		if (end == after_s || *end || after < 0)
			return fail_now(400, "invalid_query", "after must be an event's id (0 or more)");
	}
	if (limit_s) {
		limit = strtoll(limit_s, &end, 10);
		if (end == limit_s || *end || limit < 1 || limit > EVENTS_KEEP)
			return fail_now(400, "invalid_query", "limit must be 1 to %d", EVENTS_KEEP);
	}
	if (follow && strcmp(follow, "1") && strcmp(follow, "0"))
		return fail_now(400, "invalid_query", "follow must be 1 or 0");
	if (follow && !strcmp(follow, "1"))
		return events_follow(c, machine, after_s ? after : -1);
	/* With after: the next page after it; without: the newest. */
	if (db_event_list(c->h->db, c->route->query_all ? NULL : c->owner, machine, after,
			  after_s != NULL, (int)limit, &evs, &n, &e) < 0)
		return fail(&e);
	arr = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, events_json(&evs[i]));
	free(evs);
	return ok(200, json_pack("{s:o}", "events", arr));
}

/* GET /metrics: Prometheus text. */
static struct reply do_metrics(struct call *c)
{
	struct buf out = BUF_INIT;
	struct err e = { 0 };

	if (prom_text(c->h, &out, &e) < 0) {
		buf_free(&out);
		return fail(&e);
	}
	struct MHD_Response *resp = MHD_create_response_from_buffer(out.len, out.data,
								     MHD_RESPMEM_MUST_FREE);
	MHD_add_response_header(resp, "Content-Type", "text/plain; version=0.0.4");
	return (struct reply){ 200, NULL, resp };
}

int api_usage_range(const char *since_s, const char *step_s, int64_t now, int64_t *since,
		    int64_t *step, struct err *e)
{
	char *end = NULL;

	*since = *step = 0;
	if (since_s) {
		errno = 0;
		*since = strtoll(since_s, &end, 10);
		if (errno || *end || *since < 0 || *since > now)
			return err_set(e, 400, "invalid_since",
				       "since '%s' is not a time in seconds since the epoch, "
				       "not in the future", since_s);
	}
	/* step=S: the cost per S-second bucket too (the dashboard's chart). */
	if (step_s) {
		errno = 0;
		*step = strtoll(step_s, &end, 10);
		if (errno || *end || *step < 60 || *step > 31 * 86400 ||
		    (now - *since) / *step >= 1000)
			return err_set(e, 400, "invalid_step", "step '%s' is not a number of "
				       "seconds from 60 to 2678400 giving at most 1000 buckets "
				       "since %lld", step_s, (long long)*since);
	}
	return 0;
}

/* GET /v1/usage?since=EPOCH[&all=1][&step=S]: the caller's usage (the
 * all=1 row: every user's). */
static struct reply do_usage(struct call *c)
{
	struct err e = { 0 };
	const char *since_s = query_arg(c->conn, "since");
	const char *all = query_arg(c->conn, "all");
	const char *step_s = query_arg(c->conn, "step");
	int64_t now = now_s(), since = 0, step = 0;

	if (api_usage_range(since_s, step_s, now, &since, &step, &e) < 0)
		return fail(&e);
	json_t *j = usage_json_series(c->h, all && strcmp(all, "1") == 0 ? NULL : c->owner,
				      since, now, step, &e);
	return j ? ok(200, j) : fail(&e);
}

/* A positive integer id from a path segment (keys, sessions); -1 when S
 * is not one. */
static int64_t parse_id(const char *s)
{
	char *end;
	long long v;

	if (*s < '1' || *s > '9')
		return -1;
	errno = 0;
	v = strtoll(s, &end, 10);
	return errno || *end ? -1 : (int64_t)v;
}

static struct reply do_keys(struct call *c)
{
	struct userkey *ks;
	size_t n;
	struct err e = { 0 };
	json_t *arr;

	if (db_key_list(c->h->db, c->owner, &ks, &n, &e) < 0)
		return fail(&e);
	arr = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, userkey_json(&ks[i]));
	free(ks);
	return ok(200, json_pack("{s:o}", "keys", arr));
}

/* BODY, whose fields are among ALLOWED, and its "key" field: a string
 * without NUL bytes, into *LINE (owned by *J, which the caller decrefs). */
static int get_key_line(const struct buf *body, const char *const *allowed, json_t **j,
			const char **line, struct err *e)
{
	json_t *v;

	*j = api_parse_body(body, allowed, e);
	if (!*j)
		return -1;
	v = json_object_get(*j, "key");
	if (!json_is_string(v))
		return err_set(e, 400, "invalid_key", "key is required: a public key line, "
			       "'TYPE BASE64 [COMMENT]'");
	*line = json_string_value(v);
	if (strlen(*line) != json_string_length(v))
		return err_set(e, 400, "invalid_key", "the key line has a NUL byte");
	return 0;
}

/* POST /v1/keys/challenge {"key"}: what berth key add signs with that
 * key to prove that the caller holds it (hostd/keyproof.h).  An invalid
 * key is refused here, before anyone is asked for a passphrase. */
static struct reply do_key_challenge(struct call *c)
{
	static const char *const allowed[] = { "key", NULL };
	struct err e = { 0 };
	struct userkey k;
	char text[KEYPROOF_CHALLENGE_MAX];
	const char *line = NULL;
	json_t *j = NULL;

	if (get_key_line(c->body, allowed, &j, &line, &e) == 0 &&
	    userkey_parse(line, &k, &e) == 0)
		keyproof_challenge(c->h->keyproof, c->owner, &k, text, sizeof(text), &e);
	json_decref(j);
	if (err_isset(&e))
		return fail(&e);
	return ok(201, json_pack("{s:s, s:s, s:s, s:i}", "challenge", text, "namespace",
				 KEYPROOF_NAMESPACE, "fingerprint", k.fingerprint, "expires_in",
				 KEYPROOF_TTL_S));
}

/* A string field NAME of J (NULL when absent): 400 CODE when it is not a
 * string or has a NUL byte. */
static int get_proof_field(json_t *j, const char *name, const char **out, struct err *e)
{
	json_t *v = json_object_get(j, name);

	*out = json_string_value(v);
	if (!*out || strlen(*out) != json_string_length(v))
		return err_set(e, 400, "proof_required", "%s is required: berth key add asks "
			       "hostd for a challenge (POST /v1/keys/challenge) and signs it with "
			       "ssh-keygen -Y sign -n %s", name, KEYPROOF_NAMESPACE);
	return 0;
}

/* POST /v1/keys {"key", "challenge", "signature"}: a key whose holder
 * signed a challenge of the caller's.  A key registered by the caller
 * already is 409; one registered by anyone else gets the same answer as a
 * signature that proves nothing. */
static struct reply do_key_add(struct call *c)
{
	static const char *const allowed[] = { "key", "challenge", "signature", NULL };
	struct err e = { 0 };
	struct userkey k, other;
	const char *line = NULL, *challenge = NULL, *signature = NULL;
	json_t *j = NULL;

	if (get_key_line(c->body, allowed, &j, &line, &e) == 0 &&
	    userkey_parse(line, &k, &e) == 0 &&
	    get_proof_field(j, "challenge", &challenge, &e) == 0 &&
	    get_proof_field(j, "signature", &signature, &e) == 0 &&
	    keyproof_check(c->h->keyproof, c->owner, challenge, &k, signature, &e) == 0) {
		snprintf(k.owner, sizeof(k.owner), "%s", c->owner);
		if (db_key_insert(c->h->db, &k, &e) == 0) {
			log_info("key %lld of %s added: %s %s", (long long)k.id, c->owner, k.type,
				 k.fingerprint);
		} else if (e.status == 409) {
			err_clear(&e);
			if (db_key_find(c->h->db, k.type, k.blob, &other, &e) == 0 &&
			    strcmp(other.owner, c->owner) != 0) {
				log_info("key %s: %s proved to hold it, but %s registered it",
					 k.fingerprint, c->owner, other.owner);
				err_clear(&e);
				keyproof_refuse(&k, &e);
			} else if (!err_isset(&e)) {
				err_set(&e, 409, "key_exists", "you registered key %s already (id %lld)",
					k.fingerprint, (long long)other.id);
			}
		}
	}
	json_decref(j);
	if (err_isset(&e))
		return fail(&e);
	return ok(201, userkey_json(&k));
}

static struct reply do_key_delete(struct call *c)
{
	struct err e = { 0 };
	int64_t id = parse_id(c->arg[0]);

	if (id < 0)
		return fail_now(400, "invalid_id", "invalid key id '%.40s': a positive integer "
				"(berth key ls shows them)", c->arg[0]);
	if (db_key_delete(c->h->db, c->owner, id, &e) < 0)
		return fail(&e);
	log_info("key %lld of %s removed", (long long)id, c->owner);
	return ok(200, json_pack("{s:I}", "deleted", (json_int_t)id));
}

static struct reply do_tokens(struct call *c)
{
	struct token *ts;
	size_t n;
	struct err e = { 0 };
	json_t *arr;

	if (db_token_list(c->h->db, c->owner, &ts, &n, &e) < 0)
		return fail(&e);
	arr = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, token_json(&ts[i]));
	free(ts);
	return ok(200, json_pack("{s:o}", "tokens", arr));
}

/* POST /v1/tokens {"name"}: the secret is in this answer and nowhere
 * else. */
static struct reply do_token_create(struct call *c)
{
	static const char *const allowed[] = { "name", NULL };
	struct err e = { 0 };
	struct token t;
	char secret[TOKEN_SECRET_LEN + 1];
	json_t *j = api_parse_body(c->body, allowed, &e), *v;
	struct reply rep;

	if (!j)
		return fail(&e);
	v = json_object_get(j, "name");
	if (v && !json_is_string(v)) {
		json_decref(j);
		return fail_now(400, "invalid_token_name", "name must be a string");
	}
	if (token_create(c->h, c->owner, v ? json_string_value(v) : NULL, &t, secret,
			 sizeof(secret), &e) < 0) {
		rep = fail(&e);
	} else {
		rep = ok(201, token_json(&t));
		json_object_set_new(rep.body, "token", json_string(secret));
	}
	memset(secret, 0, sizeof(secret));
	json_decref(j);
	return rep;
}

static struct reply do_token_delete(struct call *c)
{
	struct err e = { 0 };
	int64_t id = parse_id(c->arg[0]);

	if (id < 0)
		return fail_now(400, "invalid_id", "invalid token id '%.40s': a positive integer "
				"(berth token ls shows them)", c->arg[0]);
	if (db_token_delete(c->h->db, c->owner, id, &e) < 0)
		return fail(&e);
	log_info("token %lld of %s revoked", (long long)id, c->owner);
	/* And the desktop URLs it minted, and the viewers they let in. */
	desktop_revoke(c->h->desktop, c->owner, NULL, id, NULL, NULL);
	return ok(200, json_pack("{s:I}", "deleted", (json_int_t)id));
}

/* ---- lifecycle-event webhooks (hostd/webhooks.h): each caller's own ---- */

static struct reply do_webhooks(struct call *c)
{
	struct err e = { 0 };
	json_t *r = webhook_list(c->h, c->owner, &e);

	return r ? ok(200, r) : fail(&e);
}

/* POST /v1/webhooks {"url", "events"?, "machine"?}: the secret is in this
 * answer only. */
static struct reply do_webhook_add(struct call *c)
{
	static const char *const allowed[] = { "url", "events", "machine", NULL };
	struct err e = { 0 };
	json_t *j = api_parse_body(c->body, allowed, &e), *r = NULL;

	if (j)
		r = webhook_create(c->h, c->owner, j, &e);
	json_decref(j);
	return r ? ok(201, r) : fail(&e);
}

static struct reply do_webhook_delete(struct call *c)
{
	struct err e = { 0 };
	int64_t id = parse_id(c->arg[0]);

	if (id < 0)
		return fail_now(400, "invalid_id", "invalid webhook id '%.40s': a positive integer "
				"(berth webhook ls shows them)", c->arg[0]);
	if (webhook_delete(c->h, c->owner, id, &e) < 0)
		return fail(&e);
	return ok(200, json_pack("{s:I}", "deleted", (json_int_t)id));
}

/* GET /v1/webhooks/ID/deliveries?limit=N: its delivery log. */
static struct reply do_webhook_deliveries(struct call *c)
{
	struct err e = { 0 };
	int64_t id = parse_id(c->arg[0]);
	const char *limit_s = query_arg(c->conn, "limit");
	char *end = NULL;
	long limit = limit_s ? strtol(limit_s, &end, 10) : 50;
	json_t *r;

	if (id < 0)
		return fail_now(400, "invalid_id", "invalid webhook id '%.40s': a positive integer "
				"(berth webhook ls shows them)", c->arg[0]);
	if ((limit_s && *end) || limit < 1 || limit > WEBHOOK_LOG_KEEP + WEBHOOK_PENDING_MAX)
		return fail_now(400, "invalid_query", "limit must be 1 to %d",
				WEBHOOK_LOG_KEEP + WEBHOOK_PENDING_MAX);
	r = webhook_deliveries(c->h, c->owner, id, (int)limit, &e);
	return r ? ok(200, r) : fail(&e);
}

/* ---- the credential broker's secrets (hostd/secrets.h) ---- */

/* POST /v1/secrets: the caller's new secret (never answered back). */
static struct reply do_secret_add(struct call *c)
{
	static const char *const allowed[] = { "name", "url", "headers", NULL };
	struct err e = { 0 };
	json_t *j = api_parse_body(c->body, allowed, &e), *r = NULL;

	if (j)
		r = secrets_add(c->h, c->owner, j, &e);
	json_decref(j);
	return r ? ok(201, r) : fail(&e);
}

static struct reply do_secrets(struct call *c)
{
	struct err e = { 0 };
	json_t *r = secrets_list(c->h, c->owner, &e);

	return r ? ok(200, r) : fail(&e);
}

static struct reply do_secret_delete(struct call *c)
{
	struct err e = { 0 };

	if (secrets_remove(c->h, c->owner, c->arg[0], &e) < 0)
		return fail(&e);
	return ok(200, json_pack("{s:s}", "deleted", c->arg[0]));
}

/* GET /v1/secrets/log?secret=S&machine=M&limit=N: the calls made. */
static struct reply do_secret_log(struct call *c)
{
	struct err e = { 0 };
	const char *limit_s = query_arg(c->conn, "limit");
	char *end = NULL;
	long limit = limit_s ? strtol(limit_s, &end, 10) : 100;
	json_t *r;

	if ((limit_s && *end) || limit < 1 || limit > SECRETS_LOG_KEEP)
		return fail_now(400, "invalid_limit", "limit must be 1 to %d", SECRETS_LOG_KEEP);
	r = secrets_log(c->h, c->owner, query_arg(c->conn, "secret"),
			query_arg(c->conn, "machine"), (int)limit, &e);
	return r ? ok(200, r) : fail(&e);
}

/* PUT /v1/machines/NAME/previews/PORT {"public": BOOL}: make or change the
 * preview; a private one's answer carries a one-time link (hostd/preview.h). */
static struct reply do_preview_put(struct call *c)
{
	static const char *const allowed[] = { "public", NULL };
	struct err e = { 0 };
	json_t *j = api_parse_body(c->body, allowed, &e), *r = NULL, *pub;
	int port;

	if (j && preview_port_parse(c->arg[1], &port, &e) == 0) {
		pub = json_object_get(j, "public");
		if (pub && !json_is_boolean(pub))
			err_set(&e, 400, "invalid_public", "public is true or false");
		else
			r = preview_put(c->h, c->owner, c->arg[0], port, json_is_true(pub), &e);
	}
	json_decref(j);
	return r ? ok(200, r) : fail(&e);
}

static struct reply do_preview_delete(struct call *c)
{
	struct err e = { 0 };
	int port;

	if (preview_port_parse(c->arg[1], &port, &e) < 0 ||
	    preview_remove(c->h, c->owner, c->arg[0], port, &e) < 0)
		return fail(&e);
	return ok(200, json_pack("{s:s, s:i}", "deleted", c->arg[0], "port", port));
}

/* GET /v1/previews: the caller's; with ?all=1, root's view of everyone's. */
static struct reply do_previews(struct call *c)
{
	struct err e = { 0 };
	json_t *r = preview_list(c->h, c->route->query_all ? NULL : c->owner, &e);

	return r ? ok(200, r) : fail(&e);
}

/* The "user" and "machine" fields every gateway request but auth has. */
static int get_user_machine(json_t *j, const char **user, const char **machine,
			    struct err *e)
{
	json_t *u = json_object_get(j, "user"), *m = json_object_get(j, "machine");

	if (!json_is_string(u) || !user_name_valid(json_string_value(u)))
		return err_set(e, 400, "invalid_user", "user is required: the user name a key "
			       "maps to");
	if (!json_is_string(m))
		return err_set(e, 400, "invalid_name", "machine (a string) is required");
	if (!name_valid(json_string_value(m)))
		return err_set(e, 400, "invalid_name", "invalid machine name '%s': use 1 to 63 "
			       "of a-z, 0-9 and '-', not starting or ending with '-'",
			       json_string_value(m));
	*user = json_string_value(u);
	*machine = json_string_value(m);
	return 0;
}

/* GET /v1/gateway/epoch: which run of hostd this is.  Live sessions do
 * not survive a restart, so a gateway that sees a new epoch opens its
 * connections' sessions again. */
static struct reply gw_epoch(struct call *c)
{
	char epoch[64];

	snprintf(epoch, sizeof(epoch), "%ld-%lld", (long)getpid(), (long long)c->h->started_ms);
	return ok(200, json_pack("{s:s}", "epoch", epoch));
}

/* POST /v1/gateway/auth {"key", "signed"}: whose is this key?  Nothing
 * but 404 "unknown_key" for a key nobody registered, or one no one could
 * (an RSA key too short, a refused type).  "signed": the client proved
 * it holds the key (the gateway checked its signature): the key's first
 * such use is recorded and answered "first_use": true, so the gateway
 * can tell the client whose machines the key opens. */
static struct reply gw_auth(struct call *c)
{
	static const char *const allowed[] = { "key", "signed", NULL };
	struct err e = { 0 };
	struct userkey k, found;
	const char *line = NULL;
	json_t *j = NULL;
	bool signed_ = false, first = false;
	struct reply rep;

	if (get_key_line(c->body, allowed, &j, &line, &e) < 0 ||
	    get_bool(j, "signed", &signed_, &e) < 0) {
		rep = fail(&e);
	} else if (userkey_parse(line, &k, &e) < 0) {
		log_debug("gateway auth: %s", e.msg);
		rep = e.status == 400 ? fail_now(404, "unknown_key", "unknown key") : fail(&e);
	} else if (db_key_find(c->h->db, k.type, k.blob, &found, &e) < 0 ||
		   (signed_ && db_key_used(c->h->db, found.id, &first, &e) < 0)) {
		rep = fail(&e);
	} else {
		rep = ok(200, json_pack("{s:s, s:I, s:s, s:b}", "user", found.owner,
					"key_id", (json_int_t)found.id,
					"fingerprint", found.fingerprint, "first_use", first));
	}
	json_decref(j);
	return rep;
}

/* POST /v1/gateway/connect: the SSH credential of a user's machine. */
static struct reply gw_connect(struct call *c)
{
	static const char *const allowed[] = { "user", "machine", "wake", "from", NULL };
	struct err e = { 0 };
	const char *user = NULL, *machine = NULL;
	bool wake = false;
	json_t *j = api_parse_body(c->body, allowed, &e);
	struct reply rep;

	if (!j || get_user_machine(j, &user, &machine, &e) < 0 ||
	    get_bool(j, "wake", &wake, &e) < 0) {
		rep = fail(&e);
	} else {
		/* A wake's cause: the client's address, as the gateway saw it. */
		const char *from = json_string_value(json_object_get(j, "from"));
		events_cause("ssh from %s", from && *from ? from : "the gateway");
		rep = ssh_credential(c->h, user, machine, wake, true);
	}
	json_decref(j);
	return rep;
}

/* POST /v1/gateway/sessions: a gateway connected a user to a machine. */
/* The kind of session caller C may open and end: a gateway its own, root
 * any (NULL). */
static const char *own_kind(const struct call *c)
{
	return c->who == CALLER_SSHGW ? "ssh" : c->who == CALLER_DESKTOP ? "desktop" : NULL;
}

static struct reply gw_session_open(struct call *c)
{
	static const char *const allowed[] = { "user", "machine", "kind", "from", NULL };
	struct err e = { 0 };
	const char *user = NULL, *machine = NULL, *kind, *from = "";
	json_t *j = api_parse_body(c->body, allowed, &e), *v;
	struct machine m;
	int64_t id = -1;

	if (!j || get_user_machine(j, &user, &machine, &e) < 0)
		goto out;
	v = json_object_get(j, "kind");
	if (!json_is_string(v)) {
		err_set(&e, 400, "invalid_kind", "kind is required: \"ssh\" or \"desktop\"");
		goto out;
	}
	kind = json_string_value(v);
	if (own_kind(c) && (!strcmp(kind, "ssh") || !strcmp(kind, "desktop")) &&
	    strcmp(kind, own_kind(c)) != 0) {
		err_set(&e, 403, "forbidden", "berth-%s's user opens %s sessions only",
			c->who == CALLER_SSHGW ? "sshgw" : "desktop", own_kind(c));
		goto out;
	}
	v = json_object_get(j, "from");
	if (v && !json_is_string(v)) {
		err_set(&e, 400, "invalid_json", "from must be a string (the client's address)");
		goto out;
	}
	if (v)
		from = json_string_value(v);
	if (db_machine_get(c->h->db, user, machine, &m, &e) < 0) {
		if (e.status == 404) {
			err_clear(&e);
			err_set(&e, 404, "no_machine", "no machine %s", machine);
		}
		goto out;
	}
	id = sessions_open(c->h->sessions, m.id, user, machine, kind, from, &e);
out:
	json_decref(j);
	if (err_isset(&e))
		return fail(&e);
	return ok(201, json_pack("{s:I}", "session", (json_int_t)id));
}

/* DELETE /v1/gateway/sessions/ID: the connection ended. */
static struct reply gw_session_close(struct call *c)
{
	static const char *const allowed[] = { "bytes_in", "bytes_out", NULL };
	struct err e = { 0 };
	int64_t id = parse_id(c->arg[0]);
	json_t *j, *v;
	uint64_t bytes[2] = { 0, 0 };
	struct session s;

	if (id < 0)
		return fail_now(400, "invalid_id", "invalid session id '%.40s'", c->arg[0]);
	j = api_parse_body(c->body, allowed, &e);
	if (!j)
		return fail(&e);
	for (int i = 0; i < 2; i++) {
		v = json_object_get(j, allowed[i]);
		if (v && (!json_is_integer(v) || json_integer_value(v) < 0)) {
			json_decref(j);
			return fail_now(400, "invalid_json", "%s must be a non-negative integer",
					allowed[i]);
		}
		bytes[i] = v ? (uint64_t)json_integer_value(v) : 0;
	}
	json_decref(j);
	if (sessions_close(c->h->sessions, id, own_kind(c), bytes[0], bytes[1], &s, &e) < 0)
		return fail(&e);
	return ok(200, json_pack("{s:I, s:I}", "closed", (json_int_t)id,
				 "seconds", (json_int_t)(now_s() - s.opened)));
}

/* DELETE /v1/gateway/sessions {"kind"}: a gateway starts, and whatever it
 * had open before (it crashed, or was killed) is over. */
static struct reply gw_sessions_reset(struct call *c)
{
	static const char *const allowed[] = { "kind", NULL };
	struct err e = { 0 };
	const char *kind = NULL;
	json_t *j = api_parse_body(c->body, allowed, &e);
	int n;

	if (!j)
		return fail(&e);
	if (json_unpack(j, "{s:s}", "kind", &kind) < 0 ||
	    (strcmp(kind, "ssh") != 0 && strcmp(kind, "desktop") != 0)) {
		json_decref(j);
		return fail_now(400, "invalid_kind", "kind must be \"ssh\" or \"desktop\"");
	}
	if (own_kind(c) && strcmp(kind, own_kind(c)) != 0) {
		json_decref(j);
		return fail_now(403, "forbidden", "berth-%s's user ends %s sessions only",
				c->who == CALLER_SSHGW ? "sshgw" : "desktop", own_kind(c));
	}
	n = sessions_drop_kind(c->h->sessions, kind);
	json_decref(j);
	return ok(200, json_pack("{s:i}", "dropped", n));
}

/* Who may call what: the one table of routes.  Callers act on their own
 * things (machines, keys, tokens, usage) unless a row says otherwise. */
#define ANYONE (CALLER_ROOT | CALLER_USER | CALLER_TOKEN)
#define LOCAL (CALLER_ROOT | CALLER_USER)
#define GATEWAYS (CALLER_ROOT | CALLER_GATEWAYS)
#define SSHGW (CALLER_ROOT | CALLER_SSHGW)
#define ROOT CALLER_ROOT
#define GW_ONLY "only root and the gateways' users may use the /v1/gateway routes"
#define SSHGW_ONLY "only root and berth-sshgw's user may look up SSH keys and credentials"

static const struct api_route routes[] = {
	{ "GET", "/v1/info", ANYONE, .fn = do_info },
	{ "GET", "/v1/quota", ANYONE, .fn = do_quota },
	{ "GET", "/v1/ledger", ANYONE, .fn = do_ledger },
	{ "GET", "/v1/events", ROOT, .query_all = true,
	  .refusal = "only root may see every user's events", .fn = do_events },
	{ "GET", "/v1/events", ANYONE, .fn = do_events },
	{ "GET", "/v1/usage", ROOT, .query_all = true,
	  .refusal = "only root may see every user's usage", .fn = do_usage },
	{ "GET", "/v1/usage", ANYONE, .fn = do_usage },
	{ "GET", "/metrics", ROOT, .socket_only = true,
	  .refusal = "only root may read the metrics", .fn = do_metrics },
	{ "GET", "/v1/web/settings", ROOT, .socket_only = true,
	  .refusal = "only root may read berth-web's settings", .fn = do_web_settings },

	{ "GET", "/v1/machines", ANYONE, .fn = do_list },
	{ "POST", "/v1/machines", ANYONE, .fn = do_create },
	{ "GET", "/v1/machines/{name}", ANYONE, .fn = do_show },
	{ "PATCH", "/v1/machines/{name}", ANYONE, .fn = do_patch },
	{ "DELETE", "/v1/machines/{name}", ANYONE, .fn = do_delete },
	{ "POST", "/v1/machines/{name}/start", ANYONE, .fn = do_action },
	{ "POST", "/v1/machines/{name}/stop", ANYONE, .fn = do_action },
	{ "POST", "/v1/machines/{name}/suspend", ANYONE, .fn = do_action },
	{ "POST", "/v1/machines/{name}/resume", ANYONE, .fn = do_action },
	{ "POST", "/v1/machines/{name}/restart", ANYONE, .fn = do_action },
	{ "POST", "/v1/machines/{name}/desktop", ANYONE, .fn = do_desktop },
	{ "DELETE", "/v1/machines/{name}/desktop", ANYONE, .fn = do_desktop_revoke },
	{ "POST", "/v1/machines/{name}/ssh", ROOT,
	  .refusal = "only root may obtain SSH credentials", .fn = do_ssh },
	{ "GET", "/v1/machines/{name}/export", ANYONE, .fn = do_export },
	{ "POST", "/v1/machines/{name}/exec", ANYONE, .fn = do_exec },
	{ "GET", "/v1/machines/{name}/exec", ANYONE, .fn = do_exec_list },
	{ "POST", "/v1/machines/{name}/exec/{id}/stdin", ANYONE, .fn = do_exec_stdin },
	{ "GET", "/v1/machines/{name}/exec/{id}/output", ANYONE, .fn = do_exec_output },
	{ "POST", "/v1/machines/{name}/exec/{id}/signal", ANYONE, .fn = do_exec_signal },
	{ "POST", "/v1/machines/{name}/exec/{id}/resize", ANYONE, .fn = do_exec_resize },
	{ "GET", "/v1/machines/{name}/files", ANYONE, .fn = do_file_get },
	{ "PUT", "/v1/machines/{name}/files", ANYONE, .upload = file_upload, .fn = do_file_put },
	{ "DELETE", "/v1/machines/{name}/files", ANYONE, .fn = do_file_delete },
	{ "GET", "/v1/machines/{name}/files/list", ANYONE, .fn = do_file_list },
	{ "GET", "/v1/machines/{name}/files/stat", ANYONE, .fn = do_file_stat },
	{ "POST", "/v1/machines/{name}/files/mkdir", ANYONE, .fn = do_file_mkdir },
	{ "POST", "/v1/machines/{name}/files/move", ANYONE, .fn = do_file_move },
	{ "GET", "/v1/machines/{name}/files/tar", ANYONE, .fn = do_tar_get },
	{ "PUT", "/v1/machines/{name}/files/tar", ANYONE, .upload = tar_upload, .fn = do_tar_put },
	{ "POST", "/v1/machines/{name}/checkpoints", ANYONE, .fn = do_checkpoint },
	{ "GET", "/v1/machines/{name}/checkpoints", ANYONE, .fn = do_checkpoints },
	{ "DELETE", "/v1/machines/{name}/checkpoints/{ckpt}", ANYONE,
	  .fn = do_checkpoint_delete },
	{ "POST", "/v1/machines/{name}/restore", ANYONE, .fn = do_restore },
	{ "POST", "/v1/machines/{name}/fork", ANYONE, .fn = do_fork },
	{ "GET", "/v1/machines/{name}/egress", ANYONE, .fn = do_egress },
	{ "PUT", "/v1/machines/{name}/previews/{port}", ANYONE, .fn = do_preview_put },
	{ "DELETE", "/v1/machines/{name}/previews/{port}", ANYONE, .fn = do_preview_delete },
	{ "POST", "/v1/machines/{name}/image", ANYONE, .fn = do_machine_image },
	{ "POST", "/v1/machines/{name}/{action}", ANYONE, .catch_all = true, .fn = do_action },

	/* A token makes no credentials: a stolen one must not outlive its
	 * revocation through new tokens or SSH keys. */
	{ "GET", "/v1/keys", ANYONE, .fn = do_keys },
	{ "POST", "/v1/keys/challenge", LOCAL,
	  .refusal = "keys are added on the host (berth key add), not with an API token",
	  .fn = do_key_challenge },
	{ "POST", "/v1/keys", LOCAL,
	  .refusal = "keys are added on the host (berth key add), not with an API token",
	  .fn = do_key_add },
	{ "DELETE", "/v1/keys/{id}", ANYONE, .fn = do_key_delete },
	{ "GET", "/v1/tokens", ANYONE, .fn = do_tokens },
	{ "POST", "/v1/tokens", LOCAL,
	  .refusal = "tokens are added on the host (berth token create), not with an API "
		     "token", .fn = do_token_create },
	{ "DELETE", "/v1/tokens/{id}", ANYONE, .fn = do_token_delete },

	/* Lifecycle-event webhooks: each caller's own. */
	{ "GET", "/v1/webhooks", ANYONE, .fn = do_webhooks },
	{ "POST", "/v1/webhooks", ANYONE, .fn = do_webhook_add },
	{ "DELETE", "/v1/webhooks/{id}", ANYONE, .fn = do_webhook_delete },
	{ "GET", "/v1/webhooks/{id}/deliveries", ANYONE, .fn = do_webhook_deliveries },

	/* The credential broker's secrets: each caller's own. */
	{ "GET", "/v1/secrets", ANYONE, .fn = do_secrets },
	{ "POST", "/v1/secrets", ANYONE, .fn = do_secret_add },
	{ "GET", "/v1/secrets/log", ANYONE, .fn = do_secret_log },
	{ "DELETE", "/v1/secrets/{secret}", ANYONE, .fn = do_secret_delete },

	/* Previews (hostd/preview.h): each caller's own; root sees all. */
	{ "GET", "/v1/previews", ROOT, .query_all = true,
	  .refusal = "only root may see every user's previews", .fn = do_previews },
	{ "GET", "/v1/previews", ANYONE, .fn = do_previews },

	{ "GET", "/v1/templates", ANYONE, .fn = do_templates },
	{ "POST", "/v1/templates", ANYONE, .fn = do_template_create },
	{ "GET", "/v1/templates/{template}", ANYONE, .fn = do_template_show },
	{ "DELETE", "/v1/templates/{template}", ANYONE, .fn = do_template_delete },
	{ "GET", "/v1/images", ANYONE, .fn = do_images },
	{ "POST", "/v1/images", ROOT, .refusal = "only root may build images",
	  .fn = do_image_build },
	{ "GET", "/v1/images/{image}", ANYONE, .fn = do_image_show },
	{ "PUT", "/v1/images/{image}", ROOT, .refusal = "only root may import images",
	  .upload = image_upload, .fn = do_image_put },
	{ "PATCH", "/v1/images/{image}", ROOT, .refusal = "only root may publish images",
	  .fn = do_image_patch },
	{ "DELETE", "/v1/images/{image}", ANYONE, .fn = do_image_delete },

	/* The gateways' requests: for their users and root, on the socket.
	 * Only berth-sshgw's user looks up keys and SSH credentials; each
	 * gateway opens and ends sessions of its own kind only. */
	{ "GET", "/v1/gateway/epoch", GATEWAYS, .socket_only = true, .refusal = GW_ONLY,
	  .fn = gw_epoch },
	{ "POST", "/v1/gateway/auth", SSHGW, .socket_only = true, .refusal = SSHGW_ONLY,
	  .fn = gw_auth },
	{ "POST", "/v1/gateway/connect", SSHGW, .socket_only = true, .refusal = SSHGW_ONLY,
	  .fn = gw_connect },
	{ "POST", "/v1/gateway/sessions", GATEWAYS, .socket_only = true, .refusal = GW_ONLY,
	  .fn = gw_session_open },
	{ "DELETE", "/v1/gateway/sessions", GATEWAYS, .socket_only = true, .refusal = GW_ONLY,
	  .fn = gw_sessions_reset },
	{ "DELETE", "/v1/gateway/sessions/{id}", GATEWAYS, .socket_only = true,
	  .refusal = GW_ONLY, .fn = gw_session_close },
};

const struct api_route *api_routes(size_t *n)
{
	*n = sizeof(routes) / sizeof(routes[0]);
	return routes;
}

int api_authorize(const struct api_route *r, enum api_caller who, bool http,
		  const char *url, struct err *e)
{
	if (http && r->socket_only)
		return err_set(e, 404, "not_found", "no route %s %s", r->method,
			       url ? url : r->path);
	if (r->who & who)
		return 0;
	if (who == CALLER_SSHGW || who == CALLER_DESKTOP)
		return err_set(e, 403, "forbidden", "berth-%s's user may use only its own "
			       "/v1/gateway routes (%s %s is not one)",
			       who == CALLER_SSHGW ? "sshgw" : "desktop", r->method,
			       url ? url : r->path);
	if (r->refusal)
		return err_set(e, 403, "forbidden", "%s", r->refusal);
	return err_set(e, 403, "forbidden", "%s %s is not open to this caller", r->method,
		       r->path);
}

/* Whether the segments SEG[0..N) match PATTERN, filling ARGS with its
 * {params}' values; *BAD gets a {name} value that is no machine name. */
static bool path_match(const char *pattern, char *const *seg, size_t n, const char *args[4],
		       const char **bad)
{
	size_t i = 0, na = 0;
	const char *p = pattern;

	*bad = NULL;
	while (*p == '/') {
		const char *q = ++p;
		size_t len;
		while (*q && *q != '/')
			q++;
		len = (size_t)(q - p);
		if (i >= n)
			return false;
		if (p[0] == '{') {
			if (na < 4)
				args[na++] = seg[i];
			if (len == 6 && strncmp(p, "{name}", 6) == 0 && !name_valid(seg[i]) && !*bad)
				*bad = seg[i];
		} else if (strlen(seg[i]) != len || strncmp(seg[i], p, len) != 0) {
			return false;
		}
		i++;
		p = q;
	}
	return i == n;
}

const struct api_route *api_route_find(const char *method, const char *path, bool all,
				       char *scratch, size_t scratch_len, const char *args[4],
				       struct err *e)
{
	char *seg[8] = { 0 }, *save = NULL;
	size_t n = 0;
	const char *bad = NULL;

	if (strlen(path) >= scratch_len) {
		err_set(e, 414, "uri_too_long", "request path too long");
		return NULL;
	}
	snprintf(scratch, scratch_len, "%s", path);
	for (char *s = strtok_r(scratch, "/", &save); s; s = strtok_r(NULL, "/", &save)) {
		if (n == sizeof(seg) / sizeof(seg[0]))
			goto none;
		seg[n++] = s;
	}
	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
		const struct api_route *r = &routes[i];
		if (!path_match(r->path, seg, n, args, &bad))
			continue;
		/* A malformed machine name is refused whatever else the
		 * request is. */
		if (bad) {
			err_set(e, 400, "invalid_name", "invalid machine name '%s'", bad);
			return NULL;
		}
		if (strcmp(r->method, method) == 0 && (!r->query_all || all))
			return r;
	}
none:
	err_set(e, 404, "not_found", "no route %s %s", method, path);
	return NULL;
}

static enum MHD_Result send_reply(const struct api *a, struct MHD_Connection *c,
				  struct reply r, int64_t t0)
{
	bool http = a->http;

	prom_api(r.status);
	if (r.stream) {
		/* A streamed body (an export) holds its machine: a client that
		 * reads nothing for api_send_timeout is dropped, which ends the
		 * stream and releases it.  libmicrohttpd's timeout counts time
		 * without progress, so a slow reader that reads goes on. */
		MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT,
					  (unsigned)a->h->cfg.api_send_timeout_s);
		enum MHD_Result sret = MHD_queue_response(c, (unsigned)r.status, r.stream);
		MHD_destroy_response(r.stream);
		return sret;
	}
	char *text = r.text ? r.text : r.body ? json_dumps(r.body, JSON_COMPACT) : NULL;
	size_t len;

	if (!text) {
		/* Only a value jansson refuses (not UTF-8) gets here. */
		log_error("cannot encode a reply as JSON (status %d)", r.status);
		r.status = 500;
		text = strdup("{\"error\":{\"code\":\"internal\",\"message\":"
			      "\"the reply could not be encoded as JSON\"}}");
		if (!text)
			abort();
	}
	len = strlen(text);
	struct MHD_Response *resp;
	enum MHD_Result ret;
	char timing[128];

	text = realloc(text, len + 2);
	if (!text)
		abort();
	text[len++] = '\n';
	text[len] = '\0';
	resp = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
	MHD_add_response_header(resp, "Content-Type", "application/json");
	if (r.status == 401)
		MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
	/* total and the part spent in libvirt and external tools: the rest
	 * is hostd's own overhead (bench/ reads this). */
	int64_t total = mono_us() - t0;
	snprintf(timing, sizeof(timing), "total;dur=%.3f, ext;dur=%.3f",
		 (double)total / 1000.0, (double)ext_time_get() / 1000.0);
	MHD_add_response_header(resp, "Server-Timing", timing);
	if (http) {
		/* A reply may hold a secret (a new token): never kept. */
		MHD_add_response_header(resp, "Cache-Control", "no-store");
		MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
	}
	ret = MHD_queue_response(c, (unsigned)r.status, resp);
	MHD_destroy_response(resp);
	json_decref(r.body);
	return ret;
}

static struct reply too_large(const struct api *a)
{
	return fail_now(413, "body_too_large", "request body larger than %llu bytes",
			(unsigned long long)a->h->cfg.max_body);
}

/* Whether route R changes machines (and counts in max_operations). */
static bool changes_machines(const struct api_route *r)
{
	return strcmp(r->method, "GET") != 0 && strncmp(r->path, "/v1/machines", 12) == 0;
}

/* A refusal for a quota is an event of the machine named (none for a
 * create: its name is in the body). */
static void quota_event(const struct call *c, const struct reply *rep)
{
	json_t *err = json_object_get(rep->body, "error");
	const char *code = json_string_value(json_object_get(err, "code"));

	if (rep->status != 403 || !code || strcmp(code, "quota_exceeded") != 0)
		return;
	events_emit(c->h, c->owner, strstr(c->route->path, "{name}") ? c->arg[0] : "",
		    "quota_refused", json_string_value(json_object_get(err, "message")));
}

/* C's handler, counted among its owner's operations in flight (a
 * refusal when they are max_operations already). */
static struct reply call_counted(struct call *c)
{
	struct err e = { 0 };
	struct reply rep;

	if (quota_begin(c->h, c->owner, QUOTA_OPERATIONS, &e) < 0)
		return fail(&e);
	rep = c->route->fn(c);
	quota_end(c->h, c->owner, QUOTA_OPERATIONS);
	return rep;
}

/* The caller's class for the route table. */
static enum api_caller caller_class(const struct api *a, uid_t uid)
{
	if (a->http)
		return CALLER_TOKEN;
	if (uid == 0)
		return CALLER_ROOT;
	if (a->h->has_sshgw && uid == a->h->sshgw_uid)
		return CALLER_SSHGW;
	if (a->h->has_desktop && uid == a->h->desktop_uid)
		return CALLER_DESKTOP;
	return CALLER_USER;
}

/* On web.sock, R's owner may have one more request in progress (root
 * always): 0 (counted), or -1 at api_max_connections_per_user.  A user
 * through berth-web gets the share a local user gets on hostd.sock: one
 * token (a follower of events, long exec streams) cannot take the
 * socket's connections from every other user. */
static int owner_take(struct api *a, struct req *r)
{
	struct owner_count *o = NULL;
	int rc = 0;

	if (!strcmp(r->owner, "root"))
		return 0;
	pthread_mutex_lock(&a->lock);
	for (size_t i = 0; i < a->nowners && !o; i++)
		if (!strcmp(a->owners[i].owner, r->owner))
			o = &a->owners[i];
	if (!o) {
		if (a->nowners == a->owners_cap) {
			a->owners_cap = a->owners_cap ? a->owners_cap * 2 : 16;
			a->owners = realloc(a->owners, a->owners_cap * sizeof(*a->owners));
			if (!a->owners)
				abort();
		}
		o = &a->owners[a->nowners++];
		*o = (struct owner_count){ .n = 0 };
		snprintf(o->owner, sizeof(o->owner), "%s", r->owner);
	}
	if (o->n >= (unsigned)a->h->cfg.api_max_connections_per_user)
		rc = -1;
	else
		o->n++;
	pthread_mutex_unlock(&a->lock);
	r->owner_counted = rc == 0;
	return rc;
}

static void owner_release(struct api *a, struct req *r)
{
	if (!r->owner_counted)
		return;
	pthread_mutex_lock(&a->lock);
	for (size_t i = 0; i < a->nowners; i++) {
		if (strcmp(a->owners[i].owner, r->owner))
			continue;
		if (--a->owners[i].n == 0)
			a->owners[i] = a->owners[--a->nowners];
		break;
	}
	pthread_mutex_unlock(&a->lock);
	r->owner_counted = false;
}

/* The head of request R arrived: who calls, which route, whether they may,
 * and for an upload the import its body streams into.  A refusal is kept
 * in R->early. */
static void begin_request(struct api *a, struct req *r, struct MHD_Connection *c,
			  const char *url, const char *method)
{
	struct err e = { 0 };
	const char *all = query_arg(c, "all");
	const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
						     MHD_HTTP_HEADER_CONTENT_LENGTH);

	if (caller(a, c, r->owner, sizeof(r->owner), &r->uid, &e) < 0 ||
	    !(r->route = api_route_find(method, url, all && !strcmp(all, "1"), r->scratch,
					sizeof(r->scratch), r->args, &e)) ||
	    api_authorize(r->route, caller_class(a, r->uid), a->http,
			  url, &e) < 0) {
		r->early = fail(&e);
		r->has_early = true;
		return;
	}
	if (a->http && owner_take(a, r) < 0) {
		r->early = fail_now(503, "too_many_connections", "%s has %d requests in progress "
				    "through berth-web already (api_max_connections_per_user)",
				    r->owner, a->h->cfg.api_max_connections_per_user);
		r->has_early = true;
		return;
	}
	if (r->route->upload) {
		struct call call = { .a = a, .h = a->h, .conn = c, .method = method, .url = url,
				     .route = r->route, .owner = r->owner, .uid = r->uid,
				     .who = caller_class(a, r->uid) };
		memcpy(call.arg, r->args, sizeof(call.arg));
		r->has_early = !r->route->upload(&call, &r->up, &r->early);
		return;
	}
	if (cl && strtoull(cl, NULL, 10) > a->h->cfg.max_body) {
		r->early = too_large(a);
		r->has_early = true;
	}
}

/* ---- connections on the socket ------------------------------------------------
 *
 * Any local user may connect, so no user may take all of hostd's
 * connections (one thread each) or hold one without asking anything.  At
 * accept (conn_notify, MHD_CONNECTION_NOTIFY_STARTED) the peer's uid is
 * read (SO_PEERCRED) and the connection admitted or refused at once (a
 * 503 saying why, then the end of what hostd sends, and the end of what it
 * reads at the reaper's next look, REFUSED_LINGER_MS: a client that hung
 * up on both at once would see no answer, only a failed connect):
 * a user other than root and the gateway user has at most
 * api_max_connections_per_user, users together at most
 * api_max_connections less api_reserved_connections (the rest is kept for
 * root and the gateways, whom a flood must not lock out), everyone at most
 * api_max_connections.  A connection must send a complete request head
 * within api_head_timeout of its accept or of its previous answer, or
 * the reaper thread shuts it down: libmicrohttpd's connection timeout
 * counts idle time, which a client sending a byte a second never reaches
 * (and long requests, start --wait or an export, must not time out). */

/* A refused connection's reading side ends this long after its 503; past
 * REFUSED_COURTESY of a uid's in flight, at once (a flood of connections
 * would otherwise hold libmicrohttpd's slots, which root's need too). */
#define REFUSED_LINGER_MS 200
#define REFUSED_COURTESY 8
/* libmicrohttpd's own limit is api_max_connections plus this much room for
 * refused connections until they are closed (well under a second each). */
#define CONN_LIMIT_SLACK(max) ((max) > 1024 ? (max) : 1024)

static struct conn *conn_of(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

	return ci ? ci->socket_context : NULL;
}

/* A request head arrived on C: false when its connection was refused or
 * cut (its head may have been read before the shutdown): no answer then. */
static bool conn_head_arrived(struct api *a, struct MHD_Connection *c)
{
	struct conn *k;
	bool ok;

	if (!(k = conn_of(c)))
		return false;
	pthread_mutex_lock(&a->lock);
	ok = k->admitted && !k->cut;
	k->in_request = ok;
	pthread_mutex_unlock(&a->lock);
	return ok;
}

static void conn_request_done(struct api *a, struct MHD_Connection *c)
{
	struct conn *k;

	if (!a || !(k = conn_of(c)))
		return;
	pthread_mutex_lock(&a->lock);
	k->in_request = false;
	k->head_deadline_ms = mono_ms() + a->h->cfg.api_head_timeout_s * 1000;
	pthread_mutex_unlock(&a->lock);
}

static struct uid_count *uid_slot(struct api *a, uid_t uid, bool add)
{
	for (size_t i = 0; i < a->nuids; i++)
		if (a->uids[i].uid == uid)
			return &a->uids[i];
	if (!add)
		return NULL;
	if (a->nuids == a->uids_cap) {
		a->uids_cap = a->uids_cap ? a->uids_cap * 2 : 16;
		a->uids = realloc(a->uids, a->uids_cap * sizeof(*a->uids));
		if (!a->uids)
			abort();
	}
	a->uids[a->nuids] = (struct uid_count){ .uid = uid };
	return &a->uids[a->nuids++];
}

/* Whether UID may connect to berth-web's socket: its user and root. */
static bool web_peer(const struct api *a, uid_t uid)
{
	return uid == 0 || (a->h->has_web && uid == a->h->web_uid);
}

/* Whether UID's connections come out of the reserve rather than the
 * users' share: root's, the gateways' on hostd.sock, berth-web's on its
 * socket (the only peers there besides root). */
static bool reserved_peer(const struct api *a, uid_t uid)
{
	if (a->http)
		return true;
	enum api_caller who = caller_class(a, uid);
	return who == CALLER_ROOT || (who & CALLER_GATEWAYS);
}

/* May UID have one more connection?  NULL, or why not (under LOCK). */
static const char *conn_refusal(struct api *a, uid_t uid)
{
	const struct config *cfg = &a->h->cfg;
	struct uid_count *u;

	if (a->http && !web_peer(a, uid))
		return "this socket is berth-web's: only its user (web_user) and root may "
		       "connect (hostd.sock is every local user's)";
	if (a->total >= (unsigned)cfg->api_max_connections)
		return "api_max_connections reached (every connection hostd takes is open)";
	if (reserved_peer(a, uid))
		return NULL;
	if (a->users >= (unsigned)(cfg->api_max_connections - cfg->api_reserved_connections))
		return "users' share of api_max_connections reached (the rest is kept for "
		       "root and the gateways)";
	u = uid_slot(a, uid, false);
	if (u && u->n >= (unsigned)cfg->api_max_connections_per_user)
		return "api_max_connections_per_user reached (this user has that many open)";
	return NULL;
}

/* List K (for the reaper) and count it, admitted or refused.  Refused:
 * whether it may linger for its 503 to be read (else it is to be shut
 * down at once). */
static bool conn_add(struct api *a, struct conn *k, bool admitted)
{
	struct uid_count *u = uid_slot(a, k->uid, true);

	k->next = a->conns;
	if (a->conns)
		a->conns->prev = k;
	a->conns = k;
	k->admitted = admitted;
	if (!admitted) {
		k->head_deadline_ms = mono_ms() + REFUSED_LINGER_MS;
		k->cut = u->refused >= REFUSED_COURTESY;
		u->refused++;
		return !k->cut;
	}
	k->head_deadline_ms = mono_ms() + a->h->cfg.api_head_timeout_s * 1000;
	a->total++;
	if (!reserved_peer(a, k->uid))
		a->users++;
	u->n++;
	return true;
}

static void conn_release(struct api *a, struct conn *k)
{
	struct uid_count *u = uid_slot(a, k->uid, false);

	if (k->prev)
		k->prev->next = k->next;
	else
		a->conns = k->next;
	if (k->next)
		k->next->prev = k->prev;
	if (!u)
		return;  /* not reached: conn_add made it */
	if (!k->admitted) {
		u->refused--;
	} else {
		a->total--;
		if (!reserved_peer(a, k->uid))
			a->users--;
		u->n--;
	}
	if (u->n == 0 && u->refused == 0)
		*u = a->uids[--a->nuids];
}

static void conn_notify(void *cls, struct MHD_Connection *c, void **socket_context,
			enum MHD_ConnectionNotificationCode code)
{
	struct api *a = cls;
	struct conn *k = *socket_context;
	const union MHD_ConnectionInfo *ci;
	struct ucred cred;
	socklen_t len = sizeof(cred);
	const char *why = "cannot read the peer's credentials";
	unsigned unlogged = 0;
	bool log_now = false, linger = true;

	if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
		if (!k)
			return;
		pthread_mutex_lock(&a->lock);
		conn_release(a, k);
		pthread_mutex_unlock(&a->lock);
		free(k);
		*socket_context = NULL;
		return;
	}
	if (code != MHD_CONNECTION_NOTIFY_STARTED)
		return;
	ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (!ci)
		return;
	k = calloc(1, sizeof(*k));
	if (!k)
		abort();
	k->fd = ci->connect_fd;
	k->uid = (uid_t)-1;
	*socket_context = k;
	pthread_mutex_lock(&a->lock);
	if (getsockopt(k->fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
		k->uid = cred.uid;
		why = conn_refusal(a, k->uid);
	}
	linger = conn_add(a, k, !why);
	if (why) {
		/* One line a second at most: a flood would fill the log. */
		int64_t now = mono_ms();
		if (now - a->refusal_logged_ms >= 1000) {
			a->refusal_logged_ms = now;
			unlogged = a->refusals_unlogged;
			a->refusals_unlogged = 0;
			log_now = true;
		} else {
			a->refusals_unlogged++;
		}
	}
	pthread_mutex_unlock(&a->lock);
	if (why) {
		/* A 503 the client reads whenever it looks (never waited
		 * for); its request, if it comes, is dropped (api_handler);
		 * libmicrohttpd's thread closes the descriptor, which stays
		 * its own, when the reaper ends the reading side. */
		char resp[512], body[320];
		bool stranger = a->http && !web_peer(a, k->uid);
		int bn = snprintf(body, sizeof(body), "{\"error\":{\"code\":\"%s\","
				  "\"message\":\"berth-hostd refused the connection: %s\"}}\n",
				  stranger ? "forbidden" : "too_many_connections", why);
		int n = snprintf(resp, sizeof(resp), "HTTP/1.1 %s\r\n"
				 "Content-Type: application/json\r\nConnection: close\r\n"
				 "Content-Length: %d\r\n\r\n%s",
				 stranger ? "403 Forbidden" : "503 Service Unavailable", bn, body);
		if (send(k->fd, resp, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
			/* nothing to do: it is closed anyway */
		}
		/* The descriptor is open: CLOSED unlists K first, under the
		 * lock the reaper takes. */
		shutdown(k->fd, linger ? SHUT_WR : SHUT_RDWR);
		if (log_now)
			log_warn("refused a connection from uid %u: %s (%u more refused in "
				 "the last second)", (unsigned)k->uid, why, unlogged);
	}
}

/* Shut down every connection past its head deadline (a refused one past
 * its linger), every 250 ms. */
static void *conn_reaper(void *arg)
{
	struct api *a = arg;

	pthread_mutex_lock(&a->lock);
	while (!a->stopping) {
		struct timespec ts;
		unsigned cut = 0;
		uid_t last = 0;
		int64_t now = mono_ms();

		for (struct conn *k = a->conns; k; k = k->next) {
			if (k->in_request || k->cut || now < k->head_deadline_ms)
				continue;
			/* The descriptor is open: CLOSED unlists it first. */
			shutdown(k->fd, SHUT_RDWR);
			k->cut = true;
			if (k->admitted) {
				last = k->uid;
				cut++;
			}
		}
		if (cut) {
			pthread_mutex_unlock(&a->lock);
			log_info("closed %u connection%s (the last of uid %u) that sent no "
				 "complete request head within %llds", cut, cut == 1 ? "" : "s",
				 (unsigned)last, (long long)a->h->cfg.api_head_timeout_s);
			pthread_mutex_lock(&a->lock);
		}
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 250 * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&a->wake, &a->lock, &ts);
	}
	pthread_mutex_unlock(&a->lock);
	return NULL;
}

static enum MHD_Result api_handler(void *cls, struct MHD_Connection *c, const char *url,
				   const char *method, const char *version,
				   const char *upload_data, size_t *upload_data_size,
				   void **con_cls)
{
	struct api *a = cls;
	struct req *r = *con_cls;
	struct reply rep;

	(void)version;
	if (!r) {
		/* A head arrived: its connection's deadline is met. */
		if (!conn_head_arrived(a, c))
			return MHD_NO;
		r = calloc(1, sizeof(*r));
		if (!r)
			return MHD_NO;
		r->t0 = mono_us();
		ext_time_reset();
		*con_cls = r;
		begin_request(a, r, c, url, method);
		/* From the network, no body is read for a refused request: the
		 * answer goes now. */
		if (a->http && r->has_early) {
			r->has_early = false;
			return send_reply(a, c, r->early, r->t0);
		}
		return MHD_YES;
	}
	if (*upload_data_size) {
		if (r->has_early)
			;       /* refused: read and dropped */
		else if (r->up.ctx)
			r->up.feed(r->up.ctx, upload_data, *upload_data_size);
		else if (!r->too_big && r->body.len + *upload_data_size <= a->h->cfg.max_body)
			buf_add(&r->body, upload_data, *upload_data_size);
		else
			r->too_big = true;
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (r->has_early) {
		rep = r->early;
		r->has_early = false;
	} else if (r->too_big) {
		rep = too_large(a);
	} else {
		struct call call = { .a = a, .h = a->h, .conn = c, .method = method, .url = url,
				     .route = r->route, .owner = r->owner, .uid = r->uid,
				     .who = caller_class(a, r->uid),
				     .body = &r->body, .upload = &r->up };
		memcpy(call.arg, r->args, sizeof(call.arg));
		/* What an operation here does is this request's doing (a
		 * gateway's wake says more: gw_connect). */
		events_cause("%s %s by %s%s", method, url, r->owner, a->http ? " over HTTP" : "");
		rep = changes_machines(r->route) ? call_counted(&call) : r->route->fn(&call);
		quota_event(&call, &rep);
		/* The handler finished the sink. */
		r->up.ctx = NULL;
	}
	if (rep.status >= 500)
		log_warn("%s %s: %d %s", method, url, rep.status,
			 json_string_value(json_object_get(json_object_get(rep.body, "error"),
							   "message")));
	else
		log_debug("%s %s: %d", method, url, rep.status);
	return send_reply(a, c, rep, r->t0);
}

static void api_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			  enum MHD_RequestTerminationCode toe)
{
	struct req *r = *con_cls;

	(void)toe;
	/* Keep-alive: the next request's head is owed within the timeout. */
	conn_request_done(cls, c);
	if (r) {
		owner_release(cls, r);
		/* The client went away during an upload. */
		if (r->up.ctx)
			r->up.abort(r->up.ctx);
		if (r->has_early)
			json_decref(r->early.body);
		buf_free(&r->body);
		free(r);
		*con_cls = NULL;
	}
}


static struct api *api_new(struct hostd *h)
{
	struct api *a = calloc(1, sizeof(*a));

	if (!a)
		abort();
	a->h = h;
	a->fd = -1;
	pthread_mutex_init(&a->lock, NULL);
	pthread_cond_init(&a->wake, NULL);
	return a;
}

/* Ends the reaper; the daemon is stopped (every connection closed). */
static void api_free(struct api *a)
{
	if (a->has_reaper) {
		pthread_mutex_lock(&a->lock);
		a->stopping = true;
		pthread_cond_signal(&a->wake);
		pthread_mutex_unlock(&a->lock);
		pthread_join(a->reaper, NULL);
	}
	pthread_mutex_destroy(&a->lock);
	pthread_cond_destroy(&a->wake);
	free(a->uids);
	free(a->owners);
	free(a);
}

struct api *api_start(struct hostd *h, const char *path, bool web, struct err *e)
{
	struct api *a = api_new(h);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	if (h->cfg.api_reserved_connections >= h->cfg.api_max_connections) {
		err_set(e, 400, "invalid_config", "api_reserved_connections = %d must be below "
			"api_max_connections = %d (users need some)", h->cfg.api_reserved_connections,
			h->cfg.api_max_connections);
		goto fail;
	}
	if (strlen(path) >= sizeof(sa.sun_path)) {
		err_set(e, 400, "invalid_config", "socket path too long (%zu > %zu): %s",
			strlen(path), sizeof(sa.sun_path) - 1, path);
		goto fail;
	}
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	snprintf(a->path, sizeof(a->path), "%s", path);
	a->http = web;
	a->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (a->fd < 0) {
		err_errno(e, errno, "socket");
		goto fail;
	}
	/* A live socket means another hostd serves this state directory. */
	if (connect(a->fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
		err_set(e, 409, "busy", "another berth-hostd is serving %s", path);
		goto fail;
	}
	close(a->fd);
	a->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	unlink(path);
	/* Any local user may call (as themselves: peer_owner; web.sock only
	 * for berth-web's user and root, refused at accept); hostd's umask
	 * keeps the socket private until the chmod. */
	/* The backlog: a burst of connections waits for accept (which
	 * refuses the excess at once) instead of being refused by the kernel
	 * before root's. */
	if (bind(a->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(path, 0666) < 0 ||
	    listen(a->fd, SOMAXCONN) < 0) {
		err_errno(e, errno, "listen on %s", path);
		goto fail;
	}
	/* Connections are counted and refused by conn_notify, and their heads
	 * timed by conn_reaper (above).  libmicrohttpd's own limit is higher,
	 * for the refused ones still closing; poll, not select, in each
	 * connection's thread, since descriptors pass FD_SETSIZE. */
	a->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD |
				MHD_USE_ERROR_LOG,
				0, NULL, NULL, api_handler, a,
				MHD_OPTION_LISTEN_SOCKET, a->fd,
				MHD_OPTION_NOTIFY_COMPLETED, api_completed, a,
				MHD_OPTION_NOTIFY_CONNECTION, conn_notify, a,
				MHD_OPTION_CONNECTION_LIMIT,
				(unsigned)(h->cfg.api_max_connections +
					   CONN_LIMIT_SLACK(h->cfg.api_max_connections)),
				MHD_OPTION_CONNECTION_TIMEOUT, 0u,
				MHD_OPTION_THREAD_STACK_SIZE, (size_t)(1 << 20),
				/* Room for large reads of an image upload. */
				MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(1 << 20),
				MHD_OPTION_END);
	if (!a->d) {
		err_set(e, 500, "internal", "cannot start the HTTP server on %s", path);
		goto fail;
	}
	/* libmicrohttpd owns the listening socket now. */
	a->fd = -1;
	if (pthread_create(&a->reaper, NULL, conn_reaper, a) != 0) {
		err_set(e, 500, "internal", "cannot start the connection reaper");
		goto fail;
	}
	a->has_reaper = true;
	if (web)
		log_info("API for berth-web's callers (bearer tokens) on %s, answered for %s%s "
			 "and root", path, h->cfg.web_user, h->has_web ? "" : " (no such user)");
	else
		log_info("API listening on %s (connections: %d, %d per user, %d kept for root "
			 "and the gateways; request heads within %llds)", path,
			 h->cfg.api_max_connections, h->cfg.api_max_connections_per_user,
			 h->cfg.api_reserved_connections, (long long)h->cfg.api_head_timeout_s);
	return a;
fail:
	if (a->d)
		MHD_stop_daemon(a->d);
	if (a->fd >= 0)
		close(a->fd);
	api_free(a);
	return NULL;
}

void api_stop(struct api *a)
{
	if (!a)
		return;
	/* libmicrohttpd closes the listening socket it was given. */
	MHD_stop_daemon(a->d);
	unlink(a->path);
	api_free(a);
}
