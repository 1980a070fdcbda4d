/* The storage sampler and the heartbeat: two threads of hostd's.  The
 * sampler records each machine's allocated storage (its volume and its
 * checkpoints' volumes, not its image's base) at start and every minute,
 * a row only when the number changed: what storage is billed from.  The
 * heartbeat writes the current second to meta.alive every second, so that
 * after a power cut start-up can tell when the machines died with the
 * host (bill_stop_time). */
#include "hostd/sampler.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "common/util.h"
#include "common/banned.h"

#define SAMPLE_EVERY_S 60

void sampler_record(struct hostd *h, const struct machine *m)
{
	struct storage_vol_info vi;
	struct checkpoint *c = NULL;
	size_t n = 0;
	uint64_t bytes = 0;

	/* What the machine holds alone: its volume and its checkpoints'
	 * (an image's base is the image's). */
	if (storage_vol_info(h->st, m->volume, &vi, NULL) == 0)
		bytes += vi.allocated_bytes;
	if (db_ckpt_list(h->db, m->id, &c, &n, NULL) == 0)
		for (size_t i = 0; i < n; i++)
			if (strcmp(c[i].volume, m->volume) != 0 &&
			    storage_vol_info(h->st, c[i].volume, &vi, NULL) == 0)
				bytes += vi.allocated_bytes;
	free(c);
	db_sample_add(h->db, m->id, now_s(), bytes, NULL);
}

static void sample_all(struct hostd *h)
{
	struct machine *ms = NULL;
	size_t n = 0;

	if (db_machine_list(h->db, NULL, &ms, &n, NULL) < 0)
		return;
	for (size_t i = 0; i < n; i++)
		if (ms[i].state != MS_CREATING && ms[i].state != MS_DELETING)
			sampler_record(h, &ms[i]);
	free(ms);
}

/* The heartbeat: the last second hostd is known to have run, durable (the
 * database is synchronous).  After a power cut, start-up closes the
 * running intervals of machines that died with the host there. */
static void heartbeat(struct hostd *h)
{
	static bool failing;
	char v[32];
	struct err e = { 0 };

	snprintf(v, sizeof(v), "%lld", (long long)now_s());
	if (db_meta_set(h->db, "alive", v, &e) < 0) {
		if (!failing)
			log_warn("heartbeat: %s (said once until it works again)", e.msg);
		failing = true;
	} else {
		failing = false;
	}
}

/* Wait on the usage condition until SECONDS pass or hostd stops (the
 * caller holds usage_lock); whether to go on. */
static bool sampler_wait(struct hostd *h, int seconds)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += seconds;
	while (!h->sampler_quit &&
	       pthread_cond_timedwait(&h->sampler_cv, &h->sampler_lock, &until) != ETIMEDOUT)
		;
	return !h->sampler_quit;
}

static void *sample_main(void *arg)
{
	struct hostd *h = arg;

	pthread_mutex_lock(&h->sampler_lock);
	do {
		pthread_mutex_unlock(&h->sampler_lock);
		sample_all(h);
		pthread_mutex_lock(&h->sampler_lock);
	} while (sampler_wait(h, SAMPLE_EVERY_S));
	pthread_mutex_unlock(&h->sampler_lock);
	return NULL;
}

/* Its own thread: a minute's sampling of many machines must not delay it. */
static void *heart_main(void *arg)
{
	struct hostd *h = arg;

	pthread_mutex_lock(&h->sampler_lock);
	do {
		pthread_mutex_unlock(&h->sampler_lock);
		heartbeat(h);
		pthread_mutex_lock(&h->sampler_lock);
	} while (sampler_wait(h, 1));
	pthread_mutex_unlock(&h->sampler_lock);
	return NULL;
}

static void stop_threads(struct hostd *h, bool heart_too);

int sampler_start(struct hostd *h, struct err *e)
{
	pthread_mutex_init(&h->sampler_lock, NULL);
	pthread_cond_init(&h->sampler_cv, NULL);
	h->sampler_quit = false;
	if (pthread_create(&h->sampler_thread, NULL, sample_main, h) != 0)
		return err_set(e, 500, "internal", "cannot start the storage sampler");
	if (pthread_create(&h->heart_thread, NULL, heart_main, h) != 0) {
		stop_threads(h, false);
		return err_set(e, 500, "internal", "cannot start the heartbeat");
	}
	h->sampler_on = true;
	return 0;
}

static void stop_threads(struct hostd *h, bool heart_too)
{
	pthread_mutex_lock(&h->sampler_lock);
	h->sampler_quit = true;
	pthread_cond_broadcast(&h->sampler_cv);
	pthread_mutex_unlock(&h->sampler_lock);
	pthread_join(h->sampler_thread, NULL);
	if (heart_too)
		pthread_join(h->heart_thread, NULL);
}

void sampler_stop(struct hostd *h)
{
	if (!h->sampler_on)
		return;
	stop_threads(h, true);
	h->sampler_on = false;
	/* A clean stop: the machines go on running without hostd, so its
	 * last heartbeat says nothing of when they stop (a power cut days
	 * later must not end their intervals here): none is left. */
	db_meta_set(h->db, "alive", "0", NULL);
}
