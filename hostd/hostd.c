/* hostd's shared context: the table of operations in progress and the
 * test crash points. */
#include "hostd/hostd.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "common/banned.h"

int hostd_busy_acquire(struct hostd *h, const char *key, const char *op,
		       const char *what, struct err *e)
{
	int free_slot = -1, rc = 0;

	pthread_mutex_lock(&h->busy_lock);
	for (int i = 0; i < BUSY_MAX; i++) {
		if (h->busy[i].key[0] == '\0') {
			if (free_slot < 0)
				free_slot = i;
		} else if (strcmp(h->busy[i].key, key) == 0) {
			rc = err_set(e, 409, "busy", "%s is busy: %s in progress", what,
				     h->busy[i].op);
			goto out;
		}
	}
	if (free_slot < 0) {
		rc = err_set(e, 503, "overloaded", "too many operations in progress");
		goto out;
	}
	snprintf(h->busy[free_slot].key, sizeof(h->busy[free_slot].key), "%s", key);
	h->busy[free_slot].op = op;
	h->busy[free_slot].done = h->busy[free_slot].total = 0;
out:
	pthread_mutex_unlock(&h->busy_lock);
	return rc;
}

void hostd_busy_release(struct hostd *h, const char *key)
{
	pthread_mutex_lock(&h->busy_lock);
	for (int i = 0; i < BUSY_MAX; i++)
		if (strcmp(h->busy[i].key, key) == 0)
			h->busy[i].key[0] = '\0';
	pthread_mutex_unlock(&h->busy_lock);
}

bool hostd_busy(struct hostd *h, const char *key)
{
	bool busy = false;

	pthread_mutex_lock(&h->busy_lock);
	for (int i = 0; i < BUSY_MAX && !busy; i++)
		busy = strcmp(h->busy[i].key, key) == 0;
	pthread_mutex_unlock(&h->busy_lock);
	return busy;
}

void hostd_busy_progress(struct hostd *h, const char *key, uint64_t done, uint64_t total)
{
	pthread_mutex_lock(&h->busy_lock);
	for (int i = 0; i < BUSY_MAX; i++)
		if (strcmp(h->busy[i].key, key) == 0) {
			h->busy[i].done = done;
			h->busy[i].total = total;
		}
	pthread_mutex_unlock(&h->busy_lock);
}

bool hostd_busy_get(struct hostd *h, const char *key, const char **op, uint64_t *done,
		    uint64_t *total)
{
	bool busy = false;

	pthread_mutex_lock(&h->busy_lock);
	for (int i = 0; i < BUSY_MAX && !busy; i++)
		if (h->busy[i].key[0] && strcmp(h->busy[i].key, key) == 0) {
			busy = true;
			*op = h->busy[i].op;
			*done = h->busy[i].done;
			*total = h->busy[i].total;
		}
	pthread_mutex_unlock(&h->busy_lock);
	return busy;
}

void hostd_crash_point(struct hostd *h, const char *point)
{
	const char *at = getenv("BERTH_TEST_CRASH_AT");
	char path[PATH_MAX];

	if (!at || strcmp(at, point) != 0)
		return;
	log_warn("test crash point %s reached; waiting to be killed", point);
	snprintf(path, sizeof(path), "%s/crash-point", h->cfg.state_dir);
	file_write_atomic(path, point, strlen(point), 0600, NULL);
	for (;;)
		pause();
}

