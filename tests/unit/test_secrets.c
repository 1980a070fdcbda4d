/*
 * Unit tests of the credential broker's rules (hostd/secrets_rules.c):
 * secrets' names, upstream URLs, header lines (refused without quoting
 * the value), a guest's call (method, path: no way out of the secret's
 * URL), the variables' names and text, and the script that writes them in
 * a machine, run for real by sh and by busybox sh (the tiny image's) in a
 * scratch directory standing for the guest's /: twice, with an image's
 * hook, with other lines in /etc/environment, and with nothing left.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/buf.h"
#include "hostd/secrets.h"
#include "tests/unit/tap.h"

static void test_names(void)
{
	char var[96];

	check(secrets_name_valid("anthropic") && secrets_name_valid("open-ai") &&
	      secrets_name_valid("a1"), "names: DNS labels starting with a letter");
	check(!secrets_name_valid("1abc") && !secrets_name_valid("Abc") &&
	      !secrets_name_valid("a-") && !secrets_name_valid("") &&
	      !secrets_name_valid("a_b") && !secrets_name_valid("log"),
	      "names: a digit first, capitals, a trailing dash, empty, '_', 'log' refused");
	secrets_env_var("open-ai", var, sizeof(var));
	check_str(var, "OPEN_AI_BASE_URL", "names: the variable of open-ai");
	secrets_env_var("anthropic", var, sizeof(var));
	check_str(var, "ANTHROPIC_BASE_URL", "names: ANTHROPIC_BASE_URL");
}

static void url_ok(const char *url, const char *want)
{
	char canon[512];
	struct err e = { 0 };

	if (!check(secrets_url_check(url, canon, sizeof(canon), &e) == 0 &&
		   !strcmp(canon, want), "url: %s -> %s", url, want))
		diag("%s / %s", canon, e.msg);
}

static void url_bad(const char *url, const char *why)
{
	char canon[512], shown[64];
	struct err e = { 0 };

	/* The TAP line shows control characters as '?'. */
	snprintf(shown, sizeof(shown), "%s", url);
	for (char *p = shown; *p; p++)
		if ((unsigned char)*p < 0x20)
			*p = '?';
	if (!check(secrets_url_check(url, canon, sizeof(canon), &e) < 0 && e.status == 400 &&
		   !strcmp(e.code, "invalid_url") && strstr(e.msg, why),
		   "url: '%s' refused (%s)", shown, why))
		diag("%s", e.msg);
}

static void test_urls(void)
{
	char big[600];

	url_ok("https://api.anthropic.com", "https://api.anthropic.com");
	url_ok("https://API.Example.com/v1/", "https://api.example.com/v1");
	url_ok("https://x.test:8443/a/b", "https://x.test:8443/a/b");
	url_ok("https://[::1]:8443/Mixed/Case", "https://[::1]:8443/Mixed/Case");
	url_ok("https://198.51.100.7", "https://198.51.100.7");
	url_bad("http://api.example.com", "https://");
	url_bad("ftp://x", "https://");
	url_bad("https://user:pw@x.test", "no user");
	url_bad("https://x.test/?a=1", "no query");
	url_bad("https://x.test#f", "no query or fragment");
	{
		/* A refused URL is quoted up to its query: a key there is not. */
		struct err e = { 0 };
		char canon[512];
		check(secrets_url_check("https://x.test/v1?key=sk-SECRET", canon, sizeof(canon),
					&e) < 0 && strstr(e.msg, "'https://x.test/v1…'") &&
		      !strstr(e.msg, "sk-SECRET"), "url: a refusal never quotes the query (%s)",
		      e.msg);
		err_clear(&e);
		check(secrets_url_check("http://x.test/?key=sk-SECRET", canon, sizeof(canon),
					&e) < 0 && !strstr(e.msg, "sk-SECRET"),
		      "url: nor does an http:// one's (%s)", e.msg);
	}
	url_bad("https://x.test:0", "port");
	url_bad("https://x.test:99999", "port");
	url_bad("https://x.test:44a3", "port");
	url_bad("https://", "host");
	url_bad("https://-x.test", "host");
	url_bad("https://x.test/a b", "printable");
	url_bad("https://x.test/\r\nHost: y", "printable");
	url_bad("https://x.test/a/../b", "segment");
	url_bad("https://x.test/a/%2e%2E/b", "segment");
	url_bad("https://x.test/a%2fb", "encoded");
	url_bad("https://x_y.test", "host");
	memset(big, 'a', sizeof(big));
	memcpy(big, "https://", 8);
	big[sizeof(big) - 1] = '\0';
	url_bad(big, "500");
}

