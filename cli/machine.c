/* The machine commands of berth: ls, create and exec, and the verbs on
 * one machine (show, set, start, stop, suspend, resume, restart, rm,
 * checkpoints, checkpoint, checkpoint rm, restore, fork, desktop), which are
 * rows of one table run by verb_run. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "common/buf.h"
#include "common/hostapi.h"
#include "common/sshexec.h"
#include "common/util.h"
#include "common/banned.h"

static void print_machine_row(json_t *m)
{
	char mem[32], disk[32], alloc[32], ssh[80] = "-";
	json_t *s = json_object_get(m, "ssh");

	cli_fmt_size(m, "memory", mem, sizeof(mem));
	cli_fmt_size(m, "disk", disk, sizeof(disk));
	cli_fmt_size(m, "allocated", alloc, sizeof(alloc));
	if (json_is_object(s))
		snprintf(ssh, sizeof(ssh), "%s:%lld", cli_jstr(s, "host"), cli_jint(s, "port"));
	printf("%-20s %-10s %-10s %4lld %7s %7s %9s  %s\n", cli_jstr(m, "name"),
	       cli_jstr(m, "state"), cli_jstr(m, "image"), cli_jint(m, "vcpus"), mem, disk, alloc,
	       ssh);
}

static void print_machine_header(void)
{
	printf("%-20s %-10s %-10s %4s %7s %7s %9s  %s\n", "NAME", "STATE", "IMAGE", "CPUS",
	       "MEMORY", "DISK", "ALLOCATED", "SSH");
}

/* The table of one machine M (cli_print_fn). */
static void print_machine(json_t *m, void *data)
{
	(void)data;
	print_machine_header();
	print_machine_row(m);
}

/* The table of the machines of listing R (cli_print_fn). */
static void print_machines(json_t *r, void *data)
{
	json_t *m;
	size_t i;

	(void)data;
	print_machine_header();
	json_array_foreach(json_object_get(r, "machines"), i, m)
		print_machine_row(m);
}

/* "idle: ..." for one machine M (cli_print_fn). */
static void print_idle(json_t *m, void *data)
{
	json_t *i = json_object_get(m, "idle");
	const char *t = cli_jstr(i, "timeout");

	(void)data;
	if (!i)
		return;
	if (!strcmp(t, "never"))
		printf("idle:       never suspended for being quiet%s\n",
		       json_is_true(json_object_get(i, "default")) ? " (the host's default)" : "");
	else
		printf("idle:       suspended after %s quiet%s\n", t,
		       json_is_true(json_object_get(i, "default")) ? " (the host's default)" : "");
	if (json_object_get(i, "quiet_s"))
		printf("            quiet for %llds (last activity: %s, CPU %lld%%)\n",
		       (long long)json_integer_value(json_object_get(i, "quiet_s")),
		       cli_jstr(i, "last_activity"),
		       (long long)json_integer_value(json_object_get(i, "cpu_percent")));
}

/* "egress: ..." and "host key: ..." for one machine M (cli_print_fn). */
static void print_egress_line(json_t *m, void *data)
{
	json_t *g = json_object_get(m, "egress");

	(void)data;
	if (g)
		printf("egress:     %s%s%s\n", cli_jstr(g, "policy"),
		       json_is_true(json_object_get(g, "truncated")) ? "\u2026" : "",
		       json_is_true(json_object_get(g, "default")) ? " (the host's default)" : "");
	if (*cli_jstr(m, "host_key"))
		printf("host key:   %.60s\u2026 (%s)\n", cli_jstr(m, "host_key"),
		       cli_jstr(m, "host_key_state"));
}

/* "secrets: ..." (those the broker gives it), when the answer says. */
static void print_secrets_line(json_t *m, void *data)
{
	json_t *a = json_object_get(m, "secrets"), *v;
	size_t i;

	(void)data;
	if (!json_is_array(a))
		return;
	printf("secrets:    %s", json_array_size(a) ? "" : "none");
	json_array_foreach(a, i, v)
		printf("%s%s", i ? ", " : "", json_string_value(v));
	printf("\n");
}

