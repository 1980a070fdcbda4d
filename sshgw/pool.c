#include "sshgw/pool.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sshexec.h"
#include "common/util.h"
#include "common/banned.h"

#define POOL_MAX 256

struct pooled {
	struct pooled *next;
	struct upstream u;
	int64_t expires;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct pooled *head;
static int count;

void upstream_close(struct upstream *u)
{
	sshexec_disconnect(u->s);
	free(u->cb);
	u->s = NULL;
	u->cb = NULL;
}

/* Unlink expired entries into *DEAD (mu held). */
static void expire(int64_t now, struct pooled **dead)
{
	for (struct pooled **pp = &head; *pp;) {
		struct pooled *e = *pp;
		if (e->expires <= now) {
			*pp = e->next;
			count--;
			e->next = *dead;
			*dead = e;
		} else {
			pp = &e->next;
		}
	}
}

static void close_all(struct pooled *dead)
{
	while (dead) {
		struct pooled *e = dead;
		dead = e->next;
		upstream_close(&e->u);
		free(e);
	}
}

bool pool_take(const char *key, struct upstream *out)
{
	struct pooled *dead = NULL, *found = NULL;
	int64_t now = mono_ms();

	pthread_mutex_lock(&mu);
	expire(now, &dead);
	for (struct pooled **pp = &head; *pp;) {
		struct pooled *e = *pp;
		if (strcmp(e->u.key, key) != 0) {
			pp = &e->next;
			continue;
		}
		*pp = e->next;
		count--;
		if (!found && sshexec_session_quiet(e->u.s)) {
			found = e;
		} else {
			e->next = dead;
			dead = e;
		}
		if (found)
			break;
	}
	pthread_mutex_unlock(&mu);
	close_all(dead);
	if (!found)
		return false;
	*out = found->u;
	free(found);
	return true;
}

void pool_put(struct upstream *u)
{
	struct pooled *dead = NULL, *e;

	if (!u->s)
		return;
	if (!ssh_is_connected(u->s)) {
		upstream_close(u);
		return;
	}
	u->cb->userdata = NULL;
	e = calloc(1, sizeof(*e));
	if (!e)
		abort();
	e->u = *u;
	e->expires = mono_ms() + POOL_TTL_MS;
	pthread_mutex_lock(&mu);
	expire(mono_ms(), &dead);
	if (count < POOL_MAX) {
		e->next = head;
		head = e;
		count++;
		e = NULL;
	}
	pthread_mutex_unlock(&mu);
	close_all(dead);
	if (e) {
		upstream_close(&e->u);
		free(e);
	}
	u->s = NULL;
	u->cb = NULL;
}

/* ---- handshakes in flight, per endpoint ---- */

#define SLOTS 64

static struct {
	char endpoint[80];
	int n;
} flight[SLOTS];
static pthread_cond_t flight_cv = PTHREAD_COND_INITIALIZER;

/* The slot of ENDPOINT, or a free one (mu held); -1 when all are busy. */
static int slot_of(const char *endpoint)
{
	int free_slot = -1;

	for (int i = 0; i < SLOTS; i++) {
		if (flight[i].n > 0 && strcmp(flight[i].endpoint, endpoint) == 0)
			return i;
		if (flight[i].n == 0 && free_slot < 0)
			free_slot = i;
	}
	return free_slot;
}

void handshake_begin(const char *endpoint)
{
	int i;

	pthread_mutex_lock(&mu);
	while ((i = slot_of(endpoint)) < 0 || flight[i].n >= HANDSHAKES_PER_ENDPOINT)
		pthread_cond_wait(&flight_cv, &mu);
	snprintf(flight[i].endpoint, sizeof(flight[i].endpoint), "%s", endpoint);
	flight[i].n++;
	pthread_mutex_unlock(&mu);
}

void handshake_end(const char *endpoint)
{
	pthread_mutex_lock(&mu);
	for (int i = 0; i < SLOTS; i++) {
		if (flight[i].n > 0 && strcmp(flight[i].endpoint, endpoint) == 0) {
			flight[i].n--;
			break;
		}
	}
	pthread_cond_broadcast(&flight_cv);
	pthread_mutex_unlock(&mu);
}
