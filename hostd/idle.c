#include "hostd/idle.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "common/util.h"
#include "hostd/attrs.h"
#include "hostd/events.h"
#include "hostd/hostd.h"
#include "hostd/machine.h"
#include "hostd/prometheus.h"
#include "hostd/sessions.h"
#include "hostd/virt.h"
#include "common/banned.h"

#define EXEC_MAX 16

/* What the policy knows of one running machine. */
struct seen {
	char id[37];
	int64_t last_active;        /* seconds since the epoch */
	char why[16];               /* what last kept it active */
	uint64_t cpu_ns;            /* its vCPUs' time at cpu_ms */
	int64_t cpu_ms;             /* monotonic; 0 = not read yet */
	int cpu_percent;            /* over the last interval, of one vCPU */
	struct {
		pid_t pid;
		unsigned long long start;  /* /proc/PID/stat starttime */
	} exec[EXEC_MAX];
	bool running;               /* seen running in this pass */
};

struct idle {
	pthread_mutex_t lock;
	pthread_cond_t cv;
	pthread_t thread;
	bool on, quit;
	struct seen *s;
	size_t n, cap;
};

/* The process's start time (clock ticks since boot): with the pid it names
 * one process, whatever reuses the pid later.  0 when it is gone. */
static unsigned long long proc_start(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long long start = 0;
	FILE *f;
	size_t len;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	len = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[len] = '\0';
	/* After the command's ")" come fields 3 on; starttime is field 22. */
	p = strrchr(buf, ')');
	if (!p)
		return 0;
	p++;
	for (int field = 3; field < 22 && p; field++)
		p = strchr(p + 1, ' ');
	if (p && sscanf(p, " %llu", &start) != 1)
		start = 0;
	return start;
}

/* The entry of machine ID (the caller holds the lock); added when ADD. */
static struct seen *find(struct idle *d, const char *id, bool add)
{
	for (size_t i = 0; i < d->n; i++)
		if (strcmp(d->s[i].id, id) == 0)
			return &d->s[i];
	if (!add)
		return NULL;
	if (d->n == d->cap) {
		d->cap = d->cap ? d->cap * 2 : 16;
		d->s = realloc(d->s, d->cap * sizeof(*d->s));
		if (!d->s)
			abort();
	}
	struct seen *s = &d->s[d->n++];
	memset(s, 0, sizeof(*s));
	snprintf(s->id, sizeof(s->id), "%s", id);
	s->last_active = now_s();
	snprintf(s->why, sizeof(s->why), "start");
	return s;
}

int64_t idle_timeout_of(const struct hostd *h, const struct machine *m)
{
	return m->idle_timeout ? m->idle_timeout : h->cfg.idle_timeout_s;
}

void idle_exec(struct hostd *h, const char *machine_id, pid_t pid)
{
	struct idle *d = h->idle;
	unsigned long long start = proc_start(pid);

	if (!d || pid <= 0 || !start)
		return;
	pthread_mutex_lock(&d->lock);
	struct seen *s = find(d, machine_id, true);
	s->last_active = now_s();
	snprintf(s->why, sizeof(s->why), "exec");
	for (int i = 0; i < EXEC_MAX; i++) {
		if (s->exec[i].pid == pid && s->exec[i].start == start)
			break;
		/* A free slot, or one whose process is gone. */
		if (!s->exec[i].pid || proc_start(s->exec[i].pid) != s->exec[i].start) {
			s->exec[i].pid = pid;
			s->exec[i].start = start;
			break;
		}
	}
	pthread_mutex_unlock(&d->lock);
}

void idle_touch(struct hostd *h, const char *machine_id, const char *why)
{
	struct idle *d = h->idle;

	if (!d)
		return;
	pthread_mutex_lock(&d->lock);
	struct seen *s = find(d, machine_id, true);
	s->last_active = now_s();
	snprintf(s->why, sizeof(s->why), "%s", why);
	pthread_mutex_unlock(&d->lock);
}

