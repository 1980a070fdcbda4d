#include "web/e2b.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "common/buf.h"
#include "common/hostapi.h"
#include "common/log.h"
#include "common/util.h"
#include "web/preview.h"
#include "web/request.h"
#include "common/banned.h"

/* A request's body, at most. */
#define BODY_MAX (64 << 10)
/* What the SDK is told envd speaks (web/envd.c implements it). */
#define ENVD_VERSION "0.6.4"
/* E2B's default timeout, seconds (create, connect). */
#define DEFAULT_TIMEOUT_S 300
/* The most a list answers at once, and its default (E2B's). */
#define LIST_MAX 100
/* Tries at a free random name. */
#define NAME_TRIES 4

static char domain[200] = "localhost";

struct e2b_req {
	struct buf body;
	bool too_big;
	bool started;
};

/* One call's context: the caller's token and user, hostd's socket. */
struct call {
	struct MHD_Connection *c;
	const char *sock;
	char token[80];         /* berth_HEX */
	char user[64];
};

void e2b_configure(const char *d)
{
	if (d && d[0])
		snprintf(domain, sizeof(domain), "%s", d);
}

bool e2b_host(struct MHD_Connection *c)
{
	char label[64];

	return preview_label_of(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host"), domain,
				label, sizeof(label)) && strcmp(label, "api") == 0;
}

/* ---- answers --------------------------------------------------------------- */

/* Queue STATUS with J (consumed; NULL: no body) and the header NAME:
 * VALUE when NAME is not NULL. */
