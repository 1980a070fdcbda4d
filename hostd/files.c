#include "hostd/files.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libssh/libssh.h>
#include <libssh/sftp.h>

#include "common/buf.h"
#include "common/log.h"
#include "common/sshexec.h"
#include "common/util.h"
#include "hostd/exec.h"
#include "hostd/hostd.h"
#include "hostd/machine.h"
#include "common/banned.h"

#define PATH_MAX_LEN 4096
/* A listing stops here (an answer is one JSON document). */
#define LIST_MAX 100000
/* A recursive remove goes no deeper. */
#define REMOVE_DEPTH 64
/* libssh's timeout for each SFTP request. */
#define SFTP_TIMEOUT_S 60

/* One SFTP session on a machine, for one request. */
struct fsess {
	struct hostd *h;
	struct machine_ssh ms;
	struct sshexec_target t;
	ssh_session s;
	sftp_session sftp;
	const char *name;
};

static int path_ok(const char *path, struct err *e)
{
	if (!path || !*path)
		return err_set(e, 400, "invalid_path", "give the file as ?path=/absolute/path");
	if (strlen(path) > PATH_MAX_LEN)
		return err_set(e, 400, "invalid_path", "the path is longer than %d bytes",
			       PATH_MAX_LEN);
	return 0;
}

/* What SFTP said of PATH, as an error naming the machine and the path. */
static int sftp_fail(struct fsess *f, const char *path, const char *what, struct err *e)
{
	int code = f->sftp ? sftp_get_error(f->sftp) : -1;

	switch (code) {
	case SSH_FX_NO_SUCH_FILE:
	case SSH_FX_NO_SUCH_PATH:
		return err_set(e, 404, "no_such_file", "machine %s: %s: no such file or directory",
			       f->name, path);
	case SSH_FX_PERMISSION_DENIED:
	case SSH_FX_WRITE_PROTECT:
		return err_set(e, 403, "permission_denied", "machine %s: %s: permission denied "
			       "(files are read and written as %s)", f->name, path, f->ms.user);
	case SSH_FX_FILE_ALREADY_EXISTS:
		return err_set(e, 409, "exists", "machine %s: %s exists", f->name, path);
	default:
		return err_set(e, 502, "sftp_failed", "machine %s: %s %s failed: %s", f->name, what,
			       path, ssh_get_error(f->s));
	}
}

/* OWNER's machine NAME, woken, with an SFTP session: a kept SSH session
 * first, a new one when that one had died. */
static int fs_open(struct hostd *h, const char *owner, const char *name, struct fsess *f,
		   struct err *e)
{
	char err[512];
	bool kept;
	long sec = SFTP_TIMEOUT_S;

	memset(f, 0, sizeof(*f));
	f->h = h;
	f->name = name;
	if (machine_ssh(h, owner, name, true, &f->ms, e) < 0)
		return -1;
	f->t = (struct sshexec_target){ .host = f->ms.host, .port = f->ms.port,
					.user = f->ms.user, .key_b64 = h->key.private_pem,
					.connect_timeout_ms = machine_ssh_timeout_ms(h),
					.host_key = f->ms.m.host_key };
	for (int try = 0; try < 2; try++) {
		f->s = exec_session_get(h->execs, f->ms.m.id, &f->t, &kept, err, sizeof(err));
		if (!f->s)
			return err_set(e, 502, "ssh_failed", "machine %s: %s", name, err);
		ssh_options_set(f->s, SSH_OPTIONS_TIMEOUT, &sec);
		f->sftp = sftp_new(f->s);
		if (f->sftp && sftp_init(f->sftp) == SSH_OK)
			return 0;
		snprintf(err, sizeof(err), "%s", ssh_get_error(f->s));
		if (f->sftp)
			sftp_free(f->sftp);
		f->sftp = NULL;
		exec_session_put(h->execs, f->ms.m.id, &f->t, f->s, false);
		f->s = NULL;
		if (!kept)
			return err_set(e, 502, "sftp_failed", "machine %s offers no SFTP (its sshd "
				       "has no sftp subsystem?): %s", name, err);
	}
	return err_set(e, 502, "sftp_failed", "machine %s: no SFTP session", name);
}

