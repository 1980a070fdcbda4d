/* Logging to stderr with level, time, file:line and function (STYLE.md #9).
 * The level is checked before the message is formatted. */
#ifndef BERTH_LOG_H
#define BERTH_LOG_H

#include <stdbool.h>

enum log_level { LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG };

extern enum log_level log_threshold;

/* Parse "error", "warn", "info" or "debug"; returns 0, or -1 if unknown. */
int log_level_parse(const char *s, enum log_level *out);
/* Prefix every line with PROG (e.g. "berth-hostd"). PROG is not copied. */
void log_init(const char *prog);
void log_msg(enum log_level lvl, const char *file, int line,
	     const char *func, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

#define LOG_AT(lvl, ...) \
	do { \
		if ((lvl) <= log_threshold) \
			log_msg((lvl), __FILE__, __LINE__, __func__, __VA_ARGS__); \
	} while (0)
#define log_error(...) LOG_AT(LOG_ERROR, __VA_ARGS__)
#define log_warn(...)  LOG_AT(LOG_WARN, __VA_ARGS__)
#define log_info(...)  LOG_AT(LOG_INFO, __VA_ARGS__)
#define log_debug(...) LOG_AT(LOG_DEBUG, __VA_ARGS__)

#endif
