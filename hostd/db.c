#include "hostd/db.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "common/banned.h"

struct db {
	sqlite3 *h;
	pthread_mutex_t lock;
};

static const char schema[] =
	"CREATE TABLE IF NOT EXISTS meta("
	"  key TEXT PRIMARY KEY, value TEXT NOT NULL);"
	"CREATE TABLE IF NOT EXISTS images("
	"  name TEXT PRIMARY KEY, volume TEXT NOT NULL, format TEXT NOT NULL,"
	"  boot TEXT NOT NULL, kernel TEXT NOT NULL, initrd TEXT NOT NULL,"
	"  cmdline TEXT NOT NULL, user TEXT NOT NULL, virtual_size INTEGER NOT NULL,"
	"  sha256 TEXT NOT NULL, created INTEGER NOT NULL);"
	"CREATE TABLE IF NOT EXISTS machines("
	"  id TEXT PRIMARY KEY, owner TEXT NOT NULL, name TEXT NOT NULL,"
	"  image TEXT NOT NULL, vcpus INTEGER NOT NULL, memory INTEGER NOT NULL,"
	"  disk INTEGER NOT NULL, state TEXT NOT NULL, volume TEXT NOT NULL,"
	"  mac TEXT NOT NULL, ssh_port INTEGER NOT NULL, created INTEGER NOT NULL,"
	"  state_since INTEGER NOT NULL, UNIQUE(owner, name));"
	/* One row per state interval; end is NULL while it lasts. */
	"CREATE TABLE IF NOT EXISTS ledger("
	"  id INTEGER PRIMARY KEY, machine_id TEXT NOT NULL, owner TEXT NOT NULL,"
	"  name TEXT NOT NULL, state TEXT NOT NULL, vcpus INTEGER NOT NULL,"
	"  memory INTEGER NOT NULL, start INTEGER NOT NULL, end INTEGER);"
	"CREATE INDEX IF NOT EXISTS ledger_machine ON ledger(machine_id, end);";

static int sql_err(struct db *db, struct err *e, const char *what)
{
	return err_set(e, 500, "internal", "database: %s: %s", what, sqlite3_errmsg(db->h));
}

struct db *db_open(const char *path, struct err *e)
{
	struct db *db = calloc(1, sizeof(*db));
	char *msg = NULL;

	if (!db)
		abort();
	pthread_mutex_init(&db->lock, NULL);
	if (sqlite3_open_v2(path, &db->h, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
			    SQLITE_OPEN_FULLMUTEX, NULL) != SQLITE_OK) {
		err_set(e, 500, "internal", "database %s: %s", path,
			db->h ? sqlite3_errmsg(db->h) : "cannot open");
		goto fail;
	}
	sqlite3_busy_timeout(db->h, 5000);
	if (sqlite3_exec(db->h, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
			 "PRAGMA foreign_keys=ON;", NULL, NULL, &msg) != SQLITE_OK ||
	    sqlite3_exec(db->h, schema, NULL, NULL, &msg) != SQLITE_OK) {
		err_set(e, 500, "internal", "database %s: %s", path, msg ? msg : "?");
		sqlite3_free(msg);
		goto fail;
	}
	return db;
fail:
	sqlite3_close(db->h);
	pthread_mutex_destroy(&db->lock);
	free(db);
	return NULL;
}

void db_close(struct db *db)
{
	if (!db)
		return;
	sqlite3_close(db->h);
	pthread_mutex_destroy(&db->lock);
	free(db);
}

/* Prepare SQL; binds are done by the caller.  NULL with E set. */
static sqlite3_stmt *prep(struct db *db, const char *sql, struct err *e)
{
	sqlite3_stmt *st = NULL;

	if (sqlite3_prepare_v2(db->h, sql, -1, &st, NULL) != SQLITE_OK) {
		sql_err(db, e, "prepare");
		return NULL;
	}
	return st;
}