static enum MHD_Result reply_hdr(struct MHD_Connection *c, unsigned status, json_t *j,
				 const char *name, const char *value)
{
	char *text = NULL;
	struct MHD_Response *r;
	enum MHD_Result ret;

	if (j) {
		text = json_dumps(j, JSON_COMPACT);
		json_decref(j);
		if (!text)
			return MHD_NO;
	}
	r = MHD_create_response_from_buffer(text ? strlen(text) : 0, text ? text : (char *)"",
					    text ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
	if (text)
		MHD_add_response_header(r, "Content-Type", "application/json");
	MHD_add_response_header(r, "Cache-Control", "no-store");
	if (name)
		MHD_add_response_header(r, name, value);
	ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, json_t *j)
{
	return reply_hdr(c, status, j, NULL, NULL);
}

/* E2B's error: {"code": STATUS, "message": MSG}; a 429 says when to come
 * back (the SDK retries on an integer Retry-After). */
static enum MHD_Result fail(struct MHD_Connection *c, unsigned status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static enum MHD_Result fail(struct MHD_Connection *c, unsigned status, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return reply_hdr(c, status, json_pack("{s:i, s:s}", "code", (int)status, "message", msg),
			 status == 429 ? "Retry-After" : NULL, "1");
}

/* hostd's refusal (STATUS, RESP) as E2B's: a quota is a 429 (E2B's
 * concurrency limit), hostd's own 5xx a 500 but 503 (busy) kept. */
static enum MHD_Result fail_hostd(struct MHD_Connection *c, long status, json_t *resp,
				  const char *what)
{
	const char *msg = hostapi_message(resp, "no message");
	const char *code = json_string_value(json_object_get(json_object_get(resp, "error"),
							      "code"));
	unsigned st = (unsigned)status;

	if (status == 403 && code && !strcmp(code, "quota_exceeded"))
		st = 429;
	else if (status >= 500 && status != 503)
		st = 500;
	else if (status < 400)
		st = 500;
	return fail(c, st, "%s: %s", what, msg);
}

/* ---- hostd ----------------------------------------------------------------- */

/* METHOD PATH (BODY: JSON or NULL, not consumed) as the caller: 0 with
 * *STATUS and *RESP, or -1 when hostd could not be reached (logged). */
static int hostd(struct call *k, const char *method, const char *path, json_t *body,
		 long *status, json_t **resp)
{
	char err[256];

	*resp = NULL;
	if (hostapi_call_as(k->sock, k->token, method, path, body, status, resp, err,
			    sizeof(err)) < 0) {
		log_warn("e2b: %s %s: %s", method, path, err);
		return -1;
	}
	return 0;
}

/* ---- pure pieces ----------------------------------------------------------- */

static int hexval(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

/* The LEN bytes of S percent-decoded (PLUS: '+' is a space, as Go's
 * QueryUnescape); malloc'd, NULL when an escape is malformed or decodes
 * to NUL. */
static char *unescape(const char *s, size_t len, bool plus)
{
	char *out = malloc(len + 1), *o = out;

	if (!out)
		abort();
	for (size_t i = 0; i < len; i++) {
		if (s[i] == '%') {
			int hi = i + 2 < len ? hexval(s[i + 1]) : -1;
			int lo = i + 2 < len ? hexval(s[i + 2]) : -1;
			if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
				free(out);
				return NULL;
			}
			*o++ = (char)(hi << 4 | lo);
			i += 2;
		} else {
			*o++ = plus && s[i] == '+' ? ' ' : s[i];
		}
	}
	*o = '\0';
	return out;
}

/* The value of query parameter NAME in QUERY ("a=1&b=2", no '?'),
 * decoded; malloc'd, NULL when absent.  *BAD when it is malformed. */
static char *query_get(const char *query, const char *name, bool *bad)
{
	size_t nl = strlen(name);

	for (const char *p = query; p && *p;) {
		const char *end = strchr(p, '&');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		if (len > nl && !strncmp(p, name, nl) && p[nl] == '=') {
			char *v = unescape(p + nl + 1, len - nl - 1, true);
			if (!v)
				*bad = true;
			return v;
		}
		p = end ? end + 1 : NULL;
	}
	return NULL;
}

/* E2B's metadata filter S (decoded once already): unescaped again as a
 * whole, split on '&' and '=', each key and value unescaped (as E2B's
 * server reads what the SDK encodes twice).  A JSON object, NULL when
 * malformed. */
static json_t *metadata_filter(const char *s)
{
	char *whole = unescape(s, strlen(s), true);
	json_t *f = json_object();

	if (!whole) {
		json_decref(f);
		return NULL;
	}
	for (char *p = whole; p && *p;) {
		char *end = strchr(p, '&'), *eq, *k, *v;
		if (end)
			*end = '\0';
		eq = strchr(p, '=');
		if (!eq || eq == p)
			goto bad;
		k = unescape(p, (size_t)(eq - p), true);
		v = unescape(eq + 1, strlen(eq + 1), true);
		if (!k || !v) {
			free(k);
			free(v);
			goto bad;
		}
		json_object_set_new(f, k, json_string(v));
		free(k);
		free(v);
		p = end ? end + 1 : NULL;
	}
	free(whole);
	return f;
bad:
	free(whole);
	json_decref(f);
	return NULL;
}

/* T (seconds since the epoch) as RFC 3339 into OUT. */
static void rfc3339(int64_t t, char *out, size_t outlen)
{
	time_t tt = (time_t)t;
	struct tm tm;

	gmtime_r(&tt, &tm);
	strftime(out, outlen, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* Sandbox ID of user USER: its machine's name into NAME, or false (no
 * sandbox of USER's: a 404). */
static bool id_name(const char *id, const char *user, char *name, size_t namelen)
{
	size_t n = strlen(id), u = strlen(user);

	if (n <= u + 1 || id[n - u - 1] != '-' || strcmp(id + n - u, user) != 0 ||
	    n - u - 1 >= namelen)
		return false;
	memcpy(name, id, n - u - 1);
	name[n - u - 1] = '\0';
	return name_valid(name);
}

/* E2B's state of machine M: "running" or "paused"; NULL for one being
 * made or deleted (listed as neither). */
static const char *state_of(json_t *m)
{
	const char *s = json_string_value(json_object_get(m, "state"));

	if (!s || !strcmp(s, "deleting"))
		return NULL;
	if (!strcmp(s, "running") || !strcmp(s, "creating"))
		return "running";
	return "paused";	/* suspended, stopped, paused: connect resumes it */
}

static json_int_t jint(json_t *o, const char *k)
{
	return json_integer_value(json_object_get(o, k));
}

/* Machine M of K's user as E2B's ListedSandbox; with DETAIL, its
 * SandboxDetail. */
static json_t *sandbox_of(struct call *k, json_t *m, bool detail)
{
	char id[160], started[32], end[32];
	const char *image = json_string_value(json_object_get(m, "image"));
	const char *st = state_of(m);
	json_t *md = json_object_get(m, "metadata");
	json_t *s;
	int64_t expires = jint(m, "expires");

	snprintf(id, sizeof(id), "%s-%s", json_string_value(json_object_get(m, "name")), k->user);
	rfc3339(jint(m, "created"), started, sizeof(started));
	if (expires > 0)
		rfc3339(expires, end, sizeof(end));
	s = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:s, s:O, s:[]}",
		      "sandboxID", id, "templateID", image ? image : "", "alias",
		      image ? image : "", "clientID", "berth", "startedAt", started, "state",
		      st ? st : "paused", "cpuCount", jint(m, "vcpus"),
		      "memoryMB", jint(m, "memory") >> 20, "diskSizeMB", jint(m, "disk") >> 20,
		      "envdVersion", ENVD_VERSION, "metadata", md ? md : json_object(),
		      "volumeMounts");
	json_object_set_new(s, "endAt", expires > 0 ? json_string(end) : json_null());
	if (detail) {
		const char *pol = json_string_value(json_object_get(json_object_get(m, "egress"),
								   "policy"));
		const char *act = json_string_value(json_object_get(m, "expire_action"));
		json_object_set_new(s, "envdAccessToken", json_string(k->token));
		json_object_set_new(s, "allowInternetAccess",
				    json_boolean(!pol || strcmp(pol, "none") != 0));
		json_object_set_new(s, "lifecycle",
				    json_pack("{s:s, s:b}", "onTimeout",
					      act && !strcmp(act, "suspend") ? "pause" : "kill",
					      "autoResume", 1));
		json_object_set_new(s, "domain", json_null());
	}
	return s;
}

/* The answer to create and connect: E2B's Sandbox. */
static json_t *sandbox_new(struct call *k, json_t *m)
{
	char id[160];
	const char *image = json_string_value(json_object_get(m, "image"));

	snprintf(id, sizeof(id), "%s-%s", json_string_value(json_object_get(m, "name")), k->user);
	return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:n, s:n}", "sandboxID", id,
			 "templateID", image ? image : "", "alias", image ? image : "",
			 "clientID", "berth", "envdVersion", ENVD_VERSION, "envdAccessToken",
			 k->token, "trafficAccessToken", "domain");
}

