#include "hostd/usage.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "common/util.h"
#include "hostd/billing.h"
#include "common/banned.h"

#define SAMPLE_EVERY_S 60

int usage_prices_sync(struct hostd *h, struct err *e)
{
	struct db_price want = { 0 }, *have = NULL;
	size_t n = 0;
	int rc = -1;

	if (price_parse(h->cfg.price_vcpu_hour, "price_vcpu_hour", &want.p.vcpu_hour, e) < 0 ||
	    price_parse(h->cfg.price_memory_gib_hour, "price_memory_gib_hour",
			&want.p.memory_gib_hour, e) < 0 ||
	    price_parse(h->cfg.price_storage_gib_month, "price_storage_gib_month",
			&want.p.storage_gib_month, e) < 0)
		return -1;
	snprintf(want.currency, sizeof(want.currency), "%s", h->cfg.currency);
	if (db_prices(h->db, &have, &n, e) < 0)
		return -1;
	if (n && have[n - 1].p.vcpu_hour == want.p.vcpu_hour &&
	    have[n - 1].p.memory_gib_hour == want.p.memory_gib_hour &&
	    have[n - 1].p.storage_gib_month == want.p.storage_gib_month &&
	    strcmp(have[n - 1].currency, want.currency) == 0) {
		rc = 0;
		goto out;
	}
	/* The first price list applies to everything before it too. */
	want.p.from = n ? now_s() : 0;
	if (db_price_insert(h->db, &want, e) < 0)
		goto out;
	char v[32], m[32], s[32];
	price_format(want.p.vcpu_hour, v, sizeof(v));
	price_format(want.p.memory_gib_hour, m, sizeof(m));
	price_format(want.p.storage_gib_month, s, sizeof(s));
	log_info("prices %s: %s %s per vCPU-hour, %s per GiB-hour of memory, %s per GiB-month "
		 "of storage", n ? "changed from now on" : "recorded", want.currency, v, m, s);
	rc = 0;
out:
	free(have);
	return rc;
}

static json_t *money(uint64_t nano)
{
	char s[40];

	price_format(nano, s, sizeof(s));
	return json_string(s);
}

/* One machine's bill over [SINCE, NOW) from its ledger rows R[0..N) and
 * its storage samples S[0..NS) (by time; changed and restored here);
 * *LAST (may be NULL) gets the bytes of its latest storage sample. */
static void bill_of(const struct db_usage_row *r, size_t n, int64_t since, int64_t now,
		     const struct price *p, size_t np, struct bill_sample *s, size_t ns,
		     struct bill *m, uint64_t *last)
{
	size_t k = 0;
	int64_t end = r[n - 1].end ? r[n - 1].end : now, saved;

	for (size_t i = 0; i < n; i++) {
		struct bill_interval iv = {
			.start = r[i].start < since ? since : r[i].start,
			.end = r[i].end ? r[i].end : now,
			.running = mstate_holds_cpu(r[i].state),
			.vcpus = r[i].vcpus, .memory = r[i].memory,
		};
		bill_add_interval(m, &iv, p, np);
	}
	if (!ns)
		return;
	if (last)
		*last = s[ns - 1].bytes;
	/* From SINCE on: the last sample before it holds from SINCE. */
	while (k + 1 < ns && s[k + 1].t <= since)
		k++;
	saved = s[k].t;
	if (s[k].t < since)
		s[k].t = since;
	bill_add_storage(m, s + k, ns - k, end, p, np);
	s[k].t = saved;
}

/* The same, reading the machine's samples from the database. */
static void machine_bill(struct hostd *h, const struct db_usage_row *r, size_t n,
			  int64_t since, int64_t now, const struct price *p, size_t np,
			  struct bill *m, uint64_t *last)
{
	struct bill_sample *s = NULL;
	size_t ns = 0;

	if (db_samples(h->db, r[0].machine_id, &s, &ns, NULL) < 0)
		ns = 0;
	bill_of(r, n, since, now, p, np, s, ns, m, last);
	free(s);
}

static int load_prices(struct hostd *h, struct price **p, size_t *np, char *currency,
		       size_t clen, struct err *e)
{
	struct db_price *dp = NULL;
	size_t n = 0;

	if (db_prices(h->db, &dp, &n, e) < 0)
		return -1;
	*p = calloc(n ? n : 1, sizeof(**p));
	if (!*p)
		abort();
	for (size_t i = 0; i < n; i++)
		(*p)[i] = dp[i].p;
	snprintf(currency, clen, "%s", n ? dp[n - 1].currency : h->cfg.currency);
	*np = n;
	free(dp);
	return 0;
}

/* The rate per hour, in nano-units, of a machine in STATE with VCPUS and
 * MEMORY allocating BYTES of storage: compute while running, storage
 * always. */
