/*
 * Ledger writes per second, sustained: state changes of machines through
 * hostd's own database code (db_machine_set_state: one transaction that
 * updates the machine, closes its open ledger row and opens the next, WAL
 * with synchronous=FULL), against the floor of the same disk measured in
 * the same run: one bare INSERT per durable commit on a database with the
 * same settings.  Rounds alternate the two.
 *
 * Usage: ledger_bench DIR [SECONDS_PER_ROUND] [ROUNDS] [MACHINES]
 * Built by the Makefile as build/default/bench/ledger_bench; bench/run
 * ledger runs it.
 */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/err.h"
#include "common/log.h"
#include "common/util.h"
#include "hostd/db.h"
#include "common/banned.h"

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* State changes per second over SECONDS, round-robin over N machines. */
static double berth_round(struct db *db, int n, double seconds)
{
	static const enum mstate states[] = { MS_RUNNING, MS_SUSPENDED, MS_RUNNING, MS_STOPPED };
	struct err e = { 0 };
	int64_t t0 = mono_ms(), writes = 0;
	char id[40];

	while (mono_ms() - t0 < (int64_t)(seconds * 1000)) {
		snprintf(id, sizeof(id), "00000000-0000-4000-8000-%012d", (int)(writes % n));
		if (db_machine_set_state(db, id, states[(writes / n) % 4], &e) < 0) {
			fprintf(stderr, "ledger_bench: %s\n", e.msg);
			exit(1);
		}
		writes++;
	}
	return (double)writes * 1000.0 / (double)(mono_ms() - t0);
}

/* Bare durable commits per second over SECONDS. */
static double floor_round(sqlite3 *h, double seconds)
{
	sqlite3_stmt *st;
	int64_t t0 = mono_ms(), writes = 0;

	if (sqlite3_prepare_v2(h, "INSERT INTO t(v) VALUES(?)", -1, &st, NULL) != SQLITE_OK)
		exit(1);
	while (mono_ms() - t0 < (int64_t)(seconds * 1000)) {
		sqlite3_bind_int64(st, 1, writes);
		if (sqlite3_step(st) != SQLITE_DONE)
			exit(1);
		sqlite3_reset(st);
		writes++;
	}
	sqlite3_finalize(st);
	return (double)writes * 1000.0 / (double)(mono_ms() - t0);
}

int main(int argc, char **argv)
{
	char path[4096], floor_path[4096];
	double secs = argc > 2 ? atof(argv[2]) : 3.0;
	int rounds = argc > 3 ? atoi(argv[3]) : 5, n = argc > 4 ? atoi(argv[4]) : 100;
	double b[64], f[64];
	struct err e = { 0 };
	struct db *db;
	sqlite3 *h;

	if (argc < 2 || rounds < 1 || rounds > 64 || n < 1 || secs <= 0) {
		fprintf(stderr, "usage: ledger_bench DIR [SECONDS_PER_ROUND] [ROUNDS] [MACHINES]\n");
		return 2;
	}
	log_threshold = LOG_ERROR;
	snprintf(path, sizeof(path), "%s/berth.db", argv[1]);
	snprintf(floor_path, sizeof(floor_path), "%s/floor.db", argv[1]);
	db = db_open(path, &e);
	if (!db) {
		fprintf(stderr, "ledger_bench: %s\n", e.msg);
		return 1;
	}
	for (int i = 0; i < n; i++) {
		struct machine m = { .vcpus = 1, .memory = 512ULL << 20, .disk = 1ULL << 30 };
		snprintf(m.id, sizeof(m.id), "00000000-0000-4000-8000-%012d", i);
		snprintf(m.owner, sizeof(m.owner), "bench");
		snprintf(m.name, sizeof(m.name), "m%d", i);
		snprintf(m.image, sizeof(m.image), "tiny");
		snprintf(m.volume, sizeof(m.volume), "m-%s", m.id);
		snprintf(m.mac, sizeof(m.mac), "52:54:00:00:00:00");
		if (db_machine_insert(db, &m, NULL, &e) < 0) {
			fprintf(stderr, "ledger_bench: %s\n", e.msg);
			return 1;
		}
	}
	if (sqlite3_open(floor_path, &h) != SQLITE_OK ||
	    sqlite3_exec(h, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
		         "CREATE TABLE t(id INTEGER PRIMARY KEY, v INTEGER);",
			 NULL, NULL, NULL) != SQLITE_OK) {
		fprintf(stderr, "ledger_bench: cannot make %s\n", floor_path);
		return 1;
	}
	for (int r = 0; r < rounds; r++) {
		b[r] = berth_round(db, n, secs);
		f[r] = floor_round(h, secs);
		printf("round %d: berth %.0f state changes/s, bare commits %.0f/s\n", r + 1, b[r],
		       f[r]);
		fflush(stdout);
	}
	double mb = median(b, rounds), mf = median(f, rounds);
	printf("ledger: %.0f state changes/s sustained (each a durable transaction: machine row,"
	       " ledger close + open), %d machines\n", mb, n);
	printf("baseline: %.0f bare durable commits/s on the same disk\n", mf);
	printf("ratio berth / baseline: %.2f\n", mb / mf);
	sqlite3_close(h);
	db_close(db);
	return 0;
}
