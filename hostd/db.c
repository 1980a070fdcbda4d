#include "hostd/db.h"

#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
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

/* Migration 1: every table, made when missing (columns added later are
 * migrations of their own, below).  Never edit it: append a migration. */
static const char schema[] =
	"CREATE TABLE IF NOT EXISTS meta("
	"  key TEXT PRIMARY KEY, value TEXT NOT NULL);"
	"CREATE TABLE IF NOT EXISTS images("
	"  name TEXT PRIMARY KEY, volume TEXT NOT NULL, format TEXT NOT NULL,"
	"  boot TEXT NOT NULL, kernel TEXT NOT NULL, initrd TEXT NOT NULL,"
	"  cmdline TEXT NOT NULL, user TEXT NOT NULL, virtual_size INTEGER NOT NULL,"
	"  sha256 TEXT NOT NULL, created INTEGER NOT NULL,"
	"  source TEXT NOT NULL DEFAULT '', source_size INTEGER NOT NULL DEFAULT 0);"
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
	"CREATE INDEX IF NOT EXISTS ledger_machine ON ledger(machine_id, end);"
	/* A checkpoint names a frozen volume; the machine goes on above it. */
	"CREATE TABLE IF NOT EXISTS checkpoints("
	"  machine_id TEXT NOT NULL, name TEXT NOT NULL, volume TEXT NOT NULL,"
	"  created INTEGER NOT NULL, memory TEXT NOT NULL DEFAULT '',"
	"  PRIMARY KEY(machine_id, name));"
	/* Users' SSH public keys; blob is canonical base64, so one key is
	 * one row whoever registers it. */
	"CREATE TABLE IF NOT EXISTS keys("
	"  id INTEGER PRIMARY KEY, owner TEXT NOT NULL, type TEXT NOT NULL,"
	"  blob TEXT NOT NULL, comment TEXT NOT NULL, fingerprint TEXT NOT NULL,"
	"  created INTEGER NOT NULL, UNIQUE(type, blob));"
	"CREATE INDEX IF NOT EXISTS keys_owner ON keys(owner, id);"
	/* The price list's history: each row is in force from from_t on. */
	"CREATE TABLE IF NOT EXISTS prices("
	"  from_t INTEGER PRIMARY KEY, vcpu_hour INTEGER NOT NULL,"
	"  memory_gib_hour INTEGER NOT NULL, storage_gib_month INTEGER NOT NULL,"
	"  currency TEXT NOT NULL);"
	/* A machine's allocated storage: bytes from t until its next row
	 * (a row only when the number changes). */
	"CREATE TABLE IF NOT EXISTS storage_samples("
	"  machine_id TEXT NOT NULL, t INTEGER NOT NULL, bytes INTEGER NOT NULL,"
	"  PRIMARY KEY(machine_id, t));"
	/* API tokens (berth-web's callers): only the sha256 of the secret is
	 * kept; last_used is 0 until the first use. */
	"CREATE TABLE IF NOT EXISTS tokens("
	"  id INTEGER PRIMARY KEY, owner TEXT NOT NULL, name TEXT NOT NULL,"
	"  hash TEXT NOT NULL UNIQUE, created INTEGER NOT NULL,"
	"  last_used INTEGER NOT NULL DEFAULT 0);"
	"CREATE INDEX IF NOT EXISTS tokens_owner ON tokens(owner, id);";

static int sql_err(struct db *db, struct err *e, const char *what)
{
	return err_set(e, 500, "internal", "database: %s: %s", what, sqlite3_errmsg(db->h));
}

/* Add COLUMN to TABLE unless it has it already (a database made by a
 * berth from before schema versions may have any of the columns). */
static int add_column(struct db *db, const char *table, const char *column,
		      const char *decl, char **msg)
{
	char sql[256];
	sqlite3_stmt *st;
	bool have = false;

	snprintf(sql, sizeof(sql), "PRAGMA table_info(%s)", table);
	if (sqlite3_prepare_v2(db->h, sql, -1, &st, NULL) != SQLITE_OK)
		goto fail;
	while (sqlite3_step(st) == SQLITE_ROW)
		if (!strcmp((const char *)sqlite3_column_text(st, 1), column))
			have = true;
	sqlite3_finalize(st);
	if (have)
		return 0;
	snprintf(sql, sizeof(sql), "ALTER TABLE %s ADD COLUMN %s %s", table, column, decl);
	if (sqlite3_exec(db->h, sql, NULL, NULL, msg) == SQLITE_OK)
		return 0;
	return -1;
fail:
	*msg = sqlite3_mprintf("%s", sqlite3_errmsg(db->h));
	return -1;
}

/* The schema's history.  Migration N (counting from 1) takes a database
 * at version N-1 (PRAGMA user_version) to N: either SQL to run or a
 * column to add.  Append only: never edit, reorder or remove an entry,
 * since databases out there are at every version.  Each entry must also
 * be harmless on a database that already has what it makes (IF NOT
 * EXISTS, add_column's check): databases made before versions existed
 * are at version 0 whatever columns they have. */
struct migration {
	const char *sql;                      /* or NULL, and a column: */
	const char *table, *column, *decl;
};

#define COLUMN(t, c, d) { NULL, t, c, d }

/* Migration 15: the credential broker's (hostd/secrets.h).  A secret's
 * grants go with it and with their machine (foreign keys, on); its log
 * keeps names, not ids: it outlives both.  secret_env: what the broker's
 * variables in a machine should be (want) and what hostd last wrote there
 * ("?" unknown: a restored disk). */
static const char secrets_schema[] =
	"CREATE TABLE IF NOT EXISTS secrets("
	"  id INTEGER PRIMARY KEY, owner TEXT NOT NULL, name TEXT NOT NULL,"
	"  url TEXT NOT NULL, headers TEXT NOT NULL, created INTEGER NOT NULL,"
	"  UNIQUE(owner, name));"
	"CREATE TABLE IF NOT EXISTS secret_grants("
	"  secret_id INTEGER NOT NULL REFERENCES secrets(id) ON DELETE CASCADE,"
	"  machine_id TEXT NOT NULL REFERENCES machines(id) ON DELETE CASCADE,"
	"  created INTEGER NOT NULL, PRIMARY KEY(secret_id, machine_id));"
	"CREATE INDEX IF NOT EXISTS secret_grants_machine ON secret_grants(machine_id);"
	"CREATE TABLE IF NOT EXISTS secret_env("
	"  machine_id TEXT PRIMARY KEY REFERENCES machines(id) ON DELETE CASCADE,"
	"  want TEXT NOT NULL, written TEXT NOT NULL);"
	"CREATE TABLE IF NOT EXISTS broker_log("
	"  id INTEGER PRIMARY KEY, t INTEGER NOT NULL, ms INTEGER NOT NULL,"
	"  owner TEXT NOT NULL, machine TEXT NOT NULL, secret TEXT NOT NULL,"
	"  method TEXT NOT NULL, path TEXT NOT NULL, status INTEGER NOT NULL,"
	"  bytes_in INTEGER NOT NULL, bytes_out INTEGER NOT NULL, error TEXT NOT NULL);"
	"CREATE INDEX IF NOT EXISTS broker_log_owner ON broker_log(owner, id);";

/* Migration 16: previews (hostd/preview.h).  A preview is a machine's port
 * that berth-web serves at LABEL.DOMAIN; LABEL ("PORT-NAME-OWNER") is
 * unique, so a host name names one preview whatever dashes the names hold.
 * Its keys are the sha256 of the secrets that open it: one-time links
 * (kind 'link') and the cookies redeeming a link gives (kind 'cookie');
 * both go with their preview, which goes with its machine. */
static const char previews_schema[] =
	"CREATE TABLE IF NOT EXISTS previews("
	"  id INTEGER PRIMARY KEY,"
	"  machine_id TEXT NOT NULL REFERENCES machines(id) ON DELETE CASCADE,"
	"  port INTEGER NOT NULL, label TEXT NOT NULL UNIQUE, public INTEGER NOT NULL,"
	"  created INTEGER NOT NULL, UNIQUE(machine_id, port));"
	"CREATE TABLE IF NOT EXISTS preview_keys("
	"  id INTEGER PRIMARY KEY,"
	"  preview_id INTEGER NOT NULL REFERENCES previews(id) ON DELETE CASCADE,"
	"  kind TEXT NOT NULL, hash TEXT NOT NULL UNIQUE, expires INTEGER NOT NULL);"
	"CREATE INDEX IF NOT EXISTS preview_keys_preview ON preview_keys(preview_id);";

/* Migration 17: lifecycle events (hostd/events.h): what happened to a
 * machine, when, and why (the cause: "idle for 900 s", "ssh from ADDR",
 * "berth suspend by alice").  MACHINE is the name, not the id: a deleted
 * machine's events stay (each owner keeps its last EVENTS_KEEP). */
static const char events_schema[] =
	"CREATE TABLE IF NOT EXISTS events("
	"  id INTEGER PRIMARY KEY, t INTEGER NOT NULL, owner TEXT NOT NULL,"
	"  machine TEXT NOT NULL, kind TEXT NOT NULL, cause TEXT NOT NULL);"
	"CREATE INDEX IF NOT EXISTS events_owner ON events(owner, id);";

/* Migration 18: a machine's attributes beyond its row (hostd/attrs.h):
 * its deadline (EXPIRES, seconds since the epoch, 0 none) and what
 * happens then (ACTION "suspend" or "delete"), its metadata and the
 * environment its commands get (JSON objects of strings).  A table of
 * its own, gone with its machine. */
static const char attrs_schema[] =
	"CREATE TABLE IF NOT EXISTS machine_attrs("
	"  machine_id TEXT PRIMARY KEY REFERENCES machines(id) ON DELETE CASCADE,"
	"  expires INTEGER NOT NULL DEFAULT 0, action TEXT NOT NULL DEFAULT 'delete',"
	"  metadata TEXT NOT NULL DEFAULT '{}', env TEXT NOT NULL DEFAULT '{}');"
	"CREATE INDEX IF NOT EXISTS machine_attrs_expires ON machine_attrs(expires);";

static const struct migration migrations[] = {
	{ schema, NULL, NULL, NULL },                                         /* 1 */
	COLUMN("images", "source", "TEXT NOT NULL DEFAULT ''"),               /* 2 */
	COLUMN("images", "source_size", "INTEGER NOT NULL DEFAULT 0"),        /* 3 */
	COLUMN("machines", "idle_timeout", "INTEGER NOT NULL DEFAULT 0"),     /* 4 */
	COLUMN("machines", "host_key", "TEXT NOT NULL DEFAULT ''"),           /* 5 */
	COLUMN("machines", "host_key_state", "TEXT NOT NULL DEFAULT 'none'"), /* 6 */
	COLUMN("machines", "host_key_next", "TEXT NOT NULL DEFAULT ''"),      /* 7 */
	COLUMN("machines", "net_index", "INTEGER NOT NULL DEFAULT 0"),        /* 8 */
	COLUMN("machines", "net_alias", "TEXT NOT NULL DEFAULT ''"),          /* 9 */
	COLUMN("machines", "egress", "TEXT NOT NULL DEFAULT ''"),             /* 10 */
	COLUMN("machines", "qemu_index", "INTEGER NOT NULL DEFAULT 0"),       /* 11 */
	COLUMN("keys", "first_used", "INTEGER NOT NULL DEFAULT 0"),           /* 12 */
	COLUMN("images", "owner", "TEXT NOT NULL DEFAULT ''"),                /* 13 */
	COLUMN("images", "public", "INTEGER NOT NULL DEFAULT 1"),             /* 14 */
	{ secrets_schema, NULL, NULL, NULL },                                 /* 15 */
	{ previews_schema, NULL, NULL, NULL },                                /* 16 */
	{ events_schema, NULL, NULL, NULL },                                  /* 17 */
	{ attrs_schema, NULL, NULL, NULL },                                   /* 18 */
};

