/* berth's MCP server without its transport (common/mcp.h): the tools and
 * the JSON-RPC methods, for `berth mcp` (stdio, cli/mcp.c) and berth-web's
 * POST /mcp (web/mcp.c). */
#include "common/mcp.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/hostapi.h"
#include "common/util.h"
#include "common/banned.h"

/* What a tool gives back of a command's output or a file, at most. */
#define MCP_OUTPUT_MAX (1u << 20)

/* The versions of the protocol this server speaks, newest first. */
static const char *const versions[] = { "2025-11-25", "2025-06-18", "2025-03-26",
					"2024-11-05", NULL };

/* One tools/call: where its requests go, and the last one's error. */
struct mcp {
	const struct mcp_host *h;
	char err[512];
};

/* O's string K, or "" when O is not an object or K no string. */
static const char *jstr(json_t *o, const char *k)
{
	const char *s = json_string_value(json_object_get(o, k));

	return s ? s : "";
}

/* O's integer K, or 0. */
static long long jint(json_t *o, const char *k)
{
	return (long long)json_integer_value(json_object_get(o, k));
}

/* ---- results ------------------------------------------------------------ */

/* A tool's result: TEXT for the model, and STRUCTURED (taken; NULL:
 * none) for a program. */
static json_t *result(const char *text, json_t *structured, bool error)
{
	json_t *r = json_pack("{s:[{s:s, s:s}], s:b}", "content", "type", "text", "text", text,
			      "isError", error);

	if (structured)
		json_object_set_new(r, "structuredContent", structured);
	return r;
}

