/* berth cp: a file into or out of a machine, through hostd's files routes
 * (/v1/machines/NAME/files?path=, the machine's SFTP).  One side is
 * MACHINE:PATH, the other a local file ("-": stdout, for a copy out). */
#include <errno.h>
#include <fcntl.h>
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

/* "NAME:PATH" into NAME (NAMELEN bytes) and *PATH; false when S is not one
 * (a local path: no ':' before the first '/', or none at all). */
static bool remote_of(const char *s, char *name, size_t namelen, const char **path)
{
	const char *colon = strchr(s, ':'), *slash = strchr(s, '/');

	if (!colon || colon == s || (slash && slash < colon) || (size_t)(colon - s) >= namelen)
		return false;
	snprintf(name, namelen, "%.*s", (int)(colon - s), s);
	*path = colon + 1;
	return true;
}

/* /v1/machines/NAME/files?path=PATH[&mode=MODE] into OUT. */
static void files_url(struct buf *out, const char *name, const char *path, const char *mode)
{
	char *q = hostapi_escape(path);

	buf_printf(out, "/v1/machines/%s/files?path=%s", name, q);
	if (mode)
		buf_printf(out, "&mode=%s", mode);
	free(q);
}

static int cp_in(struct client *c, const char *local, const char *name, const char *path)
{
	struct buf url = BUF_INIT;
	struct stat sb;
	char err[512], mode[8];
	json_t *r = NULL;
	long status;
	int fd, rc = 1;

	fd = open(local, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
		fprintf(stderr, "berth cp: %s: %s\n", local,
			fd < 0 ? strerror(errno) : "not a regular file");
		if (fd >= 0)
			close(fd);
		return 1;
	}
	snprintf(mode, sizeof(mode), "%o", (unsigned)(sb.st_mode & 0777));
	files_url(&url, name, path, mode);
	struct cli_progress p = { .on = !c->json && isatty(2), .label = "copying", .t0 = mono_ms() };
	if (hostapi_upload_as(c->sock, client_token(c), "PUT", buf_str(&url), fd,
			      (uint64_t)sb.st_size, cli_progress_draw, &p, &status, &r, err,
			      sizeof(err)) < 0) {
		cli_progress_end(&p);
		fprintf(stderr, "berth cp: %s\n", err);
		goto out;
	}
	cli_progress_end(&p);
	if (status < 200 || status > 299) {
		fprintf(stderr, "berth cp: %s\n", hostapi_message(r, "the copy failed"));
		goto out;
	}
	if (c->json)
		cli_print_json(r);
	rc = 0;
out:
	json_decref(r);
	buf_free(&url);
	close(fd);
	return rc;
}

static int cp_out(struct client *c, const char *name, const char *path, const char *local)
{
	struct buf url = BUF_INIT, part = BUF_INIT;
	char err[512];
	json_t *r = NULL;
	long status;
	int fd, rc = 1;
	bool out = !strcmp(local, "-");
	struct stat sb;

	/* Into a directory: the file's own name there. */
	if (!out && stat(local, &sb) == 0 && S_ISDIR(sb.st_mode)) {
		const char *base = strrchr(path, '/');
		buf_printf(&part, "%s/%s", local, base ? base + 1 : path);
		local = NULL;
	}
	char *dst = local ? strdup(local) : buf_detach(&part);
	if (!dst)
		abort();
	/* A part file beside it, renamed at the end: nothing half-copied. */
	buf_reset(&part);
	buf_printf(&part, "%s.berth-part", dst);
	fd = out ? 1 : open(buf_str(&part), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		fprintf(stderr, "berth cp: %s: %s\n", buf_str(&part), strerror(errno));
		goto out;
	}
	files_url(&url, name, path, NULL);
	struct cli_progress p = { .on = !c->json && isatty(2) && !out, .label = "copying",
				  .t0 = mono_ms() };
	int hr = hostapi_download_as(c->sock, client_token(c), buf_str(&url), fd,
				     cli_progress_draw, &p, &status, &r, err, sizeof(err));
	cli_progress_end(&p);
	if (status && (status < 200 || status > 299))
		fprintf(stderr, "berth cp: %s\n", hostapi_message(r, "the copy failed"));
	else if (hr < 0)
		fprintf(stderr, "berth cp: %s\n", err);
	else if (!out && (fsync(fd) < 0 || rename(buf_str(&part), dst) < 0))
		fprintf(stderr, "berth cp: %s: %s\n", dst, strerror(errno));
	else
		rc = 0;
	if (!out) {
		close(fd);
		if (rc != 0)
			unlink(buf_str(&part));
	}
out:
	json_decref(r);
	buf_free(&url);
	buf_free(&part);
	free(dst);
	return rc;
}

int cmd_cp(struct client *c, int argc, char **argv)
{
	char from_m[64], to_m[64];
	const char *from_p, *to_p;

	if (argc != 3) {
		fprintf(stderr, "usage: berth cp FILE MACHINE:PATH | berth cp MACHINE:PATH FILE|DIR|-\n");
		return 2;
	}
	bool from_r = remote_of(argv[1], from_m, sizeof(from_m), &from_p);
	bool to_r = remote_of(argv[2], to_m, sizeof(to_m), &to_p);
	if (from_r == to_r) {
		fprintf(stderr, "berth cp: one side must be MACHINE:PATH and the other a local "
			"file (got '%s' and '%s')\n", argv[1], argv[2]);
		return 2;
	}
	const char *m = from_r ? from_m : to_m;
	if (!name_valid(m)) {
		fprintf(stderr, "berth: invalid machine name '%s'\n", m);
		return 2;
	}
	if (!*(from_r ? from_p : to_p)) {
		fprintf(stderr, "berth cp: %s: no path after the machine's name\n",
			from_r ? argv[1] : argv[2]);
		return 2;
	}
	return from_r ? cp_out(c, from_m, from_p, argv[2]) : cp_in(c, argv[1], to_m, to_p);
}