/* "expires: ..." and "metadata: ..." (hostd/attrs.h), when it has them. */
static void print_attrs(json_t *m, void *data)
{
	json_t *md = json_object_get(m, "metadata"), *v;
	const char *k;
	char t[32];
	bool first = true;

	(void)data;
	if (json_integer_value(json_object_get(m, "expires")) > 0) {
		duration_format(json_integer_value(json_object_get(m, "expires_in_s")), t,
				sizeof(t));
		printf("expires:    in %s (then %s)\n", t, cli_jstr(m, "expire_action"));
	}
	if (json_object_size(md) == 0)
		return;
	printf("metadata:   ");
	json_object_foreach(md, k, v) {
		printf("%s%s=%s", first ? "" : ", ", k, json_string_value(v));
		first = false;
	}
	printf("\n");
}

/* set: the settings it changes. */
static void print_settings(json_t *m, void *data)
{
	print_idle(m, data);
	print_egress_line(m, data);
	print_secrets_line(m, data);
	print_attrs(m, data);
}

/* The destinations of one list of an egress log. */
static void print_dests(const char *what, json_t *list)
{
	size_t i;
	json_t *d;

	printf("%s (last hour): %s\n", what, json_array_size(list) ? "" : "none");
	if (json_array_size(list))
		printf("  %-16s %-5s %6s %7s %9s\n", "ADDRESS", "PROTO", "PORT", "COUNT", "LAST");
	json_array_foreach(list, i, d)
		printf("  %-16s %-5s %6lld %7lld %8llds\n", cli_jstr(d, "address"),
		       cli_jstr(d, "protocol"), (long long)cli_jint(d, "port"),
		       (long long)cli_jint(d, "count"), (long long)cli_jint(d, "seconds_ago"));
}

static void print_egress(json_t *r, void *data)
{
	(void)data;
	printf("egress of %s: %s%s\n", cli_jstr(r, "machine"), cli_jstr(r, "policy"),
	       json_is_true(json_object_get(r, "default")) ? " (the host's default)" : "");
	print_dests("allowed", json_object_get(r, "allowed"));
	print_dests("denied", json_object_get(r, "denied"));
}

/* berth egress log NAME (or egress NAME): the policy and what it let
 * through and refused lately. */
int cmd_egress(struct client *c, int argc, char **argv)
{
	const char *name = argc == 3 && !strcmp(argv[1], "log") ? argv[2]
			   : argc == 2 ? argv[1] : NULL;
	char path[128];

	if (!name || name[0] == '-') {
		fputs("usage: berth egress log NAME   (berth set NAME --egress POLICY changes it)\n",
		      stderr);
		return 2;
	}
	if (!name_valid(name)) {
		fprintf(stderr, "berth: invalid machine name '%s'\n", name);
		return 2;
	}
	xsnprintf(path, sizeof(path), "/v1/machines/%s/egress", name);
	return cli_call_print(c, "GET", path, NULL, print_egress, NULL);
}

int cmd_ls(struct client *c, int argc, char **argv)
{
	(void)argc, (void)argv;
	return cli_call_print(c, "GET", "/v1/machines", NULL, print_machines, NULL);
}