#define SCHEMA_VERSION ((int)(sizeof(migrations) / sizeof(migrations[0])))

int db_schema_version(void)
{
	return SCHEMA_VERSION;
}

static int user_version(struct db *db, int *out, char **msg)
{
	sqlite3_stmt *st;
	int rc;

	if (sqlite3_prepare_v2(db->h, "PRAGMA user_version", -1, &st, NULL) != SQLITE_OK) {
		*msg = sqlite3_mprintf("%s", sqlite3_errmsg(db->h));
		return -1;
	}
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW)
		*out = sqlite3_column_int(st, 0);
	else
		*msg = sqlite3_mprintf("read user_version: %s", sqlite3_errmsg(db->h));
	sqlite3_finalize(st);
	return rc == SQLITE_ROW ? 0 : -1;
}

/* Migration N (1-based) and its version stamp, in one transaction: a
 * database is at N-1 or at N, never in between.  -1 with *MSG set. */
static int migrate_one(struct db *db, int n, char **msg)
{
	const struct migration *m = &migrations[n - 1];
	char stamp[64];
	int rc;

	if (sqlite3_exec(db->h, "BEGIN IMMEDIATE", NULL, NULL, msg) != SQLITE_OK)
		return -1;
	snprintf(stamp, sizeof(stamp), "PRAGMA user_version = %d", n);
	rc = m->sql ? (sqlite3_exec(db->h, m->sql, NULL, NULL, msg) == SQLITE_OK ? 0 : -1)
		    : add_column(db, m->table, m->column, m->decl, msg);
	if (rc == 0 && (sqlite3_exec(db->h, stamp, NULL, NULL, msg) != SQLITE_OK ||
			sqlite3_exec(db->h, "COMMIT", NULL, NULL, msg) != SQLITE_OK))
		rc = -1;
	if (rc < 0) {
		sqlite3_exec(db->h, "ROLLBACK", NULL, NULL, NULL);
		char *why = *msg;
		*msg = sqlite3_mprintf("schema migration %d of %d: %s", n, SCHEMA_VERSION,
				       why ? why : "?");
		sqlite3_free(why);
	}
	return rc;
}

/* Bring the database to SCHEMA_VERSION, refusing one made by a newer
 * berth (its columns and meanings are unknown here). */
static int migrate(struct db *db, const char *path, struct err *e)
{
	char *msg = NULL;
	int have = 0;

	if (user_version(db, &have, &msg) < 0)
		goto fail;
	if (have > SCHEMA_VERSION)
		return err_set(e, 500, "internal", "database %s is at schema version %d, newer than "
			       "this berth-hostd knows (version %d): run the berth that made it, or "
			       "a newer one", path, have, SCHEMA_VERSION);
	if (have < SCHEMA_VERSION)
		log_info("database %s: schema version %d -> %d", path, have, SCHEMA_VERSION);
	for (int n = have + 1; n <= SCHEMA_VERSION; n++)
		if (migrate_one(db, n, &msg) < 0)
			goto fail;
	return 0;
fail:
	err_set(e, 500, "internal", "database %s: %s", path, msg ? msg : "?");
	sqlite3_free(msg);
	return -1;
}

static int transaction(struct db *db, int (*fn)(struct db *, void *, struct err *),
		       void *data, struct err *e);
static int assign_qemu_indexes_tx(struct db *db, void *data, struct err *e);

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
			 "PRAGMA foreign_keys=ON;", NULL, NULL, &msg) != SQLITE_OK) {
		err_set(e, 500, "internal", "database %s: %s", path, msg ? msg : "?");
		sqlite3_free(msg);
		goto fail;
	}
	if (migrate(db, path, e) < 0)
		goto fail;
	/* Machines made before they had one get their QEMU's number now. */
	if (transaction(db, assign_qemu_indexes_tx, NULL, e) < 0)
		goto fail;
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

/* Prepare SQL and bind the arguments TYPES describes, one per character:
 * 's' text, 'i' int, 'I' int64.  NULL with E set.  Caller holds the lock. */
static sqlite3_stmt *vquery(struct db *db, struct err *e, const char *sql,
			    const char *types, va_list ap)
{
	sqlite3_stmt *st = NULL;

	if (sqlite3_prepare_v2(db->h, sql, -1, &st, NULL) != SQLITE_OK) {
		sql_err(db, e, "prepare");
		return NULL;
	}
	for (int i = 0; types[i]; i++) {
		switch (types[i]) {
		case 's': sqlite3_bind_text(st, i + 1, va_arg(ap, const char *), -1, SQLITE_STATIC); break;
		case 'i': sqlite3_bind_int(st, i + 1, va_arg(ap, int)); break;
		case 'I': sqlite3_bind_int64(st, i + 1, va_arg(ap, int64_t)); break;
		default: abort();
		}
	}
	return st;
}

static sqlite3_stmt *query(struct db *db, struct err *e, const char *sql,
			   const char *types, ...)
{
	va_list ap;
	sqlite3_stmt *st;

	va_start(ap, types);
	st = vquery(db, e, sql, types, ap);
	va_end(ap);
	return st;
}

/* Run a statement that returns no rows (caller holds the lock).  0 when
 * done; 1 on a constraint violation (E set to a generic 409 "conflict",
 * which an insert that expects it replaces with err_clear + its own
 * message); -1 with E set, naming WHAT, otherwise. */
static int vexecute(struct db *db, struct err *e, const char *what, const char *sql,
		    const char *types, va_list ap)
{
	sqlite3_stmt *st = vquery(db, e, sql, types, ap);
	int step, rc;

	if (!st)
		return -1;
	step = sqlite3_step(st);
	rc = step == SQLITE_DONE ? 0 : step == SQLITE_CONSTRAINT ? 1 : sql_err(db, e, what);
	if (rc == 1)
		err_set(e, 409, "conflict", "database: %s: %s", what, sqlite3_errmsg(db->h));
	sqlite3_finalize(st);
	return rc;
}

static int execute(struct db *db, struct err *e, const char *what, const char *sql,
		   const char *types, ...)
{
	va_list ap;
	int rc;

	va_start(ap, types);
	rc = vexecute(db, e, what, sql, types, ap);
	va_end(ap);
	return rc;
}

/* The same, taking the lock. */
static int execute_locked(struct db *db, struct err *e, const char *what, const char *sql,
			  const char *types, ...)
{
	va_list ap;
	int rc;

	pthread_mutex_lock(&db->lock);
	va_start(ap, types);
	rc = vexecute(db, e, what, sql, types, ap);
	va_end(ap);
	pthread_mutex_unlock(&db->lock);
	return rc;
}

/* Collect the rows of ST into a malloc'd array of ELEM-sized items filled
 * by FROM_ROW.  Finalizes ST.  0, or -1 with E set (naming WHAT). */
static int collect(struct db *db, sqlite3_stmt *st, size_t elem,
		   void (*from_row)(sqlite3_stmt *, void *), void **out, size_t *n,
		   const char *what, struct err *e)
{
	char *v = NULL;
	size_t len = 0, cap = 0;
	int step;

	while ((step = sqlite3_step(st)) == SQLITE_ROW) {
		if (len == cap) {
			cap = cap ? cap * 2 : 16;
			v = realloc(v, cap * elem);
			if (!v)
				abort();
		}
		from_row(st, v + len * elem);
		len++;
	}
	sqlite3_finalize(st);
	if (step != SQLITE_DONE) {
		free(v);
		return sql_err(db, e, what);
	}
	*out = v;
	*n = len;
	return 0;
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

/* The next machine's QEMU number into *OUT, and the counter moved on
 * (caller holds the lock and a transaction).  Numbers are never reused: a
 * file a deleted machine's QEMU left (in /tmp, say) must not become a new
 * machine's. */
static int take_qemu_index(struct db *db, int *out, struct err *e)
{
	sqlite3_stmt *st;
	char next[32];
	int64_t n = 0;

	st = query(db, e, "SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'qemu_index_next'",
		   "");
	if (!st)
		return -1;
	if (sqlite3_step(st) == SQLITE_ROW)
		n = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	if (n < 1) {
		st = query(db, e, "SELECT COALESCE(MAX(qemu_index), 0) + 1 FROM machines", "");
		if (!st)
			return -1;
		if (sqlite3_step(st) == SQLITE_ROW)
			n = sqlite3_column_int64(st, 0);
		sqlite3_finalize(st);
	}
	if (n < 1 || n > INT_MAX - 1)
		return err_set(e, 500, "internal", "database: no QEMU number left (next %lld)",
			       (long long)n);
	snprintf(next, sizeof(next), "%lld", (long long)(n + 1));
	if (execute(db, e, "qemu_index_next",
		    "INSERT OR REPLACE INTO meta(key, value) VALUES('qemu_index_next', ?)", "s",
		    next) != 0)
		return -1;
	*out = (int)n;
	return 0;
}

static int assign_qemu_indexes_tx(struct db *db, void *data, struct err *e)
{
	sqlite3_stmt *st;
	char (*ids)[37] = NULL;
	size_t n = 0, cap = 0;
	int rc = -1, idx;

	(void)data;
	st = query(db, e, "SELECT id FROM machines WHERE qemu_index = 0 ORDER BY created, id", "");
	if (!st)
		return -1;
	while (sqlite3_step(st) == SQLITE_ROW) {
		if (n == cap) {
			cap = cap ? 2 * cap : 16;
			ids = realloc(ids, cap * sizeof(*ids));
			if (!ids)
				abort();
		}
		copy_text(st, 0, ids[n++], sizeof(ids[0]));
	}
	sqlite3_finalize(st);
	for (size_t i = 0; i < n; i++)
		if (take_qemu_index(db, &idx, e) < 0 ||
		    execute(db, e, "qemu_index", "UPDATE machines SET qemu_index = ? WHERE id = ?",
			    "is", idx, ids[i]) != 0)
			goto out;
	rc = 0;
out:
	free(ids);
	return rc;
}

static const char *const mstate_names[MS_COUNT] = {
	[MS_CREATING] = "creating", [MS_STOPPED] = "stopped", [MS_RUNNING] = "running",
	[MS_PAUSED] = "paused", [MS_SUSPENDED] = "suspended", [MS_DELETING] = "deleting",
};

const char *mstate_name(enum mstate s)
{
	return (unsigned)s < MS_COUNT ? mstate_names[s] : "unknown";
}

int mstate_parse(const char *s, enum mstate *out)
{
	for (int i = 0; i < MS_COUNT; i++)
		if (strcmp(s, mstate_names[i]) == 0) {
			*out = (enum mstate)i;
			return 0;
		}
	return -1;
}

bool image_visible(const struct image *img, const char *user)
{
	return img->public_ || !strcmp(user, "root") || (img->owner[0] && !strcmp(img->owner, user));
}

bool mstate_holds_cpu(enum mstate s)
{
	return s == MS_RUNNING || s == MS_PAUSED;
}

/* The state in column COL.  A name this hostd does not know (a database
 * written by a newer one) reads as stopped, and says so. */
static enum mstate state_col(sqlite3_stmt *st, int col)
{
	const unsigned char *t = sqlite3_column_text(st, col);
	enum mstate s;

	if (t && mstate_parse((const char *)t, &s) == 0)
		return s;
	log_error("database: unknown machine state '%s'; taken as stopped",
		  t ? (const char *)t : "");
	return MS_STOPPED;
}

int db_meta_get(struct db *db, const char *key, char *out, size_t outlen, struct err *e)
{
	int rc = -1;
	sqlite3_stmt *st;

	pthread_mutex_lock(&db->lock);
	st = query(db, e, "SELECT value FROM meta WHERE key = ?", "s", key);
	if (st) {
		switch (sqlite3_step(st)) {
		case SQLITE_ROW: copy_text(st, 0, out, outlen); rc = 0; break;
		case SQLITE_DONE: rc = 1; break;
		default: sql_err(db, e, "meta");
		}
		sqlite3_finalize(st);
	}
	pthread_mutex_unlock(&db->lock);
	return rc;
}

int db_meta_set(struct db *db, const char *key, const char *value, struct err *e)
{
	return execute_locked(db, e, "meta", "INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)",
			      "ss", key, value) == 0 ? 0 : -1;
}

#define MACHINE_COLS "id, owner, name, image, vcpus, memory, disk, state, volume," \
		     " mac, ssh_port, created, state_since, idle_timeout, host_key," \
		     " host_key_state, host_key_next, net_index, net_alias, substr(egress, 1, 255)," \
		     " length(egress) > 255, qemu_index"

static const char *const host_key_state_names[HK_COUNT] = {
	[HK_NONE] = "none", [HK_SEED] = "seed", [HK_CONFIRMED] = "confirmed",
	[HK_TOFU] = "first-answer",
};

const char *host_key_state_name(enum host_key_state s)
{
	return (unsigned)s < HK_COUNT ? host_key_state_names[s] : "none";
}

static enum host_key_state host_key_state_col(sqlite3_stmt *st, int col)
{
	const unsigned char *t = sqlite3_column_text(st, col);

	for (int i = 0; t && i < HK_COUNT; i++)
		if (strcmp((const char *)t, host_key_state_names[i]) == 0)
			return (enum host_key_state)i;
	return HK_NONE;
}

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
	m->state = state_col(st, 7);
	copy_text(st, 8, m->volume, sizeof(m->volume));
	copy_text(st, 9, m->mac, sizeof(m->mac));
	m->ssh_port = sqlite3_column_int(st, 10);
	m->created = sqlite3_column_int64(st, 11);
	m->state_since = sqlite3_column_int64(st, 12);
	m->idle_timeout = sqlite3_column_int64(st, 13);
	copy_text(st, 14, m->host_key, sizeof(m->host_key));
	m->host_key_state = host_key_state_col(st, 15);
	copy_text(st, 16, m->host_key_next, sizeof(m->host_key_next));
	m->net_index = sqlite3_column_int(st, 17);
	copy_text(st, 18, m->net_alias, sizeof(m->net_alias));
	copy_text(st, 19, m->egress, sizeof(m->egress));
	m->egress_long = sqlite3_column_int(st, 20) != 0;
	m->qemu_index = sqlite3_column_int(st, 21);
}

