/* Per-user quotas (berth.conf: max_machines, max_running_vcpus,
 * max_running_memory, max_total_disk, max_checkpoints,
 * max_memory_checkpoints, max_operations, max_exports, max_execs), so that one user
 * of a shared host cannot take every other's capacity.  Root's machines
 * are exempt.  A limit of 0 means none.
 *
 * A refusal is 403 "quota_exceeded", its message naming the quota, its
 * limit and the current use ("quota max_machines: 2 machines at most, you
 * have 2").  The checks that race run with what they guard: two creates
 * under machine.c's create_lock with the row's insert, two starts under
 * quota_start_begin's lock until the machine is recorded running. */
#ifndef BERTH_QUOTA_H
#define BERTH_QUOTA_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"
#include "hostd/hostd.h"

/* What OWNER holds now. */
struct quota_use {
	int machines;
	int running_vcpus;        /* of machines that run (or are paused) */
	uint64_t running_memory;
	uint64_t disk;            /* the machines' virtual disk sizes */
	int memory_checkpoints;   /* checkpoints with a saved memory image */
	int most_checkpoints;     /* of one machine */
	int operations;           /* requests changing machines, in flight */
	int exports;              /* exports streaming */
	int execs;                /* commands running (POST .../exec) */
};

bool quota_exempt(const char *owner);
/* CHECKPOINTS: count them too (a query per machine; the machine counts
 * need none). */
int quota_use(struct hostd *h, const char *owner, bool checkpoints, struct quota_use *u,
	      struct err *e);

/* A new machine of DISK bytes for OWNER (create, fork). */
int quota_check_create(struct hostd *h, const char *owner, uint64_t disk, struct err *e);
/* Around whatever starts (or resumes) M: its vCPUs and memory on top of
 * what runs are checked, and the check and the start are one step for
 * other starts (one lock), a started M recorded running before the next
 * check.  _begin: -1 refused (E), 0 nothing held (root, or M
 * runs already), 1 the lock held: pass it to _end with whether M started. */
int quota_start_begin(struct hostd *h, const struct machine *m, struct err *e);
void quota_start_end(struct hostd *h, const struct machine *m, int held, bool started);
/* Another checkpoint of M (MEMORY: with its memory). */
int quota_check_checkpoint(struct hostd *h, const struct machine *m, bool memory,
			   struct err *e);

/* Concurrent work of OWNER: KIND QUOTA_OPERATIONS (a request that changes
 * machines), QUOTA_EXPORTS (an export streaming) or QUOTA_EXECS (a
 * command running through hostd/exec.c).  _begin counts it in
 * or refuses; _end counts it out. */
enum quota_kind { QUOTA_OPERATIONS, QUOTA_EXPORTS, QUOTA_EXECS };
int quota_begin(struct hostd *h, const char *owner, enum quota_kind k, struct err *e);
void quota_end(struct hostd *h, const char *owner, enum quota_kind k);

/* {"exempt", "quotas": {NAME: {"limit", "used"}}}: GET /v1/quota. */
json_t *quota_json(struct hostd *h, const char *owner, struct err *e);

#endif
