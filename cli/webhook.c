/* berth webhook add URL [--events k,k] [--machine M] | ls | rm ID | log ID:
 * lifecycle-event webhooks (hostd/webhooks.h).  The secret that signs the
 * deliveries is printed once, at creation. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "common/banned.h"

#define USAGE "usage: berth webhook add URL [--events KIND,KIND...] [--machine NAME]\n" \
	      "       berth webhook ls | webhook rm ID | webhook log ID [--limit N]\n"     \
	      "  add: POST each of your machines' lifecycle events (created, started, woke,\n" \
	      "       suspended, stopped, restarted, checkpointed, restored, forked, deleted,\n" \
	      "       quota_refused; all by default) to URL, signed with a secret printed\n" \
	      "       once (X-Berth-Signature: sha256=HMAC(secret, TIMESTAMP.BODY))\n"        \
	      "  log: the deliveries: attempts, last status or error, state\n"

/* O's seconds K as UTC, or "-" when absent. */
static void fmt_time(json_t *o, const char *k, char *out, size_t outlen)
{
	json_t *v = json_object_get(o, k);
	time_t t;
	struct tm tm;

	if (!json_is_integer(v)) {
		snprintf(out, outlen, "-");
		return;
	}
	t = (time_t)json_integer_value(v);
	gmtime_r(&t, &tm);
	strftime(out, outlen, "%Y-%m-%d %H:%M:%SZ", &tm);
}

static int webhook_add(struct client *c, int argc, char **argv)
{
	const char *url = NULL, *events = NULL, *machine = NULL, *v;
	json_t *body, *r;

	for (int j = 2; j < argc; j++) {
		if ((v = cli_optval(argc, argv, &j, "--events"))) {
			events = v;
		} else if ((v = cli_optval(argc, argv, &j, "--machine"))) {
			machine = v;
		} else if (argv[j][0] != '-' && !url) {
			url = argv[j];
		} else {
			fputs(USAGE, stderr);
			return 2;
		}
	}
	if (!url) {
		fputs(USAGE, stderr);
		return 2;
	}
	body = json_pack("{s:s}", "url", url);
	if (!body) {
		fprintf(stderr, "berth: the URL must be UTF-8 text\n");
		return 2;
	}
	if (events) {
		json_t *arr = json_array();
		const char *p = events;
		while (*p) {
			size_t n = strcspn(p, ",");
			json_array_append_new(arr, json_stringn(p, n));
			p += n;
			if (*p == ',')
				p++;
		}
		json_object_set_new(body, "events", arr);
	}
	if (machine)
		json_object_set_new(body, "machine", json_string(machine));
	if (cli_call(c, "POST", "/v1/webhooks", body, &r) < 0) {
		json_decref(body);
		return 1;
	}
	json_decref(body);
	if (c->json) {
		cli_print_json(r);
	} else {
		printf("%s\n", cli_jstr(r, "secret"));
		fprintf(stderr, "webhook %lld to %s added; the line above is its secret, which "
			"signs each delivery: keep it now, it is not shown again\n",
			cli_jint(r, "id"), cli_jstr(r, "url"));
	}
	json_decref(r);
	return 0;
}

static void print_hooks(json_t *r, void *data)
{
	json_t *w, *k;
	size_t i, j;

	(void)data;
	printf("%-5s %-21s %-12s %-30s %s\n", "ID", "CREATED", "MACHINE", "EVENTS", "URL");
	json_array_foreach(json_object_get(r, "webhooks"), i, w) {
		char created[32], evs[256] = "";
		size_t len = 0;
		json_t *list = json_object_get(w, "events");
		fmt_time(w, "created", created, sizeof(created));
		if (json_array_size(list) == 11) {
			snprintf(evs, sizeof(evs), "all");
		} else {
			json_array_foreach(list, j, k) {
				int m = snprintf(evs + len, sizeof(evs) - len, "%s%s", j ? "," : "",
						 json_string_value(k));
				if (m < 0 || (size_t)m >= sizeof(evs) - len)
					break;
				len += (size_t)m;
			}
		}
		printf("%-5lld %-21s %-12s %-30s %s\n", cli_jint(w, "id"), created,
		       json_is_string(json_object_get(w, "machine")) ? cli_jstr(w, "machine") :
		       "all", evs, cli_jstr(w, "url"));
	}
}

static void print_log(json_t *r, void *data)
{
	json_t *d;
	size_t i;

	(void)data;
	printf("%-7s %-7s %-13s %-10s %-8s %-21s %s\n", "ID", "EVENT", "KIND", "STATE",
	       "ATTEMPTS", "LAST ATTEMPT", "LAST ANSWER");
	json_array_foreach(json_object_get(r, "deliveries"), i, d) {
		char last[32], answer[300];
		fmt_time(d, "last_attempt", last, sizeof(last));
		if (json_is_string(json_object_get(d, "last_error")))
			snprintf(answer, sizeof(answer), "%s", cli_jstr(d, "last_error"));
		else if (json_is_integer(json_object_get(d, "last_status")))
			snprintf(answer, sizeof(answer), "HTTP %lld", cli_jint(d, "last_status"));
		else
			snprintf(answer, sizeof(answer), "-");
		if (!strcmp(cli_jstr(d, "state"), "pending") &&
		    json_is_integer(json_object_get(d, "next_attempt"))) {
			char next[32];
			size_t n = strlen(answer);
			fmt_time(d, "next_attempt", next, sizeof(next));
			snprintf(answer + n, sizeof(answer) - n, " (next try %s)", next);
		}
		printf("%-7lld %-7lld %-13s %-10s %-8lld %-21s %s\n", cli_jint(d, "id"),
		       cli_jint(d, "event_id"), cli_jstr(d, "kind"), cli_jstr(d, "state"),
		       cli_jint(d, "attempts"), last, answer);
	}
}

static int webhook_log(struct client *c, int argc, char **argv)
{
	const char *limit = NULL, *v;
	char *end, path[96];
	long long id = strtoll(argv[2], &end, 10);

	if (argv[2][0] < '1' || argv[2][0] > '9' || *end) {
		fprintf(stderr, "berth: invalid webhook id '%s': a positive integer (berth webhook "
			"ls shows them)\n", argv[2]);
		return 2;
	}
	for (int j = 3; j < argc; j++) {
		if ((v = cli_optval(argc, argv, &j, "--limit"))) {
			limit = v;
		} else {
			fputs(USAGE, stderr);
			return 2;
		}
	}
	if (limit && limit[strspn(limit, "0123456789")]) {
		fprintf(stderr, "berth: --limit must be a number\n");
		return 2;
	}
	snprintf(path, sizeof(path), "/v1/webhooks/%lld/deliveries%s%.12s", id,
		 limit ? "?limit=" : "", limit ? limit : "");
	return cli_call_print(c, "GET", path, NULL, print_log, NULL);
}

int cmd_webhook(struct client *c, int argc, char **argv)
{
	if (argc >= 2 && !strcmp(argv[1], "add"))
		return webhook_add(c, argc, argv);
	if (argc == 2 && (!strcmp(argv[1], "ls") || !strcmp(argv[1], "list")))
		return cli_call_print(c, "GET", "/v1/webhooks", NULL, print_hooks, NULL);
	if (argc == 3 && !strcmp(argv[1], "rm"))
		return cli_delete_id(c, "webhook", "/v1/webhooks", argv[2], "removed");
	if (argc >= 3 && !strcmp(argv[1], "log"))
		return webhook_log(c, argc, argv);
	fputs(USAGE, stderr);
	return argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) ? 0 : 2;
}
