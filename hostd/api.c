#include "hostd/api.h"

#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
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
#include "common/util.h"
#include "hostd/transfer.h"
#include "hostd/checkpoint.h"
#include "hostd/desktop.h"
#include "hostd/idle.h"
#include "hostd/image.h"
#include "hostd/machine.h"
#include "hostd/prometheus.h"
#include "hostd/sessions.h"
#include "hostd/tokens.h"
#include "hostd/sampler.h"
#include "hostd/usage.h"
#include "hostd/userkeys.h"
#include "common/banned.h"

#define VERSION "0.1.0"

struct api {
	struct hostd *h;
	struct MHD_Daemon *d;
	int fd;
	char path[108];
	bool http;      /* the HTTP listener's: callers are bearer tokens */
};

/* The uid of every caller over HTTP: no one's, so neither root's routes
 * nor the gateway's answer it. */
#define HTTP_UID ((uid_t)-1)

/* What a handler returns: status and a JSON body (reference taken), or a
 * response that streams its body (an export). */
struct reply {
	int status;
	json_t *body;
	struct MHD_Response *stream;
	char *text;            /* a body already encoded (malloc'd), instead of BODY */
};

struct req {
	struct buf body;
	bool too_big;
	int64_t t0;
	/* PUT /v1/images/NAME: the body streams into an import instead of
	 * being buffered; an answer decided before it (a refusal) is kept in
	 * early while the body is read and dropped. */
	bool streaming;
	struct import *import;
	bool has_early;
	struct reply early;
};

static struct reply ok(int status, json_t *body)
{
	return (struct reply){ status, body, NULL };
}

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
	__attribute__((format(printf, 3, 4)));
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

/* Who is calling, decided here for both listeners.  On the UNIX socket:
 * the peer's user (peer_owner).  Over HTTP: the user of the bearer token
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

static struct reply do_info(struct api *a)
{
	struct hostd *h = a->h;
	struct storage_pool_info pi;
	json_t *st = json_pack("{s:s, s:s}", "backend", storage_name(h->st),
			       "location", storage_location(h->st));

	if (storage_pool_info(h->st, &pi, NULL) == 0) {
		json_object_set_new(st, "total", json_integer((json_int_t)pi.total_bytes));
		json_object_set_new(st, "used", json_integer((json_int_t)pi.used_bytes));
	}
	return ok(200, json_pack("{s:s, s:s, s:s, s:o, s:s, s:s, s:s, s:I, s:s, s:s?, s:s}",
				 "version", VERSION, "hypervisor", virt_hypervisor(h->virt),
				 "libvirt", virt_version(h->virt), "storage", st,
				 "network", h->cfg.network, "instance", h->instance,
				 "state_dir", h->cfg.state_dir,
				 "uptime_ms", (json_int_t)(mono_ms() - h->started_ms),
				 "hypervisor_note", virt_why_tcg(h->virt),
				 "dashboard", h->dashboard_url[0] ? h->dashboard_url : NULL,
				 "desktop_url", h->cfg.desktop_url));
}

static json_t *machine_out(struct api *a, const struct machine *m)
{
	return machine_json(a->h, m);
}

static struct reply do_list(struct api *a, const char *owner)
{
	struct machine *ms = NULL;
	struct image *imgs = NULL;
	struct db_latest_sample *samples = NULL;
	size_t n = 0, ni = 0, ns = 0;
	struct err e = { 0 };
	struct buf out = BUF_INIT;
	struct reply rep = { .status = 200 };

	/* Thousands of machines (bench/billing.py): the images and the
	 * storage samples are read once, not per machine, and the reply is
	 * written as text, without a JSON tree to build and free.  A listed
	 * machine's "allocated" is its last storage sample (at most a
	 * minute old: what it is billed for); GET of one reads it live. */
	if (db_machine_list(a->h->db, owner, &ms, &n, &e) < 0 ||
	    db_image_list(a->h->db, &imgs, &ni, &e) < 0 ||
	    db_samples_latest(a->h->db, &samples, &ns, &e) < 0) {
		free(ms);
		free(imgs);
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
		machine_write_json(a->h, &ms[i], user, s ? (int64_t)s->bytes : -1, &out);
	}
	buf_adds(&out, "]}");
	free(ms);
	free(imgs);
	free(samples);
	rep.text = buf_detach(&out);
	return rep;
}

static struct reply do_create(struct api *a, const char *owner, const struct buf *body)
{
	static const char *const allowed[] = { "name", "image", "vcpus", "memory", "disk",
					       "start", "wait", "idle", NULL };
	struct err e = { 0 };
	struct machine m;
	struct create_req r = { .owner = owner, .image = "tiny", .vcpus = 1,
				.memory = 512ULL << 20 };
	bool start = false, wait = false;
	json_t *j = api_parse_body(body, allowed, &e), *v;
	int64_t ready = -1;
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
	uint64_t mem = 0;
	bool idle_set;
	if (get_idle(j, &r.idle_timeout, &idle_set, &e) < 0 ||
	    get_int(j, "vcpus", 1, 1 << 20, &r.vcpus, &e) < 0 ||
	    api_get_size(j, "memory", 1ULL << 20, &mem, &e) < 0 ||
	    api_get_size(j, "disk", 1, &r.disk, &e) < 0 ||
	    get_bool(j, "start", &start, &e) < 0 || get_bool(j, "wait", &wait, &e) < 0)
		goto out;
	if (mem)
		r.memory = mem;
	if (machine_create(a->h, &r, &m, &e) < 0)
		goto out;
	if (start) {
		/* Create-and-start gives a running machine or nothing. */
		struct act_opts o = { .wait = wait };
		if (machine_act(a->h, owner, r.name, ACT_START, &o, &m, &ready, &e) < 0) {
			if (machine_delete(a->h, owner, r.name, NULL) < 0)
				log_error("create %s: cannot remove the machine that failed to start",
					  r.name);
			goto out;
		}
	}
out:
	json_decref(j);
	if (err_isset(&e))
		return fail(&e);
	/* Storage is billed from its creation, not from the next minute. */
	sampler_record(a->h, &m);
	rep = ok(201, machine_out(a, &m));
	if (ready >= 0)
		json_object_set_new(rep.body, "ready_ms", json_integer(ready));
	return rep;
}

