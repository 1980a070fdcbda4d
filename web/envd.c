#include "web/envd.h"

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
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "common/buf.h"
#include "common/hostapi.h"
#include "common/log.h"
#include "common/util.h"
#include "web/multipart.h"
#include "web/preview.h"
#include "web/request.h"
#include "common/banned.h"

#define ENVD_PORT "49983"
/* A Connect request's body (a JSON message), at most. */
#define RPC_BODY_MAX (1 << 20)
/* An upload's body (POST /files), at most: it is held in memory. */
#define UPLOAD_MAX (64u << 20)
/* Files of one multipart upload, at most. */
#define UPLOAD_PARTS_MAX 64
/* A ListDir's depth and entries, at most (each level is one request to
 * hostd per directory). */
#define LIST_DEPTH_MAX 8
#define LIST_ENTRIES_MAX 20000
/* WatchDir: how often the directory is listed again; how deep recursive
 * goes; entries watched at most. */
#define WATCH_POLL_MS 1000
#define WATCH_DEPTH_MAX 4
#define WATCH_ENTRIES_MAX 10000
/* Keepalive-Ping-Interval's default and most: berth-web closes a
 * connection that sends nothing for its --idle-timeout (60 s), so more
 * often than envd's 90 s (the SDK asks for 50: 30 it gets). */
#define KEEPALIVE_MAX_S 30
/* Stream threads at once, in all (each holds a connection to hostd). */
#define STREAMS_MAX 512

static struct {
	char domain[200];
	char sock[PATH_MAX + 16];
	atomic_int streams;
} E = { .domain = "localhost" };

struct envd_req {
	char id[128];            /* the sandbox id, NAME-OWNER */
	bool head_done, refused;
	struct web_framing f;
	struct buf body;
	bool too_big;
	size_t body_max;
};

/* What a request resolved to: the token, the machine, the user. */
struct sbx {
	char token[80];
	char name[64], owner[64];
	char login[64];          /* the image's login user */
	char user[64];           /* who the request acts as */
	char state[32];
	json_t *env;             /* the sandbox's env ("env" of the machine), or NULL */
};

void envd_configure(const char *domain, const char *web_sock)
{
	snprintf(E.domain, sizeof(E.domain), "%s", domain && *domain ? domain : "localhost");
	snprintf(E.sock, sizeof(E.sock), "%s", web_sock);
}

/* ---- pure pieces ---------------------------------------------------------- */

bool envd_host_id(const char *host, const char *domain, char *id, size_t idlen)
{
	char label[64];

	if (!preview_label_of(host, domain, label, sizeof(label)) || !label[0])
		return false;
	if (strncmp(label, ENVD_PORT "-", 6) || !label[6])
		return false;
	snprintf(id, idlen, "%s", label + 6);
	return true;
}

bool envd_token_of(const char *v, char *out, size_t outlen)
{
	const char *hex;

	if (!v)
		return false;
	if (!strncmp(v, "berth_", 6))
		hex = v + 6;
	else if (!strncmp(v, "e2b_", 4))
		hex = v + 4;
	else
		return false;
	if (strlen(hex) != 64 || strspn(hex, "0123456789abcdef") != 64 || outlen < 71)
		return false;
	snprintf(out, outlen, "berth_%s", hex);
	return true;
}

/* An id's characters: a DNS label's. */
static bool id_ok(const char *id)
{
	size_t n = strlen(id);

	return n > 0 && n <= 63 && strspn(id, "abcdefghijklmnopqrstuvwxyz0123456789-") == n;
}

struct envd_req *envd_route(struct MHD_Connection *c)
{
	const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
	const char *hid = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "E2b-Sandbox-Id");
	char id[128], label[64];
	struct envd_req *r;

	if (host && envd_host_id(host, E.domain, id, sizeof(id))) {
		/* on 49983-ID.DOMAIN */
	} else if (hid && !(host && preview_label_of(host, E.domain, label, sizeof(label)))) {
		/* on a host not under DOMAIN: E2B_SANDBOX_URL */
		snprintf(id, sizeof(id), "%s", hid);
	} else {
		return NULL;
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		abort();
	snprintf(r->id, sizeof(r->id), "%s", id);
	return r;
}

void envd_done(struct envd_req *r)
{
	if (!r)
		return;
	buf_free(&r->body);
	free(r);
}

/* ---- answers -------------------------------------------------------------- */

static enum MHD_Result queue(struct MHD_Connection *c, unsigned status, const char *type,
			     char *body, size_t len)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
	enum MHD_Result ret;

	if (!r) {
		free(body);
		return MHD_NO;
	}
	if (type)
		MHD_add_response_header(r, "Content-Type", type);
	MHD_add_response_header(r, "Cache-Control", "no-store");
	ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result queue_json(struct MHD_Connection *c, unsigned status, json_t *j)
{
	char *s = json_dumps(j, JSON_COMPACT);

	json_decref(j);
	if (!s)
		abort();
	return queue(c, status, "application/json", s, strlen(s));
}

/* Connect's code names and their HTTP statuses (the protocol's table). */
static unsigned code_status(const char *code)
{
	static const struct { const char *code; unsigned status; } t[] = {
		{ "canceled", 499 }, { "unknown", 500 }, { "invalid_argument", 400 },
		{ "deadline_exceeded", 504 }, { "not_found", 404 }, { "already_exists", 409 },
		{ "permission_denied", 403 }, { "resource_exhausted", 429 },
		{ "failed_precondition", 400 }, { "aborted", 409 }, { "out_of_range", 400 },
		{ "unimplemented", 501 }, { "internal", 500 }, { "unavailable", 503 },
		{ "data_loss", 500 }, { "unauthenticated", 401 },
	};
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		if (!strcmp(t[i].code, code))
			return t[i].status;
	return 500;
}

/* A unary call's error: {"code", "message"} with the code's status. */
static enum MHD_Result rpc_error(struct MHD_Connection *c, const char *code, const char *msg)
{
	return queue_json(c, code_status(code), json_pack("{s:s, s:s}", "code", code,
							   "message", msg));
}

/* A REST error of envd's (/files, /health): {"code": STATUS, "message"}. */
static enum MHD_Result rest_error(struct MHD_Connection *c, unsigned status, const char *msg)
{
	return queue_json(c, status, json_pack("{s:i, s:s}", "code", (int)status, "message", msg));
}

/* hostd's refusal (STATUS, its JSON RESP) as a Connect code. */
static const char *code_of(long status, json_t *resp)
{
	const char *hc = json_string_value(json_object_get(json_object_get(resp, "error"), "code"));

	hc = hc ? hc : "";
	switch (status) {
	case 400: return "invalid_argument";
	case 401: return "unauthenticated";
	case 403: return !strcmp(hc, "permission_denied") ? "permission_denied"
							  : "resource_exhausted";
	case 404: return "not_found";
	case 409:
		if (!strcmp(hc, "exists"))
			return "already_exists";
		if (!strcmp(hc, "not_running") || !strcmp(hc, "suspended"))
			return "unavailable";
		if (!strcmp(hc, "not_a_directory") || !strcmp(hc, "is_a_directory"))
			return "invalid_argument";
		return "failed_precondition";
	case 413: return "resource_exhausted";
	case 429: return "resource_exhausted";
	case 502: case 503: case 504: return "unavailable";
	case 507: return "resource_exhausted";
	default: return "internal";
	}
}

static const char *message_of(json_t *resp, const char *fallback)
{
	return hostapi_message(resp, fallback);
}

/* The SDK runs every command as /bin/bash -l -c CMD (E2B's templates have
 * bash); an image without bash (berth's tiny, busybox) runs it with its
 * /bin/sh, which takes -l -c as well: /bin/bash becomes this, and List
 * shows /bin/bash again. */
static const char BASH_OR_SH[] =
	"if command -v bash >/dev/null 2>&1; then exec bash \"$@\"; fi; exec /bin/sh \"$@\"";

/* ---- the sandbox ---------------------------------------------------------- */

/* The user of "Authorization: Basic base64(USER:)" into OUT: 1, 0 without
 * one, -1 malformed. */
static int basic_user(struct MHD_Connection *c, char *out, size_t outlen)
{
	const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
	struct buf b = BUF_INIT;
	int rc = -1;

	out[0] = '\0';
	if (!a)
		return 0;
	if (strncasecmp(a, "Basic ", 6))
		return -1;
	if (strlen(a + 6) < 512 && buf_add_unbase64(&b, a + 6, strlen(a + 6)) == 0) {
		const char *colon = memchr(b.data, ':', b.len);
		size_t n = colon ? (size_t)(colon - b.data) : b.len;
		if (n > 0 && n < outlen && !memchr(b.data, '\0', n)) {
			memcpy(out, b.data, n);
			out[n] = '\0';
			rc = 1;
		}
	}
	buf_free(&b);
	return rc;
}

/* A user name a command may run as (hostd checks it again). */
static bool user_ok(const char *u)
{
	size_t n = strlen(u);

	return n > 0 && n <= 32 && u[0] != '-' &&
	       strspn(u, "abcdefghijklmnopqrstuvwxyz0123456789_-.") == n;
}

/* The sandbox of R's request: token, machine, user (USER: the one asked
 * for, NULL or "": the login user).  0, or -1 with CODE (a Connect code)
 * and MSG. */
static int resolve(struct envd_req *r, struct MHD_Connection *c, const char *user,
		   struct sbx *s, const char **code, char *msg, size_t msglen)
{
	const char *tok = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Access-Token");
	json_t *resp = NULL, *m;
	long status = 0;
	char err[256];
	size_t i;
	int rc = -1;