static int exec_simple(struct db *db, const char *sql, struct err *e)
{
	char *msg = NULL;

	if (sqlite3_exec(db->h, sql, NULL, NULL, &msg) != SQLITE_OK) {
		err_set(e, 500, "internal", "database: %s: %s", sql, msg ? msg : "?");
		sqlite3_free(msg);
		return -1;
	}
	return 0;
}

static void copy_text(sqlite3_stmt *st, int col, char *out, size_t outlen)
{
	const unsigned char *t = sqlite3_column_text(st, col);

	snprintf(out, outlen, "%s", t ? (const char *)t : "");
}

int db_meta_get(struct db *db, const char *key, char *out, size_t outlen, struct err *e)
{
	int rc = -1;
	sqlite3_stmt *st;

	pthread_mutex_lock(&db->lock);
	st = prep(db, "SELECT value FROM meta WHERE key = ?", e);
	if (!st)
		goto out;
	sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
	switch (sqlite3_step(st)) {
	case SQLITE_ROW: copy_text(st, 0, out, outlen); rc = 0; break;
	case SQLITE_DONE: rc = 1; break;
	default: sql_err(db, e, "meta");
	}
out:
	sqlite3_finalize(st);
	pthread_mutex_unlock(&db->lock);
	return rc;
}

int db_meta_set(struct db *db, const char *key, const char *value, struct err *e)
{
	int rc = -1;
	sqlite3_stmt *st;

	pthread_mutex_lock(&db->lock);
	st = prep(db, "INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)", e);
	if (!st)
		goto out;
	sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, value, -1, SQLITE_STATIC);
	if (sqlite3_step(st) != SQLITE_DONE)
		sql_err(db, e, "meta");
	else
		rc = 0;
out:
	sqlite3_finalize(st);
	pthread_mutex_unlock(&db->lock);
	return rc;
}

#define MACHINE_COLS "id, owner, name, image, vcpus, memory, disk, state, volume," \
		     " mac, ssh_port, created, state_since"

static void machine_from_row(sqlite3_stmt *st, struct machine *m)
{
	memset(m, 0, sizeof(*m));
	copy_text(st, 0, m->id, sizeof(m->id));
	copy_text(st, 1, m->owner, sizeof(m->owner));
	copy_text(st, 2, m->name, sizeof(m->name));
	copy_text(st, 3, m->image, sizeof(m->image));
	m->vcpus = sqlite3_column_int(st, 4);
	m->memory = (uint64_t)sqlite3_column_int64(st, 5);
	m->disk = (uint64_t)sqlite3_column_int64(st, 6);
	copy_text(st, 7, m->state, sizeof(m->state));
	copy_text(st, 8, m->volume, sizeof(m->volume));
	copy_text(st, 9, m->mac, sizeof(m->mac));
	m->ssh_port = sqlite3_column_int(st, 10);
	m->created = sqlite3_column_int64(st, 11);
	m->state_since = sqlite3_column_int64(st, 12);
}

/* Open a ledger row for machine M in STATE at time T (caller holds lock and
 * a transaction). */
static int ledger_open(struct db *db, const struct machine *m, const char *state,
		       int64_t t, struct err *e)
{
	sqlite3_stmt *st = prep(db, "INSERT INTO ledger(machine_id, owner, name, state,"
				" vcpus, memory, start) VALUES(?,?,?,?,?,?,?)", e);
	int rc = -1;

	if (!st)
		return -1;
	sqlite3_bind_text(st, 1, m->id, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, m->owner, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, m->name, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 4, state, -1, SQLITE_STATIC);
	sqlite3_bind_int(st, 5, m->vcpus);
	sqlite3_bind_int64(st, 6, (sqlite3_int64)m->memory);
	sqlite3_bind_int64(st, 7, t);
	if (sqlite3_step(st) != SQLITE_DONE)
		sql_err(db, e, "ledger insert");
	else
		rc = 0;
	sqlite3_finalize(st);
	return rc;
}