/* Open a ledger row for machine M in STATE at time T (caller holds the lock
 * and a transaction). */
static int ledger_open(struct db *db, const struct machine *m, enum mstate state,
		       int64_t t, struct err *e)
{
	return execute(db, e, "ledger insert",
		       "INSERT INTO ledger(machine_id, owner, name, state, vcpus, memory, start)"
		       " VALUES(?,?,?,?,?,?,?)", "ssssiII", m->id, m->owner, m->name,
		       mstate_name(state),
		       m->vcpus, (int64_t)m->memory, t) == 0 ? 0 : -1;
}

static int ledger_close(struct db *db, const char *id, int64_t t, struct err *e)
{
	return execute(db, e, "ledger close",
		       "UPDATE ledger SET end = ? WHERE machine_id = ? AND end IS NULL",
		       "Is", t, id) == 0 ? 0 : -1;
}

/* Run FN(db, data, e) inside BEGIN IMMEDIATE ... COMMIT, rolling back when
 * it fails.  Takes the lock. */
static int transaction(struct db *db, int (*fn)(struct db *, void *, struct err *),
		       void *data, struct err *e)
{
	int rc = -1;

	pthread_mutex_lock(&db->lock);
	if (exec_simple(db, "BEGIN IMMEDIATE", e) == 0) {
		rc = fn(db, data, e);
		if (rc == 0 && exec_simple(db, "COMMIT", e) < 0)
			rc = -1;
		if (rc != 0)
			exec_simple(db, "ROLLBACK", NULL);
	}
	pthread_mutex_unlock(&db->lock);
	return rc;
}

struct insert_args {
	struct machine *m;
	const char *egress;
};

static int insert_machine_tx(struct db *db, void *data, struct err *e)
{
	struct insert_args *a = data;
	struct machine *m = a->m;
	int rc;

	if (take_qemu_index(db, &m->qemu_index, e) < 0)
		return -1;
	rc = execute(db, e, "insert machine",
		     "INSERT INTO machines(id, owner, name, image, vcpus, memory, disk, state,"
		     " volume, mac, ssh_port, created, state_since, idle_timeout, host_key,"
		     " host_key_state, host_key_next, net_index, net_alias, egress, qemu_index)"
		     " VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
		     "ssssiIIsssiIIIsssissi", m->id, m->owner, m->name, m->image, m->vcpus,
		     (int64_t)m->memory, (int64_t)m->disk, mstate_name(m->state), m->volume, m->mac,
		     m->ssh_port, m->created, m->state_since, m->idle_timeout, m->host_key,
		     host_key_state_name(m->host_key_state), m->host_key_next, m->net_index,
		     m->net_alias, a->egress, m->qemu_index);

	if (rc == 1) {
		err_clear(e);
		return err_set(e, 409, "exists", "machine %s exists", m->name);
	}
	if (rc < 0)
		return -1;
	return ledger_open(db, m, m->state, m->created, e);
}

int db_machine_insert(struct db *db, struct machine *m, const char *egress, struct err *e)
{
	struct insert_args a = { m, egress ? egress : "" };

	m->state = MS_CREATING;
	m->created = m->state_since = now_s();
	xsnprintf(m->egress, sizeof(m->egress), "%.255s", a.egress);
	m->egress_long = strlen(a.egress) > 255;
	return transaction(db, insert_machine_tx, &a, e);
}

static int machine_query(struct db *db, const char *sql, const char *a,
			 const char *b, struct machine *m, const char *what,
			 struct err *e)
{
	sqlite3_stmt *st;
	int rc = -1;

	pthread_mutex_lock(&db->lock);
	st = b ? query(db, e, sql, "ss", a, b) : query(db, e, sql, "s", a);
	if (st) {
		switch (sqlite3_step(st)) {
		case SQLITE_ROW: machine_from_row(st, m); rc = 0; break;
		case SQLITE_DONE: err_set(e, 404, "not_found", "no machine %s", what); break;
		default: sql_err(db, e, "select machine");
		}
		sqlite3_finalize(st);
	}
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

static void machine_row(sqlite3_stmt *st, void *out)
{
	machine_from_row(st, out);
}

int db_machine_list(struct db *db, const char *owner, struct machine **out,
		    size_t *n, struct err *e)
{
	sqlite3_stmt *st;
	int rc = -1;

	*out = NULL;
	*n = 0;
	pthread_mutex_lock(&db->lock);
	st = owner ? query(db, e, "SELECT " MACHINE_COLS " FROM machines WHERE owner = ?"
			   " ORDER BY owner, name", "s", owner)
		   : query(db, e, "SELECT " MACHINE_COLS " FROM machines ORDER BY owner, name", "");
	if (st)
		rc = collect(db, st, sizeof(**out), machine_row, (void **)out, n,
			     "list machines", e);
	pthread_mutex_unlock(&db->lock);
	return rc;
}

struct set_state {
	const char *id;
	enum mstate state;
	int64_t t;
};

static int set_state_tx(struct db *db, void *data, struct err *e)
{
	struct set_state *a = data;
	struct machine m;
	sqlite3_stmt *st;
	int64_t t = a->t;
	int step;

	st = query(db, e, "SELECT " MACHINE_COLS " FROM machines WHERE id = ?", "s", a->id);
	if (!st)
		return -1;
	step = sqlite3_step(st);
	if (step == SQLITE_ROW)
		machine_from_row(st, &m);
	sqlite3_finalize(st);
	if (step != SQLITE_ROW)
		return err_set(e, 404, "not_found", "no machine %s", a->id);
	if (m.state == a->state)
		return 0;
	if (execute(db, e, "update state",
		    "UPDATE machines SET state = ?, state_since = ? WHERE id = ?",
		    "sIs", mstate_name(a->state), t, a->id) != 0 ||
	    ledger_close(db, a->id, t, e) < 0 || ledger_open(db, &m, a->state, t, e) < 0)
		return -1;
	log_info("machine %s/%s: %s -> %s", m.owner, m.name, mstate_name(m.state),
		 mstate_name(a->state));
	return 0;
}

int db_machine_set_state(struct db *db, const char *id, enum mstate state,
			 struct err *e)
{
	return db_machine_set_state_at(db, id, state, now_s(), e);
}

int db_machine_set_state_at(struct db *db, const char *id, enum mstate state, int64_t t,
			    struct err *e)
{
	struct set_state a = { id, state, t };

