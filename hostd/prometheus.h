/* Prometheus metrics at GET /metrics: machines by state, wake latency,
 * ledger totals, API answers by status.  Counters are process-wide. */
#ifndef BERTH_PROMETHEUS_H
#define BERTH_PROMETHEUS_H

#include <stdint.h>

#include "common/buf.h"
#include "hostd/hostd.h"

/* One API answer with STATUS. */
void prom_api(int status);
/* One wake (a connection to a stopped or suspended machine) that took MS
 * until the machine's SSH answered. */
void prom_wake(int64_t ms);
/* The idle policy suspended a machine. */
void prom_idle_suspend(void);
/* The exposition text (format 0.0.4) into OUT. */
int prom_text(struct hostd *h, struct buf *out, struct err *e);

#endif
