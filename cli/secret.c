/* berth secret add NAME --url URL --header LINE... | ls | rm NAME | log:
 * the credentials the broker attaches to machines' calls (hostd/secrets.h).
 * A header's value goes to hostd once and is never shown again; given as
 * `--header Name` (no colon), it is read from stdin (without echo on a
 * terminal), so that it is in no process's arguments and no shell's
 * history. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "common/util.h"
#include "common/banned.h"

#define ADD_USAGE "usage: berth secret add NAME --url https://HOST[/PATH] --header 'Name: value'\n" \
		  "       (--header Name reads the value from stdin; up to 8 headers)\n"

/* "NAME: VALUE" with VALUE a line of stdin, into a new string; NULL when
 * none could be read (said why). */
static char *header_from_stdin(const char *name)
{
	struct termios old, quiet;
	bool tty = isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &old) == 0;
	char *line = NULL, *out = NULL;
	size_t cap = 0;
	ssize_t n;

	if (tty) {
		fprintf(stderr, "value of header %s (not echoed): ", name);
		quiet = old;
		quiet.c_lflag &= ~(tcflag_t)ECHO;
		tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet);
	}
	n = getline(&line, &cap, stdin);
	if (tty) {
		tcsetattr(STDIN_FILENO, TCSAFLUSH, &old);
		fputc('\n', stderr);
	}
	if (n <= 0) {
		fprintf(stderr, "berth: no value for header %s on stdin\n", name);
	} else {
		line[strcspn(line, "\r\n")] = '\0';
		size_t len = strlen(name) + 2 + strlen(line) + 1;
		out = malloc(len);
		if (!out)
			abort();
		snprintf(out, len, "%s: %s", name, line);
	}
	if (line) {
		explicit_bzero(line, cap);
		free(line);
	}
	return out;
}

static int secret_add(struct client *c, int argc, char **argv)
{
	const char *name = NULL, *url = NULL, *v;
	json_t *headers = json_array(), *body = NULL, *r = NULL;
	int rc = 2;

	for (int i = 2; i < argc; i++) {
		if ((v = cli_optval(argc, argv, &i, "--url"))) {
			url = v;
		} else if ((v = cli_optval(argc, argv, &i, "--header"))) {
			json_t *hl;
			if (strchr(v, ':')) {
				hl = json_string(v);
			} else {
				char *line = header_from_stdin(v);
				if (!line)
					goto out;
				hl = json_string(line);
				explicit_bzero(line, strlen(line));
				free(line);
			}
			/* (json_string refuses what is not UTF-8: said, not dropped) */
			if (json_array_append_new(headers, hl) < 0) {
				fprintf(stderr, "berth: header %.*s: its value must be UTF-8 text "
					"(an API key is ASCII)\n", (int)strcspn(v, ":"), v);
				goto out;
			}
		} else if (argv[i][0] != '-' && !name) {
			name = argv[i];
		} else {
			fputs(ADD_USAGE, stderr);
			goto out;
		}
	}
	if (!name || !url || json_array_size(headers) == 0) {
		fputs(ADD_USAGE, stderr);
		goto out;
	}
	body = json_pack("{s:s, s:s, s:O}", "name", name, "url", url, "headers", headers);
	if (!body) {
		fprintf(stderr, "berth: the name, URL and headers must be UTF-8 text\n");
		goto out;
	}
	rc = 1;
	if (cli_call(c, "POST", "/v1/secrets", body, &r) < 0)
		goto out;
	rc = 0;
	if (c->json)
		cli_print_json(r);
	else
		printf("secret %s added: %s (machines reach it at $%s once allowed: berth set "
		       "MACHINE --secret %s)\n", cli_jstr(r, "name"), cli_jstr(r, "url"),
		       cli_jstr(r, "variable"), cli_jstr(r, "name"));
out:
	json_decref(r);
	json_decref(body);
	json_decref(headers);
	return rc;
}

static void print_list(json_t *a, const char *sep)
{
	json_t *v;
	size_t i;

	if (!json_array_size(a))
		printf("-");
	json_array_foreach(a, i, v)
		printf("%s%s", i ? sep : "", json_string_value(v));
}

