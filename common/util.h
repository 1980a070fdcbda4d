/* Small helpers shared by the daemons and the CLI. */
#ifndef BERTH_UTIL_H
#define BERTH_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

/* berth's version: /v1/info's, berth mcp's serverInfo. */
#define BERTH_VERSION "0.1.0"

/* snprintf into OUT where truncation would be a bug of berth's, not bad
 * input (a path under the state directory, whose length hostd checks at
 * start; a name already validated): on truncation the call site is logged
 * and the process aborts, as git's xsnprintf does.  Returns the length
 * written.  Input that may be too long is checked before, with its own
 * error. */
#define xsnprintf(out, outlen, ...) \
	xsnprintf_at(__FILE__, __LINE__, (out), (outlen), __VA_ARGS__)
int xsnprintf_at(const char *file, int line, char *out, size_t outlen, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

/* True when S is a DNS label: [a-z0-9-]{1,63}, no leading or trailing '-'.
 * Machine, image and checkpoint names must be. */
bool name_valid(const char *s);
/* True when S can be an owner's name: a local user name (or "uidN"), so
 * more than a DNS label: 1 to 63 printable ASCII characters, no space,
 * no '/', not starting with '-'. */
bool user_name_valid(const char *s);

/* Parse a size: digits with an optional binary suffix K, M, G or T
 * (optionally followed by "i", "iB" or "B"); a bare number is in UNIT
 * bytes (1 for disks, 1 MiB for memory).  Returns 0 and sets *out, or -1 on
 * a malformed value or an overflow. */
int size_parse(const char *s, uint64_t unit, uint64_t *out);
/* A duration: a whole number with an optional unit s, m, h or d ("90",
 * "90s", "15m", "2h"), into seconds (at most ten years); "never" is -1.
 * -1 on anything else. */
int duration_parse(const char *s, int64_t *out);
/* SECONDS as the largest whole unit ("15m", "90s", "2h"); -1 as "never". */
void duration_format(int64_t seconds, char *out, size_t outlen);
/* Format BYTES as "512M", "4G", "1.5G" into OUT. */
void size_format(uint64_t bytes, char *out, size_t outlen);

/* Seconds since the epoch (wall clock) and a monotonic millisecond clock. */
int64_t now_s(void);
int64_t mono_ms(void);
int64_t mono_us(void);

/* mkdir -p with MODE for the created directories.  0 or -1 (errno set). */
int mkdir_p(const char *path, unsigned mode);
/* Write LEN bytes to PATH atomically (temp file, fsync, rename, fsync of
 * the directory) with MODE.  0 or -1 with E set. */
int file_write_atomic(const char *path, const void *data, size_t len,
		      unsigned mode, struct err *e);
/* Write all LEN bytes of DATA to FD, across EINTR and short writes.  0, or
 * -1 with errno set. */
int fd_write_all(int fd, const void *data, size_t len);
/* Read a whole (small) file into a NUL-terminated malloc'd string.
 * Returns NULL with E set (errno kept) on failure. */
char *file_read(const char *path, size_t max, struct err *e);
/* PATH opened for reading the way a daemon must open its configuration
 * and keys: not through a symbolic link (O_NOFOLLOW), a regular file owned
 * by root or by the calling process's user, not writable by group or
 * others.  A descriptor (O_CLOEXEC) or -1 with E naming the path, its owner
 * and mode and what to do (400 "untrusted_file"; errno EPERM, ELOOP or
 * open's). */
int file_open_trusted(const char *path, struct err *e);
/* file_read through file_open_trusted. */
char *file_read_trusted(const char *path, size_t max, struct err *e);
/* file_read_trusted, except that PATH may be a symbolic link (certbot's
 * live/ files are, into archive/) when the link belongs to root (or the
 * calling process's user), the directory it is in and the one of the file
 * it names pass dir_check_trusted, and that file is no link itself; the
 * file is then read as file_read_trusted reads it.  For TLS certificates
 * and keys, which other tools renew by replacing the link. */
char *file_read_trusted_link(const char *path, size_t max, struct err *e);
/* DIR (resolved) and every directory above it up to / belong to root (or
 * the calling process's user) and are not writable by group or others; a
 * sticky directory above it (/tmp) may be.  0 (also when DIR does not
 * exist yet), or -1 with E naming WHAT and DIR, the directory at fault,
 * its owner and mode and the fix (400 "untrusted_dir"). */
int dir_check_trusted(const char *dir, const char *what, struct err *e);
/* Remove PATH (a file) or a directory and the plain files in it (one level).
 * A missing PATH is success.  0 or -1 with E set. */
int remove_tree(const char *path, struct err *e);
/* Copy SRC to DST (created with MODE, fsync'd).  0 or -1 with E set. */
int file_copy(const char *src, const char *dst, unsigned mode, struct err *e);
/* Give PATH owner UID, group GID and permission bits MODE, changing only
 * what differs (a stat when nothing does).  A symbolic link is refused,
 * never followed.  0 when nothing changed, 1 when something did, -1 with E
 * set. */
int path_set_owner(const char *path, unsigned uid, unsigned gid, unsigned mode,
		   struct err *e);

/* Random bytes from the kernel.  0 or -1. */
int random_bytes(void *out, size_t len);
/* A random RFC 4122 version-4 UUID as 36 characters + NUL. */
int uuid_generate(char out[37]);
/* A random locally administered unicast MAC in QEMU's 52:54:00 range. */
int mac_generate(char out[18]);
/* A TCP port on 127.0.0.1 that nothing listens on right now, or -1. */
int port_pick_free(void);
/* True when nothing is bound to 127.0.0.1:PORT. */
bool port_is_free(int port);

/* Microseconds this thread has spent waiting on libvirt and external tools
 * since ext_time_reset(): what an API call spends outside hostd's own code.
 * (A per-thread counter, not an error channel.) */
void ext_time_add(int64_t us);
int64_t ext_time_get(void);
void ext_time_reset(void);

/* The Content-Type for a file named PATH, by its extension (text in
 * UTF-8); application/octet-stream when unknown. */
const char *mime_type(const char *path);
/* Whether REL is a relative path a web server may look up: segments of
 * [A-Za-z0-9._-], none empty or starting with '.' (no "..", nothing
 * hidden), at most 200 bytes. */
bool web_path_ok(const char *rel);
/* File REL (web_path_ok) under DIR, read whole (malloc'd, *LEN bytes) when
 * it is a regular file of at most MAX bytes reached without a symbolic
 * link and without leaving DIR (openat2 RESOLVE_BENEATH and
 * RESOLVE_NO_SYMLINKS; O_NOFOLLOW on its last part where the kernel has
 * no openat2).  What is read is what is sent, should the file change
 * meanwhile.  NULL when it is not there or not such a file. */
char *file_read_beneath(const char *dir, const char *rel, size_t max, size_t *len);

/* Directory of the running executable (e.g. ".../bin"), into OUT. */
int exe_dir(char *out, size_t outlen);

#endif
