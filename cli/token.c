/* berth token create [--name N] | ls | rm ID: API tokens for the
 * dashboard and the HTTP API.  The secret is printed once, at creation. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "common/banned.h"

static void fmt_time(json_t *o, const char *k, char *out, size_t outlen)
{
	json_t *v = json_object_get(o, k);
	time_t t;
	struct tm tm;

	if (!json_is_integer(v)) {
		snprintf(out, outlen, "never");
		return;
	}
	t = (time_t)json_integer_value(v);
	gmtime_r(&t, &tm);
	strftime(out, outlen, "%Y-%m-%d %H:%M:%SZ", &tm);
}

static int token_create(struct client *c, int argc, char **argv)
{
	const char *name = NULL, *v;
	json_t *body, *r;

	for (int j = 2; j < argc; j++) {
		if ((v = cli_optval(argc, argv, &j, "--name"))) {
			name = v;
		} else {
			fprintf(stderr, "usage: berth token create [--name N] [--json]\n");
			return 2;
		}
	}
	body = name ? json_pack("{s:s}", "name", name) : json_object();
	if (!body) {
		fprintf(stderr, "berth: the token name must be UTF-8 text\n");
		return 2;
	}
	if (cli_call(c, "POST", "/v1/tokens", body, &r) < 0) {
		json_decref(body);
		return 1;
	}
	json_decref(body);
	/* The same secret in E2B's shape, E2B_API_KEY for its SDKs
	 * (web/e2b.h): e2b_ and the token's hex digits. */
	const char *tok = cli_jstr(r, "token");
	char e2b[128] = "";
	if (!strncmp(tok, "berth_", 6))
		snprintf(e2b, sizeof(e2b), "e2b_%s", tok + 6);
	if (c->json) {
		if (e2b[0])
			json_object_set_new(r, "e2b_key", json_string(e2b));
		cli_print_json(r);
	} else {
		printf("%s\n", tok);
		fprintf(stderr, "token %lld (%s) created: keep it now, it is not shown again; "
			"berth token rm %lld revokes it\n", cli_jint(r, "id"), cli_jstr(r, "name"),
			cli_jint(r, "id"));
		if (e2b[0])
			fprintf(stderr, "the same token as an E2B API key (E2B_API_KEY): %s\n", e2b);
	}
	json_decref(r);
	return 0;
}

static void print_tokens(json_t *r, void *data)
{
	json_t *t;
	size_t i;

	(void)data;
	printf("%-5s %-24s %-21s %s\n", "ID", "NAME", "CREATED", "LAST USED");
	json_array_foreach(json_object_get(r, "tokens"), i, t) {
		char created[32], used[32];
		fmt_time(t, "created", created, sizeof(created));
		fmt_time(t, "last_used", used, sizeof(used));
		printf("%-5lld %-24s %-21s %s\n", cli_jint(t, "id"), cli_jstr(t, "name"), created,
		       used);
	}
}

int cmd_token(struct client *c, int argc, char **argv)
{
	if (argc >= 2 && !strcmp(argv[1], "create"))
		return token_create(c, argc, argv);
	if (argc == 2 && (!strcmp(argv[1], "ls") || !strcmp(argv[1], "list")))
		return cli_call_print(c, "GET", "/v1/tokens", NULL, print_tokens, NULL);
	if (argc == 3 && !strcmp(argv[1], "rm"))
		return cli_delete_id(c, "token", "/v1/tokens", argv[2], "revoked");
	fprintf(stderr, "usage: berth token create [--name N] | token ls | token rm ID\n");
	return 2;
}
