/* The idle policy: a running machine with no gateway session (SSH or
 * desktop viewer), no `berth exec` in progress, no operation and guest CPU
 * below idle_cpu_percent for its idle timeout (the config's idle_timeout,
 * or the machine's own; "never" allowed) is suspended with its memory, and
 * from then on billed for storage only.  The next connection wakes it.
 *
 * One thread looks every idle_check_interval; what it knows (when each
 * running machine was last active, and why) lives in memory: a restarted
 * hostd gives every running machine a full timeout again. */
#ifndef BERTH_IDLE_H
#define BERTH_IDLE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/err.h"
#include "hostd/db.h"

struct hostd;

int idle_start(struct hostd *h, struct err *e);
void idle_stop(struct hostd *h);

/* `berth exec` (the CLI process PID) works on machine ID: the machine is
 * active as long as that process lives (a crashed CLI holds nothing). */
void idle_exec(struct hostd *h, const char *machine_id, pid_t pid);

/* Machine ID was active just now (WHY: "connect", a credential given to
 * a connection that is about to start). */
void idle_touch(struct hostd *h, const char *machine_id, const char *why);

/* The machine's effective timeout in seconds (-1: never). */
int64_t idle_timeout_of(const struct hostd *h, const struct machine *m);

/* What the policy knows of machine M, for its JSON ("idle"). */
struct idle_view {
	int64_t timeout;        /* seconds; -1 never */
	bool is_default;        /* the config's, not the machine's own */
	bool seen;              /* running and seen by the policy: the rest is set */
	int64_t quiet_s;
	char last_activity[16]; /* start, exec, session, cpu, operation */
	int cpu_percent;        /* of one vCPU, over the last interval */
};
void idle_view(struct hostd *h, const struct machine *m, struct idle_view *v);

/* One pass of the policy now (the thread's work; for tests). */
void idle_check(struct hostd *h);

#endif