/* The request's body as a JSON object: an empty body is {}.  NULL with
 * a 400 queued in *RET. */
static json_t *body_object(struct MHD_Connection *c, struct buf *b, enum MHD_Result *ret)
{
	json_error_t je;
	json_t *j;

	if (b->len == 0)
		return json_object();
	j = json_loadb(b->data, b->len, JSON_REJECT_DUPLICATES, &je);
	if (!j || !json_is_object(j)) {
		json_decref(j);
		*ret = fail(c, 400, "the body must be a JSON object%s%s", j ? "" : ": ",
			    j ? "" : je.text);
		return NULL;
	}
	return j;
}

/* ---- the routes ---------------------------------------------------------- */

/* GET /v1/machines/NAME of K's user: 0 with *M, or -1 with the answer
 * (404 naming sandbox ID) queued in *RET. */
static int machine_get(struct call *k, const char *name, const char *id, json_t **m,
		       enum MHD_Result *ret)
{
	char path[128];
	long status;

	*m = NULL;
	snprintf(path, sizeof(path), "/v1/machines/%s", name);
	if (hostd(k, "GET", path, NULL, &status, m) < 0) {
		*ret = fail(k->c, 502, "berth-hostd does not answer");
		return -1;
	}
	if (status == 404) {
		json_decref(*m);
		*m = NULL;
		*ret = fail(k->c, 404, "sandbox %s not found", id);
		return -1;
	}
	if (status != 200) {
		*ret = fail_hostd(k->c, status, *m, "read the sandbox");
		json_decref(*m);
		*m = NULL;
		return -1;
	}
	return 0;
}

/* PATCH machine NAME with BODY (consumed): 0, or -1 with a refusal queued. */
static int machine_patch(struct call *k, const char *name, json_t *body, enum MHD_Result *ret)
{
	char path[128];
	long status;
	json_t *resp = NULL;
	int rc = 0;

	snprintf(path, sizeof(path), "/v1/machines/%s", name);
	if (hostd(k, "PATCH", path, body, &status, &resp) < 0) {
		*ret = fail(k->c, 502, "berth-hostd does not answer");
		rc = -1;
	} else if (status != 200) {
		*ret = fail_hostd(k->c, status, resp, "set the sandbox's timeout");
		rc = -1;
	}
	json_decref(body);
	json_decref(resp);
	return rc;
}

/* "timeout" of J (seconds): DEF when absent; -1 with a 400 queued. */
static int64_t get_timeout(struct MHD_Connection *c, json_t *j, int64_t def, enum MHD_Result *ret)
{
	json_t *v = json_object_get(j, "timeout");

	if (!v || json_is_null(v))
		return def;
	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
	    json_integer_value(v) > 366LL * 86400) {
		*ret = fail(c, 400, "timeout must be whole seconds, 0 to %lld", 366LL * 86400);
		return -1;
	}
	/* 0 is "now": the deadline's next check (hostd's 0 is "none"). */
	return json_integer_value(v) ? json_integer_value(v) : 1;
}

/* A map of strings FIELD of J (null: none): a 400 queued when it is not
 * one (hostd checks the rest). */
static bool map_ok(struct MHD_Connection *c, json_t *j, const char *field, enum MHD_Result *ret)
{
	json_t *v = json_object_get(j, field), *s;
	const char *key;

	if (!v || json_is_null(v))
		return true;
	if (!json_is_object(v)) {
		*ret = fail(c, 400, "%s must be an object of strings", field);
		return false;
	}
	json_object_foreach(v, key, s)
		if (!json_is_string(s)) {
			*ret = fail(c, 400, "%s.%s must be a string", field, key);
			return false;
		}
	return true;
}

/* POST /v2/sandboxes, POST /sandboxes: a machine e2b-HEX8 made from the
 * template or image, started, waited for. */
