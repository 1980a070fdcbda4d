/*
 * Unit tests of hostd's route table (hostd/api.h): who may call what, as
 * api_authorize reads it, for every row; that the table and docs/api.md
 * list the same routes; and how api_route_find matches paths.  Run from
 * the repository's root (it reads docs/api.md).
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "hostd/api.h"
#include "tests/unit/tap.h"

static const enum api_caller classes[] = { CALLER_ROOT, CALLER_USER, CALLER_TOKEN,
					   CALLER_SSHGW, CALLER_DESKTOP };
static const char *const class_names[] = { "root", "a local user", "a token",
					   "berth-sshgw's user", "berth-desktop's user" };

static bool allowed(const struct api_route *r, enum api_caller who, bool http)
{
	struct err e = { 0 };

	return api_authorize(r, who, http, NULL, &e) == 0;
}

static bool is_gateway_route(const struct api_route *r)
{
	return strncmp(r->path, "/v1/gateway/", 12) == 0;
}

/* The routes berth-desktop's user may call: no key lookups, no SSH
 * credentials. */
static bool is_desktop_route(const struct api_route *r)
{
	return is_gateway_route(r) && strcmp(r->path, "/v1/gateway/auth") != 0 &&
	       strcmp(r->path, "/v1/gateway/connect") != 0;
}

/* For every row: no root-only or gateway route with a token, each gateway
 * only on its own routes, and root on every route but over HTTP. */
static void test_who(void)
{
	size_t n;
	const struct api_route *rt = api_routes(&n);
	int token_bad = 0, gw_bad = 0, dt_bad = 0, user_bad = 0, root_bad = 0, refusal_bad = 0;

	check(n > 30, "the table has its routes (%zu)", n);
	for (size_t i = 0; i < n; i++) {
		const struct api_route *r = &rt[i];
		bool root_only = (r->who & ~(unsigned)CALLER_ROOT) == 0;
		if ((root_only || is_gateway_route(r)) && allowed(r, CALLER_TOKEN, true)) {
			token_bad++;
			diag("%s %s: open to a bearer token", r->method, r->path);
		}
		if (allowed(r, CALLER_SSHGW, false) != is_gateway_route(r)) {
			gw_bad++;
			diag("%s %s: berth-sshgw's user %s", r->method, r->path,
			     is_gateway_route(r) ? "may not call it" : "may call it");
		}
		if (allowed(r, CALLER_DESKTOP, false) != is_desktop_route(r)) {
			dt_bad++;
			diag("%s %s: berth-desktop's user %s", r->method, r->path,
			     is_desktop_route(r) ? "may not call it" : "may call it");
		}
		if (is_gateway_route(r) && (allowed(r, CALLER_USER, false) || !r->socket_only)) {
			user_bad++;
			diag("%s %s: a gateway route open to local users or over HTTP",
			     r->method, r->path);
		}
		if (!allowed(r, CALLER_ROOT, false)) {
			root_bad++;
			diag("%s %s: refused to root on the socket", r->method, r->path);
		}
		/* A refused class is told why in words of the row's own. */
		for (size_t k = 0; k < 3; k++) {
			struct err e = { 0 };
			if (api_authorize(r, classes[k], classes[k] == CALLER_TOKEN, NULL,
					  &e) == 0 || e.status != 403 || r->refusal)
				continue;
			refusal_bad++;
			diag("%s %s: refused to %s without a message of its own", r->method,
			     r->path, class_names[k]);
		}
	}
	check(token_bad == 0, "no root-only or gateway route is reachable with a bearer token");
	check(gw_bad == 0, "berth-sshgw's user reaches the /v1/gateway routes and nothing else");
	check(dt_bad == 0, "berth-desktop's user reaches its /v1/gateway routes and nothing "
	      "else: no key lookup, no SSH credential");
	check(user_bad == 0, "gateway routes: not for local users, and absent over HTTP");
	check(root_bad == 0, "root may call every route on the socket");
	check(refusal_bad == 0, "every refusal has its row's message");
}

