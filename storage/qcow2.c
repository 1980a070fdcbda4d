/* The qcow2 backend: volumes are files in the pool directory; a machine
 * disk is a qcow2 overlay VOL.qcow2 whose backing file is its image's base
 * (`qemu-img create -b`), so creation costs the same whatever the size.
 * An image base streamed in (base_create) is a sparse raw file VOL.raw,
 * which the import writes with plain pwrite() (no qemu-nbd, no qcow2
 * mapping); overlays on it name their backing format (-F raw).  Bases made
 * by base_import, and those stored before raw bases existed, are VOL.qcow2:
 * every operation finds a volume under either name.  Files are created
 * under a ".part" name and renamed into place, so a crash never leaves a
 * half-written volume under a volume's name. */
#include "storage/storage.h"
#include "storage/qcow2.h"

#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "common/log.h"
#include "common/run.h"
#include "common/util.h"
#include "common/banned.h"

struct qcow2_pool {
	char dir[PATH_MAX];
	unsigned qemu_gid;   /* reads bases and frozen volumes (storage_opts) */
};

/* POOL/VOL.EXT + SUFFIX into OUT; EXT is "qcow2" or "raw". */
static int vol_file(struct qcow2_pool *p, const char *vol, const char *ext,
		    const char *suffix, char *out, size_t outlen, struct err *e)
{
	if ((size_t)snprintf(out, outlen, "%s/%s.%s%s", p->dir, vol, ext, suffix) >= outlen)
		return err_set(e, 500, "internal", "qcow2: path too long for %s", vol);
	return 0;
}

static int vol_path(struct qcow2_pool *p, const char *vol, const char *suffix,
		    char *out, size_t outlen, struct err *e)
{
	return vol_file(p, vol, "qcow2", suffix, out, outlen, e);
}

/* The file of the existing volume VOL into OUT, and its format ("qcow2"
 * or "raw") into *FMT; 404 "not_found" when VOL is under neither name. */
static int vol_locate(struct qcow2_pool *p, const char *vol, char *out, size_t outlen,
		      const char **fmt, struct err *e)
{
	static const char *const exts[] = { "qcow2", "raw" };

	for (size_t i = 0; i < sizeof(exts) / sizeof(exts[0]); i++) {
		if (vol_file(p, vol, exts[i], "", out, outlen, e) < 0)
			return -1;
		if (access(out, F_OK) == 0) {
			*fmt = exts[i];
			return 0;
		}
		if (errno != ENOENT)
			return err_errno(e, errno, "volume %s: %s", vol, out);
	}
	vol_path(p, vol, "", out, outlen, NULL);
	return err_set(e, 404, "not_found", "no volume %s", vol);
}

/* Whether VOL exists under either name. */
static bool vol_there(struct qcow2_pool *p, const char *vol)
{
	char path[PATH_MAX];
	const char *fmt;

	return vol_locate(p, vol, path, sizeof(path), &fmt, NULL) == 0;
}

static int qcow2_open(const char *location, const struct storage_opts *o, void **priv,
		      struct err *e)
{
	struct qcow2_pool *p;
	DIR *d;
	struct dirent *de;

	/* A directory has no fill limit of its own. */
	if (location[0] != '/')
		return err_set(e, 400, "invalid_config",
			       "qcow2 pool '%s' must be an absolute path (qemu resolves backing "
			       "files relative to each overlay)", location);
	if (mkdir_p(location, 0700) < 0)
		return err_errno(e, errno, "qcow2 pool %s", location);
	p = calloc(1, sizeof(*p));
	if (!p)
		abort();
	/* The canonical path: backing files are matched to volumes by it, so
	 * a trailing slash or a symlink must not make a volume look unused. */
	if (!realpath(location, p->dir)) {
		int saved = errno;
		free(p);
		return err_errno(e, saved, "qcow2 pool %s", location);
	}
	/* QEMU (group qemu_gid) opens its files by name: it may traverse the
	 * directory, not list it; nobody else may do either. */
	p->qemu_gid = o->qemu_gid;
	if (path_set_owner(p->dir, 0, p->qemu_gid, p->qemu_gid ? 0710 : 0700, e) < 0) {
		free(p);
		return -1;
	}
	/* Leftovers of creations a crash interrupted are never volumes. */
	d = opendir(p->dir);
	if (d) {
		while ((de = readdir(d))) {
			size_t n = strlen(de->d_name);
			if (n > 5 && strcmp(de->d_name + n - 5, ".part") == 0) {
				char path[PATH_MAX];
				xsnprintf(path, sizeof(path), "%s/%s", p->dir, de->d_name);
				log_info("qcow2: removing partial file %s", path);
				unlink(path);
			}
		}
		closedir(d);
	}
	*priv = p;
	return 0;
}