/* PATCH /v1/machines/NAME: change a setting of a machine (its idle
 * timeout), whatever its state. */
static struct reply do_patch(struct api *a, const char *owner, const char *name,
			     const struct buf *body)
{
	static const char *const allowed[] = { "idle", NULL };
	struct err e = { 0 };
	struct machine m;
	int64_t idle = 0;
	bool set;
	json_t *j = api_parse_body(body, allowed, &e);

	if (!j || get_idle(j, &idle, &set, &e) < 0) {
		json_decref(j);
		return fail(&e);
	}
	json_decref(j);
	if (!set)
		return fail_now(400, "nothing_to_change", "nothing to change: give \"idle\"");
	if (db_machine_get(a->h->db, owner, name, &m, &e) < 0 ||
	    db_machine_set_idle(a->h->db, m.id, idle, &e) < 0 ||
	    db_machine_get_id(a->h->db, m.id, &m, &e) < 0)
		return fail(&e);
	log_info("machine %s/%s: idle timeout %lld (0: default, -1: never)", owner, name,
		 (long long)idle);
	return ok(200, machine_out(a, &m));
}

static struct reply do_action(struct api *a, const char *owner, const char *name,
			      const char *action, const struct buf *body)
{
	static const char *const allowed[] = { "timeout", "wait", NULL };
	struct err e = { 0 };
	enum machine_action act;
	struct act_opts o = { 0 };
	struct machine m;
	int64_t ready = -1;
	json_t *j;
	struct reply rep;

	if (machine_action_parse(action, &act) < 0)
		return fail_now(404, "not_found", "no action '%s' (start, stop, suspend, "
				"resume, restart)", action);
	j = api_parse_body(body, allowed, &e);
	if (!j)
		return fail(&e);
	if (get_int(j, "timeout", 1, 3600, &o.timeout_s, &e) < 0 ||
	    get_bool(j, "wait", &o.wait, &e) < 0) {
		json_decref(j);
		return fail(&e);
	}
	json_decref(j);
	if (machine_act(a->h, owner, name, act, &o, &m, &ready, &e) < 0)
		return fail(&e);
	rep = ok(200, machine_out(a, &m));
	if (ready >= 0)
		json_object_set_new(rep.body, "ready_ms", json_integer(ready));
	return rep;
}

/* The SSH credential of OWNER's machine NAME: its endpoint, the image's
 * user and the gateway's private key, the key to every machine.  WAKE
 * starts a stopped or suspended machine and waits for its SSH first;
 * without it a machine that is not running is 409 "not_running" with its
 * "state".  For the gateway (GATEWAY), a machine OWNER does not have is
 * 404 "no_machine", "no machine NAME": the same whoever else has one. */
static struct reply ssh_credential(struct api *a, const char *owner, const char *name,
				   bool wake, bool gateway)
{
	struct err e = { 0 };
	struct machine m;
	struct image img;
	char host[64];
	int port, r;
	int64_t ready = -1;
	struct reply rep;

	if (db_machine_get(a->h->db, owner, name, &m, &e) < 0)
		goto lookup_failed;
	/* "running" with an operation under way may be a suspend (the idle
	 * policy's): its end is waited for (up to a minute), then the state
	 * read again, so a connection never gets a guest being saved. */
	for (int64_t t0 = mono_ms(); !strcmp(m.state, "running") && busy_held(a->h->busy, m.id) &&
	     mono_ms() - t0 < 60000;) {
		usleep(100 * 1000);
		if (db_machine_get(a->h->db, owner, name, &m, &e) < 0)
			goto lookup_failed;
	}
	if (strcmp(m.state, "running") != 0) {
		if (!wake) {
			rep = fail_now(409, "not_running", "machine %s is %s", name, m.state);
			json_object_set_new(rep.body, "state", json_string(m.state));
			return rep;
		}
		struct act_opts o = { .wait = true };
		int64_t t0 = mono_ms();
		/* Another operation on it (the idle policy suspending it, say)
		 * is waited for, up to a minute, then the wake goes on. */
		while (machine_act(a->h, owner, name, ACT_START, &o, &m, &ready, &e) < 0) {
			if (e.status != 409 || strcmp(e.code, "busy") != 0 ||
			    mono_ms() - t0 > 60000)
				goto lookup_failed;
			err_clear(&e);
			usleep(200 * 1000);
		}
		prom_wake(mono_ms() - t0);
	}
	if (db_image_get(a->h->db, m.image, &img, &e) < 0)
		return fail(&e);
	r = machine_endpoint(a->h, &m, host, sizeof(host), &port, &e);
	if (r < 0)
		return fail(&e);
	if (r > 0)
		return fail_now(503, "no_address", "machine %s has no address yet", name);
	/* A connection is about to start: the idle policy must not take the
	 * machine away before its session or exec is registered. */
	idle_touch(a->h, m.id, "connect");
	return ok(200, json_pack("{s:s, s:i, s:s, s:s, s:I}", "host", host, "port", port,
				 "user", img.user, "private_key", a->h->key.private_pem,
				 "woke_ms", (json_int_t)ready));
lookup_failed:
	/* No such machine (or it went while waking): the gateway's answer
	 * must not tell another owner's machine from none. */
	if (gateway && e.status == 404)
		return fail_now(404, "no_machine", "no machine %s", name);
	return fail(&e);
}

/* POST /v1/machines/NAME/ssh: the credential `berth exec` uses.  Root
 * only. */
