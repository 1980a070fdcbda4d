#include "common/addrcount.h"

#include <stdio.h>
#include <string.h>

#include "common/banned.h"

/* How far from its hash an address's slot may be. */
#define PROBE 32

/* ADDR's slot (a free one for a new address when ADD), or -1. */
static int find(struct addrcount *a, const char *addr, bool add)
{
	unsigned h = 5381;
	int free_slot = -1;

	for (const char *p = addr; *p; p++)
		h = h * 33 + (unsigned char)*p;
	for (int i = 0; i < PROBE; i++) {
		int k = (int)((h + (unsigned)i) % ADDRCOUNT_SLOTS);
		if (a->slot[k].n > 0 && !strcmp(a->slot[k].addr, addr))
			return k;
		if (a->slot[k].n == 0 && free_slot < 0)
			free_slot = k;
	}
	if (!add || free_slot < 0)
		return -1;
	snprintf(a->slot[free_slot].addr, sizeof(a->slot[0].addr), "%s", addr);
	return free_slot;
}

bool addrcount_enter(struct addrcount *a, const char *addr, int max)
{
	bool ok = false;
	int k;

	pthread_mutex_lock(&a->mu);
	k = find(a, addr, true);
	if (k >= 0 && a->slot[k].n < max) {
		a->slot[k].n++;
		ok = true;
	}
	pthread_mutex_unlock(&a->mu);
	return ok;
}

void addrcount_leave(struct addrcount *a, const char *addr)
{
	int k;

	pthread_mutex_lock(&a->mu);
	k = find(a, addr, false);
	if (k >= 0)
		a->slot[k].n--;
	pthread_mutex_unlock(&a->mu);
}