static json_t *failed(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static json_t *failed(const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return result(msg, NULL, true);
}

/* METHOD PATH with BODY (NULL: none; not consumed): hostd's answer, or a
 * failed result (*OUT NULL) when it refused or could not be reached. */
static json_t *api(struct mcp *m, const char *method, const char *path, json_t *body,
		   json_t **out)
{
	long status = 0;
	json_t *resp = NULL;

	*out = NULL;
	if (hostapi_call_as(m->h->sock, m->h->token, method, path, body, &status, &resp,
			    m->err, sizeof(m->err)) < 0)
		return failed("berth: %s", m->err);
	if (status < 200 || status > 299) {
		json_t *r = failed("%s", hostapi_message(resp, "berth refused the request"));
		json_decref(resp);
		return r;
	}
	*out = resp ? resp : json_object();
	return NULL;
}

/* The JSON of J as text (for the model's content). */
static json_t *result_json(json_t *j)
{
	char *text = json_dumps(j, JSON_INDENT(1) | JSON_SORT_KEYS);
	json_t *r = result(text ? text : "{}", j, false);

	free(text);
	return r;
}

/* ---- arguments ---------------------------------------------------------- */

static const char *arg_str(json_t *args, const char *k)
{
	return json_string_value(json_object_get(args, k));
}

/* ARGS's "machine" (or K), a valid name, into *NAME; else a failed result. */
static json_t *arg_name(json_t *args, const char *k, const char **name)
{
	*name = arg_str(args, k);
	if (!*name)
		return failed("%s is required (a machine's name)", k);
	if (!name_valid(*name))
		return failed("%s '%s' is not a machine's name (lower-case letters, digits and "
			      "dashes)", k, *name);
	return NULL;
}

/* /v1/machines/NAME + REST. */
static void machine_path(char *out, size_t len, const char *name, const char *rest)
{
	snprintf(out, len, "/v1/machines/%s%s", name, rest);
}

/* METHOD /v1/machines/NAME+REST with BODY (NULL: none; not consumed), NAME
 * being ARGS's "machine": as api(), or a failed result for a bad name. */
static json_t *machine_api(struct mcp *m, json_t *args, const char *method, const char *rest,
			   json_t *body, json_t **out)
{
	const char *name;
	char path[256];
	json_t *fail = arg_name(args, "machine", &name);

	*out = NULL;
	if (fail)
		return fail;
	machine_path(path, sizeof(path), name, rest);
	return api(m, method, path, body, out);
}

/* ---- the tools ---------------------------------------------------------- */

static json_t *t_list(struct mcp *m, json_t *args)
{
	json_t *r, *fail = api(m, "GET", "/v1/machines", NULL, &r);
	struct buf text = BUF_INIT;
	json_t *mach;
	size_t i;

	(void)args;
	if (fail)
		return fail;
	json_array_foreach(json_object_get(r, "machines"), i, mach)
		buf_printf(&text, "%s: %s (image %s, %lld vCPU, %lld MiB)\n", jstr(mach, "name"),
			   jstr(mach, "state"), jstr(mach, "image"),
			   jint(mach, "vcpus"), jint(mach, "memory") >> 20);
	if (!text.len)
		buf_adds(&text, "no machines\n");
	json_t *res = result(buf_str(&text), r, false);
	buf_free(&text);
	return res;
}

static json_t *t_create(struct mcp *m, json_t *args)
{
	static const char *const keys[] = { "image", "memory", "disk", "egress", NULL };
	const char *name;
	json_t *fail = arg_name(args, "name", &name), *r, *body;

	if (fail)
		return fail;
	body = json_pack("{s:s, s:b, s:b}", "name", name, "start",
			 !json_is_false(json_object_get(args, "start")), "wait", 1);
	for (int i = 0; keys[i]; i++) {
		json_t *v = json_object_get(args, keys[i]);
		if (v)
			json_object_set(body, keys[i], v);
	}
	if (json_object_get(args, "cpus"))
		json_object_set(body, "vcpus", json_object_get(args, "cpus"));
	fail = api(m, "POST", "/v1/machines", body, &r);
	json_decref(body);
	return fail ? fail : result_json(r);
}

/* start, stop, suspend: POST /v1/machines/NAME/ACTION. */
static json_t *action(struct mcp *m, json_t *args, const char *what)
{
	char rest[32];
	json_t *r, *fail;

	snprintf(rest, sizeof(rest), "/%s", what);
	fail = machine_api(m, args, "POST", rest, NULL, &r);
	return fail ? fail : result_json(r);
}

static json_t *t_start(struct mcp *m, json_t *args) { return action(m, args, "start"); }
static json_t *t_stop(struct mcp *m, json_t *args) { return action(m, args, "stop"); }
static json_t *t_suspend(struct mcp *m, json_t *args) { return action(m, args, "suspend"); }

static json_t *t_delete(struct mcp *m, json_t *args)
{
	json_t *r, *fail = machine_api(m, args, "DELETE", "", NULL, &r);

	if (fail)
		return fail;
	json_decref(r);
	return result("deleted", json_pack("{s:s}", "deleted", arg_str(args, "machine")), false);
}

/* A command's output as it streams in (hostd's NDJSON). */
struct run {
	struct buf line;        /* the line being read */
	struct buf out, err;    /* decoded, up to MCP_OUTPUT_MAX each */
	bool truncated;
	json_t *end;            /* the last line: {"exit"...} or {"error"...} */
};

static void run_line(struct run *x, const char *s, size_t len)
{
	json_t *j = json_loadb(s, len, 0, NULL), *v;
	struct buf *to = NULL;

	if (!j)
		return;
	if ((v = json_object_get(j, "stdout")))
		to = &x->out;
	else if ((v = json_object_get(j, "stderr")))
		to = &x->err;
	if (to && json_is_string(v)) {
		struct buf piece = BUF_INIT;
		if (buf_add_unbase64(&piece, json_string_value(v), json_string_length(v)) == 0) {
			size_t room = to->len < MCP_OUTPUT_MAX ? MCP_OUTPUT_MAX - to->len : 0;
			if (piece.len > room)
				x->truncated = true;
			buf_add(to, piece.data, piece.len < room ? piece.len : room);
		}
		buf_free(&piece);
	} else if (json_object_get(j, "exit") || json_object_get(j, "error")) {
		json_decref(x->end);
		x->end = json_incref(j);
	}
	json_decref(j);
}

static int run_sink(const char *p, size_t len, void *data)
{
	struct run *x = data;

	for (size_t i = 0; i < len; i++) {
		if (p[i] != '\n') {
			if (x->line.len < (64u << 10))
				buf_add(&x->line, p + i, 1);
			continue;
		}
		run_line(x, x->line.data ? x->line.data : "", x->line.len);
		x->line.len = 0;
	}
	return 0;
}

static json_t *t_exec(struct mcp *m, json_t *args)
{
	const char *name, *cmd = arg_str(args, "command");
	json_t *argv = json_object_get(args, "argv"), *fail = arg_name(args, "machine", &name);
	struct run x = { .line = BUF_INIT, .out = BUF_INIT, .err = BUF_INIT };
	char path[256];
	long status = 0;
	json_t *resp = NULL, *body, *res;

	if (fail)
		return fail;
	if (!!cmd == !!argv || (argv && (!json_is_array(argv) || !json_array_size(argv))))
		return failed("give command (a shell line) or argv (a list of strings), one of them");
	body = cmd ? json_pack("{s:s}", "cmd", cmd) : json_pack("{s:O}", "argv", argv);
	if (arg_str(args, "cwd"))
		json_object_set(body, "cwd", json_object_get(args, "cwd"));
	if (json_is_integer(json_object_get(args, "timeout")))
		json_object_set(body, "timeout", json_object_get(args, "timeout"));
	if (arg_str(args, "stdin")) {
		struct buf b64 = BUF_INIT;
		const char *in = arg_str(args, "stdin");
		buf_add_base64(&b64, in, strlen(in));
		json_object_set_new(body, "stdin", json_string(buf_str(&b64)));
		buf_free(&b64);
	}
	machine_path(path, sizeof(path), name, "/exec");
	int rc = hostapi_stream_until_as(m->h->sock, m->h->token, "POST", path, body, run_sink,
					 &x, m->h->gone, m->h->data, &status, &resp, m->err,
					 sizeof(m->err));
	json_decref(body);
	if (rc < 0 && m->h->gone && m->h->gone(m->h->data)) {
		/* (nobody reads this: the client went, or the server stops) */
		res = failed("berth: the command was ended: its client went, or the MCP "
			     "server stops");
	} else if (rc < 0 && !status) {
		res = failed("berth: %s", m->err);
	} else if (status < 200 || status > 299) {
		res = failed("%s", hostapi_message(resp, "berth refused the command"));
	} else if (!x.end || json_object_get(x.end, "error")) {
		json_t *e = json_object_get(x.end, "error");
		res = failed("the command's stream ended without its exit status: %s",
			     e ? jstr(e, "message") : rc < 0 ? m->err : "no last line");
	} else {
		long long code = jint(x.end, "exit");
		const char *sig = jstr(x.end, "signal");
		struct buf text = BUF_INIT;
		json_t *st = json_pack("{s:s%, s:s%, s:I, s:b}", "stdout", buf_str(&x.out), x.out.len,
				       "stderr", buf_str(&x.err), x.err.len, "exit_code",
				       (json_int_t)code, "truncated", x.truncated);
		if (*sig)
			json_object_set_new(st, "signal", json_string(sig));
		if (json_is_true(json_object_get(x.end, "timed_out")))
			json_object_set_new(st, "timed_out", json_true());
		buf_printf(&text, "exit code %lld%s%s%s\n", code, *sig ? " (signal " : "", sig,
			   *sig ? ")" : "");
		if (x.out.len)
			buf_printf(&text, "stdout:\n%s%s", buf_str(&x.out),
				   x.out.data[x.out.len - 1] == '\n' ? "" : "\n");
		if (x.err.len)
			buf_printf(&text, "stderr:\n%s%s", buf_str(&x.err),
				   x.err.data[x.err.len - 1] == '\n' ? "" : "\n");
		if (x.truncated)
			buf_printf(&text, "(output cut at %u bytes a stream)\n", MCP_OUTPUT_MAX);
		/* A command that failed is a result, not an error of the tool. */
		res = result(buf_str(&text), st, false);
		buf_free(&text);
	}
	json_decref(resp);
	json_decref(x.end);
	buf_free(&x.line);
	buf_free(&x.out);
	buf_free(&x.err);
	return res;
}

/* /v1/machines/NAME/files?path=PATH into OUT. */
static void files_path(char *out, size_t len, const char *name, const char *rest,
		       const char *file)
{
	char *q = hostapi_escape(file);

	snprintf(out, len, "/v1/machines/%s/files%s?path=%s", name, rest, q);
	free(q);
}

static json_t *t_read(struct mcp *m, json_t *args)
{
	const char *name, *file = arg_str(args, "path");
	json_t *fail = arg_name(args, "machine", &name), *resp = NULL, *res;
	char path[PATH_MAX + 128];
	long status = 0;
	int fd;

	if (fail)
		return fail;
	if (!file || file[0] != '/' || strlen(file) > PATH_MAX)
		return failed("path is required: an absolute path in the machine");
	files_path(path, sizeof(path), name, "", file);
	fd = memfd_create("berth-mcp-read", MFD_CLOEXEC);
	if (fd < 0)
		return failed("berth: memfd_create: %s", strerror(errno));
	if (hostapi_download_as(m->h->sock, m->h->token, path, fd, NULL, NULL, &status,
				&resp, m->err, sizeof(m->err)) < 0 || status < 200 || status > 299) {
		res = status && resp ? failed("%s", hostapi_message(resp, "berth refused"))
				     : failed("berth: %s", m->err);
		json_decref(resp);
		close(fd);
		return res;
	}
	json_decref(resp);
	off_t size = lseek(fd, 0, SEEK_END);
	size_t n = size > (off_t)MCP_OUTPUT_MAX ? MCP_OUTPUT_MAX : (size_t)size;
	char *data = malloc(n + 1);
	if (!data)
		abort();
	if (pread(fd, data, n, 0) != (ssize_t)n) {
		free(data);
		close(fd);
		return failed("berth: reading what came: %s", strerror(errno));
	}
	close(fd);
	data[n] = '\0';
	/* Text as it is; anything else (a NUL, bytes that are no UTF-8) as
	 * base64. */
	json_t *t = memchr(data, '\0', n) ? NULL : json_stringn(data, n);
	json_t *st = json_pack("{s:s, s:I, s:b}", "path", file, "size", (json_int_t)size,
			       "truncated", (uint64_t)size > n);
	if (t) {
		json_object_set_new(st, "content", t);
		json_object_set_new(st, "encoding", json_string("utf-8"));
		res = result(json_string_value(t), st, false);
	} else {
		struct buf b64 = BUF_INIT;
		buf_add_base64(&b64, data, n);
		json_object_set_new(st, "content", json_string(buf_str(&b64)));
		json_object_set_new(st, "encoding", json_string("base64"));
		res = result(buf_str(&b64), st, false);
		buf_free(&b64);
	}
	free(data);
	return res;
}

static json_t *t_write(struct mcp *m, json_t *args)
{
	const char *name, *file = arg_str(args, "path"), *content = arg_str(args, "content");
	const char *enc = arg_str(args, "encoding");
	json_t *fail = arg_name(args, "machine", &name), *resp = NULL, *res;
	struct buf data = BUF_INIT;
	char path[PATH_MAX + 128];
	long status = 0;

	if (fail)
		return fail;
	if (!file || file[0] != '/' || strlen(file) > PATH_MAX)
		return failed("path is required: an absolute path in the machine");
	if (!content)
		return failed("content is required (a string)");
	if (enc && strcmp(enc, "utf-8") && strcmp(enc, "base64"))
		return failed("encoding must be utf-8 (the default) or base64");
	if (enc && !strcmp(enc, "base64")) {
		if (buf_add_unbase64(&data, content, strlen(content)) < 0)
			return failed("content is not base64");
	} else {
		buf_add(&data, content, json_string_length(json_object_get(args, "content")));
	}
	files_path(path, sizeof(path), name, "", file);
	if (hostapi_send_as(m->h->sock, m->h->token, "PUT", path, data.data ? data.data : "",
			    data.len, "application/octet-stream", &status, &resp, m->err,
			    sizeof(m->err)) < 0)
		res = failed("berth: %s", m->err);
	else if (status < 200 || status > 299)
		res = failed("%s", hostapi_message(resp, "berth refused the write"));
	else
		res = result("written", json_pack("{s:s, s:I}", "path", file, "size",
						   (json_int_t)data.len), false);
	json_decref(resp);
	buf_free(&data);
	return res;
}

static json_t *t_checkpoint(struct mcp *m, json_t *args)
{
	json_t *r, *fail, *body = json_object();

	if (arg_str(args, "name"))
		json_object_set(body, "name", json_object_get(args, "name"));
	if (json_is_boolean(json_object_get(args, "memory")))
		json_object_set(body, "memory", json_object_get(args, "memory"));
	fail = machine_api(m, args, "POST", "/checkpoints", body, &r);
	json_decref(body);
	return fail ? fail : result_json(r);
}

static json_t *t_restore(struct mcp *m, json_t *args)
{
	const char *ckpt = arg_str(args, "checkpoint");
	json_t *r, *fail, *body;

	if (!ckpt)
		return failed("checkpoint is required (its name)");
	body = json_pack("{s:s, s:b}", "checkpoint", ckpt, "wait", 1);
	fail = machine_api(m, args, "POST", "/restore", body, &r);
	json_decref(body);
	return fail ? fail : result_json(r);
}

static json_t *t_fork(struct mcp *m, json_t *args)
{
	const char *nn;
	json_t *r, *fail = arg_name(args, "name", &nn), *body;

	if (fail)
		return fail;
	body = json_pack("{s:s, s:b}", "name", nn, "wait", 1);
	if (arg_str(args, "from"))
		json_object_set(body, "from", json_object_get(args, "from"));
	fail = machine_api(m, args, "POST", "/fork", body, &r);
	json_decref(body);
	return fail ? fail : result_json(r);
}

static json_t *t_desktop(struct mcp *m, json_t *args)
{
	json_t *r, *fail = machine_api(m, args, "POST", "/desktop", NULL, &r);

	return fail ? fail : result(jstr(r, "url"), r, false);
}

static json_t *t_preview(struct mcp *m, json_t *args)
{
	json_t *port = json_object_get(args, "port"), *r, *fail, *body;
	char rest[64];

	if (!json_is_integer(port) || json_integer_value(port) < 1 ||
	    json_integer_value(port) > 65535)
		return failed("port is required: the machine's port, 1 to 65535");
	snprintf(rest, sizeof(rest), "/previews/%lld", (long long)json_integer_value(port));
	body = json_pack("{s:b}", "public", json_is_true(json_object_get(args, "public")));
	fail = machine_api(m, args, "PUT", rest, body, &r);
	json_decref(body);
	if (fail)
		return fail;
	/* A private preview's one-time link sets the browser's cookie. */
	const char *link = jstr(r, "link");
	return result(*link ? link : jstr(r, "url"), r, false);
}

struct tool {
	const char *name;
	const char *description;
	const char *schema;     /* inputSchema, JSON */
	json_t *(*fn)(struct mcp *m, json_t *args);
};

#define MACHINE_ARG "\"machine\": {\"type\": \"string\", \"description\": \"the machine's name\"}"

static const struct tool tools[] = {
	{ "list_machines", "The caller's machines: name, state, image, vCPUs, memory.",
	  "{\"type\": \"object\", \"properties\": {}}", t_list },
	{ "create_machine", "Create a machine (a full Linux VM) and start it, waiting until it "
	  "answers on SSH.",
	  "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\"}, "
	  "\"image\": {\"type\": \"string\", \"description\": \"an image (berth image ls), default "
	  "tiny\"}, \"cpus\": {\"type\": \"integer\"}, \"memory\": {\"type\": \"string\", "
	  "\"description\": \"e.g. 2G\"}, \"disk\": {\"type\": \"string\", \"description\": \"e.g. "
	  "20G\"}, \"egress\": {\"type\": \"string\", \"description\": \"open, none or rules\"}, "
	  "\"start\": {\"type\": \"boolean\", \"default\": true}}, \"required\": [\"name\"]}",
	  t_create },
	{ "start_machine", "Start a stopped or suspended machine.",
	  "{\"type\": \"object\", \"properties\": {" MACHINE_ARG "}, \"required\": [\"machine\"]}",
	  t_start },
	{ "stop_machine", "Shut a machine down (its disk stays).",
	  "{\"type\": \"object\", \"properties\": {" MACHINE_ARG "}, \"required\": [\"machine\"]}",
	  t_stop },
	{ "suspend_machine", "Suspend a machine: its memory is kept on disk, only storage is "
	  "billed, and it resumes where it was.",
	  "{\"type\": \"object\", \"properties\": {" MACHINE_ARG "}, \"required\": [\"machine\"]}",
	  t_suspend },
	{ "delete_machine", "Delete a machine, its disk and its checkpoints.",
	  "{\"type\": \"object\", \"properties\": {" MACHINE_ARG "}, \"required\": [\"machine\"]}",
	  t_delete },
	{ "exec", "Run a command in a machine (woken if asleep) and return its stdout, stderr and "
	  "exit code.",
	  "{\"type\": \"object\", \"properties\": {" MACHINE_ARG ", \"command\": {\"type\": "
	  "\"string\", \"description\": \"a shell line (sh -c)\"}, \"argv\": {\"type\": \"array\", "
	  "\"items\": {\"type\": \"string\"}}, \"cwd\": {\"type\": \"string\"}, \"stdin\": "
	  "{\"type\": \"string\"}, \"timeout\": {\"type\": \"integer\", \"description\": "
	  "\"seconds\"}}, \"required\": [\"machine\"]}",
	  t_exec },
	{ "read_file", "Read a file of a machine (text, or base64 when it is not UTF-8; the first "
	  "MiB).",
	  "{\"type\": \"object\", \"properties\": {" MACHINE_ARG ", \"path\": {\"type\": "
	  "\"string\"}}, \"required\": [\"machine\", \"path\"]}",
	  t_read },
	{ "write_file", "Write a file in a machine, replacing it whole.",
	  "{\"type\": \"object\", \"properties\": {" MACHINE_ARG ", \"path\": {\"type\": "
	  "\"string\"}, \"content\": {\"type\": \"string\"}, \"encoding\": {\"type\": \"string\", "
	  "\"enum\": [\"utf-8\", \"base64\"]}}, \"required\": [\"machine\", \"path\", \"content\"]}",
	  t_write },
	{ "checkpoint", "Checkpoint a machine's disk (and its memory with memory: true), in "
	  "milliseconds.",
	  "{\"type\": \"object\", \"properties\": {" MACHINE_ARG ", \"name\": {\"type\": "
	  "\"string\"}, \"memory\": {\"type\": \"boolean\"}}, \"required\": [\"machine\"]}",
	  t_checkpoint },
	{ "restore", "Take a machine back to one of its checkpoints.",
	  "{\"type\": \"object\", \"properties\": {" MACHINE_ARG ", \"checkpoint\": {\"type\": "
	  "\"string\"}}, \"required\": [\"machine\", \"checkpoint\"]}",
	  t_restore },
	{ "fork", "A new machine, NAME, from a machine as it is now (a running one keeps running "
	  "in the fork) or from one of its checkpoints.",
	  "{\"type\": \"object\", \"properties\": {" MACHINE_ARG ", \"name\": {\"type\": "
	  "\"string\"}, \"from\": {\"type\": \"string\", \"description\": \"a checkpoint\"}}, "
	  "\"required\": [\"machine\", \"name\"]}",
	  t_fork },
	{ "desktop_url", "A one-time URL (60 s) of the machine's screen, for a browser.",
	  "{\"type\": \"object\", \"properties\": {" MACHINE_ARG "}, \"required\": [\"machine\"]}",
	  t_desktop },
	{ "preview_url", "A URL of a port of the machine (a web server in it), for a browser: a "
	  "one-time link for a private preview, the address for a public one.",
	  "{\"type\": \"object\", \"properties\": {" MACHINE_ARG ", \"port\": {\"type\": "
	  "\"integer\"}, \"public\": {\"type\": \"boolean\"}}, \"required\": [\"machine\", "
	  "\"port\"]}",
	  t_preview },
};

/* ---- JSON-RPC ----------------------------------------------------------- */

json_t *mcp_error(json_t *id, int code, const char *message)
{
	return json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", id ? id : json_null(),
			 "error", "code", code, "message", message);
}