static struct reply do_ssh(struct api *a, struct MHD_Connection *c, const char *owner,
			   const char *name, uid_t uid, const struct buf *body)
{
	static const char *const allowed[] = { "wake", NULL };
	struct err e = { 0 };
	bool wake = false;
	json_t *j;
	struct reply rep;
	struct machine m;
	struct ucred cred;
	socklen_t len = sizeof(cred);

	if (uid != 0)
		return fail_now(403, "forbidden", "only root may obtain SSH credentials");
	j = api_parse_body(body, allowed, &e);
	if (!j || get_bool(j, "wake", &wake, &e) < 0) {
		json_decref(j);
		return fail(&e);
	}
	json_decref(j);
	rep = ssh_credential(a, owner, name, wake, false);
	/* berth exec holds the machine active while its process lives. */
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (rep.status == 200 && ci &&
	    getsockopt(ci->connect_fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 &&
	    db_machine_get(a->h->db, owner, name, &m, NULL) == 0)
		idle_exec(a->h, m.id, cred.pid);
	return rep;
}

/* POST /v1/machines/NAME/desktop: a one-time URL of the machine's screen
 * (hostd/desktop.h). */
static struct reply do_desktop(struct api *a, const char *owner, const char *name,
			       const struct buf *body)
{
	static const char *const allowed[] = { NULL };
	struct err e = { 0 };
	char token[64], url[512];
	int64_t expires;
	json_t *j = api_parse_body(body, allowed, &e);

	if (!j)
		return fail(&e);
	json_decref(j);
	if (desktop_mint(a->h->desktop, owner, name, token, sizeof(token), &expires, &e) < 0)
		return fail(&e);
	/* The token rides in the fragment: browsers never send it in a
	 * request line or a Referer. */
	snprintf(url, sizeof(url), "%s/%s/%s/#token=%s", a->h->cfg.desktop_url, owner, name,
		 token);
	return ok(200, json_pack("{s:s, s:s, s:I}", "url", url, "token", token,
				 "expires", (json_int_t)expires));
}

static struct reply do_images(struct api *a)
{
	struct image *imgs;
	size_t n;
	struct err e = { 0 };
	json_t *arr;

	if (db_image_list(a->h->db, &imgs, &n, &e) < 0)
		return fail(&e);
	arr = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, image_json(a->h, &imgs[i]));
	free(imgs);
	return ok(200, json_pack("{s:o}", "images", arr));
}

static const char *query_arg(struct MHD_Connection *c, const char *key)
{
	const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, key);

	return v && *v ? v : NULL;
}

/* PUT /v1/images/NAME?sha256=&format=&like=&user=&origin=: the body is the
 * image file.  Boot settings come from the image LIKE (its kernel, initrd,
 * command line and user), else the disk boots by its own boot loader. */
static struct import *start_import(struct api *a, struct MHD_Connection *c, const char *name,
				   struct reply *early)
{
	struct import_opts o = { .name = name, .boot = "firmware", .user = "root" };
	struct image like;
	struct err e = { 0 };
	char owner[64];
	uid_t uid = (uid_t)-1;
	const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
						     MHD_HTTP_HEADER_CONTENT_LENGTH);
	struct import *im;

	if (caller(a, c, owner, sizeof(owner), &uid, &e) < 0) {
		*early = fail(&e);
		return NULL;
	}
	if (uid != 0) {
		*early = fail_now(403, "forbidden", "only root may import images");
		return NULL;
	}
	o.sha256 = query_arg(c, "sha256");
	o.format = query_arg(c, "format");
	o.origin = query_arg(c, "origin");
	o.length = cl ? strtoull(cl, NULL, 10) : 0;
	const char *like_name = query_arg(c, "like");
	if (like_name) {
		if (db_image_get(a->h->db, like_name, &like, &e) < 0) {
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
	im = import_begin(a->h, &o, &e);
	if (!im)
		*early = fail(&e);
	return im;
}

static ssize_t export_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
	ssize_t n = export_read(cls, buf, max);

	(void)pos;
	if (n < 0)
		return MHD_CONTENT_READER_END_WITH_ERROR;
	return n == 0 ? MHD_CONTENT_READER_END_OF_STREAM : n;
}

static void export_free(void *cls)
{
	export_end(cls);
}

/* GET /v1/machines/NAME/export[?checkpoint=C]: the disk as one zstd frame.
 * A failure half-way ends the chunked body without its last chunk, which
 * a client sees as a truncated transfer. */
static struct reply do_export(struct api *a, struct MHD_Connection *c, const char *owner,
			      const char *name)
{
	struct err e = { 0 };
	const char *ckpt = query_arg(c, "checkpoint");
	struct export *x;
	char size[32];

	if (ckpt && !name_valid(ckpt))
		return fail_now(400, "invalid_name", "invalid checkpoint name '%s'", ckpt);
	x = export_begin(a->h, owner, name, ckpt, &e);
	if (!x)
		return fail(&e);
	struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 1 << 20,
								       export_reader, x,
								       export_free);
	if (!resp) {
		export_end(x);
		return fail_now(500, "internal", "cannot create the export response");
	}
	snprintf(size, sizeof(size), "%llu", (unsigned long long)export_size(x));
	MHD_add_response_header(resp, "Content-Type", "application/zstd");
	MHD_add_response_header(resp, "X-Berth-Disk-Size", size);
	return (struct reply){ 200, NULL, resp };
}

static struct reply do_image_build(struct api *a, uid_t uid, const struct buf *body)
{
	static const char *const allowed[] = { "recipe", "name", NULL };
	struct err e = { 0 };
	struct image img;
	const char *recipe = NULL, *name = NULL;
	json_t *j;
	struct reply rep;

