/* Machines: create, start, stop, suspend, resume, restart, wake, delete.
 * The parts of the machine module: machine.c (this: the lifecycle),
 * memimage.c (suspend and wake), reconcile.c (start-up and libvirt's
 * events), machine_json.c (the API's JSON), checkpoint.c (checkpoints,
 * restore, forks); the steps they share are in machine_steps.h. */
#ifndef BERTH_MACHINE_H
#define BERTH_MACHINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hostd/db.h"
#include "hostd/hostd.h"
#include "hostd/virt.h"

struct create_req {
	const char *owner;
	const char *name;
	const char *image;
	int vcpus;
	uint64_t memory;   /* bytes */
	uint64_t disk;     /* bytes; 0 = the image's size */
	int64_t idle_timeout; /* as struct machine's: 0 = the config's, -1 = never */
	const char *egress; /* its egress policy (hostd/egress.h); NULL: the config's */
	bool start;        /* start it once made */
	bool wait;         /* with start: until its SSH answers */
	/* Not NULL: gets the new machine's own SSH host key, the private half
	 * (OpenSSH PEM, as in its seed), for a live start to hand the running
	 * guest (checkpoint_live_start); the caller wipes and frees it. */
	char **host_key_private;
};

enum machine_action { ACT_START, ACT_STOP, ACT_SUSPEND, ACT_RESUME, ACT_RESTART };

struct act_opts {
	int timeout_s;     /* stop: ACPI grace period; 0 = config's */
	bool wait;         /* start/resume/restart: wait until SSH answers */
};

/* Parse "start", "stop", ...; -1 when unknown. */
int machine_action_parse(const char *s, enum machine_action *out);

/* Create machine R->name.  Validates everything first (400/404/409 with
 * the reason); on any later failure removes what it made.  Its storage is
 * sampled at once (billed from now).  With R->start it is started too (and
 * waited for with R->wait, *READY_MS then the time until SSH answered, else
 * -1; READY_MS may be NULL); a start that fails deletes it: a running
 * machine or nothing.  Fills OUT. */
int machine_create(struct hostd *h, const struct create_req *r, struct machine *out,
		   int64_t *ready_ms, struct err *e);
/* Do ACTION on OWNER's machine NAME; fills OUT with the result.  When
 * waiting, *READY_MS gets the time from the action to SSH answering. */
int machine_act(struct hostd *h, const char *owner, const char *name,
		enum machine_action action, const struct act_opts *o,
		struct machine *out, int64_t *ready_ms, struct err *e);
/* Delete OWNER's machine NAME: its domain, saved memory, volumes (but what
 * forks need), seed, row and the gateways' sessions on it. */
int machine_delete(struct hostd *h, const char *owner, const char *name,
		   struct err *e);
/* OWNER's machine NAME into OUT; when it is running with an operation in
 * progress (a suspend by the idle policy, say), after waiting up to a
 * minute for that to end and reading it again.  What a connection reads
 * before it uses a machine. */
int machine_settle(struct hostd *h, const char *owner, const char *name,
		   struct machine *out, struct err *e);
/* Make OWNER's machine NAME run for a connection (the SSH credential, the
 * desktop, anything later): machine_settle, then a stopped machine is
 * started and a suspended one resumed, waiting out another operation on
 * it (up to a minute).  WAIT: until its SSH answers.  *WOKE_MS: how long
 * the wake took (counted in /metrics), -1 when it was running.  E must not
 * be NULL. */
int machine_wake(struct hostd *h, const char *owner, const char *name, bool wait,
		 struct machine *out, int64_t *woke_ms, struct err *e);
/* The checks machine_set_egress makes of POLICY before it changes
 * anything: 0, or -1 with E. */
int machine_egress_check(struct hostd *h, const char *policy, struct err *e);
/* Set machine M's egress policy to POLICY ("default": egress_default's):
 * checked whole (400 "invalid_egress" naming the rule), applied to the
 * network at once (a running machine's connections it no longer allows
 * are cut), then recorded.  Nothing changes on failure. */
int machine_set_egress(struct hostd *h, struct machine *m, const char *policy,
		       struct err *e);
/* Make sure M's pinned host key is the one it answers with, before its
 * SSH credential goes to a client: a key given in its seed (HK_SEED) is
 * checked once, by hostd reading the key the running machine presents;
 * the same confirms it, another is pinned instead (its image ignores the
 * seed: trust on first use, logged).  M (and its row) are updated.
 * Nothing to do for a key already confirmed or pinned.  503 "unreachable"
 * when the machine does not answer. */
int machine_host_key(struct hostd *h, struct machine *m, struct err *e);
/* The machine's SSH endpoint.  1 when it has none yet (nat, no lease). */
int machine_endpoint(struct hostd *h, const struct machine *m, char *host,
		     size_t hostlen, int *port, struct err *e);

/* Where and how an SSH client reaches a running machine as berth. */
struct machine_ssh {
	struct machine m;
	char host[64];
	int port;
	char user[64];     /* its image's login user */
	int64_t woke_ms;   /* machine_wake's; -1 when it was running */
};
/* OWNER's running machine NAME for an SSH connection about to start
 * (berth exec's credential, hostd's own exec): woken first when WAKE
 * (machine_wake), its host key confirmed or first pinned
 * (machine_host_key; a failure there is logged and the key pinned so far
 * used), and marked active for the idle policy.  0, or -1 with E: 409
 * "not_running" (OUT->m holds the machine, with its state), 503
 * "no_address", the lookup's or the wake's errors. */
int machine_ssh(struct hostd *h, const char *owner, const char *name, bool wake,
		struct machine_ssh *out, struct err *e);
/* How long hostd's own SSH connections to a machine may take to connect
 * and log in: a guest under TCG on a loaded host takes tens of seconds to
 * answer, or to restart its sshd: a third of boot_timeout (60 s by
 * default), 20 s at least. */
int machine_ssh_timeout_ms(const struct hostd *h);

/* Start an operation OP (a string with static storage) on OWNER's machine
 * NAME: look it up, mark it busy, read it again under the mark and read
 * libvirt's state into *VS.  409 "busy" while it is being created or
 * deleted, or another operation holds it.  On success the caller ends with
 * machine_end, which records libvirt's state and drops the mark. */
int machine_begin(struct hostd *h, const char *owner, const char *name, const char *op,
		  struct machine *m, enum vstate *vs, struct err *e);
void machine_end(struct hostd *h, struct machine *m);

/* Log, for every running machine, a QEMU that runs privileged (as root, a
 * group root or with capabilities: one started before berth ran QEMU
 * unprivileged) or as another uid than the machine's.  Start-up only. */
void machine_check_qemus(struct hostd *h);
/* The UNIX socket QEMU binds machine ID's SPICE agent port to (the
 * clipboard, berth-desktop's). */
void machine_agent_path(struct hostd *h, const char *id, char *out, size_t outlen);

#endif
