/*
 * Unit tests for web/wsexec.c's messages (the sessions themselves run in
 * t460 against a real berth-web and hostd): the token check (what may go
 * into an Authorization header), the client's first message (the exec's
 * body, its token taken out, stdin kept open) and every refusal of it, and
 * the later text messages (resize, signal, eof) with theirs.
 *
 * Built by the Makefile as build/default/tests/test_wsexec.
 */
#include "web/wsexec.h"

#include <string.h>

#include "tests/unit/tap.h"
#include "common/banned.h"

static const char tok[] = "berth_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/* wsexec_first on TEXT; the body for hostd (compact JSON, keys sorted) or
 * "NULL: why" into OUT, the token into TOKEN. */
static void first(const char *text, const char *header, char *out, size_t outlen, char *token,
		  size_t tokenlen)
{
	char why[512];
	json_t *j = wsexec_first(text, strlen(text), header, token, tokenlen, why, sizeof(why));
	char *s = j ? json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS) : NULL;

	snprintf(out, outlen, "%s%s", j ? "" : "NULL: ", j ? s : why);
	free(s);
	json_decref(j);
}

static void test_token(void)
{
	char long_tok[600];

	check(wsexec_token_ok(tok), "a berth token is a token");
	check(wsexec_token_ok("abc-._~+/=="), "token68's characters, '=' at the end");
	check(!wsexec_token_ok(""), "an empty token is not");
	check(!wsexec_token_ok("berth_x\r\nX-Berth-User: root"),
	      "CR LF and a header after it: refused (it would add a header to hostd's request)");
	check(!wsexec_token_ok("berth_x\n"), "a LF at the end: refused");
	check(!wsexec_token_ok("berth x"), "a space: refused");
	check(!wsexec_token_ok("=abc"), "'=' first: refused");
	check(!wsexec_token_ok("ab=c"), "'=' inside: refused");
	check(!wsexec_token_ok("berth_\xc3\xa9"), "non-ASCII: refused");
	memset(long_tok, 'a', sizeof(long_tok) - 1);
	long_tok[sizeof(long_tok) - 1] = '\0';
	check(!wsexec_token_ok(long_tok), "599 characters: refused (511 at most)");
	long_tok[511] = '\0';
	check(wsexec_token_ok(long_tok), "511 characters: a token");
}

static void test_first(void)
{
	char out[1024], token[512], text[1024];

	snprintf(text, sizeof(text), "{\"token\": \"%s\", \"cmd\": \"exec sh -l\", \"pty\": "
		 "{\"cols\": 80, \"rows\": 24}}", tok);
	first(text, "", out, sizeof(out), token, sizeof(token));
	check_str(out, "{\"cmd\":\"exec sh -l\",\"pty\":{\"cols\":80,\"rows\":24},\"stdin_open\":true}",
		  "the first message: the exec's body for hostd, without its token, stdin open");
	check_str(token, tok, "  its token is the one for hostd");

	first("{\"argv\": [\"cat\"], \"stdin_open\": false}", tok, out, sizeof(out), token,
	      sizeof(token));
	check_str(out, "{\"argv\":[\"cat\"],\"stdin_open\":true}",
		  "with Authorization: no token in the message; stdin_open is true whatever");
	check_str(token, tok, "  the header's token is the one for hostd");

	first("{\"argv\": [\"true\"]}", "", out, sizeof(out), token, sizeof(token));
	check_str(out, "{\"argv\":[\"true\"],\"stdin_open\":true}",
		  "no token anywhere: the body goes (hostd answers 401)");
	check_str(token, "", "  with no token");

	first(text, tok, out, sizeof(out), token, sizeof(token));
	check_has(out, "NULL: a token came twice", "a token in Authorization and the message: refused");
	check_str(token, "", "  and no token kept");
	first("{\"token\": \"berth_x\\r\\nX-Berth-User: root\", \"argv\": [\"id\"]}", "", out,
	      sizeof(out), token, sizeof(token));
	check_has(out, "NULL: the token has characters that no token has",
		  "a token with CR LF and a header: refused");
	check_str(token, "", "  and no token kept");
	first("{\"token\": 42, \"argv\": [\"id\"]}", "", out, sizeof(out), token, sizeof(token));
	check_has(out, "NULL: \"token\" must be a string", "a token that is a number: refused");
	first("{\"argv\": [\"id\"]}", "bad token", out, sizeof(out), token, sizeof(token));
	check_has(out, "NULL: the token has characters", "a header token with a space: refused");
	first("[\"id\"]", "", out, sizeof(out), token, sizeof(token));
	check_has(out, "NULL: the first message must be a JSON object", "a JSON list: refused");
	first("exec sh", "", out, sizeof(out), token, sizeof(token));
	check_has(out, "NULL: the first message is not JSON", "not JSON: refused");
	first("{\"token\": \"a\", \"token\": \"b\", \"argv\": [\"id\"]}", "", out, sizeof(out),
	      token, sizeof(token));
	check_has(out, "NULL: the first message is not JSON", "a key twice: refused (which token?)");
	first("{\"token\": \"berth_a\\u0000x\", \"argv\": [\"id\"]}", "", out, sizeof(out), token,
	      sizeof(token));
	check_has(out, "NULL:", "a token with a NUL inside: refused");
}

