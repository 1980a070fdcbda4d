/*
 * Unit tests for hostd's SQLite state (hostd/db.h) on a temporary file:
 * meta values, machines (insert in state "creating", uniqueness per owner,
 * lookups, state changes), the usage ledger those changes write (one row
 * per state interval, contiguous, only the last open), images, and that
 * everything is still there after closing and reopening the database.
 * Schema versions: a database made by the berth-hostd of commit 5645291
 * (tests/unit/data/db-5645291.sql, dumped with sqlite3 .dump) opens with
 * its rows intact and the columns added since, at their defaults; a
 * database newer than this binary is refused, naming both versions; a
 * migration that fails leaves the version it started from.
 *
 * Built by the Makefile as build/default/tests/test_db.  Prints TAP lines
 * and a closing count; exits 1 when a test failed.
 */
#include "hostd/db.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/log.h"
#include "common/util.h"
#include "tests/unit/tap.h"
#include "common/banned.h"

#define MIB (1ULL << 20)
#define GIB (1ULL << 30)

#define ID1 "11111111-1111-4111-8111-111111111111"
#define ID2 "22222222-2222-4222-8222-222222222222"
#define ID3 "33333333-3333-4333-8333-333333333333"
#define ID4 "44444444-4444-4444-8444-444444444444"

static char dir[64];
static char dbpath[128];

static struct machine machine_of(const char *id, const char *owner, const char *name,
				 int port)
{
	struct machine m;

	memset(&m, 0, sizeof(m));
	snprintf(m.id, sizeof(m.id), "%s", id);
	snprintf(m.owner, sizeof(m.owner), "%s", owner);
	snprintf(m.name, sizeof(m.name), "%s", name);
	snprintf(m.image, sizeof(m.image), "tiny");
	m.vcpus = 2;
	m.memory = 512 * MIB;
	m.disk = 4 * GIB;
	m.state = MS_RUNNING;  /* insert forces "creating" */
	snprintf(m.volume, sizeof(m.volume), "m-%s", id);
	snprintf(m.mac, sizeof(m.mac), "52:54:00:00:00:%02x", port % 256);
	m.ssh_port = port;
	return m;
}

static bool machine_eq(const struct machine *a, const struct machine *b)
{
	return strcmp(a->id, b->id) == 0 && strcmp(a->owner, b->owner) == 0 &&
	       strcmp(a->name, b->name) == 0 && strcmp(a->image, b->image) == 0 &&
	       a->vcpus == b->vcpus && a->memory == b->memory && a->disk == b->disk &&
	       a->state == b->state && strcmp(a->volume, b->volume) == 0 &&
	       strcmp(a->mac, b->mac) == 0 && a->ssh_port == b->ssh_port &&
	       a->created == b->created && a->state_since == b->state_since;
}

/* ---- the ledger ----------------------------------------------------------------- */

struct row {
	char id[40], owner[64], name[64], state[16];
	int64_t start, end;
};

struct rows {
	struct row r[32];
	size_t n;
};

static void collect(const char *id, const char *owner, const char *name,
		    enum mstate state, int64_t start, int64_t end, void *data)
{
	struct rows *rs = data;
	struct row *r;

	if (rs->n >= 32)
		return;
	r = &rs->r[rs->n++];
	snprintf(r->id, sizeof(r->id), "%s", id);
	snprintf(r->owner, sizeof(r->owner), "%s", owner);
	snprintf(r->name, sizeof(r->name), "%s", name);
	snprintf(r->state, sizeof(r->state), "%s", mstate_name(state));
	r->start = start;
	r->end = end;
}

static size_t walk(struct db *db, const char *id, struct rows *rs)
{
	struct err e;

	rs->n = 0;
	err_clear(&e);
	if (db_ledger_walk(db, id, collect, rs, &e) < 0) {
		diag("ledger walk: %s", e.msg);
		return (size_t)-1;
	}
	return rs->n;
}

/* "creating,stopped,..." of RS. */
static void states_of(const struct rows *rs, char *out, size_t outlen)
{
	size_t len = 0;

	out[0] = '\0';
	for (size_t i = 0; i < rs->n && len < outlen; i++)
		len += (size_t)snprintf(out + len, outlen - len, "%s%s", i ? "," : "",
					rs->r[i].state);
}

/* Every row closed but the last (open when LAST_OPEN), each end the next
 * start, starts not after ends, all of machine ID. */
static bool contiguous(const struct rows *rs, const char *id, bool last_open)
{
	for (size_t i = 0; i < rs->n; i++) {
		const struct row *r = &rs->r[i];
		bool last = i + 1 == rs->n;
		if (strcmp(r->id, id) != 0)
			return false;
		if (last && last_open) {
			if (r->end != 0)
				return false;
			continue;
		}
		if (r->end == 0 || r->end < r->start)
			return false;
		if (!last && r->end != rs->r[i + 1].start)
			return false;
	}
	return rs->n > 0;
}

/* ---- tests --------------------------------------------------------------------- */

static void test_open_errors(void)
{
	struct err e;
	struct db *db;
	char p[160];

	err_clear(&e);
	snprintf(p, sizeof(p), "%s/no/such/dir/berth.db", dir);
	db = db_open(p, &e);
	if (!check(db == NULL && err_isset(&e) && strstr(e.msg, p),
		   "open: in a missing directory fails, naming the file"))
		diag("%s", e.msg);
	db_close(db);

	snprintf(p, sizeof(p), "%s/garbage.db", dir);
	{
		char junk[4096];
		memset(junk, 'j', sizeof(junk));
		write_file(p, junk, sizeof(junk));
	}
	err_clear(&e);
	db = db_open(p, &e);
	if (!check(db == NULL && err_isset(&e) && strstr(e.msg, p),
		   "open: a file that is not a database fails, naming it"))
		diag("%s", e.msg);
	db_close(db);
	db_close(NULL);
	check(true, "close: NULL is accepted");
}