int cmd_create(struct client *c, int argc, char **argv)
{
	json_t *body = json_object(), *r;
	const char *v, *name = NULL;
	bool start = true, wait = true;
	int rc = 2;
	int64_t t0 = mono_ms();

	for (int i = 1; i < argc; i++) {
		if ((v = cli_optval(argc, argv, &i, "--image")))
			json_object_set_new(body, "image", json_string(v));
		else if ((v = cli_optval(argc, argv, &i, "--cpus"))) {
			char *end;
			long n = strtol(v, &end, 10);
			if (*end || end == v) {
				fprintf(stderr, "berth: --cpus takes a number, not '%s'\n", v);
				goto out;
			}
			json_object_set_new(body, "vcpus", json_integer(n));
		} else if ((v = cli_optval(argc, argv, &i, "--memory")))
			json_object_set_new(body, "memory", json_string(v));
		else if ((v = cli_optval(argc, argv, &i, "--disk")))
			json_object_set_new(body, "disk", json_string(v));
		else if ((v = cli_optval(argc, argv, &i, "--idle")))
			json_object_set_new(body, "idle", json_string(v));
		else if ((v = cli_optval(argc, argv, &i, "--egress")))
			json_object_set_new(body, "egress", json_string(v));
		else if (!strcmp(argv[i], "--no-start"))
			start = false;
		else if (!strcmp(argv[i], "--no-wait"))
			wait = false;
		else if (argv[i][0] != '-' && !name)
			name = argv[i];
		else {
			fprintf(stderr, "berth create: unexpected argument '%s'\n", argv[i]);
			goto out;
		}
	}
	if (!name) {
		fprintf(stderr, "usage: berth create NAME [--image I] [--cpus N] [--memory 512M] "
			"[--disk 4G] [--idle 15m|never] [--egress POLICY] [--no-start] "
			"[--no-wait]\n");
		goto out;
	}
	json_object_set_new(body, "name", json_string(name));
	json_object_set_new(body, "start", json_boolean(start));
	json_object_set_new(body, "wait", json_boolean(start && wait));
	if (!c->json && start)
		fprintf(stderr, "creating %s…\n", name);
	rc = 1;
	if (cli_call(c, "POST", "/v1/machines", body, &r) < 0)
		goto out;
	if (!c->json && json_integer_value(json_object_get(r, "ready_ms")) > 0)
		fprintf(stderr, "%s is ready in %.1f s\n", name, (double)(mono_ms() - t0) / 1000.0);
	if (c->json)
		cli_print_json(r);
	else
		print_machine(r, NULL);
	json_decref(r);
	rc = 0;
out:
	json_decref(body);
	return rc;
}

/* ---- berth exec through hostd (every user but root) ----------------------
 *
 * POST /v1/machines/NAME/exec runs the command in hostd, which streams its
 * output as NDJSON lines (hostd/exec.h); the CLI writes them to its stdout
 * and stderr, and a thread sends its own stdin, piece by piece, to
 * .../exec/ID/stdin once the first line gave the id. */
struct api_exec {
	char sock[PATH_MAX];    /* hostd's (a copy: the thread outlives cmd_exec) */
	char token[128];        /* the API token through berth-web ("" on the socket) */
	const char *name;       /* in argv */
	struct buf line;        /* a line not complete yet */
	_Atomic long long id;   /* from the first line; 0 before */
	int status;             /* the exit status; 255 until the last line */
	bool ended;             /* the last line came */
	bool bad;               /* a line that did not parse */
};

/* One NDJSON line of the stream. */
static int api_exec_line(struct api_exec *x, const char *s, size_t n)
{
	json_t *j = json_loadb(s, n, 0, NULL), *v;
	struct buf out = BUF_INIT;
	int rc = 0;

	if (!json_is_object(j)) {
		json_decref(j);
		x->bad = true;
		return -1;
	}
	if ((v = json_object_get(j, "id")) && json_is_integer(v)) {
		if (json_integer_value(json_object_get(j, "woke_ms")) > 0)
			fprintf(stderr, "woke %s: ready in %.1f s\n", x->name,
				(double)json_integer_value(json_object_get(j, "woke_ms")) / 1000.0);
		atomic_store(&x->id, (long long)json_integer_value(v));
	} else if ((v = json_object_get(j, "stdout")) || (v = json_object_get(j, "stderr"))) {
		int fd = json_object_get(j, "stdout") ? 1 : 2;
		if (!json_is_string(v) ||
		    buf_add_unbase64(&out, json_string_value(v), json_string_length(v)) < 0) {
			x->bad = true;
			rc = -1;
		} else if (out.len && fd_write_all(fd, out.data, out.len) < 0) {
			rc = -1;	/* nobody reads (EPIPE): end, as a pipeline would */
			x->status = 141;
			x->ended = true;
		}
	} else if ((v = json_object_get(j, "exit")) && json_is_integer(v)) {
		x->status = (int)json_integer_value(v);
		if (json_is_true(json_object_get(j, "timed_out")))
			fprintf(stderr, "berth exec %s: the command timed out and was killed\n",
				x->name);
		x->ended = true;
	} else if ((v = json_object_get(j, "error"))) {
		fprintf(stderr, "berth exec %s: %s\n", x->name, hostapi_message(j, "failed"));
		x->status = 255;
		x->ended = true;
	}
	buf_free(&out);
	json_decref(j);
	return rc;
}

