/*
 * Unit tests of the bill's arithmetic (hostd/billing.c) against amounts
 * computed by hand: a plain interval, one across a price change, a fork
 * mid-interval, storage that grows between samples, a machine deleted
 * mid-minute, and the absence of rounding per interval.  Prices are in
 * nano-units of currency.
 *
 * Built by the Makefile as build/default/tests/test_billing.
 */
#include "hostd/billing.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tests/unit/tap.h"
#include "common/banned.h"

#define GIB (1ULL << 30)

static void eq(uint64_t got, uint64_t want, const char *what)
{
	if (!check(got == want, "%s", what))
		diag("got %llu, want %llu", (unsigned long long)got, (unsigned long long)want);
}

/* 0.036 per vCPU-hour is 10,000 nano per second; 0.0036 per GiB-hour of
 * memory is 1,000 nano per GiB-second; 0.73 per GiB-month (730 h) is
 * 1,000,000 nano per GiB-hour. */
static const struct price base = { 0, 36000000, 3600000, 730000000 };

static void test_plain(void)
{
	struct bill m = { 0 };
	struct bill_interval i = { 1000, 1100, true, 1, GIB };

	bill_add_interval(&m, &i, &base, 1);
	eq(bill_compute_nano(&m), 100 * (10000 + 1000), "1 vCPU, 1 GiB, 100 s");
	eq(m.running_s, 100, "100 running seconds");

	struct bill m2 = { 0 };
	struct bill_interval j = { 0, 10, true, 4, 512ull << 20 };
	bill_add_interval(&m2, &j, &base, 1);
	eq(bill_compute_nano(&m2), 10 * (4 * 10000 + 500), "4 vCPUs, 512 MiB, 10 s");

	struct bill m3 = { 0 };
	struct bill_interval stopped = { 0, 1000, false, 4, GIB };
	bill_add_interval(&m3, &stopped, &base, 1);
	eq(bill_compute_nano(&m3), 0, "a stopped or suspended interval costs no compute");
	eq(m3.running_s, 0, "and counts no running seconds");
}

static void test_price_change(void)
{
	/* The vCPU price doubles at second 100; memory is free. */
	struct price p[2] = { { 0, 36000000, 0, 0 }, { 100, 72000000, 0, 0 } };
	struct bill m = { 0 };
	struct bill_interval i = { 0, 200, true, 1, GIB };

	bill_add_interval(&m, &i, p, 2);
	eq(bill_compute_nano(&m), 100 * 10000 + 100 * 20000,
	   "an interval across a price change: each part at its price");

	struct bill before = { 0 }, after = { 0 };
	struct bill_interval b = { 0, 100, true, 1, GIB }, a = { 100, 200, true, 1, GIB };
	bill_add_interval(&before, &b, p, 2);
	bill_add_interval(&after, &a, p, 2);
	bill_merge(&before, &after);
	eq(bill_total_nano(&before), bill_total_nano(&m),
	   "split at the change or not: the same total");

	/* A price from later on applies to nothing before it. */
	struct price q[2] = { { 0, 36000000, 0, 0 }, { 1000, 0, 0, 0 } };
	struct bill m2 = { 0 };
	struct bill_interval k = { 990, 1010, true, 1, 0 };
	bill_add_interval(&m2, &k, q, 2);
	eq(bill_compute_nano(&m2), 10 * 10000, "free from second 1000 on");
}

static void test_fork(void)
{
	/* Parent: 2 vCPUs over [0, 100).  At 50 it forks a child of 1 vCPU
	 * that runs until 100.  Each pays for its own seconds. */
	struct bill parent = { 0 }, child = { 0 }, user = { 0 };
	struct price p = { 0, 36000000, 0, 0 };
	struct bill_interval pi = { 0, 100, true, 2, 0 }, ci = { 50, 100, true, 1, 0 };

	bill_add_interval(&parent, &pi, &p, 1);
	bill_add_interval(&child, &ci, &p, 1);
	eq(bill_compute_nano(&parent), 100 * 2 * 10000, "the parent of a fork: its own 100 s");
	eq(bill_compute_nano(&child), 50 * 10000, "the fork: from the fork on");
	bill_merge(&user, &parent);
	bill_merge(&user, &child);
	eq(bill_total_nano(&user), 2500000, "the user's total is the sum");
}

static void test_storage(void)
{
	struct bill m = { 0 };
	/* 1 GiB for 60 s, then 2 GiB for 60 s: 180 GiB-s at 1,000,000
	 * nano per GiB-hour is 50,000 nano. */
	struct bill_sample s[2] = { { 0, GIB }, { 60, 2 * GIB } };

	bill_add_storage(&m, s, 2, 120, &base, 1);
	eq(bill_storage_nano(&m), 50000, "storage growing between samples");
	eq((uint64_t)(m.storage_bs / GIB), 180, "180 GiB-seconds");

	/* Deleted at 90, mid-minute: billed until 90, not until a next
	 * sample; a sample after the end counts nothing. */
	struct bill d = { 0 };
	struct bill_sample t[3] = { { 0, GIB }, { 60, GIB }, { 120, 5 * GIB } };
	bill_add_storage(&d, t, 3, 90, &base, 1);
	eq(bill_storage_nano(&d), 25000, "a machine deleted mid-minute: 90 GiB-s");

	/* Suspended or stopped machines pay storage only. */
	struct bill sus = { 0 };
	struct bill_interval i = { 0, 3600, false, 2, GIB };
	struct bill_sample u[1] = { { 0, GIB } };
	bill_add_interval(&sus, &i, &base, 1);
	bill_add_storage(&sus, u, 1, 3600, &base, 1);
	eq(bill_total_nano(&sus), 1000000, "an hour suspended: 1 GiB-hour of storage only");

	/* Storage across a price change. */
	struct price p[2] = { { 0, 0, 0, 730000000 }, { 30, 0, 0, 2 * 730000000ull } };
	struct bill c = { 0 };
	struct bill_sample v[1] = { { 0, 36 * GIB } };
	bill_add_storage(&c, v, 1, 60, p, 2);
	/* 36 GiB × 30 s = 1080 GiB-s = 0.3 GiB-h at 1e6, then at 2e6. */
	eq(bill_storage_nano(&c), 300000 + 600000, "storage across a price change");
}