static void test_meta(struct db *db)
{
	struct err e;
	char v[64];
	int rc;

	err_clear(&e);
	rc = db_meta_get(db, "instance", v, sizeof(v), &e);
	check(rc == 1 && !err_isset(&e), "meta: absent key gives 1");
	rc = db_meta_set(db, "instance", "a1b2c3d4", &e);
	check(rc == 0, "meta: set");
	rc = db_meta_get(db, "instance", v, sizeof(v), &e);
	check(rc == 0 && strcmp(v, "a1b2c3d4") == 0, "meta: get what was set");
	rc = db_meta_set(db, "instance", "e5f6", &e);
	rc |= db_meta_get(db, "instance", v, sizeof(v), &e);
	check(rc == 0 && strcmp(v, "e5f6") == 0, "meta: set replaces");
	rc = db_meta_set(db, "quote", "it's \"x\"; DROP TABLE meta;--", &e);
	rc |= db_meta_get(db, "quote", v, sizeof(v), &e);
	check(rc == 0 && strcmp(v, "it's \"x\"; DROP TABLE meta;--") == 0,
	      "meta: values are bound, not spliced into SQL");
	{
		char small[4];
		rc = db_meta_get(db, "instance", small, sizeof(small), &e);
		check(rc == 0 && strcmp(small, "e5f") == 0, "meta: get truncates to outlen");
	}
}

static void test_machines(struct db *db)
{
	struct machine m1 = machine_of(ID1, "alice", "devbox", 40022);
	struct machine dup = machine_of(ID2, "alice", "devbox", 40023);
	struct machine bob = machine_of(ID3, "bob", "devbox", 40024);
	struct machine aard = machine_of(ID4, "alice", "aardvark", 40025);
	struct machine got, *list = NULL;
	struct rows rs;
	struct err e;
	char states[256];
	size_t n = 0;
	int64_t t0 = now_s();
	int rc;

	err_clear(&e);
	rc = db_machine_insert(db, &m1, NULL, &e);
	if (!check(rc == 0, "machine insert: alice/devbox"))
		diag("%s", e.msg);
	check_str(mstate_name(m1.state), "creating", "machine insert: state forced to creating");
	check(m1.created >= t0 && m1.created <= now_s() && m1.state_since == m1.created,
	      "machine insert: created = state_since = now");
	check(walk(db, ID1, &rs) == 1 && strcmp(rs.r[0].state, "creating") == 0 &&
	      rs.r[0].end == 0 && rs.r[0].start == m1.created &&
	      strcmp(rs.r[0].owner, "alice") == 0 && strcmp(rs.r[0].name, "devbox") == 0,
	      "machine insert: one open ledger row in creating");

	err_clear(&e);
	rc = db_machine_insert(db, &dup, NULL, &e);
	if (!check(rc == -1 && e.status == 409 && strcmp(e.code, "exists") == 0 &&
		   strstr(e.msg, "devbox"),
		   "machine insert: same owner and name: 409 exists"))
		diag("rc %d status %d code '%s' msg '%s'", rc, e.status, e.code, e.msg);
	check(walk(db, ID2, &rs) == 0, "machine insert: the refused one has no ledger row");
	err_clear(&e);
	rc = db_machine_get_id(db, ID2, &got, &e);
	check(rc == -1 && e.status == 404, "machine insert: the refused one has no row");

	err_clear(&e);
	rc = db_machine_insert(db, &bob, NULL, &e);
	if (!check(rc == 0, "machine insert: same name for another owner is fine"))
		diag("%s", e.msg);
	err_clear(&e);
	rc = db_machine_insert(db, &aard, NULL, &e);
	check(rc == 0, "machine insert: alice/aardvark");
	{
		struct machine again = machine_of(ID1, "carol", "other", 40026);
		err_clear(&e);
		rc = db_machine_insert(db, &again, NULL, &e);
		check(rc == -1 && err_isset(&e), "machine insert: a duplicate id is refused");
	}

	/* Lookups. */
	err_clear(&e);
	rc = db_machine_get(db, "alice", "devbox", &got, &e);
	check(rc == 0 && machine_eq(&got, &m1), "machine get: by owner and name, every field");
	err_clear(&e);
	rc = db_machine_get_id(db, ID1, &got, &e);
	check(rc == 0 && machine_eq(&got, &m1), "machine get: by id, every field");
	err_clear(&e);
	rc = db_machine_get(db, "bob", "devbox", &got, &e);
	check(rc == 0 && strcmp(got.id, ID3) == 0, "machine get: bob's devbox is bob's");
	err_clear(&e);
	rc = db_machine_get(db, "alice", "ghost", &got, &e);
	if (!check(rc == -1 && e.status == 404 && strcmp(e.code, "not_found") == 0 &&
		   strstr(e.msg, "no machine ghost"),
		   "machine get: missing: 404 not_found naming it"))
		diag("status %d code '%s' msg '%s'", e.status, e.code, e.msg);
	err_clear(&e);
	rc = db_machine_get(db, "carol", "devbox", &got, &e);
	check(rc == -1 && e.status == 404, "machine get: another owner's name is not found");
	err_clear(&e);
	rc = db_machine_get_id(db, "00000000-0000-4000-8000-000000000000", &got, &e);
	check(rc == -1 && e.status == 404 && strcmp(e.code, "not_found") == 0,
	      "machine get: missing id: 404 not_found");

	err_clear(&e);
	rc = db_machine_list(db, "alice", &list, &n, &e);
	check(rc == 0 && n == 2 && strcmp(list[0].name, "aardvark") == 0 &&
	      strcmp(list[1].name, "devbox") == 0,
	      "machine list: alice's two, sorted by name");
	free(list);
	rc = db_machine_list(db, NULL, &list, &n, &e);
	check(rc == 0 && n == 3 && strcmp(list[0].owner, "alice") == 0 &&
	      strcmp(list[2].owner, "bob") == 0,
	      "machine list: all three, sorted by owner");
	free(list);
	rc = db_machine_list(db, "nobody", &list, &n, &e);
	check(rc == 0 && n == 0, "machine list: an owner with none gives 0");
	free(list);

	/* State changes and the ledger. */
	err_clear(&e);
	rc = db_machine_set_state(db, ID1, MS_STOPPED, &e);
	check(rc == 0, "set_state: creating -> stopped");
	rc = db_machine_set_state(db, ID1, MS_RUNNING, &e);
	check(rc == 0, "set_state: stopped -> running");
	rc = db_machine_get_id(db, ID1, &got, &e);
	check(rc == 0 && got.state == MS_RUNNING && got.state_since >= m1.created,
	      "set_state: the row says running");
	walk(db, ID1, &rs);
	states_of(&rs, states, sizeof(states));
	check_str(states, "creating,stopped,running", "ledger: one row per state, in order");
	check(contiguous(&rs, ID1, true),
	      "ledger: all closed but the last, each end is the next start");
	err_clear(&e);
	rc = db_machine_set_state(db, ID1, MS_RUNNING, &e);
	check(rc == 0 && walk(db, ID1, &rs) == 3,
	      "set_state: the same state again adds no row");
	err_clear(&e);
	rc = db_machine_set_state(db, "00000000-0000-4000-8000-000000000000", MS_RUNNING, &e);
	check(rc == -1 && e.status == 404 && strcmp(e.code, "not_found") == 0,
	      "set_state: missing machine: 404 not_found");
	db_machine_set_state(db, ID1, MS_SUSPENDED, &e);
	db_machine_set_state(db, ID1, MS_RUNNING, &e);
	walk(db, ID1, &rs);
	states_of(&rs, states, sizeof(states));
	check_str(states, "creating,stopped,running,suspended,running",
		  "ledger: five intervals after suspend and resume");
	check(contiguous(&rs, ID1, true), "ledger: still contiguous");
	check(walk(db, ID3, &rs) == 1 && strcmp(rs.r[0].state, "creating") == 0,
	      "ledger: other machines untouched");
	check(walk(db, NULL, &rs) == 7, "ledger: walk of all machines gives every row");

	/* Ports. */
	check(db_port_used(db, 40022) && !db_port_used(db, 40100),
	      "ports: 40022 used, 40100 free");
	err_clear(&e);
	rc = db_machine_set_port(db, ID1, 40100, &e);
	check(rc == 0 && db_port_used(db, 40100) && !db_port_used(db, 40022),
	      "ports: set_port moves the machine to 40100");

	/* Delete: the row goes, the ledger stays (closed). */
	err_clear(&e);
	rc = db_machine_delete(db, ID1, &e);
	check(rc == 0, "delete: alice/devbox");
	err_clear(&e);
	rc = db_machine_get_id(db, ID1, &got, &e);
	check(rc == -1 && e.status == 404, "delete: the row is gone");
	err_clear(&e);
	rc = db_machine_get(db, "alice", "devbox", &got, &e);
	check(rc == -1 && e.status == 404, "delete: not found by name either");
	check(walk(db, ID1, &rs) == 5 && contiguous(&rs, ID1, false),
	      "delete: ledger rows kept, all closed");
	check(!db_port_used(db, 40100), "delete: its port is free again");
	{
		/* The name can be used again, with a fresh ledger. */
		struct machine re = machine_of(ID2, "alice", "devbox", 40030);
		err_clear(&e);
		rc = db_machine_insert(db, &re, NULL, &e);
		check(rc == 0 && walk(db, ID2, &rs) == 1,
		      "delete: the name is free again for a new machine");
	}
}

