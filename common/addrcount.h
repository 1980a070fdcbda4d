/* Connections counted per source address, for the gateways' caps on the
 * ones not yet authenticated (berth-sshgw) or whose request head is still
 * being read (berth-desktop): one client that opens many and sends
 * nothing takes no one else's threads.  A fixed table probed from the
 * address's hash; a slot whose count drops to 0 is free again.
 * Thread-safe. */
#ifndef BERTH_ADDRCOUNT_H
#define BERTH_ADDRCOUNT_H

#include <pthread.h>
#include <stdbool.h>

#define ADDRCOUNT_SLOTS 4096

struct addrcount {
	pthread_mutex_t mu;
	struct {
		char addr[64];
		int n;
	} slot[ADDRCOUNT_SLOTS];
};
#define ADDRCOUNT_INIT { .mu = PTHREAD_MUTEX_INITIALIZER }

/* Count one more for ADDR: false (not counted) when ADDR has MAX already,
 * or the table is full around its slot. */
bool addrcount_enter(struct addrcount *a, const char *addr, int max);
/* One less for ADDR. */
void addrcount_leave(struct addrcount *a, const char *addr);

#endif
