/* berth image: ls, build, rm, import and export.  Imports and exports
 * stream through hostd's socket; on a terminal they draw a progress bar. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "common/buf.h"
#include "common/hostapi.h"
#include "common/util.h"
#include "common/banned.h"

static void print_images(json_t *r, void *data)
{
	json_t *img;
	size_t i;

	(void)data;
	printf("%-16s %8s %9s %10s %-9s %5s %-12s %s\n", "NAME", "SIZE", "ALLOCATED",
	       "COMPRESSED", "SOURCE", "USERS", "OWNER", "SHA256");
	json_array_foreach(json_object_get(r, "images"), i, img) {
		char size[32], alloc[32], comp[32] = "-";
		const char *src = cli_jstr(img, "source");
		cli_fmt_size(img, "size", size, sizeof(size));
		cli_fmt_size(img, "allocated", alloc, sizeof(alloc));
		/* A compressed size only for what came compressed. */
		if (strstr(src, ".zst"))
			cli_fmt_size(img, "source_size", comp, sizeof(comp));
		char owner[80];
		/* Root's images are everyone's; a user's is theirs until published. */
		snprintf(owner, sizeof(owner), "%s%s",
			 *cli_jstr(img, "owner") ? cli_jstr(img, "owner") : "-",
			 json_is_true(json_object_get(img, "public")) ? "" : " (private)");
		printf("%-16s %8s %9s %10s %-9s %5lld %-12s %s\n", cli_jstr(img, "name"), size,
		       alloc, comp, *src ? src : "-", cli_jint(img, "users"), owner,
		       *cli_jstr(img, "sha256") ? cli_jstr(img, "sha256") : "-");
	}
}

/* DATA: the image's name. */
static void print_image_deleted(json_t *r, void *data)
{
	(void)r;
	printf("deleted image %s\n", (const char *)data);
}

/* Append "&KEY=VALUE" (escaped) to Q when VALUE is set. */
static void query_add(struct buf *q, const char *key, const char *value)
{
	if (!value)
		return;
	char *v = hostapi_escape(value);
	buf_printf(q, "%c%s=%s", q->len ? '&' : '?', key, v);
	free(v);
}

static int image_import(struct client *c, int argc, char **argv)
{
	const char *name = NULL, *file = NULL, *sha = NULL, *format = NULL, *like = NULL,
		   *user = NULL, *v;
	struct buf q = BUF_INIT;
	struct stat sb;
	json_t *r = NULL;
	long status;
	char err[512], path[4096];
	int fd, rc = 1;

	for (int i = 2; i < argc; i++) {
		if ((v = cli_optval(argc, argv, &i, "--sha256")))
			sha = v;
		else if ((v = cli_optval(argc, argv, &i, "--format")))
			format = v;
		else if ((v = cli_optval(argc, argv, &i, "--like")))
			like = v;
		else if ((v = cli_optval(argc, argv, &i, "--user")))
			user = v;
		else if (argv[i][0] == '-' && argv[i][1]) {
			fprintf(stderr, "berth image import: unknown option '%s'\n", argv[i]);
			return 2;
		} else if (!name)
			name = argv[i];
		else if (!file)
			file = argv[i];
		else {
			fprintf(stderr, "berth image import: unexpected argument '%s'\n", argv[i]);
			return 2;
		}
	}
	if (!name || !file) {
		fprintf(stderr, "usage: berth image import NAME FILE [--sha256 H] "
			"[--format raw|qcow2] [--like IMAGE] [--user U]\n");
		return 2;
	}
	if (!name_valid(name)) {
		fprintf(stderr, "berth: invalid image name '%s' (lower-case letters, digits "
			"and '-', up to 63)\n", name);
		return 2;
	}
	fd = open(file, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "berth: cannot open %s: %s\n", file, strerror(errno));
		return 1;
	}
	if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
		fprintf(stderr, "berth: %s is not a regular file\n", file);
		close(fd);
		return 1;
	}
	/* A taken name fails now, not after the upload. */
	snprintf(path, sizeof(path), "/v1/images/%s", name);
	if (client_call(c, "GET", path, NULL, &status, &r, err, sizeof(err)) < 0) {
		fprintf(stderr, "berth: %s\n", err);
		goto out;
	}
	if (status == 200) {
		fprintf(stderr, "berth: image %s exists\n", name);
		goto out;
	}
	json_decref(r);
	r = NULL;
	const char *base = strrchr(file, '/');
	query_add(&q, "origin", base ? base + 1 : file);
	query_add(&q, "sha256", sha);
	query_add(&q, "format", format);
	query_add(&q, "like", like);
	query_add(&q, "user", user);
	snprintf(path, sizeof(path), "/v1/images/%s%s", name, buf_str(&q));
	struct cli_progress p = { .on = !c->json && isatty(2), .label = "importing", .t0 = mono_ms() };
	int64_t t0 = mono_ms();
	if (hostapi_upload_as(c->sock, client_token(c), "PUT", path, fd, (uint64_t)sb.st_size,
			      cli_progress_draw, &p, &status, &r, err, sizeof(err)) < 0) {
		cli_progress_end(&p);
		fprintf(stderr, "berth: %s\n", err);
		goto out;
	}
	cli_progress_end(&p);
	if (status < 200 || status > 299) {
		fprintf(stderr, "berth: %s\n", hostapi_message(r, "the import failed"));
		goto out;
	}
	if (c->json) {
		cli_print_json(r);
	} else {
		char size[32], src[32];
		double secs = (double)(mono_ms() - t0) / 1000.0;
		size_format((uint64_t)cli_jint(r, "size"), size, sizeof(size));
		size_format((uint64_t)sb.st_size, src, sizeof(src));
		printf("imported image %s: %s disk from %s %s in %.1f s (sha256 %s)\n", name, size,
		       src, cli_jstr(r, "source"), secs, cli_jstr(r, "sha256"));
	}
	rc = 0;