static struct image image_of(const char *name)
{
	struct image img;

	memset(&img, 0, sizeof(img));
	snprintf(img.name, sizeof(img.name), "%s", name);
	snprintf(img.volume, sizeof(img.volume), "base-%s", name);
	snprintf(img.format, sizeof(img.format), "qcow2");
	snprintf(img.boot, sizeof(img.boot), "direct");
	snprintf(img.kernel, sizeof(img.kernel), "/var/lib/berth/images/%s/vmlinuz", name);
	snprintf(img.initrd, sizeof(img.initrd), "/var/lib/berth/images/%s/initrd", name);
	snprintf(img.cmdline, sizeof(img.cmdline), "console=ttyS0 root=/dev/vda");
	snprintf(img.user, sizeof(img.user), "root");
	img.virtual_size = 2 * GIB;
	memset(img.sha256, 'a', 64);
	img.created = 1700000000;
	return img;
}

static bool image_eq(const struct image *a, const struct image *b)
{
	return strcmp(a->name, b->name) == 0 && strcmp(a->volume, b->volume) == 0 &&
	       strcmp(a->format, b->format) == 0 && strcmp(a->boot, b->boot) == 0 &&
	       strcmp(a->kernel, b->kernel) == 0 && strcmp(a->initrd, b->initrd) == 0 &&
	       strcmp(a->cmdline, b->cmdline) == 0 && strcmp(a->user, b->user) == 0 &&
	       a->virtual_size == b->virtual_size && strcmp(a->sha256, b->sha256) == 0 &&
	       a->created == b->created;
}

static void test_images(struct db *db)
{
	struct image tiny = image_of("tiny"), alpine = image_of("alpine"), got, *list = NULL;
	struct err e;
	size_t n = 0;
	int rc;

	err_clear(&e);
	rc = db_image_insert(db, &tiny, &e);
	check(rc == 0, "image insert: tiny");
	rc = db_image_insert(db, &alpine, &e);
	check(rc == 0, "image insert: alpine");
	err_clear(&e);
	rc = db_image_insert(db, &tiny, &e);
	check(rc == -1 && e.status == 409 && strcmp(e.code, "exists") == 0,
	      "image insert: again: 409 exists");
	err_clear(&e);
	rc = db_image_get(db, "tiny", &got, &e);
	check(rc == 0 && image_eq(&got, &tiny), "image get: every field");
	err_clear(&e);
	rc = db_image_get(db, "ghost", &got, &e);
	check(rc == -1 && e.status == 404 && strcmp(e.code, "not_found") == 0,
	      "image get: missing: 404 not_found");
	rc = db_image_list(db, &list, &n, &e);
	check(rc == 0 && n == 2 && strcmp(list[0].name, "alpine") == 0 &&
	      strcmp(list[1].name, "tiny") == 0 && image_eq(&list[1], &tiny),
	      "image list: both, sorted by name");
	free(list);
	err_clear(&e);
	check(db_image_users(db, "tiny", &e) == 3, "image users: three machines use tiny");
	check(db_image_users(db, "alpine", &e) == 0, "image users: none use alpine");
	err_clear(&e);
	rc = db_image_delete(db, "alpine", &e);
	check(rc == 0, "image delete: alpine");
	err_clear(&e);
	rc = db_image_get(db, "alpine", &got, &e);
	check(rc == -1 && e.status == 404, "image delete: gone");
	rc = db_image_list(db, &list, &n, &e);
	check(rc == 0 && n == 1 && strcmp(list[0].name, "tiny") == 0,
	      "image list: one left");
	free(list);
}

