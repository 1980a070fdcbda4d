#include "common/util.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <linux/openat2.h>

#include "common/banned.h"

int xsnprintf_at(const char *file, int line, char *out, size_t outlen, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(out, outlen, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= outlen) {
		/* stderr directly: the log itself may be what is broken. */
		fprintf(stderr, "BUG: %s:%d: %d bytes do not fit in %zu (\"%.60s...\")\n", file,
			line, n, outlen, out);
		abort();
	}
	return n;
}

bool name_valid(const char *s)
{
	size_t n = strlen(s);

	if (n < 1 || n > 63 || s[0] == '-' || s[n - 1] == '-')
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
			return false;
	}
	return true;
}

bool user_name_valid(const char *s)
{
	size_t n = strlen(s);

	if (n < 1 || n > 63 || s[0] == '-')
		return false;
	for (size_t i = 0; i < n; i++)
		if (s[i] <= 0x20 || s[i] >= 0x7f || s[i] == '/')
			return false;
	return true;
}

int duration_parse(const char *s, int64_t *out)
{
	int64_t v = 0, mul = 1;
	const char *p = s;

	if (strcmp(s, "never") == 0) {
		*out = -1;
		return 0;
	}
	for (; *p >= '0' && *p <= '9'; p++) {
		v = v * 10 + (*p - '0');
		if (v > 10LL * 366 * 86400)
			return -1;
	}
	if (p == s)
		return -1;
	switch (*p) {
	case '\0': break;
	case 's': break;
	case 'm': mul = 60; break;
	case 'h': mul = 3600; break;
	case 'd': mul = 86400; break;
	default: return -1;
	}
	if (*p && p[1])
		return -1;
	if (v * mul > 10LL * 366 * 86400)
		return -1;
	*out = v * mul;
	return 0;
}

void duration_format(int64_t sec, char *out, size_t outlen)
{
	if (sec < 0)
		snprintf(out, outlen, "never");
	else if (sec && sec % 86400 == 0)
		snprintf(out, outlen, "%lldd", (long long)(sec / 86400));
	else if (sec && sec % 3600 == 0)
		snprintf(out, outlen, "%lldh", (long long)(sec / 3600));
	else if (sec && sec % 60 == 0)
		snprintf(out, outlen, "%lldm", (long long)(sec / 60));
	else
		snprintf(out, outlen, "%llds", (long long)sec);
}

int size_parse(const char *s, uint64_t unit, uint64_t *out)
{
	uint64_t v = 0;
	const char *p = s;
	int shift = -1;

	if (!*p)
		return -1;
	for (; *p >= '0' && *p <= '9'; p++) {
		uint64_t d = (uint64_t)(*p - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -1;
		v = v * 10 + d;
	}
	if (p == s)
		return -1;
	switch (*p) {
	case '\0': break;
	case 'k': case 'K': shift = 10; break;
	case 'm': case 'M': shift = 20; break;
	case 'g': case 'G': shift = 30; break;
	case 't': case 'T': shift = 40; break;
	default: return -1;
	}
	if (shift >= 0) {
		p++;
		if (strcmp(p, "") && strcmp(p, "i") && strcmp(p, "iB") &&
		    strcmp(p, "B"))
			return -1;
		if (v > (UINT64_MAX >> shift))
			return -1;
		*out = v << shift;
		return 0;
	}
	if (unit && v > UINT64_MAX / unit)
		return -1;
	*out = v * unit;
	return 0;
}

void size_format(uint64_t bytes, char *out, size_t outlen)
{
	static const char units[] = "KMGT";
	int i;

	if (bytes < 1024) {
		snprintf(out, outlen, "%lluB", (unsigned long long)bytes);
		return;
	}
	for (i = 3; i >= 0; i--) {
		uint64_t u = 1ULL << (10 * (i + 1));
		if (bytes >= u) {
			if (bytes % u == 0)
				snprintf(out, outlen, "%llu%c",
					 (unsigned long long)(bytes / u), units[i]);
			else
				snprintf(out, outlen, "%.1f%c",
					 (double)bytes / (double)u, units[i]);
			return;
		}
	}
}

int64_t now_s(void)
{
	return (int64_t)time(NULL);
}

int64_t mono_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t mono_ms(void)
{
	return mono_us() / 1000;
}

int mkdir_p(const char *path, unsigned mode)
{
	char tmp[PATH_MAX];
	size_t n = (size_t)snprintf(tmp, sizeof(tmp), "%s", path);

	if (n >= sizeof(tmp)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(tmp, mode) < 0 && errno != EEXIST)
			return -1;
		*p = '/';
	}
	if (mkdir(tmp, mode) < 0 && errno != EEXIST)
		return -1;
	return 0;
}