static int api_exec_sink(const char *p, size_t len, void *data)
{
	struct api_exec *x = data;
	size_t start = 0;

	buf_add(&x->line, p, len);
	for (size_t i = 0; i < x->line.len; i++) {
		if (x->line.data[i] != '\n')
			continue;
		if (api_exec_line(x, x->line.data + start, i - start) < 0)
			return -1;
		start = i + 1;
	}
	/* What is left is the start of the next line. */
	memmove(x->line.data, x->line.data + start, x->line.len - start);
	x->line.len -= start;
	x->line.data[x->line.len] = '\0';
	return 0;
}

/* The thread sending the CLI's stdin, 32 KiB a request, then its EOF. */
static void *api_exec_stdin(void *arg)
{
	struct api_exec *x = arg;
	char path[256], err[512], piece[32 * 1024];
	long long id;
	long status;
	json_t *r;
	ssize_t n;

	const char *token = x->token[0] ? x->token : NULL;

	while (!(id = atomic_load(&x->id)))
		usleep(2000);
	snprintf(path, sizeof(path), "/v1/machines/%s/exec/%lld/stdin", x->name, id);
	for (;;) {
		do
			n = read(0, piece, sizeof(piece));
		while (n < 0 && errno == EINTR);
		if (n <= 0) {
			snprintf(path, sizeof(path), "/v1/machines/%s/exec/%lld/stdin?eof=1",
				 x->name, id);
			if (hostapi_send_as(x->sock, token, "POST", path, "", 0,
					    "application/octet-stream", &status, &r, err,
					    sizeof(err)) == 0)
				json_decref(r);
			return NULL;
		}
		size_t done = 0;
		while (done < (size_t)n) {
			if (hostapi_send_as(x->sock, token, "POST", path, piece + done,
					    (size_t)n - done, "application/octet-stream", &status,
					    &r, err, sizeof(err)) < 0)
				return NULL;
			json_int_t w = json_integer_value(json_object_get(r, "written"));
			json_decref(r);
			/* 503 stdin_full: it took W; the rest again.  Anything
			 * else but 200 (stdin closed, the command ended): stop. */
			if (status != 200 && status != 503)
				return NULL;
			done += (size_t)w;
		}
	}
}

static int exec_api(struct client *c, const char *name, bool wake, int connect_ms, char **argv)
{
	/* Static: the stdin thread may still read it while the process exits. */
	static struct api_exec x;
	json_t *args = json_array(), *body, *r = NULL;
	char path[256], err[1024];
	pthread_t in;
	long status;
	int rc;

	x = (struct api_exec){ .name = name, .line = BUF_INIT, .status = 255 };
	snprintf(x.sock, sizeof(x.sock), "%s", c->sock);
	snprintf(x.token, sizeof(x.token), "%s", c->token);
	for (; *argv; argv++)
		json_array_append_new(args, json_string(*argv));
	body = json_pack("{s:o, s:b, s:b}", "argv", args, "wake", wake, "stdin_open", true);
	/* Unless given, hostd's own (a third of its boot_timeout, 20 s at least). */
	if (connect_ms > 0)
		json_object_set_new(body, "connect_timeout", json_integer(connect_ms / 1000));
	snprintf(path, sizeof(path), "/v1/machines/%s/exec", name);
	if (pthread_create(&in, NULL, api_exec_stdin, &x) == 0)
		pthread_detach(in);
	rc = hostapi_stream_as(c->sock, client_token(c), "POST", path, body, api_exec_sink, &x,
			       &status, &r, err, sizeof(err));
	json_decref(body);
	if (status && (status < 200 || status > 299)) {
		fprintf(stderr, "berth: %s\n", hostapi_message(r, "unexpected answer from hostd"));
		json_decref(r);
		buf_free(&x.line);
		return 255;
	}
	json_decref(r);
	if (x.bad)
		fprintf(stderr, "berth exec %s: a line of hostd's answer did not parse\n", name);
	else if (rc < 0 && !x.ended)
		fprintf(stderr, "berth exec %s: %s\n", name, err);
	else if (!x.ended)
		fprintf(stderr, "berth exec %s: hostd's answer ended without the command's\n",
			name);
	buf_free(&x.line);
	return x.ended ? x.status : 255;
}