static void fs_close(struct fsess *f, bool ok)
{
	if (f->sftp)
		sftp_free(f->sftp);
	f->sftp = NULL;
	if (f->s)
		exec_session_put(f->h->execs, f->ms.m.id, &f->t, f->s, ok);
	f->s = NULL;
}

static const char *type_name(uint8_t type)
{
	switch (type) {
	case SSH_FILEXFER_TYPE_REGULAR:
		return "file";
	case SSH_FILEXFER_TYPE_DIRECTORY:
		return "directory";
	case SSH_FILEXFER_TYPE_SYMLINK:
		return "symlink";
	default:
		return "other";
	}
}

static json_t *attr_json(sftp_attributes a)
{
	char mode[8];

	snprintf(mode, sizeof(mode), "%04o", (unsigned)(a->permissions & 07777));
	return json_pack("{s:s, s:I, s:s, s:I}", "type", type_name(a->type), "size",
			 (json_int_t)a->size, "mode", mode, "mtime", (json_int_t)a->mtime);
}

/* ---- reading ----------------------------------------------------------- */

struct file_read {
	struct fsess f;
	sftp_file file;
	bool failed;
};

struct file_read *files_read_begin(struct hostd *h, const char *owner, const char *name,
				   const char *path, uint64_t *size, struct err *e)
{
	struct file_read *r;
	sftp_attributes a;

	if (path_ok(path, e) < 0)
		return NULL;
	r = calloc(1, sizeof(*r));
	if (!r)
		abort();
	if (fs_open(h, owner, name, &r->f, e) < 0) {
		free(r);
		return NULL;
	}
	a = sftp_stat(r->f.sftp, path);
	if (!a) {
		sftp_fail(&r->f, path, "stat", e);
		goto fail;
	}
	if (a->type == SSH_FILEXFER_TYPE_DIRECTORY) {
		sftp_attributes_free(a);
		err_set(e, 409, "is_a_directory", "machine %s: %s is a directory (GET "
			"/v1/machines/%s/files/list?path=... lists it)", name, path, name);
		goto fail;
	}
	*size = a->size;
	sftp_attributes_free(a);
	r->file = sftp_open(r->f.sftp, path, O_RDONLY, 0);
	if (!r->file) {
		sftp_fail(&r->f, path, "open", e);
		goto fail;
	}
	return r;
fail:
	fs_close(&r->f, err_isset(e) && e->status < 500);
	free(r);
	return NULL;
}

ssize_t files_read(struct file_read *r, char *buf, size_t max)
{
	ssize_t n;

	if (max > 64 * 1024)
		max = 64 * 1024;
	n = sftp_read(r->file, buf, max);
	if (n < 0) {
		r->failed = true;
		log_warn("machine %s: reading a file over SFTP failed: %s", r->f.name,
			 ssh_get_error(r->f.s));
	}
	return n;
}

void files_read_end(struct file_read *r)
{
	if (!r)
		return;
	if (r->file)
		sftp_close(r->file);
	fs_close(&r->f, !r->failed);
	free(r);
}

/* ---- writing ----------------------------------------------------------- */

struct file_write {
	struct fsess f;
	sftp_file file;
	char path[PATH_MAX_LEN + 1], tmp[PATH_MAX_LEN + 64];
	uint64_t written;
	struct err err;          /* the first failure of a feed */
};

