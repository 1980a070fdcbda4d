#include "hostd/callcap.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/banned.h"

/* One key's calls: a machine's id or an owner's name. */
struct slot {
	char key[80];
	int n;                 /* 0: free */
};

/* Few calls are open at once (at most WEBCTL_MAX_CONNS): arrays scanned
 * whole, grown when full. */
struct callcap {
	pthread_mutex_t lock;
	struct slot *machines, *owners;
	size_t n_machines, n_owners;
	int total;
};

struct callcap *callcap_new(void)
{
	struct callcap *c = calloc(1, sizeof(*c));

	if (c)
		pthread_mutex_init(&c->lock, NULL);
	return c;
}

void callcap_free(struct callcap *c)
{
	if (!c)
		return;
	pthread_mutex_destroy(&c->lock);
	free(c->machines);
	free(c->owners);
	free(c);
}

/* KEY's slot in *S (*N of them); with MAKE a free one is taken (or the
 * array grown).  NULL when there is none (or no memory). */
static struct slot *find(struct slot **s, size_t *n, const char *key, bool make)
{
	struct slot *free_one = NULL;

	for (size_t i = 0; i < *n; i++) {
		if ((*s)[i].n > 0 && !strcmp((*s)[i].key, key))
			return &(*s)[i];
		if (!(*s)[i].n && !free_one)
			free_one = &(*s)[i];
	}
	if (!make)
		return NULL;
	if (!free_one) {
		struct slot *g = realloc(*s, (*n + 16) * sizeof(*g));
		if (!g)
			return NULL;
		memset(g + *n, 0, 16 * sizeof(*g));
		*s = g;
		free_one = &g[*n];
		*n += 16;
	}
	snprintf(free_one->key, sizeof(free_one->key), "%s", key);
	return free_one;
}

int callcap_take(struct callcap *c, const char *owner, const char *machine, const char *name,
		 const struct callcap_limits *l, struct err *e)
{
	struct slot *m, *o;
	int rc = 0;

	pthread_mutex_lock(&c->lock);
	m = find(&c->machines, &c->n_machines, machine, true);
	o = find(&c->owners, &c->n_owners, owner, true);
	if (!m || !o)
		rc = err_set(e, 500, "internal", "out of memory");
	else if (l->per_machine > 0 && m->n >= l->per_machine)
		rc = err_set(e, 429, "too_many_calls", "machine %s has %d calls through the broker "
			     "open, its most (broker_max_calls_per_machine = %d in berth.conf)",
			     name, m->n, l->per_machine);
	else if (l->per_user > 0 && o->n >= l->per_user)
		rc = err_set(e, 429, "too_many_calls", "%s's machines have %d calls through the "
			     "broker open, their most (broker_max_calls_per_user = %d in berth.conf)",
			     owner, o->n, l->per_user);
	else if (l->total > 0 && c->total >= l->total)
		rc = err_set(e, 503, "broker_busy", "the broker's calls hold %d of berth-hostd's "
			     "webctl connections, their most: the other %d are kept for previews "
			     "(webctl_reserved_connections in berth.conf)", c->total, l->reserved);
	if (rc == 0) {
		m->n++;
		o->n++;
		c->total++;
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

void callcap_give(struct callcap *c, const char *owner, const char *machine)
{
	struct slot *s;

	pthread_mutex_lock(&c->lock);
	if ((s = find(&c->machines, &c->n_machines, machine, false)))
		s->n--;
	if ((s = find(&c->owners, &c->n_owners, owner, false)))
		s->n--;
	if (c->total > 0)
		c->total--;
	pthread_mutex_unlock(&c->lock);
}

int callcap_count(struct callcap *c, const char *owner, const char *machine)
{
	struct slot *s;
	int n;

	pthread_mutex_lock(&c->lock);
	if (machine)
		n = (s = find(&c->machines, &c->n_machines, machine, false)) ? s->n : 0;
	else if (owner)
		n = (s = find(&c->owners, &c->n_owners, owner, false)) ? s->n : 0;
	else
		n = c->total;
	pthread_mutex_unlock(&c->lock);
	return n;
}