static enum MHD_Result do_create(struct call *k, struct buf *b)
{
	static const char *const unsupported[] = { "network", "volumeMounts", "mcp", "iam", NULL };
	enum MHD_Result ret = MHD_NO;
	json_t *j = body_object(k->c, b, &ret), *req = NULL, *resp = NULL, *v;
	const char *tmpl = "base";
	int64_t timeout;
	long status = 0;
	char path[160];

	if (!j)
		return ret;
	for (int i = 0; unsupported[i]; i++) {
		v = json_object_get(j, unsupported[i]);
		if (v && !json_is_null(v) &&
		    !(json_is_array(v) && json_array_size(v) == 0) &&
		    !(json_is_object(v) && json_object_size(v) == 0)) {
			ret = fail(k->c, 400, "%s is not supported by berth's E2B API (see berth's "
				   "docs/api.md, \"E2B compatibility\")", unsupported[i]);
			goto out;
		}
	}
	v = json_object_get(j, "templateID");
	if (v && !json_is_string(v)) {
		ret = fail(k->c, 400, "templateID must be a string");
		goto out;
	}
	if (v)
		tmpl = json_string_value(v);
	if (!name_valid(tmpl)) {
		ret = fail(k->c, 400, "templateID '%.64s' is no berth template or image name "
			   "(lower-case letters, digits and '-')", tmpl);
		goto out;
	}
	if ((timeout = get_timeout(k->c, j, DEFAULT_TIMEOUT_S, &ret)) < 0 ||
	    !map_ok(k->c, j, "metadata", &ret) || !map_ok(k->c, j, "envVars", &ret))
		goto out;
	v = json_object_get(j, "autoPause");
	if (v && !json_is_boolean(v) && !json_is_null(v)) {
		ret = fail(k->c, 400, "autoPause must be true or false");
		goto out;
	}
	req = json_pack("{s:b, s:b, s:I, s:s}", "start", 1, "wait", 1, "expires_in",
			(json_int_t)timeout, "expire_action",
			json_is_true(v) ? "suspend" : "delete");
	if ((v = json_object_get(j, "metadata")) && json_is_object(v))
		json_object_set(req, "metadata", v);
	if ((v = json_object_get(j, "envVars")) && json_is_object(v))
		json_object_set(req, "env", v);
	if (json_is_false(json_object_get(j, "allow_internet_access")))
		json_object_set_new(req, "egress", json_string("none"));
	/* A berth template of that name, else the image ("base": the host's
	 * default image). */
	snprintf(path, sizeof(path), "/v1/templates/%s", tmpl);
	if (strcmp(tmpl, "base") != 0) {
		if (hostd(k, "GET", path, NULL, &status, &resp) < 0) {
			ret = fail(k->c, 502, "berth-hostd does not answer");
			goto out;
		}
		json_decref(resp);
		resp = NULL;
		json_object_set_new(req, status == 200 ? "template" : "image", json_string(tmpl));
	}
	for (int i = 0; i < NAME_TRIES; i++) {
		unsigned char rnd[4];
		char name[16];
		if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd)) {
			ret = fail(k->c, 500, "no random bytes: %s", strerror(errno));
			goto out;
		}
		snprintf(name, sizeof(name), "e2b-%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2], rnd[3]);
		json_object_set_new(req, "name", json_string(name));
		json_decref(resp);
		resp = NULL;
		if (hostd(k, "POST", "/v1/machines", req, &status, &resp) < 0) {
			ret = fail(k->c, 502, "berth-hostd does not answer");
			goto out;
		}
		if (status != 409 || !json_string_value(json_object_get(
				json_object_get(resp, "error"), "code")) ||
		    strcmp(json_string_value(json_object_get(json_object_get(resp, "error"),
							     "code")), "exists"))
			break;
	}
	if (status == 201) {
		log_info("e2b: %s made sandbox %s-%s from %s", k->user,
			 json_string_value(json_object_get(resp, "name")), k->user, tmpl);
		ret = reply(k->c, 201, sandbox_new(k, resp));
	} else if (status == 404) {
		/* (no such image: bad input to E2B, as its unknown template) */
		ret = fail(k->c, 400, "template '%s' not found: no berth template or image of that "
			   "name (%s)", tmpl, hostapi_message(resp, ""));
	} else {
		ret = fail_hostd(k->c, status, resp, "create the sandbox");
	}
out:
	json_decref(j);
	json_decref(req);
	json_decref(resp);
	return ret;
}

/* Machines A and B in the list's order: by start time, then name. */
static int cmp_started(json_t *a, json_t *b)
{
	json_int_t ta = jint(a, "created"), tb = jint(b, "created");

	if (ta != tb)
		return ta < tb ? -1 : 1;
	return strcmp(json_string_value(json_object_get(a, "name")),
		      json_string_value(json_object_get(b, "name")));
}

static int cmp_asc(const void *a, const void *b)
{
	return cmp_started(*(json_t *const *)a, *(json_t *const *)b);
}

static int cmp_desc(const void *a, const void *b)
{
	return -cmp_started(*(json_t *const *)a, *(json_t *const *)b);
}

