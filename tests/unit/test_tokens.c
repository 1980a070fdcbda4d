/*
 * Unit tests for API tokens (hostd/tokens.h) on a real SQLite file: the
 * secret's form, only its sha256 stored, a token acts for its owner,
 * malformed/unknown/revoked secrets are 401, names are checked, the limit
 * per user, and last_used; and http_listen's checks (daemon_parse_listen, config_check).
 *
 * Built by the Makefile as build/default/tests/test_tokens.
 */
#include "hostd/tokens.h"

#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/err.h"
#include "common/log.h"
#include "common/daemon.h"
#include "hostd/config.h"
#include "tests/unit/tap.h"
#include "common/banned.h"

static char dir[64];

static bool file_has(const char *path, const char *needle)
{
	FILE *f = fopen(path, "rb");
	static char buf[1 << 20];
	size_t n;

	if (!f)
		return false;
	n = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	return memmem(buf, n, needle, strlen(needle)) != NULL;
}

static void test_tokens(void)
{
	static struct hostd h;
	char path[128], secret[TOKEN_SECRET_LEN + 1], other[TOKEN_SECRET_LEN + 1];
	struct token t, got;
	struct err e = { 0 };

	snprintf(path, sizeof(path), "%s/berth.db", dir);
	h.db = db_open(path, &e);
	if (!check(h.db != NULL, "db opens")) {
		diag("%s", e.msg);
		return;
	}
	check(token_create(&h, "alice", "laptop", &t, secret, sizeof(secret), &e) == 0,
	      "create a token");
	check(strlen(secret) == TOKEN_SECRET_LEN && !strncmp(secret, "berth_", 6) &&
	      strspn(secret + 6, "0123456789abcdef") == 64, "its secret is berth_ + 64 hex");
	check(t.id > 0 && !strcmp(t.owner, "alice") && !strcmp(t.name, "laptop") &&
	      t.created > 0 && t.last_used == 0, "id, owner, name, created; never used");
	check(token_create(&h, "alice", NULL, &got, other, sizeof(other), &e) == 0 &&
	      !strcmp(got.name, "token") && strcmp(other, secret) != 0,
	      "a token without a name is 'token', with another secret");

	memset(&got, 0, sizeof(got));
	check(token_check(&h, secret, &got, &e) == 0 && got.id == t.id &&
	      !strcmp(got.owner, "alice"), "the secret finds its token and owner");
	check(got.last_used > 0, "its use is recorded");

	struct err e2 = { 0 };
	char bad[TOKEN_SECRET_LEN + 1];
	snprintf(bad, sizeof(bad), "%s", secret);
	bad[TOKEN_SECRET_LEN - 1] = bad[TOKEN_SECRET_LEN - 1] == '0' ? '1' : '0';
	check(token_check(&h, bad, &got, &e2) < 0 && e2.status == 401 &&
	      !strcmp(e2.code, "invalid_token"), "one digit changed: 401 invalid_token");
	const char *malformed[] = { "", "berth_", "berth_xyz", "Berth_0", secret + 1, NULL };
	for (int i = 0; malformed[i]; i++) {
		struct err e3 = { 0 };
		check(token_check(&h, malformed[i], &got, &e3) < 0 && e3.status == 401,
		      "malformed secret '%.12s…' is 401", malformed[i]);
	}
	char upper[TOKEN_SECRET_LEN + 1];
	snprintf(upper, sizeof(upper), "%s", secret);
	for (char *p = upper + 6; *p; p++)
		if (*p >= 'a' && *p <= 'f')
			*p = (char)(*p - 'a' + 'A');
	struct err e4 = { 0 };
	check(strcmp(upper, secret) == 0 || (token_check(&h, upper, &got, &e4) < 0 &&
	      e4.status == 401), "upper-case hex is another secret: 401");

	/* Only hashes on disk. */
	char wal[160];
	snprintf(wal, sizeof(wal), "%s-wal", path);
	check(!file_has(path, secret) && !file_has(wal, secret), "the secret is not on disk");

	struct token *ts = NULL;
	size_t n = 0;
	check(db_token_list(h.db, "alice", &ts, &n, &e) == 0 && n == 2 && ts[0].id == t.id,
	      "alice has two tokens, oldest first");
	free(ts);
	check(db_token_list(h.db, "bob", &ts, &n, &e) == 0 && n == 0, "bob has none");
	free(ts);
	struct err e5 = { 0 };
	check(db_token_delete(h.db, "bob", t.id, &e5) < 0 && e5.status == 404,
	      "bob cannot revoke alice's token (404)");
	check(db_token_delete(h.db, "alice", t.id, &e) == 0, "alice revokes it");
	struct err e6 = { 0 };
	check(token_check(&h, secret, &got, &e6) < 0 && e6.status == 401,
	      "a revoked token is 401");

	const char *names[] = { "a\tb", "", "x\n", NULL };
	const char *shown[] = { "a<TAB>b", "", "x<LF>" };
	for (int i = 0; names[i]; i++) {
		struct err e7 = { 0 };
		int rc = token_create(&h, "alice", names[i], &got, other, sizeof(other), &e7);
		/* "" means the default name, so it is accepted. */
		check(names[i][0] ? rc < 0 && !strcmp(e7.code, "invalid_token_name") : rc == 0,
		      "token name '%s'", shown[i]);
	}
	char longname[80];
	memset(longname, 'n', 64);
	longname[64] = '\0';
	struct err e8 = { 0 };
	check(token_create(&h, "alice", longname, &got, other, sizeof(other), &e8) < 0 &&
	      e8.status == 400, "a 64-byte name is refused");

	int made = 0;
	struct err e9 = { 0 };
	while (made < TOKEN_MAX_PER_USER + 5 &&
	       token_create(&h, "carol", "many", &got, other, sizeof(other), &e9) == 0)
		made++;
	check(made == TOKEN_MAX_PER_USER && e9.status == 409 &&
	      !strcmp(e9.code, "too_many_tokens"), "at most %d tokens per user (made %d)",
	      TOKEN_MAX_PER_USER, made);
	db_close(h.db);
}