	memset(s, 0, sizeof(*s));
	if (!tok || !envd_token_of(tok, s->token, sizeof(s->token))) {
		*code = "unauthenticated";
		snprintf(msg, msglen, tok ? "X-Access-Token is not a berth token (berth_ or e2b_ "
			 "and 64 hex digits)" : "no X-Access-Token: give the sandbox's "
			 "envdAccessToken (a berth API token)");
		return -1;
	}
	if (!id_ok(r->id)) {
		*code = "not_found";
		snprintf(msg, msglen, "no sandbox '%.63s'", r->id);
		return -1;
	}
	if (hostapi_call_as(E.sock, s->token, "GET", "/v1/machines", NULL, &status, &resp, err,
			    sizeof(err)) < 0) {
		*code = "unavailable";
		snprintf(msg, msglen, "berth-hostd: %s", err);
		return -1;
	}
	if (status != 200) {
		*code = status == 401 ? "unauthenticated" : code_of(status, resp);
		snprintf(msg, msglen, "%s", message_of(resp, "berth-hostd refused"));
		goto out;
	}
	/* The token's machines are its owner's: the id is NAME-OWNER. */
	json_array_foreach(json_object_get(resp, "machines"), i, m) {
		const char *name = json_string_value(json_object_get(m, "name"));
		const char *owner = json_string_value(json_object_get(m, "owner"));
		size_t nl, ol;
		if (!name || !owner)
			continue;
		nl = strlen(name);
		ol = strlen(owner);
		if (strlen(r->id) != nl + 1 + ol || strncmp(r->id, name, nl) || r->id[nl] != '-' ||
		    strcmp(r->id + nl + 1, owner))
			continue;
		snprintf(s->name, sizeof(s->name), "%s", name);
		snprintf(s->owner, sizeof(s->owner), "%s", owner);
		snprintf(s->state, sizeof(s->state), "%s",
			 json_string_value(json_object_get(m, "state")) ?: "");
		const char *login = json_string_value(json_object_get(json_object_get(m, "ssh"),
								      "user"));
		snprintf(s->login, sizeof(s->login), "%s", login ? login : "root");
		if (json_is_object(json_object_get(m, "env")))
			s->env = json_incref(json_object_get(m, "env"));
		break;
	}
	if (!s->name[0]) {
		*code = "not_found";
		snprintf(msg, msglen, "no sandbox '%s'", r->id);
		goto out;
	}
	if (user && *user && !user_ok(user)) {
		*code = "unauthenticated";
		snprintf(msg, msglen, "invalid username: '%.32s'", user);
		goto out;
	}
	snprintf(s->user, sizeof(s->user), "%s", user && *user ? user : s->login);
	rc = 0;
out:
	json_decref(resp);
	return rc;
}

static void sbx_free(struct sbx *s)
{
	json_decref(s->env);
	s->env = NULL;
}

/* PATH made absolute against USER's home (root: /root, else /home/USER),
 * as envd does.  Malloc'd. */
static char *abs_path(const char *user, const char *path)
{
	char *out = NULL;

	if (path[0] == '/')
		out = strdup(path);
	else if (asprintf(&out, "%s%s/%s", strcmp(user, "root") ? "/home/" : "/root",
			  strcmp(user, "root") ? user : "", path) < 0)
		out = NULL;
	if (!out)
		abort();
	return out;
}

/* "/v1/machines/NAME/ROUTE?path=P" (P escaped) into a malloc'd string. */
static char *files_url(const struct sbx *s, const char *route, const char *path,
		       const char *extra)
{
	char *q = hostapi_escape(path), *u = NULL;

	if (!q || asprintf(&u, "/v1/machines/%s/%s?path=%s%s", s->name, route, q,
			   extra ? extra : "") < 0)
		abort();
	free(q);
	return u;
}

/* The files routes act as the login user: another one asked for is
 * refused (0 fine, -1 with the message). */
static int files_user_ok(const struct sbx *s, char *msg, size_t msglen)
{
	if (!strcmp(s->user, s->login))
		return 0;
	snprintf(msg, msglen, "files are read and written as the image's login user '%s' "
		 "only, not as '%s'", s->login, s->user);
	return -1;
}

/* ---- EntryInfo ------------------------------------------------------------ */

/* ls -l's permission string of TYPE ("file", "directory", "symlink")
 * and MODE's bits. */
static void perm_string(const char *type, unsigned mode, char out[11])
{
	static const char rwx[] = "rwxrwxrwx";

	out[0] = !strcmp(type, "directory") ? 'd' : !strcmp(type, "symlink") ? 'L' : '-';
	for (int i = 0; i < 9; i++)
		out[1 + i] = (mode & (1u << (8 - i))) ? rwx[i] : '-';
	out[10] = '\0';
}

static const char *file_type(const char *type)
{
	if (!strcmp(type, "directory"))
		return "FILE_TYPE_DIRECTORY";
	if (!strcmp(type, "symlink"))
		return "FILE_TYPE_SYMLINK";
	return "FILE_TYPE_FILE";
}

/* An owner's name from hostd's uid (names are not known host side: 0 is
 * root, the rest their number). */
static json_t *id_name(json_t *v)
{
	char b[24];

	if (!json_is_integer(v))
		return json_string("");
	if (json_integer_value(v) == 0)
		return json_string("root");
	snprintf(b, sizeof(b), "%lld", (long long)json_integer_value(v));
	return json_string(b);
}