int cmd_exec(struct client *c, int argc, char **argv)
{
	const char *name = NULL, *v;
	bool wake = true;
	int i, status = 255, connect_ms = 0;
	char path[256], err[1024];
	json_t *body, *r;
	char *cmd;

	for (i = 1; i < argc && strcmp(argv[i], "--"); i++) {
		if (!strcmp(argv[i], "--no-wake"))
			wake = false;
		else if ((v = cli_optval(argc, argv, &i, "--connect-timeout"))) {
			char *end;
			long s = strtol(v, &end, 10);
			if (end == v || *end || s < 1 || s > 3600) {
				fprintf(stderr, "berth exec: --connect-timeout '%s': "
					"not a whole number of seconds from 1 to 3600\n", v);
				return 2;
			}
			connect_ms = (int)s * 1000;
		} else if (argv[i][0] != '-' && !name)
			name = argv[i];
		else
			break;
	}
	if (!name || i >= argc || strcmp(argv[i], "--") || i + 1 >= argc) {
		fprintf(stderr, "usage: berth exec NAME [--no-wake] [--connect-timeout S] -- CMD [ARGS...]\n");
		return 2;
	}
	if (!name_valid(name)) {
		fprintf(stderr, "berth: invalid machine name '%s'\n", name);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	/* Root speaks SSH itself with the gateway key; every other user, and
	 * anyone through berth-web with a token, has hostd run the command. */
	if (geteuid() != 0 || client_token(c))
		return exec_api(c, name, wake, connect_ms, argv + i + 1);
	if (connect_ms == 0)
		connect_ms = 15000;
	snprintf(path, sizeof(path), "/v1/machines/%s/ssh", name);
	body = json_pack("{s:b}", "wake", wake);
	if (cli_call(c, "POST", path, body, &r) < 0) {
		json_decref(body);
		return 255;
	}
	json_decref(body);
	if (cli_jint(r, "woke_ms") > 0)
		fprintf(stderr, "woke %s: ready in %.1f s\n", name, (double)cli_jint(r, "woke_ms") / 1000.0);
	struct sshexec_target t = {
		.host = cli_jstr(r, "host"), .port = (int)cli_jint(r, "port"),
		.user = cli_jstr(r, "user"), .key_b64 = cli_jstr(r, "private_key"),
		.connect_timeout_ms = connect_ms, .host_key = cli_jstr(r, "host_key"),
	};
	cmd = sshexec_quote(argv + i + 1);
	if (!cmd) {
		json_decref(r);
		return 255;
	}
	signal(SIGPIPE, SIG_IGN);
	if (sshexec_run(&t, cmd, 0, 1, 2, &status, err, sizeof(err)) < 0) {
		fprintf(stderr, "berth exec %s: %s\n", name, err);
		status = 255;
	}
	free(cmd);
	json_decref(r);
	return status;
}

/* ---- the verbs on one machine ----------------------------------------------
 *
 * `berth VERB NAME [ARG] [OPTIONS]` is one request to hostd about machine
 * NAME: METHOD on a path made of NAME (and ARG), with a JSON body made of
 * defaults that the options change, and the answer printed (--json: its
 * JSON).  A row of the table says all of that for one verb; verb_run runs a
 * row.  The flags keep each verb reading its words as it always has. */

/* The words after the verb: the machine and the second word (NULL when
 * absent).  A verb's printer gets them as its DATA. */
struct verb_args {
	const char *name, *arg;
};

/* An option of a verb and what it does to the request's body. */
struct verb_opt {
	const char *name;	/* "--no-wait"; one that takes a value: "--from" */
	enum {
		OPT_TRUE,	/* sets FIELD true */
		OPT_FALSE,	/* sets FIELD false */
		OPT_DROP,	/* removes FIELD (hostd's default holds) */
		OPT_STRING,	/* "--idle 30m", "--idle=30m": FIELD is the value */
		OPT_INT,	/* FIELD is the value as an integer (atoi: "x" is 0) */
	} does;
	const char *field;
};

/* Flags of a verb: how its words are read. */
enum {
	V_ARG = 1,		/* takes a second word, ARG (required) */
	V_ARG_OPTIONAL = 2,	/* ... which may be left out */
	V_ARG_NAME = 4,		/* ARG must be a valid name too */
	V_DASH = 8,		/* a word starting with '-' may be NAME or ARG
				 * (restore: `restore web -x` asks for checkpoint -x) */
	V_SAY_UNEXPECTED = 16,	/* a word too many is named, not answered by the usage */
	V_NEED_FIELD = 32,	/* the usage unless an option set a field */
};

struct verb {
	const char *name;	/* the verb: argv[0] */
	/* A second word of the verb ("rm" of `checkpoint rm`), or NULL.  Such
	 * a verb is taken only with exactly NAME and ARG after it, so that
	 * `checkpoint rm web` is a checkpoint named web of the machine rm. */
	const char *sub;
	const char *alias;	/* another name for it, or NULL */
	/* A word that selects this row rather than the next of the same name
	 * (`desktop NAME --revoke`), or NULL.  Such a row comes first. */
	const char *when;
	const char *usage;	/* said (stderr, exit 2) when the words are wrong */
	/* When NAME (or with V_ARG_NAME, ARG) is not a valid name: said
	 * instead of the usage, or NULL. */
	const char *invalid;
	unsigned flags;
	const char *method;
	const char *path;	/* a printf format of NAME, then ARG */
	/* The body: its JSON before the options, or NULL to send none. */
	const char *body;
	const char *arg_field;	/* the body's field that ARG sets, or NULL */
	struct verb_opt opts[7];	/* up to the first without a name */
	void (*finish)(json_t *body);	/* optional: the body's last touch */
	cli_print_fn *print;	/* the answer as text; DATA: struct verb_args */
};

/* show: the machine's table, then its idle policy. */
static void print_shown(json_t *r, void *data)
{
	print_machine(r, data);
	print_idle(r, data);
	print_egress_line(r, data);
	print_secrets_line(r, data);
	print_attrs(r, data);
}

/* start, stop, suspend, resume, restart: the machine's state now. */
static void print_state(json_t *r, void *data)
{
	const struct verb_args *a = data;

	if (json_integer_value(json_object_get(r, "ready_ms")) > 0)
		printf("%s: %s, ready in %.1f s\n", a->name, cli_jstr(r, "state"),
		       (double)cli_jint(r, "ready_ms") / 1000.0);
	else
		printf("%s: %s\n", a->name, cli_jstr(r, "state"));
}

static void print_deleted(json_t *r, void *data)
{
	const struct verb_args *a = data;

	(void)r;
	printf("deleted %s\n", a->name);
}

static void print_checkpoints(json_t *r, void *data)
{
	json_t *ck;
	size_t i;

	(void)data;
	printf("%-40s %-21s %s\n", "CHECKPOINT", "CREATED", "MEMORY");
	json_array_foreach(json_object_get(r, "checkpoints"), i, ck) {
		char when[32];
		time_t t = (time_t)cli_jint(ck, "created");
		struct tm tm;
		gmtime_r(&t, &tm);
		strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%SZ", &tm);
		printf("%-40s %-21s %s\n", cli_jstr(ck, "name"), when,
		       json_is_true(json_object_get(ck, "memory")) ? "yes" : "-");
	}
}

static void print_checkpoint(json_t *r, void *data)
{
	const struct verb_args *a = data;

	printf("checkpoint %s of %s%s (%.1f ms)\n", cli_jstr(r, "name"), a->name,
	       json_is_true(json_object_get(r, "memory")) ? " with memory" : "",
	       json_number_value(json_object_get(r, "took_ms")));
}

static void print_checkpoint_deleted(json_t *r, void *data)
{
	const struct verb_args *a = data;

	(void)r;
	printf("deleted checkpoint %s of %s\n", a->arg, a->name);
}

static void print_restored(json_t *r, void *data)
{
	const struct verb_args *a = data;

	printf("%s: restored to %s, %s\n", a->name, a->arg, cli_jstr(r, "state"));
}

static void print_url(json_t *r, void *data)
{
	(void)data;
	printf("%s\n", cli_jstr(r, "url"));
}

static void print_desktop_revoked(json_t *r, void *data)
{
	const struct verb_args *a = data;

	printf("%s: %lld viewers cut, %lld desktop URLs voided\n", a->name,
	       (long long)cli_jint(r, "viewers"), (long long)cli_jint(r, "tokens"));
}

/* A fork waits only for a machine it starts (a live fork always starts). */
static void fork_finish(json_t *body)
{
	if (!json_is_true(json_object_get(body, "start")) &&
	    !json_is_true(json_object_get(body, "live")))
		json_object_set_new(body, "wait", json_false());
}

/* start, stop, suspend, resume, restart: BODY is {"wait": true} for the
 * verbs that wait for the machine by default, {} for those that do not. */
#define ACTION(verb, body_json)                                                     \
	{ .name = verb, .usage = "usage: berth " verb " NAME [--no-wait] [--timeout S]\n", \
	  .flags = V_SAY_UNEXPECTED, .method = "POST", .path = "/v1/machines/%s/" verb,    \
	  .body = body_json,                                                           \
	  .opts = { { "--no-wait", OPT_DROP, "wait" },                                 \
		    { "--timeout", OPT_INT, "timeout" } },                             \
	  .print = print_state }

static const struct verb verbs[] = {
	{ .name = "show", .usage = "usage: berth show NAME\n",
	  .method = "GET", .path = "/v1/machines/%s", .print = print_shown },
	{ .name = "set",
	  .usage = "usage: berth set NAME [--idle 30m|never|default] [--egress open|none|RULES|default]\n"
		   "                 [--secret S] [--no-secret S] [--expires 10m|never]\n"
		   "                 [--expire-action suspend|delete]\n",
	  .flags = V_SAY_UNEXPECTED | V_NEED_FIELD,
	  .method = "PATCH", .path = "/v1/machines/%s", .body = "{}",
	  .opts = { { "--idle", OPT_STRING, "idle" }, { "--egress", OPT_STRING, "egress" },
		    { "--secret", OPT_STRING, "secret" },
		    { "--no-secret", OPT_STRING, "no_secret" },
		    { "--expires", OPT_STRING, "expires_in" },
		    { "--expire-action", OPT_STRING, "expire_action" } },
	  .print = print_settings },
	ACTION("start", "{\"wait\": true}"),
	ACTION("stop", "{}"),
	ACTION("suspend", "{}"),
	ACTION("resume", "{\"wait\": true}"),
	ACTION("restart", "{\"wait\": true}"),
	{ .name = "rm", .alias = "delete", .usage = "usage: berth rm NAME\n",
	  .method = "DELETE", .path = "/v1/machines/%s", .print = print_deleted },
	{ .name = "checkpoints", .usage = "usage: berth checkpoints NAME\n",
	  .method = "GET", .path = "/v1/machines/%s/checkpoints", .print = print_checkpoints },
	{ .name = "checkpoint", .sub = "rm",
	  .usage = "usage: berth checkpoint NAME [CKPT] [--memory] | checkpoint rm NAME CKPT\n",
	  .invalid = "berth: invalid machine or checkpoint name\n",
	  .flags = V_ARG | V_ARG_NAME | V_DASH,
	  .method = "DELETE", .path = "/v1/machines/%s/checkpoints/%s",
	  .print = print_checkpoint_deleted },
	{ .name = "checkpoint",
	  .usage = "usage: berth checkpoint NAME [CKPT] [--memory] | checkpoint rm NAME CKPT\n",
	  .flags = V_ARG | V_ARG_OPTIONAL,
	  .method = "POST", .path = "/v1/machines/%s/checkpoints", .body = "{\"memory\": false}",
	  .arg_field = "name", .opts = { { "--memory", OPT_TRUE, "memory" } },
	  .print = print_checkpoint },
	{ .name = "restore", .usage = "usage: berth restore NAME CKPT [--no-wait]\n",
	  .flags = V_ARG | V_DASH,
	  .method = "POST", .path = "/v1/machines/%s/restore", .body = "{\"wait\": true}",
	  .arg_field = "checkpoint", .opts = { { "--no-wait", OPT_FALSE, "wait" } },
	  .print = print_restored },
	{ .name = "fork",
	  .usage = "usage: berth fork NAME NEW [--from CKPT | --live] [--no-start] [--no-wait]\n",
	  .flags = V_ARG | V_SAY_UNEXPECTED,
	  .method = "POST", .path = "/v1/machines/%s/fork",
	  .body = "{\"live\": false, \"start\": true, \"wait\": true}", .arg_field = "name",
	  .opts = { { "--from", OPT_STRING, "from" }, { "--no-start", OPT_FALSE, "start" },
		    { "--no-wait", OPT_FALSE, "wait" }, { "--live", OPT_TRUE, "live" } },
	  .finish = fork_finish, .print = print_machine },
	{ .name = "desktop", .when = "--revoke",
	  .usage = "usage: berth desktop NAME [--json] | desktop NAME --revoke\n",
	  .method = "DELETE", .path = "/v1/machines/%s/desktop", .print = print_desktop_revoked },
	{ .name = "desktop", .usage = "usage: berth desktop NAME [--json] | desktop NAME --revoke\n",
	  .method = "POST", .path = "/v1/machines/%s/desktop", .print = print_url },
};

const struct verb *verb_find(int argc, char **argv)
{
	for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++) {
		const struct verb *v = &verbs[i];
		if (v->sub) {
			if (argc == 4 && !strcmp(argv[0], v->name) && !strcmp(argv[1], v->sub))
				return v;
		} else if (v->when) {
			for (int k = 1; k < argc && !strcmp(argv[0], v->name); k++)
				if (!strcmp(argv[k], v->when))
					return v;
		} else if (!strcmp(argv[0], v->name) || (v->alias && !strcmp(argv[0], v->alias))) {
			return v;
		}
	}
	return NULL;
}

