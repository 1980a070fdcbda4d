#include "hostd/sessions.h"

#include <pthread.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "common/banned.h"

struct sessions {
	pthread_mutex_t lock;
	struct session *v;    /* live sessions, unordered */
	size_t n, cap;
	int64_t next_id;
};

struct sessions *sessions_new(void)
{
	struct sessions *s = calloc(1, sizeof(*s));

	if (!s)
		abort();
	pthread_mutex_init(&s->lock, NULL);
	s->next_id = 1;
	return s;
}

void sessions_free(struct sessions *s)
{
	if (!s)
		return;
	pthread_mutex_destroy(&s->lock);
	free(s->v);
	free(s);
}

int64_t sessions_open(struct sessions *s, const char *machine_id, const char *owner,
		      const char *machine, const char *kind, const char *from,
		      struct err *e)
{
	struct session *x;
	int64_t id;

	if (strcmp(kind, "ssh") != 0 && strcmp(kind, "desktop") != 0)
		return err_set(e, 400, "invalid_kind", "session kind must be \"ssh\" or "
			       "\"desktop\", not '%.40s'", kind);
	pthread_mutex_lock(&s->lock);
	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 16;
		s->v = realloc(s->v, s->cap * sizeof(*s->v));
		if (!s->v)
			abort();
	}
	x = &s->v[s->n++];
	memset(x, 0, sizeof(*x));
	id = x->id = s->next_id++;
	snprintf(x->machine_id, sizeof(x->machine_id), "%s", machine_id);
	snprintf(x->owner, sizeof(x->owner), "%s", owner);
	snprintf(x->machine, sizeof(x->machine), "%s", machine);
	snprintf(x->kind, sizeof(x->kind), "%s", kind);
	snprintf(x->from, sizeof(x->from), "%s", from);
	x->opened = now_s();
	pthread_mutex_unlock(&s->lock);
	log_info("session %lld: %s on %s/%s from %s", (long long)id, kind, owner, machine,
		 from[0] ? from : "?");
	return id;
}

int sessions_close(struct sessions *s, int64_t id, const char *kind, uint64_t bytes_in,
		   uint64_t bytes_out, struct session *out, struct err *e)
{
	struct session x = { 0 };
	bool found = false;

	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < s->n; i++) {
		if (s->v[i].id != id || (kind && strcmp(s->v[i].kind, kind) != 0))
			continue;
		x = s->v[i];
		s->v[i] = s->v[--s->n];
		found = true;
		break;
	}
	pthread_mutex_unlock(&s->lock);
	if (!found)
		return err_set(e, 404, "not_found", "no session %lld", (long long)id);
	log_info("session %lld: %s on %s/%s closed after %lld s, %llu bytes in, %llu out",
		 (long long)id, x.kind, x.owner, x.machine, (long long)(now_s() - x.opened),
		 (unsigned long long)bytes_in, (unsigned long long)bytes_out);
	if (out)
		*out = x;
	return 0;
}

int sessions_count(struct sessions *s, const char *machine_id)
{
	int n = 0;

	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->v[i].machine_id, machine_id) == 0)
			n++;
	pthread_mutex_unlock(&s->lock);
	return n;
}

/* Forget the sessions whose FIELD (machine_id or kind) is VALUE. */
static int drop(struct sessions *s, size_t field, const char *value)
{
	int dropped = 0;

	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < s->n;) {
		if (strcmp((const char *)&s->v[i] + field, value) == 0) {
			s->v[i] = s->v[--s->n];
			dropped++;
		} else {
			i++;
		}
	}
	pthread_mutex_unlock(&s->lock);
	return dropped;
}

int sessions_drop_kind(struct sessions *s, const char *kind)
{
	int dropped = drop(s, offsetof(struct session, kind), kind);

	if (dropped)
		log_info("dropped %d %s session(s): their gateway restarted", dropped, kind);
	return dropped;
}

int sessions_drop_machine(struct sessions *s, const char *machine_id)
{
	int dropped = drop(s, offsetof(struct session, machine_id), machine_id);

	if (dropped)
		log_info("dropped %d session(s) of deleted machine %s", dropped, machine_id);
	return dropped;
}