	if (uid != 0)
		return fail_now(403, "forbidden", "only root may build images");
	j = api_parse_body(body, allowed, &e);
	if (!j)
		return fail(&e);
	if (json_unpack(j, "{s:s, s?s}", "recipe", &recipe, "name", &name) < 0) {
		json_decref(j);
		return fail_now(400, "invalid_json", "recipe (a string) is required");
	}
	if (image_build(a->h, recipe, name ? name : recipe, &img, &e) < 0)
		rep = fail(&e);
	else
		rep = ok(201, image_json(a->h, &img));
	json_decref(j);
	return rep;
}

static void ledger_row(const char *id, const char *owner, const char *name,
		       const char *state, int64_t start, int64_t end, void *data)
{
	json_array_append_new(data, json_pack("{s:s, s:s, s:s, s:s, s:I, s:o}",
		"machine_id", id, "owner", owner, "name", name, "state", state,
		"start", (json_int_t)start, "end", end ? json_integer(end) : json_null()));
}

static struct reply do_ledger(struct api *a, const char *owner)
{
	struct err e = { 0 };
	json_t *all = json_array(), *mine = json_array();
	size_t i;
	json_t *row;

	if (db_ledger_walk(a->h->db, NULL, ledger_row, all, &e) < 0) {
		json_decref(all);
		json_decref(mine);
		return fail(&e);
	}
	json_array_foreach(all, i, row)
		if (strcmp(json_string_value(json_object_get(row, "owner")), owner) == 0)
			json_array_append(mine, row);
	json_decref(all);
	return ok(200, json_pack("{s:o}", "ledger", mine));
}

/* GET /metrics: Prometheus text, for root. */
static struct reply do_metrics(struct api *a, uid_t uid)
{
	struct buf out = BUF_INIT;
	struct err e = { 0 };

	if (uid != 0)
		return fail_now(403, "forbidden", "only root may read the metrics");
	if (prom_text(a->h, &out, &e) < 0) {
		buf_free(&out);
		return fail(&e);
	}
	struct MHD_Response *resp = MHD_create_response_from_buffer(out.len, out.data,
								     MHD_RESPMEM_MUST_FREE);
	MHD_add_response_header(resp, "Content-Type", "text/plain; version=0.0.4");
	return (struct reply){ 200, NULL, resp };
}

/* GET /v1/usage?since=EPOCH[&all=1]: the caller's usage; root's all=1
 * gives every user's. */
static struct reply do_usage(struct api *a, struct MHD_Connection *c, const char *owner,
			     uid_t uid)
{
	struct err e = { 0 };
	const char *since_s = query_arg(c, "since");
	const char *all = query_arg(c, "all");
	int64_t now = now_s(), since = 0;
	char *end = NULL;

	if (since_s) {
		errno = 0;
		since = strtoll(since_s, &end, 10);
		if (errno || *end || since < 0 || since > now)
			return fail_now(400, "invalid_since",
					"since '%s' is not a time in seconds since the epoch, "
					"not in the future", since_s);
	}
	if (all && strcmp(all, "1") == 0 && uid != 0)
		return fail_now(403, "forbidden", "only root may see every user's usage");
	/* step=S: the cost per S-second bucket too (the dashboard's chart). */
	const char *step_s = query_arg(c, "step");
	int64_t step = 0;
	if (step_s) {
		errno = 0;
		step = strtoll(step_s, &end, 10);
		if (errno || *end || step < 60 || step > 31 * 86400 || (now - since) / step >= 1000)
			return fail_now(400, "invalid_step", "step '%s' is not a number of seconds "
					"from 60 to 2678400 giving at most 1000 buckets since %lld",
					step_s, (long long)since);
	}
	json_t *j = usage_json_series(a->h, all && strcmp(all, "1") == 0 ? NULL : owner, since,
				      now, step, &e);
	return j ? ok(200, j) : fail(&e);
}

static struct reply do_checkpoint(struct api *a, const char *owner, const char *name,
				  const struct buf *body)
{
	static const char *const allowed[] = { "name", "memory", NULL };
	struct err e = { 0 };
	struct checkpoint c;
	const char *ckpt = NULL;
	int memory = 0;
	json_t *j = api_parse_body(body, allowed, &e);
	struct reply rep;

	if (!j)
		return fail(&e);
	if (json_unpack(j, "{s?s, s?b}", "name", &ckpt, "memory", &memory) < 0) {
		json_decref(j);
		return fail_now(400, "invalid_json", "name must be a string, memory true or false");
	}
	int64_t t0 = mono_us();
	if (checkpoint_create(a->h, owner, name, ckpt, memory, &c, &e) < 0) {
		rep = fail(&e);
	} else {
		rep = ok(201, checkpoint_json(&c));
		json_object_set_new(rep.body, "took_ms", json_real((double)(mono_us() - t0) / 1000.0));
	}
	json_decref(j);
	return rep;
}

static struct reply do_restore(struct api *a, const char *owner, const char *name,
			       const struct buf *body)
{
	static const char *const allowed[] = { "checkpoint", "wait", NULL };
	struct err e = { 0 };
	struct machine m;
	const char *ckpt = NULL;
	int wait = 0;
	json_t *j = api_parse_body(body, allowed, &e);
	struct reply rep;

	if (!j)
		return fail(&e);
	if (json_unpack(j, "{s:s, s?b}", "checkpoint", &ckpt, "wait", &wait) < 0) {
		json_decref(j);
		return fail_now(400, "invalid_json", "checkpoint (a string) is required");
	}
	if (machine_restore(a->h, owner, name, ckpt, wait, &m, &e) < 0)
		rep = fail(&e);
	else
		rep = ok(200, machine_out(a, &m));
	json_decref(j);
	return rep;
}