static void qcow2_close(void *priv)
{
	free(priv);
}

/* Publish PART as FINAL, root's, group GID, MODE: fsync, rename, fsync
 * the directory. */
static int publish(const char *part, const char *final, unsigned gid, unsigned mode,
		   struct err *e)
{
	int fd = open(part, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return err_errno(e, errno, "open %s", part);
	if (fchown(fd, 0, gid) < 0 || fchmod(fd, mode) < 0 || fsync(fd) < 0) {
		int saved = errno;
		close(fd);
		return err_errno(e, saved, "sync %s", part);
	}
	close(fd);
	if (rename(part, final) < 0)
		return err_errno(e, errno, "rename %s", part);
	fd = open(final, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		char dir[PATH_MAX];
		snprintf(dir, sizeof(dir), "%s", final);
		char *slash = strrchr(dir, '/');
		if (slash) {
			*slash = '\0';
			int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			if (dfd >= 0) {
				fsync(dfd);
				close(dfd);
			}
		}
		close(fd);
	}
	return 0;
}

/* PART (VOL's ".part" name, where it is made) and FINAL (its name once
 * published) for a volume of format EXT; 409 when VOL exists (under
 * either name). */
static int new_vol_paths(struct qcow2_pool *p, const char *vol, const char *ext,
			 char part[PATH_MAX], char final[PATH_MAX], struct err *e)
{
	if (vol_file(p, vol, ext, "", final, PATH_MAX, e) < 0 ||
	    vol_file(p, vol, ext, ".part", part, PATH_MAX, e) < 0)
		return -1;
	if (vol_there(p, vol))
		return err_set(e, 409, "exists", "volume %s exists", vol);
	return 0;
}

static int qcow2_base_import(void *priv, const char *vol, const char *src,
			     const char *src_format, struct err *e)
{
	struct qcow2_pool *p = priv;
	char part[PATH_MAX], final[PATH_MAX];

	if (new_vol_paths(p, vol, "qcow2", part, final, e) < 0)
		return -1;
	if (strcmp(src_format, "qcow2") != 0 && strcmp(src_format, "raw") != 0)
		return err_set(e, 400, "invalid_format",
			       "image format '%s' is not qcow2 or raw", src_format);
	char *const argv[] = { "qemu-img", "convert", "-q", "-f", (char *)src_format,
			       "-O", "qcow2", (char *)src, part, NULL };
	if (run_argv(argv, NULL, e) < 0 || publish(part, final, p->qemu_gid, 0440, e) < 0) {
		unlink(part);
		return -1;
	}
	return 0;
}

/* An empty sparse raw file under VOL's ".part" name: open() removes it
 * after a crash, and base_seal publishes it.  Raw, so that the import
 * writes it with pwrite() at the speed of the page cache or the disk;
 * holes read as zeros and cost nothing. */
static int qcow2_base_create(void *priv, const char *vol, uint64_t bytes,
			     struct storage_vol_info *info, struct err *e)
{
	struct qcow2_pool *p = priv;
	char part[PATH_MAX], final[PATH_MAX];
	int fd;

	if (new_vol_paths(p, vol, "raw", part, final, e) < 0)
		return -1;
	if (bytes > (uint64_t)INT64_MAX)
		return err_set(e, 400, "invalid_disk", "disk size %llu is too large",
			       (unsigned long long)bytes);
	/* A .part of a creation that failed without removing it. */
	unlink(part);
	fd = open(part, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return err_errno(e, errno, "create %s", part);
	if (ftruncate(fd, (off_t)bytes) < 0) {
		int saved = errno;
		close(fd);
		unlink(part);
		return err_errno(e, saved, "size %s to %llu bytes", part,
				 (unsigned long long)bytes);
	}
	close(fd);
	memset(info, 0, sizeof(*info));
	snprintf(info->path, sizeof(info->path), "%s", part);
	info->format = "raw";
	info->virtual_bytes = bytes;
	return 0;
}

static int qcow2_base_seal(void *priv, const char *vol, struct err *e)
{
	struct qcow2_pool *p = priv;
	char part[PATH_MAX], final[PATH_MAX];

	if (new_vol_paths(p, vol, "raw", part, final, e) < 0)
		return -1;
	return publish(part, final, p->qemu_gid, 0440, e);
}

/* The parent of VOL: its qcow2 backing file (header: u64 offset at 8, u32
 * length at 16), when that file is a volume of this pool (NAME.qcow2 or
 * NAME.raw).  A raw volume has none. */
static int qcow2_vol_parent(void *priv, const char *vol, char *parent, size_t len,
			    struct err *e)
{
	struct qcow2_pool *p = priv;
	char path[PATH_MAX], backing[PATH_MAX];
	unsigned char h[QCOW2_HEADER_MIN];
	struct qcow2_header q;
	int fd, rc = -1;
	const char *fmt;