static void test_reopen(void)
{
	struct machine got, *list = NULL;
	struct image img, tiny = image_of("tiny");
	struct rows rs;
	struct err e;
	struct db *db;
	char v[64], states[256];
	size_t n = 0;

	err_clear(&e);
	db = db_open(dbpath, &e);
	if (!check(db != NULL, "reopen: opens")) {
		diag("%s", e.msg);
		return;
	}
	check(db_meta_get(db, "instance", v, sizeof(v), &e) == 0 && strcmp(v, "e5f6") == 0,
	      "reopen: meta persisted");
	check(db_machine_list(db, NULL, &list, &n, &e) == 0 && n == 3,
	      "reopen: three machines persisted");
	free(list);
	check(db_machine_get(db, "bob", "devbox", &got, &e) == 0 &&
	      strcmp(got.id, ID3) == 0 && got.state == MS_CREATING &&
	      got.ssh_port == 40024 && got.memory == 512 * MIB,
	      "reopen: bob's machine with its fields");
	walk(db, ID1, &rs);
	states_of(&rs, states, sizeof(states));
	check(strcmp(states, "creating,stopped,running,suspended,running") == 0 &&
	      contiguous(&rs, ID1, false),
	      "reopen: the deleted machine's ledger persisted, closed");
	check(db_image_get(db, "tiny", &img, &e) == 0 && image_eq(&img, &tiny),
	      "reopen: image persisted");
	check(db_machine_set_state(db, ID3, MS_STOPPED, &e) == 0 &&
	      walk(db, ID3, &rs) == 2 && contiguous(&rs, ID3, true),
	      "reopen: state changes keep working");
	db_close(db);
}

/* ---- schema versions ------------------------------------------------------------ */

/* Run SQL on the database at PATH with sqlite itself (not hostd/db.c). */
static bool raw_exec(const char *path, const char *sql)
{
	sqlite3 *h = NULL;
	char *msg = NULL;
	bool ok = sqlite3_open(path, &h) == SQLITE_OK &&
		  sqlite3_exec(h, sql, NULL, NULL, &msg) == SQLITE_OK;

	if (!ok)
		diag("sqlite3 %s: %s", path, msg ? msg : h ? sqlite3_errmsg(h) : "?");
	sqlite3_free(msg);
	sqlite3_close(h);
	return ok;
}

/* The first column of SQL's first row as text into OUT ("" when none);
 * false when the query fails. */