/* EntryInfo of PATH from hostd's stat or list entry J. */
static json_t *entry_info(const char *path, json_t *j)
{
	const char *type = json_string_value(json_object_get(j, "type"));
	const char *mode_s = json_string_value(json_object_get(j, "mode"));
	const char *slash = strrchr(path, '/');
	unsigned mode = mode_s ? (unsigned)strtoul(mode_s, NULL, 8) & 0777 : 0;
	time_t mt = (time_t)json_integer_value(json_object_get(j, "mtime"));
	char perm[11], size[24], when[32];
	struct tm tm;

	type = type ? type : "file";
	perm_string(type, mode, perm);
	snprintf(size, sizeof(size), "%lld", (long long)json_integer_value(json_object_get(j, "size")));
	gmtime_r(&mt, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
	json_t *e = json_pack("{s:s, s:s, s:s, s:s, s:i, s:s, s:s}", "name",
			      slash && slash[1] ? slash + 1 : path, "type", file_type(type),
			      "path", path, "size", size, "mode", (int)mode, "permissions", perm,
			      "modifiedTime", when);
	json_object_set_new(e, "owner", id_name(json_object_get(j, "uid")));
	json_object_set_new(e, "group", id_name(json_object_get(j, "gid")));
	if (json_is_string(json_object_get(j, "target")))
		json_object_set(e, "symlinkTarget", json_object_get(j, "target"));
	return e;
}

/* hostd's stat of PATH: its JSON, or NULL with *STATUS and *RESP (the
 * refusal) or MSG (unreachable). */
static json_t *stat_of(const struct sbx *s, const char *path, long *status, json_t **resp,
		       char *msg, size_t msglen)
{
	char *u = files_url(s, "files/stat", path, NULL);
	json_t *j = NULL;

	*resp = NULL;
	*status = 0;
	if (hostapi_call_as(E.sock, s->token, "GET", u, NULL, status, &j, msg, msglen) < 0) {
		free(u);
		return NULL;
	}
	free(u);
	if (*status != 200) {
		*resp = j;
		return NULL;
	}
	return j;
}

/* ---- unary calls ---------------------------------------------------------- */

/* The request's JSON message: an object, or NULL (then answered). */
static json_t *rpc_body(struct envd_req *r, struct MHD_Connection *c, enum MHD_Result *ret)
{
	json_error_t je;
	json_t *j = json_loadb(r->body.data ? r->body.data : "{}", r->body.len ? r->body.len : 2,
			       JSON_REJECT_DUPLICATES, &je);

	if (!j || !json_is_object(j)) {
		char m[256];
		snprintf(m, sizeof(m), "the request is not a JSON object: %s", j ? "" : je.text);
		json_decref(j);
		*ret = rpc_error(c, "invalid_argument", m);
		return NULL;
	}
	return j;
}

/* A process's pid (ProcessSelector {"pid": N}; a tag is not supported). */
static int64_t pid_of(json_t *req)
{
	json_t *p = json_object_get(json_object_get(req, "process"), "pid");

	if (json_is_integer(p) && json_integer_value(p) > 0)
		return json_integer_value(p);
	if (json_is_string(p)) {
		char *end;
		long long v = strtoll(json_string_value(p), &end, 10);
		if (*end == '\0' && v > 0)
			return v;
	}
	return 0;
}

/* METHOD PATH with BODY to hostd as S's token; a 2xx answers ANSWER (taken;
 * NULL: {}), else the mapped error. */
static enum MHD_Result call_answer(struct MHD_Connection *c, const struct sbx *s,
				   const char *method, const char *path, json_t *body,
				   json_t *answer)
{
	json_t *resp = NULL;
	long status = 0;
	char err[256];
	enum MHD_Result ret;

	if (hostapi_call_as(E.sock, s->token, method, path, body, &status, &resp, err,
			    sizeof(err)) < 0) {
		json_decref(answer);
		return rpc_error(c, "unavailable", err);
	}
	if (status / 100 == 2)
		ret = queue_json(c, 200, answer ? answer : json_object());
	else {
		json_decref(answer);
		ret = rpc_error(c, code_of(status, resp), message_of(resp, "berth-hostd refused"));
	}
	json_decref(resp);
	return ret;
}

static enum MHD_Result process_list(struct MHD_Connection *c, const struct sbx *s)
{
	char path[128];
	json_t *resp = NULL, *x, *out = json_array();
	long status = 0;
	char err[256];
	size_t i;

	snprintf(path, sizeof(path), "/v1/machines/%s/exec", s->name);
	if (hostapi_call_as(E.sock, s->token, "GET", path, NULL, &status, &resp, err,
			    sizeof(err)) < 0) {
		json_decref(out);
		return rpc_error(c, "unavailable", err);
	}
	if (status != 200) {
		enum MHD_Result ret = rpc_error(c, code_of(status, resp),
						message_of(resp, "berth-hostd refused"));
		json_decref(resp);
		json_decref(out);
		return ret;
	}
	json_array_foreach(json_object_get(resp, "execs"), i, x) {
		json_t *argv = json_object_get(x, "argv"), *cfg = json_object();
		if (json_array_size(argv) >= 4 &&
		    !strcmp(json_string_value(json_array_get(argv, 2)) ?: "", BASH_OR_SH)) {
			json_object_set_new(cfg, "cmd", json_string("/bin/bash"));
			json_t *args = json_array();
			for (size_t k = 4; k < json_array_size(argv); k++)
				json_array_append(args, json_array_get(argv, k));
			json_object_set_new(cfg, "args", args);
		} else if (json_array_size(argv)) {
			json_object_set(cfg, "cmd", json_array_get(argv, 0));
			json_t *args = json_array();
			for (size_t k = 1; k < json_array_size(argv); k++)
				json_array_append(args, json_array_get(argv, k));
			json_object_set_new(cfg, "args", args);
		} else if (json_is_string(json_object_get(x, "cmd"))) {
			json_object_set_new(cfg, "cmd", json_string("/bin/sh"));
			json_object_set_new(cfg, "args", json_pack("[s, O]", "-c",
								   json_object_get(x, "cmd")));
		}
		json_object_set_new(cfg, "envs", json_is_object(json_object_get(x, "env")) ?
				    json_incref(json_object_get(x, "env")) : json_object());
		if (json_is_string(json_object_get(x, "cwd")))
			json_object_set(cfg, "cwd", json_object_get(x, "cwd"));
		json_array_append_new(out, json_pack("{s:o, s:O}", "config", cfg, "pid",
						     json_object_get(x, "id")));
	}
	json_decref(resp);
	return queue_json(c, 200, json_pack("{s:o}", "processes", out));
}

static enum MHD_Result process_input(struct MHD_Connection *c, const struct sbx *s,
				     json_t *req, bool close_only)
{
	int64_t pid = pid_of(req);
	json_t *in = json_object_get(req, "input"), *d;
	struct buf b = BUF_INIT;
	json_t *resp = NULL;
	long status = 0;
	char path[160], err[256];
	enum MHD_Result ret;

	if (!pid)
		return rpc_error(c, "invalid_argument", "give the process as {\"pid\": N}");
	if (!close_only) {
		d = json_object_get(in, "stdin");
		if (!d)
			d = json_object_get(in, "pty");
		if (!json_is_string(d) || buf_add_unbase64(&b, json_string_value(d),
							   json_string_length(d)) < 0) {
			buf_free(&b);
			return rpc_error(c, "invalid_argument", "input must be {\"stdin\": BASE64} "
					 "or {\"pty\": BASE64}");
		}
	}
	snprintf(path, sizeof(path), "/v1/machines/%s/exec/%lld/stdin%s", s->name, (long long)pid,
		 close_only ? "?eof=1" : "");
	if (hostapi_send_as(E.sock, s->token, "POST", path, b.data ? b.data : "", b.len,
			    "application/octet-stream", &status, &resp, err, sizeof(err)) < 0)
		ret = rpc_error(c, "unavailable", err);
	else if (status == 200)
		ret = queue_json(c, 200, json_object());
	else if (status == 404) {
		char m[96];
		snprintf(m, sizeof(m), "process with pid %lld not found", (long long)pid);
		ret = rpc_error(c, "not_found", m);
	} else
		ret = rpc_error(c, code_of(status, resp), message_of(resp, "berth-hostd refused"));
	json_decref(resp);
	buf_free(&b);
	return ret;
}

static enum MHD_Result process_signal(struct MHD_Connection *c, const struct sbx *s, json_t *req)
{
	int64_t pid = pid_of(req);
	json_t *sig = json_object_get(req, "signal");
	const char *name = NULL;
	char path[160];

	if (!pid)
		return rpc_error(c, "invalid_argument", "give the process as {\"pid\": N}");
	if ((json_is_string(sig) && !strcmp(json_string_value(sig), "SIGNAL_SIGKILL")) ||
	    (json_is_integer(sig) && json_integer_value(sig) == 9))
		name = "KILL";
	else if ((json_is_string(sig) && !strcmp(json_string_value(sig), "SIGNAL_SIGTERM")) ||
		 (json_is_integer(sig) && json_integer_value(sig) == 15))
		name = "TERM";
	if (!name)
		return rpc_error(c, "unimplemented", "signal must be SIGNAL_SIGTERM or "
				 "SIGNAL_SIGKILL");
	snprintf(path, sizeof(path), "/v1/machines/%s/exec/%lld/signal", s->name, (long long)pid);
	json_t *body = json_pack("{s:s}", "signal", name);
	enum MHD_Result ret = call_answer(c, s, "POST", path, body, NULL);
	json_decref(body);
	return ret;
}

static enum MHD_Result process_update(struct MHD_Connection *c, const struct sbx *s, json_t *req)
{
	int64_t pid = pid_of(req);
	json_t *size = json_object_get(json_object_get(req, "pty"), "size");
	json_int_t cols = json_integer_value(json_object_get(size, "cols"));
	json_int_t rows = json_integer_value(json_object_get(size, "rows"));
	char path[160];

	if (!pid)
		return rpc_error(c, "invalid_argument", "give the process as {\"pid\": N}");
	if (!size)
		return queue_json(c, 200, json_object());   /* nothing to change */
	snprintf(path, sizeof(path), "/v1/machines/%s/exec/%lld/resize", s->name, (long long)pid);
	json_t *body = json_pack("{s:I, s:I}", "cols", cols, "rows", rows);
	enum MHD_Result ret = call_answer(c, s, "POST", path, body, NULL);
	json_decref(body);
	return ret;
}

/* A string field F of REQ, or NULL. */
static const char *str_field(json_t *req, const char *f)
{
	const char *v = json_string_value(json_object_get(req, f));

	return v && *v ? v : NULL;
}

static enum MHD_Result fs_stat(struct MHD_Connection *c, const struct sbx *s, json_t *req)
{
	const char *p = str_field(req, "path");
	json_t *resp = NULL, *j;
	long status;
	char msg[256];

	if (!p)
		return rpc_error(c, "invalid_argument", "give \"path\"");
	char *ap = abs_path(s->user, p);
	if (!(j = stat_of(s, ap, &status, &resp, msg, sizeof(msg)))) {
		enum MHD_Result ret = status ? rpc_error(c, code_of(status, resp),
							 message_of(resp, "refused"))
					     : rpc_error(c, "unavailable", msg);
		json_decref(resp);
		free(ap);
		return ret;
	}
	json_t *e = entry_info(ap, j);
	json_decref(j);
	free(ap);
	return queue_json(c, 200, json_pack("{s:o}", "entry", e));
}

/* DIR's entries into OUT (EntryInfo), down to DEPTH levels, at most
 * LIST_ENTRIES_MAX.  0, or -1 with *STATUS, *RESP / MSG. */
static int list_into(const struct sbx *s, const char *dir, int depth, json_t *out,
		     long *status, json_t **resp, char *msg, size_t msglen)
{
	char *u = files_url(s, "files/list", dir, NULL);
	json_t *j = NULL, *e;
	size_t i;

	*status = 0;
	if (hostapi_call_as(E.sock, s->token, "GET", u, NULL, status, &j, msg, msglen) < 0) {
		free(u);
		return -1;
	}
	free(u);
	if (*status != 200) {
		*resp = j;
		return -1;
	}
	json_array_foreach(json_object_get(j, "entries"), i, e) {
		const char *name = json_string_value(json_object_get(e, "name"));
		const char *type = json_string_value(json_object_get(e, "type"));
		char *child = NULL;
		if (!name || !strcmp(name, ".") || !strcmp(name, ".."))
			continue;
		if (json_array_size(out) >= LIST_ENTRIES_MAX)
			break;
		if (asprintf(&child, "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/",
			     name) < 0)
			abort();
		json_array_append_new(out, entry_info(child, e));
		if (depth > 1 && type && !strcmp(type, "directory")) {
			long st2;
			json_t *r2 = NULL;
			/* A subdirectory that vanished or is closed is skipped. */
			if (list_into(s, child, depth - 1, out, &st2, &r2, msg, msglen) < 0 && !st2) {
				free(child);
				json_decref(j);
				*status = 0;
				return -1;
			}
			json_decref(r2);
		}
		free(child);
	}
	json_decref(j);
	return 0;
}

static enum MHD_Result fs_list(struct MHD_Connection *c, const struct sbx *s, json_t *req)
{
	const char *p = str_field(req, "path");
	json_int_t depth = json_integer_value(json_object_get(req, "depth"));
	json_t *resp = NULL, *out;
	long status;
	char msg[256];

	if (!p)
		return rpc_error(c, "invalid_argument", "give \"path\"");
	if (depth < 1)
		depth = 1;
	if (depth > LIST_DEPTH_MAX)
		return rpc_error(c, "invalid_argument", "\"depth\" is at most 8 here");
	char *ap = abs_path(s->user, p);
	out = json_array();
	if (list_into(s, ap, (int)depth, out, &status, &resp, msg, sizeof(msg)) < 0) {
		enum MHD_Result ret = status ? rpc_error(c, code_of(status, resp),
							 message_of(resp, "refused"))
					     : rpc_error(c, "unavailable", msg);
		json_decref(resp);
		json_decref(out);
		free(ap);
		return ret;
	}
	free(ap);
	return queue_json(c, 200, json_pack("{s:o}", "entries", out));
}

/* Stat AP and answer {"entry"} (after a MakeDir or a Move). */
static enum MHD_Result answer_entry(struct MHD_Connection *c, const struct sbx *s,
				    const char *ap)
{
	json_t *resp = NULL, *j;
	long status;
	char msg[256];

	if (!(j = stat_of(s, ap, &status, &resp, msg, sizeof(msg)))) {
		enum MHD_Result ret = status ? rpc_error(c, code_of(status, resp),
							 message_of(resp, "refused"))
					     : rpc_error(c, "unavailable", msg);
		json_decref(resp);
		return ret;
	}
	json_t *e = entry_info(ap, j);
	json_decref(j);
	return queue_json(c, 200, json_pack("{s:o}", "entry", e));
}

static enum MHD_Result fs_mkdir(struct MHD_Connection *c, const struct sbx *s, json_t *req)
{
	const char *p = str_field(req, "path");
	json_t *resp = NULL, *j;
	long status;
	char msg[256], path[128];
	enum MHD_Result ret;

	if (!p)
		return rpc_error(c, "invalid_argument", "give \"path\"");
	char *ap = abs_path(s->user, p);
	/* An existing directory is already_exists; another file there,
	 * invalid_argument (hostd's mkdir with parents takes the first). */
	if ((j = stat_of(s, ap, &status, &resp, msg, sizeof(msg)))) {
		const char *type = json_string_value(json_object_get(j, "type"));
		snprintf(msg, sizeof(msg), "%s: %s", ap, type && !strcmp(type, "directory") ?
			 "directory already exists" : "path already exists and is not a directory");
		ret = rpc_error(c, type && !strcmp(type, "directory") ? "already_exists" :
				"invalid_argument", msg);
		json_decref(j);
		free(ap);
		return ret;
	}
	json_decref(resp);
	resp = NULL;
	snprintf(path, sizeof(path), "/v1/machines/%s/files/mkdir", s->name);
	json_t *body = json_pack("{s:s, s:b}", "path", ap, "parents", 1);
	if (hostapi_call_as(E.sock, s->token, "POST", path, body, &status, &resp, msg,
			    sizeof(msg)) < 0)
		ret = rpc_error(c, "unavailable", msg);
	else if (status / 100 != 2)
		ret = rpc_error(c, code_of(status, resp), message_of(resp, "refused"));
	else
		ret = answer_entry(c, s, ap);
	json_decref(body);
	json_decref(resp);
	free(ap);
	return ret;
}

static enum MHD_Result fs_move(struct MHD_Connection *c, const struct sbx *s, json_t *req)
{
	const char *from = str_field(req, "source"), *to = str_field(req, "destination");
	json_t *resp = NULL;
	long status;
	char msg[256], path[128];
	enum MHD_Result ret;

	if (!from || !to)
		return rpc_error(c, "invalid_argument", "give \"source\" and \"destination\"");
	char *af = abs_path(s->user, from), *at = abs_path(s->user, to);
	snprintf(path, sizeof(path), "/v1/machines/%s/files/move", s->name);
	json_t *body = json_pack("{s:s, s:s}", "from", af, "to", at);
	if (hostapi_call_as(E.sock, s->token, "POST", path, body, &status, &resp, msg,
			    sizeof(msg)) < 0)
		ret = rpc_error(c, "unavailable", msg);
	else if (status / 100 != 2)
		ret = rpc_error(c, code_of(status, resp), message_of(resp, "refused"));
	else
		ret = answer_entry(c, s, at);
	json_decref(body);
	json_decref(resp);
	free(af);
	free(at);
	return ret;
}

static enum MHD_Result fs_remove(struct MHD_Connection *c, const struct sbx *s, json_t *req)
{
	const char *p = str_field(req, "path");

	if (!p)
		return rpc_error(c, "invalid_argument", "give \"path\"");
	char *ap = abs_path(s->user, p);
	char *u = files_url(s, "files", ap, "&recursive=1");
	enum MHD_Result ret = call_answer(c, s, "DELETE", u, NULL, NULL);
	free(u);
	free(ap);
	return ret;
}

/* ---- streams -------------------------------------------------------------- */

/* A server stream: a thread of its own (the producer) writes whole
 * envelopes into a pipe, libmicrohttpd's reader (on the connection's
 * thread) passes them on as they come and adds a keepalive message between
 * two envelopes after KEEPALIVE_MS of silence, or the end at the deadline. */
struct stream {
	atomic_int refs;
	atomic_bool gone;        /* the client went: the producer stops */
	int rfd, wfd;
	int keepalive_ms;
	int64_t deadline;        /* mono_ms, 0: none (Connect's, WatchDir's timeout) */
	bool watch;              /* WatchDir's messages, else a process's */
	bool ended;              /* the reader sent the end itself */
	/* The reader's place in the envelopes passed on: header bytes seen,
	 * payload bytes left. */
	int hdr_seen;
	unsigned char hdr[5];
	uint32_t left;

	/* The producer's. */
	struct sbx s;
	char method[8];
	char *path;
	json_t *body;
	bool pty;
	int64_t pid;
	bool done;               /* its end-stream envelope is written */
	struct buf line;
	/* WatchDir's */
	char *dir;
	bool recursive, include_entry;
};

static void stream_unref(struct stream *st)
{
	if (atomic_fetch_sub(&st->refs, 1) != 1)
		return;
	if (st->rfd >= 0)
		close(st->rfd);
	if (st->wfd >= 0)
		close(st->wfd);
	sbx_free(&st->s);
	free(st->path);
	free(st->dir);
	json_decref(st->body);
	buf_free(&st->line);
	free(st);
	atomic_fetch_sub(&E.streams, 1);
}

/* Envelope FLAGS with JSON J (taken) appended to B. */
static void envelope_add(struct buf *b, unsigned flags, json_t *j)
{
	char *s = json_dumps(j, JSON_COMPACT);
	size_t n;

	json_decref(j);
	if (!s)
		abort();
	n = strlen(s);
	unsigned char h[5] = { (unsigned char)flags, (unsigned char)(n >> 24),
			       (unsigned char)(n >> 16), (unsigned char)(n >> 8), (unsigned char)n };
	buf_add(b, h, 5);
	buf_add(b, s, n);
	free(s);
}

/* The producer writes one envelope: 0, or -1 (the client went). */
static int put(struct stream *st, unsigned flags, json_t *j)
{
	struct buf b = BUF_INIT;
	int rc;

	envelope_add(&b, flags, j);
	rc = atomic_load(&st->gone) ? -1 : fd_write_all(st->wfd, b.data, b.len);
	buf_free(&b);
	if (flags & 2)
		st->done = true;
	return rc;
}

static int put_end_error(struct stream *st, const char *code, const char *msg)
{
	return put(st, 2, json_pack("{s:{s:s, s:s}}", "error", "code", code, "message", msg));
}

/* One of hostd's exec lines L as the process's messages. */
static int exec_line(struct stream *st, const char *l, size_t n)
{
	json_t *j = json_loadb(l, n, 0, NULL), *v;
	int rc = 0;

	if (!j)
		return put_end_error(st, "internal", "berth-hostd sent a line that is not JSON");
	if ((v = json_object_get(j, "id"))) {
		st->pid = json_integer_value(v);
		rc = put(st, 0, json_pack("{s:{s:{s:I}}}", "event", "start", "pid",
					  (json_int_t)st->pid));
	} else if ((v = json_object_get(j, "stdout")) || (v = json_object_get(j, "stderr"))) {
		const char *key = st->pty ? "pty" : json_object_get(j, "stdout") ? "stdout" : "stderr";
		rc = put(st, 0, json_pack("{s:{s:{s:O}}}", "event", "data", key, v));
	} else if (json_object_get(j, "keepalive")) {
		rc = atomic_load(&st->gone) ? -1 : 0;
	} else if ((v = json_object_get(j, "exit"))) {
		const char *sig = json_string_value(json_object_get(j, "signal"));
		char status[64];
		if (json_is_true(json_object_get(j, "timed_out"))) {
			rc = put_end_error(st, "deadline_exceeded", "the process reached its "
					   "timeout (Connect-Timeout-Ms) and was killed");
		} else {
			if (sig)
				snprintf(status, sizeof(status), "signal: %s",
					 !strcmp(sig, "KILL") ? "killed" : !strcmp(sig, "TERM") ?
					 "terminated" : sig);
			else
				snprintf(status, sizeof(status), "exit status %lld",
					 (long long)json_integer_value(v));
			json_t *end = json_pack("{s:I, s:b, s:s}", "exitCode",
						sig ? (json_int_t)-1 : json_integer_value(v),
						"exited", !sig, "status", status);
			/* envd's "error" is Go's wait error: the status again
			 * (the SDK's CommandExitError message). */
			if (sig || json_integer_value(v))
				json_object_set_new(end, "error", json_string(status));
			rc = put(st, 0, json_pack("{s:{s:o}}", "event", "end", end));
			if (rc == 0)
				rc = put(st, 2, json_object());
		}
	} else if ((v = json_object_get(j, "error"))) {
		rc = put_end_error(st, "unavailable", message_of(j, "the command's stream failed"));
	}
	json_decref(j);
	return rc;
}

static int exec_sink(const char *p, size_t len, void *data)
{
	struct stream *st = data;
	const char *nl;

	buf_add(&st->line, p, len);
	while (st->line.len && (nl = memchr(st->line.data, '\n', st->line.len))) {
		size_t n = (size_t)(nl - st->line.data);
		int rc = st->done ? 0 : exec_line(st, st->line.data, n);
		memmove(st->line.data, nl + 1, st->line.len - n - 1);
		st->line.len -= n + 1;
		if (rc < 0)
			return -1;
	}
	/* A line is at most about 43 KiB (hostd/exec.c); more is not hostd. */
	return st->line.len > (1 << 20) ? -1 : 0;
}

static void *exec_producer(void *arg)
{
	struct stream *st = arg;
	json_t *resp = NULL;
	long status = 0;
	char err[256];

	if (hostapi_stream_as(E.sock, st->s.token, st->method, st->path, st->body, exec_sink, st,
			      &status, &resp, err, sizeof(err)) < 0 && !st->done &&
	    !atomic_load(&st->gone)) {
		if (status && status / 100 != 2) {
			const char *code = code_of(status, resp);
			char m[300];
			if (status == 404 && st->pid)
				snprintf(m, sizeof(m), "process with pid %lld not found",
					 (long long)st->pid);
			else
				snprintf(m, sizeof(m), "%s", message_of(resp, err));
			put_end_error(st, code, m);
		} else {
			put_end_error(st, "unavailable", "the command's stream from berth-hostd "
				      "ended early (its machine stopped, or berth-hostd did)");
		}
	} else if (!st->done && !atomic_load(&st->gone)) {
		if (status && status / 100 != 2)
			put_end_error(st, code_of(status, resp), message_of(resp, "refused"));
		else
			put_end_error(st, "unavailable", "the command's stream ended without "
				      "its end");
	}
	json_decref(resp);
	close(st->wfd);
	st->wfd = -1;
	stream_unref(st);
	return NULL;
}

/* A watched entry: its path relative to the watched directory, and what
 * tells a write. */
struct seen {
	char *rel;
	char type[12];
	long long size, mtime;
	json_t *raw;
};

static int seen_cmp(const void *a, const void *b)
{
	return strcmp(((const struct seen *)a)->rel, ((const struct seen *)b)->rel);
}

static void seen_free(struct seen *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(v[i].rel);
		json_decref(v[i].raw);
	}
	free(v);
}

