#include "hostd/quota.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "hostd/db.h"
#include "common/banned.h"

/* Held from a start's check until its machine is recorded running. */
static pthread_mutex_t start_lock = PTHREAD_MUTEX_INITIALIZER;

/* Work in flight per owner: a small table, found by name. */
struct inflight {
	char owner[64];
	int n[3];
};
static pthread_mutex_t inflight_lock = PTHREAD_MUTEX_INITIALIZER;
static struct inflight *inflight;
static size_t n_inflight;

bool quota_exempt(const char *owner)
{
	return strcmp(owner, "root") == 0;
}

static struct inflight *inflight_of(const char *owner, bool add)
{
	for (size_t i = 0; i < n_inflight; i++)
		if (!strcmp(inflight[i].owner, owner))
			return &inflight[i];
	if (!add)
		return NULL;
	inflight = realloc(inflight, (n_inflight + 1) * sizeof(*inflight));
	if (!inflight)
		abort();
	memset(&inflight[n_inflight], 0, sizeof(*inflight));
	snprintf(inflight[n_inflight].owner, sizeof(inflight->owner), "%s", owner);
	return &inflight[n_inflight++];
}

int quota_use(struct hostd *h, const char *owner, bool checkpoints, struct quota_use *u,
	      struct err *e)
{
	struct machine *ms;
	size_t n;
	struct inflight *f;

	memset(u, 0, sizeof(*u));
	if (db_machine_list(h->db, owner, &ms, &n, e) < 0)
		return -1;
	for (size_t i = 0; i < n; i++) {
		struct checkpoint *cs;
		size_t nc;
		u->machines++;
		u->disk += ms[i].disk;
		if (mstate_holds_cpu(ms[i].state)) {
			u->running_vcpus += ms[i].vcpus;
			u->running_memory += ms[i].memory;
		}
		if (!checkpoints)
			continue;
		if (db_ckpt_list(h->db, ms[i].id, &cs, &nc, e) < 0) {
			free(ms);
			return -1;
		}
		if ((int)nc > u->most_checkpoints)
			u->most_checkpoints = (int)nc;
		for (size_t j = 0; j < nc; j++)
			if (cs[j].memory[0])
				u->memory_checkpoints++;
		free(cs);
	}
	free(ms);
	/* A template's disk is its owner's, and its memory image a memory
	 * checkpoint's (hostd/template.h). */
	struct template *ts;
	if (db_template_list(h->db, &ts, &n, e) < 0)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (strcmp(ts[i].owner, owner) != 0)
			continue;
		u->disk += ts[i].disk;
		u->memory_checkpoints++;
	}
	free(ts);
	pthread_mutex_lock(&inflight_lock);
	if ((f = inflight_of(owner, false))) {
		u->operations = f->n[QUOTA_OPERATIONS];
		u->exports = f->n[QUOTA_EXPORTS];
		u->execs = f->n[QUOTA_EXECS];
	}
	pthread_mutex_unlock(&inflight_lock);
	return 0;
}

static int exceeded(struct err *e, const char *quota, const char *limit, const char *used,
		    const char *what)
{
	return err_set(e, 403, "quota_exceeded", "quota %s: %s at most, you have %s%s (%s in "
		       "berth.conf, set by root)", quota, limit, used, what, quota);
}

static int over_count(struct err *e, const char *quota, int limit, int used, int more,
		      const char *unit)
{
	char l[32], u[32];

	if (limit <= 0 || used + more <= limit)
		return 0;
	snprintf(l, sizeof(l), "%d %s", limit, unit);
	snprintf(u, sizeof(u), "%d", used);
	return exceeded(e, quota, l, u, "");
}

static int over_bytes(struct err *e, const char *quota, uint64_t limit, uint64_t used,
		      uint64_t more, const char *what)
{
	char l[32], u[32];

	if (!limit || used + more <= limit)
		return 0;
	size_format(limit, l, sizeof(l));
	size_format(used, u, sizeof(u));
	return exceeded(e, quota, l, u, what);
}

int quota_check_create(struct hostd *h, const char *owner, uint64_t disk, struct err *e)
{
	struct quota_use u;
	char more[96], sz[32];

	if (quota_exempt(owner))
		return 0;
	if (quota_use(h, owner, false, &u, e) < 0)
		return -1;
	size_format(disk, sz, sizeof(sz));
	snprintf(more, sizeof(more), ", and this machine's disk is %s", sz);
	if (over_count(e, "max_machines", h->cfg.max_machines, u.machines, 1, "machines") < 0 ||
	    over_bytes(e, "max_total_disk", h->cfg.max_total_disk, u.disk, disk, more) < 0)
		return -1;
	return 0;
}