static void header_ok(const char *line, const char *name, const char *value)
{
	char n[65], v[4097];
	struct err e = { 0 };

	if (!check(secrets_header_parse(line, n, sizeof(n), v, sizeof(v), &e) == 0 &&
		   !strcmp(n, name) && !strcmp(v, value), "header: '%s'", line))
		diag("%s", e.msg);
}

/* LINE is refused, saying WHY, and never quoting its value's SECRET. */
static void header_bad(const char *line, const char *why, const char *secret)
{
	char n[65], v[4097];
	struct err e = { 0 };

	if (!check(secrets_header_parse(line, n, sizeof(n), v, sizeof(v), &e) < 0 &&
		   e.status == 400 && !strcmp(e.code, "invalid_header") && strstr(e.msg, why) &&
		   (!secret || !strstr(e.msg, secret)), "header refused: %s", why))
		diag("%s", e.msg);
}

static void test_headers(void)
{
	char big[5000];

	header_ok("x-api-key: sk-ant-123", "x-api-key", "sk-ant-123");
	header_ok("Authorization:Bearer abc def  \t", "Authorization", "Bearer abc def");
	header_ok("X-Weird!#$%&'*+.^_`|~: v", "X-Weird!#$%&'*+.^_`|~", "v");
	header_bad("x-api-key: sk-SECRET\r\nX-Other: y", "control character", "sk-SECRET");
	header_bad("x-api-key: sk-SECRET\nX: y", "control character", "sk-SECRET");
	header_bad("x-api-key: sk-\x01SECRET", "control character", "SECRET");
	header_bad("x-api-key: sk-\xc3\xa9SECRET", "not ASCII", "SECRET");
	header_bad("no colon sk-SECRET", "Name: value", "SECRET");
	header_bad("bad name: sk-SECRET", "name is letters", "SECRET");
	header_bad(": sk-SECRET", "1 to 64", "SECRET");
	header_bad("x-api-key:   ", "no value", NULL);
	header_bad("Host: evil.test", "broker's own", NULL);
	header_bad("content-length: 5", "broker's own", NULL);
	header_bad("Transfer-Encoding: chunked", "broker's own", NULL);
	header_bad("Connection: close", "broker's own", NULL);
	memset(big, 'k', sizeof(big));
	memcpy(big, "x-api-key: ", 11);
	big[sizeof(big) - 1] = '\0';
	header_bad(big, "4096", NULL);
}

static void request_ok(const char *method, const char *path, const char *log)
{
	char lp[512];
	struct err e = { 0 };

	if (!check(secrets_request_check(method, path, lp, sizeof(lp), &e) == 0 &&
		   !strcmp(lp, log), "call: %s %s (logged %s)", method, path, log))
		diag("%s", e.msg);
}

static void request_bad(const char *method, const char *path, const char *why)
{
	char lp[512];
	struct err e = { 0 };

	if (!check(secrets_request_check(method, path, lp, sizeof(lp), &e) < 0 &&
		   e.status == 400 && strstr(e.msg, why), "call refused: %s %s", method, path))
		diag("%s", e.msg);
}