struct file_write *files_write_begin(struct hostd *h, const char *owner, const char *name,
				     const char *path, unsigned mode, struct err *e)
{
	struct file_write *w;
	unsigned char rnd[6];
	const char *slash;

	if (path_ok(path, e) < 0)
		return NULL;
	if (mode > 07777) {
		err_set(e, 400, "invalid_mode", "mode %o is not a permission mode (0 to 7777, octal)",
			mode);
		return NULL;
	}
	w = calloc(1, sizeof(*w));
	if (!w)
		abort();
	snprintf(w->path, sizeof(w->path), "%s", path);
	/* .NAME.berth-RANDOM beside it: the rename is then in one directory. */
	slash = strrchr(path, '/');
	if (random_bytes(rnd, sizeof(rnd)) < 0)
		abort();
	snprintf(w->tmp, sizeof(w->tmp), "%.*s.%s.berth-%02x%02x%02x%02x%02x%02x",
		 slash ? (int)(slash - path + 1) : 0, path, slash ? slash + 1 : path, rnd[0],
		 rnd[1], rnd[2], rnd[3], rnd[4], rnd[5]);
	if (fs_open(h, owner, name, &w->f, e) < 0) {
		free(w);
		return NULL;
	}
	sftp_attributes a = sftp_stat(w->f.sftp, path);
	if (a) {
		bool dir = a->type == SSH_FILEXFER_TYPE_DIRECTORY;
		sftp_attributes_free(a);
		if (dir) {
			err_set(e, 409, "is_a_directory", "machine %s: %s is a directory", name, path);
			goto fail;
		}
	}
	w->file = sftp_open(w->f.sftp, w->tmp, O_WRONLY | O_CREAT | O_EXCL, mode);
	if (!w->file) {
		/* Once more on a new session: right after a stat that found
		 * nothing (a new file), the open failed now and then in full
		 * runs, with the stat's stale "no such file" as its error (as
		 * a directory's tar did: tar_run).  Cause not found. */
		log_warn("machine %s: creating %s failed (SFTP status %d: %s): again on a new "
			 "session", name, w->tmp, sftp_get_error(w->f.sftp), ssh_get_error(w->f.s));
		fs_close(&w->f, false);
		if (fs_open(h, owner, name, &w->f, e) < 0) {
			free(w);
			return NULL;
		}
		w->file = sftp_open(w->f.sftp, w->tmp, O_WRONLY | O_CREAT | O_EXCL, mode);
	}
	if (!w->file) {
		/* Name the file asked for, not the temporary one. */
		sftp_fail(&w->f, path, "create", e);
		goto fail;
	}
	return w;
fail:
	fs_close(&w->f, true);
	free(w);
	return NULL;
}

void files_write_feed(struct file_write *w, const void *data, size_t len)
{
	size_t done = 0;

	while (!err_isset(&w->err) && done < len) {
		ssize_t n = sftp_write(w->file, (const char *)data + done, len - done);
		if (n <= 0) {
			sftp_fail(&w->f, w->path, "write", &w->err);
			break;
		}
		done += (size_t)n;
		w->written += (uint64_t)n;
	}
}

/* The temporary file closed and removed (after a failure). */
static void write_discard(struct file_write *w)
{
	if (w->file)
		sftp_close(w->file);
	w->file = NULL;
	if (w->f.sftp && sftp_unlink(w->f.sftp, w->tmp) < 0)
		log_warn("machine %s: cannot remove %s: %s", w->f.name, w->tmp,
			 ssh_get_error(w->f.s));
}

int files_write_end(struct file_write *w, uint64_t *size, struct err *e)
{
	int rc = -1;

	if (err_isset(&w->err)) {
		*e = w->err;
		write_discard(w);
		goto out;
	}
	if (sftp_close(w->file) < 0) {
		w->file = NULL;
		sftp_fail(&w->f, w->path, "close", e);
		write_discard(w);
		goto out;
	}
	w->file = NULL;
	/* SFTP 3's rename does not replace an existing file (OpenSSH's
	 * sftp-server): then the old one goes first.  Between the two, PATH
	 * is missing for a moment; it is never half-written. */
	if (sftp_rename(w->f.sftp, w->tmp, w->path) < 0) {
		sftp_attributes a = sftp_lstat(w->f.sftp, w->path);
		bool replace = a && a->type != SSH_FILEXFER_TYPE_DIRECTORY;
		if (a)
			sftp_attributes_free(a);
		if (!replace || sftp_unlink(w->f.sftp, w->path) < 0 ||
		    sftp_rename(w->f.sftp, w->tmp, w->path) < 0) {
			sftp_fail(&w->f, w->path, "rename", e);
			write_discard(w);
			goto out;
		}
	}
	*size = w->written;
	rc = 0;
out:
	fs_close(&w->f, rc == 0 || e->status < 500);
	free(w);
	return rc;
}

