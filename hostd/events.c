/* Lifecycle events (hostd/events.h). */
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "common/util.h"
#include "hostd/events.h"
#include "hostd/hostd.h"
#include "hostd/webhooks.h"
#include "common/banned.h"

static _Thread_local char cause[160];

/* The last event's id, and the followers' wake-up. */
static pthread_mutex_t last_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t last_cond = PTHREAD_COND_INITIALIZER;
static int64_t last_id;
static bool stopping;           /* hostd stops: followers end */

void events_cause(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cause, sizeof(cause), fmt, ap);
	va_end(ap);
}

void events_cause_clear(void)
{
	cause[0] = '\0';
}

static int64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void events_emit(struct hostd *h, const char *owner, const char *machine, const char *kind,
		 const char *detail)
{
	struct db_event ev = { .t = wall_ms() };
	struct err e = { 0 };

	snprintf(ev.owner, sizeof(ev.owner), "%s", owner);
	snprintf(ev.machine, sizeof(ev.machine), "%s", machine ? machine : "");
	snprintf(ev.kind, sizeof(ev.kind), "%s", kind);
	if (detail && *detail)
		snprintf(ev.cause, sizeof(ev.cause), "%s%s%s", detail, cause[0] ? "; " : "",
			 cause);
	else
		snprintf(ev.cause, sizeof(ev.cause), "%s", cause[0] ? cause : "unknown");
	int64_t id = 0;

	if (db_event_add(h->db, &ev, EVENTS_KEEP, &id, &e) < 0) {
		log_warn("machine %s/%s %s: not recorded as an event: %s", owner, ev.machine, kind,
			 e.msg);
		return;
	}
	/* Its webhooks' deliveries, queued in the database (hostd/webhooks.h). */
	ev.id = id;
	webhooks_enqueue(h, &ev);
	pthread_mutex_lock(&last_lock);
	if (id > last_id)
		last_id = id;
	pthread_cond_broadcast(&last_cond);
	pthread_mutex_unlock(&last_lock);
}

void events_stop(void)
{
	pthread_mutex_lock(&last_lock);
	stopping = true;
	pthread_cond_broadcast(&last_cond);
	pthread_mutex_unlock(&last_lock);
}

int64_t events_last(void)
{
	int64_t id;

	pthread_mutex_lock(&last_lock);
	id = last_id;
	pthread_mutex_unlock(&last_lock);
	return id;
}

int64_t events_wait(int64_t after, int ms)
{
	struct timespec until;
	int64_t id;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += ms / 1000;
	until.tv_nsec += (long)(ms % 1000) * 1000000;
	if (until.tv_nsec >= 1000000000) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&last_lock);
	while (last_id <= after && !stopping &&
	       pthread_cond_timedwait(&last_cond, &last_lock, &until) == 0)
		;
	id = stopping ? -1 : last_id;
	pthread_mutex_unlock(&last_lock);
	return id;
}

json_t *events_json(const struct db_event *ev)
{
	char when[40];
	time_t s = (time_t)(ev->t / 1000);
	struct tm tm;
	size_t n;

	gmtime_r(&s, &tm);
	n = strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(when + n, sizeof(when) - n, ".%03dZ", (int)(ev->t % 1000));
	return json_pack("{s:I, s:s, s:s, s:s, s:s, s:s}", "id", (json_int_t)ev->id, "time",
			 when, "owner", ev->owner, "machine", ev->machine, "kind", ev->kind,
			 "cause", ev->cause);
}