/* Whether machine M's metadata has every pair of FILTER. */
static bool metadata_match(json_t *m, json_t *filter)
{
	json_t *md = json_object_get(m, "metadata"), *v;
	const char *key;

	json_object_foreach(filter, key, v) {
		const char *have = json_string_value(json_object_get(md, key));
		if (!have || strcmp(have, json_string_value(v)))
			return false;
	}
	return true;
}

/* GET /v2/sandboxes (and /sandboxes): K's user's machines as
 * ListedSandbox, filtered (metadata, state, template, startedAfter: all
 * ANDed), ordered by start (order=asc|desc, desc by default), LIMIT at a
 * time; X-Next-Token, when there are more, is "CREATED.NAME" of the last
 * one given, and the next page starts after it. */
static enum MHD_Result do_list(struct call *k, const char *query, bool v2)
{
	enum MHD_Result ret = MHD_NO;
	bool bad = false, want_running = true, want_paused = true, desc = true;
	char *md = query_get(query, "metadata", &bad), *state = query_get(query, "state", &bad);
	char *lim = query_get(query, "limit", &bad), *next = query_get(query, "nextToken", &bad);
	char *order = query_get(query, "order", &bad), *tmpl = query_get(query, "template", &bad);
	char *after = query_get(query, "startedAfter", &bad);
	json_t *filter = NULL, *resp = NULL, *out = json_array(), **ms = NULL;
	long status, limit = LIST_MAX;
	long long next_t = 0;
	char next_name[64] = "", tok[96];
	int64_t after_t = 0;
	size_t n = 0, i;

	if (bad) {
		ret = fail(k->c, 400, "a query parameter is not well percent-encoded");
		goto out;
	}
	if (md && !(filter = metadata_filter(md))) {
		ret = fail(k->c, 400, "metadata must be key=value pairs joined by '&', each "
			   "percent-encoded, the whole percent-encoded again (as the SDK sends it)");
		goto out;
	}
	if (state) {
		want_running = want_paused = false;
		for (char *p = state; p;) {
			char *comma = strchr(p, ',');
			if (comma)
				*comma = '\0';
			if (!strcmp(p, "running"))
				want_running = true;
			else if (!strcmp(p, "paused"))
				want_paused = true;
			else {
				ret = fail(k->c, 400, "state '%.32s': running or paused", p);
				goto out;
			}
			p = comma ? comma + 1 : NULL;
		}
	}
	if (lim) {
		char *end;
		errno = 0;
		limit = strtol(lim, &end, 10);
		if (errno || end == lim || *end || limit < 1 || limit > LIST_MAX) {
			ret = fail(k->c, 400, "limit must be 1 to %d", LIST_MAX);
			goto out;
		}
	}
	if (order && strcmp(order, "asc") && strcmp(order, "desc")) {
		ret = fail(k->c, 400, "order must be asc or desc");
		goto out;
	}
	desc = !order || !strcmp(order, "desc");
	if (next && next[0]) {
		int used = 0;
		if (sscanf(next, "%lld.%63[a-z0-9-]%n", &next_t, next_name, &used) != 2 ||
		    (size_t)used != strlen(next)) {
			ret = fail(k->c, 400, "nextToken: not one this server gave");
			goto out;
		}
	}
	if (after) {
		struct tm tm = { 0 };
		char *end = strptime(after, "%Y-%m-%dT%H:%M:%S", &tm);
		if (!end) {
			ret = fail(k->c, 400, "startedAfter must be an RFC 3339 time");
			goto out;
		}
		after_t = (int64_t)timegm(&tm);
	}
	if (hostd(k, "GET", "/v1/machines", NULL, &status, &resp) < 0) {
		ret = fail(k->c, 502, "berth-hostd does not answer");
		goto out;
	}
	if (status != 200) {
		ret = fail_hostd(k->c, status, resp, "list the sandboxes");
		goto out;
	}
	json_t *arr = json_object_get(resp, "machines"), *m;
	ms = calloc(json_array_size(arr) + 1, sizeof(*ms));
	if (!ms)
		abort();
	json_array_foreach(arr, i, m) {
		const char *st = state_of(m);
		if (!st || (!strcmp(st, "running") && !want_running) ||
		    (!strcmp(st, "paused") && !want_paused) ||
		    (filter && !metadata_match(m, filter)) ||
		    (tmpl && strcmp(tmpl, json_string_value(json_object_get(m, "image")))) ||
		    (after && jint(m, "created") < after_t))
			continue;
		ms[n++] = m;
	}
	qsort(ms, n, sizeof(*ms), desc ? cmp_desc : cmp_asc);
	i = 0;
	if (next && next[0]) {
		/* After the token's place in this order. */
		json_t *mark = json_pack("{s:I, s:s}", "created", (json_int_t)next_t, "name",
					 next_name);
		while (i < n && (desc ? cmp_started(ms[i], mark) >= 0 : cmp_started(ms[i], mark) <= 0))
			i++;
		json_decref(mark);
	}
	size_t first = i;
	for (; i < n && (!v2 || (long)(i - first) < limit); i++)
		json_array_append_new(out, sandbox_of(k, ms[i], false));
	if (i < n && i > first) {
		snprintf(tok, sizeof(tok), "%lld.%s", (long long)jint(ms[i - 1], "created"),
			 json_string_value(json_object_get(ms[i - 1], "name")));
		ret = reply_hdr(k->c, 200, out, "X-Next-Token", tok);
	} else {
		ret = reply(k->c, 200, out);
	}
	out = NULL;
out:
	free(md);
	free(state);
	free(lim);
	free(next);
	free(order);
	free(tmpl);
	free(after);
	free(ms);
	json_decref(filter);
	json_decref(resp);
	json_decref(out);
	return ret;
}