/* DIR's tree (REL below the watched one), into *V (*N, sorted by the
 * caller).  0, or -1 with STATUS and RESP, or MSG. */
static int watch_list(struct stream *st, const char *dir, const char *rel, int depth,
		      struct seen **v, size_t *n, long *status, json_t **resp, char *msg,
		      size_t msglen)
{
	char *u = files_url(&st->s, "files/list", dir, NULL);
	json_t *j = NULL, *e;
	size_t i;

	*status = 0;
	if (hostapi_call_as(E.sock, st->s.token, "GET", u, NULL, status, &j, msg, msglen) < 0) {
		free(u);
		return -1;
	}
	free(u);
	if (*status != 200) {
		*resp = j;
		return -1;
	}
	json_array_foreach(json_object_get(j, "entries"), i, e) {
		const char *name = json_string_value(json_object_get(e, "name"));
		const char *type = json_string_value(json_object_get(e, "type"));
		char *r = NULL, *child = NULL;
		if (!name || !strcmp(name, ".") || !strcmp(name, "..") || *n >= WATCH_ENTRIES_MAX)
			continue;
		if (asprintf(&r, "%s%s%s", rel, *rel ? "/" : "", name) < 0 ||
		    asprintf(&child, "%s/%s", dir, name) < 0)
			abort();
		*v = realloc(*v, (*n + 1) * sizeof(**v));
		if (!*v)
			abort();
		struct seen *s = &(*v)[(*n)++];
		memset(s, 0, sizeof(*s));
		s->rel = r;
		snprintf(s->type, sizeof(s->type), "%s", type ? type : "");
		s->size = (long long)json_integer_value(json_object_get(e, "size"));
		s->mtime = (long long)json_integer_value(json_object_get(e, "mtime"));
		s->raw = json_incref(e);
		if (depth > 1 && type && !strcmp(type, "directory")) {
			long st2;
			json_t *r2 = NULL;
			if (watch_list(st, child, r, depth - 1, v, n, &st2, &r2, msg, msglen) < 0 &&
			    !st2) {
				free(child);
				json_decref(j);
				*status = 0;
				return -1;
			}
			json_decref(r2);
		}
		free(child);
	}
	json_decref(j);
	return 0;
}

