#include "common/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/banned.h"

static void err_vset(struct err *e, int status, const char *code,
		     const char *fmt, va_list ap)
{
	snprintf(e->code, sizeof(e->code), "%s", code);
	e->status = status;
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
}

int err_set(struct err *e, int status, const char *code, const char *fmt, ...)
{
	va_list ap;

	if (!e || err_isset(e))
		return -1;
	va_start(ap, fmt);
	err_vset(e, status, code, fmt, ap);
	va_end(ap);
	return -1;
}

int err_errno(struct err *e, int errnum, const char *fmt, ...)
{
	va_list ap;
	size_t len;

	if (!e || err_isset(e))
		return -1;
	va_start(ap, fmt);
	err_vset(e, 500, "internal", fmt, ap);
	va_end(ap);
	len = strlen(e->msg);
	snprintf(e->msg + len, sizeof(e->msg) - len, ": %s", strerror(errnum));
	return -1;
}

bool err_isset(const struct err *e)
{
	return e && e->status != 0;
}

void err_clear(struct err *e)
{
	if (e) {
		e->status = 0;
		e->code[0] = '\0';
		e->msg[0] = '\0';
	}
}
