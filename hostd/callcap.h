/* The credential broker's calls open at once (hostd/secrets.h), counted
 * per machine, per owner and in all, each with its cap: every call holds
 * a connection of webctl.sock's (hostd/webctl.h) and a thread of hostd's
 * until it ends (a model's stream, minutes), so without caps one user's
 * guests could hold every connection and starve everyone's calls, the
 * previews, their logins and berth-web's watch connection.  Thread-safe. */
#ifndef BERTH_CALLCAP_H
#define BERTH_CALLCAP_H

#include "common/err.h"

struct callcap;

/* The caps: a machine's calls, an owner's machines' calls, all calls
 * (WEBCTL_MAX_CONNS less webctl_reserved_connections). */
struct callcap_limits {
	int per_machine, per_user, total;
	int reserved;              /* for the message: what the total leaves */
};

/* A new counter (NULL when out of memory); callcap_free (NULL is fine). */
struct callcap *callcap_new(void);
void callcap_free(struct callcap *c);
/* A place for a call of MACHINE (its id; NAME for the message) of OWNER
 * under L: 0, counted until callcap_give; else -1 with E, the first cap
 * reached in that order: 429 "too_many_calls" naming
 * broker_max_calls_per_machine or broker_max_calls_per_user, 503
 * "broker_busy" naming webctl_reserved_connections. */
int callcap_take(struct callcap *c, const char *owner, const char *machine, const char *name,
		 const struct callcap_limits *l, struct err *e);
/* That call's end. */
void callcap_give(struct callcap *c, const char *owner, const char *machine);
/* The calls open: of MACHINE, of OWNER (either NULL for all). */
int callcap_count(struct callcap *c, const char *owner, const char *machine);

#endif