static int watch_event(struct stream *st, const struct seen *e, const char *type)
{
	json_t *fe = json_pack("{s:s, s:s}", "name", e->rel, "type", type);

	if (st->include_entry && strcmp(type, "EVENT_TYPE_REMOVE")) {
		char *p = NULL;
		if (asprintf(&p, "%s/%s", st->dir, e->rel) < 0)
			abort();
		json_object_set_new(fe, "entry", entry_info(p, e->raw));
		free(p);
	}
	return put(st, 0, json_pack("{s:o}", "filesystem", fe));
}

/* WatchDir by polling hostd's listing every WATCH_POLL_MS (docs/api.md
 * says why): CREATE, WRITE (size or mtime changed), REMOVE; a rename shows
 * as REMOVE and CREATE. */
static void *watch_producer(void *arg)
{
	struct stream *st = arg;
	struct seen *old = NULL, *cur = NULL;
	size_t nold = 0, ncur = 0;
	int depth = st->recursive ? WATCH_DEPTH_MAX : 1;
	json_t *resp = NULL;
	long status;
	char msg[256];

	if (watch_list(st, st->dir, "", depth, &old, &nold, &status, &resp, msg,
		       sizeof(msg)) < 0) {
		put_end_error(st, status ? code_of(status, resp) : "unavailable",
			      status ? message_of(resp, "refused") : msg);
		goto out;
	}
	if (nold)   /* (qsort takes no NULL, an empty directory's) */
		qsort(old, nold, sizeof(*old), seen_cmp);
	if (put(st, 0, json_pack("{s:{}}", "start")) < 0)
		goto out;
	while (!atomic_load(&st->gone)) {
		for (int i = 0; i < WATCH_POLL_MS / 100 && !atomic_load(&st->gone); i++)
			usleep(100 * 1000);
		if (atomic_load(&st->gone))
			break;
		json_decref(resp);
		resp = NULL;
		cur = NULL;
		ncur = 0;
		if (watch_list(st, st->dir, "", depth, &cur, &ncur, &status, &resp, msg,
			       sizeof(msg)) < 0) {
			seen_free(cur, ncur);
			cur = NULL;
			put_end_error(st, status == 404 ? "not_found" : status ? code_of(status, resp)
				      : "unavailable", status ? message_of(resp, "refused") : msg);
			break;
		}
		if (ncur)
			qsort(cur, ncur, sizeof(*cur), seen_cmp);
		size_t i = 0, k = 0;
		int rc = 0;
		while (rc == 0 && (i < nold || k < ncur)) {
			int d = i >= nold ? 1 : k >= ncur ? -1 : strcmp(old[i].rel, cur[k].rel);
			if (d < 0)
				rc = watch_event(st, &old[i++], "EVENT_TYPE_REMOVE");
			else if (d > 0)
				rc = watch_event(st, &cur[k++], "EVENT_TYPE_CREATE");
			else {
				if (strcmp(old[i].type, "directory") &&
				    (old[i].size != cur[k].size || old[i].mtime != cur[k].mtime))
					rc = watch_event(st, &cur[k], "EVENT_TYPE_WRITE");
				i++;
				k++;
			}
		}
		seen_free(old, nold);
		old = cur;
		nold = ncur;
		cur = NULL;
		if (rc < 0)
			break;
	}
out:
	seen_free(old, nold);
	json_decref(resp);
	close(st->wfd);
	st->wfd = -1;
	stream_unref(st);
	return NULL;
}

/* libmicrohttpd's reader: envelopes from the pipe, a keepalive between two
 * after a silence, the end at the deadline. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct stream *st = cls;

	(void)pos;
	if (st->ended)
		return MHD_CONTENT_READER_END_OF_STREAM;
	for (;;) {
		int64_t now = mono_ms(), wait = st->keepalive_ms;
		bool between = st->hdr_seen == 0 && st->left == 0;
		if (st->deadline && between && now >= st->deadline) {
			struct buf b = BUF_INIT;
			envelope_add(&b, 2, json_pack("{s:{s:s, s:s}}", "error", "code",
						      "deadline_exceeded", "message",
						      "the stream reached its timeout "
						      "(Connect-Timeout-Ms)"));
			size_t n = b.len <= max ? b.len : 0;
			memcpy(buf, b.data, n);
			buf_free(&b);
			st->ended = true;
			return n ? (ssize_t)n : MHD_CONTENT_READER_END_WITH_ERROR;
		}
		if (st->deadline && st->deadline - now < wait)
			wait = st->deadline - now > 0 ? st->deadline - now : 0;
		struct pollfd p = { .fd = st->rfd, .events = POLLIN };
		int r = poll(&p, 1, (int)wait);
		if (r < 0 && errno == EINTR)
			continue;
		if (r == 0) {
			if (!between || (st->deadline && mono_ms() >= st->deadline))
				continue;
			struct buf b = BUF_INIT;
			envelope_add(&b, 0, st->watch ? json_pack("{s:{}}", "keepalive")
					    : json_pack("{s:{s:{}}}", "event", "keepalive"));
			size_t n = b.len <= max ? b.len : 0;
			memcpy(buf, b.data, n);
			buf_free(&b);
			if (n)
				return (ssize_t)n;
			continue;
		}
		ssize_t n = read(st->rfd, buf, max);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0)
			return n == 0 ? MHD_CONTENT_READER_END_OF_STREAM
				      : MHD_CONTENT_READER_END_WITH_ERROR;
		/* Follow the envelopes' framing through these bytes. */
		for (ssize_t i = 0; i < n;) {
			if (st->left) {
				size_t k = (size_t)(n - i) < st->left ? (size_t)(n - i) : st->left;
				st->left -= (uint32_t)k;
				i += (ssize_t)k;
				continue;
			}
			st->hdr[st->hdr_seen++] = (unsigned char)buf[i++];
			if (st->hdr_seen == 5) {
				st->left = (uint32_t)st->hdr[1] << 24 | (uint32_t)st->hdr[2] << 16 |
					   (uint32_t)st->hdr[3] << 8 | st->hdr[4];
				st->hdr_seen = 0;
			}
		}
		return n;
	}
}