static bool raw_text(const char *path, const char *sql, char *out, size_t outlen)
{
	sqlite3 *h = NULL;
	sqlite3_stmt *st = NULL;
	bool ok = false;

	out[0] = '\0';
	if (sqlite3_open_v2(path, &h, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
	    sqlite3_prepare_v2(h, sql, -1, &st, NULL) == SQLITE_OK) {
		int rc = sqlite3_step(st);
		if (rc == SQLITE_ROW && sqlite3_column_text(st, 0))
			snprintf(out, outlen, "%s", (const char *)sqlite3_column_text(st, 0));
		ok = rc == SQLITE_ROW || rc == SQLITE_DONE;
	}
	if (!ok)
		diag("sqlite3 %s: %s: %s", path, sql, h ? sqlite3_errmsg(h) : "?");
	sqlite3_finalize(st);
	sqlite3_close(h);
	return ok;
}

static int raw_version(const char *path)
{
	char v[32];

	return raw_text(path, "PRAGMA user_version", v, sizeof(v)) ? atoi(v) : -1;
}

/* The declared default of TABLE.COLUMN ("" when the column is missing). */
static void column_default(const char *path, const char *table, const char *column,
			   char *out, size_t outlen)
{
	char sql[160];

	snprintf(sql, sizeof(sql), "SELECT coalesce(dflt_value, 'NULL') FROM "
		 "pragma_table_info('%s') WHERE name = '%s'", table, column);
	raw_text(path, sql, out, outlen);
}

#define OLD_ID "e92cd413-db27-4e12-ac68-5f2463587bf0"

/* The credential broker's tables: secrets per owner, grants that go with
 * their machine or secret, the broker's lookup by network index, the log
 * (trimmed per owner), the machines' variables (a fork, a restore). */
static void test_secrets(struct db *db)
{
	struct machine a = machine_of("55555555-5555-4555-8555-555555555555", "carol", "a", 40031);
	struct machine b = machine_of("66666666-6666-4666-8666-666666666666", "carol", "b", 40032);
	struct machine d = machine_of("77777777-7777-4777-8777-777777777777", "dave", "a", 40033);
	struct db_secret s = { 0 }, got, other = { 0 }, *list;
	struct db_broker_call c = { 0 }, *calls = NULL;
	struct db_secret_env *env = NULL;
	struct machine m;
	char (*names)[64] = NULL;
	size_t n = 0;
	bool allowed = false, changed = false;
	struct err e = { 0 };

	check(db_machine_insert(db, &a, NULL, &e) == 0 && db_machine_insert(db, &b, NULL, &e) == 0 &&
	      db_machine_insert(db, &d, NULL, &e) == 0 &&
	      db_machine_set_net(db, a.id, 7, "", &e) == 0 &&
	      db_machine_set_net(db, b.id, 8, "", &e) == 0 &&
	      db_machine_set_net(db, d.id, 9, "", &e) == 0, "secrets: three machines");
	snprintf(s.owner, sizeof(s.owner), "carol");
	snprintf(s.name, sizeof(s.name), "anthropic");
	snprintf(s.url, sizeof(s.url), "https://api.example.com");
	snprintf(s.headers, sizeof(s.headers), "[[\"x-api-key\",\"sk-1\"]]");
	check(db_secret_insert(db, &s, 64, &e) == 0 && s.id > 0, "secrets: insert");
	other = s;
	err_clear(&e);
	check(db_secret_insert(db, &other, 64, &e) < 0 && e.status == 409 &&
	      !strcmp(e.code, "secret_exists"), "secrets: the same name again is 409");
	snprintf(other.owner, sizeof(other.owner), "dave");
	err_clear(&e);
	check(db_secret_insert(db, &other, 64, &e) == 0 && other.id != s.id,
	      "secrets: another owner's of the same name");
	{
		/* The limit is counted in the insert (no count-then-insert race). */
		struct db_secret third = s;
		snprintf(third.name, sizeof(third.name), "third");
		err_clear(&e);
		check(db_secret_insert(db, &third, 1, &e) < 0 && e.status == 403 &&
		      !strcmp(e.code, "quota_exceeded"), "secrets: past the limit is 403");
		check(db_secret_list(db, "carol", &list, &n, &e) == 0 && n == 1,
		      "  and nothing was inserted");
		free(list);
	}
	check(db_secret_get(db, "carol", "anthropic", &got, &e) == 0 &&
	      !strcmp(got.headers, s.headers) && !strcmp(got.url, s.url), "secrets: get");
	err_clear(&e);
	check(db_secret_get(db, "carol", "openai", &got, &e) < 0 && e.status == 404,
	      "secrets: a missing one is 404");

	check(db_secret_grant(db, s.id, a.id, true, 16, &changed, &e) == 0 && changed,
	      "grants: a may use carol's anthropic");
	check(db_secret_grant(db, s.id, a.id, true, 16, &changed, &e) == 0 && !changed,
	      "grants: again changes nothing");
	check(db_broker_lookup(db, 7, "anthropic", &m, &got, &allowed, &e) == 0 &&
	      !strcmp(m.name, "a") && got.id == s.id && allowed, "lookup: index 7 is a, allowed");
	check(db_broker_lookup(db, 8, "anthropic", &m, &got, &allowed, &e) == 0 &&
	      !strcmp(m.name, "b") && got.id == s.id && !allowed, "lookup: b is not allowed");
	check(db_broker_lookup(db, 9, "anthropic", &m, &got, &allowed, &e) == 0 &&
	      !strcmp(m.owner, "dave") && got.id == other.id && !allowed,
	      "lookup: dave's machine finds dave's secret of that name, not carol's grant");
	check(db_broker_lookup(db, 7, "openai", &m, &got, &allowed, &e) == 0 && got.id == 0 &&
	      !allowed, "lookup: no such secret");
	err_clear(&e);
	check(db_broker_lookup(db, 42, "anthropic", &m, &got, &allowed, &e) < 0 &&
	      e.status == 404, "lookup: no machine at that index");
	check(db_machine_secrets(db, a.id, &names, &n, &e) == 0 && n == 1 &&
	      !strcmp(names[0], "anthropic"), "grants: a's secrets");
	free(names);
	err_clear(&e);
	check(db_secret_grant(db, other.id, a.id, true, 1, &changed, &e) < 0 && e.status == 403 &&
	      !strcmp(e.code, "quota_exceeded"), "grants: a machine past its limit is 403");
	check(db_secret_grant(db, s.id, a.id, true, 1, &changed, &e) == 0 && !changed,
	      "  but one it has already is no change, not a refusal");
	check(db_secret_grant(db, s.id, b.id, true, 16, &changed, &e) == 0 &&
	      db_secret_machines(db, s.id, &names, &n, &e) == 0 && n == 2 &&
	      !strcmp(names[0], "a") && !strcmp(names[1], "b"), "grants: the secret's machines");
	free(names);
	check(db_machine_delete(db, b.id, &e) == 0 &&
	      db_secret_machines(db, s.id, &names, &n, &e) == 0 && n == 1,
	      "grants: deleting a machine removes its grants");
	free(names);

	/* The machines' variables. */
	check(db_secret_env_want(db, a.id, "A_BASE_URL=x\n", &e) == 0 &&
	      db_secret_env_list(db, true, &env, &n, &e) == 0 && n == 0,
	      "variables: a stopped machine's stale ones are not listed to write");
	free(env);
	check(db_machine_set_state(db, a.id, MS_RUNNING, &e) == 0 &&
	      db_secret_env_list(db, true, &env, &n, &e) == 0 && n == 1 &&
	      !strcmp(env[0].want, "A_BASE_URL=x\n") && !env[0].written[0],
	      "variables: a running one is");
	free(env);
	check(db_secret_env_written(db, a.id, "A_BASE_URL=x\n", &e) == 0 &&
	      db_secret_env_list(db, true, &env, &n, &e) == 0 && n == 0,
	      "variables: written, nothing to do");
	free(env);
	check(db_secret_env_forked(db, a.id, d.id, &e) == 0 &&
	      db_secret_env_list(db, false, &env, &n, &e) == 0 && n == 2,
	      "variables: a fork has its source's");
	for (size_t i = 0; i < n; i++)
		if (!strcmp(env[i].machine_id, d.id))
			check(!env[i].want[0] && !strcmp(env[i].written, "A_BASE_URL=x\n"),
			      "variables: the fork wants none, has the source's");
	free(env);
	check(db_secret_env_unknown(db, a.id, &e) == 0 &&
	      db_secret_env_list(db, true, &env, &n, &e) == 0 && n == 1 &&
	      !strcmp(env[0].written, "?"), "variables: a restore makes them unknown");
	free(env);

	/* The log, trimmed per owner. */
	snprintf(c.owner, sizeof(c.owner), "carol");
	snprintf(c.machine, sizeof(c.machine), "a");
	snprintf(c.secret, sizeof(c.secret), "anthropic");
	snprintf(c.method, sizeof(c.method), "POST");
	snprintf(c.path, sizeof(c.path), "/v1/messages");
	for (int i = 0; i < 5; i++) {
		c.status = 200 + i;
		c.t = 1000 + i;
		db_broker_log_add(db, &c, 3, &e);
	}
	snprintf(c.owner, sizeof(c.owner), "dave");
	c.status = 403;
	db_broker_log_add(db, &c, 3, &e);
	check(db_broker_log_list(db, "carol", NULL, NULL, 100, &calls, &n, &e) == 0 && n == 3 &&
	      calls[0].status == 202 && calls[2].status == 204, "log: carol's last 3, oldest first");
	free(calls);
	check(db_broker_log_list(db, "carol", NULL, NULL, 2, &calls, &n, &e) == 0 && n == 2 &&
	      calls[0].status == 203, "log: a limit takes the last ones");
	free(calls);
	check(db_broker_log_list(db, "carol", "openai", NULL, 100, &calls, &n, &e) == 0 && n == 0 &&
	      db_broker_log_list(db, "dave", NULL, "a", 100, &calls, &n, &e) == 0 && n == 1 &&
	      calls[0].status == 403, "log: by secret, by machine, each owner's own");
	free(calls);

	check(db_secret_delete(db, "carol", "anthropic", &e) == 0 &&
	      db_machine_secrets(db, a.id, &names, &n, &e) == 0 && n == 0,
	      "secrets: deleting one removes its grants");
	free(names);
	err_clear(&e);
	check(db_secret_delete(db, "carol", "anthropic", &e) < 0 && e.status == 404,
	      "secrets: deleting it again is 404");
	check(db_secret_list(db, "dave", (struct db_secret **)&calls, &n, &e) == 0 && n == 1,
	      "secrets: dave's is still there");
	free(calls);
	db_machine_delete(db, a.id, &e);
	db_machine_delete(db, d.id, &e);
}

static void test_from_5645291(void)
{
	char p[160], v[64], *dump;
	struct machine m;
	struct image img;
	struct checkpoint ck;
	struct userkey *keys = NULL;
	struct token *toks = NULL;
	struct rows rs;
	struct err e;
	struct db *db;
	size_t nk = 0, nt = 0;
	int64_t kid;

	snprintf(p, sizeof(p), "%s/old.db", dir);
	dump = file_read("tests/unit/data/db-5645291.sql", 1 << 20, NULL);
	if (!check(dump && raw_exec(p, dump), "5645291: its dump loads into a database")) {
		free(dump);
		return;
	}
	free(dump);
	/* What the old hostd made: no version, none of the newer columns. */
	column_default(p, "keys", "first_used", v, sizeof(v));
	check(raw_version(p) == 0 && !v[0], "5645291: version 0, no keys.first_used yet");

	err_clear(&e);
	db = db_open(p, &e);
	if (!check(db != NULL, "5645291: db_open migrates it")) {
		diag("%s", e.msg);
		return;
	}
	check(db_meta_get(db, "instance", v, sizeof(v), &e) == 0 && !strcmp(v, "bdca183b"),
	      "5645291: meta instance kept");
	check(db_machine_get(db, "root", "x", &m, &e) == 0 && !strcmp(m.id, OLD_ID) &&
	      !strcmp(m.image, "tiny") && m.vcpus == 1 && m.memory == 512 * MIB &&
	      m.disk == 256 * MIB && m.state == MS_STOPPED && m.net_index == 1 &&
	      m.qemu_index == 1 && m.host_key_state == HK_SEED &&
	      !strncmp(m.host_key, "ssh-ed25519 ", 12) && !strcmp(m.mac, "52:54:00:e4:43:41"),
	      "5645291: machine x with its fields");
	walk(db, OLD_ID, &rs);
	check(rs.n == 2 && contiguous(&rs, OLD_ID, true), "5645291: its ledger, two rows, open");
	check(db_image_get(db, "tiny", &img, &e) == 0 && !strcmp(img.volume, "base-tiny") &&
	      img.virtual_size == 256 * MIB && !strcmp(img.source, "qcow2") &&
	      img.source_size == 16056320 && !strcmp(img.owner, "") && img.public_,
	      "5645291: image tiny, root's and public (the new columns' defaults)");
	check(db_ckpt_get(db, OLD_ID, "first", &ck, &e) == 0 && !strcmp(ck.memory, ""),
	      "5645291: checkpoint first kept");
	check(db_key_list(db, "root", &keys, &nk, &e) == 0 && nk == 1 &&
	      !strcmp(keys[0].comment, "old-key") && !strcmp(keys[0].type, "ssh-ed25519"),
	      "5645291: root's key kept");
	check(db_token_list(db, "root", &toks, &nt, &e) == 0 && nt == 1 &&
	      !strcmp(toks[0].name, "old-token") && toks[0].last_used == 0,
	      "5645291: root's token kept");
	kid = nk == 1 ? keys[0].id : -1;
	free(keys);
	free(toks);
	{
		bool first = false;
		check(kid > 0 && db_key_used(db, kid, &first, &e) == 0 && first,
		      "5645291: the key's first use is its first (keys.first_used was 0)");
	}
	db_close(db);

	check(raw_version(p) == db_schema_version() && db_schema_version() >= 14,
	      "5645291: now at version %d", db_schema_version());
	column_default(p, "keys", "first_used", v, sizeof(v));
	check_str(v, "0", "5645291: keys.first_used exists, default 0");
	column_default(p, "images", "owner", v, sizeof(v));
	check_str(v, "''", "5645291: images.owner exists, default ''");
	column_default(p, "images", "public", v, sizeof(v));
	check_str(v, "1", "5645291: images.public exists, default 1");
	raw_text(p, "SELECT count(*) FROM machines", v, sizeof(v));
	check_str(v, "1", "5645291: one machine, not two");

	err_clear(&e);
	db = db_open(p, &e);
	check(db != NULL && raw_version(p) == db_schema_version(),
	      "5645291: opens again at the same version");
	db_close(db);
}

static void test_versions(void)
{
	char p[160], sql[64], want[64];
	struct err e;
	struct db *db;
	int v = db_schema_version();

	snprintf(p, sizeof(p), "%s/versions.db", dir);
	err_clear(&e);
	db = db_open(p, &e);
	db_close(db);
	check(db != NULL && raw_version(p) == v, "versions: a new database is at version %d", v);

	/* Made by a berth just before versions (a0f3316): every column
	 * there, version 0.  Each migration finds its change made. */
	check(raw_exec(p, "PRAGMA user_version = 0"), "versions: a database with every column at 0");
	err_clear(&e);
	db = db_open(p, &e);
	if (!check(db != NULL && raw_version(p) == v, "versions: it opens, now at %d", v))
		diag("%s", e.msg);
	db_close(db);

	/* Made by a newer berth: refused, untouched. */
	snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", v + 1);
	raw_exec(p, sql);
	err_clear(&e);
	db = db_open(p, &e);
	snprintf(want, sizeof(want), "schema version %d", v + 1);
	check(db == NULL && strstr(e.msg, p) && strstr(e.msg, want),
	      "versions: a database at %d is refused, naming it and its version", v + 1);
	snprintf(want, sizeof(want), "(version %d)", v);
	if (!check_has(e.msg, want, "versions: the message names this binary's version"))
		diag("%s", e.msg);
	db_close(db);
	check(raw_version(p) == v + 1, "versions: the newer database is left at %d", v + 1);

	/* Migration 12 (keys.first_used) cannot run: no keys table.  The
	 * database stays at 11, and 13 (images.owner) is not applied. */
	snprintf(sql, sizeof(sql), "PRAGMA user_version = 11");
	check(raw_exec(p, "DROP TABLE keys; ALTER TABLE images DROP COLUMN public;"
		       "ALTER TABLE images DROP COLUMN owner;") && raw_exec(p, sql),
	      "versions: a database at 11 without a keys table");
	err_clear(&e);
	db = db_open(p, &e);
	if (!check(db == NULL && strstr(e.msg, "schema migration 12") && strstr(e.msg, "keys"),
		   "versions: migration 12 fails, named"))
		diag("%s", e.msg);
	db_close(db);
	column_default(p, "images", "owner", want, sizeof(want));
	check(raw_version(p) == 11 && !want[0], "versions: still at 11, images.owner not added");
}

/* Events: an owner keeps its last KEEP; listed after an id, by machine,
 * oldest first; another owner's are not theirs. */
static void test_events(struct db *db)
{
	struct db_event ev = { .t = 1000 }, *evs = NULL;
	struct err e = { 0 };
	int64_t id = 0, first = 0;
	size_t n = 0;
	bool ok = true;

	for (int i = 0; i < 5; i++) {
		snprintf(ev.owner, sizeof(ev.owner), "erin");
		snprintf(ev.machine, sizeof(ev.machine), "%s", i % 2 ? "odd" : "even");
		snprintf(ev.kind, sizeof(ev.kind), "started");
		snprintf(ev.cause, sizeof(ev.cause), "cause %d", i);
		ok = ok && db_event_add(db, &ev, 3, &id, &e) == 0;
		if (i == 0)
			first = id;
	}
	snprintf(ev.owner, sizeof(ev.owner), "frank");
	ok = ok && db_event_add(db, &ev, 3, NULL, &e) == 0;
	check(ok, "events: 6 added (%s)", e.msg);
	check(db_event_list(db, "erin", NULL, 0, false, 100, &evs, &n, &e) == 0 && n == 3 &&
	      !strcmp(evs[0].cause, "cause 2") && !strcmp(evs[2].cause, "cause 4") &&
	      evs[0].id > first, "events: erin keeps her last 3, oldest first");
	free(evs);
	check(db_event_list(db, "erin", "odd", 0, false, 100, &evs, &n, &e) == 0 && n == 1 &&
	      !strcmp(evs[0].cause, "cause 3"), "events: of one machine");
	free(evs);
	check(db_event_list(db, "erin", NULL, id - 1, true, 100, &evs, &n, &e) == 0 && n == 1 &&
	      evs[0].id == id, "events: after an id");
	free(evs);
	check(db_event_list(db, "erin", NULL, 0, false, 2, &evs, &n, &e) == 0 && n == 2 &&
	      !strcmp(evs[1].cause, "cause 4"), "events: the last LIMIT");
	free(evs);
	check(db_event_list(db, "erin", NULL, 0, true, 2, &evs, &n, &e) == 0 && n == 2 &&
	      !strcmp(evs[0].cause, "cause 2") && !strcmp(evs[1].cause, "cause 3"),
	      "events: forward, the first LIMIT after an id (a follower's page)");
	free(evs);
	check(db_event_list(db, NULL, NULL, 0, false, 100, &evs, &n, &e) == 0 && n == 4 &&
	      !strcmp(evs[3].owner, "frank"), "events: everyone's");
	free(evs);
}

/* Previews: one per machine and port, labels unique across owners, keys
 * found by hash and kind, a link spent once, grants that stand or not, and
 * everything gone with the preview and with the machine. */
static void test_previews(struct db *db)
{
	struct machine a = machine_of("88888888-8888-4888-8888-888888888888", "b-c", "a", 40041);
	struct machine x = machine_of("99999999-9999-4999-8999-999999999999", "c", "a-b", 40042);
	struct db_preview p, q, *list = NULL;
	int64_t link = 0, cookie = 0, id = 0;
	bool created = false, ok = false;
	size_t n = 0;
	struct err e = { 0 };

	check(db_machine_insert(db, &a, NULL, &e) == 0 && db_machine_insert(db, &x, NULL, &e) == 0 &&
	      db_machine_set_state(db, a.id, MS_RUNNING, &e) == 0,
	      "previews: two machines whose names spell the same label");
	check(db_preview_put(db, a.id, 8080, "8080-a-b-c", false, &created, &e) == 0 && created,
	      "previews: b-c's a:8080 made");
	check(db_preview_put(db, a.id, 8080, "8080-a-b-c", true, &created, &e) == 0 && !created,
	      "previews: made public, not made again");
	err_clear(&e);
	check(db_preview_put(db, x.id, 8080, "8080-a-b-c", false, &created, &e) < 0 &&
	      e.status == 409 && !strcmp(e.code, "label_taken"),
	      "previews: c's a-b:8080 has the same label: 409 label_taken");
	err_clear(&e);
	check(db_preview_put(db, x.id, 9090, "9090-a-b-c", false, &created, &e) == 0 && created,
	      "previews: c's a-b:9090 is another label");
	check(db_preview_find(db, "8080-a-b-c", &p, &e) == 0 && !strcmp(p.owner, "b-c") &&
	      !strcmp(p.machine, "a") && p.port == 8080 && p.public_ &&
	      !strcmp(p.machine_id, a.id), "previews: found by label, with owner and machine");
	err_clear(&e);
	check(db_preview_find(db, "8081-a-b-c", &q, &e) < 0 && e.status == 404 &&
	      !strcmp(e.code, "no_preview"), "previews: no such label is 404 no_preview");
	check(db_preview_list(db, "c", &list, &n, &e) == 0 && n == 1 && list[0].port == 9090,
	      "previews: c's list");
	free(list);
	check(db_preview_list(db, NULL, &list, &n, &e) == 0 && n == 2 &&
	      !strcmp(list[0].owner, "b-c"), "previews: everyone's, by owner");
	free(list);

	check(db_preview_grant_ok(db, p.id, 0, now_s(), &ok, &e) == 0 && ok,
	      "grants: public admits without a key (the machine runs)");
	check(db_preview_put(db, a.id, 8080, "8080-a-b-c", false, &created, &e) == 0 &&
	      db_preview_grant_ok(db, p.id, 0, now_s(), &ok, &e) == 0 && !ok,
	      "grants: made private, what public let in no longer stands");
	check(db_preview_key_add(db, p.id, "link", "11", now_s() + 60, &link, &e) == 0 &&
	      db_preview_key_add(db, p.id, "cookie", "22", now_s() + 60, &cookie, &e) == 0 &&
	      db_preview_key_add(db, p.id, "cookie", "33", now_s() - 1, &id, &e) == 0,
	      "keys: a link, a cookie, an expired cookie");
	check(db_preview_key_find(db, p.id, "cookie", "22", now_s(), &id, &e) == 0 &&
	      id == cookie, "keys: the cookie by its hash");
	check(db_preview_key_find(db, p.id, "cookie", "11", now_s(), &id, &e) == 0 && id == 0,
	      "keys: a link's hash is no cookie");
	check(db_preview_key_find(db, p.id, "cookie", "33", now_s(), &id, &e) == 0 && id == 0,
	      "keys: an expired cookie is none");
	check(db_preview_grant_ok(db, p.id, cookie, now_s(), &ok, &e) == 0 && ok,
	      "grants: the cookie's stands");
	check(db_machine_set_state(db, a.id, MS_SUSPENDED, &e) == 0 &&
	      db_preview_grant_ok(db, p.id, cookie, now_s(), &ok, &e) == 0 && !ok &&
	      db_machine_set_state(db, a.id, MS_RUNNING, &e) == 0,
	      "grants: not while the machine sleeps (its connections are cut, the next wakes it)");
	err_clear(&e);
	check(db_preview_link_take(db, p.id + 1000, "11", now_s(), &e) < 0 &&
	      e.status == 404, "links: not another preview's");
	check(db_preview_link_take(db, p.id, "11", now_s(), &e) == 0, "links: spent");
	err_clear(&e);
	check(db_preview_link_take(db, p.id, "11", now_s(), &e) < 0 && e.status == 404 &&
	      !strcmp(e.code, "invalid_link"), "links: spent once only");

	check(db_preview_delete(db, p.id, &e) == 0 &&
	      db_preview_grant_ok(db, p.id, cookie, now_s(), &ok, &e) == 0 && !ok &&
	      db_preview_key_find(db, p.id, "cookie", "22", now_s(), &id, &e) == 0 && id == 0,
	      "delete: the preview's cookies go with it");
	err_clear(&e);
	check(db_preview_delete(db, p.id, &e) < 0 && e.status == 404, "delete: twice is 404");
	check(db_preview_get(db, x.id, 9090, &q, &e) == 0 &&
	      db_preview_key_add(db, q.id, "cookie", "44", now_s() + 60, &cookie, &e) == 0 &&
	      db_machine_delete(db, x.id, &e) == 0, "machine: its preview has a cookie, deleted");
	err_clear(&e);
	check(db_preview_get(db, x.id, 9090, &q, &e) < 0 && e.status == 404 &&
	      db_preview_grant_ok(db, q.id, cookie, now_s(), &ok, &e) == 0 && !ok,
	      "machine: its previews and their cookies went with it");
	db_machine_delete(db, a.id, &e);
}

int main(void)
{
	struct db *db;
	struct err e;
	int rc;

	log_threshold = LOG_WARN;
	if (!tmpdir_make(dir, sizeof(dir))) {
		check(false, "make a temporary directory");
		return tap_done("test_db");
	}
	snprintf(dbpath, sizeof(dbpath), "%s/berth.db", dir);
	test_open_errors();
	err_clear(&e);
	db = db_open(dbpath, &e);
	if (check(db != NULL, "open: a new database in a temporary directory")) {
		test_meta(db);
		test_machines(db);
		test_images(db);
		test_secrets(db);
		test_previews(db);
		test_events(db);
		db_close(db);
		test_reopen();
	} else {
		diag("%s", e.msg);
	}
	test_from_5645291();
	test_versions();
	rc = tap_done("test_db");
	tmpdir_remove(dir);
	return rc;
}
