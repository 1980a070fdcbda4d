/* A machine's attributes beyond its row (table machine_attrs): a
 * deadline, metadata and an environment.  Any machine may have them (the
 * /v1 API sets them at create and with PATCH); berth-web's E2B API
 * (web/e2b.h) is what uses all three.
 *
 *   deadline   "expires_in" seconds from now (or a duration, "10m"; 0,
 *              null or "never": none); at
 *              that time the machine is deleted when its "expire_action"
 *              is "delete" (the default), whatever its state; suspended
 *              (its memory kept) when it is "suspend" and the machine
 *              runs, else when it next runs; that suspend clears the
 *              deadline.  Checked with the idle policy's pass (every
 *              idle_check_interval, hostd/idle.h), which may also suspend
 *              a quiet machine before its deadline, as any other.
 *   metadata   a JSON object of strings (at most ATTRS_MAX_PAIRS pairs,
 *              keys up to 256 bytes, values up to 4096), shown and
 *              matched, never interpreted.
 *   env        the same, whose keys are environment names
 *              ([A-Za-z_][A-Za-z0-9_]*): the environment its commands get
 *              through the E2B data plane (web/envd.c).
 *
 * The machine's JSON (hostd/machine_json.h) carries "expires" (0: none),
 * "expires_in_s" (when set), "expire_action", "metadata" and "env". */
#ifndef BERTH_ATTRS_H
#define BERTH_ATTRS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/err.h"

struct hostd;

#define ATTRS_MAX_PAIRS 64
#define ATTRS_MAX_EXPIRES_S (366LL * 86400)

/* What a request asks to change (borrowed from its JSON). */
struct attrs_req {
	bool expires_set;       /* "expires_in" was given */
	int64_t expires_in;     /* seconds from now; 0: no deadline */
	const char *action;     /* "suspend", "delete"; NULL: unchanged */
	json_t *metadata;       /* replaces it; NULL: unchanged */
	json_t *env;            /* replaces it; NULL: unchanged */
};

/* The fields "expires_in", "expire_action", "metadata" and "env" of the
 * request body J into *R (pointing into J).  0, or 400 with E naming the
 * bad field and why. */
int attrs_parse(json_t *j, struct attrs_req *r, struct err *e);
/* Whether R changes anything. */
bool attrs_any(const struct attrs_req *r);
/* Apply R to machine ID (a deadline counted from now).  0, or -1 with E. */
int attrs_apply(struct hostd *h, const char *id, const struct attrs_req *r, struct err *e);
/* Append machine ID's attributes to B, the inside of its JSON object:
 * ,"expires":T,"expires_in_s":N,"expire_action":A,"metadata":{},"env":{}. */
void attrs_json_write(struct hostd *h, const char *id, struct buf *b);
/* Meet every deadline that has passed on a running machine (the idle
 * policy's thread, each pass). */
void attrs_check(struct hostd *h);

#endif