static void stream_free_cb(void *cls)
{
	struct stream *st = cls;

	atomic_store(&st->gone, true);
	close(st->rfd);
	st->rfd = -1;
	stream_unref(st);
}

/* The stream's response, its producer FN started.  ST is taken. */
static enum MHD_Result stream_start(struct MHD_Connection *c, struct stream *st,
				    void *(*fn)(void *))
{
	const char *ka = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
						     "Keepalive-Ping-Interval");
	int p[2];
	pthread_t t;
	struct MHD_Response *resp;
	enum MHD_Result ret;
	char *end;
	long v = ka ? strtol(ka, &end, 10) : 0;

	st->keepalive_ms = (ka && *end == '\0' && v >= 1 && v < KEEPALIVE_MAX_S ? (int)v
			    : KEEPALIVE_MAX_S) * 1000;
	if (atomic_fetch_add(&E.streams, 1) >= STREAMS_MAX) {
		atomic_fetch_sub(&E.streams, 1);
		sbx_free(&st->s);
		free(st->path);
		free(st->dir);
		json_decref(st->body);
		free(st);
		return rpc_error(c, "resource_exhausted", "berth-web serves 512 envd streams at "
				 "once");
	}
	if (pipe2(p, O_CLOEXEC) < 0)
		abort();
	st->rfd = p[0];
	st->wfd = p[1];
	atomic_store(&st->refs, 2);
	if (pthread_create(&t, NULL, fn, st) != 0) {
		close(st->wfd);
		st->wfd = -1;
		stream_unref(st);
		stream_unref(st);
		return rpc_error(c, "unavailable", "cannot start a thread");
	}
	pthread_detach(t);
	resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 << 10, stream_read, st,
						 stream_free_cb);
	if (!resp) {
		stream_free_cb(st);
		return MHD_NO;
	}
	MHD_add_response_header(resp, "Content-Type", "application/connect+json");
	MHD_add_response_header(resp, "Cache-Control", "no-store");
	ret = MHD_queue_response(c, 200, resp);
	MHD_destroy_response(resp);
	return ret;
}

/* A fixed body sent chunked, as every stream's (libmicrohttpd's reader). */
struct fixed {
	struct buf b;
	size_t off;
};

static ssize_t fixed_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct fixed *f = cls;
	size_t n = f->b.len - f->off;

	(void)pos;
	if (!n)
		return MHD_CONTENT_READER_END_OF_STREAM;
	if (n > max)
		n = max;
	memcpy(buf, f->b.data + f->off, n);
	f->off += n;
	return (ssize_t)n;
}

static void fixed_free(void *cls)
{
	struct fixed *f = cls;

	buf_free(&f->b);
	free(f);
}

/* A stream's error before it started: 200 and the end-stream error. */
static enum MHD_Result stream_error(struct MHD_Connection *c, const char *code, const char *msg)
{
	struct fixed *f = calloc(1, sizeof(*f));
	struct MHD_Response *r;
	enum MHD_Result ret;

	if (!f)
		abort();
	envelope_add(&f->b, 2, json_pack("{s:{s:s, s:s}}", "error", "code", code, "message", msg));
	r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, fixed_read, f, fixed_free);
	if (!r) {
		fixed_free(f);
		return MHD_NO;
	}
	MHD_add_response_header(r, "Content-Type", "application/connect+json");
	MHD_add_response_header(r, "Cache-Control", "no-store");
	ret = MHD_queue_response(c, 200, r);
	MHD_destroy_response(r);
	return ret;
}

/* Connect-Timeout-Ms in ms (0: none). */
static int64_t timeout_ms(struct MHD_Connection *c)
{
	const char *t = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Connect-Timeout-Ms");
	char *end;
	long long v = t ? strtoll(t, &end, 10) : 0;

	return t && *end == '\0' && v > 0 ? (int64_t)v : 0;
}

static struct stream *stream_new(struct sbx *s)
{
	struct stream *st = calloc(1, sizeof(*st));

	if (!st)
		abort();
	st->rfd = st->wfd = -1;
	st->s = *s;               /* takes its env */
	s->env = NULL;
	return st;
}

static enum MHD_Result process_start(struct MHD_Connection *c, struct sbx *s, json_t *req)
{
	json_t *proc = json_object_get(req, "process"), *v;
	const char *cmd = json_string_value(json_object_get(proc, "cmd"));
	json_t *args = json_object_get(proc, "args"), *envs = json_object_get(proc, "envs");
	json_t *pty = json_object_get(req, "pty");
	const char *cwd = json_string_value(json_object_get(proc, "cwd"));
	int64_t tmo = timeout_ms(c);
	size_t i;
	const char *k;

	if (!cmd || !*cmd)
		return stream_error(c, "invalid_argument", "give process.cmd");
	if ((args && !json_is_array(args)) || (envs && !json_is_object(envs)))
		return stream_error(c, "invalid_argument", "process.args must be a list of "
				    "strings, process.envs an object of strings");
	json_t *argv = !strcmp(cmd, "/bin/bash") ? json_pack("[s, s, s, s]", "/bin/sh", "-c",
							     BASH_OR_SH, "bash")
						 : json_pack("[s]", cmd);
	json_t *env = json_object();
	json_array_foreach(args, i, v) {
		if (!json_is_string(v)) {
			json_decref(argv);
			json_decref(env);
			return stream_error(c, "invalid_argument", "process.args must be strings");
		}
		json_array_append(argv, v);
	}
	/* The sandbox's env vars first, the process's own over them. */
	json_object_foreach(s->env, k, v)
		json_object_set(env, k, v);
	json_object_foreach(envs, k, v)
		json_object_set(env, k, v);
	json_t *body = json_pack("{s:o, s:o, s:b, s:b}", "argv", argv, "env", env, "detach", 1,
				 "stdin_open", !json_is_false(json_object_get(req, "stdin")));
	if (cwd && *cwd)
		json_object_set_new(body, "cwd", json_string(cwd));
	if (strcmp(s->user, s->login))
		json_object_set_new(body, "user", json_string(s->user));
	if (tmo)
		json_object_set_new(body, "timeout", json_integer((tmo + 999) / 1000));
	if (pty) {
		json_t *size = json_object_get(pty, "size");
		json_int_t cols = json_integer_value(json_object_get(size, "cols"));
		json_int_t rows = json_integer_value(json_object_get(size, "rows"));
		json_object_set_new(body, "pty", json_pack("{s:I, s:I, s:s}", "cols",
							   cols ? cols : 80, "rows", rows ? rows : 24,
							   "term", "xterm-256color"));
	}
	struct stream *st = stream_new(s);
	snprintf(st->method, sizeof(st->method), "POST");
	if (asprintf(&st->path, "/v1/machines/%s/exec", st->s.name) < 0)
		abort();
	st->body = body;
	st->pty = pty != NULL;
	return stream_start(c, st, exec_producer);
}

static enum MHD_Result process_connect(struct MHD_Connection *c, struct sbx *s, json_t *req)
{
	int64_t pid = pid_of(req);

	if (!pid)
		return stream_error(c, "invalid_argument", "give the process as {\"pid\": N}");
	struct stream *st = stream_new(s);
	snprintf(st->method, sizeof(st->method), "GET");
	if (asprintf(&st->path, "/v1/machines/%s/exec/%lld/output", st->s.name,
		     (long long)pid) < 0)
		abort();
	st->pid = pid;
	if (timeout_ms(c))
		st->deadline = mono_ms() + timeout_ms(c);
	return stream_start(c, st, exec_producer);
}

static enum MHD_Result fs_watch(struct MHD_Connection *c, struct sbx *s, json_t *req)
{
	const char *p = str_field(req, "path");

	if (!p)
		return stream_error(c, "invalid_argument", "give \"path\"");
	struct stream *st = stream_new(s);
	st->watch = true;
	st->dir = abs_path(st->s.user, p);
	size_t n = strlen(st->dir);
	if (n > 1 && st->dir[n - 1] == '/')
		st->dir[n - 1] = '\0';
	st->recursive = json_is_true(json_object_get(req, "recursive"));
	st->include_entry = json_is_true(json_object_get(req, "includeEntry"));
	if (timeout_ms(c))
		st->deadline = mono_ms() + timeout_ms(c);
	return stream_start(c, st, watch_producer);
}

/* ---- /files --------------------------------------------------------------- */

/* A download's bytes, from hostd through a pipe. */
struct download {
	atomic_int refs;
	int rfd, wfd;
	char token[80];
	char *path;
	/* The thread's outcome, set before it closes wfd. */
	atomic_long status;
	char msg[256];
	/* The first bytes, read before the answer's status is chosen. */
	char *pre;
	size_t npre, pre_off;
};