/* The refusals callers see, by name. */
static void test_refusals(void)
{
	static const struct {
		const char *method, *path;
		enum api_caller who;
		bool http;
		int status;
		const char *msg;
	} cases[] = {
		{ "POST", "/v1/tokens", CALLER_TOKEN, true, 403, "berth token create" },
		{ "POST", "/v1/keys", CALLER_TOKEN, true, 403, "berth key add" },
		{ "POST", "/v1/tokens", CALLER_USER, false, 0, NULL },
		{ "POST", "/v1/machines/m/ssh", CALLER_USER, false, 403, "only root" },
		{ "POST", "/v1/machines/m/ssh", CALLER_TOKEN, true, 403, "only root" },
		{ "POST", "/v1/machines/m/ssh", CALLER_SSHGW, false, 403, "berth-sshgw's user may use only" },
		{ "GET", "/v1/machines", CALLER_SSHGW, false, 403, "berth-sshgw's user may use only" },
		{ "POST", "/v1/machines/m/ssh", CALLER_DESKTOP, false, 403, "berth-desktop's user may use only" },
		{ "POST", "/v1/gateway/connect", CALLER_DESKTOP, false, 403, "berth-desktop's user may use only" },
		{ "POST", "/v1/gateway/auth", CALLER_DESKTOP, false, 403, "berth-desktop's user may use only" },
		{ "POST", "/v1/gateway/sessions", CALLER_DESKTOP, false, 0, NULL },
		{ "GET", "/metrics", CALLER_TOKEN, true, 404, "no route" },
		{ "GET", "/metrics", CALLER_USER, false, 403, "only root" },
		{ "POST", "/v1/gateway/connect", CALLER_TOKEN, true, 404, "no route" },
		{ "POST", "/v1/gateway/connect", CALLER_USER, false, 403, "only root and berth-sshgw" },
		{ "POST", "/v1/gateway/connect", CALLER_SSHGW, false, 0, NULL },
		{ "PATCH", "/v1/images/tiny", CALLER_TOKEN, true, 403, "only root may publish" },
		{ "DELETE", "/v1/images/tiny", CALLER_TOKEN, true, 0, NULL },
		{ "PUT", "/v1/images/tiny", CALLER_USER, false, 403, "only root" },
		{ "GET", "/v1/machines", CALLER_TOKEN, true, 0, NULL },
	};
	char scratch[256];
	const char *args[4];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct err e = { 0 };
		const struct api_route *r = api_route_find(cases[i].method, cases[i].path, false,
							   scratch, sizeof(scratch), args, &e);
		int rc = r ? api_authorize(r, cases[i].who, cases[i].http, cases[i].path, &e)
			   : -1;
		bool ok = cases[i].status ? rc < 0 && e.status == cases[i].status &&
						   strstr(e.msg, cases[i].msg)
					  : rc == 0;
		if (!check(ok, "%s %s by %s%s: %d", cases[i].method, cases[i].path,
			   class_names[__builtin_ctz(cases[i].who)], cases[i].http ? " (HTTP)" : "",
			   cases[i].status ? cases[i].status : 200))
			diag("got rc %d, %d %s", rc, e.status, e.msg);
	}
}

/* A path with each parameter (an upper-case word in the docs, {x} in the
 * table) made "*" and its query string dropped: parameters compare equal
 * whatever they are called. */
static void normalize(const char *in, char *out, size_t outlen)
{
	size_t o = 0;
	const char *p = in;

	while (*p && *p != '?' && o + 2 < outlen) {
		if (*p == '/') {
			out[o++] = *p++;
			continue;
		}
		const char *q = p;
		bool upper = true;
		while (*q && *q != '/' && *q != '?') {
			if (!isupper((unsigned char)*q) && *q != '_')
				upper = false;
			q++;
		}
		if (*p == '{' || upper) {
			out[o++] = '*';
		} else {
			size_t len = (size_t)(q - p);
			if (o + len + 1 >= outlen)
				break;
			memcpy(out + o, p, len);
			o += len;
		}
		p = q;
	}
	out[o] = '\0';
}

#define MAX_ROUTES 128

struct route_set {
	char item[MAX_ROUTES][160];
	size_t n;
};

static void add_route(struct route_set *s, const char *method, const char *path)
{
	char norm[128], item[160];

	normalize(path, norm, sizeof(norm));
	snprintf(item, sizeof(item), "%s %s", method, norm);
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->item[i], item) == 0)
			return;
	if (s->n < MAX_ROUTES)
		snprintf(s->item[s->n++], sizeof(s->item[0]), "%s", item);
}