/* The option of V that ARGV[*I] is, with its value in *VALUE (advancing *I
 * past it), or NULL. */
static const struct verb_opt *verb_opt(const struct verb *v, int argc, char **argv, int *i,
				       const char **value)
{
	for (const struct verb_opt *o = v->opts; o->name; o++) {
		if (o->does == OPT_STRING || o->does == OPT_INT) {
			if ((*value = cli_optval(argc, argv, i, o->name)))
				return o;
		} else if (!strcmp(argv[*i], o->name)) {
			return o;
		}
	}
	return NULL;
}

static void verb_opt_apply(const struct verb_opt *o, const char *value, json_t *body)
{
	switch (o->does) {
	case OPT_TRUE: json_object_set_new(body, o->field, json_true()); break;
	case OPT_FALSE: json_object_set_new(body, o->field, json_false()); break;
	case OPT_DROP: json_object_del(body, o->field); break;
	/* A value that is not UTF-8 sets nothing. */
	case OPT_STRING: json_object_set_new(body, o->field, json_string(value)); break;
	case OPT_INT: json_object_set_new(body, o->field, json_integer(atoi(value))); break;
	}
}

int verb_run(struct client *c, const struct verb *v, int argc, char **argv)
{
	struct verb_args a = { NULL, NULL };
	json_t *body = NULL;
	const char *value = NULL;
	char path[256];
	int rc = 2;

	if (v->body && !(body = json_loads(v->body, 0, NULL))) {
		fprintf(stderr, "berth %s: the table's body is not JSON\n", v->name);
		return 1;
	}
	for (int i = v->sub ? 2 : 1; i < argc; i++) {
		if (v->when && !strcmp(argv[i], v->when))
			continue;
		const struct verb_opt *o = verb_opt(v, argc, argv, &i, &value);
		if (o) {
			verb_opt_apply(o, value, body);
			continue;
		}
		if (argv[i][0] != '-' || (v->flags & V_DASH)) {
			if (!a.name) {
				a.name = argv[i];
				continue;
			}
			if ((v->flags & V_ARG) && !a.arg) {
				a.arg = argv[i];
				continue;
			}
		}
		if (v->flags & V_SAY_UNEXPECTED)
			fprintf(stderr, "berth %s: unexpected argument '%s'\n", v->name, argv[i]);
		else
			fputs(v->usage, stderr);
		goto out;
	}
	if (!a.name || ((v->flags & V_ARG) && !(v->flags & V_ARG_OPTIONAL) && !a.arg) ||
	    ((v->flags & V_NEED_FIELD) && json_object_size(body) == 0)) {
		fputs(v->usage, stderr);
		goto out;
	}
	if (!name_valid(a.name) || ((v->flags & V_ARG_NAME) && !name_valid(a.arg))) {
		fputs(v->invalid ? v->invalid : v->usage, stderr);
		goto out;
	}
	if (a.arg && v->arg_field)
		json_object_set_new(body, v->arg_field, json_string(a.arg));
	if (v->finish)
		v->finish(body);
	snprintf(path, sizeof(path), v->path, a.name, a.arg);
	rc = cli_call_print(c, v->method, path, body, v->print, &a);
out:
	json_decref(body);
	return rc;
}