	parent[0] = '\0';
	if (vol_locate(p, vol, path, sizeof(path), &fmt, e) < 0)
		return -1;
	if (strcmp(fmt, "raw") == 0)
		return 0;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? err_set(e, 404, "not_found", "no volume %s", vol)
				       : err_errno(e, errno, "open %s", path);
	if (pread(fd, h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
	    qcow2_header_parse(h, sizeof(h), &q) < 0) {
		err_set(e, 500, "internal", "%s: not a qcow2 file", path);
		goto out;
	}
	if (q.backing_offset == 0 || q.backing_len == 0) {
		rc = 0;
		goto out;
	}
	if (q.backing_len >= sizeof(backing) || q.backing_offset > INT64_MAX ||
	    pread(fd, backing, q.backing_len, (off_t)q.backing_offset) != (ssize_t)q.backing_len) {
		err_set(e, 500, "internal", "%s: unreadable backing file name", path);
		goto out;
	}
	backing[q.backing_len] = '\0';
	qcow2_backing_volume(p->dir, backing, parent, len);
	rc = 0;
out:
	close(fd);
	return rc;
}

int qcow2_header_parse(const unsigned char *h, size_t n, struct qcow2_header *q)
{
	uint64_t off, size;
	uint32_t blen;

	memset(q, 0, sizeof(*q));
	if (n < QCOW2_HEADER_MIN || memcmp(h, "QFI\xfb", 4) != 0)
		return -1;
	memcpy(&off, h + 8, sizeof(off));
	memcpy(&blen, h + 16, sizeof(blen));
	memcpy(&size, h + 24, sizeof(size));
	q->backing_offset = be64toh(off);
	q->backing_len = be32toh(blen);
	q->size = be64toh(size);
	return 0;
}

void qcow2_backing_volume(const char *dir, const char *backing, char *parent, size_t len)
{
	/* POOL/NAME.qcow2 or POOL/NAME.raw -> NAME; a backing file elsewhere
	 * is no volume.  Compared canonically when the file exists (the pool
	 * may have been named another way when the overlay was made). */
	char canon[PATH_MAX];
	const char *b = realpath(backing, canon) ? canon : backing;
	size_t n = strlen(b), dlen = strlen(dir);

	parent[0] = '\0';
	if (strncmp(b, dir, dlen) == 0 && b[dlen] == '/' && !strchr(b + dlen + 1, '/')) {
		size_t ext = 0;
		if (n > dlen + 7 && strcmp(b + n - 6, ".qcow2") == 0)
			ext = 6;
		else if (n > dlen + 5 && strcmp(b + n - 4, ".raw") == 0)
			ext = 4;
		if (ext)
			snprintf(parent, len, "%.*s", (int)(n - dlen - 1 - ext), b + dlen + 1);
	}
}

/* The virtual size of the volume file PATH of format FMT: from a qcow2
 * header (big-endian u64 at offset 24), or a raw file's length. */
static int header_size(const char *path, const char *fmt, uint64_t *out, struct err *e)
{
	unsigned char h[QCOW2_HEADER_MIN];
	struct qcow2_header q;
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return errno == ENOENT ? err_set(e, 404, "not_found", "no volume %s", path)
				       : err_errno(e, errno, "open %s", path);
	if (strcmp(fmt, "raw") == 0) {
		int rc = fstat(fd, &st);
		int saved = errno;
		close(fd);
		if (rc < 0)
			return err_errno(e, saved, "stat %s", path);
		*out = (uint64_t)st.st_size;
		return 0;
	}
	n = pread(fd, h, sizeof(h), 0);
	close(fd);
	if (n != (ssize_t)sizeof(h) || qcow2_header_parse(h, sizeof(h), &q) < 0)
		return err_set(e, 500, "internal", "%s: not a qcow2 file", path);
	*out = q.size;
	return 0;
}

/* The file of a frozen volume or a base: root's, readable by the QEMU
 * group, writable by nobody. */
static int freeze(struct qcow2_pool *p, const char *path, struct err *e)
{
	return path_set_owner(path, 0, p->qemu_gid, 0440, e) < 0 ? -1 : 0;
}

static int qcow2_vol_create(void *priv, const char *vol, const char *base,
			    uint64_t bytes, struct err *e)
{
	struct qcow2_pool *p = priv;
	char part[PATH_MAX], final[PATH_MAX], basepath[PATH_MAX], size[32];
	uint64_t base_size;
	const char *base_fmt;

	if (new_vol_paths(p, vol, "qcow2", part, final, e) < 0)
		return -1;
	if (vol_locate(p, base, basepath, sizeof(basepath), &base_fmt, e) < 0 ||
	    header_size(basepath, base_fmt, &base_size, e) < 0)
		return -1;
	if (bytes % 512) {
		return err_set(e, 400, "invalid_disk",
			       "disk size %llu is not a multiple of 512 bytes",
			       (unsigned long long)bytes);
	}
	if (bytes < base_size) {
		char want[32], have[32];
		size_format(bytes, want, sizeof(want));
		size_format(base_size, have, sizeof(have));
		return err_set(e, 400, "invalid_disk",
			       "disk %s is smaller than its image (%s)", want, have);
	}
	snprintf(size, sizeof(size), "%llu", (unsigned long long)bytes);
	/* -u: do not open the base, which may be the disk a running QEMU
	 * holds locked (a checkpoint of a running machine); its size was read
	 * from its header above.  -F: the base's format is recorded, never
	 * probed (a raw base holding a guest's bytes must stay raw). */
	char *const argv[] = { "qemu-img", "create", "-q", "-f", "qcow2", "-u",
			       "-F", (char *)base_fmt, "-b", basepath, part, size, NULL };
	if (run_argv(argv, NULL, e) < 0 || publish(part, final, 0, 0600, e) < 0) {
		unlink(part);
		return -1;
	}
	return 0;
}

static int qcow2_vol_remove(void *priv, const char *vol, struct err *e)
{
	struct qcow2_pool *p = priv;
	static const char *const exts[] = { "qcow2", "raw" };
	/* The volume, and a base that was being filled. */
	static const char *const suffixes[] = { "", ".part" };
	char path[PATH_MAX];

	for (size_t i = 0; i < sizeof(exts) / sizeof(exts[0]); i++)
		for (size_t j = 0; j < sizeof(suffixes) / sizeof(suffixes[0]); j++) {
			if (vol_file(p, vol, exts[i], suffixes[j], path, sizeof(path), e) < 0)
				return -1;
			if (unlink(path) < 0 && errno != ENOENT)
				return err_errno(e, errno, "remove volume %s", vol);
		}
	return 0;
}

/* FN(P, LAYER, ARG, E) for every volume under VOL in its backing chain,
 * nearest first; stops at the first that fails. */
static int each_parent(struct qcow2_pool *p, const char *vol,
		       int (*fn)(struct qcow2_pool *, const char *, void *, struct err *),
		       void *arg, struct err *e)
{
	char cur[256], parent[256];

	snprintf(cur, sizeof(cur), "%s", vol);
	for (int depth = 0; depth < 1000; depth++) {
		if (qcow2_vol_parent(p, cur, parent, sizeof(parent), e) < 0)
			return -1;
		if (!parent[0])
			return 0;
		if (fn(p, parent, arg, e) < 0)
			return -1;
		snprintf(cur, sizeof(cur), "%s", parent);
	}
	return err_set(e, 500, "internal", "volume %s: backing chain too deep", vol);
}

static int freeze_layer(struct qcow2_pool *p, const char *layer, void *arg, struct err *e)
{
	char path[PATH_MAX];
	const char *fmt;

	(void)arg;
	if (vol_locate(p, layer, path, sizeof(path), &fmt, e) < 0)
		return -1;
	return freeze(p, path, e);
}

static int qcow2_vol_own(void *priv, const char *vol, unsigned uid, unsigned gid,
			 struct err *e)
{
	struct qcow2_pool *p = priv;
	char path[PATH_MAX];
	const char *fmt;