/* Whether one of S's exec processes still lives (forgetting those gone). */
static bool exec_alive(struct seen *s)
{
	bool alive = false;

	for (int i = 0; i < EXEC_MAX; i++) {
		if (!s->exec[i].pid)
			continue;
		if (proc_start(s->exec[i].pid) == s->exec[i].start)
			alive = true;
		else
			s->exec[i].pid = 0;
	}
	return alive;
}

/* Why machine M is active now ("" when it is quiet).  Reads its vCPU time
 * (outside the lock: a libvirt call). */
static void activity(struct hostd *h, const struct machine *m, struct seen *copy,
		     char *why, size_t whylen)
{
	uint64_t ns;
	int64_t ms = mono_ms();

	why[0] = '\0';
	if (virt_vcpu_time(h->virt, m->id, &ns, NULL) == 0) {
		if (copy->cpu_ms && ms > copy->cpu_ms && ns >= copy->cpu_ns)
			copy->cpu_percent = (int)((ns - copy->cpu_ns) / 10000 /
						  (uint64_t)(ms - copy->cpu_ms));
		copy->cpu_ns = ns;
		copy->cpu_ms = ms;
	} else {
		/* Unknown: neither active nor quiet by CPU this time. */
		copy->cpu_percent = 0;
		copy->cpu_ms = 0;
	}
	if (busy_held(h->busy, m->id))
		snprintf(why, whylen, "operation");
	else if (sessions_count(h->sessions, m->id) > 0)
		snprintf(why, whylen, "session");
	else if (exec_alive(copy))
		snprintf(why, whylen, "exec");
	else if (h->cfg.idle_cpu_percent > 0 && copy->cpu_ms &&
		 copy->cpu_percent >= h->cfg.idle_cpu_percent)
		snprintf(why, whylen, "cpu");
}

/* Whether machine M became active since the pass looked at it (a
 * connection was given its credential, a session opened). */
static bool active_since(struct hostd *h, const struct machine *m, int64_t since)
{
	struct idle *d = h->idle;
	struct seen *s;
	bool active;

	if (sessions_count(h->sessions, m->id) > 0 || busy_held(h->busy, m->id))
		return true;
	pthread_mutex_lock(&d->lock);
	s = find(d, m->id, false);
	active = s && s->last_active > since;
	pthread_mutex_unlock(&d->lock);
	return active;
}

static void suspend_quiet(struct hostd *h, const struct machine *m, int64_t quiet,
			  int64_t last_active)
{
	struct act_opts o = { 0 };
	struct machine out;
	struct err e = { 0 };

	/* Looked at once more: a connection may have begun meanwhile.  One
	 * that begins after this finds the machine busy and waits for the
	 * suspend to end, then wakes it (machine_wake). */
	if (active_since(h, m, last_active))
		return;

	log_info("idle: %s/%s quiet for %llds (timeout %llds): suspending", m->owner, m->name,
		 (long long)quiet, (long long)idle_timeout_of(h, m));
	events_cause("idle for %llds (timeout %llds)", (long long)quiet,
		     (long long)idle_timeout_of(h, m));
	if (machine_act(h, m->owner, m->name, ACT_SUSPEND, &o, &out, NULL, &e) < 0) {
		log_warn("idle: suspend %s/%s: %s", m->owner, m->name, e.msg);
		return;
	}
	prom_idle_suspend();
}

