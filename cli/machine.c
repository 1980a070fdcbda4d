/* The machine commands of berth: ls, show, create, set, start, stop,
 * suspend, resume, restart, rm, exec, checkpoint(s), restore, fork. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "common/sshexec.h"
#include "common/util.h"
#include "common/banned.h"

static void print_machine_row(json_t *m)
{
	char mem[32], disk[32], alloc[32], ssh[80] = "-";
	json_t *s = json_object_get(m, "ssh");

	fmt_size(m, "memory", mem, sizeof(mem));
	fmt_size(m, "disk", disk, sizeof(disk));
	fmt_size(m, "allocated", alloc, sizeof(alloc));
	if (json_is_object(s))
		snprintf(ssh, sizeof(ssh), "%s:%lld", jstr(s, "host"), jint(s, "port"));
	printf("%-20s %-10s %-10s %4lld %7s %7s %9s  %s\n", jstr(m, "name"),
	       jstr(m, "state"), jstr(m, "image"), jint(m, "vcpus"), mem, disk, alloc, ssh);
}

static void print_machine(const struct client *c, json_t *m)
{
	if (c->json) {
		print_json(m);
		return;
	}
	printf("%-20s %-10s %-10s %4s %7s %7s %9s  %s\n", "NAME", "STATE", "IMAGE", "CPUS",
	       "MEMORY", "DISK", "ALLOCATED", "SSH");
	print_machine_row(m);
}

/* "idle: ..." for one machine. */
static void print_idle(json_t *m)
{
	json_t *i = json_object_get(m, "idle");
	const char *t = jstr(i, "timeout");

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
		       jstr(i, "last_activity"),
		       (long long)json_integer_value(json_object_get(i, "cpu_percent")));
}

int cmd_ls(struct client *c, int argc, char **argv)
{
	json_t *r, *m;
	size_t i;

	(void)argc, (void)argv;
	if (cli_call(c, "GET", "/v1/machines", NULL, &r) < 0)
		return 1;
	if (c->json) {
		print_json(r);
	} else {
		printf("%-20s %-10s %-10s %4s %7s %7s %9s  %s\n", "NAME", "STATE", "IMAGE",
		       "CPUS", "MEMORY", "DISK", "ALLOCATED", "SSH");
		json_array_foreach(json_object_get(r, "machines"), i, m)
			print_machine_row(m);
	}
	json_decref(r);
	return 0;
}

int cmd_show(struct client *c, int argc, char **argv)
{
	char path[256];
	json_t *r;

	if (argc != 2 || !name_valid(argv[1])) {
		fprintf(stderr, "usage: berth show NAME\n");
		return 2;
	}
	snprintf(path, sizeof(path), "/v1/machines/%s", argv[1]);
	if (cli_call(c, "GET", path, NULL, &r) < 0)
		return 1;
	print_machine(c, r);
	if (!c->json)
		print_idle(r);
	json_decref(r);
	return 0;
}

/* berth set NAME --idle D: a machine's settings. */
int cmd_set(struct client *c, int argc, char **argv)
{
	const char *name = NULL, *v;
	json_t *body = json_object(), *r;
	char path[256];
	int rc = 2;

	for (int i = 1; i < argc; i++) {
		if ((v = optval(argc, argv, &i, "--idle")))
			json_object_set_new(body, "idle", json_string(v));
		else if (argv[i][0] != '-' && !name)
			name = argv[i];
		else {
			fprintf(stderr, "berth set: unexpected argument '%s'\n", argv[i]);
			goto out;
		}
	}
	if (!name || !name_valid(name) || json_object_size(body) == 0) {
		fprintf(stderr, "usage: berth set NAME --idle 30m|never|default\n");
		goto out;
	}
	snprintf(path, sizeof(path), "/v1/machines/%s", name);
	rc = 1;
	if (cli_call(c, "PATCH", path, body, &r) < 0)
		goto out;
	if (c->json)
		print_json(r);
	else
		print_idle(r);
	json_decref(r);
	rc = 0;
out:
	json_decref(body);
	return rc;
}

int cmd_create(struct client *c, int argc, char **argv)
{
	json_t *body = json_object(), *r;
	const char *v, *name = NULL;
	bool start = true, wait = true;
	int rc = 2;
	int64_t t0 = mono_ms();

	for (int i = 1; i < argc; i++) {
		if ((v = optval(argc, argv, &i, "--image")))
			json_object_set_new(body, "image", json_string(v));
		else if ((v = optval(argc, argv, &i, "--cpus"))) {
			char *end;
			long n = strtol(v, &end, 10);
			if (*end || end == v) {
				fprintf(stderr, "berth: --cpus takes a number, not '%s'\n", v);
				goto out;
			}
			json_object_set_new(body, "vcpus", json_integer(n));
		} else if ((v = optval(argc, argv, &i, "--memory")))
			json_object_set_new(body, "memory", json_string(v));
		else if ((v = optval(argc, argv, &i, "--disk")))
			json_object_set_new(body, "disk", json_string(v));
		else if ((v = optval(argc, argv, &i, "--idle")))
			json_object_set_new(body, "idle", json_string(v));
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
			"[--disk 4G] [--idle 15m|never] [--no-start] [--no-wait]\n");
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
	print_machine(c, r);
	json_decref(r);
	rc = 0;
out:
	json_decref(body);
	return rc;
}