int path_set_owner(const char *path, unsigned uid, unsigned gid, unsigned mode,
		   struct err *e)
{
	struct stat st;
	int changed = 0;

	if (lstat(path, &st) < 0)
		return err_errno(e, errno, "stat %s", path);
	if (S_ISLNK(st.st_mode))
		return err_set(e, 500, "internal", "%s is a symbolic link: its owner is not "
			       "changed", path);
	if (st.st_uid != uid || st.st_gid != gid) {
		if (lchown(path, uid, gid) < 0)
			return err_errno(e, errno, "chown %u:%u %s", uid, gid, path);
		changed = 1;
	}
	/* chown clears set-id bits: compare with what the file has now. */
	if ((st.st_mode & 07777) != mode || changed) {
		if (chmod(path, mode) < 0)
			return err_errno(e, errno, "chmod %04o %s", mode, path);
		changed = 1;
	}
	return changed;
}

static int fsync_dir_of(const char *path)
{
	char tmp[PATH_MAX];
	int fd, rc;

	snprintf(tmp, sizeof(tmp), "%s", path);
	fd = open(dirname(tmp), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	rc = fsync(fd);
	close(fd);
	return rc;
}

int fd_write_all(int fd, const void *data, size_t len)
{
	const char *p = data;

	while (len > 0) {
		ssize_t w = write(fd, p, len);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

int file_write_atomic(const char *path, const void *data, size_t len,
		      unsigned mode, struct err *e)
{
	char tmp[PATH_MAX];
	int fd = -1, rc = -1;

	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= sizeof(tmp))
		return err_set(e, 500, "internal", "path too long: %s", path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	if (fd < 0)
		return err_errno(e, errno, "create %s", tmp);
	if (fchmod(fd, mode) < 0 || fd_write_all(fd, data, len) < 0 ||
	    fsync(fd) < 0) {
		err_errno(e, errno, "write %s", tmp);
		goto out;
	}
	if (close(fd) < 0) {
		fd = -1;
		err_errno(e, errno, "close %s", tmp);
		goto out;
	}
	fd = -1;
	if (rename(tmp, path) < 0) {
		err_errno(e, errno, "rename %s", tmp);
		goto out;
	}
	fsync_dir_of(path);
	rc = 0;
out:
	if (fd >= 0)
		close(fd);
	if (rc < 0)
		unlink(tmp);
	return rc;
}

/* The whole of FD (PATH names it in errors), closed here. */
static char *fd_read_all(int fd, const char *path, size_t max, struct err *e)
{
	struct buf_local { char *p; size_t len, cap; } b = { NULL, 0, 0 };

	for (;;) {
		if (b.cap - b.len < 4096) {
			b.cap = b.cap ? b.cap * 2 : 8192;
			char *np = realloc(b.p, b.cap + 1);
			if (!np)
				abort();
			b.p = np;
		}
		ssize_t r = read(fd, b.p + b.len, b.cap - b.len);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			err_errno(e, errno, "read %s", path);
			free(b.p);
			close(fd);
			return NULL;
		}
		if (r == 0)
			break;
		b.len += (size_t)r;
		if (b.len > max) {
			err_set(e, 500, "internal", "%s: larger than %zu bytes", path, max);
			free(b.p);
			close(fd);
			return NULL;
		}
	}
	close(fd);
	if (!b.p) {
		b.p = malloc(1);
		if (!b.p)
			abort();
	}
	b.p[b.len] = '\0';
	return b.p;
}

char *file_read(const char *path, size_t max, struct err *e)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0) {
		int saved = errno;
		err_errno(e, errno, "open %s", path);
		errno = saved;
		return NULL;
	}
	return fd_read_all(fd, path, max, e);
}

