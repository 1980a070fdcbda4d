/* berth preview NAME PORT [--public] | ls [--all] | rm NAME PORT: a
 * program listening on PORT in machine NAME, reached through berth-web at
 * http(s)://PORT-NAME-USER.DOMAIN/ (hostd/preview.h).  A private preview
 * (the default) prints a one-time link that lets one browser in; --public
 * opens it to anyone; running it again without --public makes it private
 * again and prints a new link. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "common/banned.h"

#define USAGE "usage: berth preview NAME PORT [--public] | preview ls [--all] | " \
	      "preview rm NAME PORT\n"

/* "/v1/machines/NAME/previews/PORT" into OUT; false (said why) when the
 * port is not a number. */
static bool preview_path(const char *name, const char *port, char *out, size_t outlen)
{
	char *end;
	long p = strtol(port, &end, 10);

	if (*end || end == port || p < 1 || p > 65535) {
		fprintf(stderr, "berth: bad port '%s': a number from 1 to 65535\n", port);
		return false;
	}
	snprintf(out, outlen, "/v1/machines/%s/previews/%ld", name, p);
	return true;
}

static int preview_put(struct client *c, int argc, char **argv)
{
	const char *name = NULL, *port = NULL;
	bool public_ = false;
	char path[256];
	json_t *body, *r;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--public"))
			public_ = true;
		else if (argv[i][0] != '-' && !name)
			name = argv[i];
		else if (argv[i][0] != '-' && !port)
			port = argv[i];
		else
			goto usage;
	}
	if (!name || !port)
		goto usage;
	if (!preview_path(name, port, path, sizeof(path)))
		return 2;
	body = json_pack("{s:b}", "public", public_);
	if (cli_call(c, "PUT", path, body, &r) < 0) {
		json_decref(body);
		return 1;
	}
	json_decref(body);
	if (c->json) {
		cli_print_json(r);
	} else if (public_) {
		printf("%s\n", cli_jstr(r, "url"));
		fprintf(stderr, "preview of %s port %lld: public, anyone with the address opens "
			"it; berth preview %s %lld makes it private again\n", name,
			cli_jint(r, "port"), name, cli_jint(r, "port"));
	} else {
		printf("%s\n", cli_jstr(r, "link"));
		fprintf(stderr, "preview of %s port %lld: private, at %s\nopen the link above "
			"once in your browser (within %lld minutes): it lets that browser in\n",
			name, cli_jint(r, "port"), cli_jstr(r, "url"),
			(cli_jint(r, "link_expires") - (long long)time(NULL) + 59) / 60);
	}
	json_decref(r);
	return 0;
usage:
	fputs(USAGE, stderr);
	return 2;
}

static void print_previews(json_t *r, void *data)
{
	bool all = *(bool *)data;
	json_t *p;
	size_t i;

	if (all)
		printf("%-16s ", "USER");
	printf("%-20s %-6s %-8s %s\n", "MACHINE", "PORT", "ACCESS", "URL");
	json_array_foreach(json_object_get(r, "previews"), i, p) {
		if (all)
			printf("%-16s ", cli_jstr(p, "owner"));
		printf("%-20s %-6lld %-8s %s\n", cli_jstr(p, "machine"), cli_jint(p, "port"),
		       json_is_true(json_object_get(p, "public")) ? "public" : "private",
		       cli_jstr(p, "url"));
	}
}

int cmd_preview(struct client *c, int argc, char **argv)
{
	char path[256];

	/* ls, list and rm are subcommands only in their own shapes: `berth
	 * preview ls 8080` is machine ls's port 8080. */
	if (argc >= 2 && (!strcmp(argv[1], "ls") || !strcmp(argv[1], "list")) &&
	    (argc == 2 || (argc == 3 && !strcmp(argv[2], "--all")))) {
		bool all = argc == 3;
		return cli_call_print(c, "GET", all ? "/v1/previews?all=1" : "/v1/previews", NULL,
				      print_previews, &all);
	}
	if (argc == 4 && !strcmp(argv[1], "rm") && argv[2][0] != '-' && argv[3][0] != '-') {
		json_t *r;
		if (!preview_path(argv[2], argv[3], path, sizeof(path)))
			return 2;
		if (cli_call(c, "DELETE", path, NULL, &r) < 0)
			return 1;
		if (c->json)
			cli_print_json(r);
		else
			printf("removed the preview of %s port %s\n", argv[2], argv[3]);
		json_decref(r);
		return 0;
	}
	/* `berth preview rm m`: a forgotten port, not machine rm's port m. */
	if (argc >= 2 && !strcmp(argv[1], "rm") && (argc < 3 || argv[2][strspn(argv[2],
									       "0123456789")]))
		goto usage;
	return preview_put(c, argc, argv);
usage:
	fputs(USAGE, stderr);
	return 2;
}