static struct reply do_fork(struct api *a, const char *owner, const char *name,
			    const struct buf *body)
{
	static const char *const allowed[] = { "name", "from", "live", "start", "wait", NULL };
	struct err e = { 0 };
	struct machine m;
	const char *new_name = NULL, *from = NULL;
	int start = 0, wait = 0, live = 0;
	json_t *j = api_parse_body(body, allowed, &e);
	struct reply rep;

	if (!j)
		return fail(&e);
	if (json_unpack(j, "{s:s, s?s, s?b, s?b, s?b}", "name", &new_name, "from", &from,
			"live", &live, "start", &start, "wait", &wait) < 0) {
		json_decref(j);
		return fail_now(400, "invalid_json", "name (a string) is required; from is a "
				"string, start and wait are true or false");
	}
	int64_t t0 = mono_us();
	if (machine_fork(a->h, owner, name, new_name, from, live, start, wait, &m, &e) < 0) {
		rep = fail(&e);
	} else {
		sampler_record(a->h, &m);
		rep = ok(201, machine_out(a, &m));
		json_object_set_new(rep.body, "took_ms", json_real((double)(mono_us() - t0) / 1000.0));
	}
	json_decref(j);
	return rep;
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

static struct reply do_keys(struct api *a, const char *owner)
{
	struct userkey *ks;
	size_t n;
	struct err e = { 0 };
	json_t *arr;

	if (db_key_list(a->h->db, owner, &ks, &n, &e) < 0)
		return fail(&e);
	arr = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, userkey_json(&ks[i]));
	free(ks);
	return ok(200, json_pack("{s:o}", "keys", arr));
}

/* The "key" field of BODY: a string without NUL bytes, into *LINE (owned
 * by *J, which the caller decrefs). */
static int get_key_line(const struct buf *body, json_t **j, const char **line,
			struct err *e)
{
	static const char *const allowed[] = { "key", NULL };
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

static struct reply do_key_add(struct api *a, const char *owner, const struct buf *body)
{
	struct err e = { 0 };
	struct userkey k;
	const char *line = NULL;
	json_t *j = NULL;

	if (get_key_line(body, &j, &line, &e) == 0 && userkey_parse(line, &k, &e) == 0) {
		snprintf(k.owner, sizeof(k.owner), "%s", owner);
		if (db_key_insert(a->h->db, &k, &e) == 0)
			log_info("key %lld of %s added: %s %s", (long long)k.id, owner, k.type,
				 k.fingerprint);
	}
	json_decref(j);
	if (err_isset(&e))
		return fail(&e);
	return ok(201, userkey_json(&k));
}

static struct reply do_key_delete(struct api *a, const char *owner, const char *id_s)
{
	struct err e = { 0 };
	int64_t id = parse_id(id_s);

	if (id < 0)
		return fail_now(400, "invalid_id", "invalid key id '%.40s': a positive integer "
				"(berth key ls shows them)", id_s);
	if (db_key_delete(a->h->db, owner, id, &e) < 0)
		return fail(&e);
	log_info("key %lld of %s removed", (long long)id, owner);
	return ok(200, json_pack("{s:I}", "deleted", (json_int_t)id));
}

static struct reply do_tokens(struct api *a, const char *owner)
{
	struct token *ts;
	size_t n;
	struct err e = { 0 };
	json_t *arr;

	if (db_token_list(a->h->db, owner, &ts, &n, &e) < 0)
		return fail(&e);
	arr = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, token_json(&ts[i]));
	free(ts);
	return ok(200, json_pack("{s:o}", "tokens", arr));
}

/* POST /v1/tokens {"name"}: the secret is in this answer and nowhere
 * else. */
static struct reply do_token_create(struct api *a, const char *owner, const struct buf *body)
{
	static const char *const allowed[] = { "name", NULL };
	struct err e = { 0 };
	struct token t;
	char secret[TOKEN_SECRET_LEN + 1];
	json_t *j = api_parse_body(body, allowed, &e), *v;
	struct reply rep;