static void test_requests(void)
{
	char out[64];
	struct err e = { 0 };

	request_ok("POST", "/v1/messages", "/v1/messages");
	request_ok("GET", "/v1/models?limit=2&key=abc", "/v1/models");
	request_ok("GET", "/", "/");
	request_ok("GET", "/.well-known/x/...", "/.well-known/x/...");
	request_ok("PATCH", "/a/b%20c", "/a/b%20c");
	request_bad("GET", "/v1/../admin", "segment");
	request_bad("GET", "/v1/..", "segment");
	request_bad("GET", "/v1/./x", "segment");
	request_bad("GET", "/v1/%2e%2e/admin", "segment");
	request_bad("GET", "/v1/%2E./admin", "segment");
	request_bad("GET", "/v1/a%2Fb", "encoded");
	request_bad("GET", "/v1/a%5cb", "encoded");
	request_bad("GET", "/v1/a\\b", "segment");
	request_bad("GET", "/a b", "printable");
	request_bad("GET", "/a#b", "printable");
	request_bad("GET", "v1", "start with '/'");
	request_bad("CONNECT", "/", "does not forward");
	request_bad("trace", "/", "does not forward");
	request_bad("TRACK", "/", "does not forward");
	request_bad("track", "/", "does not forward");
	request_bad("GE T", "/", "method");
	request_bad("", "/", "method");
	check(secrets_url_join("https://x.test/v1", "/messages?a=1", out, sizeof(out), &e) == 0 &&
	      !strcmp(out, "https://x.test/v1/messages?a=1"), "join: the URL, then the path");
	check(secrets_url_join("https://x.test/v1", "/0123456789012345678901234567890123456789"
			       "0123456789", out, sizeof(out), &e) < 0 && e.status == 400,
	      "join: too long is refused");
}

/* S with every "/etc/" and "/usr/lib/berth/" put under ROOT. */
static char *rooted(const char *s, const char *root)
{
	struct buf b = BUF_INIT;

	for (const char *p = s; *p;) {
		if (!strncmp(p, "/etc/", 5) || !strncmp(p, "/usr/lib/berth/", 15)) {
			buf_adds(&b, root);
		}
		buf_add(&b, p, 1);
		p++;
	}
	return buf_detach(&b);
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "re");
	struct buf b = BUF_INIT;
	char chunk[4096];
	size_t n;

	if (!f)
		return NULL;
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		buf_add(&b, chunk, n);
	fclose(f);
	return buf_detach(&b);
}

static int run_script(const char *shell, const char *env, const char *root)
{
	struct buf s = BUF_INIT;
	char *script, *out = NULL;
	char *const argv_sh[] = { (char *)shell, "-s", NULL };
	char *const argv_bb[] = { (char *)shell, "sh", "-s", NULL };
	int rc;

	secrets_env_script(env, &s);
	script = rooted(buf_str(&s), root);
	rc = tool_run(strstr(shell, "busybox") ? argv_bb : argv_sh, script, &out);
	if (rc != 0)
		diag("%s: %s", shell, out ? out : "");
	free(out);
	free(script);
	buf_free(&s);
	return rc;
}