static uint64_t rate_nano(const struct price *pr, enum mstate state, int vcpus,
			  uint64_t memory, uint64_t bytes)
{
	unsigned __int128 per_hour = (unsigned __int128)pr->storage_gib_month * bytes / 730 /
				     (1ull << 30);

	if (mstate_holds_cpu(state))
		per_hour += (unsigned __int128)pr->vcpu_hour * (unsigned)vcpus +
			    (unsigned __int128)pr->memory_gib_hour * memory / (1ull << 30);
	return (uint64_t)per_hour;
}

/* The cost of machine rows R[0..N) with samples S[0..NS) in each of NB
 * buckets of STEP seconds from SINCE (the last one ends at NOW), into
 * OUT[0..NB), each rounded down once. */
static void machine_series(const struct db_usage_row *r, size_t n, struct bill_sample *s,
			   size_t ns, int64_t since, int64_t now, int64_t step,
			   const struct price *p, size_t np, uint64_t *out, size_t nb)
{
	int64_t life_end = r[n - 1].end ? r[n - 1].end : now;

	for (size_t b = 0; b < nb; b++) {
		int64_t b0 = since + (int64_t)b * step, b1 = b0 + step < now ? b0 + step : now;
		int64_t send = b1 < life_end ? b1 : life_end;
		struct bill m = { 0 };

		for (size_t i = 0; i < n; i++) {
			struct bill_interval iv = {
				.start = r[i].start < b0 ? b0 : r[i].start,
				.end = r[i].end && r[i].end < b1 ? r[i].end : b1,
				.running = mstate_holds_cpu(r[i].state),
				.vcpus = r[i].vcpus, .memory = r[i].memory,
			};
			bill_add_interval(&m, &iv, p, np);
		}
		if (ns && send > b0) {
			/* The last sample at or before B0 holds from B0. */
			size_t k = 0;
			while (k + 1 < ns && s[k + 1].t <= b0)
				k++;
			int64_t saved = s[k].t;
			if (s[k].t < b0)
				s[k].t = b0;
			bill_add_storage(&m, s + k, ns - k, send, p, np);
			s[k].t = saved;
		}
		out[b] = bill_total_nano(&m);
	}
}

static int id_cmp(const void *a, const void *b)
{
	return strcmp(a, b);
}

static json_t *series_json(const uint64_t *v, size_t n)
{
	json_t *a = json_array();

	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, json_integer((json_int_t)v[i]));
	return a;
}

struct user_bill {
	char owner[64];
	struct bill m;
};

static json_t *bill_json(const struct bill *m)
{
	return json_pack("{s:I, s:I, s:o, s:o, s:o, s:I}",
			 "running_s", (json_int_t)m->running_s,
			 "storage_gib_s", (json_int_t)(m->storage_bs >> 30),
			 "compute", money(bill_compute_nano(m)),
			 "storage", money(bill_storage_nano(m)),
			 "total", money(bill_total_nano(m)),
			 "total_nano", (json_int_t)bill_total_nano(m));
}

json_t *usage_json(struct hostd *h, const char *owner, int64_t since, int64_t now,
		   struct err *e)
{
	return usage_json_series(h, owner, since, now, 0, e);
}

