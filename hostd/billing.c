#include "hostd/billing.h"

#include <stdio.h>
#include <string.h>

#include "common/banned.h"

#define HOUR 3600u
#define MONTH_S (730u * 3600u)      /* a 730-hour month, as cloud price lists use */
#define GIB (1ull << 30)

/* The price in force at second T: the last whose `from` is <= T (the
 * first one before any). */
static size_t price_at(const struct price *p, size_t n, int64_t t)
{
	size_t k = 0;

	for (size_t i = 1; i < n; i++)
		if (p[i].from <= t)
			k = i;
	return k;
}

/* Call FN for each piece of [A, B) under one price. */
static void split(int64_t a, int64_t b, const struct price *p, size_t n,
		  void (*fn)(int64_t secs, const struct price *pr, void *data), void *data)
{
	while (a < b) {
		size_t k = price_at(p, n, a);
		int64_t end = b;
		if (k + 1 < n && p[k + 1].from < end)
			end = p[k + 1].from;
		fn(end - a, &p[k], data);
		a = end;
	}
}

struct icx {
	struct bill *m;
	const struct bill_interval *i;
};

static void add_compute(int64_t secs, const struct price *pr, void *data)
{
	struct icx *c = data;
	unsigned __int128 s = (unsigned __int128)secs;

	c->m->compute += (unsigned __int128)pr->vcpu_hour * (unsigned)c->i->vcpus * GIB * s +
			 (unsigned __int128)pr->memory_gib_hour * c->i->memory * s;
	c->m->running_s += (uint64_t)secs;
}

void bill_add_interval(struct bill *m, const struct bill_interval *i,
			const struct price *prices, size_t n)
{
	struct icx c = { m, i };

	if (!i->running || i->end <= i->start || n == 0 || i->vcpus <= 0)
		return;
	split(i->start, i->end, prices, n, add_compute, &c);
}

struct scx {
	struct bill *m;
	uint64_t bytes;
};

static void add_storage(int64_t secs, const struct price *pr, void *data)
{
	struct scx *c = data;
	unsigned __int128 bs = (unsigned __int128)c->bytes * (uint64_t)secs;

	c->m->storage += (unsigned __int128)pr->storage_gib_month * bs;
	c->m->storage_bs += bs;
}

void bill_add_storage(struct bill *m, const struct bill_sample *s, size_t n_s,
		       int64_t end, const struct price *prices, size_t n)
{
	if (n == 0)
		return;
	for (size_t i = 0; i < n_s; i++) {
		int64_t a = s[i].t, b = i + 1 < n_s ? s[i + 1].t : end;
		struct scx c = { m, s[i].bytes };
		if (b > end)
			b = end;
		if (b > a)
			split(a, b, prices, n, add_storage, &c);
	}
}

uint64_t bill_compute_nano(const struct bill *m)
{
	return (uint64_t)(m->compute / ((unsigned __int128)HOUR * GIB));
}

uint64_t bill_storage_nano(const struct bill *m)
{
	return (uint64_t)(m->storage / ((unsigned __int128)MONTH_S * GIB));
}

/* The sum of the exact amounts, rounded down once: the two parts over one
 * denominator (MONTH_S is 730 hours). */
uint64_t bill_total_nano(const struct bill *m)
{
	unsigned __int128 num = m->compute * 730u + m->storage;

	return (uint64_t)(num / ((unsigned __int128)MONTH_S * GIB));
}

void bill_merge(struct bill *m, const struct bill *m2)
{
	m->compute += m2->compute;
	m->storage += m2->storage;
	m->running_s += m2->running_s;
	m->storage_bs += m2->storage_bs;
}

int price_parse(const char *s, const char *what, uint64_t *nano, struct err *e)
{
	uint64_t whole = 0, frac = 0;
	int digits = 0;
	const char *p = s;

	if (!*p || *p == '.')
		goto bad;
	for (; *p >= '0' && *p <= '9'; p++) {
		whole = whole * 10 + (uint64_t)(*p - '0');
		if (whole > 1000000000ull)
			goto bad;
	}
	if (*p == '.') {
		p++;
		if (!(*p >= '0' && *p <= '9'))
			goto bad;
		for (; *p >= '0' && *p <= '9'; p++) {
			if (++digits > 9)
				goto bad;
			frac = frac * 10 + (uint64_t)(*p - '0');
		}
	}
	if (*p)
		goto bad;
	for (; digits < 9; digits++)
		frac *= 10;
	*nano = whole * 1000000000ull + frac;
	return 0;
bad:
	return err_set(e, 400, "invalid_price",
		       "%s: '%s' is not a price (a decimal like 0.02, at most 9 decimals, "
		       "at most 1000000000)", what, s);
}

void price_format(uint64_t nano, char *out, size_t outlen)
{
	snprintf(out, outlen, "%llu.%09llu", (unsigned long long)(nano / 1000000000ull),
		 (unsigned long long)(nano % 1000000000ull));
}

int64_t bill_stop_time(int64_t since, int64_t alive, int64_t boot, int64_t log_mtime,
			int64_t now)
{
	int64_t t = now;

	if (alive > 0 && boot > alive)
		t = alive;
	else if (log_mtime > 0 && log_mtime >= since && log_mtime <= now)
		t = log_mtime;
	if (t < since)
		t = since;
	if (t > now)
		t = now;
	return t;
}