static void test_exactness(void)
{
	/* A price of 1 nano per vCPU-hour: one second costs 1/3600 nano.
	 * 3600 one-second intervals cost exactly 1: nothing is rounded per
	 * interval. */
	struct price p = { 0, 1, 0, 0 };
	struct bill m = { 0 };

	for (int s = 0; s < 3600; s++) {
		struct bill_interval i = { s, s + 1, true, 1, 0 };
		bill_add_interval(&m, &i, &p, 1);
	}
	eq(bill_compute_nano(&m), 1, "3600 one-second intervals at 1/3600 each make 1");

	/* The total is rounded once, not per part: 2/3 + 2/3 of a nano
	 * (compute, storage) make 1, where each alone rounds to 0. */
	struct price q = { 0, 2400, 0, 2400ull * 730 };
	struct bill t = { 0 };
	struct bill_interval i = { 0, 1, true, 1, 0 };
	struct bill_sample smp[1] = { { 0, GIB } };
	bill_add_interval(&t, &i, &q, 1);
	bill_add_storage(&t, smp, 1, 1, &q, 1);
	eq(bill_compute_nano(&t), 0, "2/3 nano of compute rounds down alone");
	eq(bill_storage_nano(&t), 0, "2/3 nano of storage rounds down alone");
	eq(bill_total_nano(&t), 1, "together they make 1 (4/3, rounded once)");

	/* A year of a big machine does not overflow. */
	struct price big = { 0, 1000000000ull * 10, 1000000000ull, 1000000000ull * 100 };
	struct bill y = { 0 };
	struct bill_interval yi = { 0, 365 * 86400, true, 64, 512 * GIB };
	struct bill_sample ys[1] = { { 0, 16384 * GIB } };
	bill_add_interval(&y, &yi, &big, 1);
	bill_add_storage(&y, ys, 1, 365 * 86400, &big, 1);
	eq(bill_compute_nano(&y), 8760ull * (640 + 512) * 1000000000ull,
	   "a year of 64 vCPUs and 512 GiB at 10 and 1 per hour");
	eq(bill_storage_nano(&y), 16384ull * 100 * 1000000000ull * 8760 / 730,
	   "a year of 16 TiB at 100 per GiB-month (12 months of 730 h)");
}

static void test_prices(void)
{
	struct err e = { 0 };
	uint64_t v = 0;
	char buf[64];

	check(price_parse("0.02", "x", &v, &e) == 0 && v == 20000000, "0.02 is 20,000,000 nano");
	check(price_parse("1", "x", &v, &e) == 0 && v == 1000000000, "1 is 1e9 nano");
	check(price_parse("0.000000001", "x", &v, &e) == 0 && v == 1, "nine decimals");
	check(price_parse("12.5", "x", &v, &e) == 0 && v == 12500000000ull, "12.5");
	const char *bad[] = { "", "-1", "1e3", ".5", "5.", "abc", "0.0000000001", "1,5",
			      " 1", "1 ", "10000000000", NULL };
	for (int i = 0; bad[i]; i++) {
		struct err be = { 0 };
		if (!check(price_parse(bad[i], "price_vcpu_hour", &v, &be) < 0 &&
			   strstr(be.msg, "price_vcpu_hour") && be.status == 400,
			   "'%s' is refused, naming the setting", bad[i]))
			diag("%s", be.msg);
	}
	price_format(20000000, buf, sizeof(buf));
	check(strcmp(buf, "0.020000000") == 0, "format 0.02");
	price_format(12500000001ull, buf, sizeof(buf));
	check(strcmp(buf, "12.500000001") == 0, "format 12.500000001");
}

/* When a running machine stopped while hostd was down. */
static void test_stop_time(void)
{
	/* since 1000, hostd's last heartbeat 1500, now 9000 */
	eq(bill_stop_time(1000, 1500, 1600, 5000, 9000), 1500,
	   "the host booted after the heartbeat: the heartbeat (power cut)");
	eq(bill_stop_time(1000, 1500, 100, 1503, 9000), 1503,
	   "no reboot: libvirt's log of the domain says when QEMU ended");
	eq(bill_stop_time(1000, 1500, 100, 0, 9000), 9000,
	   "nothing known: now (as before)");
	eq(bill_stop_time(1000, 1500, 100, 900, 9000), 9000,
	   "a log older than the interval is not its end");
	eq(bill_stop_time(1000, 0, 1600, 1503, 9000), 1503,
	   "no heartbeat yet (an older hostd): the log");
	eq(bill_stop_time(1000, 800, 1600, 0, 9000), 1000,
	   "never before the interval began");
	eq(bill_stop_time(1000, 1500, 100, 9500, 9000), 9000,
	   "a log from the future (clock change) is not trusted");
}

int main(void)
{
	test_plain();
	test_price_change();
	test_fork();
	test_storage();
	test_exactness();
	test_prices();
	test_stop_time();
	return tap_done("test_billing");
}
