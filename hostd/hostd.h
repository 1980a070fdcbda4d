/* The daemon's shared context: what every request handler needs.  One per
 * process; handlers run one thread per connection (libmicrohttpd's
 * thread-per-connection mode), so everything here is thread-safe or
 * read-only after start-up. */
#ifndef BERTH_HOSTD_H
#define BERTH_HOSTD_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "hostd/busy.h"
#include "hostd/config.h"
#include "hostd/db.h"
#include "hostd/gwkey.h"
#include "hostd/sessions.h"
#include "hostd/virt.h"
#include "storage/storage.h"

struct hostd {
	struct config cfg;
	struct db *db;
	struct storage *st;
	struct virt *virt;
	struct gateway_key key;
	char instance[17];          /* random per state dir: domain name prefix */
	char dom_prefix[32];        /* "berth-INSTANCE-" */
	char recipes_dir[PATH_MAX];
	int64_t started_ms;

	/* The network daemons' identities: the uids of cfg.sshgw_user,
	 * cfg.desktop_user and cfg.web_user, looked up at start.  Each may use
	 * only its own /v1/gateway routes or socket (desktop_uid
	 * STATE/desktop.sock, web_uid STATE/web.sock); has_* is false when the
	 * user does not exist (or none is configured). */
	bool has_sshgw, has_desktop, has_web;
	uid_t sshgw_uid, desktop_uid, web_uid;
	unsigned qemu_gid;          /* cfg.qemu_group's gid: every QEMU runs in it */
	bool cpu_weights;           /* the host's cgroups weigh CPU: <cputune><shares> */
	bool io_weights;            /* and I/O (BFQ's weights): <blkiotune><weight> */
	bool memory_weights;        /* and memory: <memtune><soft_limit> */
	struct sessions *sessions;  /* the gateways' live sessions */
	struct keyproof *keyproof;  /* challenges of berth key add */
	struct desktop *desktop;    /* desktop tokens and STATE/desktop.sock */
	struct execs *execs;        /* commands running through the API (hostd/exec.h) */

	struct idle *idle;          /* the idle policy (hostd/idle.c) */
	struct net *net;            /* network = routed (hostd/net.h); NULL otherwise */

	/* The storage sampler and the heartbeat (hostd/sampler.c); last_alive
	 * is the previous run's last heartbeat (0: none), read at start. */
	pthread_t sampler_thread, heart_thread;
	int64_t last_alive;
	bool sampler_on, sampler_quit;
	pthread_mutex_t sampler_lock;
	pthread_cond_t sampler_cv;

	struct busy *busy;          /* operations in progress (hostd/busy.h) */
	_Atomic int exports;        /* exports running (hostd/transfer.c) */
};

/* Test hook: when $BERTH_TEST_CRASH_AT equals POINT, log it, write
 * STATE/crash-point and stop here for good, so a test can SIGKILL hostd in
 * the middle of a multi-step operation. */
void hostd_crash_point(struct hostd *h, const char *point);

#endif
