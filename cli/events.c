/* berth events [MACHINE] [--all] [--limit N] [--after ID] [--follow]: what
 * happened to the caller's machines, and why (GET /v1/events). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "common/util.h"
#include "common/banned.h"

#define USAGE "usage: berth events [MACHINE] [--all] [--limit N] [--after ID] [--follow]\n"

static void print_events(json_t *r, bool all, bool head)
{
	json_t *ev;
	size_t i;

	if (head)
		printf("%-24s %s%-16s %-14s %s\n", "TIME", all ? "OWNER            " : "",
		       "MACHINE", "EVENT", "CAUSE");
	json_array_foreach(json_object_get(r, "events"), i, ev) {
		if (all)
			printf("%-24s %-16s %-16s %-14s %s\n", cli_jstr(ev, "time"),
			       cli_jstr(ev, "owner"), cli_jstr(ev, "machine"), cli_jstr(ev, "kind"),
			       cli_jstr(ev, "cause"));
		else
			printf("%-24s %-16s %-14s %s\n", cli_jstr(ev, "time"),
			       cli_jstr(ev, "machine"), cli_jstr(ev, "kind"), cli_jstr(ev, "cause"));
	}
	fflush(stdout);
}

/* The id of R's last event, or AFTER when it has none. */
static long long last_id(json_t *r, long long after)
{
	json_t *evs = json_object_get(r, "events");
	size_t n = json_array_size(evs);

	return n ? cli_jint(json_array_get(evs, n - 1), "id") : after;
}

int cmd_events(struct client *c, int argc, char **argv)
{
	const char *machine = NULL, *limit = "100", *after_s = NULL, *v;
	bool all = false, follow = false;
	char path[256];
	json_t *r;

	for (int i = 1; i < argc; i++) {
		if ((v = cli_optval(argc, argv, &i, "--limit")))
			limit = v;
		else if ((v = cli_optval(argc, argv, &i, "--after")))
			after_s = v;
		else if (!strcmp(argv[i], "--all"))
			all = true;
		else if (!strcmp(argv[i], "--follow") || !strcmp(argv[i], "-f"))
			follow = true;
		else if (argv[i][0] != '-' && !machine)
			machine = argv[i];
		else {
			fputs(USAGE, stderr);
			return 2;
		}
	}
	if (machine && !name_valid(machine)) {
		fprintf(stderr, "berth: invalid machine name '%s'\n", machine);
		return 2;
	}
	if (!*limit || strspn(limit, "0123456789") != strlen(limit) || strlen(limit) > 6 ||
	    (after_s && (!*after_s || strspn(after_s, "0123456789") != strlen(after_s) ||
			 strlen(after_s) > 18))) {
		fprintf(stderr, "berth: --limit and --after take numbers\n");
		return 2;
	}
	/* Without --after, the newest first; then (--follow) page after page
	 * of what came after the last one shown. */
	long long after = after_s ? atoll(after_s) : -1;
	for (bool first = true;; first = false) {
		char from[32] = "";
		size_t got;
		if (after >= 0)
			snprintf(from, sizeof(from), "&after=%lld", after);
		/* Names and numbers are URL-safe as they are. */
		snprintf(path, sizeof(path), "/v1/events?limit=%s%s%s%s%s", limit, from,
			 machine ? "&machine=" : "", machine ? machine : "", all ? "&all=1" : "");
		if (cli_call(c, "GET", path, NULL, &r) < 0)
			return 1;
		got = json_array_size(json_object_get(r, "events"));
		if (c->json) {
			if (follow) {
				/* One line an event, as it comes. */
				json_t *ev;
				size_t i;
				json_array_foreach(json_object_get(r, "events"), i, ev) {
					char *s = json_dumps(ev, JSON_COMPACT);
					printf("%s\n", s);
					free(s);
				}
				fflush(stdout);
			} else {
				cli_print_json(r);
			}
		} else {
			print_events(r, all, first);
		}
		after = last_id(r, after < 0 ? 0 : after);
		json_decref(r);
		if (!follow)
			return 0;
		if (got < (size_t)atoi(limit))
			sleep(1);	/* a full page: the next one at once */
	}
}
