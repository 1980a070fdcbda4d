#include "hostd/busy.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/banned.h"

#define BUSY_MAX 256

struct busy {
	pthread_mutex_t lock;
	struct {
		char key[80];        /* "" for a free slot */
		const char *op;
		uint64_t done, total;
	} slot[BUSY_MAX];
};

struct busy *busy_new(void)
{
	struct busy *b = calloc(1, sizeof(*b));

	if (!b)
		abort();
	pthread_mutex_init(&b->lock, NULL);
	return b;
}

void busy_free(struct busy *b)
{
	if (!b)
		return;
	pthread_mutex_destroy(&b->lock);
	free(b);
}

/* The slot of KEY, or -1.  The caller holds the lock. */
static int find(const struct busy *b, const char *key)
{
	for (int i = 0; i < BUSY_MAX; i++)
		if (b->slot[i].key[0] && strcmp(b->slot[i].key, key) == 0)
			return i;
	return -1;
}

int busy_acquire(struct busy *b, const char *key, const char *op, const char *what,
		 struct err *e)
{
	int i, rc = 0;

	pthread_mutex_lock(&b->lock);
	if ((i = find(b, key)) >= 0) {
		rc = err_set(e, 409, "busy", "%s is busy: %s in progress", what, b->slot[i].op);
		goto out;
	}
	for (i = 0; i < BUSY_MAX && b->slot[i].key[0]; i++)
		;
	if (i == BUSY_MAX) {
		rc = err_set(e, 503, "overloaded", "too many operations in progress");
		goto out;
	}
	if (strlen(key) >= sizeof(b->slot[i].key)) {
		rc = err_set(e, 500, "internal", "operation key '%s' is too long", key);
		goto out;
	}
	snprintf(b->slot[i].key, sizeof(b->slot[i].key), "%s", key);
	b->slot[i].op = op;
	b->slot[i].done = b->slot[i].total = 0;
out:
	pthread_mutex_unlock(&b->lock);
	return rc;
}

void busy_release(struct busy *b, const char *key)
{
	int i;

	pthread_mutex_lock(&b->lock);
	if ((i = find(b, key)) >= 0)
		b->slot[i].key[0] = '\0';
	pthread_mutex_unlock(&b->lock);
}

bool busy_held(struct busy *b, const char *key)
{
	bool held;

	pthread_mutex_lock(&b->lock);
	held = find(b, key) >= 0;
	pthread_mutex_unlock(&b->lock);
	return held;
}

void busy_progress(struct busy *b, const char *key, uint64_t done, uint64_t total)
{
	int i;

	pthread_mutex_lock(&b->lock);
	if ((i = find(b, key)) >= 0) {
		b->slot[i].done = done;
		b->slot[i].total = total;
	}
	pthread_mutex_unlock(&b->lock);
}

bool busy_get(struct busy *b, const char *key, const char **op, uint64_t *done,
	      uint64_t *total)
{
	int i;

	pthread_mutex_lock(&b->lock);
	if ((i = find(b, key)) >= 0) {
		*op = b->slot[i].op;
		*done = b->slot[i].done;
		*total = b->slot[i].total;
	}
	pthread_mutex_unlock(&b->lock);
	return i >= 0;
}