static void download_unref(struct download *d)
{
	if (atomic_fetch_sub(&d->refs, 1) != 1)
		return;
	if (d->rfd >= 0)
		close(d->rfd);
	if (d->wfd >= 0)
		close(d->wfd);
	free(d->path);
	free(d->pre);
	free(d);
}

static void *download_main(void *arg)
{
	struct download *d = arg;
	json_t *resp = NULL;
	long status = 0;
	char err[256];

	if (hostapi_download_as(E.sock, d->token, d->path, d->wfd, NULL, NULL, &status, &resp,
				err, sizeof(err)) < 0 || status != 200)
		log_info("envd download %s: %s", d->path, status ? message_of(resp, err) : err);
	snprintf(d->msg, sizeof(d->msg), "%s", status ? message_of(resp, err) : err);
	atomic_store(&d->status, status ? status : 502);
	json_decref(resp);
	close(d->wfd);
	d->wfd = -1;
	download_unref(d);
	return NULL;
}

static ssize_t download_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct download *d = cls;
	ssize_t n;

	(void)pos;
	if (d->pre_off < d->npre) {
		n = (ssize_t)(d->npre - d->pre_off < max ? d->npre - d->pre_off : max);
		memcpy(buf, d->pre + d->pre_off, (size_t)n);
		d->pre_off += (size_t)n;
		return n;
	}
	do
		n = read(d->rfd, buf, max);
	while (n < 0 && errno == EINTR);
	/* Short of the size announced: the connection is cut, not ended. */
	return n > 0 ? n : MHD_CONTENT_READER_END_WITH_ERROR;
}

static void download_free_cb(void *cls)
{
	struct download *d = cls;

	close(d->rfd);
	d->rfd = -1;
	download_unref(d);
}

static enum MHD_Result files_get(struct MHD_Connection *c, const struct sbx *s, const char *path)
{
	json_t *resp = NULL, *j;
	long status;
	char msg[256];
	enum MHD_Result ret;

	char *ap = abs_path(s->user, path);
	if (!(j = stat_of(s, ap, &status, &resp, msg, sizeof(msg)))) {
		ret = status ? rest_error(c, status == 409 ? 400 : (unsigned)status,
					  message_of(resp, "refused"))
			     : rest_error(c, 502, msg);
		json_decref(resp);
		free(ap);
		return ret;
	}
	const char *type = json_string_value(json_object_get(j, "type"));
	bool is_dir = type && !strcmp(type, "directory");
	uint64_t size = (uint64_t)json_integer_value(json_object_get(j, "size"));
	json_decref(j);
	if (is_dir) {
		snprintf(msg, sizeof(msg), "path '%s' is a directory", ap);
		free(ap);
		return rest_error(c, 400, msg);
	}
	struct MHD_Response *r;
	if (size == 0) {
		r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
	} else {
		struct download *d = calloc(1, sizeof(*d));
		int p[2];
		pthread_t t;
		if (!d || pipe2(p, O_CLOEXEC) < 0)
			abort();
		d->rfd = p[0];
		d->wfd = p[1];
		snprintf(d->token, sizeof(d->token), "%s", s->token);
		d->path = files_url(s, "files", ap, NULL);
		atomic_store(&d->refs, 2);
		if (pthread_create(&t, NULL, download_main, d) != 0) {
			download_unref(d);
			download_unref(d);
			free(ap);
			return rest_error(c, 500, "cannot start a thread");
		}
		pthread_detach(t);
		/* Its first bytes, or hostd's refusal (a symbolic link to a
		 * directory, a file gone since the stat) as an error. */
		d->pre = malloc(64 << 10);
		if (!d->pre)
			abort();
		ssize_t got;
		do
			got = read(d->rfd, d->pre, 64 << 10);
		while (got < 0 && errno == EINTR);
		if (got <= 0) {
			long st = atomic_load(&d->status);
			snprintf(msg, sizeof(msg), "%s", d->msg);
			download_free_cb(d);
			free(ap);
			return rest_error(c, st == 409 ? 400 : st >= 400 ? (unsigned)st : 502, msg);
		}
		d->npre = (size_t)got;
		r = MHD_create_response_from_callback(size, 64 << 10, download_read, d,
						      download_free_cb);
		if (!r) {
			download_free_cb(d);
			free(ap);
			return MHD_NO;
		}
	}
	const char *slash = strrchr(ap, '/');
	char disp[300];
	snprintf(disp, sizeof(disp), "inline; filename=\"%.200s\"", slash ? slash + 1 : ap);
	for (char *q = disp + 18; *q; q++)
		if (*q == '"' || *q == '\\' || (unsigned char)*q < 0x20)
			*q = '_';
	disp[strlen(disp) - 1] = '"';
	MHD_add_response_header(r, "Content-Type", "application/octet-stream");
	MHD_add_response_header(r, "Content-Disposition", disp);
	MHD_add_response_header(r, "Cache-Control", "no-store");
	ret = MHD_queue_response(c, 200, r);
	MHD_destroy_response(r);
	free(ap);
	return ret;
}

/* gunzip the LEN bytes of IN into OUT, at most MAX bytes.  0 or -1. */
static int gunzip(const char *in, size_t len, struct buf *out, size_t max)
{
	z_stream z = { 0 };
	char piece[64 << 10];
	int rc;

	if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK)
		return -1;
	z.next_in = (Bytef *)(uintptr_t)in;
	z.avail_in = (uInt)len;
	do {
		z.next_out = (Bytef *)piece;
		z.avail_out = sizeof(piece);
		rc = inflate(&z, Z_NO_FLUSH);
		if (rc != Z_OK && rc != Z_STREAM_END)
			break;
		buf_add(out, piece, sizeof(piece) - z.avail_out);
		if (out->len > max) {
			rc = Z_MEM_ERROR;
			break;
		}
	} while (rc != Z_STREAM_END && (z.avail_in || z.avail_out == 0));
	inflateEnd(&z);
	return rc == Z_STREAM_END ? 0 : -1;
}

/* Write LEN bytes of DATA to AP (its parents made when missing).  0, or
 * the HTTP status of the error with MSG. */
static unsigned put_file(const struct sbx *s, const char *ap, const char *data, size_t len,
			 char *msg, size_t msglen)
{
	json_t *resp = NULL;
	long status = 0;
	char *u = files_url(s, "files", ap, NULL);

	for (int round = 0; round < 2; round++) {
		json_decref(resp);
		resp = NULL;
		if (hostapi_send_as(E.sock, s->token, "PUT", u, data ? data : "", len,
				    "application/octet-stream", &status, &resp, msg, msglen) < 0) {
			free(u);
			return 502;
		}
		if (status / 100 == 2 || status != 404 || round)
			break;
		/* The parents, then once more. */
		char *dir = strdup(ap), *slash;
		char mk[128];
		if (!dir)
			abort();
		slash = strrchr(dir, '/');
		if (!slash || slash == dir) {
			free(dir);
			break;
		}
		*slash = '\0';
		snprintf(mk, sizeof(mk), "/v1/machines/%s/files/mkdir", s->name);
		json_t *body = json_pack("{s:s, s:b}", "path", dir, "parents", 1), *r2 = NULL;
		long st2 = 0;
		hostapi_call_as(E.sock, s->token, "POST", mk, body, &st2, &r2, msg, msglen);
		json_decref(body);
		json_decref(r2);
		free(dir);
	}
	free(u);
	if (status / 100 == 2) {
		json_decref(resp);
		return 0;
	}
	snprintf(msg, msglen, "%s", message_of(resp, "berth-hostd refused"));
	json_decref(resp);
	return status == 409 ? 400 : status == 413 ? 507 : (unsigned)status;
}

static enum MHD_Result files_post(struct envd_req *r, struct MHD_Connection *c,
				  const struct sbx *s, const char *path)
{
	const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
	const char *ce = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Encoding");
	json_t *out = json_array();
	char msg[512], boundary[MULTIPART_BOUNDARY_MAX + 1];
	unsigned st;

	if (ct && !strncasecmp(ct, "application/octet-stream", 24)) {
		struct buf plain = BUF_INIT;
		const char *data = r->body.data;
		size_t len = r->body.len;
		if (!path) {
			json_decref(out);
			return rest_error(c, 400, "an application/octet-stream upload needs ?path=");
		}
		if (ce && !strcasecmp(ce, "gzip")) {
			if (gunzip(r->body.data ? r->body.data : "", r->body.len, &plain,
				   UPLOAD_MAX) < 0) {
				buf_free(&plain);
				json_decref(out);
				return rest_error(c, 400, "the body is not gzip, or inflates to more "
						  "than 64 MiB");
			}
			data = plain.data;
			len = plain.len;
		} else if (ce && strcasecmp(ce, "identity")) {
			json_decref(out);
			return rest_error(c, 400, "Content-Encoding must be gzip (or none)");
		}
		char *ap = abs_path(s->user, path);
		st = put_file(s, ap, data, len, msg, sizeof(msg));
		buf_free(&plain);
		if (st) {
			free(ap);
			json_decref(out);
			return rest_error(c, st, msg);
		}
		const char *slash = strrchr(ap, '/');
		json_array_append_new(out, json_pack("{s:s, s:s, s:s}", "path", ap, "name",
						     slash ? slash + 1 : ap, "type", "file"));
		free(ap);
		return queue_json(c, 200, out);
	}
	if (multipart_boundary(ct, boundary, sizeof(boundary)) < 0) {
		json_decref(out);
		return rest_error(c, 400, "Content-Type must be multipart/form-data (with a "
				  "boundary) or application/octet-stream");
	}
	struct multipart_part *parts = calloc(UPLOAD_PARTS_MAX, sizeof(*parts));
	if (!parts)
		abort();
	int n = multipart_parse(r->body.data ? r->body.data : "", r->body.len, boundary, parts,
				UPLOAD_PARTS_MAX, msg, sizeof(msg));
	if (n < 0) {
		free(parts);
		json_decref(out);
		return rest_error(c, 400, msg);
	}
	/* Check every part before writing any: a bad one leaves nothing. */
	char **dest = calloc((size_t)n + 1, sizeof(*dest));
	if (!dest)
		abort();
	int nd = 0;
	unsigned fail = 0;
	for (int i = 0; i < n && !fail; i++) {
		if (strcmp(parts[i].name, "file"))
			continue;
		const char *p = path ? path : parts[i].filename;
		if (!*p) {
			snprintf(msg, sizeof(msg), "part %d has no filename and there is no ?path=", i);
			fail = 400;
			break;
		}
		dest[nd] = abs_path(s->user, p);
		for (int k = 0; k < nd; k++)
			if (!strcmp(dest[k], dest[nd])) {
				snprintf(msg, sizeof(msg), "two parts write %.400s", dest[nd]);
				fail = 400;
			}
		nd++;
	}
	if (!fail && nd == 0) {
		snprintf(msg, sizeof(msg), "no part named \"file\"");
		fail = 400;
	}
	for (int i = 0, k = 0; i < n && !fail; i++) {
		if (strcmp(parts[i].name, "file"))
			continue;
		if ((st = put_file(s, dest[k], parts[i].data, parts[i].len, msg, sizeof(msg)))) {
			fail = st;
			break;
		}
		const char *slash = strrchr(dest[k], '/');
		json_array_append_new(out, json_pack("{s:s, s:s, s:s}", "path", dest[k], "name",
						     slash ? slash + 1 : dest[k], "type", "file"));
		k++;
	}
	for (int i = 0; i < nd; i++)
		free(dest[i]);
	free(dest);
	free(parts);
	if (fail) {
		json_decref(out);
		return rest_error(c, fail, msg);
	}
	return queue_json(c, 200, out);
}

