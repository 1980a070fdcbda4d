/*
 * Unit tests of hostd/webhooks.c's pure parts and its queue in the
 * database: the signature (HMAC-SHA256 of "TIMESTAMP.BODY", checked
 * against values computed with Python's hmac module), URL validation
 * (schemes, hosts, ports, user info, fragments, length), event kinds; and
 * the queue: an event goes to the webhooks of its owner that want its
 * kind and machine, each webhook's pending deliveries come one at a time
 * (the oldest), a finished log is trimmed to the last KEEP, a queue at its
 * limit drops (failed) instead of growing, another user's webhook is 404.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostd/db.h"
#include "hostd/webhooks.h"
#include "tests/unit/tap.h"

static void test_sign(void)
{
	char sig[72];
	const char *body = "{\"id\":42,\"time\":\"2026-12-03T15:00:00.000Z\",\"owner\":\"alice\","
			   "\"machine\":\"m\",\"kind\":\"suspended\",\"cause\":\"idle for 15s "
			   "(timeout 6s)\"}";
	const char *key = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

	webhook_sign("Jefe", 1700000000, "what do ya want for nothing?", 28, sig);
	check(!strcmp(sig, "sha256=1cdd0650c8be1cb0974b1788d458b1e781206cfef59b85faafc582d2e182c57e"),
	      "HMAC-SHA256(\"Jefe\", \"1700000000.what do ya want for nothing?\"): %s", sig);
	webhook_sign(key, 1764774000, body, strlen(body), sig);
	check(!strcmp(sig, "sha256=f40ee3e6bd8259c44e79c904fd9992e3ad20ec728c0d0a2825c8aa0b1ac79f78"),
	      "an event's body with a 64-hex-digit secret: %s", sig);
	webhook_sign(key, 1764774001, body, strlen(body), sig);
	check(!strcmp(sig, "sha256=0cbede55630b7fe315da99f4dcf1d17e7d007329baeec01f51389cd1305a6b3c"),
	      "another timestamp, another signature: %s", sig);
	webhook_sign(key, 1764774000, body, strlen(body) - 1, sig);
	check(strcmp(sig, "sha256=f40ee3e6bd8259c44e79c904fd9992e3ad20ec728c0d0a2825c8aa0b1ac79f78"),
	      "a body one byte shorter: another signature");
}

static void test_url(void)
{
	static const struct { const char *url; bool https; const char *host; int port; } good[] = {
		{ "https://hooks.example.com/berth", true, "hooks.example.com", 443 },
		{ "http://127.0.0.1:8080/x?token=abc", false, "127.0.0.1", 8080 },
		{ "HTTPS://example.com", true, "example.com", 443 },
		{ "http://[2001:db8::1]:9000/", false, "2001:db8::1", 9000 },
		{ "http://a-b.c/?q", false, "a-b.c", 80 },
	};
	static const struct { const char *url; const char *why; } bad[] = {
		{ "", "empty" },
		{ "ftp://example.com/", "http:// or https://" },
		{ "example.com/hook", "http:// or https://" },
		{ "http://", "no valid host" },
		{ "http:///x", "no valid host" },
		{ "http://user:pw@example.com/", "no user or password" },
		{ "http://example.com:0/", "port must be 1 to 65535" },
		{ "http://example.com:65536/", "port must be 1 to 65535" },
		{ "http://example.com:80x/", "port must be 1 to 65535" },
		{ "http://example.com/#frag", "no fragment" },
		{ "http://exa mple.com/", "printable ASCII" },
		{ "http://example.com/\x01", "printable ASCII" },
		{ "http://-x.com/", "no valid host" },
		{ "http://x_y.com/", "no valid host" },
		{ "http://[::1/", "IPv6" },
		{ "http://[zz::1]/", "IPv6" },
		{ "http://[1:2:3:4:5:6:7:8:9]/", "not an IPv6 address" },
	};
	struct webhook_url u;
	char long_url[WEBHOOK_URL_MAX + 40];

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		struct err e = { 0 };
		int rc = webhook_url_parse(good[i].url, &u, &e);
		if (!check(rc == 0 && u.https == good[i].https && !strcmp(u.host, good[i].host) &&
			   u.port == good[i].port, "%s: %s %s port %d", good[i].url,
			   good[i].https ? "https" : "http", good[i].host, good[i].port))
			diag("rc %d: %s; https %d host '%s' port %d", rc, e.msg, u.https, u.host,
			     u.port);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct err e = { 0 };
		int rc = webhook_url_parse(bad[i].url, &u, &e);
		if (!check(rc < 0 && e.status == 400 && !strcmp(e.code, "invalid_url") &&
			   strstr(e.msg, bad[i].why), "'%s' refused: %s", bad[i].url, bad[i].why))
			diag("rc %d: %d %s %s", rc, e.status, e.code, e.msg);
	}
	memset(long_url, 'a', sizeof(long_url) - 1);
	long_url[sizeof(long_url) - 1] = '\0';
	memcpy(long_url, "http://x.com/", 13);
	{
		struct err e = { 0 };
		check(webhook_url_parse(long_url, &u, &e) < 0 && strstr(e.msg, "longer than 500"),
		      "a URL over 500 bytes refused: %s", e.msg);
	}
	check(webhook_kind_valid("suspended") && webhook_kind_valid("quota_refused") &&
	      !webhook_kind_valid("exploded") && !webhook_kind_valid(""),
	      "event kinds: suspended, quota_refused yes; exploded, \"\" no");
}

static struct db_event event(int64_t id, const char *owner, const char *machine,
			     const char *kind)
{
	struct db_event ev = { .id = id, .t = 1000 };

	snprintf(ev.owner, sizeof(ev.owner), "%s", owner);
	snprintf(ev.machine, sizeof(ev.machine), "%s", machine);
	snprintf(ev.kind, sizeof(ev.kind), "%s", kind);
	return ev;
}

static int64_t add_hook(struct db *db, const char *owner, const char *events,
			const char *machine)
{
	struct db_webhook w = { 0 };
	struct err e = { 0 };

	snprintf(w.owner, sizeof(w.owner), "%s", owner);
	snprintf(w.url, sizeof(w.url), "http://x/%s", owner);
	snprintf(w.events, sizeof(w.events), "%s", events);
	snprintf(w.machine, sizeof(w.machine), "%s", machine);
	snprintf(w.secret, sizeof(w.secret), "s");
	if (db_webhook_insert(db, &w, WEBHOOK_MAX_PER_USER, &e) < 0) {
		diag("insert: %s", e.msg);
		return -1;
	}
	return w.id;
}

static int queued(struct db *db, const struct db_event *ev)
{
	struct err e = { 0 };
	int n = -1;

	if (db_delivery_enqueue(db, ev, "{}", 5, 3, 2, &n, &e) < 0)
		diag("enqueue: %s", e.msg);
	return n;
}

static void test_queue(void)
{
	char dir[] = "/tmp/berth-test-webhooks.XXXXXX", path[128];
	struct err e = { 0 };
	struct db *db;
	struct db_delivery *ds = NULL;
	struct db_webhook *ws = NULL, w;
	size_t n = 0;

	if (!mkdtemp(dir)) {
		check(false, "a temporary directory");
		return;
	}
	snprintf(path, sizeof(path), "%s/berth.db", dir);
	db = db_open(path, &e);
	if (!check(db != NULL, "a database with the webhooks' migration")) {
		diag("%s", e.msg);
		return;
	}
	int64_t all = add_hook(db, "alice", "", "");
	int64_t sus = add_hook(db, "alice", "suspended,woke", "m");
	int64_t bob = add_hook(db, "bob", "", "");
	check(all > 0 && sus > 0 && bob > 0, "three webhooks");

	struct db_event e1 = event(1, "alice", "m", "created");
	struct db_event e2 = event(2, "alice", "m", "suspended");
	struct db_event e3 = event(3, "alice", "other", "suspended");
	struct db_event e4 = event(4, "alice", "m", "suspendedx");
	check(queued(db, &e1) == 1, "alice's created of m: to her webhook for all only");
	check(queued(db, &e2) == 2, "her suspended of m: to both of hers");
	check(queued(db, &e3) == 1, "her suspended of another machine: not the one for m");
	check(queued(db, &e4) == 1, "a kind that only starts like a wanted one: not it");

	check(db_delivery_heads(db, 10, &ds, &ws, &n, &e) == 0 && n == 2,
	      "the heads: one per webhook with pending deliveries (%zu)", n);
	for (size_t i = 0; i < n; i++) {
		if (ds[i].webhook_id == all)
			check(ds[i].event_id == 1 && !strcmp(ws[i].url, "http://x/alice"),
			      "  the webhook for all: its oldest (event 1), with its URL");
		else
			check(ds[i].webhook_id == sus && ds[i].event_id == 2 &&
			      !strcmp(ds[i].state, "pending") && !strcmp(ds[i].body, "{}"),
			      "  the one for m: event 2, pending, its body");
	}
	/* Delivered: the next of that webhook comes up. */
	struct db_delivery d = ds[0].webhook_id == all ? ds[0] : ds[1];
	free(ds);
	free(ws);
	snprintf(d.state, sizeof(d.state), "delivered");
	d.attempts = 1;
	d.last_status = 200;
	check(db_delivery_update(db, &d, 2, &e) == 0, "a delivery recorded");
	check(db_delivery_heads(db, 10, &ds, &ws, &n, &e) == 0 && n == 2, "heads again");
	for (size_t i = 0; i < n; i++)
		if (ds[i].webhook_id == all)
			check(ds[i].event_id == 2, "  the webhook for all: its next, event 2");
	free(ds);
	free(ws);

	/* The pending limit (3 here): a fourth is dropped, failed at once. */
	struct db_event e5 = event(5, "alice", "m", "created");
	check(queued(db, &e5) == 1, "a third pending for the webhook for all");
	struct db_event e6 = event(6, "alice", "m", "created");
	queued(db, &e6);
	struct db_delivery *log = NULL;
	size_t nl = 0;
	check(db_delivery_list(db, all, 100, &log, &nl, &e) == 0 && nl > 0 &&
	      log[nl - 1].event_id == 6 && !strcmp(log[nl - 1].state, "failed") &&
	      strstr(log[nl - 1].last_error, "dropped"),
	      "over the limit: failed, \"dropped\" (%s)", nl ? log[nl - 1].last_error : "");
	free(log);
	/* The finished are trimmed to the last 2 (KEEP here). */
	struct db_event e7 = event(7, "alice", "m", "created");
	struct db_event e8 = event(8, "alice", "m", "created");
	queued(db, &e7);
	queued(db, &e8);
	check(db_delivery_list(db, all, 100, &log, &nl, &e) == 0, "its log");
	size_t finished = 0;
	for (size_t i = 0; i < nl; i++)
		finished += strcmp(log[i].state, "pending") != 0;
	check(finished == 2, "  the finished trimmed to the last 2 (%zu), pending kept", finished);
	free(log);

	/* Another user's: 404; deleting one takes its queue. */
	e = (struct err){ 0 };
	check(db_webhook_get(db, "bob", all, &w, &e) < 0 && e.status == 404,
	      "bob does not get alice's webhook: 404");
	e = (struct err){ 0 };
	check(db_webhook_delete(db, "bob", all, &e) < 0 && e.status == 404,
	      "bob does not delete it: 404");
	e = (struct err){ 0 };
	check(db_webhook_delete(db, "alice", all, &e) == 0, "alice does");
	check(db_delivery_list(db, all, 100, &log, &nl, &e) == 0 && nl == 0,
	      "  its deliveries went with it");
	free(log);
	/* 16 at most. */
	for (int i = 0; i < WEBHOOK_MAX_PER_USER - 1; i++)
		add_hook(db, "bob", "", "");
	struct db_webhook x = { 0 };
	snprintf(x.owner, sizeof(x.owner), "bob");
	e = (struct err){ 0 };
	check(db_webhook_insert(db, &x, WEBHOOK_MAX_PER_USER, &e) < 0 && e.status == 409 &&
	      !strcmp(e.code, "too_many_webhooks"), "bob's 17th: 409 too_many_webhooks");
	db_close(db);
	snprintf(path, sizeof(path), "%s/berth.db", dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/berth.db-wal", dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/berth.db-shm", dir);
	unlink(path);
	rmdir(dir);
}

int main(void)
{
	test_sign();
	test_url();
	test_queue();
	return tap_done("test_webhooks");
}