static int ledger_close(struct db *db, const char *id, int64_t t, struct err *e)
{
	sqlite3_stmt *st = prep(db, "UPDATE ledger SET end = ? WHERE machine_id = ?"
				" AND end IS NULL", e);
	int rc = -1;

	if (!st)
		return -1;
	sqlite3_bind_int64(st, 1, t);
	sqlite3_bind_text(st, 2, id, -1, SQLITE_STATIC);
	if (sqlite3_step(st) != SQLITE_DONE)
		sql_err(db, e, "ledger close");
	else
		rc = 0;
	sqlite3_finalize(st);
	return rc;
}

int db_machine_insert(struct db *db, struct machine *m, struct err *e)
{
	sqlite3_stmt *st = NULL;
	int rc = -1, step;
	int64_t t = now_s();

	snprintf(m->state, sizeof(m->state), "creating");
	m->created = m->state_since = t;
	pthread_mutex_lock(&db->lock);
	if (exec_simple(db, "BEGIN IMMEDIATE", e) < 0)
		goto out;
	st = prep(db, "INSERT INTO machines(" MACHINE_COLS ") VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?)", e);
	if (!st)
		goto rollback;
	sqlite3_bind_text(st, 1, m->id, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, m->owner, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, m->name, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 4, m->image, -1, SQLITE_STATIC);
	sqlite3_bind_int(st, 5, m->vcpus);
	sqlite3_bind_int64(st, 6, (sqlite3_int64)m->memory);
	sqlite3_bind_int64(st, 7, (sqlite3_int64)m->disk);
	sqlite3_bind_text(st, 8, m->state, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 9, m->volume, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 10, m->mac, -1, SQLITE_STATIC);
	sqlite3_bind_int(st, 11, m->ssh_port);
	sqlite3_bind_int64(st, 12, m->created);
	sqlite3_bind_int64(st, 13, m->state_since);
	step = sqlite3_step(st);
	if (step == SQLITE_CONSTRAINT) {
		err_set(e, 409, "exists", "machine %s exists", m->name);
		goto rollback;
	}
	if (step != SQLITE_DONE) {
		sql_err(db, e, "insert machine");
		goto rollback;
	}
	if (ledger_open(db, m, m->state, t, e) < 0)
		goto rollback;
	if (exec_simple(db, "COMMIT", e) < 0)
		goto rollback;
	rc = 0;
	goto out;
rollback:
	exec_simple(db, "ROLLBACK", NULL);
out:
	sqlite3_finalize(st);
	pthread_mutex_unlock(&db->lock);
	return rc;
}

static int machine_query(struct db *db, const char *sql, const char *a,
			 const char *b, struct machine *m, const char *what,
			 struct err *e)
{
	sqlite3_stmt *st;
	int rc = -1;

	pthread_mutex_lock(&db->lock);
	st = prep(db, sql, e);
	if (!st)
		goto out;
	sqlite3_bind_text(st, 1, a, -1, SQLITE_STATIC);
	if (b)
		sqlite3_bind_text(st, 2, b, -1, SQLITE_STATIC);
	switch (sqlite3_step(st)) {
	case SQLITE_ROW: machine_from_row(st, m); rc = 0; break;
	case SQLITE_DONE: err_set(e, 404, "not_found", "no machine %s", what); break;
	default: sql_err(db, e, "select machine");
	}
out:
	sqlite3_finalize(st);
	pthread_mutex_unlock(&db->lock);
	return rc;
}

int db_machine_get(struct db *db, const char *owner, const char *name,
		   struct machine *m, struct err *e)
{
	return machine_query(db, "SELECT " MACHINE_COLS " FROM machines WHERE owner = ?"
			     " AND name = ?", owner, name, m, name, e);
}

int db_machine_get_id(struct db *db, const char *id, struct machine *m, struct err *e)
{
	return machine_query(db, "SELECT " MACHINE_COLS " FROM machines WHERE id = ?",
			     id, NULL, m, id, e);
}