/* Who may own what a daemon trusts: root, or the daemon's own user. */
static bool owner_trusted(uid_t uid)
{
	return uid == 0 || uid == geteuid();
}

int file_open_trusted(const char *path, struct err *e)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);

	if (fd < 0) {
		int saved = errno;
		if (errno == ELOOP)
			err_set(e, 400, "untrusted_file", "%s is a symbolic link: refused (a "
				"daemon's configuration and keys must be the file itself; "
				"replace the link with the file)", path);
		else
			err_errno(e, errno, "open %s", path);
		errno = saved;
		return -1;
	}
	if (fstat(fd, &st) < 0) {
		int saved = errno;
		err_errno(e, errno, "stat %s", path);
		close(fd);
		errno = saved;
		return -1;
	}
	if (!S_ISREG(st.st_mode)) {
		err_set(e, 400, "untrusted_file", "%s is not a regular file (mode %06o): refused",
			path, (unsigned)st.st_mode);
		goto refused;
	}
	if (!owner_trusted(st.st_uid)) {
		err_set(e, 400, "untrusted_file", "%s is owned by uid %u, mode %04o: refused (it "
			"must belong to root%s: chown root %s)", path, (unsigned)st.st_uid,
			(unsigned)(st.st_mode & 07777), geteuid() ? " or this daemon's user" : "",
			path);
		goto refused;
	}
	if (st.st_mode & (S_IWGRP | S_IWOTH)) {
		err_set(e, 400, "untrusted_file", "%s (owner uid %u) is mode %04o, writable by "
			"%s: refused (chmod go-w %s)", path, (unsigned)st.st_uid,
			(unsigned)(st.st_mode & 07777),
			st.st_mode & S_IWOTH ? "every user" : "its group", path);
		goto refused;
	}
	/* Reads block from here (O_NONBLOCK was for a FIFO planted there). */
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	return fd;
refused:
	close(fd);
	errno = EPERM;
	return -1;
}

char *file_read_trusted(const char *path, size_t max, struct err *e)
{
	int fd = file_open_trusted(path, e);

	return fd < 0 ? NULL : fd_read_all(fd, path, max, e);
}

/* The directory PATH is in (dirname of a copy), checked by
 * dir_check_trusted. */
static int parent_trusted(const char *path, const char *what, struct err *e)
{
	char copy[PATH_MAX];

	if ((size_t)snprintf(copy, sizeof(copy), "%s", path) >= sizeof(copy))
		return err_set(e, 400, "untrusted_file", "%s: path too long", path);
	return dir_check_trusted(dirname(copy), what, e);
}

char *file_read_trusted_link(const char *path, size_t max, struct err *e)
{
	char dir[PATH_MAX], to[PATH_MAX], real[PATH_MAX];
	struct stat st;
	ssize_t n;

	if (lstat(path, &st) < 0 || !S_ISLNK(st.st_mode))
		return file_read_trusted(path, max, e);
	if (!owner_trusted(st.st_uid)) {
		err_set(e, 400, "untrusted_file", "%s is a symbolic link owned by uid %u: refused "
			"(a link to berth's files must belong to root%s)", path,
			(unsigned)st.st_uid, geteuid() ? " or this daemon's user" : "");
		return NULL;
	}
	if ((size_t)snprintf(dir, sizeof(dir), "%s", path) >= sizeof(dir)) {
		err_set(e, 400, "untrusted_file", "%s: path too long", path);
		return NULL;
	}
	const char *d = dirname(dir);
	if (dir_check_trusted(d, "the symbolic link's directory", e) < 0)
		return NULL;
	/* One link only: what it names must be the file (file_read_trusted
	 * refuses another link), so no link elsewhere, of someone else's,
	 * chooses which file is read. */
	n = readlink(path, to, sizeof(to) - 1);
	if (n < 0) {
		err_errno(e, errno, "readlink %s", path);
		return NULL;
	}
	to[n] = '\0';
	if ((size_t)(to[0] == '/' ? snprintf(real, sizeof(real), "%s", to)
				 : snprintf(real, sizeof(real), "%s/%s", d, to)) >= sizeof(real)) {
		err_set(e, 400, "untrusted_file", "%s: the path it links to is too long", path);
		return NULL;
	}
	if (parent_trusted(real, "the linked file's directory", e) < 0)
		return NULL;
	return file_read_trusted(real, max, e);
}