	if (vol_locate(p, vol, path, sizeof(path), &fmt, e) < 0 ||
	    path_set_owner(path, uid, gid, 0600, e) < 0)
		return -1;
	/* Every layer under it: frozen (after a crash between a snapshot and
	 * its freeze, or made by a berth that ran QEMU as root). */
	return each_parent(p, vol, freeze_layer, NULL, e);
}

static bool qcow2_vol_exists(void *priv, const char *vol)
{
	return vol_there(priv, vol);
}

static int qcow2_vol_info(void *priv, const char *vol,
			  struct storage_vol_info *info, struct err *e)
{
	struct qcow2_pool *p = priv;
	struct stat st;
	const char *fmt;

	if (vol_locate(p, vol, info->path, sizeof(info->path), &fmt, e) < 0)
		return -1;
	if (stat(info->path, &st) < 0)
		return errno == ENOENT ? err_set(e, 404, "not_found", "no volume %s", vol)
				       : err_errno(e, errno, "stat %s", info->path);
	if (header_size(info->path, fmt, &info->virtual_bytes, e) < 0)
		return -1;
	info->format = fmt;
	info->block = false;
	/* What the file itself allocates (a raw base's holes cost nothing;
	 * an overlay's blocks shared with the base are the base's).  This is
	 * qemu-img's "actual-size". */
	info->allocated_bytes = (uint64_t)st.st_blocks * 512;
	return 0;
}

static int qcow2_vol_list(void *priv, void (*fn)(const char *vol, void *data),
			  void *data, struct err *e)
{
	struct qcow2_pool *p = priv;
	DIR *d = opendir(p->dir);
	struct dirent *de;

	if (!d)
		return err_errno(e, errno, "open %s", p->dir);
	while ((de = readdir(d))) {
		char name[256];
		size_t n = strlen(de->d_name), ext;
		if (n > 6 && strcmp(de->d_name + n - 6, ".qcow2") == 0)
			ext = 6;
		else if (n > 4 && strcmp(de->d_name + n - 4, ".raw") == 0)
			ext = 4;
		else
			continue;
		snprintf(name, sizeof(name), "%.*s", (int)(n - ext), de->d_name);
		fn(name, data);
	}
	closedir(d);
	return 0;
}

static int add_allocated(struct qcow2_pool *p, const char *layer, void *sum, struct err *e)
{
	struct storage_vol_info vi;

	if (qcow2_vol_info(p, layer, &vi, e) < 0)
		return -1;
	*(uint64_t *)sum += vi.allocated_bytes;
	return 0;
}

/* Exclusive: the overlay's own allocation.  Shared: what the volumes under
 * it (checkpoints, the image's base) allocate, which it reads through. */
static int qcow2_vol_usage(void *priv, const char *vol, uint64_t *exclusive, uint64_t *shared,
			   struct err *e)
{
	struct storage_vol_info vi;