int db_machine_list(struct db *db, const char *owner, struct machine **out,
		    size_t *n, struct err *e)
{
	sqlite3_stmt *st;
	struct machine *v = NULL;
	size_t len = 0, cap = 0;
	int rc = -1, step;

	*out = NULL;
	*n = 0;
	pthread_mutex_lock(&db->lock);
	st = prep(db, owner ? "SELECT " MACHINE_COLS " FROM machines WHERE owner = ?"
			      " ORDER BY owner, name"
			    : "SELECT " MACHINE_COLS " FROM machines ORDER BY owner, name", e);
	if (!st)
		goto out;
	if (owner)
		sqlite3_bind_text(st, 1, owner, -1, SQLITE_STATIC);
	while ((step = sqlite3_step(st)) == SQLITE_ROW) {
		if (len == cap) {
			cap = cap ? cap * 2 : 16;
			v = realloc(v, cap * sizeof(*v));
			if (!v)
				abort();
		}
		machine_from_row(st, &v[len++]);
	}
	if (step != SQLITE_DONE) {
		sql_err(db, e, "list machines");
		free(v);
		goto out;
	}
	*out = v;
	*n = len;
	rc = 0;
out:
	sqlite3_finalize(st);
	pthread_mutex_unlock(&db->lock);
	return rc;
}

int db_machine_set_state(struct db *db, const char *id, const char *state,
			 struct err *e)
{
	sqlite3_stmt *st = NULL;
	struct machine m;
	int rc = -1;
	int64_t t = now_s();

	pthread_mutex_lock(&db->lock);
	if (exec_simple(db, "BEGIN IMMEDIATE", e) < 0)
		goto out;
	st = prep(db, "SELECT " MACHINE_COLS " FROM machines WHERE id = ?", e);
	if (!st)
		goto rollback;
	sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
	if (sqlite3_step(st) != SQLITE_ROW) {
		err_set(e, 404, "not_found", "no machine %s", id);
		goto rollback;
	}
	machine_from_row(st, &m);
	sqlite3_finalize(st);
	st = NULL;
	if (strcmp(m.state, state) == 0) {
		exec_simple(db, "ROLLBACK", NULL);
		rc = 0;
		goto out;
	}
	st = prep(db, "UPDATE machines SET state = ?, state_since = ? WHERE id = ?", e);
	if (!st)
		goto rollback;
	sqlite3_bind_text(st, 1, state, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, t);
	sqlite3_bind_text(st, 3, id, -1, SQLITE_STATIC);
	if (sqlite3_step(st) != SQLITE_DONE) {
		sql_err(db, e, "update state");
		goto rollback;
	}
	if (ledger_close(db, id, t, e) < 0 || ledger_open(db, &m, state, t, e) < 0 ||
	    exec_simple(db, "COMMIT", e) < 0)
		goto rollback;
	log_info("machine %s/%s: %s -> %s", m.owner, m.name, m.state, state);
	rc = 0;
	goto out;
rollback:
	exec_simple(db, "ROLLBACK", NULL);
out:
	sqlite3_finalize(st);
	pthread_mutex_unlock(&db->lock);
	return rc;
}

int db_machine_set_port(struct db *db, const char *id, int port, struct err *e)
{
	sqlite3_stmt *st;
	int rc = -1;

	pthread_mutex_lock(&db->lock);
	st = prep(db, "UPDATE machines SET ssh_port = ? WHERE id = ?", e);
	if (!st)
		goto out;
	sqlite3_bind_int(st, 1, port);
	sqlite3_bind_text(st, 2, id, -1, SQLITE_STATIC);
	if (sqlite3_step(st) != SQLITE_DONE)
		sql_err(db, e, "update port");
	else
		rc = 0;
out:
	sqlite3_finalize(st);
	pthread_mutex_unlock(&db->lock);
	return rc;
}

