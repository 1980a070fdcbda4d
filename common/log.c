#include "common/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/banned.h"

enum log_level log_threshold = LOG_INFO;
static const char *log_prog = "berth";

static const char *const level_names[] = { "error", "warn", "info", "debug" };

int log_level_parse(const char *s, enum log_level *out)
{
	for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
		if (strcmp(s, level_names[i]) == 0) {
			*out = (enum log_level)i;
			return 0;
		}
	}
	return -1;
}

void log_init(const char *prog)
{
	log_prog = prog;
}

void log_msg(enum log_level lvl, const char *file, int line,
	     const char *func, const char *fmt, ...)
{
	char msg[2048];
	char when[32];
	struct timespec ts;
	struct tm tm;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
	/* One fprintf per line so concurrent threads do not interleave. */
	if (log_threshold >= LOG_DEBUG)
		fprintf(stderr, "%s.%03ldZ %s %s: %s (%s:%d %s)\n", when,
			ts.tv_nsec / 1000000, log_prog, level_names[lvl], msg,
			file, line, func);
	else
		fprintf(stderr, "%s.%03ldZ %s %s: %s\n", when,
			ts.tv_nsec / 1000000, log_prog, level_names[lvl], msg);
}