void files_write_abort(struct file_write *w)
{
	if (!w)
		return;
	write_discard(w);
	fs_close(&w->f, false);
	free(w);
}

/* ---- the rest ---------------------------------------------------------- */

json_t *files_list(struct hostd *h, const char *owner, const char *name, const char *path,
		   struct err *e)
{
	struct fsess f;
	sftp_dir d;
	sftp_attributes a;
	json_t *l, *j = NULL;
	size_t n = 0;

	if (path_ok(path, e) < 0 || fs_open(h, owner, name, &f, e) < 0)
		return NULL;
	d = sftp_opendir(f.sftp, path);
	if (!d) {
		sftp_attributes st = sftp_stat(f.sftp, path);
		if (st && st->type != SSH_FILEXFER_TYPE_DIRECTORY)
			err_set(e, 409, "not_a_directory", "machine %s: %s is not a directory",
				name, path);
		else
			sftp_fail(&f, path, "opendir", e);
		if (st)
			sftp_attributes_free(st);
		fs_close(&f, e->status < 500);
		return NULL;
	}
	l = json_array();
	while ((a = sftp_readdir(f.sftp, d))) {
		if (strcmp(a->name, ".") && strcmp(a->name, "..") && n++ < LIST_MAX) {
			json_t *o = attr_json(a);
			json_object_set_new(o, "name", json_string(a->name));
			json_array_append_new(l, o);
		}
		sftp_attributes_free(a);
	}
	if (!sftp_dir_eof(d)) {
		sftp_fail(&f, path, "readdir", e);
		json_decref(l);
	} else {
		j = json_pack("{s:s, s:o}", "path", path, "entries", l);
		if (n > LIST_MAX)
			json_object_set_new(j, "truncated", json_true());
	}
	sftp_closedir(d);
	fs_close(&f, j != NULL);
	return j;
}

json_t *files_stat(struct hostd *h, const char *owner, const char *name, const char *path,
		   struct err *e)
{
	struct fsess f;
	sftp_attributes a;
	json_t *j;

	if (path_ok(path, e) < 0 || fs_open(h, owner, name, &f, e) < 0)
		return NULL;
	a = sftp_lstat(f.sftp, path);
	if (!a) {
		sftp_fail(&f, path, "stat", e);
		fs_close(&f, e->status < 500);
		return NULL;
	}
	j = attr_json(a);
	json_object_set_new(j, "path", json_string(path));
	json_object_set_new(j, "uid", json_integer(a->uid));
	json_object_set_new(j, "gid", json_integer(a->gid));
	if (a->type == SSH_FILEXFER_TYPE_SYMLINK) {
		char *target = sftp_readlink(f.sftp, path);
		if (target) {
			json_object_set_new(j, "target", json_string(target));
			ssh_string_free_char(target);
		}
	}
	sftp_attributes_free(a);
	fs_close(&f, true);
	return j;
}

int files_mkdir(struct hostd *h, const char *owner, const char *name, const char *path,
		bool parents, unsigned mode, struct err *e)
{
	struct fsess f;
	char part[PATH_MAX_LEN + 1];
	int rc = 0;

	if (path_ok(path, e) < 0)
		return -1;
	if (mode > 07777)
		return err_set(e, 400, "invalid_mode", "mode %o is not a permission mode", mode);
	if (fs_open(h, owner, name, &f, e) < 0)
		return -1;
	snprintf(part, sizeof(part), "%s", path);
	/* With PARENTS: each prefix ending before a '/', then PATH. */
	for (char *p = parents ? strchr(part + 1, '/') : NULL;; p = strchr(p + 1, '/')) {
		if (p)
			*p = '\0';
		if (*part && sftp_mkdir(f.sftp, part, mode) < 0) {
			sftp_attributes a = sftp_stat(f.sftp, part);
			bool dir = a && a->type == SSH_FILEXFER_TYPE_DIRECTORY;
			if (a)
				sftp_attributes_free(a);
			if (!dir || (!p && !parents)) {
				if (a && !dir)
					rc = err_set(e, 409, "not_a_directory", "machine %s: %s exists "
						     "and is not a directory", name, part);
				else if (a)
					rc = err_set(e, 409, "exists", "machine %s: %s exists", name,
						     part);
				else
					rc = sftp_fail(&f, part, "mkdir", e);
				break;
			}
		}
		if (!p)
			break;
		*p = '/';
	}
	fs_close(&f, rc == 0 || e->status < 500);
	return rc;
}