bool mcp_version_known(const char *v)
{
	for (int i = 0; v && versions[i]; i++)
		if (!strcmp(v, versions[i]))
			return true;
	return false;
}

static json_t *initialize(json_t *params)
{
	const char *want = json_string_value(json_object_get(params, "protocolVersion"));
	const char *v = versions[0];

	for (int i = 0; want && versions[i]; i++)
		if (!strcmp(want, versions[i]))
			v = versions[i];
	return json_pack("{s:s, s:{s:{s:b}}, s:{s:s, s:s}, s:s}", "protocolVersion", v,
			 "capabilities", "tools", "listChanged", 0, "serverInfo", "name", "berth",
			 "version", BERTH_VERSION, "instructions",
			 "berth's machines are full Linux VMs that live for months: create one, run "
			 "commands in it (exec), read and write its files, checkpoint and fork it.");
}

static json_t *tools_list(void)
{
	json_t *arr = json_array();

	for (size_t i = 0; i < sizeof(tools) / sizeof(tools[0]); i++) {
		json_t *schema = json_loads(tools[i].schema, 0, NULL);
		if (!schema)
			abort();	/* a schema above is no JSON: a programming error */
		json_array_append_new(arr, json_pack("{s:s, s:s, s:o}", "name", tools[i].name,
						     "description", tools[i].description,
						     "inputSchema", schema));
	}
	return json_pack("{s:o}", "tools", arr);
}