static void print_secrets(json_t *r, void *data)
{
	json_t *s;
	size_t i;

	(void)data;
	printf("%-20s %-40s %-24s %s\n", "NAME", "URL", "HEADERS", "MACHINES");
	json_array_foreach(json_object_get(r, "secrets"), i, s) {
		printf("%-20s %-40s ", cli_jstr(s, "name"), cli_jstr(s, "url"));
		print_list(json_object_get(s, "headers"), ",");
		printf(" ");
		print_list(json_object_get(s, "machines"), ",");
		printf("\n");
	}
}

static void print_log(json_t *r, void *data)
{
	json_t *k;
	size_t i;

	(void)data;
	printf("%-20s %-16s %-16s %-7s %-32s %6s %10s %10s %8s\n", "TIME", "MACHINE", "SECRET",
	       "METHOD", "PATH", "STATUS", "BYTES_IN", "BYTES_OUT", "MS");
	json_array_foreach(json_object_get(r, "calls"), i, k) {
		char when[32];
		time_t t = (time_t)cli_jint(k, "time");
		struct tm tm;
		gmtime_r(&t, &tm);
		strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%SZ", &tm);
		printf("%-20s %-16s %-16s %-7s %-32s %6lld %10lld %10lld %8lld%s%s\n", when,
		       cli_jstr(k, "machine"), cli_jstr(k, "secret"), cli_jstr(k, "method"),
		       cli_jstr(k, "path"), cli_jint(k, "status"), cli_jint(k, "bytes_in"),
		       cli_jint(k, "bytes_out"), cli_jint(k, "ms"),
		       *cli_jstr(k, "error") ? "  " : "", cli_jstr(k, "error"));
	}
}

static int secret_log(struct client *c, int argc, char **argv)
{
	const char *secret = NULL, *machine = NULL, *limit = NULL, *v;
	char path[512];

	for (int i = 2; i < argc; i++) {
		if ((v = cli_optval(argc, argv, &i, "--machine"))) {
			machine = v;
		} else if ((v = cli_optval(argc, argv, &i, "--limit"))) {
			limit = v;
		} else if (argv[i][0] != '-' && !secret) {
			secret = argv[i];
		} else {
			fprintf(stderr, "usage: berth secret log [NAME] [--machine M] [--limit N]\n");
			return 2;
		}
	}
	if ((secret && !name_valid(secret)) || (machine && !name_valid(machine)) ||
	    (limit && strspn(limit, "0123456789") != strlen(limit))) {
		fprintf(stderr, "berth: invalid secret or machine name, or limit\n");
		return 2;
	}
	/* Names are URL-safe as they are. */
	snprintf(path, sizeof(path), "/v1/secrets/log?limit=%.20s%s%s%s%s",
		 limit ? limit : "100", secret ? "&secret=" : "", secret ? secret : "",
		 machine ? "&machine=" : "", machine ? machine : "");
	return cli_call_print(c, "GET", path, NULL, print_log, NULL);
}

int cmd_secret(struct client *c, int argc, char **argv)
{
	char path[256];

	if (argc >= 2 && !strcmp(argv[1], "add"))
		return secret_add(c, argc, argv);
	if (argc == 2 && (!strcmp(argv[1], "ls") || !strcmp(argv[1], "list")))
		return cli_call_print(c, "GET", "/v1/secrets", NULL, print_secrets, NULL);
	if (argc >= 2 && !strcmp(argv[1], "log"))
		return secret_log(c, argc, argv);
	if (argc == 3 && !strcmp(argv[1], "rm")) {
		json_t *r = NULL;
		if (!name_valid(argv[2])) {
			fprintf(stderr, "berth: invalid secret name '%s'\n", argv[2]);
			return 2;
		}
		snprintf(path, sizeof(path), "/v1/secrets/%s", argv[2]);
		if (cli_call(c, "DELETE", path, NULL, &r) < 0)
			return 1;
		if (c->json)
			cli_print_json(r);
		else
			printf("removed secret %s\n", argv[2]);
		json_decref(r);
		return 0;
	}
	fprintf(stderr, ADD_USAGE "       berth secret ls | secret rm NAME | secret log [NAME] "
		"[--machine M] [--limit N]\n");
	return 2;
}