static void test_listen(void)
{
	struct sockaddr_storage ss;
	socklen_t len;
	struct config cfg;

	check(daemon_parse_listen("127.0.0.1:8080", &ss, &len) == 0 &&
	      ss.ss_family == AF_INET && daemon_addr_loopback(&ss) &&
	      ntohs(((struct sockaddr_in *)&ss)->sin_port) == 8080, "127.0.0.1:8080");
	check(daemon_parse_listen("[::1]:443", &ss, &len) == 0 && ss.ss_family == AF_INET6 &&
	      daemon_addr_loopback(&ss) &&
	      ntohs(((struct sockaddr_in6 *)&ss)->sin6_port) == 443, "[::1]:443");
	check(daemon_parse_listen("0.0.0.0:1", &ss, &len) == 0 && !daemon_addr_loopback(&ss),
	      "0.0.0.0:1, not loopback");
	const char *bad[] = { "localhost:80", "127.0.0.1", ":80", "127.0.0.1:", "127.0.0.1:0",
			      "127.0.0.1:65536", "127.0.0.1:8o", "::1:80", "[::1]80", "[]:80",
			      "1.2.3.4.5:80", NULL };
	for (int i = 0; bad[i]; i++) {
		struct err e2 = { 0 };
		config_defaults(&cfg, "/tmp");
		snprintf(cfg.http_listen, sizeof(cfg.http_listen), "%s", bad[i]);
		check(daemon_parse_listen(bad[i], &ss, &len) < 0 && config_check(&cfg, &e2) < 0 &&
		      e2.status == 400 && strstr(e2.msg, bad[i]), "'%s' is refused, named", bad[i]);
	}
	struct err e3 = { 0 }, e4 = { 0 }, e5 = { 0 };
	config_defaults(&cfg, "/tmp");
	snprintf(cfg.http_listen, sizeof(cfg.http_listen), "0.0.0.0:443");
	check(config_check(&cfg, &e3) < 0 && strstr(e3.msg, "reachable from other hosts"),
	      "another host's address without TLS is refused");
	snprintf(cfg.tls_cert, sizeof(cfg.tls_cert), "/etc/cert.pem");
	check(config_check(&cfg, &e4) < 0 && strstr(e4.msg, "only tls_cert"),
	      "tls_cert without tls_key is refused");
	snprintf(cfg.tls_key, sizeof(cfg.tls_key), "/etc/key.pem");
	check(config_check(&cfg, &e5) == 0, "with both, it is not");
}

int main(void)
{
	int rc;

	log_threshold = LOG_ERROR;
	if (!tmpdir_make(dir, sizeof(dir))) {
		skip("everything", "cannot make a temporary directory");
		return tap_done("test_tokens");
	}
	test_tokens();
	test_listen();
	rc = tap_done("test_tokens");
	tmpdir_remove(dir);
	return rc;
}