int cmd_action(struct client *c, int argc, char **argv)
{
	const char *action = argv[0], *name = NULL, *v;
	json_t *body = json_object(), *r;
	bool wait = strcmp(action, "stop") != 0 && strcmp(action, "suspend") != 0;
	char path[256];
	int rc = 2;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--no-wait"))
			wait = false;
		else if ((v = optval(argc, argv, &i, "--timeout")))
			json_object_set_new(body, "timeout", json_integer(atoi(v)));
		else if (argv[i][0] != '-' && !name)
			name = argv[i];
		else {
			fprintf(stderr, "berth %s: unexpected argument '%s'\n", action, argv[i]);
			goto out;
		}
	}
	if (!name || !name_valid(name)) {
		fprintf(stderr, "usage: berth %s NAME [--no-wait] [--timeout S]\n", action);
		goto out;
	}
	if (wait)
		json_object_set_new(body, "wait", json_true());
	snprintf(path, sizeof(path), "/v1/machines/%s/%s", name, action);
	rc = 1;
	if (cli_call(c, "POST", path, body, &r) < 0)
		goto out;
	if (c->json)
		print_json(r);
	else if (json_integer_value(json_object_get(r, "ready_ms")) > 0)
		printf("%s: %s, ready in %.1f s\n", name, jstr(r, "state"),
		       (double)jint(r, "ready_ms") / 1000.0);
	else
		printf("%s: %s\n", name, jstr(r, "state"));
	json_decref(r);
	rc = 0;
out:
	json_decref(body);
	return rc;
}

int cmd_rm(struct client *c, int argc, char **argv)
{
	char path[256];
	json_t *r;

	if (argc != 2 || !name_valid(argv[1])) {
		fprintf(stderr, "usage: berth rm NAME\n");
		return 2;
	}
	snprintf(path, sizeof(path), "/v1/machines/%s", argv[1]);
	if (cli_call(c, "DELETE", path, NULL, &r) < 0)
		return 1;
	if (c->json)
		print_json(r);
	else
		printf("deleted %s\n", argv[1]);
	json_decref(r);
	return 0;
}

