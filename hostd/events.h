/* Lifecycle events: what happened to a machine (created, started, woke,
 * suspended, stopped, restarted, checkpointed, restored, forked, deleted,
 * quota_refused), when, and why.  The why is the cause of the operation
 * the event ends, set by whoever started it on that thread: an API
 * request ("berth suspend by alice": the route and the caller), the idle
 * policy ("idle for 900 s"), the gateway ("ssh from 192.0.2.7"), a
 * preview's or a viewer's wake.  Events are rows of the database (each
 * owner keeps its last EVENTS_KEEP), read with GET /v1/events. */
#ifndef BERTH_HOSTD_EVENTS_H
#define BERTH_HOSTD_EVENTS_H

#include <jansson.h>
#include <stdint.h>

#include "hostd/db.h"

struct hostd;

#define EVENTS_KEEP 10000

/* The cause of what this thread does from now on (printf-like), until the
 * next call or events_cause_clear. */
void events_cause(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void events_cause_clear(void);

/* Record that KIND happened to OWNER's machine MACHINE ("" for none: a
 * refused create), with DETAIL ("" or NULL: none) and this thread's
 * cause.  A failure to record is logged; the operation stands. */
void events_emit(struct hostd *h, const char *owner, const char *machine, const char *kind,
		 const char *detail);

/* hostd stops: every follower's stream ends (else stopping the API would
 * wait for their clients to go). */
void events_stop(void);
/* The last event's id (0: none since hostd started): a follower's "seen". */
int64_t events_last(void);
/* Returns when an event with an id above SEEN was recorded (anyone's), or
 * after MS milliseconds: the last event's id; -1 at once when hostd stops. */
int64_t events_wait(int64_t seen, int ms);

/* EV as the API shows it. */
json_t *events_json(const struct db_event *ev);

#endif