	if (qcow2_vol_info(priv, vol, &vi, e) < 0)
		return -1;
	*exclusive = vi.allocated_bytes;
	*shared = 0;
	return each_parent(priv, vol, add_allocated, shared, e);
}

static int qcow2_claim(void *priv, const char *tag, struct err *e)
{
	struct qcow2_pool *p = priv;
	char path[PATH_MAX], line[128];
	struct err local = { 0 };
	char *have;

	xsnprintf(path, sizeof(path), "%s/.berth-pool", p->dir);
	have = file_read(path, 4096, &local);
	if (have) {
		have[strcspn(have, "\r\n")] = '\0';
		int same = strcmp(have, tag) == 0;
		if (!same)
			err_set(e, 409, "pool_taken",
				"qcow2 pool %s belongs to berth instance %s, not %s: give each "
				"state directory its own storage_location", p->dir, have, tag);
		free(have);
		return same ? 0 : -1;
	}
	if (errno != ENOENT)
		return err_errno(e, errno, "read %s", path);
	int n = snprintf(line, sizeof(line), "%s\n", tag);
	return file_write_atomic(path, line, (size_t)n, 0600, e);
}

static int qcow2_pool_info(void *priv, struct storage_pool_info *info,
			   struct err *e)
{
	struct qcow2_pool *p = priv;
	struct statvfs sv;

	if (statvfs(p->dir, &sv) < 0)
		return err_errno(e, errno, "statvfs %s", p->dir);
	info->total_bytes = (uint64_t)sv.f_blocks * sv.f_frsize;
	info->used_bytes = (uint64_t)(sv.f_blocks - sv.f_bfree) * sv.f_frsize;
	return 0;
}

const struct storage_ops storage_qcow2 = {
	.name = "qcow2",
	.open = qcow2_open,
	.close = qcow2_close,
	.base_import = qcow2_base_import,
	.base_create = qcow2_base_create,
	.base_seal = qcow2_base_seal,
	.vol_create = qcow2_vol_create,
	.vol_remove = qcow2_vol_remove,
	.vol_own = qcow2_vol_own,
	.vol_exists = qcow2_vol_exists,
	.vol_info = qcow2_vol_info,
	.vol_list = qcow2_vol_list,
	.vol_parent = qcow2_vol_parent,
	.claim = qcow2_claim,
	.vol_usage = qcow2_vol_usage,
	.pool_info = qcow2_pool_info,
};