/* GET /sandboxes/ID */
static enum MHD_Result do_detail(struct call *k, const char *name, const char *id)
{
	enum MHD_Result ret;
	json_t *m;

	if (machine_get(k, name, id, &m, &ret) < 0)
		return ret;
	ret = reply(k->c, 200, sandbox_of(k, m, true));
	json_decref(m);
	return ret;
}

/* DELETE /sandboxes/ID: 204, or 404. */
static enum MHD_Result do_kill(struct call *k, const char *name, const char *id)
{
	char path[128];
	long status;
	json_t *resp = NULL;
	enum MHD_Result ret;

	snprintf(path, sizeof(path), "/v1/machines/%s", name);
	if (hostd(k, "DELETE", path, NULL, &status, &resp) < 0)
		return fail(k->c, 502, "berth-hostd does not answer");
	if (status == 200) {
		log_info("e2b: %s killed sandbox %s", k->user, id);
		ret = reply(k->c, 204, NULL);
	} else if (status == 404) {
		ret = fail(k->c, 404, "sandbox %s not found", id);
	} else {
		ret = fail_hostd(k->c, status, resp, "kill the sandbox");
	}
	json_decref(resp);
	return ret;
}

/* POST /sandboxes/ID/pause: berth's suspend (memory kept), the deadline
 * off (a paused sandbox waits); 409 when it is not running. */
static enum MHD_Result do_pause(struct call *k, const char *name, const char *id)
{
	enum MHD_Result ret;
	char path[128];
	long status;
	json_t *m, *resp = NULL;

	if (machine_get(k, name, id, &m, &ret) < 0)
		return ret;
	if (strcmp(state_of(m) ? state_of(m) : "paused", "running") != 0) {
		json_decref(m);
		return fail(k->c, 409, "sandbox %s is already paused", id);
	}
	json_decref(m);
	snprintf(path, sizeof(path), "/v1/machines/%s/suspend", name);
	if (hostd(k, "POST", path, NULL, &status, &resp) < 0)
		return fail(k->c, 502, "berth-hostd does not answer");
	if (status == 404)
		ret = fail(k->c, 404, "sandbox %s not found", id);
	else if (status == 409)
		ret = fail(k->c, 409, "sandbox %s: %s", id, hostapi_message(resp, "is not running"));
	else if (status != 200)
		ret = fail_hostd(k->c, status, resp, "pause the sandbox");
	else if (machine_patch(k, name, json_pack("{s:n}", "expires_in"), &ret) == 0)
		ret = reply(k->c, 204, NULL);
	json_decref(resp);
	return ret;
}

/* POST /v2/sandboxes/ID/connect, /sandboxes/ID/connect (and the
 * deprecated /resume): a running one's deadline moved no earlier than
 * TIMEOUT from now (200); a paused (suspended or stopped) one resumed or
 * started and waited for, its deadline TIMEOUT from now (201). */
static enum MHD_Result do_connect(struct call *k, const char *name, const char *id,
				  struct buf *b)
{
	enum MHD_Result ret = MHD_NO;
	json_t *j = body_object(k->c, b, &ret), *m = NULL, *resp = NULL;
	int64_t timeout;
	const char *state;
	char path[160];
	long status;
	unsigned code = 200;