out:
	json_decref(r);
	buf_free(&q);
	close(fd);
	return rc;
}

static int image_export(struct client *c, int argc, char **argv)
{
	const char *what = NULL, *file = NULL;
	bool force = false;
	char machine[64], ckpt[64] = "", path[512], part[4096], err[512];
	json_t *r = NULL;
	long status;
	int fd, rc = 1;

	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--force"))
			force = true;
		else if (argv[i][0] == '-' && argv[i][1]) {
			fprintf(stderr, "berth image export: unknown option '%s'\n", argv[i]);
			return 2;
		} else if (!what)
			what = argv[i];
		else if (!file)
			file = argv[i];
		else {
			fprintf(stderr, "berth image export: unexpected argument '%s'\n", argv[i]);
			return 2;
		}
	}
	if (!what || !file) {
		fprintf(stderr, "usage: berth image export MACHINE[@CHECKPOINT] FILE.zst [--force]\n");
		return 2;
	}
	const char *at = strchr(what, '@');
	snprintf(machine, sizeof(machine), "%.*s", at ? (int)(at - what) : (int)strlen(what), what);
	if (at)
		snprintf(ckpt, sizeof(ckpt), "%s", at + 1);
	if (!name_valid(machine) || (at && !name_valid(ckpt))) {
		fprintf(stderr, "berth: invalid machine or checkpoint name '%s'\n", what);
		return 2;
	}
	bool to_stdout = !strcmp(file, "-");
	if (to_stdout && isatty(1)) {
		fprintf(stderr, "berth: not writing a compressed disk to a terminal\n");
		return 2;
	}
	if (!to_stdout && !force && access(file, F_OK) == 0) {
		fprintf(stderr, "berth: %s exists (--force to replace it)\n", file);
		return 1;
	}
	/* Written beside FILE and renamed when complete: FILE is never a
	 * partial export. */
	snprintf(part, sizeof(part), "%s.part", file);
	fd = to_stdout ? dup(1) : open(part, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		fprintf(stderr, "berth: cannot create %s: %s\n", part, strerror(errno));
		return 1;
	}
	snprintf(path, sizeof(path), "/v1/machines/%s/export%s%s", machine,
		 at ? "?checkpoint=" : "", ckpt);
	struct cli_progress p = { .on = !c->json && isatty(2), .label = "exporting", .t0 = mono_ms(),
			      .c = c, .machine = machine };
	int64_t t0 = mono_ms();
	int hr = hostapi_download_as(c->sock, client_token(c), path, fd, cli_progress_draw, &p,
				     &status, &r, err, sizeof(err));
	cli_progress_end(&p);
	if (hr < 0) {
		fprintf(stderr, "berth: %s\n", err);
		goto out;
	}
	if (status != 200) {
		fprintf(stderr, "berth: %s\n", hostapi_message(r, "the export failed"));
		goto out;
	}
	if (to_stdout) {
		close(fd);
		fd = -1;
		rc = 0;
		goto out;
	}
	if (fsync(fd) < 0 || close(fd) < 0) {
		fd = -1;
		fprintf(stderr, "berth: cannot write %s: %s\n", part, strerror(errno));
		goto out;
	}
	fd = -1;
	if (rename(part, file) < 0) {
		fprintf(stderr, "berth: cannot rename %s to %s: %s\n", part, file, strerror(errno));
		goto out;
	}
	struct stat sb;
	uint64_t bytes = stat(file, &sb) == 0 ? (uint64_t)sb.st_size : 0;
	double secs = (double)(mono_ms() - t0) / 1000.0;
	if (c->json) {
		json_t *j = json_pack("{s:s, s:s, s:s*, s:I, s:f}", "file", file, "machine",
				      machine, "checkpoint", at ? ckpt : NULL, "bytes",
				      (json_int_t)bytes, "seconds", secs);
		cli_print_json(j);
		json_decref(j);
	} else {
		char b[32];
		size_format(bytes, b, sizeof(b));
		printf("exported %s to %s (%s) in %.1f s\n", what, file, b, secs);
	}
	rc = 0;