	return transaction(db, set_state_tx, &a, e);
}

int db_machine_set_idle(struct db *db, const char *id, int64_t idle_timeout, struct err *e)
{
	return execute_locked(db, e, "update idle_timeout",
			      "UPDATE machines SET idle_timeout = ? WHERE id = ?", "Is",
			      idle_timeout, id) == 0 ? 0 : -1;
}

int db_machine_set_port(struct db *db, const char *id, int port, struct err *e)
{
	return execute_locked(db, e, "update port", "UPDATE machines SET ssh_port = ? WHERE id = ?",
			      "is", port, id) == 0 ? 0 : -1;
}

int db_machine_set_host_key(struct db *db, const char *id, const char *key,
			    enum host_key_state state, const char *next, struct err *e)
{
	return execute_locked(db, e, "update host key",
			      "UPDATE machines SET host_key = ?, host_key_state = ?, "
			      "host_key_next = ? WHERE id = ?", "ssss", key,
			      host_key_state_name(state), next, id) == 0 ? 0 : -1;
}

bool db_net_index_used(struct db *db, int index)
{
	sqlite3_stmt *st;
	bool used = true;

	pthread_mutex_lock(&db->lock);
	st = query(db, NULL, "SELECT 1 FROM machines WHERE net_index = ?", "i", index);
	if (st)
		used = sqlite3_step(st) == SQLITE_ROW;
	sqlite3_finalize(st);
	pthread_mutex_unlock(&db->lock);
	return used;
}

int db_machine_set_net(struct db *db, const char *id, int index, const char *alias,
		       struct err *e)
{
	return execute_locked(db, e, "update network",
			      "UPDATE machines SET net_index = ?, net_alias = ? WHERE id = ?", "iss",
			      index, alias, id) == 0 ? 0 : -1;
}

int db_machine_egress(struct db *db, const char *id, struct buf *out, struct err *e)
{
	sqlite3_stmt *st;
	int rc = -1, step;

	pthread_mutex_lock(&db->lock);
	st = query(db, e, "SELECT egress FROM machines WHERE id = ?", "s", id);
	if (st) {
		step = sqlite3_step(st);
		if (step == SQLITE_ROW) {
			const unsigned char *t = sqlite3_column_text(st, 0);
			buf_adds(out, t ? (const char *)t : "");
			rc = 0;
		} else {
			err_set(e, 404, "not_found", "no machine %s", id);
		}
	}
	sqlite3_finalize(st);
	pthread_mutex_unlock(&db->lock);
	return rc;
}

int db_machine_set_egress(struct db *db, const char *id, const char *policy, struct err *e)
{
	return execute_locked(db, e, "update egress",
			      "UPDATE machines SET egress = ? WHERE id = ?", "ss", policy, id) == 0
		       ? 0 : -1;
}

bool db_port_used(struct db *db, int port)
{
	sqlite3_stmt *st;
	bool used = true;

	pthread_mutex_lock(&db->lock);
	st = query(db, NULL, "SELECT 1 FROM machines WHERE ssh_port = ?", "i", port);
	if (st) {
		used = sqlite3_step(st) == SQLITE_ROW;
		sqlite3_finalize(st);
	}
	pthread_mutex_unlock(&db->lock);
	return used;
}

static int delete_machine_tx(struct db *db, void *data, struct err *e)
{
	const char *id = data;

	if (ledger_close(db, id, now_s(), e) < 0)
		return -1;
	if (execute(db, e, "delete checkpoints", "DELETE FROM checkpoints WHERE machine_id = ?",
		    "s", id) != 0)
		return -1;
	return execute(db, e, "delete machine", "DELETE FROM machines WHERE id = ?",
		       "s", id) == 0 ? 0 : -1;
}

int db_machine_delete(struct db *db, const char *id, struct err *e)
{
	return transaction(db, delete_machine_tx, (void *)id, e);
}

#define IMAGE_COLS "name, volume, format, boot, kernel, initrd, cmdline, user," \
		   " virtual_size, sha256, created, source, source_size, owner, public"

static void image_from_row(sqlite3_stmt *st, void *out)
{
	struct image *img = out;

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
	copy_text(st, 11, img->source, sizeof(img->source));
	img->source_size = (uint64_t)sqlite3_column_int64(st, 12);
	copy_text(st, 13, img->owner, sizeof(img->owner));
	img->public_ = sqlite3_column_int(st, 14) != 0;
}

int db_image_insert(struct db *db, const struct image *img, struct err *e)
{
	int rc = execute_locked(db, e, "insert image",
				"INSERT INTO images(" IMAGE_COLS ") VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
				"ssssssssIsIsIsi", img->name, img->volume, img->format, img->boot,
				img->kernel, img->initrd, img->cmdline, img->user,
				(int64_t)img->virtual_size, img->sha256, img->created,
				img->source, (int64_t)img->source_size, img->owner,
				img->public_ ? 1 : 0);

	if (rc == 1) {
		err_clear(e);
		return err_set(e, 409, "exists", "image %s exists", img->name);
	}
	return rc;
}

int db_image_get(struct db *db, const char *name, struct image *img, struct err *e)
{
	sqlite3_stmt *st;
	int rc = -1;

	pthread_mutex_lock(&db->lock);
	st = query(db, e, "SELECT " IMAGE_COLS " FROM images WHERE name = ?", "s", name);
	if (st) {
		switch (sqlite3_step(st)) {
		case SQLITE_ROW: image_from_row(st, img); rc = 0; break;
		case SQLITE_DONE: err_set(e, 404, "not_found", "no image %s", name); break;
		default: sql_err(db, e, "select image");
		}
		sqlite3_finalize(st);
	}
	pthread_mutex_unlock(&db->lock);
	return rc;
}

int db_image_list(struct db *db, struct image **out, size_t *n, struct err *e)
{
	sqlite3_stmt *st;
	int rc = -1;

	*out = NULL;
	*n = 0;
	pthread_mutex_lock(&db->lock);
	st = query(db, e, "SELECT " IMAGE_COLS " FROM images ORDER BY name", "");
	if (st)
		rc = collect(db, st, sizeof(**out), image_from_row, (void **)out, n,
			     "list images", e);
	pthread_mutex_unlock(&db->lock);
	return rc;
}

int db_image_set_public(struct db *db, const char *name, bool public_, struct err *e)
{
	return execute_locked(db, e, "publish image", "UPDATE images SET public = ? WHERE name = ?",
			      "is", public_ ? 1 : 0, name) == 0 ? 0 : -1;
}

int db_image_delete(struct db *db, const char *name, struct err *e)
{
	return execute_locked(db, e, "delete image", "DELETE FROM images WHERE name = ?",
			      "s", name) == 0 ? 0 : -1;
}

int db_image_users(struct db *db, const char *name, struct err *e)
{
	sqlite3_stmt *st;
	int rc = -1;

	pthread_mutex_lock(&db->lock);
	st = query(db, e, "SELECT count(*) FROM machines WHERE image = ?", "s", name);
	if (st) {
		if (sqlite3_step(st) == SQLITE_ROW)
			rc = sqlite3_column_int(st, 0);
		else
			sql_err(db, e, "count users");
		sqlite3_finalize(st);
	}
	pthread_mutex_unlock(&db->lock);
	return rc;
}

int db_machine_set_volume(struct db *db, const char *id, const char *volume,
			  struct err *e)
{
	return execute_locked(db, e, "update volume", "UPDATE machines SET volume = ? WHERE id = ?",
			      "ss", volume, id) == 0 ? 0 : -1;
}

static void ckpt_from_row(sqlite3_stmt *st, void *out)
{
	struct checkpoint *c = out;

	memset(c, 0, sizeof(*c));
	copy_text(st, 0, c->machine_id, sizeof(c->machine_id));
	copy_text(st, 1, c->name, sizeof(c->name));
	copy_text(st, 2, c->volume, sizeof(c->volume));
	c->created = sqlite3_column_int64(st, 3);
	copy_text(st, 4, c->memory, sizeof(c->memory));
}

struct ckpt_tx {
	const struct checkpoint *c;
	const char *new_top;
};

static int ckpt_insert_tx(struct db *db, void *data, struct err *e)
{
	struct ckpt_tx *a = data;
	int rc = execute(db, e, "insert checkpoint",
			 "INSERT INTO checkpoints(machine_id, name, volume, created, memory)"
			 " VALUES(?,?,?,?,?)", "sssIs", a->c->machine_id, a->c->name, a->c->volume,
			 a->c->created, a->c->memory);

	if (rc == 1) {
		err_clear(e);
		return err_set(e, 409, "exists", "checkpoint %s exists", a->c->name);
	}
	if (rc < 0)
		return -1;
	return execute(db, e, "update volume", "UPDATE machines SET volume = ? WHERE id = ?",
		       "ss", a->new_top, a->c->machine_id) == 0 ? 0 : -1;
}

int db_ckpt_insert(struct db *db, const struct checkpoint *c, const char *new_top,
		   struct err *e)
{
	struct ckpt_tx a = { c, new_top };

	return transaction(db, ckpt_insert_tx, &a, e);
}

int db_ckpt_get(struct db *db, const char *machine_id, const char *name,
		struct checkpoint *c, struct err *e)
{
	sqlite3_stmt *st;
	int rc = -1;