int files_move(struct hostd *h, const char *owner, const char *name, const char *from,
	       const char *to, struct err *e)
{
	struct fsess f;
	sftp_attributes a;
	int rc = 0;

	if (path_ok(from, e) < 0 || path_ok(to, e) < 0 || fs_open(h, owner, name, &f, e) < 0)
		return -1;
	if ((a = sftp_lstat(f.sftp, to))) {
		sftp_attributes_free(a);
		rc = err_set(e, 409, "exists", "machine %s: %s exists (a move replaces nothing; "
			     "remove it first)", name, to);
	} else if (sftp_rename(f.sftp, from, to) < 0) {
		rc = sftp_fail(&f, from, "rename", e);
	}
	fs_close(&f, rc == 0 || e->status < 500);
	return rc;
}

/* PATH and, when it is a directory, everything in it (DEPTH levels more). */
static int remove_tree_sftp(struct fsess *f, const char *path, int depth, int64_t *count,
			    struct err *e)
{
	sftp_attributes a = sftp_lstat(f->sftp, path), c;
	sftp_dir d;
	int rc = 0;

	if (!a)
		return sftp_fail(f, path, "stat", e);
	bool dir = a->type == SSH_FILEXFER_TYPE_DIRECTORY;
	sftp_attributes_free(a);
	if (!dir) {
		if (sftp_unlink(f->sftp, path) < 0)
			return sftp_fail(f, path, "unlink", e);
		(*count)++;
		return 0;
	}
	if (depth <= 0)
		return err_set(e, 400, "invalid_path", "machine %s: %s is more than %d directories "
			       "deep", f->name, path, REMOVE_DEPTH);
	if (!(d = sftp_opendir(f->sftp, path)))
		return sftp_fail(f, path, "opendir", e);
	while (rc == 0 && (c = sftp_readdir(f->sftp, d))) {
		if (strcmp(c->name, ".") && strcmp(c->name, "..")) {
			char *sub = NULL;
			if (asprintf(&sub, "%s/%s", path, c->name) < 0)
				abort();
			rc = remove_tree_sftp(f, sub, depth - 1, count, e);
			free(sub);
		}
		sftp_attributes_free(c);
	}
	sftp_closedir(d);
	if (rc == 0 && sftp_rmdir(f->sftp, path) < 0)
		rc = sftp_fail(f, path, "rmdir", e);
	if (rc == 0)
		(*count)++;
	return rc;
}

int files_remove(struct hostd *h, const char *owner, const char *name, const char *path,
		 bool recursive, int64_t *count, struct err *e)
{
	struct fsess f;
	sftp_attributes a;
	int rc = 0;

	*count = 0;
	if (path_ok(path, e) < 0 || fs_open(h, owner, name, &f, e) < 0)
		return -1;
	if (recursive) {
		rc = remove_tree_sftp(&f, path, REMOVE_DEPTH, count, e);
	} else if (!(a = sftp_lstat(f.sftp, path))) {
		rc = sftp_fail(&f, path, "stat", e);
	} else {
		bool dir = a->type == SSH_FILEXFER_TYPE_DIRECTORY;
		sftp_attributes_free(a);
		if (dir && sftp_rmdir(f.sftp, path) < 0) {
			sftp_dir d = sftp_opendir(f.sftp, path);
			int entries = 0;
			sftp_attributes c;
			while (d && (c = sftp_readdir(f.sftp, d))) {
				entries += strcmp(c->name, ".") && strcmp(c->name, "..");
				sftp_attributes_free(c);
			}
			if (d)
				sftp_closedir(d);
			rc = entries ? err_set(e, 409, "not_empty", "machine %s: directory %s is not "
					       "empty (recursive=1 removes it and what is in it)",
					       name, path)
				     : sftp_fail(&f, path, "rmdir", e);
		} else if (!dir && sftp_unlink(f.sftp, path) < 0) {
			rc = sftp_fail(&f, path, "unlink", e);
		}
		if (rc == 0)
			*count = 1;
	}
	fs_close(&f, rc == 0 || e->status < 500);
	return rc;
}

