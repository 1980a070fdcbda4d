/* The storage sampler (every machine's allocated bytes, every minute) and
 * the heartbeat (meta.alive, every second): see hostd/sampler.c. */
#ifndef BERTH_SAMPLER_H
#define BERTH_SAMPLER_H

#include "hostd/hostd.h"

/* Record machine M's allocated storage now (its volume and its
 * checkpoints'): at its creation, so that storage is billed from then, not
 * from the next minute. */
void sampler_record(struct hostd *h, const struct machine *m);
/* Sample every machine now, then every minute, and beat every second, in
 * two threads until sampler_stop. */
int sampler_start(struct hostd *h, struct err *e);
/* Stop both threads and record a clean stop (meta.alive = 0: the machines
 * run on without hostd).  Nothing when they never started. */
void sampler_stop(struct hostd *h);

#endif