int dir_check_trusted(const char *dir, const char *what, struct err *e)
{
	char real[PATH_MAX], *slash;
	struct stat st;
	bool leaf = true, below_writable = false;

	if (!realpath(dir, real)) {
		if (errno == ENOENT)
			return 0;
		return err_errno(e, errno, "%s %s", what, dir);
	}
	/* From DIR itself up to "/": each one's owner and mode. */
	for (;;) {
		const char *p = real[0] ? real : "/";
		if (stat(p, &st) < 0)
			return err_errno(e, errno, "%s %s: stat %s", what, dir, p);
		if (!S_ISDIR(st.st_mode))
			return err_set(e, 400, "untrusted_dir", "%s %s: %s is not a directory",
				       what, dir, p);
		/* A sticky directory (/tmp) lets no one replace what others own
		 * in it: fine above a component that is trusted itself (owned
		 * as checked, and not writable by group or others). */
		bool writable = st.st_mode & (S_IWGRP | S_IWOTH);
		bool sticky_ok = !leaf && (st.st_mode & S_ISVTX) && !below_writable;
		if (!owner_trusted(st.st_uid) || (writable && !sticky_ok))
			return err_set(e, 400, "untrusted_dir", "%s %s: %s is owned by uid %u, "
				       "mode %04o: refused, since whoever can write there can "
				       "replace berth's files (every directory up to / must "
				       "belong to root and not be writable by group or others, "
				       "like sshd's StrictModes: chown root %s; chmod go-w %s)",
				       what, dir, p, (unsigned)st.st_uid,
				       (unsigned)(st.st_mode & 07777), p, p);
		if (!real[0] || !strcmp(real, "/"))
			return 0;
		slash = strrchr(real, '/');
		*slash = '\0';
		leaf = false;
		below_writable = writable;
	}
}

int remove_tree(const char *path, struct err *e)
{
	struct stat st;
	DIR *d;
	struct dirent *de;
	char p[PATH_MAX];

	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : err_errno(e, errno, "stat %s", path);
	if (!S_ISDIR(st.st_mode)) {
		if (unlink(path) < 0 && errno != ENOENT)
			return err_errno(e, errno, "remove %s", path);
		return 0;
	}
	d = opendir(path);
	if (!d)
		return err_errno(e, errno, "open %s", path);
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		snprintf(p, sizeof(p), "%s/%s", path, de->d_name);
		if (unlink(p) < 0 && errno != ENOENT) {
			err_errno(e, errno, "remove %s", p);
			closedir(d);
			return -1;
		}
	}
	closedir(d);
	if (rmdir(path) < 0 && errno != ENOENT)
		return err_errno(e, errno, "remove %s", path);
	return 0;
}

int file_copy(const char *src, const char *dst, unsigned mode, struct err *e)
{
	char data[65536];
	int in = -1, out = -1, rc = -1;
	ssize_t r;

	in = open(src, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return err_errno(e, errno, "open %s", src);
	out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	if (out < 0) {
		err_errno(e, errno, "create %s", dst);
		goto out;
	}
	while ((r = read(in, data, sizeof(data))) != 0) {
		if (r < 0) {
			if (errno == EINTR)
				continue;
			err_errno(e, errno, "read %s", src);
			goto out;
		}
		if (fd_write_all(out, data, (size_t)r) < 0) {
			err_errno(e, errno, "write %s", dst);
			goto out;
		}
	}
	if (fsync(out) < 0) {
		err_errno(e, errno, "fsync %s", dst);
		goto out;
	}
	rc = 0;
out:
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
	if (rc < 0 && out >= 0)
		unlink(dst);
	return rc;
}

int random_bytes(void *out, size_t len)
{
	char *p = out;

	while (len > 0) {
		ssize_t r = getrandom(p, len, 0);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += r;
		len -= (size_t)r;
	}
	return 0;
}

int uuid_generate(char out[37])
{
	unsigned char u[16];

	if (random_bytes(u, sizeof(u)) < 0)
		return -1;
	u[6] = (unsigned char)((u[6] & 0x0f) | 0x40);
	u[8] = (unsigned char)((u[8] & 0x3f) | 0x80);
	snprintf(out, 37,
		 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		 u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9],
		 u[10], u[11], u[12], u[13], u[14], u[15]);
	return 0;
}