/* ---- a directory as tar -------------------------------------------------
 *
 * The machine's own tar, run over the kept SSH session on a thread of its
 * own: `tar -C DIR -cf - .` whose stdout is the answer, or `mkdir -p DIR
 * && tar -C DIR -xf -` whose stdin is the request's body.  Its stderr goes
 * to a memory file (never blocks), read for the error. */

struct file_tar {
	struct fsess f;
	bool extract;
	char *cmd;
	pthread_t thread;
	bool thread_on;
	int in_r, in_w, out_r, out_w, err_fd;
	struct sshexec_io io;
	int rc;
	char err[512];
	bool broken;             /* a write of the body failed: the run ended */
};

static void *tar_run(void *arg)
{
	struct file_tar *t = arg;

	t->io = (struct sshexec_io){ .in = t->in_r, .out = t->out_w, .err = t->err_fd, .ctl = -1 };
	t->rc = sshexec_run_session(t->f.s, &t->f.t, t->cmd, &t->io,
				    sshexec_now_ms() + t->f.t.connect_timeout_ms, t->err,
				    sizeof(t->err));
	if (t->rc < 0 && !t->io.started) {
		/* The session failed before tar started: a kept one may have
		 * died, and one whose SFTP stat had just failed (the directory
		 * to extract into is new) refused the channel now and then
		 * (t450 in full runs: libssh's error then still the stat's "SFTP
		 * server: No such file").  tar on a new session, with the whole
		 * time again. */
		log_warn("machine %s: the session failed before tar started (%s): a new one",
			 t->f.name, t->err);
		sshexec_disconnect(t->f.s);
		t->f.s = sshexec_connect(&t->f.t, sshexec_now_ms() + t->f.t.connect_timeout_ms,
					 t->err, sizeof(t->err));
		if (t->f.s)
			t->rc = sshexec_run_session(t->f.s, &t->f.t, t->cmd, &t->io,
						    sshexec_now_ms() + t->f.t.connect_timeout_ms,
						    t->err, sizeof(t->err));
	}
	if (t->out_w >= 0)
		close(t->out_w);
	if (t->in_r >= 0)
		close(t->in_r);
	t->out_w = t->in_r = -1;
	return NULL;
}

static void tar_join(struct file_tar *t)
{
	if (t->thread_on)
		pthread_join(t->thread, NULL);
	t->thread_on = false;
}

/* What tar said on stderr, its first line, into OUT. */
static void tar_stderr(struct file_tar *t, char *out, size_t outlen)
{
	ssize_t n = pread(t->err_fd, out, outlen - 1, 0);

	out[n > 0 ? n : 0] = '\0';
	out[strcspn(out, "\n")] = '\0';
}

static void tar_free(struct file_tar *t, bool keep)
{
	int *fds[] = { &t->in_r, &t->in_w, &t->out_r, &t->out_w, &t->err_fd };

	for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
		if (*fds[i] >= 0)
			close(*fds[i]);
	fs_close(&t->f, keep);
	free(t->cmd);
	free(t);
}

