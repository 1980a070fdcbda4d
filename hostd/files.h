/* A machine's files for API callers (/v1/machines/NAME/files...), through
 * its sshd's SFTP subsystem, as the image's login user: read and write
 * (streamed, any size, byte-exact), list, stat, make a directory, move,
 * remove.  Every image with an sshd that has SFTP works (OpenSSH's
 * sftp-server; berth's tiny image has it beside dropbear).  The SSH
 * session is one hostd keeps for the machine (hostd/exec.h). */
#ifndef BERTH_FILES_H
#define BERTH_FILES_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/err.h"

struct hostd;
struct file_read;
struct file_write;

/* Errors name the machine and the path: 404 "no_such_file", 403
 * "permission_denied", 409 "is_a_directory", "not_a_directory",
 * "exists", "not_empty", 400 "invalid_path", 502 "sftp_failed" (the
 * machine's sshd offers no SFTP, or an operation failed otherwise). */

/* Open OWNER's machine NAME's file PATH for reading (the machine woken
 * first); *SIZE its size then.  NULL with E. */
struct file_read *files_read_begin(struct hostd *h, const char *owner, const char *name,
				   const char *path, uint64_t *size, struct err *e);
/* Up to MAX bytes into BUF: their number, 0 at the end, -1 on a failure
 * (logged). */
ssize_t files_read(struct file_read *r, char *buf, size_t max);
void files_read_end(struct file_read *r);

/* Start writing PATH (MODE its permission bits): what is fed goes to a
 * temporary file beside it, which files_write_end renames over PATH. */
struct file_write *files_write_begin(struct hostd *h, const char *owner, const char *name,
				     const char *path, unsigned mode, struct err *e);
void files_write_feed(struct file_write *w, const void *data, size_t len);
/* The end of the body: 0 with *SIZE the bytes written, or -1 with E (and
 * nothing left behind).  Frees W either way. */
int files_write_end(struct file_write *w, uint64_t *size, struct err *e);
/* The client went: the temporary file is removed; frees W. */
void files_write_abort(struct file_write *w);

/* {"path", "entries": [{"name", "type", "size", "mode" ("0644"), "mtime"}, ...]}. */
json_t *files_list(struct hostd *h, const char *owner, const char *name, const char *path,
		   struct err *e);
/* {"path", "type": "file"|"directory"|"symlink"|"other", "size", "mode",
 * "mtime", "uid", "gid"[, "target"]} (a symbolic link is not followed). */
json_t *files_stat(struct hostd *h, const char *owner, const char *name, const char *path,
		   struct err *e);
int files_mkdir(struct hostd *h, const char *owner, const char *name, const char *path,
		bool parents, unsigned mode, struct err *e);
/* FROM to TO, which must not exist (409 "exists"). */
int files_move(struct hostd *h, const char *owner, const char *name, const char *from,
	       const char *to, struct err *e);
/* A file, a symbolic link or an empty directory; RECURSIVE: a directory
 * and everything in it (its links are removed, not followed).  *COUNT:
 * the entries removed. */
int files_remove(struct hostd *h, const char *owner, const char *name, const char *path,
		 bool recursive, int64_t *count, struct err *e);

/* A directory as a tar stream, made and unpacked by the machine's own tar
 * (over SSH; any image with tar).  Reading: PATH must be a directory;
 * files_tar_read as files_read (-1 also when tar failed: the stream is
 * then cut short), then files_tar_end(T, NULL).  Writing: PATH is made
 * when missing; the body is fed, then files_tar_end says whether tar took
 * it all (422 "tar_failed" with tar's first line of stderr).  What a tar
 * cut short had unpacked stays. */
struct file_tar;
struct file_tar *files_tar_read_begin(struct hostd *h, const char *owner, const char *name,
				      const char *path, struct err *e);
ssize_t files_tar_read(struct file_tar *t, char *buf, size_t max);
struct file_tar *files_tar_write_begin(struct hostd *h, const char *owner, const char *name,
				       const char *path, struct err *e);
void files_tar_feed(struct file_tar *t, const void *data, size_t len);
/* The end (also of a reader that went, or a body cut off): 0, or -1 with E
 * (may be NULL).  Frees T. */
int files_tar_end(struct file_tar *t, struct err *e);

#endif