int mac_generate(char out[18])
{
	unsigned char m[3];

	if (random_bytes(m, sizeof(m)) < 0)
		return -1;
	snprintf(out, 18, "52:54:00:%02x:%02x:%02x", m[0], m[1], m[2]);
	return 0;
}

static int bind_loopback(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	if (fd < 0)
		return -1;
	/* As QEMU binds its forward: TIME_WAIT leftovers of closed SSH
	 * sessions do not make the port unusable. */
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sa.sin_port = htons((uint16_t)port);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

int port_pick_free(void)
{
	struct sockaddr_in sa;
	socklen_t len = sizeof(sa);
	int fd = bind_loopback(0), port = -1;

	if (fd < 0)
		return -1;
	if (getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
		port = ntohs(sa.sin_port);
	close(fd);
	return port;
}

bool port_is_free(int port)
{
	int fd = bind_loopback(port);

	if (fd < 0)
		return false;
	close(fd);
	return true;
}

int exe_dir(char *out, size_t outlen)
{
	char p[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", p, sizeof(p) - 1);

	if (n < 0)
		return -1;
	p[n] = '\0';
	if ((size_t)snprintf(out, outlen, "%s", dirname(p)) >= outlen)
		return -1;
	return 0;
}

static __thread int64_t ext_us;

void ext_time_add(int64_t us)
{
	ext_us += us;
}

int64_t ext_time_get(void)
{
	return ext_us;
}

void ext_time_reset(void)
{
	ext_us = 0;
}

const char *mime_type(const char *path)
{
	static const struct { const char *ext, *type; } types[] = {
		{ ".html", "text/html; charset=utf-8" },
		{ ".js", "text/javascript; charset=utf-8" },
		{ ".mjs", "text/javascript; charset=utf-8" },
		{ ".css", "text/css; charset=utf-8" },
		{ ".svg", "image/svg+xml" },
		{ ".png", "image/png" },
		{ ".ico", "image/x-icon" },
		{ ".json", "application/json" },
		{ ".txt", "text/plain; charset=utf-8" },
		{ ".map", "application/json" },
	};
	const char *slash = strrchr(path, '/'), *dot = strrchr(path, '.');

	if (dot && slash && dot < slash)
		dot = NULL;
	for (size_t i = 0; dot && i < sizeof(types) / sizeof(types[0]); i++)
		if (!strcmp(dot, types[i].ext))
			return types[i].type;
	return "application/octet-stream";
}

bool web_path_ok(const char *rel)
{
	bool seg_start = true;

	if (!*rel || strlen(rel) > 200)
		return false;
	for (const char *s = rel; *s; s++) {
		if (*s == '/') {
			if (seg_start)
				return false;   /* "//" or a leading '/' */
			seg_start = true;
			continue;
		}
		if (seg_start && *s == '.')
			return false;
		seg_start = false;
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '.' || *s == '_' || *s == '-'))
			return false;
	}
	return !seg_start;
}

char *file_read_beneath(const char *dir, const char *rel, size_t max, size_t *len)
{
	struct open_how how = { .flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW,
				.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS };
	int dfd, fd;
	struct stat st;
	char *data = NULL;
	size_t got = 0;

	*len = 0;
	if (!web_path_ok(rel))
		return NULL;
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return NULL;
	fd = (int)syscall(SYS_openat2, dfd, rel, &how, sizeof(how));
	if (fd < 0 && errno == ENOSYS)
		fd = openat(dfd, rel, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	close(dfd);
	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > max ||
	    !(data = malloc((size_t)st.st_size + 1)))
		goto fail;
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, data + got, (size_t)st.st_size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	if (got != (size_t)st.st_size)
		goto fail;
	close(fd);
	*len = got;
	return data;
fail:
	free(data);
	close(fd);
	return NULL;
}