json_t *usage_json_series(struct hostd *h, const char *owner, int64_t since, int64_t now,
			  int64_t step, struct err *e)
{
	size_t nb = step > 0 && now > since ? (size_t)((now - since + step - 1) / step) : 0;
	uint64_t *bucket = calloc(nb ? nb : 1, sizeof(*bucket));
	uint64_t *total_series = calloc(nb ? nb : 1, sizeof(*total_series));
	/* Every machine's samples and which machines exist, in one query each
	 * (not two per machine). */
	struct db_sample_row *sr = NULL;
	struct bill_sample *ss = NULL;
	char (*ids)[37] = NULL;
	size_t nsr = 0, nids = 0, cur = 0;
	struct db_usage_row *r = NULL;
	struct price *p = NULL;
	struct user_bill *um = NULL;
	size_t n = 0, np = 0, nu = 0;
	char currency[16];
	json_t *machines = json_array(), *users = json_array(), *out = NULL;
	struct bill total = { 0 };

	if (!bucket || !total_series)
		abort();
	if (load_prices(h, &p, &np, currency, sizeof(currency), e) < 0 ||
	    db_usage_rows(h->db, owner, NULL, since, &r, &n, e) < 0 ||
	    db_samples_all(h->db, owner, &sr, &nsr, e) < 0 ||
	    db_machine_ids(h->db, owner, &ids, &nids, e) < 0)
		goto out;
	ss = calloc(nsr ? nsr : 1, sizeof(*ss));
	if (!ss)
		abort();
	for (size_t k = 0; k < nsr; k++)
		ss[k] = sr[k].s;
	/* Rows come by machine; a user's machines need not be adjacent. */
	um = calloc(n ? n : 1, sizeof(*um));
	if (!um)
		abort();
	for (size_t i = 0; i < n;) {
		size_t j = i, u;
		while (j < n && !strcmp(r[j].machine_id, r[i].machine_id))
			j++;
		struct bill m = { 0 };
		const struct db_usage_row *last = &r[j - 1];
		uint64_t bytes = 0, rate = 0;
		/* Its samples: both lists are sorted by machine id. */
		while (cur < nsr && strcmp(sr[cur].machine_id, r[i].machine_id) < 0)
			cur++;
		size_t s0 = cur;
		while (cur < nsr && !strcmp(sr[cur].machine_id, r[i].machine_id))
			cur++;
		bill_of(r + i, j - i, since, now, p, np, ss + s0, cur - s0, &m, &bytes);
		json_t *mj = bill_json(&m);
		/* Its rate now (the dashboard's live counter): 0 once deleted. */
		if (!last->end && np)
			rate = rate_nano(&p[np - 1], last->state, last->vcpus, last->memory, bytes);
		json_object_set_new(mj, "state", json_string(last->end ? "deleted" : mstate_name(last->state)));
		json_object_set_new(mj, "per_hour", money(rate));
		json_object_set_new(mj, "per_hour_nano", json_integer((json_int_t)rate));
		if (step > 0) {
			machine_series(r + i, j - i, ss + s0, cur - s0, since, now, step, p, np,
				       bucket, nb);
			for (size_t b = 0; b < nb; b++)
				total_series[b] += bucket[b];
			json_object_set_new(mj, "series", series_json(bucket, nb));
		}
		json_object_set_new(mj, "machine_id", json_string(last->machine_id));
		json_object_set_new(mj, "owner", json_string(last->owner));
		json_object_set_new(mj, "name", json_string(last->name));
		json_object_set_new(mj, "deleted", json_boolean(
			!bsearch(last->machine_id, ids, nids, sizeof(*ids), id_cmp)));
		json_array_append_new(machines, mj);
		/* Per user: the exact sums, rounded once. */
		for (u = 0; u < nu && strcmp(um[u].owner, last->owner); u++)
			;
		if (u == nu)
			snprintf(um[nu++].owner, sizeof(um->owner), "%s", last->owner);
		bill_merge(&um[u].m, &m);
		bill_merge(&total, &m);
		i = j;
	}
	for (size_t u = 0; u < nu; u++) {
		json_t *uj = bill_json(&um[u].m);
		json_object_set_new(uj, "owner", json_string(um[u].owner));
		json_array_append_new(users, uj);
	}
	out = json_pack("{s:s, s:I, s:I, s:O, s:O, s:o, s:I}", "currency", currency,
			"since", (json_int_t)since, "until", (json_int_t)now,
			"machines", machines, "users", users,
			"total", money(bill_total_nano(&total)),
			"total_nano", (json_int_t)bill_total_nano(&total));
	if (step > 0) {
		json_object_set_new(out, "step", json_integer(step));
		json_object_set_new(out, "series", series_json(total_series, nb));
	}
out:
	free(bucket);
	free(total_series);
	free(sr);
	free(ss);
	free(ids);
	json_decref(machines);
	json_decref(users);
	free(um);
	free(r);
	free(p);
	return out;
}

void usage_machine(struct hostd *h, const struct machine *m, json_t *j)
{
	struct db_usage_row *r = NULL;
	struct price *p = NULL;
	size_t n = 0, np = 0;
	char currency[16];
	struct bill mt = { 0 };
	uint64_t bytes = 0, ex, sh;

	/* Its allocation split into what it holds alone and what it shares
	 * (with its image, checkpoints and forks), read live. */
	if (storage_vol_usage(h->st, m->volume, &ex, &sh, NULL) == 0)
		json_object_set_new(j, "usage", json_pack("{s:I, s:I}", "exclusive", (json_int_t)ex,
							  "shared", (json_int_t)sh));
	if (load_prices(h, &p, &np, currency, sizeof(currency), NULL) < 0 || np == 0 ||
	    db_usage_rows(h->db, m->owner, m->id, 0, &r, &n, NULL) < 0)
		goto out;
	if (n)
		machine_bill(h, r, n, 0, now_s(), p, np, &mt, &bytes);
	/* The current rate, per hour: compute while running, storage always. */
	uint64_t per_hour = rate_nano(&p[np - 1], m->state, m->vcpus, m->memory, bytes);
	json_object_set_new(j, "cost", json_pack("{s:s, s:o, s:I, s:o, s:I}",
						 "currency", currency,
						 "total", money(bill_total_nano(&mt)),
						 "total_nano", (json_int_t)bill_total_nano(&mt),
						 "per_hour", money(per_hour),
						 "per_hour_nano", (json_int_t)per_hour));
out:
	free(r);
	free(p);
}
