#include "hostd/prometheus.h"

#include <jansson.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "hostd/usage.h"
#include "common/banned.h"

/* Upper bounds of the wake histogram's buckets, in ms. */
static const int64_t wake_le[] = { 500, 1000, 2000, 5000, 10000, 30000, 60000, 120000 };
#define NWAKE (sizeof(wake_le) / sizeof(wake_le[0]))

static _Atomic uint64_t wake_bucket[NWAKE + 1]; /* the last: +Inf */
static _Atomic uint64_t wake_count, wake_sum_ms;
/* Answers by status 100..599. */
static _Atomic uint64_t api_status[600];
static _Atomic uint64_t idle_suspends;

void prom_idle_suspend(void)
{
	idle_suspends++;
}

void prom_api(int status)
{
	if (status >= 100 && status < 600)
		api_status[status]++;
}

void prom_wake(int64_t ms)
{
	size_t i = 0;

	if (ms < 0)
		return;
	while (i < NWAKE && ms > wake_le[i])
		i++;
	wake_bucket[i]++;
	wake_count++;
	wake_sum_ms += (uint64_t)ms;
}

int prom_text(struct hostd *h, struct buf *out, struct err *e)
{
	struct machine *ms = NULL;
	size_t n = 0;
	uint64_t count[MS_COUNT] = { 0 }, cum = 0;

	if (db_machine_list(h->db, NULL, &ms, &n, e) < 0)
		return -1;
	for (size_t i = 0; i < n; i++)
		count[ms[i].state]++;
	free(ms);
	buf_adds(out, "# HELP berth_machines Machines by state.\n# TYPE berth_machines gauge\n");
	for (int s = 0; s < MS_COUNT; s++)
		buf_printf(out, "berth_machines{state=\"%s\"} %llu\n", mstate_name((enum mstate)s),
			   (unsigned long long)count[s]);

	buf_printf(out, "# HELP berth_idle_suspends_total Machines the idle policy suspended.\n"
		   "# TYPE berth_idle_suspends_total counter\nberth_idle_suspends_total %llu\n",
		   (unsigned long long)idle_suspends);
	buf_adds(out, "# HELP berth_wake_seconds From a connection's wake of a stopped or "
		 "suspended machine to its SSH answering.\n# TYPE berth_wake_seconds histogram\n");
	for (size_t i = 0; i < NWAKE; i++) {
		cum += wake_bucket[i];
		buf_printf(out, "berth_wake_seconds_bucket{le=\"%g\"} %llu\n",
			   (double)wake_le[i] / 1000.0, (unsigned long long)cum);
	}
	cum += wake_bucket[NWAKE];
	buf_printf(out, "berth_wake_seconds_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)cum);
	buf_printf(out, "berth_wake_seconds_sum %.3f\nberth_wake_seconds_count %llu\n",
		   (double)wake_sum_ms / 1000.0, (unsigned long long)wake_count);

	/* Ledger totals over every machine's life, deleted ones too. */
	json_t *u = usage_json(h, NULL, 0, now_s(), e);
	if (!u)
		return -1;
	uint64_t run = 0, gib_s = 0;
	size_t i;
	json_t *m;
	json_array_foreach(json_object_get(u, "machines"), i, m) {
		run += (uint64_t)json_integer_value(json_object_get(m, "running_s"));
		gib_s += (uint64_t)json_integer_value(json_object_get(m, "storage_gib_s"));
	}
	buf_printf(out, "# HELP berth_running_seconds_total Machine-seconds billed as running.\n"
		   "# TYPE berth_running_seconds_total counter\nberth_running_seconds_total %llu\n",
		   (unsigned long long)run);
	buf_printf(out, "# HELP berth_storage_gib_seconds_total GiB-seconds of storage billed.\n"
		   "# TYPE berth_storage_gib_seconds_total counter\n"
		   "berth_storage_gib_seconds_total %llu\n", (unsigned long long)gib_s);
	buf_printf(out, "# HELP berth_billed_total Everything billed, in the currency.\n"
		   "# TYPE berth_billed_total counter\nberth_billed_total{currency=\"%s\"} %s\n",
		   json_string_value(json_object_get(u, "currency")),
		   json_string_value(json_object_get(u, "total")));
	json_decref(u);

	buf_adds(out, "# HELP berth_api_responses_total API answers by HTTP status.\n"
		 "# TYPE berth_api_responses_total counter\n");
	for (int s = 100; s < 600; s++)
		if (api_status[s])
			buf_printf(out, "berth_api_responses_total{code=\"%d\"} %llu\n", s,
				   (unsigned long long)api_status[s]);
	return 0;
}