static struct file_tar *tar_begin(struct hostd *h, const char *owner, const char *name,
				  const char *path, bool extract, struct err *e)
{
	struct file_tar *t;
	struct buf cmd = BUF_INIT;
	char *argv[2] = { (char *)path, NULL }, *q;
	int p[2];

	if (path_ok(path, e) < 0)
		return NULL;
	t = calloc(1, sizeof(*t));
	if (!t)
		abort();
	t->in_r = t->in_w = t->out_r = t->out_w = t->err_fd = -1;
	t->extract = extract;
	if (fs_open(h, owner, name, &t->f, e) < 0) {
		free(t);
		return NULL;
	}
	sftp_attributes a = sftp_stat(t->f.sftp, path);
	if (!a && !extract) {
		sftp_fail(&t->f, path, "stat", e);
		goto fail;
	}
	if (a) {
		bool dir = a->type == SSH_FILEXFER_TYPE_DIRECTORY;
		sftp_attributes_free(a);
		if (!dir) {
			err_set(e, 409, "not_a_directory", "machine %s: %s is not a directory", name,
				path);
			goto fail;
		}
	}
	/* The session is the tar's now. */
	sftp_free(t->f.sftp);
	t->f.sftp = NULL;
	q = sshexec_quote(argv);
	if (!q)
		abort();
	if (extract)
		buf_printf(&cmd, "mkdir -p %s && exec tar -C %s -xf -", q, q);
	else
		buf_printf(&cmd, "exec tar -C %s -cf - .", q);
	free(q);
	t->cmd = buf_detach(&cmd);
	t->err_fd = memfd_create("berth-tar-stderr", MFD_CLOEXEC);
	if (t->err_fd < 0 || pipe2(p, O_CLOEXEC) < 0) {
		err_errno(e, errno, "tar in %s: pipe", name);
		goto fail;
	}
	if (extract) {
		t->in_r = p[0];
		t->in_w = p[1];
	} else {
		t->out_r = p[0];
		t->out_w = p[1];
	}
	if (pthread_create(&t->thread, NULL, tar_run, t) != 0) {
		err_set(e, 500, "internal", "tar in %s: cannot start a thread", name);
		goto fail;
	}
	t->thread_on = true;
	return t;
fail:
	tar_free(t, e->status < 500);
	return NULL;
}

struct file_tar *files_tar_read_begin(struct hostd *h, const char *owner, const char *name,
				      const char *path, struct err *e)
{
	return tar_begin(h, owner, name, path, false, e);
}

ssize_t files_tar_read(struct file_tar *t, char *buf, size_t max)
{
	char said[256];
	ssize_t n;

	do
		n = read(t->out_r, buf, max);
	while (n < 0 && errno == EINTR);
	if (n != 0)
		return n;
	tar_join(t);
	if (t->rc == 0 && t->io.status == 0)
		return 0;
	tar_stderr(t, said, sizeof(said));
	log_warn("machine %s: tar of a directory failed (%s): %s", t->f.name,
		 t->rc < 0 ? t->err : "exit status", said);
	return -1;
}

struct file_tar *files_tar_write_begin(struct hostd *h, const char *owner, const char *name,
				       const char *path, struct err *e)
{
	return tar_begin(h, owner, name, path, true, e);
}

void files_tar_feed(struct file_tar *t, const void *data, size_t len)
{
	/* A failure: tar ended early, and its status says why. */
	if (!t->broken && fd_write_all(t->in_w, data, len) < 0)
		t->broken = true;
}

int files_tar_end(struct file_tar *t, struct err *e)
{
	char said[256];
	int rc = 0;
	bool ended;

	if (t->extract) {
		close(t->in_w);
		t->in_w = -1;
	} else {
		close(t->out_r);	/* a reader that went: the run ends (EPIPE) */
		t->out_r = -1;
	}
	tar_join(t);
	ended = t->rc == 0 && t->io.status == 0;
	if (e && !ended) {
		tar_stderr(t, said, sizeof(said));
		if (t->rc < 0)
			rc = err_set(e, 502, "ssh_failed", "machine %s: %s", t->f.name, t->err);
		else
			rc = err_set(e, 422, "tar_failed", "machine %s: tar -x exited with %d: %s",
				     t->f.name, t->io.status, said[0] ? said : "(nothing on stderr)");
	}
	tar_free(t, t->rc == 0);
	return rc;
}
