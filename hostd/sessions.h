/* The gateways' live sessions (an SSH connection or a desktop viewer on a
 * machine), kept in memory: the gateway opens one when it connects a user
 * to a machine and closes it when the connection ends.  The count per
 * machine shows in the machine's JSON, and the idle policy reads it: a
 * machine with a session is not idle.  Thread-safe (a mutex); sessions do
 * not outlive hostd (the gateways' connections to machines do, but a
 * restarted hostd counts none until they reconnect). */
#ifndef BERTH_SESSIONS_H
#define BERTH_SESSIONS_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

struct sessions;

struct session {
	int64_t id;
	char machine_id[37];  /* the machine's UUID */
	char owner[64];
	char machine[64];     /* its name */
	char kind[16];        /* "ssh" or "desktop" */
	char from[64];        /* the client's address, as the gateway saw it */
	int64_t opened;       /* seconds since the epoch */
};

struct sessions *sessions_new(void);
/* Frees S and every session in it; NULL is fine. */
void sessions_free(struct sessions *s);

/* Record a session of KIND from FROM on OWNER's machine MACHINE (UUID
 * MACHINE_ID).  Returns its id (> 0), or -1 with E set (400
 * "invalid_kind" unless KIND is "ssh" or "desktop"). */
int64_t sessions_open(struct sessions *s, const char *machine_id, const char *owner,
		      const char *machine, const char *kind, const char *from,
		      struct err *e);
/* End session ID of KIND (NULL: any), logging its duration and the bytes
 * the gateway counted; fills *OUT (may be NULL) with what it was.  404
 * "not_found" when there is no such session (closed already, its machine
 * was deleted, or it is of another kind). */
int sessions_close(struct sessions *s, int64_t id, const char *kind, uint64_t bytes_in,
		   uint64_t bytes_out, struct session *out, struct err *e);
/* Live sessions on machine MACHINE_ID. */
int sessions_count(struct sessions *s, const char *machine_id);
/* Forget every session of KIND: its gateway (re)started, so none of them
 * is live any more.  Returns how many. */
int sessions_drop_kind(struct sessions *s, const char *kind);
/* Forget the sessions of machine MACHINE_ID (it was deleted); how many. */
int sessions_drop_machine(struct sessions *s, const char *machine_id);

#endif