/* tools/call with PARAMS: the tool's result, or a JSON-RPC error for ID. */
static json_t *tools_call(const struct mcp_host *h, json_t *id, json_t *params)
{
	const char *name = json_string_value(json_object_get(params, "name"));
	json_t *args = json_object_get(params, "arguments"), *empty, *res;
	struct mcp m = { .h = h };
	size_t i;

	if (args && !json_is_object(args))
		return mcp_error(id, MCP_INVALID_PARAMS, "arguments must be an object");
	for (i = 0; name && i < sizeof(tools) / sizeof(tools[0]); i++)
		if (!strcmp(name, tools[i].name))
			break;
	if (!name || i == sizeof(tools) / sizeof(tools[0])) {
		char msg[200];
		snprintf(msg, sizeof(msg), "no tool '%.100s' (tools/list names them)",
			 name ? name : "");
		return mcp_error(id, MCP_INVALID_PARAMS, msg);
	}
	empty = json_object();
	res = tools[i].fn(&m, args ? args : empty);
	json_decref(empty);
	return json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "result", res);
}

json_t *mcp_answer(const struct mcp_host *h, json_t *msg)
{
	json_t *id = json_object_get(msg, "id");
	const char *method = json_string_value(json_object_get(msg, "method"));
	json_t *params = json_object_get(msg, "params"), *res;

	if (!json_is_object(msg))
		return mcp_error(NULL, MCP_INVALID_REQUEST, "a message is one JSON object (no batches)");
	if (!method) {
		/* An answer to a request of ours: we make none. */
		if (!json_object_get(msg, "result") && !json_object_get(msg, "error"))
			return mcp_error(id, MCP_INVALID_REQUEST, "a request needs a method");
		return NULL;
	}
	if (!id)
		return NULL;	/* notifications/initialized, cancelled...: nothing to say */
	if (!strcmp(method, "initialize"))
		res = initialize(params);
	else if (!strcmp(method, "ping"))
		res = json_object();
	else if (!strcmp(method, "tools/list"))
		res = tools_list();
	else if (!strcmp(method, "tools/call"))
		return tools_call(h, id, params);
	else
		return mcp_error(id, MCP_NO_METHOD, "no such method");
	return json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "result", res);
}
