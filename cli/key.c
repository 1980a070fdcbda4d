/* berth key add FILE|- | ls | rm ID: the SSH public keys of the caller,
 * which the gateway accepts for `ssh NAME@host`. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "common/banned.h"

/* berth key add FILE: every key line of FILE ("-": stdin), each added
 * on its own; a line that fails does not stop the others. */
static int key_add(struct client *c, const char *file)
{
	FILE *f = strcmp(file, "-") == 0 ? stdin : fopen(file, "re");
	char *line = NULL;
	size_t cap = 0;
	int lineno = 0, added = 0, failed = 0;
	json_t *out = json_pack("{s:[], s:[]}", "added", "failed");

	if (!f) {
		fprintf(stderr, "berth: cannot read %s: %s\n", file, strerror(errno));
		json_decref(out);
		return 1;
	}
	while (getline(&line, &cap, f) >= 0) {
		char *p = line + strspn(line, " \t"), err[1024];
		long status;
		json_t *body, *r = NULL, *msg;
		lineno++;
		p[strcspn(p, "\r\n")] = '\0';
		if (*p == '\0' || *p == '#')
			continue;
		body = json_pack("{s:s}", "key", p);
		if (client_call(c, "POST", "/v1/keys", body, &status, &r, err, sizeof(err)) < 0) {
			fprintf(stderr, "berth: %s\n", err);
			json_decref(body);
			failed++;
			break;
		}
		json_decref(body);
		if (status == 201 && r) {
			added++;
			if (!c->json)
				printf("added key %lld: %s %s%s%s\n", cli_jint(r, "id"),
				       cli_jstr(r, "type"), cli_jstr(r, "fingerprint"),
				       *cli_jstr(r, "comment") ? " " : "", cli_jstr(r, "comment"));
			json_array_append(json_object_get(out, "added"), r);
		} else {
			failed++;
			msg = json_object_get(json_object_get(r, "error"), "message");
			fprintf(stderr, "berth: %s:%d: %s\n", strcmp(file, "-") ? file : "stdin",
				lineno, json_is_string(msg) ? json_string_value(msg)
							    : "unexpected answer from hostd");
			json_array_append_new(json_object_get(out, "failed"),
					      json_pack("{s:i, s:O*}", "line", lineno, "error",
							json_object_get(r, "error")));
		}
		json_decref(r);
	}
	if (f != stdin)
		fclose(f);
	free(line);
	if (added + failed == 0)
		fprintf(stderr, "berth: no key line in %s (expected 'TYPE BASE64 [COMMENT]', "
			"as in ~/.ssh/id_ed25519.pub)\n", strcmp(file, "-") ? file : "stdin");
	if (c->json)
		cli_print_json(out);
	json_decref(out);
	return added > 0 && failed == 0 ? 0 : 1;
}

static void print_keys(json_t *r, void *data)
{
	json_t *k;
	size_t i;

	(void)data;
	printf("%-5s %-34s %-50s %s\n", "ID", "TYPE", "FINGERPRINT", "COMMENT");
	json_array_foreach(json_object_get(r, "keys"), i, k)
		printf("%-5lld %-34s %-50s %s\n", cli_jint(k, "id"), cli_jstr(k, "type"),
		       cli_jstr(k, "fingerprint"), cli_jstr(k, "comment"));
}

int cmd_key(struct client *c, int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "add"))
		return key_add(c, argv[2]);
	if (argc == 2 && (!strcmp(argv[1], "ls") || !strcmp(argv[1], "list")))
		return cli_call_print(c, "GET", "/v1/keys", NULL, print_keys, NULL);
	if (argc == 3 && !strcmp(argv[1], "rm"))
		return cli_delete_id(c, "key", "/v1/keys", argv[2], "deleted");
	fprintf(stderr, "usage: berth key add FILE|- | key ls | key rm ID\n");
	return 2;
}