bool db_port_used(struct db *db, int port)
{
	sqlite3_stmt *st;
	bool used = true;

	pthread_mutex_lock(&db->lock);
	st = prep(db, "SELECT 1 FROM machines WHERE ssh_port = ?", NULL);
	if (st) {
		sqlite3_bind_int(st, 1, port);
		used = sqlite3_step(st) == SQLITE_ROW;
	}
	sqlite3_finalize(st);
	pthread_mutex_unlock(&db->lock);
	return used;
}

int db_machine_delete(struct db *db, const char *id, struct err *e)
{
	sqlite3_stmt *st = NULL;
	int rc = -1;

	pthread_mutex_lock(&db->lock);
	if (exec_simple(db, "BEGIN IMMEDIATE", e) < 0)
		goto out;
	if (ledger_close(db, id, now_s(), e) < 0)
		goto rollback;
	st = prep(db, "DELETE FROM machines WHERE id = ?", e);
	if (!st)
		goto rollback;
	sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
	if (sqlite3_step(st) != SQLITE_DONE) {
		sql_err(db, e, "delete machine");
		goto rollback;
	}
	if (exec_simple(db, "COMMIT", e) < 0)
		goto rollback;
	rc = 0;
	goto out;
rollback:
	exec_simple(db, "ROLLBACK", NULL);
out:
	sqlite3_finalize(st);
	pthread_mutex_unlock(&db->lock);
	return rc;
}

#define IMAGE_COLS "name, volume, format, boot, kernel, initrd, cmdline, user," \
		   " virtual_size, sha256, created"

static void image_from_row(sqlite3_stmt *st, struct image *img)
{
	memset(img, 0, sizeof(*img));
	copy_text(st, 0, img->name, sizeof(img->name));
	copy_text(st, 1, img->volume, sizeof(img->volume));
	copy_text(st, 2, img->format, sizeof(img->format));
	copy_text(st, 3, img->boot, sizeof(img->boot));
	copy_text(st, 4, img->kernel, sizeof(img->kernel));
	copy_text(st, 5, img->initrd, sizeof(img->initrd));
	copy_text(st, 6, img->cmdline, sizeof(img->cmdline));
	copy_text(st, 7, img->user, sizeof(img->user));
	img->virtual_size = (uint64_t)sqlite3_column_int64(st, 8);
	copy_text(st, 9, img->sha256, sizeof(img->sha256));
	img->created = sqlite3_column_int64(st, 10);
}

int db_image_insert(struct db *db, const struct image *img, struct err *e)
{
	sqlite3_stmt *st;
	int rc = -1, step;

	pthread_mutex_lock(&db->lock);
	st = prep(db, "INSERT INTO images(" IMAGE_COLS ") VALUES(?,?,?,?,?,?,?,?,?,?,?)", e);
	if (!st)
		goto out;
	sqlite3_bind_text(st, 1, img->name, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, img->volume, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, img->format, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 4, img->boot, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 5, img->kernel, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 6, img->initrd, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 7, img->cmdline, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 8, img->user, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 9, (sqlite3_int64)img->virtual_size);
	sqlite3_bind_text(st, 10, img->sha256, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 11, img->created);
	step = sqlite3_step(st);
	if (step == SQLITE_CONSTRAINT)
		err_set(e, 409, "exists", "image %s exists", img->name);
	else if (step != SQLITE_DONE)
		sql_err(db, e, "insert image");
	else
		rc = 0;
out:
	sqlite3_finalize(st);
	pthread_mutex_unlock(&db->lock);
	return rc;
}

