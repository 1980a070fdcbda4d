/* berth template: create, ls, show, rm (hostd/template.h). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "common/util.h"
#include "common/banned.h"

static void print_templates(json_t *r, void *data)
{
	json_t *t;
	size_t i;

	(void)data;
	printf("%-20s %-12s %5s %8s %8s %-16s %s\n", "NAME", "IMAGE", "VCPUS", "MEMORY",
	       "SAVED", "OWNER", "SETUP");
	json_array_foreach(json_object_get(r, "templates"), i, t) {
		char mem[32], saved[32], owner[80];
		cli_fmt_size(t, "memory", mem, sizeof(mem));
		cli_fmt_size(t, "memory_size", saved, sizeof(saved));
		snprintf(owner, sizeof(owner), "%s%s", cli_jstr(t, "owner"),
			 json_is_true(json_object_get(t, "public")) ? " (public)" : "");
		printf("%-20s %-12s %5lld %8s %8s %-16s %s\n", cli_jstr(t, "name"),
		       cli_jstr(t, "image"), cli_jint(t, "vcpus"), mem, saved, owner,
		       *cli_jstr(t, "setup") ? cli_jstr(t, "setup") : "-");
	}
}

static void print_template(json_t *r, void *data)
{
	json_t *one = json_pack("{s:[O]}", "templates", r);

	(void)data;
	print_templates(one, NULL);
	json_decref(one);
}

static void print_deleted(json_t *r, void *data)
{
	(void)r;
	printf("deleted template %s\n", (const char *)data);
}

static int template_create(struct client *c, int argc, char **argv)
{
	json_t *body = json_object(), *r = NULL;
	const char *v, *name = NULL;
	int rc = 2;
	int64_t t0 = mono_ms();

	for (int i = 2; i < argc; i++) {
		if ((v = cli_optval(argc, argv, &i, "--image")))
			json_object_set_new(body, "image", json_string(v));
		else if ((v = cli_optval(argc, argv, &i, "--run")))
			json_object_set_new(body, "run", json_string(v));
		else if ((v = cli_optval(argc, argv, &i, "--timeout"))) {
			char *end;
			long n = strtol(v, &end, 10);
			if (*end || end == v || n < 1) {
				fprintf(stderr, "berth: --timeout takes seconds, not '%s'\n", v);
				goto out;
			}
			json_object_set_new(body, "timeout", json_integer(n));
		}
		else if ((v = cli_optval(argc, argv, &i, "--vcpus")) ||
			 (v = cli_optval(argc, argv, &i, "--cpus"))) {
			char *end;
			long n = strtol(v, &end, 10);
			if (*end || end == v) {
				fprintf(stderr, "berth: --vcpus takes a number, not '%s'\n", v);
				goto out;
			}
			json_object_set_new(body, "vcpus", json_integer(n));
		} else if ((v = cli_optval(argc, argv, &i, "--memory")))
			json_object_set_new(body, "memory", json_string(v));
		else if ((v = cli_optval(argc, argv, &i, "--disk")))
			json_object_set_new(body, "disk", json_string(v));
		else if (!strcmp(argv[i], "--public"))
			json_object_set_new(body, "public", json_true());
		else if (argv[i][0] != '-' && !name)
			name = argv[i];
		else {
			fprintf(stderr, "berth template create: unexpected argument '%s'\n", argv[i]);
			goto out;
		}
	}
	if (!name) {
		fprintf(stderr, "usage: berth template create NAME --image IMAGE [--run 'COMMAND'] "
			"[--vcpus N] [--memory 512M] [--disk 4G] [--timeout S] [--public]\n");
		goto out;
	}
	json_object_set_new(body, "name", json_string(name));
	if (!c->json)
		fprintf(stderr, "building template %s (boot, setup, save)…\n", name);
	rc = 1;
	if (cli_call(c, "POST", "/v1/templates", body, &r) < 0)
		goto out;
	if (c->json) {
		cli_print_json(r);
	} else {
		fputs(cli_jstr(r, "output"), stdout);
		fprintf(stderr, "template %s made in %.1f s\n", name,
			(double)(mono_ms() - t0) / 1000.0);
	}
	rc = 0;
out:
	json_decref(r);
	json_decref(body);
	return rc;
}

int cmd_template(struct client *c, int argc, char **argv)
{
	char path[256];

	if (argc == 2 && !strcmp(argv[1], "ls"))
		return cli_call_print(c, "GET", "/v1/templates", NULL, print_templates, NULL);
	if (argc >= 2 && !strcmp(argv[1], "create"))
		return template_create(c, argc, argv);
	if (argc == 3 && (!strcmp(argv[1], "rm") || !strcmp(argv[1], "show"))) {
		if (!name_valid(argv[2])) {
			fprintf(stderr, "berth: invalid template name '%s'\n", argv[2]);
			return 2;
		}
		snprintf(path, sizeof(path), "/v1/templates/%s", argv[2]);
		if (!strcmp(argv[1], "show"))
			return cli_call_print(c, "GET", path, NULL, print_template, NULL);
		return cli_call_print(c, "DELETE", path, NULL, print_deleted, argv[2]);
	}
	fprintf(stderr, "usage: berth template create NAME --image IMAGE [--run 'COMMAND'] "
		"[--vcpus N] [--memory 512M] [--disk 4G] [--timeout S] [--public]\n"
		"       berth template ls | show NAME | rm NAME\n");
	return 2;
}
