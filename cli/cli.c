#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/hostapi.h"
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

/* ---- a progress bar ---- */

/* Ask hostd how far the export of P's machine is. */
static void export_poll(struct cli_progress *p)
{
	char path[160], err[256];
	json_t *r = NULL, *op;
	long status;

	snprintf(path, sizeof(path), "/v1/machines/%s", p->machine);
	if (hostapi_call_as(p->c->sock, client_token(p->c), "GET", path, NULL, &status, &r, err,
			    sizeof(err)) == 0 &&
	    status == 200 && (op = json_object_get(r, "operation"))) {
		p->done = (uint64_t)cli_jint(op, "done");
		p->total = (uint64_t)cli_jint(op, "total");
	}
	json_decref(r);
}

void cli_progress_draw(uint64_t done, uint64_t total, void *data)
{
	struct cli_progress *p = data;
	int64_t now = mono_ms();
	char d[32], t[32], rate[32], eta[32] = "";
	double secs = (double)(now - p->t0) / 1000.0;

	if (!p->on || (p->any && now - p->drawn < 200 && (!total || done < total)))
		return;
	p->any = true;
	p->drawn = now;
	uint64_t written = done;
	if (p->machine) {
		export_poll(p);
		done = p->done;
		total = p->total;
		if (!total) {
			size_format(written, d, sizeof(d));
			fprintf(stderr, "\r\033[K%s  %s written  %.0f s", p->label, d, secs);
			return;
		}
	}
	size_format(done, d, sizeof(d));
	size_format(secs > 0.05 ? (uint64_t)((double)done / secs) : 0, rate, sizeof(rate));
	if (total) {
		int width = 24, fill = (int)((double)width * (double)done / (double)total);
		char bar[32];
		for (int i = 0; i < width; i++)
			bar[i] = i < fill ? '#' : '-';
		bar[width] = '\0';
		size_format(total, t, sizeof(t));
		if (done > 0 && done < total) {
			double left = secs * (double)(total - done) / (double)done;
			snprintf(eta, sizeof(eta), "  ~%.0f s left", left);
		}
		fprintf(stderr, "\r\033[K%s [%s] %3d%%  %s / %s  %s/s%s", p->label, bar,
			(int)(100.0 * (double)done / (double)total), d, t, rate, eta);
		if (p->machine) {
			size_format(written, d, sizeof(d));
			fprintf(stderr, "  (%s written)", d);
		}
	} else {
		fprintf(stderr, "\r\033[K%s  %s  %s/s  %.0f s", p->label, d, rate, secs);
	}
}

void cli_progress_end(struct cli_progress *p)
{
	if (p->on && p->any)
		fprintf(stderr, "\r\033[K");
}