void idle_check(struct hostd *h)
{
	struct idle *d = h->idle;
	struct machine *ms = NULL;
	size_t n = 0;
	int64_t now = now_s();

	if (!d)
		return;
	/* Deadlines first (hostd/attrs.h): a machine they suspend or delete
	 * is not looked at as running below. */
	attrs_check(h);
	if (db_machine_list(h->db, NULL, &ms, &n, NULL) < 0)
		return;
	pthread_mutex_lock(&d->lock);
	for (size_t i = 0; i < d->n; i++)
		d->s[i].running = false;
	pthread_mutex_unlock(&d->lock);
	for (size_t i = 0; i < n; i++) {
		const struct machine *m = &ms[i];
		struct seen copy;
		char why[16];
		if (m->state != MS_RUNNING)
			continue;
		pthread_mutex_lock(&d->lock);
		copy = *find(d, m->id, true);
		pthread_mutex_unlock(&d->lock);
		/* Started (or woken) since it was last seen active. */
		if (m->state_since > copy.last_active) {
			copy.last_active = m->state_since;
			snprintf(copy.why, sizeof(copy.why), "start");
		}
		activity(h, m, &copy, why, sizeof(why));
		if (why[0]) {
			copy.last_active = now;
			snprintf(copy.why, sizeof(copy.why), "%s", why);
		}
		pthread_mutex_lock(&d->lock);
		struct seen *s = find(d, m->id, true);
		/* An exec registered meanwhile is kept. */
		if (s->last_active > copy.last_active) {
			copy.last_active = s->last_active;
			snprintf(copy.why, sizeof(copy.why), "%s", s->why);
		}
		memcpy(copy.exec, s->exec, sizeof(copy.exec));
		copy.running = true;
		*s = copy;
		pthread_mutex_unlock(&d->lock);
		int64_t timeout = idle_timeout_of(h, m), quiet = now - copy.last_active;
		if (!why[0] && timeout > 0 && quiet >= timeout)
			suspend_quiet(h, m, quiet, copy.last_active);
	}
	/* Forget machines that no longer run: a start begins afresh. */
	pthread_mutex_lock(&d->lock);
	for (size_t i = 0; i < d->n;) {
		if (!d->s[i].running)
			d->s[i] = d->s[--d->n];
		else
			i++;
	}
	pthread_mutex_unlock(&d->lock);
	free(ms);
}

void idle_view(struct hostd *h, const struct machine *m, struct idle_view *v)
{
	struct idle *d = h->idle;

	memset(v, 0, sizeof(*v));
	v->timeout = idle_timeout_of(h, m);
	v->is_default = m->idle_timeout == 0;
	if (!d || m->state != MS_RUNNING)
		return;
	pthread_mutex_lock(&d->lock);
	struct seen *s = find(d, m->id, false);
	if (s) {
		v->seen = true;
		v->quiet_s = now_s() - s->last_active;
		if (v->quiet_s < 0)
			v->quiet_s = 0;
		snprintf(v->last_activity, sizeof(v->last_activity), "%s", s->why);
		v->cpu_percent = s->cpu_percent;
	}
	pthread_mutex_unlock(&d->lock);
}

static void *loop(void *arg)
{
	struct hostd *h = arg;
	struct idle *d = h->idle;
	struct timespec until;

	pthread_mutex_lock(&d->lock);
	while (!d->quit) {
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += h->cfg.idle_check_s;
		while (!d->quit &&
		       pthread_cond_timedwait(&d->cv, &d->lock, &until) != ETIMEDOUT)
			;
		if (d->quit)
			break;
		pthread_mutex_unlock(&d->lock);
		idle_check(h);
		pthread_mutex_lock(&d->lock);
	}
	pthread_mutex_unlock(&d->lock);
	return NULL;
}

int idle_start(struct hostd *h, struct err *e)
{
	struct idle *d = calloc(1, sizeof(*d));

	if (!d)
		abort();
	pthread_mutex_init(&d->lock, NULL);
	pthread_cond_init(&d->cv, NULL);
	h->idle = d;
	if (pthread_create(&d->thread, NULL, loop, h) != 0) {
		h->idle = NULL;
		free(d);
		return err_set(e, 500, "internal", "cannot start the idle policy's thread");
	}
	d->on = true;
	log_info("idle policy: suspend after %llds quiet (CPU < %d%%), checked every %llds",
		 (long long)h->cfg.idle_timeout_s, h->cfg.idle_cpu_percent,
		 (long long)h->cfg.idle_check_s);
	return 0;
}

void idle_stop(struct hostd *h)
{
	struct idle *d = h->idle;

	if (!d)
		return;
	pthread_mutex_lock(&d->lock);
	d->quit = true;
	pthread_cond_broadcast(&d->cv);
	pthread_mutex_unlock(&d->lock);
	if (d->on)
		pthread_join(d->thread, NULL);
	h->idle = NULL;
	free(d->s);
	free(d);
}
