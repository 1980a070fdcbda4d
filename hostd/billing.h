/* The arithmetic of the bill, per second: what a machine's life costs,
 * from its ledger (state intervals), its storage samples and the price
 * history, in exact integer arithmetic.
 *
 * Money is counted in nano-units of the configured currency (1e-9 USD, say):
 * prices are given per hour (compute) and per 730-hour month (storage), so
 * a second's share is rarely a whole number of nano-units.  A bill sums
 * exact numerators (price × quantity × seconds, in 128-bit integers) over a
 * common denominator and divides once at the end: no rounding per second,
 * no floating point, and the total of a machine's life does not depend on
 * how its intervals were split.  Pure functions: no database, no clock. */
#ifndef BERTH_BILLING_H
#define BERTH_BILLING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

/* Nano-units of currency per unit of the price's own span. */
struct price {
	int64_t from;               /* in force from this second (epoch) on */
	uint64_t vcpu_hour;         /* per vCPU-hour while running */
	uint64_t memory_gib_hour;   /* per GiB-hour of memory while running */
	uint64_t storage_gib_month; /* per GiB-month (730 h) of allocated storage */
};

/* One ledger interval [start, end): RUNNING means billed for compute
 * (running or paused: the vCPUs and memory are held). */
struct bill_interval {
	int64_t start, end;
	bool running;
	int vcpus;
	uint64_t memory;            /* bytes */
};

/* The machine's storage allocation: BYTES from T until the next sample. */
struct bill_sample {
	int64_t t;
	uint64_t bytes;
};

struct bill {
	unsigned __int128 compute;  /* Σ price × (vCPUs·2^30 + memory bytes) × s */
	unsigned __int128 storage;  /* Σ price × bytes × s */
	uint64_t running_s;         /* seconds billed for compute */
	unsigned __int128 storage_bs; /* byte-seconds of storage */
};

/* Add the compute of interval I under PRICES (N of them, sorted by
 * `from`; the first applies before its `from` too). */
void bill_add_interval(struct bill *m, const struct bill_interval *i,
			const struct price *prices, size_t n);
/* Add storage: SAMPLES (N_S, sorted by t) from the first sample until END
 * (the machine's deletion, or now), under PRICES. */
void bill_add_storage(struct bill *m, const struct bill_sample *samples, size_t n_s,
		       int64_t end, const struct price *prices, size_t n);
/* When a machine that the ledger has running stopped while hostd was not
 * looking, for closing its running interval (all seconds since the epoch;
 * 0 = unknown):
 *  - the host booted (BOOT) after hostd's last heartbeat (ALIVE, written
 *    every second): the power went, or the kernel, between the two; the
 *    heartbeat is the last second known to have run: at most 1 s lost;
 *  - else libvirt's log of the domain was last written (LOG_MTIME, its
 *    "shutting down" line) after the interval began (SINCE): then;
 *  - else NOW.
 * Never before SINCE nor after NOW. */
int64_t bill_stop_time(int64_t since, int64_t alive, int64_t boot, int64_t log_mtime,
			int64_t now);
/* Totals in nano-units, each rounded down once. */
uint64_t bill_compute_nano(const struct bill *m);
uint64_t bill_storage_nano(const struct bill *m);
uint64_t bill_total_nano(const struct bill *m);
/* M2's sums into M. */
void bill_merge(struct bill *m, const struct bill *m2);

/* "0.02" (currency units) into nano-units: up to 9 decimals, no sign, no
 * exponent.  400 "invalid_price" naming WHAT otherwise. */
int price_parse(const char *s, const char *what, uint64_t *nano, struct err *e);
/* NANO as a decimal string with 9 decimals ("0.020000000"). */
void price_format(uint64_t nano, char *out, size_t outlen);

#endif
