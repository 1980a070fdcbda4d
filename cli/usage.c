/* berth usage [--since T] [--all] [--json|--csv]: what machines cost, per
 * machine and per user, from hostd's meter. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "common/util.h"
#include "common/banned.h"

/* T as seconds since the epoch: an integer (epoch), a duration back from
 * now ("90s", "15m", "24h", "7d"), or a UTC date "YYYY-MM-DD[THH:MM[:SS]]". */
static int parse_since(const char *t, long long *out)
{
	char *end;
	struct tm tm;
	long long v;

	errno = 0;
	v = strtoll(t, &end, 10);
	if (!errno && end != t && v >= 0) {
		long long unit = 0;
		if (!*end)
			unit = -1;
		else if (!strcmp(end, "s"))
			unit = 1;
		else if (!strcmp(end, "m"))
			unit = 60;
		else if (!strcmp(end, "h"))
			unit = 3600;
		else if (!strcmp(end, "d"))
			unit = 86400;
		if (unit == -1) {
			*out = v;
			return 0;
		}
		if (unit > 0 && strlen(t) < 12) {
			*out = (long long)time(NULL) - v * unit;
			return 0;
		}
	}
	const char *fmts[] = { "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d", NULL };
	for (int i = 0; fmts[i]; i++) {
		memset(&tm, 0, sizeof(tm));
		end = strptime(t, fmts[i], &tm);
		if (end && !*end) {
			*out = (long long)timegm(&tm);
			return 0;
		}
	}
	return -1;
}

static void csv_field(const char *s)
{
	if (!strpbrk(s, ",\"\n")) {
		fputs(s, stdout);
		return;
	}
	putchar('"');
	for (; *s; s++) {
		if (*s == '"')
			putchar('"');
		putchar(*s);
	}
	putchar('"');
}

/* The usage answer R as CSV. */
static void print_csv(json_t *r)
{
	json_t *m;
	size_t i;

	printf("machine_id,owner,name,deleted,running_s,storage_gib_s,compute,storage,"
	       "total,currency\n");
	json_array_foreach(json_object_get(r, "machines"), i, m) {
		csv_field(cli_jstr(m, "machine_id"));
		putchar(',');
		csv_field(cli_jstr(m, "owner"));
		putchar(',');
		csv_field(cli_jstr(m, "name"));
		printf(",%s,%lld,%lld,%s,%s,%s,", json_is_true(json_object_get(m, "deleted"))
		       ? "true" : "false", cli_jint(m, "running_s"), cli_jint(m, "storage_gib_s"),
		       cli_jstr(m, "compute"), cli_jstr(m, "storage"), cli_jstr(m, "total"));
		csv_field(cli_jstr(r, "currency"));
		putchar('\n');
	}
}

/* The usage answer R as a table, or as CSV when *DATA (a bool) says so. */
static void print_usage(json_t *r, void *data)
{
	json_t *m;
	size_t i;

	if (*(const bool *)data) {
		print_csv(r);
		return;
	}
	const char *cur = cli_jstr(r, "currency");
	printf("%-20s %-10s %10s %14s %14s %14s %14s\n", "MACHINE", "OWNER", "RUNNING s",
	       "STORAGE GiB-h", "COMPUTE", "STORAGE", "TOTAL");
	json_array_foreach(json_object_get(r, "machines"), i, m) {
		char name[80];
		snprintf(name, sizeof(name), "%s%s", cli_jstr(m, "name"),
			 json_is_true(json_object_get(m, "deleted")) ? " (deleted)" : "");
		printf("%-20s %-10s %10lld %14.3f %14s %14s %14s\n", name, cli_jstr(m, "owner"),
		       cli_jint(m, "running_s"), (double)cli_jint(m, "storage_gib_s") / 3600.0,
		       cli_jstr(m, "compute"), cli_jstr(m, "storage"), cli_jstr(m, "total"));
	}
	json_array_foreach(json_object_get(r, "users"), i, m)
		printf("user %-15s %10lld s running  %s %s\n", cli_jstr(m, "owner"),
		       cli_jint(m, "running_s"), cli_jstr(m, "total"), cur);
	printf("total %s %s\n", cli_jstr(r, "total"), cur);
}

int cmd_usage(struct client *c, int argc, char **argv)
{
	const char *since = NULL, *v;
	bool csv = false, all = false;
	long long t = 0;
	char path[128];

	for (int j = 1; j < argc; j++) {
		if ((v = cli_optval(argc, argv, &j, "--since")))
			since = v;
		else if (!strcmp(argv[j], "--csv"))
			csv = true;
		else if (!strcmp(argv[j], "--all"))
			all = true;
		else {
			fprintf(stderr, "usage: berth usage [--since T] [--all] [--json|--csv]\n"
				"  T: seconds since the epoch, 15m, 24h, 7d, or 2026-11-01[T12:00]\n");
			return 2;
		}
	}
	if (since && parse_since(since, &t) < 0) {
		fprintf(stderr, "berth: --since '%s' is not a time (seconds since the epoch, "
			"a duration such as 24h or 7d, or a date such as 2026-11-01)\n", since);
		return 2;
	}
	snprintf(path, sizeof(path), "/v1/usage?since=%lld%s", t, all ? "&all=1" : "");
	return cli_call_print(c, "GET", path, NULL, print_usage, &csv);
}