out:
	if (fd >= 0)
		close(fd);
	if (rc != 0 && !to_stdout)
		unlink(part);
	json_decref(r);
	return rc;
}

/* DATA: the argv of berth image save. */
static void print_saved(json_t *r, void *data)
{
	char **argv = data;

	printf("image %s made from %s (private to you until root publishes it)\n",
	       cli_jstr(r, "name"), argv[2]);
}

/* berth image save MACHINE IMAGE [--checkpoint C] */
static int image_save(struct client *c, int argc, char **argv)
{
	const char *ckpt = NULL, *v;
	char path[256];
	int rc;

	for (int j = 4; j < argc; j++) {
		if ((v = cli_optval(argc, argv, &j, "--checkpoint"))) {
			ckpt = v;
		} else {
			fprintf(stderr, "berth image save: unexpected argument '%s'\n", argv[j]);
			return 2;
		}
	}
	if (!name_valid(argv[2])) {
		fprintf(stderr, "berth: invalid machine name '%s'\n", argv[2]);
		return 2;
	}
	json_t *body = json_pack("{s:s, s:s*}", "name", argv[3], "checkpoint", ckpt);
	snprintf(path, sizeof(path), "/v1/machines/%s/image", argv[2]);
	rc = cli_call_print(c, "POST", path, body, print_saved, argv);
	json_decref(body);
	return rc;
}

static void print_published(json_t *r, void *data)
{
	printf("image %s is %s\n", cli_jstr(r, "name"),
	       json_is_true(json_object_get(r, "public")) ? "public" : "private to its owner");
	(void)data;
}

/* berth image publish|unpublish NAME (root) */
static int image_publish(struct client *c, const char *name, bool pub)
{
	char path[256];
	int rc;

	if (!name_valid(name)) {
		fprintf(stderr, "berth: invalid image name '%s'\n", name);
		return 2;
	}
	json_t *body = json_pack("{s:b}", "public", pub);
	snprintf(path, sizeof(path), "/v1/images/%s", name);
	rc = cli_call_print(c, "PATCH", path, body, print_published, NULL);
	json_decref(body);
	return rc;
}

int cmd_image(struct client *c, int argc, char **argv)
{
	json_t *r;
	char path[256];

	if (argc >= 2 && !strcmp(argv[1], "ls"))
		return cli_call_print(c, "GET", "/v1/images", NULL, print_images, NULL);
	if (argc >= 2 && !strcmp(argv[1], "import"))
		return image_import(c, argc, argv);
	if (argc >= 2 && !strcmp(argv[1], "export"))
		return image_export(c, argc, argv);
	if (argc >= 3 && !strcmp(argv[1], "build")) {
		const char *name = argv[2], *v;
		for (int j = 3; j < argc; j++) {
			if ((v = cli_optval(argc, argv, &j, "--name")))
				name = v;
			else {
				fprintf(stderr, "berth image build: unexpected argument '%s'\n", argv[j]);
				return 2;
			}
		}
		json_t *body = json_pack("{s:s, s:s}", "recipe", argv[2], "name", name);
		int64_t t0 = mono_ms();
		if (!c->json)
			fprintf(stderr, "building image %s from recipe %s (hostd's log shows the "
				"recipe's progress)…\n", name, argv[2]);
		int rc = cli_call(c, "POST", "/v1/images", body, &r);
		json_decref(body);
		if (rc < 0)
			return 1;
		if (c->json)
			cli_print_json(r);
		else
			printf("image %s built in %.1f s (sha256 %s)\n", name,
			       (double)(mono_ms() - t0) / 1000.0, cli_jstr(r, "sha256"));
		json_decref(r);
		return 0;
	}
	if (argc >= 4 && !strcmp(argv[1], "save"))
		return image_save(c, argc, argv);
	if (argc == 3 && (!strcmp(argv[1], "publish") || !strcmp(argv[1], "unpublish")))
		return image_publish(c, argv[2], !strcmp(argv[1], "publish"));
	if (argc == 3 && !strcmp(argv[1], "rm")) {
		if (!name_valid(argv[2])) {
			fprintf(stderr, "berth: invalid image name '%s'\n", argv[2]);
			return 2;
		}
		snprintf(path, sizeof(path), "/v1/images/%s", argv[2]);
		return cli_call_print(c, "DELETE", path, NULL, print_image_deleted, argv[2]);
	}
	fprintf(stderr, "usage: berth image ls | build RECIPE [--name N] | rm NAME\n"
		"       berth image save MACHINE IMAGE [--checkpoint C] | publish NAME | "
		"unpublish NAME\n"
		"       berth image import NAME FILE [--sha256 H] [--format raw|qcow2] "
		"[--like IMAGE] [--user U]\n"
		"       berth image export MACHINE[@CHECKPOINT] FILE.zst [--force]\n");
	return 2;
}
