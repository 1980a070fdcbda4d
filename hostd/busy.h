/* The table of operations in progress, keyed by machine id or
 * "image:NAME": a second operation on the same object gets 409 "busy"
 * instead of racing the first.  An entry may carry the progress of a long
 * operation (an export's bytes) for the machine's JSON.  Thread-safe. */
#ifndef BERTH_BUSY_H
#define BERTH_BUSY_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"

struct busy;

/* An empty table (aborts when out of memory).  Free with busy_free. */
struct busy *busy_new(void);
void busy_free(struct busy *b);

/* Mark KEY busy with OP (a string with static storage: it is kept).  409
 * "busy" naming WHAT and the operation in progress when KEY already is;
 * 503 "overloaded" when the table is full. */
int busy_acquire(struct busy *b, const char *key, const char *op, const char *what,
		 struct err *e);
/* Drop KEY's mark (nothing when it has none). */
void busy_release(struct busy *b, const char *key);
/* Whether KEY is marked. */
bool busy_held(struct busy *b, const char *key);
/* The operation on KEY has done DONE of TOTAL bytes. */
void busy_progress(struct busy *b, const char *key, uint64_t done, uint64_t total);
/* The operation on KEY and its progress (TOTAL 0: none told); false when
 * KEY is not marked. */
bool busy_get(struct busy *b, const char *key, const char **op, uint64_t *done,
	      uint64_t *total);

#endif