/* wsexec_ctl_parse on TEXT: "resize C R", "signal NAME", "eof" or "refused: why". */
static void ctl(const char *text, char *out, size_t outlen)
{
	struct wsexec_ctl c;
	char why[512];

	if (wsexec_ctl_parse(text, strlen(text), &c, why, sizeof(why)) < 0)
		snprintf(out, outlen, "refused: %s", why);
	else if (c.op == WSEXEC_RESIZE)
		snprintf(out, outlen, "resize %lld %lld", (long long)c.cols, (long long)c.rows);
	else if (c.op == WSEXEC_SIGNAL)
		snprintf(out, outlen, "signal %s", c.signal);
	else
		snprintf(out, outlen, "eof");
}

static void test_ctl(void)
{
	char out[1024];

	ctl("{\"resize\": {\"cols\": 132, \"rows\": 43}}", out, sizeof(out));
	check_str(out, "resize 132 43", "resize");
	ctl("{\"signal\": \"INT\"}", out, sizeof(out));
	check_str(out, "signal INT", "signal INT");
	ctl("{\"signal\": \"SIGTERM\"}", out, sizeof(out));
	check_str(out, "signal SIGTERM", "signal SIGTERM (hostd takes either)");
	ctl("{\"eof\": true}", out, sizeof(out));
	check_str(out, "eof", "eof");

	ctl("{\"resize\": {\"cols\": 80}}", out, sizeof(out));
	check_has(out, "refused: \"resize\" must be", "resize without rows: refused");
	ctl("{\"resize\": {\"cols\": 80, \"rows\": \"24\"}}", out, sizeof(out));
	check_has(out, "refused: \"resize\" must be", "rows as a string: refused");
	ctl("{\"resize\": {\"cols\": 80, \"rows\": 24, \"x\": 1}}", out, sizeof(out));
	check_has(out, "refused: \"resize\" must be", "resize with another key: refused");
	ctl("{\"signal\": \"INT\\\", \\\"x\\\": \\\"y\"}", out, sizeof(out));
	check_has(out, "refused: \"signal\" must be a signal's name",
		  "a signal's name with quotes (JSON in the name): refused");
	ctl("{\"signal\": \"\"}", out, sizeof(out));
	check_has(out, "refused: \"signal\"", "an empty signal: refused");
	ctl("{\"signal\": \"ABCDEFGHIJKLMNOPQ\"}", out, sizeof(out));
	check_has(out, "refused: \"signal\"", "a signal's name of 17 characters: refused");
	ctl("{\"eof\": false}", out, sizeof(out));
	check_has(out, "refused: \"eof\" must be true", "eof false: refused");
	ctl("{\"eof\": true, \"signal\": \"INT\"}", out, sizeof(out));
	check_has(out, "refused: a text message is one of", "two at once: refused");
	ctl("{\"stdin\": \"aGk=\"}", out, sizeof(out));
	check_has(out, "stdin goes in binary messages", "stdin as text: refused, saying where it goes");
	ctl("ls -l", out, sizeof(out));
	check_has(out, "refused: a text message is one of", "not JSON: refused");
}

/* The groups the cap on sessions not authenticated yet counts. */
static void test_groups(void)
{
	static const char *const cases[][2] = {
		{ "127.0.0.1", "127.0.0.1" },
		{ "::ffff:10.1.2.3", "10.1.2.3" },
		{ "2001:db8:1:2:a:b:c:d", "2001:db8:1:2::/64" },
		{ "2001:db8:1:2::99", "2001:db8:1:2::/64" },
		{ "2001:db8:1:3::1", "2001:db8:1:3::/64" },
		{ "::1", "::/64" },
		{ "", "" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char g[64];
		wsexec_addr_group(cases[i][0], g, sizeof(g));
		if (!check(!strcmp(g, cases[i][1]), "the group of '%s' is '%s'", cases[i][0],
			   cases[i][1]))
			diag("got '%s'", g);
	}
}

int main(void)
{
	test_token();
	test_first();
	test_ctl();
	test_groups();
	return tap_done("test_wsexec");
}