	if (!j)
		return ret;
	if ((timeout = get_timeout(k->c, j, DEFAULT_TIMEOUT_S, &ret)) < 0 ||
	    machine_get(k, name, id, &m, &ret) < 0)
		goto out;
	state = json_string_value(json_object_get(m, "state"));
	if (!strcmp(state_of(m) ? state_of(m) : "", "running")) {
		int64_t left = json_object_get(m, "expires_in_s") ? jint(m, "expires_in_s") : -1;
		/* Running: its deadline only moves later (none stays none). */
		if (left >= 0 && left < timeout &&
		    machine_patch(k, name, json_pack("{s:I}", "expires_in", (json_int_t)timeout),
				  &ret) < 0)
			goto out;
	} else {
		snprintf(path, sizeof(path), "/v1/machines/%s/%s", name,
			 !strcmp(state, "stopped") ? "start" : "resume");
		json_t *body = json_pack("{s:b}", "wait", 1);
		int rc = hostd(k, "POST", path, body, &status, &resp);
		json_decref(body);
		if (rc < 0) {
			ret = fail(k->c, 502, "berth-hostd does not answer");
			goto out;
		}
		if (status == 404) {
			ret = fail(k->c, 404, "sandbox %s not found", id);
			goto out;
		}
		if (status != 200) {
			ret = fail_hostd(k->c, status, resp, "resume the sandbox");
			goto out;
		}
		log_info("e2b: %s resumed sandbox %s", k->user, id);
		if (machine_patch(k, name, json_pack("{s:I}", "expires_in", (json_int_t)timeout),
				  &ret) < 0)
			goto out;
		code = 201;
	}
	ret = reply(k->c, code, sandbox_new(k, m));
out:
	json_decref(j);
	json_decref(m);
	json_decref(resp);
	return ret;
}

/* POST /sandboxes/ID/timeout {"timeout": S}: its deadline S from now. */
static enum MHD_Result do_timeout(struct call *k, const char *name, const char *id,
				  struct buf *b)
{
	enum MHD_Result ret = MHD_NO;
	json_t *j = body_object(k->c, b, &ret), *m = NULL;
	int64_t timeout;

	if (!j)
		return ret;
	if (!json_object_get(j, "timeout")) {
		ret = fail(k->c, 400, "timeout (seconds) is required");
		goto out;
	}
	if ((timeout = get_timeout(k->c, j, DEFAULT_TIMEOUT_S, &ret)) < 0 ||
	    machine_get(k, name, id, &m, &ret) < 0 ||
	    machine_patch(k, name, json_pack("{s:I}", "expires_in", (json_int_t)timeout),
			  &ret) < 0)
		goto out;
	ret = reply(k->c, 204, NULL);
out:
	json_decref(j);
	json_decref(m);
	return ret;
}

/* GET /sandboxes/ID/metrics: one sample, now, of what hostd knows: its
 * vCPUs and the CPU the idle policy measured (of all its vCPUs), its
 * memory (what it holds of the host: berth does not look inside), its
 * disk's size and allocation.  None when it does not run. */
static enum MHD_Result do_metrics(struct call *k, const char *name, const char *id)
{
	enum MHD_Result ret;
	json_t *m, *out = json_array();
	char now[32];
	int64_t t = (int64_t)time(NULL);

	if (machine_get(k, name, id, &m, &ret) < 0) {
		json_decref(out);
		return ret;
	}
	if (!strcmp(json_string_value(json_object_get(m, "state")), "running")) {
		json_int_t vcpus = jint(m, "vcpus") > 0 ? jint(m, "vcpus") : 1;
		double cpu = (double)jint(json_object_get(m, "idle"), "cpu_percent") /
			     (double)vcpus;
		rfc3339(t, now, sizeof(now));
		json_array_append_new(out, json_pack(
			"{s:s, s:I, s:I, s:f, s:I, s:I, s:I, s:I, s:I}", "timestamp", now,
			"timestampUnix", (json_int_t)t, "cpuCount", vcpus, "cpuUsedPct", cpu,
			"memUsed", jint(m, "memory"), "memTotal", jint(m, "memory"),
			"memCache", (json_int_t)0, "diskUsed", jint(m, "allocated"),
			"diskTotal", jint(m, "disk")));
	}
	json_decref(m);
	return reply(k->c, 200, out);
}

/* ---- the request --------------------------------------------------------- */

/* The caller, from X-API-Key: e2b_HEX64 is berth's token berth_HEX64,
 * whose user hostd names (GET /v1/info).  0, or -1 with the refusal
 * queued in *RET. */
static int authenticate(struct call *k, enum MHD_Result *ret)
{
	const char *key = MHD_lookup_connection_value(k->c, MHD_HEADER_KIND, "X-API-Key");
	json_t *resp = NULL;
	long status;
	size_t i;

	if (!key || !key[0]) {
		*ret = fail(k->c, 401, "no X-API-Key: E2B_API_KEY is e2b_ and the 64 hex digits "
			    "of a berth token (berth token create prints it)");
		return -1;
	}
	for (i = 0; key[i] && i < 4 + 64; i++)
		if (i >= 4 && hexval(key[i]) < 0)
			break;
	if (strncmp(key, "e2b_", 4) || i != 4 + 64 || key[i]) {
		*ret = fail(k->c, 401, "invalid API key: e2b_ and the 64 hex digits of a berth "
			    "token are expected");
		return -1;
	}
	snprintf(k->token, sizeof(k->token), "berth_%s", key + 4);
	for (char *p = k->token; *p; p++)
		if (*p >= 'A' && *p <= 'F')
			*p = (char)(*p + 32);
	if (hostd(k, "GET", "/v1/info", NULL, &status, &resp) < 0) {
		*ret = fail(k->c, 503, "berth-hostd does not answer");
		return -1;
	}
	if (status == 401 || status == 403) {
		*ret = fail(k->c, 401, "invalid API key: %s", hostapi_message(resp, "refused"));
	} else if (status != 200 || !json_string_value(json_object_get(resp, "user"))) {
		*ret = fail_hostd(k->c, status == 200 ? 500 : status, resp, "who is this");
	} else {
		snprintf(k->user, sizeof(k->user), "%s", json_string_value(json_object_get(resp, "user")));
		json_decref(resp);
		return 0;
	}
	json_decref(resp);
	return -1;
}

