/* An error that carries its story: the HTTP status it maps to, a stable
 * machine-readable code and a message naming the object and the cause
 * (STYLE.md #7).  The first error set is kept: later err_set calls on an
 * error that is already set do nothing, so a rollback cannot overwrite the
 * cause. */
#ifndef BERTH_ERR_H
#define BERTH_ERR_H

#include <stdbool.h>
#include <stddef.h>

struct err {
	int status;        /* HTTP status: 400, 404, 409, 413, 500, ... 0 = none */
	char code[40];     /* "invalid_name", "not_found", ... */
	char msg[1024];
};

/* Set E (when E is non-NULL and not already set); always returns -1 so
 * callers can write `return err_set(e, ...)`. */
int err_set(struct err *e, int status, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* Like err_set, appending ": strerror(errnum)". */
int err_errno(struct err *e, int errnum, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
bool err_isset(const struct err *e);
void err_clear(struct err *e);

#endif