	if (!j)
		return fail(&e);
	v = json_object_get(j, "name");
	if (v && !json_is_string(v)) {
		json_decref(j);
		return fail_now(400, "invalid_token_name", "name must be a string");
	}
	if (token_create(a->h, owner, v ? json_string_value(v) : NULL, &t, secret,
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

static struct reply do_token_delete(struct api *a, const char *owner, const char *id_s)
{
	struct err e = { 0 };
	int64_t id = parse_id(id_s);

	if (id < 0)
		return fail_now(400, "invalid_id", "invalid token id '%.40s': a positive integer "
				"(berth token ls shows them)", id_s);
	if (db_token_delete(a->h->db, owner, id, &e) < 0)
		return fail(&e);
	log_info("token %lld of %s revoked", (long long)id, owner);
	return ok(200, json_pack("{s:I}", "deleted", (json_int_t)id));
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

/* POST /v1/gateway/auth: whose is this key?  Nothing but 404
 * "unknown_key" for a key nobody registered, or one no one could (an RSA
 * key too short, a refused type). */
static struct reply gw_auth(struct api *a, const struct buf *body)
{
	struct err e = { 0 };
	struct userkey k, found;
	const char *line = NULL;
	json_t *j = NULL;
	struct reply rep;

	if (get_key_line(body, &j, &line, &e) < 0) {
		rep = fail(&e);
	} else if (userkey_parse(line, &k, &e) < 0) {
		log_debug("gateway auth: %s", e.msg);
		rep = e.status == 400 ? fail_now(404, "unknown_key", "unknown key") : fail(&e);
	} else if (db_key_find(a->h->db, k.type, k.blob, &found, &e) < 0) {
		rep = fail(&e);
	} else {
		rep = ok(200, json_pack("{s:s, s:I, s:s}", "user", found.owner,
					"key_id", (json_int_t)found.id,
					"fingerprint", found.fingerprint));
	}
	json_decref(j);
	return rep;
}

/* POST /v1/gateway/connect: the SSH credential of a user's machine. */
static struct reply gw_connect(struct api *a, const struct buf *body)
{
	static const char *const allowed[] = { "user", "machine", "wake", NULL };
	struct err e = { 0 };
	const char *user = NULL, *machine = NULL;
	bool wake = false;
	json_t *j = api_parse_body(body, allowed, &e);
	struct reply rep;

	if (!j || get_user_machine(j, &user, &machine, &e) < 0 ||
	    get_bool(j, "wake", &wake, &e) < 0)
		rep = fail(&e);
	else
		rep = ssh_credential(a, user, machine, wake, true);
	json_decref(j);
	return rep;
}

/* POST /v1/gateway/sessions: a gateway connected a user to a machine. */
static struct reply gw_session_open(struct api *a, const struct buf *body)
{
	static const char *const allowed[] = { "user", "machine", "kind", "from", NULL };
	struct err e = { 0 };
	const char *user = NULL, *machine = NULL, *kind, *from = "";
	json_t *j = api_parse_body(body, allowed, &e), *v;
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
	v = json_object_get(j, "from");
	if (v && !json_is_string(v)) {
		err_set(&e, 400, "invalid_json", "from must be a string (the client's address)");
		goto out;
	}
	if (v)
		from = json_string_value(v);
	if (db_machine_get(a->h->db, user, machine, &m, &e) < 0) {
		if (e.status == 404) {
			err_clear(&e);
			err_set(&e, 404, "no_machine", "no machine %s", machine);
		}
		goto out;
	}
	id = sessions_open(a->h->sessions, m.id, user, machine, kind, from, &e);
out:
	json_decref(j);
	if (err_isset(&e))
		return fail(&e);
	return ok(201, json_pack("{s:I}", "session", (json_int_t)id));
}

/* DELETE /v1/gateway/sessions/ID: the connection ended. */
static struct reply gw_session_close(struct api *a, const char *id_s, const struct buf *body)
{
	static const char *const allowed[] = { "bytes_in", "bytes_out", NULL };
	struct err e = { 0 };
	int64_t id = parse_id(id_s);
	json_t *j, *v;
	uint64_t bytes[2] = { 0, 0 };
	struct session s;

	if (id < 0)
		return fail_now(400, "invalid_id", "invalid session id '%.40s'", id_s);
	j = api_parse_body(body, allowed, &e);
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
	if (sessions_close(a->h->sessions, id, bytes[0], bytes[1], &s, &e) < 0)
		return fail(&e);
	return ok(200, json_pack("{s:I, s:I}", "closed", (json_int_t)id,
				 "seconds", (json_int_t)(now_s() - s.opened)));
}

/* DELETE /v1/gateway/sessions {"kind"}: a gateway starts, and whatever it
 * had open before (it crashed, or was killed) is over. */
static struct reply gw_sessions_reset(struct api *a, const struct buf *body)
{
	static const char *const allowed[] = { "kind", NULL };
	struct err e = { 0 };
	const char *kind = NULL;
	json_t *j = api_parse_body(body, allowed, &e);
	int n;

	if (!j)
		return fail(&e);
	if (json_unpack(j, "{s:s}", "kind", &kind) < 0 ||
	    (strcmp(kind, "ssh") != 0 && strcmp(kind, "desktop") != 0)) {
		json_decref(j);
		return fail_now(400, "invalid_kind", "kind must be \"ssh\" or \"desktop\"");
	}
	n = sessions_drop_kind(a->h->sessions, kind);
	json_decref(j);
	return ok(200, json_pack("{s:i}", "dropped", n));
}

/* The /v1/gateway routes (root and the gateway user only). */
static struct reply route_gateway(struct api *a, const char *method, const char *url,
				  char **seg, size_t n, const struct buf *body)
{
	bool post = !strcmp(method, "POST"), del = !strcmp(method, "DELETE");

	if (n == 3 && !strcmp(method, "GET") && !strcmp(seg[2], "epoch")) {
		/* Which run of hostd this is: live sessions do not survive
		 * a restart, so a gateway that sees a new epoch opens its
		 * connections' sessions again. */
		char epoch[64];
		snprintf(epoch, sizeof(epoch), "%ld-%lld", (long)getpid(),
			 (long long)a->h->started_ms);
		return ok(200, json_pack("{s:s}", "epoch", epoch));
	}
	if (n == 3 && post && !strcmp(seg[2], "auth"))
		return gw_auth(a, body);
	if (n == 3 && post && !strcmp(seg[2], "connect"))
		return gw_connect(a, body);
	if (n == 3 && post && !strcmp(seg[2], "sessions"))
		return gw_session_open(a, body);
	if (n == 3 && del && !strcmp(seg[2], "sessions"))
		return gw_sessions_reset(a, body);
	if (n == 4 && del && !strcmp(seg[2], "sessions"))
		return gw_session_close(a, seg[3], body);
	return fail_now(404, "not_found", "no route %s %s", method, url);
}

/* Split "/v1/machines/NAME/ACTION" into at most 4 segments. */
static size_t split_path(char *path, char *seg[], size_t max)
{
	size_t n = 0;
	char *save = NULL;

	for (char *s = strtok_r(path, "/", &save); s && n < max; s = strtok_r(NULL, "/", &save))
		seg[n++] = s;
	return n;
}

static struct reply route(struct api *a, struct MHD_Connection *c, const char *method,
			  const char *url, const struct buf *body)
{
	char owner[64], path[1024];
	char *seg[6] = { 0 };
	size_t n;
	uid_t uid = (uid_t)-1;
	struct err e = { 0 };
	bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST"),
	     del = !strcmp(method, "DELETE");

	if (caller(a, c, owner, sizeof(owner), &uid, &e) < 0)
		return fail(&e);
	if (strlen(url) >= sizeof(path))
		return fail_now(414, "uri_too_long", "request path too long");
	snprintf(path, sizeof(path), "%s", url);
	n = split_path(path, seg, 6);
	/* The gateway user's calls are confined to the gateway routes, and
	 * those are for it and root alone. */
	bool gateway_route = n >= 2 && !strcmp(seg[0], "v1") && !strcmp(seg[1], "gateway");
	/* The gateways' routes do not exist over HTTP. */
	if (a->http && (gateway_route || n < 1 || strcmp(seg[0], "v1") != 0))
		return fail_now(404, "not_found", "no route %s %s", method, url);
	/* A token makes no credentials: a stolen one must not outlive its
	 * revocation through new tokens or SSH keys. */
	if (a->http && post && n == 2 && (!strcmp(seg[1], "tokens") || !strcmp(seg[1], "keys")))
		return fail_now(403, "forbidden", "%s are added on the host (berth %s), "
				"not with an API token", seg[1], !strcmp(seg[1], "keys")
				? "key add" : "token create");
	bool gateway_user = a->h->has_gateway && uid == a->h->gateway_uid;
	if (gateway_user && !gateway_route)
		return fail_now(403, "forbidden", "the gateway user %s may use only the "
				"/v1/gateway routes", a->h->cfg.gateway_user);
	if (gateway_route && uid != 0 && !gateway_user)
		return fail_now(403, "forbidden", "only root and the gateway user may use the "
				"/v1/gateway routes");
	if (gateway_route)
		return route_gateway(a, method, url, seg, n, body);
	if (n == 1 && !strcmp(seg[0], "metrics") && get)
		return do_metrics(a, uid);
	if (n < 2 || strcmp(seg[0], "v1") != 0)
		return fail_now(404, "not_found", "no route %s %s", method, url);

	if (n == 2 && !strcmp(seg[1], "info") && get)
		return do_info(a);
	if (n == 2 && !strcmp(seg[1], "ledger") && get)
		return do_ledger(a, owner);
	if (n == 2 && !strcmp(seg[1], "usage") && get)
		return do_usage(a, c, owner, uid);
	if (!strcmp(seg[1], "machines")) {
		if (n == 2 && get)
			return do_list(a, owner);
		if (n == 2 && post)
			return do_create(a, owner, body);
		if (n >= 3 && !name_valid(seg[2]))
			return fail_now(400, "invalid_name", "invalid machine name '%s'", seg[2]);
		if (n == 3 && get) {
			struct machine m;
			uint64_t ex, sh;
			if (db_machine_get(a->h->db, owner, seg[2], &m, &e) < 0)
				return fail(&e);
			struct reply rep = ok(200, machine_out(a, &m));
			usage_machine(a->h, &m, rep.body);
			/* One machine: its allocation split too (the list skips it). */
			if (storage_vol_usage(a->h->st, m.volume, &ex, &sh, NULL) == 0)
				json_object_set_new(rep.body, "usage", json_pack("{s:I, s:I}",
					"exclusive", (json_int_t)ex, "shared", (json_int_t)sh));
			return rep;
		}
		if (n == 3 && !strcmp(method, "PATCH"))
			return do_patch(a, owner, seg[2], body);
		if (n == 3 && del) {
			struct machine m;
			if (db_machine_get(a->h->db, owner, seg[2], &m, &e) < 0 ||
			    machine_delete(a->h, owner, seg[2], &e) < 0)
				return fail(&e);
			/* A deleted machine has no sessions left. */
			sessions_drop_machine(a->h->sessions, m.id);
			return ok(200, json_pack("{s:s}", "deleted", seg[2]));
		}
		if (n == 4 && post && !strcmp(seg[3], "desktop"))
			return do_desktop(a, owner, seg[2], body);
		if (n == 4 && post && !strcmp(seg[3], "ssh"))
			return do_ssh(a, c, owner, seg[2], uid, body);
		if (n == 4 && get && !strcmp(seg[3], "export"))
			return do_export(a, c, owner, seg[2]);
		if (n == 4 && !strcmp(seg[3], "checkpoints")) {
			if (post)
				return do_checkpoint(a, owner, seg[2], body);
			if (get) {
				json_t *l = checkpoint_list_json(a->h, owner, seg[2], &e);
				return l ? ok(200, l) : fail(&e);
			}
		}
		if (n == 5 && del && !strcmp(seg[3], "checkpoints")) {
			if (checkpoint_delete(a->h, owner, seg[2], seg[4], &e) < 0)
				return fail(&e);
			return ok(200, json_pack("{s:s}", "deleted", seg[4]));
		}
		if (n == 4 && post && !strcmp(seg[3], "restore"))
			return do_restore(a, owner, seg[2], body);
		if (n == 4 && post && !strcmp(seg[3], "fork"))
			return do_fork(a, owner, seg[2], body);
		if (n == 4 && post)
			return do_action(a, owner, seg[2], seg[3], body);
	}
	if (!strcmp(seg[1], "tokens")) {
		if (n == 2 && get)
			return do_tokens(a, owner);
		if (n == 2 && post)
			return do_token_create(a, owner, body);
		if (n == 3 && del)
			return do_token_delete(a, owner, seg[2]);
	}
	if (!strcmp(seg[1], "keys")) {
		if (n == 2 && get)
			return do_keys(a, owner);
		if (n == 2 && post)
			return do_key_add(a, owner, body);
		if (n == 3 && del)
			return do_key_delete(a, owner, seg[2]);
	}
	if (!strcmp(seg[1], "images")) {
		if (n == 2 && get)
			return do_images(a);
		if (n == 2 && post)
			return do_image_build(a, uid, body);
		if (n == 3 && get) {
			struct image img;
			if (db_image_get(a->h->db, seg[2], &img, &e) < 0)
				return fail(&e);
			return ok(200, image_json(a->h, &img));
		}
		if (n == 3 && del) {
			if (uid != 0)
				return fail_now(403, "forbidden", "only root may delete images");
			if (image_delete(a->h, seg[2], &e) < 0)
				return fail(&e);
			return ok(200, json_pack("{s:s}", "deleted", seg[2]));
		}
	}
	return fail_now(404, "not_found", "no route %s %s", method, url);
}

static enum MHD_Result send_reply(struct MHD_Connection *c, struct reply r, int64_t t0,
				  bool http)
{
	prom_api(r.status);
	if (r.stream) {
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

enum MHD_Result api_handler(void *cls, struct MHD_Connection *c, const char *url,
			    const char *method, const char *version,
			    const char *upload_data, size_t *upload_data_size,
			    void **con_cls)
{
	struct api *a = cls;
	struct req *r = *con_cls;

	(void)version;
	if (!r) {
		r = calloc(1, sizeof(*r));
		if (!r)
			return MHD_NO;
		r->t0 = mono_us();
		ext_time_reset();
		*con_cls = r;
		char name[64];
		if (!strcmp(method, "PUT") && sscanf(url, "/v1/images/%63[a-z0-9-]", name) == 1 &&
		    strlen(url) == strlen("/v1/images/") + strlen(name)) {
			r->streaming = true;
			r->import = start_import(a, c, name, &r->early);
			r->has_early = !r->import;
			if (a->http && r->has_early) {
				/* Refused (no token, not root): the body is not read. */
				r->has_early = false;
				return send_reply(c, r->early, r->t0, a->http);
			}
			return MHD_YES;
		}
		const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
							     MHD_HTTP_HEADER_CONTENT_LENGTH);
		if (cl && strtoull(cl, NULL, 10) > a->h->cfg.max_body)
			r->too_big = true;
		if (a->http) {
			/* From the network: no body is read for a caller
			 * without a valid token, nor one that is too large. */
			char who[64];
			uid_t uid;
			struct err e = { 0 };
			if (caller(a, c, who, sizeof(who), &uid, &e) < 0)
				return send_reply(c, fail(&e), r->t0, a->http);
			if (r->too_big)
				return send_reply(c, fail_now(413, "body_too_large",
					"request body larger than %llu bytes",
					(unsigned long long)a->h->cfg.max_body), r->t0, a->http);
		}
		return MHD_YES;
	}
	if (r->streaming) {
		if (*upload_data_size) {
			if (r->import)
				import_feed(r->import, upload_data, *upload_data_size);
			*upload_data_size = 0;
			return MHD_YES;
		}
		struct reply srep = r->early;
		if (!r->has_early) {
			struct image img;
			struct err e = { 0 };
			struct import *im = r->import;
			r->import = NULL;
			srep = import_end(im, &img, &e) < 0 ? fail(&e) : ok(201, image_json(a->h, &img));
		}
		r->has_early = false;
		if (srep.status >= 500)
			log_warn("%s %s: %d", method, url, srep.status);
		return send_reply(c, srep, r->t0, a->http);
	}
	if (*upload_data_size) {
		if (!r->too_big && r->body.len + *upload_data_size <= a->h->cfg.max_body)
			buf_add(&r->body, upload_data, *upload_data_size);
		else
			r->too_big = true;
		*upload_data_size = 0;
		return MHD_YES;
	}
	struct reply rep;
	if (r->too_big)
		rep = fail_now(413, "body_too_large", "request body larger than %llu bytes",
			       (unsigned long long)a->h->cfg.max_body);
	else
		rep = route(a, c, method, url, &r->body);
	if (rep.status >= 500)
		log_warn("%s %s: %d %s", method, url, rep.status,
			 json_string_value(json_object_get(json_object_get(rep.body, "error"),
							   "message")));
	else
		log_debug("%s %s: %d", method, url, rep.status);
	return send_reply(c, rep, r->t0, a->http);
}

void api_completed(void *cls, struct MHD_Connection *c, void **con_cls,
		   enum MHD_RequestTerminationCode toe)
{
	struct req *r = *con_cls;

	(void)cls;
	(void)c;
	(void)toe;
	if (r) {
		/* The client went away during an import. */
		import_abort(r->import);
		if (r->has_early)
			json_decref(r->early.body);
		buf_free(&r->body);
		free(r);
		*con_cls = NULL;
	}
}

struct api *api_start(struct hostd *h, const char *path, struct err *e)
{
	struct api *a = calloc(1, sizeof(*a));
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	if (!a)
		abort();
	a->h = h;
	a->fd = -1;
	if (strlen(path) >= sizeof(sa.sun_path)) {
		err_set(e, 400, "invalid_config", "socket path too long (%zu > %zu): %s",
			strlen(path), sizeof(sa.sun_path) - 1, path);
		goto fail;
	}
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	snprintf(a->path, sizeof(a->path), "%s", path);
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
	/* Any local user may call (as themselves: peer_owner); hostd's umask
	 * keeps the socket private until the chmod. */
	if (bind(a->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(path, 0666) < 0 ||
	    listen(a->fd, 128) < 0) {
		err_errno(e, errno, "listen on %s", path);
		goto fail;
	}
	a->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
				MHD_USE_ERROR_LOG,
				0, NULL, NULL, api_handler, a,
				MHD_OPTION_LISTEN_SOCKET, a->fd,
				MHD_OPTION_NOTIFY_COMPLETED, api_completed, a,
				MHD_OPTION_CONNECTION_TIMEOUT, 0u,
				MHD_OPTION_THREAD_STACK_SIZE, (size_t)(1 << 20),
				/* Room for large reads of an image upload. */
				MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(1 << 20),
				MHD_OPTION_END);
	if (!a->d) {
		err_set(e, 500, "internal", "cannot start the HTTP server on %s", path);
		goto fail;
	}
	log_info("API listening on %s", path);
	return a;
fail:
	if (a->fd >= 0)
		close(a->fd);
	free(a);
	return NULL;
}

void api_stop(struct api *a)
{
	if (!a)
		return;
	/* libmicrohttpd closes the listening socket it was given. */
	MHD_stop_daemon(a->d);
	unlink(a->path);
	free(a);
}

struct api *api_http_new(struct hostd *h)
{
	struct api *a = calloc(1, sizeof(*a));

	if (!a)
		abort();
	a->h = h;
	a->fd = -1;
	a->http = true;
	return a;
}

void api_http_free(struct api *a)
{
	free(a);
}