	pthread_mutex_lock(&db->lock);
	st = query(db, e, "SELECT machine_id, name, volume, created, memory FROM checkpoints"
		   " WHERE machine_id = ? AND name = ?", "ss", machine_id, name);
	if (st) {
		switch (sqlite3_step(st)) {
		case SQLITE_ROW: ckpt_from_row(st, c); rc = 0; break;
		case SQLITE_DONE: err_set(e, 404, "not_found", "no checkpoint %s", name); break;
		default: sql_err(db, e, "select checkpoint");
		}
		sqlite3_finalize(st);
	}
	pthread_mutex_unlock(&db->lock);
	return rc;
}

int db_ckpt_list(struct db *db, const char *machine_id, struct checkpoint **out,
		 size_t *n, struct err *e)
{
	sqlite3_stmt *st;
	int rc = -1;

	*out = NULL;
	*n = 0;
	pthread_mutex_lock(&db->lock);
	st = query(db, e, "SELECT machine_id, name, volume, created, memory FROM checkpoints"
		   " WHERE machine_id = ? ORDER BY created, name", "s", machine_id);
	if (st)
		rc = collect(db, st, sizeof(**out), ckpt_from_row, (void **)out, n,
			     "list checkpoints", e);
	pthread_mutex_unlock(&db->lock);
	return rc;
}

int db_ckpt_delete(struct db *db, const char *machine_id, const char *name, struct err *e)
{
	return execute_locked(db, e, "delete checkpoint",
			      "DELETE FROM checkpoints WHERE machine_id = ? AND name = ?",
			      "ss", machine_id, name) == 0 ? 0 : -1;
}

int db_volume_named(struct db *db, const char *volume, struct err *e)
{
	sqlite3_stmt *st;
	int rc = -1;

	pthread_mutex_lock(&db->lock);
	st = query(db, e, "SELECT (SELECT count(*) FROM machines WHERE volume = ?1)"
		   " + (SELECT count(*) FROM checkpoints WHERE volume = ?1)"
		   " + (SELECT count(*) FROM images WHERE volume = ?1)", "s", volume);
	if (st) {
		if (sqlite3_step(st) == SQLITE_ROW)
			rc = sqlite3_column_int(st, 0);
		else
			sql_err(db, e, "volume references");
		sqlite3_finalize(st);
	}
	pthread_mutex_unlock(&db->lock);
	return rc;
}

int db_ledger_walk(struct db *db, const char *id,
		   void (*fn)(const char *machine_id, const char *owner,
			      const char *name, enum mstate state, int64_t start,
			      int64_t end, void *data),
		   void *data, struct err *e)
{
	sqlite3_stmt *st;
	int rc = -1, step;

	pthread_mutex_lock(&db->lock);
	st = id ? query(db, e, "SELECT machine_id, owner, name, state, start, end FROM ledger"
			" WHERE machine_id = ? ORDER BY id", "s", id)
		: query(db, e, "SELECT machine_id, owner, name, state, start, end FROM ledger"
			" ORDER BY id", "");
	if (!st)
		goto out;
	while ((step = sqlite3_step(st)) == SQLITE_ROW)
		fn((const char *)sqlite3_column_text(st, 0),
		   (const char *)sqlite3_column_text(st, 1),
		   (const char *)sqlite3_column_text(st, 2),
		   state_col(st, 3),
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

#define KEY_COLS "id, owner, type, blob, comment, fingerprint, created"

static void key_from_row(sqlite3_stmt *st, void *out)
{
	struct userkey *k = out;

	memset(k, 0, sizeof(*k));
	k->id = sqlite3_column_int64(st, 0);
	copy_text(st, 1, k->owner, sizeof(k->owner));
	copy_text(st, 2, k->type, sizeof(k->type));
	copy_text(st, 3, k->blob, sizeof(k->blob));
	copy_text(st, 4, k->comment, sizeof(k->comment));
	copy_text(st, 5, k->fingerprint, sizeof(k->fingerprint));
	k->created = sqlite3_column_int64(st, 6);
}

int db_key_insert(struct db *db, struct userkey *k, struct err *e)
{
	int rc;

	k->created = now_s();
	pthread_mutex_lock(&db->lock);
	rc = execute(db, e, "insert key",
		     "INSERT INTO keys(owner, type, blob, comment, fingerprint, created)"
		     " VALUES(?,?,?,?,?,?)", "sssssI", k->owner, k->type, k->blob,
		     k->comment, k->fingerprint, k->created);
	if (rc == 0)
		k->id = sqlite3_last_insert_rowid(db->h);
	pthread_mutex_unlock(&db->lock);
	if (rc == 1) {
		/* Whose it is stays unsaid: a key names its owner to no one
		 * else. */
		err_clear(e);
		return err_set(e, 409, "key_exists", "key %s is already registered",
			       k->fingerprint);
	}
	return rc;
}

int db_key_used(struct db *db, int64_t id, bool *first, struct err *e)
{
	int rc;

	pthread_mutex_lock(&db->lock);
	rc = execute(db, e, "mark a key used",
		     "UPDATE keys SET first_used = ? WHERE id = ? AND first_used = 0", "II",
		     now_s(), id);
	*first = rc == 0 && sqlite3_changes(db->h) == 1;
	pthread_mutex_unlock(&db->lock);
	return rc < 0 ? -1 : 0;
}

int db_key_list(struct db *db, const char *owner, struct userkey **out, size_t *n,
		struct err *e)
{
	sqlite3_stmt *st;
	int rc = -1;

	*out = NULL;
	*n = 0;
	pthread_mutex_lock(&db->lock);
	st = query(db, e, "SELECT " KEY_COLS " FROM keys WHERE owner = ? ORDER BY id", "s",
		   owner);
	if (st)
		rc = collect(db, st, sizeof(**out), key_from_row, (void **)out, n,
			     "list keys", e);
	pthread_mutex_unlock(&db->lock);
	return rc;
}

int db_key_find(struct db *db, const char *type, const char *blob, struct userkey *k,
		struct err *e)
{
	sqlite3_stmt *st;
	int rc = -1;

	pthread_mutex_lock(&db->lock);
	st = query(db, e, "SELECT " KEY_COLS " FROM keys WHERE type = ? AND blob = ?", "ss",
		   type, blob);
	if (st) {
		switch (sqlite3_step(st)) {
		case SQLITE_ROW: key_from_row(st, k); rc = 0; break;
		case SQLITE_DONE: err_set(e, 404, "unknown_key", "unknown key"); break;
		default: sql_err(db, e, "select key");
		}
		sqlite3_finalize(st);
	}
	pthread_mutex_unlock(&db->lock);
	return rc;
}

int db_key_delete(struct db *db, const char *owner, int64_t id, struct err *e)
{
	int rc;

	pthread_mutex_lock(&db->lock);
	rc = execute(db, e, "delete key", "DELETE FROM keys WHERE id = ? AND owner = ?", "Is",
		     id, owner);
	if (rc == 0 && sqlite3_changes(db->h) == 0)
		rc = err_set(e, 404, "not_found", "no key %lld", (long long)id);
	pthread_mutex_unlock(&db->lock);
	return rc == 0 ? 0 : -1;
}

/* ---- usage ---------------------------------------------------------------- */

static void price_from_row(sqlite3_stmt *st, void *out)
{
	struct db_price *p = out;

	memset(p, 0, sizeof(*p));
	p->p.from = sqlite3_column_int64(st, 0);
	p->p.vcpu_hour = (uint64_t)sqlite3_column_int64(st, 1);
	p->p.memory_gib_hour = (uint64_t)sqlite3_column_int64(st, 2);
	p->p.storage_gib_month = (uint64_t)sqlite3_column_int64(st, 3);
	copy_text(st, 4, p->currency, sizeof(p->currency));
}

int db_prices(struct db *db, struct db_price **out, size_t *n, struct err *e)
{
	sqlite3_stmt *st;
	int rc = -1;

	*out = NULL;
	*n = 0;
	pthread_mutex_lock(&db->lock);
	st = query(db, e, "SELECT from_t, vcpu_hour, memory_gib_hour, storage_gib_month,"
		   " currency FROM prices ORDER BY from_t", "");
	if (st)
		rc = collect(db, st, sizeof(**out), price_from_row, (void **)out, n,
			     "list prices", e);
	pthread_mutex_unlock(&db->lock);
	return rc;
}

int db_price_insert(struct db *db, const struct db_price *p, struct err *e)
{
	return execute_locked(db, e, "insert price",
			      "INSERT OR REPLACE INTO prices(from_t, vcpu_hour, memory_gib_hour,"
			      " storage_gib_month, currency) VALUES(?,?,?,?,?)", "IIIIs",
			      p->p.from, (int64_t)p->p.vcpu_hour, (int64_t)p->p.memory_gib_hour,
			      (int64_t)p->p.storage_gib_month, p->currency) == 0 ? 0 : -1;
}

int db_samples_latest(struct db *db, struct db_latest_sample **out, size_t *n,
		      struct err *e)
{
	sqlite3_stmt *st;
	size_t cap = 0;
	int step;

	*out = NULL;
	*n = 0;
	pthread_mutex_lock(&db->lock);
	/* SQLite: the bare columns of a max() aggregate come from its row. */
	st = query(db, e, "SELECT machine_id, max(t), bytes FROM storage_samples"
		   " GROUP BY machine_id ORDER BY machine_id", "");
	if (!st) {
		pthread_mutex_unlock(&db->lock);
		return -1;
	}
	while ((step = sqlite3_step(st)) == SQLITE_ROW) {
		if (*n == cap) {
			cap = cap ? cap * 2 : 64;
			*out = realloc(*out, cap * sizeof(**out));
			if (!*out)
				abort();
		}
		struct db_latest_sample *s = &(*out)[(*n)++];
		copy_text(st, 0, s->machine_id, sizeof(s->machine_id));
		s->t = sqlite3_column_int64(st, 1);
		s->bytes = (uint64_t)sqlite3_column_int64(st, 2);
	}
	sqlite3_finalize(st);
	if (step != SQLITE_DONE) {
		sql_err(db, e, "latest samples");
		pthread_mutex_unlock(&db->lock);
		free(*out);
		*out = NULL;
		*n = 0;
		return -1;
	}
	pthread_mutex_unlock(&db->lock);
	return 0;
}

static int cmp_sample(const void *key, const void *elem)
{
	return strcmp(key, ((const struct db_latest_sample *)elem)->machine_id);
}

const struct db_latest_sample *db_sample_find(const struct db_latest_sample *s, size_t n,
					      const char *machine_id)
{
	return s ? bsearch(machine_id, s, n, sizeof(*s), cmp_sample) : NULL;
}

int db_sample_add(struct db *db, const char *id, int64_t t, uint64_t bytes, struct err *e)
{
	sqlite3_stmt *st;
	int rc = -1;
	bool same = false;

	pthread_mutex_lock(&db->lock);
	st = query(db, e, "SELECT bytes FROM storage_samples WHERE machine_id = ?"
		   " ORDER BY t DESC LIMIT 1", "s", id);
	if (!st)
		goto out;
	if (sqlite3_step(st) == SQLITE_ROW)
		same = (uint64_t)sqlite3_column_int64(st, 0) == bytes;
	sqlite3_finalize(st);
	if (same) {
		rc = 0;
		goto out;
	}
	rc = execute(db, e, "add sample", "INSERT OR REPLACE INTO storage_samples(machine_id, t,"
		     " bytes) VALUES(?,?,?)", "sII", id, t, (int64_t)bytes) == 0 ? 0 : -1;
out:
	pthread_mutex_unlock(&db->lock);
	return rc;
}

static void sample_from_row(sqlite3_stmt *st, void *out)
{
	struct bill_sample *s = out;

	s->t = sqlite3_column_int64(st, 0);
	s->bytes = (uint64_t)sqlite3_column_int64(st, 1);
}

int db_samples(struct db *db, const char *id, struct bill_sample **out, size_t *n,
	       struct err *e)
{
	sqlite3_stmt *st;
	int rc = -1;

	*out = NULL;
	*n = 0;
	pthread_mutex_lock(&db->lock);
	st = query(db, e, "SELECT t, bytes FROM storage_samples WHERE machine_id = ? ORDER BY t",
		   "s", id);
	if (st)
		rc = collect(db, st, sizeof(**out), sample_from_row, (void **)out, n,
			     "list samples", e);
	pthread_mutex_unlock(&db->lock);
	return rc;
}

static void usage_row_from(sqlite3_stmt *st, void *out)
{
	struct db_usage_row *r = out;

	memset(r, 0, sizeof(*r));
	copy_text(st, 0, r->machine_id, sizeof(r->machine_id));
	copy_text(st, 1, r->owner, sizeof(r->owner));
	copy_text(st, 2, r->name, sizeof(r->name));
	r->state = state_col(st, 3);
	r->vcpus = sqlite3_column_int(st, 4);
	r->memory = (uint64_t)sqlite3_column_int64(st, 5);
	r->start = sqlite3_column_int64(st, 6);
	r->end = sqlite3_column_type(st, 7) == SQLITE_NULL ? 0 : sqlite3_column_int64(st, 7);
}

int db_usage_rows(struct db *db, const char *owner, const char *machine_id, int64_t since,
		  struct db_usage_row **out, size_t *n, struct err *e)
{
	sqlite3_stmt *st;
	int rc = -1;

	*out = NULL;
	*n = 0;
	pthread_mutex_lock(&db->lock);
	/* A NULL owner or machine binds NULL: no filter on it. */
	st = query(db, e, "SELECT machine_id, owner, name, state, vcpus, memory, start, end"
		   " FROM ledger WHERE (?1 IS NULL OR owner = ?1) AND"
		   " (?2 IS NULL OR machine_id = ?2) AND (end IS NULL OR end > ?3)"
		   " ORDER BY machine_id, id", "ssI", owner, machine_id, since);
	if (st)
		rc = collect(db, st, sizeof(**out), usage_row_from, (void **)out, n,
			     "usage", e);
	pthread_mutex_unlock(&db->lock);
	return rc;
}

static void sample_row_from(sqlite3_stmt *st, void *out)
{
	struct db_sample_row *r = out;

	memset(r, 0, sizeof(*r));
	copy_text(st, 0, r->machine_id, sizeof(r->machine_id));
	r->s.t = sqlite3_column_int64(st, 1);
	r->s.bytes = (uint64_t)sqlite3_column_int64(st, 2);
}

int db_samples_all(struct db *db, const char *owner, struct db_sample_row **out, size_t *n,
		   struct err *e)
{
	sqlite3_stmt *st;
	int rc = -1;

	*out = NULL;
	*n = 0;
	pthread_mutex_lock(&db->lock);
	st = query(db, e, "SELECT machine_id, t, bytes FROM storage_samples WHERE ?1 IS NULL OR"
		   " machine_id IN (SELECT machine_id FROM ledger WHERE owner = ?1)"
		   " ORDER BY machine_id, t", "s", owner);
	if (st)
		rc = collect(db, st, sizeof(**out), sample_row_from, (void **)out, n,
			     "list samples", e);
	pthread_mutex_unlock(&db->lock);
	return rc;
}

static void id_from_row(sqlite3_stmt *st, void *out)
{
	copy_text(st, 0, out, 37);
}

int db_machine_ids(struct db *db, const char *owner, char (**out)[37], size_t *n,
		   struct err *e)
{
	sqlite3_stmt *st;
	int rc = -1;

	*out = NULL;
	*n = 0;
	pthread_mutex_lock(&db->lock);
	st = query(db, e, "SELECT id FROM machines WHERE ?1 IS NULL OR owner = ?1 ORDER BY id",
		   "s", owner);
	if (st)
		rc = collect(db, st, 37, id_from_row, (void **)out, n, "list machine ids", e);
	pthread_mutex_unlock(&db->lock);
	return rc;
}

/* ---- API tokens ------------------------------------------------------------ */

#define TOKEN_COLS "id, owner, name, created, last_used"

static void token_from_row(sqlite3_stmt *st, void *out)
{
	struct token *t = out;

	memset(t, 0, sizeof(*t));
	t->id = sqlite3_column_int64(st, 0);
	copy_text(st, 1, t->owner, sizeof(t->owner));
	copy_text(st, 2, t->name, sizeof(t->name));
	t->created = sqlite3_column_int64(st, 3);
	t->last_used = sqlite3_column_int64(st, 4);
}

int db_token_insert(struct db *db, struct token *t, const char *hash, int max,
		    struct err *e)
{
	sqlite3_stmt *st;
	int rc = -1;

	t->created = now_s();
	t->last_used = 0;
	pthread_mutex_lock(&db->lock);
	st = query(db, e, "SELECT count(*) FROM tokens WHERE owner = ?", "s", t->owner);
	if (!st)
		goto out;
	if (sqlite3_step(st) != SQLITE_ROW) {
		sql_err(db, e, "count tokens");
		sqlite3_finalize(st);
		goto out;
	}
	if (sqlite3_column_int(st, 0) >= max) {
		sqlite3_finalize(st);
		err_set(e, 409, "too_many_tokens", "%s has %d tokens already, the most one user "
			"may have: remove one first (berth token rm ID)", t->owner, max);
		goto out;
	}
	sqlite3_finalize(st);
	rc = execute(db, e, "insert token",
		     "INSERT INTO tokens(owner, name, hash, created, last_used) VALUES(?,?,?,?,0)",
		     "sssI", t->owner, t->name, hash, t->created);
	if (rc == 0)
		t->id = sqlite3_last_insert_rowid(db->h);
out:
	pthread_mutex_unlock(&db->lock);
	return rc == 0 ? 0 : -1;
}

int db_token_list(struct db *db, const char *owner, struct token **out, size_t *n,
		  struct err *e)
{
	sqlite3_stmt *st;
	int rc = -1;

	*out = NULL;
	*n = 0;
	pthread_mutex_lock(&db->lock);
	st = query(db, e, "SELECT " TOKEN_COLS " FROM tokens WHERE owner = ? ORDER BY id", "s",
		   owner);
	if (st)
		rc = collect(db, st, sizeof(**out), token_from_row, (void **)out, n,
			     "list tokens", e);
	pthread_mutex_unlock(&db->lock);
	return rc;
}

int db_token_find(struct db *db, const char *hash, struct token *t, struct err *e)
{
	sqlite3_stmt *st;
	int rc = -1;

	pthread_mutex_lock(&db->lock);
	st = query(db, e, "SELECT " TOKEN_COLS " FROM tokens WHERE hash = ?", "s", hash);
	if (st) {
		switch (sqlite3_step(st)) {
		case SQLITE_ROW: token_from_row(st, t); rc = 0; break;
		case SQLITE_DONE: err_set(e, 401, "invalid_token", "invalid or revoked token"); break;
		default: sql_err(db, e, "select token");
		}
		sqlite3_finalize(st);
	}
	pthread_mutex_unlock(&db->lock);
	return rc;
}

int db_token_touch(struct db *db, int64_t id, int64_t t, struct err *e)
{
	return execute_locked(db, e, "touch token", "UPDATE tokens SET last_used = ? WHERE id = ?",
			      "II", t, id) == 0 ? 0 : -1;
}

int db_token_delete(struct db *db, const char *owner, int64_t id, struct err *e)
{
	int rc;

	pthread_mutex_lock(&db->lock);
	rc = execute(db, e, "delete token", "DELETE FROM tokens WHERE id = ? AND owner = ?", "Is",
		     id, owner);
	if (rc == 0 && sqlite3_changes(db->h) == 0)
		rc = err_set(e, 404, "not_found", "no token %lld", (long long)id);
	pthread_mutex_unlock(&db->lock);
	return rc == 0 ? 0 : -1;
}

/* ---- the credential broker's secrets (hostd/secrets.h) ------------------- */

#define SECRET_COLS "id, owner, name, url, headers, created"

static void secret_from_row(sqlite3_stmt *st, void *out)
{
	struct db_secret *s = out;

	memset(s, 0, sizeof(*s));
	s->id = sqlite3_column_int64(st, 0);
	copy_text(st, 1, s->owner, sizeof(s->owner));
	copy_text(st, 2, s->name, sizeof(s->name));
	copy_text(st, 3, s->url, sizeof(s->url));
	copy_text(st, 4, s->headers, sizeof(s->headers));
	s->created = sqlite3_column_int64(st, 5);
}

int db_secret_insert(struct db *db, struct db_secret *s, struct err *e)
{
	int rc;

	s->created = now_s();
	pthread_mutex_lock(&db->lock);
	rc = execute(db, e, "insert secret", "INSERT INTO secrets(owner, name, url, headers, created)"
		     " VALUES(?,?,?,?,?)", "ssssI", s->owner, s->name, s->url, s->headers,
		     s->created);
	if (rc == 0)
		s->id = sqlite3_last_insert_rowid(db->h);
	pthread_mutex_unlock(&db->lock);
	if (rc == 1) {
		err_clear(e);
		return err_set(e, 409, "secret_exists", "%s has a secret %s already: remove it "
			       "first (berth secret rm %s)", s->owner, s->name, s->name);
	}
	return rc;
}

int db_secret_get(struct db *db, const char *owner, const char *name, struct db_secret *s,
		  struct err *e)
{
	sqlite3_stmt *st;
	int rc = -1;

	pthread_mutex_lock(&db->lock);
	st = query(db, e, "SELECT " SECRET_COLS " FROM secrets WHERE owner = ? AND name = ?", "ss",
		   owner, name);
	if (st) {
		switch (sqlite3_step(st)) {
		case SQLITE_ROW: secret_from_row(st, s); rc = 0; break;
		case SQLITE_DONE: err_set(e, 404, "no_secret", "no secret %s", name); break;
		default: sql_err(db, e, "select secret");
		}
		sqlite3_finalize(st);
	}
	pthread_mutex_unlock(&db->lock);
	return rc;
}

int db_secret_list(struct db *db, const char *owner, struct db_secret **out, size_t *n,
		   struct err *e)
{
	sqlite3_stmt *st;
	int rc = -1;

	*out = NULL;
	*n = 0;
	pthread_mutex_lock(&db->lock);
	st = query(db, e, "SELECT " SECRET_COLS " FROM secrets WHERE owner = ? ORDER BY name", "s",
		   owner);
	if (st)
		rc = collect(db, st, sizeof(**out), secret_from_row, (void **)out, n,
			     "list secrets", e);
	pthread_mutex_unlock(&db->lock);
	return rc;
}

/* The machines whose grants a change touches get their broker variables
 * recomputed by the caller (secrets.c); this only removes the rows. */
int db_secret_delete(struct db *db, const char *owner, const char *name, struct err *e)
{
	int rc;

	pthread_mutex_lock(&db->lock);
	rc = execute(db, e, "delete secret", "DELETE FROM secrets WHERE owner = ? AND name = ?",
		     "ss", owner, name);
	if (rc == 0 && sqlite3_changes(db->h) == 0)
		rc = err_set(e, 404, "no_secret", "no secret %s", name);
	pthread_mutex_unlock(&db->lock);
	return rc == 0 ? 0 : -1;
}

int db_secret_grant(struct db *db, int64_t secret_id, const char *machine_id, bool allow,
		    bool *changed, struct err *e)
{
	int rc;

	pthread_mutex_lock(&db->lock);
	if (allow)
		rc = execute(db, e, "grant secret", "INSERT OR IGNORE INTO secret_grants(secret_id,"
			     " machine_id, created) VALUES(?,?,?)", "IsI", secret_id, machine_id,
			     now_s());
	else
		rc = execute(db, e, "revoke secret", "DELETE FROM secret_grants WHERE secret_id = ?"
			     " AND machine_id = ?", "Is", secret_id, machine_id);
	*changed = rc == 0 && sqlite3_changes(db->h) > 0;
	pthread_mutex_unlock(&db->lock);
	return rc == 0 ? 0 : -1;
}

static void name_from_row(sqlite3_stmt *st, void *out)
{
	copy_text(st, 0, out, 64);
}

/* The names the query SQL with its one argument (TYPES "s" or "I") lists. */
static int names_query(struct db *db, const char *sql, const char *types, const void *arg,
		       char (**out)[64], size_t *n, const char *what, struct err *e)
{
	sqlite3_stmt *st;
	int rc = -1;

	*out = NULL;
	*n = 0;
	pthread_mutex_lock(&db->lock);
	st = types[0] == 's' ? query(db, e, sql, types, (const char *)arg)
			     : query(db, e, sql, types, *(const int64_t *)arg);
	if (st)
		rc = collect(db, st, 64, name_from_row, (void **)out, n, what, e);
	pthread_mutex_unlock(&db->lock);
	return rc;
}

int db_secret_machines(struct db *db, int64_t secret_id, char (**out)[64], size_t *n,
		       struct err *e)
{
	return names_query(db, "SELECT m.name FROM secret_grants g JOIN machines m ON"
			   " m.id = g.machine_id WHERE g.secret_id = ? ORDER BY m.name", "I",
			   &secret_id, out, n, "list a secret's machines", e);
}

int db_machine_secrets(struct db *db, const char *machine_id, char (**out)[64], size_t *n,
		       struct err *e)
{
	return names_query(db, "SELECT s.name FROM secret_grants g JOIN secrets s ON"
			   " s.id = g.secret_id WHERE g.machine_id = ? ORDER BY s.name", "s",
			   machine_id, out, n, "list a machine's secrets", e);
}

int db_secret_grantees(struct db *db, int64_t secret_id, char (**out)[64], size_t *n,
		       struct err *e)
{
	return names_query(db, "SELECT machine_id FROM secret_grants WHERE secret_id = ?", "I",
			   &secret_id, out, n, "list a secret's machine ids", e);
}

int db_broker_lookup(struct db *db, int net_index, const char *secret, struct machine *m,
		     struct db_secret *s, bool *allowed, struct err *e)
{
	sqlite3_stmt *st;
	int rc = -1;

	memset(s, 0, sizeof(*s));
	*allowed = false;
	if (net_index <= 0)
		return err_set(e, 404, "not_found", "no machine at network index %d", net_index);
	pthread_mutex_lock(&db->lock);
	st = query(db, e, "SELECT " MACHINE_COLS " FROM machines WHERE net_index = ?", "i",
		   net_index);
	if (st) {
		switch (sqlite3_step(st)) {
		case SQLITE_ROW: machine_from_row(st, m); rc = 0; break;
		case SQLITE_DONE: err_set(e, 404, "not_found", "no machine at network index %d",
					  net_index); break;
		default: sql_err(db, e, "select machine by network index");
		}
		sqlite3_finalize(st);
	}
	if (rc == 0) {
		rc = -1;
		st = query(db, e, "SELECT " SECRET_COLS ", EXISTS(SELECT 1 FROM secret_grants g"
			   " WHERE g.secret_id = secrets.id AND g.machine_id = ?) FROM secrets"
			   " WHERE owner = ? AND name = ?", "sss", m->id, m->owner, secret);
		if (st) {
			switch (sqlite3_step(st)) {
			case SQLITE_ROW:
				secret_from_row(st, s);
				*allowed = sqlite3_column_int(st, 6) != 0;
				rc = 0;
				break;
			case SQLITE_DONE: rc = 0; break;
			default: sql_err(db, e, "select secret for the broker");
			}
			sqlite3_finalize(st);
		}
	}
	pthread_mutex_unlock(&db->lock);
	return rc;
}

int db_broker_log_add(struct db *db, const struct db_broker_call *c, int keep, struct err *e)
{
	int rc;

	pthread_mutex_lock(&db->lock);
	rc = execute(db, e, "log a broker call",
		     "INSERT INTO broker_log(t, ms, owner, machine, secret, method, path, status,"
		     " bytes_in, bytes_out, error) VALUES(?,?,?,?,?,?,?,?,?,?,?)", "IIsssssiIIs",
		     c->t, c->ms, c->owner, c->machine, c->secret, c->method, c->path,
		     c->status, c->bytes_in, c->bytes_out, c->error);
	/* An owner's log keeps its last KEEP calls. */
	if (rc == 0)
		rc = execute(db, e, "trim the broker log",
			     "DELETE FROM broker_log WHERE owner = ? AND id <= (SELECT id FROM"
			     " broker_log WHERE owner = ? ORDER BY id DESC LIMIT 1 OFFSET ?)", "ssi",
			     c->owner, c->owner, keep);
	pthread_mutex_unlock(&db->lock);
	return rc == 0 ? 0 : -1;
}

static void call_from_row(sqlite3_stmt *st, void *out)
{
	struct db_broker_call *c = out;

	memset(c, 0, sizeof(*c));
	c->id = sqlite3_column_int64(st, 0);
	c->t = sqlite3_column_int64(st, 1);
	c->ms = sqlite3_column_int64(st, 2);
	copy_text(st, 3, c->owner, sizeof(c->owner));
	copy_text(st, 4, c->machine, sizeof(c->machine));
	copy_text(st, 5, c->secret, sizeof(c->secret));
	copy_text(st, 6, c->method, sizeof(c->method));
	copy_text(st, 7, c->path, sizeof(c->path));
	c->status = sqlite3_column_int(st, 8);
	c->bytes_in = sqlite3_column_int64(st, 9);
	c->bytes_out = sqlite3_column_int64(st, 10);
	copy_text(st, 11, c->error, sizeof(c->error));
}

int db_broker_log_list(struct db *db, const char *owner, const char *secret,
		       const char *machine, int limit, struct db_broker_call **out, size_t *n,
		       struct err *e)
{
	sqlite3_stmt *st;
	int rc = -1;

	*out = NULL;
	*n = 0;
	pthread_mutex_lock(&db->lock);
	/* The last LIMIT, oldest first. */
	st = query(db, e, "SELECT * FROM (SELECT id, t, ms, owner, machine, secret, method, path,"
		   " status, bytes_in, bytes_out, error FROM broker_log WHERE owner = ?"
		   " AND (? = '' OR secret = ?) AND (? = '' OR machine = ?)"
		   " ORDER BY id DESC LIMIT ?) ORDER BY id", "sssssi", owner,
		   secret ? secret : "", secret ? secret : "", machine ? machine : "",
		   machine ? machine : "", limit);
	if (st)
		rc = collect(db, st, sizeof(**out), call_from_row, (void **)out, n,
			     "list the broker log", e);
	pthread_mutex_unlock(&db->lock);
	return rc;
}

int db_secret_env_want(struct db *db, const char *machine_id, const char *want, struct err *e)
{
	/* A machine that never had variables (no row) has none to remove. */
	return execute_locked(db, e, "want broker variables",
			      "INSERT INTO secret_env(machine_id, want, written) VALUES(?, ?, '')"
			      " ON CONFLICT(machine_id) DO UPDATE SET want = excluded.want", "ss",
			      machine_id, want) == 0 ? 0 : -1;
}

int db_secret_env_written(struct db *db, const char *machine_id, const char *written,
			  struct err *e)
{
	return execute_locked(db, e, "broker variables written",
			      "UPDATE secret_env SET written = ? WHERE machine_id = ?", "ss",
			      written, machine_id) == 0 ? 0 : -1;
}

int db_secret_env_forked(struct db *db, const char *from_id, const char *to_id,
			 struct err *e)
{
	return execute_locked(db, e, "copy broker variables",
			      "INSERT OR IGNORE INTO secret_env(machine_id, want, written)"
			      " SELECT ?, '', written FROM secret_env WHERE machine_id = ?", "ss",
			      to_id, from_id) == 0 ? 0 : -1;
}

int db_secret_env_unknown(struct db *db, const char *machine_id, struct err *e)
{
	return execute_locked(db, e, "broker variables unknown",
			      "UPDATE secret_env SET written = '?' WHERE machine_id = ?", "s",
			      machine_id) == 0 ? 0 : -1;
}

static void env_from_row(sqlite3_stmt *st, void *out)
{
	struct db_secret_env *v = out;

	memset(v, 0, sizeof(*v));
	copy_text(st, 0, v->machine_id, sizeof(v->machine_id));
	copy_text(st, 1, v->want, sizeof(v->want));
	copy_text(st, 2, v->written, sizeof(v->written));
}

int db_secret_env_list(struct db *db, bool stale_running, struct db_secret_env **out,
		       size_t *n, struct err *e)
{
	sqlite3_stmt *st;
	int rc = -1;

	*out = NULL;
	*n = 0;
	pthread_mutex_lock(&db->lock);
	st = query(db, e, stale_running ?
		   "SELECT v.machine_id, v.want, v.written FROM secret_env v JOIN machines m"
		   " ON m.id = v.machine_id WHERE v.want != v.written AND m.state = 'running'" :
		   "SELECT machine_id, want, written FROM secret_env", "");
	if (st)
		rc = collect(db, st, sizeof(**out), env_from_row, (void **)out, n,
			     "list broker variables", e);
	pthread_mutex_unlock(&db->lock);
	return rc;
}

/* ---- previews (hostd/preview.h) ---------------------------------------- */

#define PREVIEW_COLS "p.id, p.machine_id, m.owner, m.name, p.port, p.label, p.public, p.created"
#define PREVIEW_FROM " FROM previews p JOIN machines m ON m.id = p.machine_id"

static void preview_from_row(sqlite3_stmt *st, void *out)
{
	struct db_preview *p = out;

	memset(p, 0, sizeof(*p));
	p->id = sqlite3_column_int64(st, 0);
	copy_text(st, 1, p->machine_id, sizeof(p->machine_id));
	copy_text(st, 2, p->owner, sizeof(p->owner));
	copy_text(st, 3, p->machine, sizeof(p->machine));
	p->port = sqlite3_column_int(st, 4);
	copy_text(st, 5, p->label, sizeof(p->label));
	p->public_ = sqlite3_column_int(st, 6) != 0;
	p->created = sqlite3_column_int64(st, 7);
}

/* The one preview ST selects (finalized), 404 "no_preview" naming WHAT
 * when none.  Caller holds the lock. */
static int preview_one(struct db *db, sqlite3_stmt *st, const char *what, struct db_preview *p,
		       struct err *e)
{
	int rc = -1;

	if (!st)
		return -1;
	switch (sqlite3_step(st)) {
	case SQLITE_ROW: preview_from_row(st, p); rc = 0; break;
	case SQLITE_DONE: err_set(e, 404, "no_preview", "no preview %s", what); break;
	default: sql_err(db, e, "select preview");
	}
	sqlite3_finalize(st);
	return rc;
}

int db_preview_put(struct db *db, const char *machine_id, int port, const char *label,
		   bool public_, bool *created, struct err *e)
{
	sqlite3_stmt *st;
	int rc = -1, step;

	*created = false;
	pthread_mutex_lock(&db->lock);
	st = query(db, e, "SELECT id FROM previews WHERE machine_id = ? AND port = ?", "si",
		   machine_id, port);
	if (!st)
		goto out;
	step = sqlite3_step(st);
	sqlite3_finalize(st);
	if (step == SQLITE_ROW) {
		rc = execute(db, e, "update preview", "UPDATE previews SET public = ? WHERE"
			     " machine_id = ? AND port = ?", "isi", public_ ? 1 : 0, machine_id, port);
	} else if (step == SQLITE_DONE) {
		rc = execute(db, e, "insert preview", "INSERT INTO previews(machine_id, port, label,"
			     " public, created) VALUES(?,?,?,?,?)", "sisiI", machine_id, port, label,
			     public_ ? 1 : 0, now_s());
		*created = rc == 0;
	} else {
		sql_err(db, e, "select preview");
	}
out:
	pthread_mutex_unlock(&db->lock);
	if (rc == 1) {
		err_clear(e);
		return err_set(e, 409, "label_taken", "another machine's preview is named %s "
			       "already (its name and owner spell the same host name as this "
			       "one's): a machine of another name can have this preview", label);
	}
	return rc;
}

int db_preview_get(struct db *db, const char *machine_id, int port, struct db_preview *p,
		   struct err *e)
{
	char what[64];
	int rc;

	snprintf(what, sizeof(what), "of port %d", port);
	pthread_mutex_lock(&db->lock);
	rc = preview_one(db, query(db, e, "SELECT " PREVIEW_COLS PREVIEW_FROM " WHERE"
				   " p.machine_id = ? AND p.port = ?", "si", machine_id, port),
			 what, p, e);
	pthread_mutex_unlock(&db->lock);
	return rc;
}

int db_preview_find(struct db *db, const char *label, struct db_preview *p, struct err *e)
{
	int rc;

	pthread_mutex_lock(&db->lock);
	rc = preview_one(db, query(db, e, "SELECT " PREVIEW_COLS PREVIEW_FROM " WHERE"
				   " p.label = ?", "s", label), label, p, e);
	pthread_mutex_unlock(&db->lock);
	return rc;
}

int db_preview_list(struct db *db, const char *owner, struct db_preview **out, size_t *n,
		    struct err *e)
{
	sqlite3_stmt *st;
	int rc = -1;

	*out = NULL;
	*n = 0;
	pthread_mutex_lock(&db->lock);
	st = owner ? query(db, e, "SELECT " PREVIEW_COLS PREVIEW_FROM " WHERE m.owner = ?"
			   " ORDER BY m.name, p.port", "s", owner)
		   : query(db, e, "SELECT " PREVIEW_COLS PREVIEW_FROM
			   " ORDER BY m.owner, m.name, p.port", "");
	if (st)
		rc = collect(db, st, sizeof(**out), preview_from_row, (void **)out, n,
			     "list previews", e);
	pthread_mutex_unlock(&db->lock);
	return rc;
}

int db_preview_delete(struct db *db, int64_t id, struct err *e)
{
	int rc;

	pthread_mutex_lock(&db->lock);
	rc = execute(db, e, "delete preview", "DELETE FROM previews WHERE id = ?", "I", id);
	if (rc == 0 && sqlite3_changes(db->h) == 0)
		rc = err_set(e, 404, "no_preview", "no such preview");
	pthread_mutex_unlock(&db->lock);
	return rc;
}

int db_preview_key_add(struct db *db, int64_t preview_id, const char *kind, const char *hash,
		       int64_t expires, int64_t *id, struct err *e)
{
	int rc;

	*id = 0;
	pthread_mutex_lock(&db->lock);
	rc = execute(db, e, "expire preview keys", "DELETE FROM preview_keys WHERE expires < ?",
		     "I", now_s());
	if (rc == 0)
		rc = execute(db, e, "insert preview key", "INSERT INTO preview_keys(preview_id,"
			     " kind, hash, expires) VALUES(?,?,?,?)", "IssI", preview_id, kind, hash,
			     expires);
	if (rc == 0)
		*id = sqlite3_last_insert_rowid(db->h);
	pthread_mutex_unlock(&db->lock);
	return rc == 0 ? 0 : -1;
}

int db_preview_key_find(struct db *db, int64_t preview_id, const char *kind, const char *hash,
			int64_t now, int64_t *id, struct err *e)
{
	sqlite3_stmt *st;
	int rc = -1;

	*id = 0;
	pthread_mutex_lock(&db->lock);
	st = query(db, e, "SELECT id FROM preview_keys WHERE hash = ? AND preview_id = ? AND"
		   " kind = ? AND expires >= ?", "sIsI", hash, preview_id, kind, now);
	if (st) {
		switch (sqlite3_step(st)) {
		case SQLITE_ROW: *id = sqlite3_column_int64(st, 0); rc = 0; break;
		case SQLITE_DONE: rc = 0; break;
		default: sql_err(db, e, "select preview key");
		}
		sqlite3_finalize(st);
	}
	pthread_mutex_unlock(&db->lock);
	return rc;
}

int db_preview_link_take(struct db *db, int64_t preview_id, const char *hash, int64_t now,
			 struct err *e)
{
	int rc;

	pthread_mutex_lock(&db->lock);
	rc = execute(db, e, "spend preview link", "DELETE FROM preview_keys WHERE hash = ? AND"
		     " preview_id = ? AND kind = 'link' AND expires >= ?", "sII", hash,
		     preview_id, now);
	if (rc == 0 && sqlite3_changes(db->h) == 0)
		rc = err_set(e, 404, "invalid_link", "unknown, used or expired link");
	pthread_mutex_unlock(&db->lock);
	return rc == 0 ? 0 : -1;
}

int db_preview_grant_ok(struct db *db, int64_t preview_id, int64_t key_id, int64_t now,
			bool *ok, struct err *e)
{
	sqlite3_stmt *st;
	int rc = -1;

	*ok = false;
	pthread_mutex_lock(&db->lock);
	st = key_id ? query(db, e, "SELECT 1 FROM preview_keys k JOIN previews p ON p.id ="
			    " k.preview_id JOIN machines m ON m.id = p.machine_id WHERE k.id = ? AND"
			    " k.preview_id = ? AND k.kind = 'cookie' AND k.expires >= ? AND"
			    " m.state = 'running'", "III", key_id, preview_id, now)
		    : query(db, e, "SELECT 1 FROM previews p JOIN machines m ON m.id = p.machine_id"
			    " WHERE p.id = ? AND p.public != 0 AND m.state = 'running'", "I",
			    preview_id);
	if (st) {
		switch (sqlite3_step(st)) {
		case SQLITE_ROW: *ok = true; rc = 0; break;
		case SQLITE_DONE: rc = 0; break;
		default: sql_err(db, e, "check a preview's grant");
		}
		sqlite3_finalize(st);
	}
	pthread_mutex_unlock(&db->lock);
	return rc;
}

int db_event_add(struct db *db, const struct db_event *ev, int keep, int64_t *id,
		 struct err *e)
{
	int rc;

	pthread_mutex_lock(&db->lock);
	rc = execute(db, e, "record an event",
		     "INSERT INTO events(t, owner, machine, kind, cause) VALUES(?,?,?,?,?)",
		     "Issss", ev->t, ev->owner, ev->machine, ev->kind, ev->cause);
	if (rc == 0 && id)
		*id = sqlite3_last_insert_rowid(db->h);
	/* An owner keeps its last KEEP events. */
	if (rc == 0)
		rc = execute(db, e, "trim the events",
			     "DELETE FROM events WHERE owner = ? AND id <= (SELECT id FROM"
			     " events WHERE owner = ? ORDER BY id DESC LIMIT 1 OFFSET ?)", "ssi",
			     ev->owner, ev->owner, keep);
	pthread_mutex_unlock(&db->lock);
	return rc == 0 ? 0 : -1;
}

static void event_from_row(sqlite3_stmt *st, void *out)
{
	struct db_event *ev = out;

	memset(ev, 0, sizeof(*ev));
	ev->id = sqlite3_column_int64(st, 0);
	ev->t = sqlite3_column_int64(st, 1);
	copy_text(st, 2, ev->owner, sizeof(ev->owner));
	copy_text(st, 3, ev->machine, sizeof(ev->machine));
	copy_text(st, 4, ev->kind, sizeof(ev->kind));
	copy_text(st, 5, ev->cause, sizeof(ev->cause));
}

int db_event_list(struct db *db, const char *owner, const char *machine, int64_t after,
		  bool forward, int limit, struct db_event **out, size_t *n, struct err *e)
{
	sqlite3_stmt *st;
	int rc = -1;

	*out = NULL;
	*n = 0;
	pthread_mutex_lock(&db->lock);
	/* The first LIMIT after AFTER (FORWARD), or the last; oldest first. */
	st = query(db, e, forward ?
		   "SELECT id, t, owner, machine, kind, cause FROM events"
		   " WHERE (? = '' OR owner = ?) AND (? = '' OR machine = ?) AND id > ?"
		   " ORDER BY id LIMIT ?" :
		   "SELECT * FROM (SELECT id, t, owner, machine, kind, cause FROM events"
		   " WHERE (? = '' OR owner = ?) AND (? = '' OR machine = ?) AND id > ?"
		   " ORDER BY id DESC LIMIT ?) ORDER BY id", "ssssIi", owner ? owner : "",
		   owner ? owner : "", machine ? machine : "", machine ? machine : "", after,
		   limit);
	if (st)
		rc = collect(db, st, sizeof(**out), event_from_row, (void **)out, n,
			     "list the events", e);
	pthread_mutex_unlock(&db->lock);
	return rc;
}

/* ---- a machine's attributes (hostd/attrs.h) ------------------------------ */

int db_attrs_get(struct db *db, const char *id, struct db_attrs *out, struct err *e)
{
	sqlite3_stmt *st;
	int rc = -1, step;

	memset(out, 0, sizeof(*out));
	snprintf(out->action, sizeof(out->action), "delete");
	pthread_mutex_lock(&db->lock);
	st = query(db, e, "SELECT expires, action, metadata, env FROM machine_attrs "
		   "WHERE machine_id = ?", "s", id);
	if (st) {
		step = sqlite3_step(st);
		if (step == SQLITE_ROW) {
			const unsigned char *m = sqlite3_column_text(st, 2);
			const unsigned char *v = sqlite3_column_text(st, 3);
			out->expires = sqlite3_column_int64(st, 0);
			copy_text(st, 1, out->action, sizeof(out->action));
			out->metadata = strdup(m ? (const char *)m : "{}");
			out->env = strdup(v ? (const char *)v : "{}");
			if (!out->metadata || !out->env)
				abort();
			rc = 0;
		} else if (step == SQLITE_DONE) {
			rc = 0;
		} else {
			sql_err(db, e, "read machine_attrs");
		}
	}
	sqlite3_finalize(st);
	pthread_mutex_unlock(&db->lock);
	return rc;
}

void db_attrs_free(struct db_attrs *a)
{
	free(a->metadata);
	free(a->env);
	a->metadata = a->env = NULL;
}

int db_attrs_set(struct db *db, const char *id, const struct db_attrs *a, struct err *e)
{
	return execute_locked(db, e, "write machine_attrs",
			      "INSERT INTO machine_attrs(machine_id, expires, action, metadata, env)"
			      " VALUES(?, ?, ?, ?, ?) ON CONFLICT(machine_id) DO UPDATE SET"
			      " expires = excluded.expires, action = excluded.action,"
			      " metadata = excluded.metadata, env = excluded.env", "sIsss", id,
			      a->expires, a->action, a->metadata ? a->metadata : "{}",
			      a->env ? a->env : "{}") == 0 ? 0 : -1;
}

int db_attrs_expired(struct db *db, int64_t now, char (**out)[37], size_t *n, struct err *e)
{
	sqlite3_stmt *st;
	size_t cap = 0;
	int step;

	*out = NULL;
	*n = 0;
	pthread_mutex_lock(&db->lock);
	st = query(db, e, "SELECT machine_id FROM machine_attrs WHERE expires > 0 AND "
		   "expires <= ? ORDER BY expires", "I", now);
	if (!st) {
		pthread_mutex_unlock(&db->lock);
		return -1;
	}
	while ((step = sqlite3_step(st)) == SQLITE_ROW) {
		if (*n == cap) {
			cap = cap ? cap * 2 : 8;
			*out = realloc(*out, cap * sizeof(**out));
			if (!*out)
				abort();
		}
		copy_text(st, 0, (*out)[*n], sizeof((*out)[*n]));
		(*n)++;
	}
	sqlite3_finalize(st);
	pthread_mutex_unlock(&db->lock);
	if (step != SQLITE_DONE) {
		free(*out);
		*out = NULL;
		*n = 0;
		return err_set(e, 500, "internal", "database: list deadlines");
	}
	return 0;
}