static void test_script_with(const char *shell)
{
	char root[64], path[320], hook[256], *got;
	const char *env = "ANTHROPIC_BASE_URL=http://10.87.0.1:9480/anthropic\n"
			  "OPENAI_BASE_URL=http://10.87.0.1:9480/openai\n";

	if (!tmpdir_make(root, sizeof(root))) {
		check(false, "%s: a scratch root", shell);
		return;
	}
	snprintf(path, sizeof(path), "%s/etc", root);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/etc/environment", root);
	write_file(path, "LANG=C.UTF-8\nPATH=/usr/bin\n", 27);
	check(run_script(shell, env, root) == 0, "%s: the script runs", shell);
	check(run_script(shell, env, root) == 0, "%s: and again", shell);
	snprintf(path, sizeof(path), "%s/etc/berth/broker.env", root);
	got = slurp(path);
	check_str(got ? got : "", env, "%s: /etc/berth/broker.env holds the variables");
	free(got);
	snprintf(path, sizeof(path), "%s/etc/profile.d/berth-broker.sh", root);
	got = slurp(path);
	check(got && strstr(got, "\nexport ANTHROPIC_BASE_URL=http://10.87.0.1:9480/anthropic\n") &&
	      strstr(got, "\nexport OPENAI_BASE_URL=http://10.87.0.1:9480/openai\n"),
	      "%s: profile.d exports them", shell);
	free(got);
	snprintf(path, sizeof(path), "%s/etc/environment", root);
	got = slurp(path);
	check_str(got ? got : "", "LANG=C.UTF-8\nPATH=/usr/bin\n# berth-broker begin\n"
		  "ANTHROPIC_BASE_URL=http://10.87.0.1:9480/anthropic\n"
		  "OPENAI_BASE_URL=http://10.87.0.1:9480/openai\n# berth-broker end\n",
		  "%s: /etc/environment: its lines kept, one block of the broker's (run twice)");
	free(got);

	/* An image's hook: its VAR=VALUE lines join, anything else is dropped. */
	snprintf(hook, sizeof(hook), "%s/usr/lib/berth", root);
	snprintf(path, sizeof(path), "mkdir -p %s", hook);
	if (system(path) != 0)
		diag("mkdir failed");
	snprintf(hook, sizeof(hook), "%s/usr/lib/berth/broker-env", root);
	const char *h = "#!/bin/sh\ngrep -q OPENAI \"$1\" && echo OPENAI_API_KEY=berth-broker\n"
			"echo 'EVIL=$(reboot)'\necho 'X=a b'\necho 'lower=ok'\n";
	write_file(hook, h, strlen(h));
	chmod(hook, 0755);
	check(run_script(shell, env, root) == 0, "%s: with an image's hook", shell);
	snprintf(path, sizeof(path), "%s/etc/profile.d/berth-broker.sh", root);
	got = slurp(path);
	check(got && strstr(got, "\nexport OPENAI_API_KEY=berth-broker\n") &&
	      strstr(got, "\nexport lower=ok\n") && !strstr(got, "EVIL") && !strstr(got, "X="),
	      "%s: the hook's lines join, those with other characters do not", shell);
	free(got);

	/* No grant left: nothing of the broker's but an empty env file. */
	check(run_script(shell, "", root) == 0, "%s: with no variables", shell);
	snprintf(path, sizeof(path), "%s/etc/profile.d/berth-broker.sh", root);
	got = slurp(path);
	check(!got || (strstr(got, "lower=ok") && !strstr(got, "BASE_URL")),
	      "%s: profile.d's file holds only the hook's lines", shell);
	free(got);
	snprintf(path, sizeof(path), "%s/etc/environment", root);
	got = slurp(path);
	check(got && !strstr(got, "BASE_URL") && strstr(got, "LANG=C.UTF-8\nPATH=/usr/bin\n"),
	      "%s: /etc/environment: the block's variables gone, the rest kept", shell);
	free(got);
	unlink(hook);
	check(run_script(shell, "", root) == 0, "%s: with no variables and no hook", shell);
	snprintf(path, sizeof(path), "%s/etc/profile.d/berth-broker.sh", root);
	check(access(path, F_OK) != 0, "%s: profile.d's file is gone", shell);
	snprintf(path, sizeof(path), "%s/etc/environment", root);
	got = slurp(path);
	check_str(got ? got : "", "LANG=C.UTF-8\nPATH=/usr/bin\n",
		  "%s: /etc/environment as it was before the broker");
	free(got);
	tmpdir_remove(root);
}

static void test_env(void)
{
	struct buf b = BUF_INIT;
	char names[2][64] = { "anthropic", "my-api" };
	char bb[512];

	secrets_env_text("http://10.87.0.1:9480", names, 2, &b);
	check_str(buf_str(&b), "ANTHROPIC_BASE_URL=http://10.87.0.1:9480/anthropic\n"
		  "MY_API_BASE_URL=http://10.87.0.1:9480/my-api\n", "env: one line a secret");
	buf_free(&b);
	test_script_with("/bin/sh");
	if (tool_find("busybox", bb, sizeof(bb)))
		test_script_with(bb);
	else
		skip("the script under busybox sh", "no busybox (apt-get install busybox-static)");
}

int main(void)
{
	test_names();
	test_urls();
	test_headers();
	test_requests();
	test_env();
	return tap_done("test_secrets");
}