/* Route METHOD PATH (decoded of nothing: a sandbox id is [a-z0-9-]). */
static enum MHD_Result route(struct call *k, const char *method, const char *path,
			     const char *query, struct buf *b)
{
	bool post = !strcmp(method, "POST"), get = !strcmp(method, "GET");
	bool v2 = !strncmp(path, "/v2/", 4);
	const char *rest;
	char id[160], name[64], action[32] = "";
	enum MHD_Result ret;

	if (v2)
		path += 3;
	if (!strcmp(path, "/sandboxes")) {
		if (post)
			return do_create(k, b);
		if (get)
			return do_list(k, query, v2);
		return fail(k->c, 405, "%s /sandboxes: only GET and POST", method);
	}
	if (strncmp(path, "/sandboxes/", 11))
		return fail(k->c, 404, "no route %s %s in berth's E2B API", method, path);
	rest = path + 11;
	const char *slash = strchr(rest, '/');
	size_t idlen = slash ? (size_t)(slash - rest) : strlen(rest);
	if (idlen == 0 || idlen >= sizeof(id))
		return fail(k->c, 404, "sandbox not found");
	memcpy(id, rest, idlen);
	id[idlen] = '\0';
	if (slash) {
		if (strlen(slash + 1) >= sizeof(action) || strchr(slash + 1, '/'))
			return fail(k->c, 404, "no route %s %s in berth's E2B API", method, path);
		snprintf(action, sizeof(action), "%s", slash + 1);
	}
	/* Another user's sandbox, or no name: not found, as one that is not. */
	if (!id_name(id, k->user, name, sizeof(name)))
		return fail(k->c, 404, "sandbox %.100s not found", id);
	if (!action[0]) {
		if (get && !v2)
			return do_detail(k, name, id);
		if (!strcmp(method, "DELETE") && !v2)
			return do_kill(k, name, id);
	} else if (post && (!strcmp(action, "connect") || (!v2 && !strcmp(action, "resume")))) {
		return do_connect(k, name, id, b);
	} else if (post && !v2 && !strcmp(action, "pause")) {
		return do_pause(k, name, id);
	} else if (post && !v2 && !strcmp(action, "timeout")) {
		return do_timeout(k, name, id, b);
	} else if (get && !v2 && !strcmp(action, "metrics")) {
		return do_metrics(k, name, id);
	}
	ret = fail(k->c, 404, "no route %s %s%s in berth's E2B API (snapshots, fork, network, "
		   "logs: not supported)", method, v2 ? "/v2" : "", path);
	return ret;
}

enum MHD_Result e2b_handle(struct MHD_Connection *c, const char *sock, const char *method,
			   const char *target, const char *upload_data,
			   size_t *upload_data_size, struct e2b_req **rp)
{
	struct e2b_req *r = *rp;
	struct call k = { .c = c, .sock = sock };
	enum MHD_Result ret = MHD_NO;
	char *path;
	const char *q;

	if (!r) {
		struct web_framing f;
		char why[160];
		if (web_request_check(c, method, &f, why, sizeof(why)))
			return fail(c, 400, "%s", why);
		if (f.length > BODY_MAX)
			return fail(c, 413, "the body has %llu bytes: at most %d",
				    (unsigned long long)f.length, BODY_MAX);
		r = calloc(1, sizeof(*r));
		if (!r)
			abort();
		*rp = r;
		return MHD_YES;
	}
	if (*upload_data_size) {
		if (r->body.len + *upload_data_size > BODY_MAX)
			r->too_big = true;
		else
			buf_add(&r->body, upload_data, *upload_data_size);
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (r->started)
		return MHD_YES;
	r->started = true;
	if (r->too_big)
		return fail(c, 413, "the body is over %d bytes", BODY_MAX);
	q = strchr(target, '?');
	path = q ? strndup(target, (size_t)(q - target)) : strdup(target);
	if (!path)
		abort();
	if (authenticate(&k, &ret) == 0)
		ret = route(&k, method, path, q ? q + 1 : "", &r->body);
	free(path);
	return ret;
}

void e2b_done(struct e2b_req *r)
{
	if (!r)
		return;
	buf_free(&r->body);
	free(r);
}