int db_image_get(struct db *db, const char *name, struct image *img, struct err *e)
{
	sqlite3_stmt *st;
	int rc = -1;

	pthread_mutex_lock(&db->lock);
	st = prep(db, "SELECT " IMAGE_COLS " FROM images WHERE name = ?", e);
	if (!st)
		goto out;
	sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
	switch (sqlite3_step(st)) {
	case SQLITE_ROW: image_from_row(st, img); rc = 0; break;
	case SQLITE_DONE: err_set(e, 404, "not_found", "no image %s", name); break;
	default: sql_err(db, e, "select image");
	}
out:
	sqlite3_finalize(st);
	pthread_mutex_unlock(&db->lock);
	return rc;
}

int db_image_list(struct db *db, struct image **out, size_t *n, struct err *e)
{
	sqlite3_stmt *st;
	struct image *v = NULL;
	size_t len = 0, cap = 0;
	int rc = -1, step;

	*out = NULL;
	*n = 0;
	pthread_mutex_lock(&db->lock);
	st = prep(db, "SELECT " IMAGE_COLS " FROM images ORDER BY name", e);
	if (!st)
		goto out;
	while ((step = sqlite3_step(st)) == SQLITE_ROW) {
		if (len == cap) {
			cap = cap ? cap * 2 : 8;
			v = realloc(v, cap * sizeof(*v));
			if (!v)
				abort();
		}
		image_from_row(st, &v[len++]);
	}
	if (step != SQLITE_DONE) {
		sql_err(db, e, "list images");
		free(v);
		goto out;
	}
	*out = v;
	*n = len;
	rc = 0;
out:
	sqlite3_finalize(st);
	pthread_mutex_unlock(&db->lock);
	return rc;
}

int db_image_delete(struct db *db, const char *name, struct err *e)
{
	sqlite3_stmt *st;
	int rc = -1;

	pthread_mutex_lock(&db->lock);
	st = prep(db, "DELETE FROM images WHERE name = ?", e);
	if (!st)
		goto out;
	sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
	if (sqlite3_step(st) != SQLITE_DONE)
		sql_err(db, e, "delete image");
	else
		rc = 0;
out:
	sqlite3_finalize(st);
	pthread_mutex_unlock(&db->lock);
	return rc;
}

int db_image_users(struct db *db, const char *name, struct err *e)
{
	sqlite3_stmt *st;
	int rc = -1;

	pthread_mutex_lock(&db->lock);
	st = prep(db, "SELECT count(*) FROM machines WHERE image = ?", e);
	if (!st)
		goto out;
	sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
	if (sqlite3_step(st) == SQLITE_ROW)
		rc = sqlite3_column_int(st, 0);
	else
		sql_err(db, e, "count users");
out:
	sqlite3_finalize(st);
	pthread_mutex_unlock(&db->lock);
	return rc;
}

int db_ledger_walk(struct db *db, const char *id,
		   void (*fn)(const char *machine_id, const char *owner,
			      const char *name, const char *state, int64_t start,
			      int64_t end, void *data),
		   void *data, struct err *e)
{
	sqlite3_stmt *st;
	int rc = -1, step;

	pthread_mutex_lock(&db->lock);
	st = prep(db, id ? "SELECT machine_id, owner, name, state, start, end FROM ledger"
			   " WHERE machine_id = ? ORDER BY id"
			 : "SELECT machine_id, owner, name, state, start, end FROM ledger"
			   " ORDER BY id", e);
	if (!st)
		goto out;
	if (id)
		sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
	while ((step = sqlite3_step(st)) == SQLITE_ROW)
		fn((const char *)sqlite3_column_text(st, 0),
		   (const char *)sqlite3_column_text(st, 1),
		   (const char *)sqlite3_column_text(st, 2),
		   (const char *)sqlite3_column_text(st, 3),
		   sqlite3_column_int64(st, 4),
		   sqlite3_column_type(st, 5) == SQLITE_NULL ? 0 : sqlite3_column_int64(st, 5),
		   data);
	if (step != SQLITE_DONE)
		sql_err(db, e, "ledger");
	else
		rc = 0;
out:
	sqlite3_finalize(st);
	pthread_mutex_unlock(&db->lock);
	return rc;
}