static bool has(const struct route_set *s, const char *item)
{
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->item[i], item) == 0)
			return true;
	return false;
}

/* Every route docs/api.md documents (its table rows "| `METHOD PATH` |")
 * is in the table, and every row of the table but the catch-alls is
 * documented. */
static void test_docs(void)
{
	static struct route_set doc, tab;
	char line[4096], method[16], path[512];
	FILE *f = fopen("docs/api.md", "re");
	size_t n;
	const struct api_route *rt = api_routes(&n);
	int missing = 0, undocumented = 0;

	if (!check(f != NULL, "docs/api.md opens (run from the repository's root)"))
		return;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "| `%15[A-Z] %511[^` ]", method, path) == 2 && path[0] == '/')
			add_route(&doc, method, path);
	fclose(f);
	for (size_t i = 0; i < n; i++)
		if (!rt[i].catch_all)
			add_route(&tab, rt[i].method, rt[i].path);
	check(doc.n > 30, "docs/api.md documents its routes (%zu)", doc.n);
	for (size_t i = 0; i < doc.n; i++)
		if (!has(&tab, doc.item[i])) {
			missing++;
			diag("documented, not in the table: %s", doc.item[i]);
		}
	for (size_t i = 0; i < tab.n; i++)
		if (!has(&doc, tab.item[i])) {
			undocumented++;
			diag("in the table, not documented: %s", tab.item[i]);
		}
	check(missing == 0, "every route in docs/api.md is in the table");
	check(undocumented == 0, "every route in the table is in docs/api.md");
}

static void test_find(void)
{
	char scratch[128], big[2048];
	const char *args[4] = { 0 };
	struct err e = { 0 };
	const struct api_route *r;

	r = api_route_find("DELETE", "/v1/machines/dev/checkpoints/c1", false, scratch,
			   sizeof(scratch), args, &e);
	check(r && !strcmp(r->path, "/v1/machines/{name}/checkpoints/{ckpt}") &&
	      !strcmp(args[0], "dev") && !strcmp(args[1], "c1"),
	      "find: parameters in order");
	r = api_route_find("POST", "/v1/machines/dev/start/", false, scratch, sizeof(scratch),
			   args, &e);
	check(r && !strcmp(r->path, "/v1/machines/{name}/start"), "find: a trailing slash");
	err_clear(&e);
	r = api_route_find("POST", "/v1/machines/Dev_1/start", false, scratch, sizeof(scratch),
			   args, &e);
	check(!r && e.status == 400 && !strcmp(e.code, "invalid_name"),
	      "find: an invalid machine name is 400 invalid_name");
	err_clear(&e);
	r = api_route_find("POST", "/v1/machines/dev/fly", false, scratch, sizeof(scratch), args,
			   &e);
	check(r && r->catch_all, "find: an unknown action reaches the catch-all");
	err_clear(&e);
	r = api_route_find("GET", "/v1/nothing", false, scratch, sizeof(scratch), args, &e);
	check(!r && e.status == 404, "find: no route is 404");
	err_clear(&e);
	r = api_route_find("PATCH", "/v1/images", false, scratch, sizeof(scratch), args, &e);
	check(!r && e.status == 404, "find: a known path with another method is 404");
	err_clear(&e);
	r = api_route_find("GET", "/v1/usage", true, scratch, sizeof(scratch), args, &e);
	check(r && r->query_all && r->who == CALLER_ROOT, "find: ?all=1 is root's row");
	r = api_route_find("GET", "/v1/usage", false, scratch, sizeof(scratch), args, &e);
	check(r && !r->query_all, "find: without it, everyone's");
	memset(big, 'a', sizeof(big) - 1);
	big[0] = '/';
	big[sizeof(big) - 1] = '\0';
	err_clear(&e);
	r = api_route_find("GET", big, false, scratch, sizeof(scratch), args, &e);
	check(!r && e.status == 414, "find: a path longer than the scratch space is 414");
	err_clear(&e);
	r = api_route_find("GET", "/a/b/c/d/e/f/g/h/i/j", false, scratch, sizeof(scratch), args,
			   &e);
	check(!r && e.status == 404, "find: too many segments is 404");
}

int main(void)
{
	test_who();
	test_refusals();
	test_docs();
	test_find();
	return tap_done("test_api_routes");
}