/* ---- the handler ---------------------------------------------------------- */

static enum MHD_Result dispatch(struct envd_req *r, struct MHD_Connection *c,
				const char *method, const char *url)
{
	static const char *const streams[] = { "/process.Process/Start",
					       "/process.Process/Connect",
					       "/filesystem.Filesystem/WatchDir", NULL };
	bool is_rpc = !strncmp(url, "/process.Process/", 17) ||
		      !strncmp(url, "/filesystem.Filesystem/", 23);
	bool is_stream = false;
	char user[64], msg[300];
	const char *code = NULL;
	struct sbx s;
	enum MHD_Result ret;

	for (int i = 0; streams[i]; i++)
		is_stream |= !strcmp(url, streams[i]);
	if (!strcmp(url, "/health")) {
		if (strcmp(method, "GET") && strcmp(method, "HEAD"))
			return rest_error(c, 405, "GET /health");
		if (resolve(r, c, NULL, &s, &code, msg, sizeof(msg)) < 0)
			return rest_error(c, code_status(code), msg);
		bool up = !strcmp(s.state, "running");
		sbx_free(&s);
		if (!up)
			return rest_error(c, 502, "the sandbox is not running");
		return queue(c, 204, NULL, NULL, 0);
	}
	if (!strcmp(url, "/files")) {
		const char *path = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "path");
		const char *un = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "username");
		if (strcmp(method, "GET") && strcmp(method, "POST"))
			return rest_error(c, 405, "GET or POST /files");
		if (r->too_big)
			return rest_error(c, 413, "the upload is over 64 MiB (berth-web holds an "
					  "upload in memory)");
		if (resolve(r, c, un, &s, &code, msg, sizeof(msg)) < 0)
			return rest_error(c, code_status(code), msg);
		if (path && (!*path || strlen(path) > 4096)) {
			sbx_free(&s);
			return rest_error(c, 400, "invalid path");
		}
		if (files_user_ok(&s, msg, sizeof(msg)) < 0) {
			sbx_free(&s);
			return rest_error(c, 401, msg);
		}
		if (!strcmp(method, "GET")) {
			if (!path) {
				sbx_free(&s);
				return rest_error(c, 400, "give ?path=");
			}
			ret = files_get(c, &s, path);
		} else {
			ret = files_post(r, c, &s, path);
		}
		sbx_free(&s);
		return ret;
	}
	if (!is_rpc)
		return rest_error(c, 404, "no such envd route");
	if (strcmp(method, "POST"))
		return rpc_error(c, "unimplemented", "Connect calls are POST");
	const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
	if (is_stream && (!ct || strncasecmp(ct, "application/connect+json", 24)))
		return rpc_error(c, "invalid_argument", "a stream call's Content-Type is "
				 "application/connect+json");
	if (!is_stream && (!ct || strncasecmp(ct, "application/json", 16)))
		return rpc_error(c, "invalid_argument", "Content-Type must be application/json "
				 "(Connect's JSON codec; the binary one is not served)");
	if (r->too_big)
		return is_stream ? stream_error(c, "resource_exhausted", "the request is over 1 MiB")
				 : rpc_error(c, "resource_exhausted", "the request is over 1 MiB");
	if (basic_user(c, user, sizeof(user)) < 0)
		return is_stream ? stream_error(c, "unauthenticated", "Authorization is not Basic "
						"base64(USER:)")
				 : rpc_error(c, "unauthenticated", "Authorization is not Basic "
					     "base64(USER:)");
	/* A stream's request is one envelope: flags 0, its length, JSON. */
	if (is_stream) {
		const unsigned char *b = (const unsigned char *)r->body.data;
		uint32_t n;
		if (r->body.len < 5 || b[0] != 0)
			return stream_error(c, "invalid_argument", r->body.len < 5 ?
					    "the request is not an envelope" :
					    "the request's envelope has flags (compression is not "
					    "served)");
		n = (uint32_t)b[1] << 24 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 8 | b[4];
		if ((size_t)n != r->body.len - 5)
			return stream_error(c, "invalid_argument", "the request's envelope length "
					    "is not the body's");
		memmove(r->body.data, r->body.data + 5, n);
		r->body.len = n;
	}
	json_t *req;
	if (is_stream) {
		json_error_t je;
		req = json_loadb(r->body.len ? r->body.data : "{}", r->body.len ? r->body.len : 2,
				 JSON_REJECT_DUPLICATES, &je);
		if (!json_is_object(req)) {
			json_decref(req);
			return stream_error(c, "invalid_argument", "the request is not a JSON "
					    "object");
		}
	} else if (!(req = rpc_body(r, c, &ret))) {
		return ret;
	}
	if (resolve(r, c, user, &s, &code, msg, sizeof(msg)) < 0) {
		json_decref(req);
		return is_stream ? stream_error(c, code, msg) : rpc_error(c, code, msg);
	}
	bool fs = !strncmp(url, "/filesystem.", 12);
	if (fs && files_user_ok(&s, msg, sizeof(msg)) < 0) {
		ret = is_stream ? stream_error(c, "unauthenticated", msg)
				: rpc_error(c, "unauthenticated", msg);
	} else if (!strcmp(url, "/process.Process/Start")) {
		ret = process_start(c, &s, req);
	} else if (!strcmp(url, "/process.Process/Connect")) {
		ret = process_connect(c, &s, req);
	} else if (!strcmp(url, "/filesystem.Filesystem/WatchDir")) {
		ret = fs_watch(c, &s, req);
	} else if (!strcmp(url, "/process.Process/List")) {
		ret = process_list(c, &s);
	} else if (!strcmp(url, "/process.Process/SendInput")) {
		ret = process_input(c, &s, req, false);
	} else if (!strcmp(url, "/process.Process/CloseStdin")) {
		ret = process_input(c, &s, req, true);
	} else if (!strcmp(url, "/process.Process/SendSignal")) {
		ret = process_signal(c, &s, req);
	} else if (!strcmp(url, "/process.Process/Update")) {
		ret = process_update(c, &s, req);
	} else if (!strcmp(url, "/filesystem.Filesystem/Stat")) {
		ret = fs_stat(c, &s, req);
	} else if (!strcmp(url, "/filesystem.Filesystem/ListDir")) {
		ret = fs_list(c, &s, req);
	} else if (!strcmp(url, "/filesystem.Filesystem/MakeDir")) {
		ret = fs_mkdir(c, &s, req);
	} else if (!strcmp(url, "/filesystem.Filesystem/Move")) {
		ret = fs_move(c, &s, req);
	} else if (!strcmp(url, "/filesystem.Filesystem/Remove")) {
		ret = fs_remove(c, &s, req);
	} else {
		ret = rpc_error(c, "unimplemented", "this envd method is not served by berth");
	}
	sbx_free(&s);
	json_decref(req);
	return ret;
}

enum MHD_Result envd_handle(struct envd_req *r, struct MHD_Connection *c, const char *method,
			    const char *url, const char *upload_data, size_t *upload_data_size)
{
	if (!r->head_done) {
		char why[160];
		r->head_done = true;
		if (web_request_check(c, method, &r->f, why, sizeof(why)))
			return rest_error(c, 400, why);
		r->body_max = !strcmp(url, "/files") ? UPLOAD_MAX : RPC_BODY_MAX;
		if (!r->f.chunked && r->f.length > r->body_max)
			return rest_error(c, 413, "the request body is too large");
		return MHD_YES;
	}
	if (*upload_data_size) {
		if (!r->too_big && r->body.len + *upload_data_size <= r->body_max)
			buf_add(&r->body, upload_data, *upload_data_size);
		else {
			r->too_big = true;
			buf_free(&r->body);
		}
		*upload_data_size = 0;
		return MHD_YES;
	}
	return dispatch(r, c, method, url);
}