/* M's vCPUs and memory on top of what its owner runs. */
static int check_start(struct hostd *h, const struct machine *m, struct err *e)
{
	struct quota_use u;
	char more[128], sz[32];

	if (quota_use(h, m->owner, false, &u, e) < 0)
		return -1;
	size_format(m->memory, sz, sizeof(sz));
	snprintf(more, sizeof(more), " running, and %s has %s", m->name, sz);
	if (over_count(e, "max_running_vcpus", h->cfg.max_running_vcpus, u.running_vcpus,
		       m->vcpus, "vCPUs running") < 0 ||
	    over_bytes(e, "max_running_memory", h->cfg.max_running_memory, u.running_memory,
		       m->memory, more) < 0)
		return -1;
	return 0;
}

int quota_start_begin(struct hostd *h, const struct machine *m, struct err *e)
{
	if (quota_exempt(m->owner) || mstate_holds_cpu(m->state))
		return 0;
	pthread_mutex_lock(&start_lock);
	if (check_start(h, m, e) < 0) {
		pthread_mutex_unlock(&start_lock);
		return -1;
	}
	return 1;
}

void quota_start_end(struct hostd *h, const struct machine *m, int held, bool started)
{
	if (held <= 0)
		return;
	if (started)
		db_machine_set_state(h->db, m->id, MS_RUNNING, NULL);
	pthread_mutex_unlock(&start_lock);
}

int quota_check_checkpoint(struct hostd *h, const struct machine *m, bool memory,
			   struct err *e)
{
	struct checkpoint *cs;
	size_t n;
	struct quota_use u;

	if (quota_exempt(m->owner))
		return 0;
	if (db_ckpt_list(h->db, m->id, &cs, &n, e) < 0)
		return -1;
	free(cs);
	if (over_count(e, "max_checkpoints", h->cfg.max_checkpoints, (int)n, 1,
		       "checkpoints per machine") < 0)
		return -1;
	if (!memory)
		return 0;
	if (quota_use(h, m->owner, true, &u, e) < 0)
		return -1;
	return over_count(e, "max_memory_checkpoints", h->cfg.max_memory_checkpoints,
			  u.memory_checkpoints, 1, "checkpoints with memory");
}

static const char *const kind_quota[] = { "max_operations", "max_exports", "max_execs" };
static const char *const kind_what[] = { "operations at once", "exports at once",
					 "commands running at once" };

static int kind_limit(const struct hostd *h, enum quota_kind k)
{
	return k == QUOTA_OPERATIONS ? h->cfg.max_operations
	       : k == QUOTA_EXPORTS  ? h->cfg.max_exports
				     : h->cfg.max_execs;
}

int quota_begin(struct hostd *h, const char *owner, enum quota_kind k, struct err *e)
{
	struct inflight *f;
	int limit = kind_limit(h, k), rc = 0;

	pthread_mutex_lock(&inflight_lock);
	f = inflight_of(owner, true);
	if (!quota_exempt(owner))
		rc = over_count(e, kind_quota[k], limit, f->n[k], 1, kind_what[k]);
	if (rc == 0)
		f->n[k]++;
	pthread_mutex_unlock(&inflight_lock);
	return rc;
}

void quota_end(struct hostd *h, const char *owner, enum quota_kind k)
{
	struct inflight *f;

	(void)h;
	pthread_mutex_lock(&inflight_lock);
	f = inflight_of(owner, false);
	if (f && f->n[k] > 0)
		f->n[k]--;
	pthread_mutex_unlock(&inflight_lock);
}

json_t *quota_json(struct hostd *h, const char *owner, struct err *e)
{
	struct quota_use u;
	const struct config *c = &h->cfg;

	if (quota_use(h, owner, true, &u, e) < 0)
		return NULL;
	return json_pack("{s:b, s:{s:{s:i, s:i}, s:{s:i, s:i}, s:{s:I, s:I}, s:{s:I, s:I},"
			 " s:{s:i, s:i}, s:{s:i, s:i}, s:{s:i, s:i}, s:{s:i, s:i}, s:{s:i, s:i}}}",
			 "exempt", quota_exempt(owner), "quotas",
			 "max_machines", "limit", c->max_machines, "used", u.machines,
			 "max_running_vcpus", "limit", c->max_running_vcpus, "used",
			 u.running_vcpus,
			 "max_running_memory", "limit", (json_int_t)c->max_running_memory,
			 "used", (json_int_t)u.running_memory,
			 "max_total_disk", "limit", (json_int_t)c->max_total_disk, "used",
			 (json_int_t)u.disk,
			 "max_checkpoints", "limit", c->max_checkpoints, "used", u.most_checkpoints,
			 "max_memory_checkpoints", "limit", c->max_memory_checkpoints, "used",
			 u.memory_checkpoints,
			 "max_operations", "limit", c->max_operations, "used", u.operations,
			 "max_exports", "limit", c->max_exports, "used", u.exports,
			 "max_execs", "limit", c->max_execs, "used", u.execs);
}
