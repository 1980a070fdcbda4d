/* Billing: the price list's history, storage samples every minute, and
 * usage totals per machine and per user from the ledger (hostd/billing.c
 * does the arithmetic). */
#ifndef BERTH_USAGE_H
#define BERTH_USAGE_H

#include <jansson.h>
#include <stdint.h>

#include "hostd/hostd.h"

/* Parse the configured prices; when they differ from the last recorded
 * ones, record them as in force from now.  400 "invalid_price". */
int usage_prices_sync(struct hostd *h, struct err *e);
/* OWNER's usage (NULL: every user's) over [SINCE, NOW).  NULL with E set. */
json_t *usage_json(struct hostd *h, const char *owner, int64_t since, int64_t now,
		   struct err *e);
/* The same with, when STEP > 0, the cost in each STEP-second bucket from
 * SINCE on (the last bucket ends at NOW): "series" (nano-units, each
 * bucket rounded down once) per machine and in total, and "step". */
json_t *usage_json_series(struct hostd *h, const char *owner, int64_t since, int64_t now,
			  int64_t step, struct err *e);
/* Add to J, machine M's JSON: its cost so far and its current rate
 * ("cost"), and its storage split into exclusive and shared bytes
 * ("usage"), read live (the list of many has neither). */
void usage_machine(struct hostd *h, const struct machine *m, json_t *j);

#endif