int cmd_exec(struct client *c, int argc, char **argv)
{
	const char *name = NULL;
	bool wake = true;
	int i, status = 255;
	char path[256], err[1024];
	json_t *body, *r;
	char *cmd;

	for (i = 1; i < argc && strcmp(argv[i], "--"); i++) {
		if (!strcmp(argv[i], "--no-wake"))
			wake = false;
		else if (argv[i][0] != '-' && !name)
			name = argv[i];
		else
			break;
	}
	if (!name || i >= argc || strcmp(argv[i], "--") || i + 1 >= argc) {
		fprintf(stderr, "usage: berth exec NAME [--no-wake] -- CMD [ARGS...]\n");
		return 2;
	}
	if (!name_valid(name)) {
		fprintf(stderr, "berth: invalid machine name '%s'\n", name);
		return 2;
	}
	snprintf(path, sizeof(path), "/v1/machines/%s/ssh", name);
	body = json_pack("{s:b}", "wake", wake);
	if (cli_call(c, "POST", path, body, &r) < 0) {
		json_decref(body);
		return 255;
	}
	json_decref(body);
	if (jint(r, "woke_ms") > 0)
		fprintf(stderr, "woke %s: ready in %.1f s\n", name, (double)jint(r, "woke_ms") / 1000.0);
	struct sshexec_target t = {
		.host = jstr(r, "host"), .port = (int)jint(r, "port"),
		.user = jstr(r, "user"), .key_b64 = jstr(r, "private_key"),
		.connect_timeout_ms = 15000,
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

int cmd_checkpoint(struct client *c, int argc, char **argv)
{
	char path[256];
	json_t *r, *body, *ck;
	size_t i;

	if (!strcmp(argv[0], "checkpoints")) {
		if (argc != 2 || !name_valid(argv[1])) {
			fprintf(stderr, "usage: berth checkpoints NAME\n");
			return 2;
		}
		snprintf(path, sizeof(path), "/v1/machines/%s/checkpoints", argv[1]);
		if (cli_call(c, "GET", path, NULL, &r) < 0)
			return 1;
		if (c->json) {
			print_json(r);
		} else {
			printf("%-40s %-21s %s\n", "CHECKPOINT", "CREATED", "MEMORY");
			json_array_foreach(json_object_get(r, "checkpoints"), i, ck) {
				char when[32];
				time_t t = (time_t)jint(ck, "created");
				struct tm tm;
				gmtime_r(&t, &tm);
				strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%SZ", &tm);
				printf("%-40s %-21s %s\n", jstr(ck, "name"), when,
				       json_is_true(json_object_get(ck, "memory")) ? "yes" : "-");
			}
		}
		json_decref(r);
		return 0;
	}
	if (argc == 4 && !strcmp(argv[1], "rm")) {
		if (!name_valid(argv[2]) || !name_valid(argv[3])) {
			fprintf(stderr, "berth: invalid machine or checkpoint name\n");
			return 2;
		}
		snprintf(path, sizeof(path), "/v1/machines/%s/checkpoints/%s", argv[2], argv[3]);
		if (cli_call(c, "DELETE", path, NULL, &r) < 0)
			return 1;
		if (c->json)
			print_json(r);
		else
			printf("deleted checkpoint %s of %s\n", argv[3], argv[2]);
		json_decref(r);
		return 0;
	}
	bool memory = false;
	const char *mname = NULL, *cname = NULL;
	for (int k = 1; k < argc; k++) {
		if (!strcmp(argv[k], "--memory"))
			memory = true;
		else if (argv[k][0] != '-' && !mname)
			mname = argv[k];
		else if (argv[k][0] != '-' && !cname)
			cname = argv[k];
		else
			mname = NULL, k = argc;
	}
	if (!mname || !name_valid(mname)) {
		fprintf(stderr, "usage: berth checkpoint NAME [CKPT] [--memory] | checkpoint rm NAME CKPT\n");
		return 2;
	}
	argv[1] = (char *)mname;
	body = json_pack("{s:b}", "memory", memory);
	if (cname)
		json_object_set_new(body, "name", json_string(cname));
	snprintf(path, sizeof(path), "/v1/machines/%s/checkpoints", argv[1]);
	int rc = cli_call(c, "POST", path, body, &r);
	json_decref(body);
	if (rc < 0)
		return 1;
	if (c->json)
		print_json(r);
	else
		printf("checkpoint %s of %s%s (%.1f ms)\n", jstr(r, "name"), argv[1],
		       json_is_true(json_object_get(r, "memory")) ? " with memory" : "",
		       json_number_value(json_object_get(r, "took_ms")));
	json_decref(r);
	return 0;
}

int cmd_restore(struct client *c, int argc, char **argv)
{
	char path[256];
	bool wait = true;
	const char *name = NULL, *ckpt = NULL;
	json_t *r, *body;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--no-wait"))
			wait = false;
		else if (!name)
			name = argv[i];
		else if (!ckpt)
			ckpt = argv[i];
		else
			name = NULL, i = argc;
	}
	if (!name || !ckpt || !name_valid(name)) {
		fprintf(stderr, "usage: berth restore NAME CKPT [--no-wait]\n");
		return 2;
	}
	snprintf(path, sizeof(path), "/v1/machines/%s/restore", name);
	body = json_pack("{s:s, s:b}", "checkpoint", ckpt, "wait", wait);
	int rc = cli_call(c, "POST", path, body, &r);
	json_decref(body);
	if (rc < 0)
		return 1;
	if (c->json)
		print_json(r);
	else
		printf("%s: restored to %s, %s\n", name, ckpt, jstr(r, "state"));
	json_decref(r);
	return 0;
}

int cmd_fork(struct client *c, int argc, char **argv)
{
	char path[256];
	bool start = true, wait = true, live = false;
	const char *name = NULL, *new_name = NULL, *from = NULL, *v;
	json_t *r, *body;

	for (int i = 1; i < argc; i++) {
		if ((v = optval(argc, argv, &i, "--from")))
			from = v;
		else if (!strcmp(argv[i], "--no-start"))
			start = false;
		else if (!strcmp(argv[i], "--no-wait"))
			wait = false;
		else if (!strcmp(argv[i], "--live"))
			live = true;
		else if (argv[i][0] != '-' && !name)
			name = argv[i];
		else if (argv[i][0] != '-' && !new_name)
			new_name = argv[i];
		else {
			fprintf(stderr, "berth fork: unexpected argument '%s'\n", argv[i]);
			return 2;
		}
	}
	if (!name || !new_name || !name_valid(name)) {
		fprintf(stderr, "usage: berth fork NAME NEW [--from CKPT | --live] [--no-start] [--no-wait]\n");
		return 2;
	}
	snprintf(path, sizeof(path), "/v1/machines/%s/fork", name);
	body = json_pack("{s:s, s:b, s:b, s:b}", "name", new_name, "live", live, "start", start,
			 "wait", (start || live) && wait);
	if (from)
		json_object_set_new(body, "from", json_string(from));
	int rc = cli_call(c, "POST", path, body, &r);
	json_decref(body);
	if (rc < 0)
		return 1;
	print_machine(c, r);
	json_decref(r);
	return 0;
}

