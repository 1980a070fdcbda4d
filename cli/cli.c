#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "common/banned.h"

int cli_call(const struct client *c, const char *method, const char *path,
	     json_t *body, json_t **resp)
{
	long status;
	char err[1024];

	if (client_call(c, method, path, body, &status, resp, err, sizeof(err)) < 0) {
		fprintf(stderr, "berth: %s\n", err);
		return -1;
	}
	if (status >= 200 && status < 300 && *resp)
		return 0;
	json_t *msg = json_object_get(json_object_get(*resp, "error"), "message");
	fprintf(stderr, "berth: %s\n", json_is_string(msg) ? json_string_value(msg)
							  : "unexpected answer from hostd");
	if (c->json && *resp)
		json_dumpf(*resp, stdout, JSON_INDENT(2)), fputc('\n', stdout);
	json_decref(*resp);
	*resp = NULL;
	return -1;
}

int cli_call_print(const struct client *c, const char *method, const char *path,
		   json_t *body, cli_print_fn *print, void *data)
{
	json_t *r;

	if (cli_call(c, method, path, body, &r) < 0)
		return 1;
	if (c->json)
		cli_print_json(r);
	else if (print)
		print(r, data);
	json_decref(r);
	return 0;
}

/* What cli_delete_id deleted, for its printer. */
struct deleted {
	const char *done, *what;
	long long id;
};

static void print_deleted(json_t *r, void *data)
{
	const struct deleted *d = data;

	(void)r;
	printf("%s %s %lld\n", d->done, d->what, d->id);
}

int cli_delete_id(const struct client *c, const char *what, const char *route,
		  const char *id_s, const char *done)
{
	char *end, path[128];
	struct deleted d = { done, what, strtoll(id_s, &end, 10) };

	if (*end || end == id_s || d.id <= 0) {
		fprintf(stderr, "berth: invalid %s id '%s' (berth %s ls shows them)\n", what, id_s,
			what);
		return 2;
	}
	snprintf(path, sizeof(path), "%s/%lld", route, d.id);
	return cli_call_print(c, "DELETE", path, NULL, print_deleted, &d);
}

void cli_print_json(json_t *j)
{
	json_dumpf(j, stdout, JSON_INDENT(2));
	fputc('\n', stdout);
}

const char *cli_jstr(json_t *o, const char *k)
{
	const char *s = json_string_value(json_object_get(o, k));
	return s ? s : "";
}

long long cli_jint(json_t *o, const char *k)
{
	return (long long)json_integer_value(json_object_get(o, k));
}

void cli_fmt_size(json_t *o, const char *k, char *out, size_t outlen)
{
	json_t *v = json_object_get(o, k);
	if (!json_is_integer(v)) {
		snprintf(out, outlen, "-");
		return;
	}
	size_format((uint64_t)json_integer_value(v), out, outlen);
}

const char *cli_optval(int argc, char **argv, int *i, const char *name)
{
	size_t n = strlen(name);

	if (strncmp(argv[*i], name, n) == 0 && argv[*i][n] == '=')
		return argv[*i] + n + 1;
	if (strcmp(argv[*i], name) == 0 && *i + 1 < argc)
		return argv[++*i];
	return NULL;
}
