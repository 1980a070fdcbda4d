#include "storage/volio.h"

#include <errno.h>
#include <fcntl.h>
#include <libnbd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/banned.h"

/* Writes in flight, each of at most SLOT_BYTES: enough for qemu-nbd to
 * write one while the caller produces the next. */
#define SLOTS 4
#define SLOT_BYTES (4u << 20)

struct slot {
	void *buf;
	int64_t cookie;  /* 0: free */
};

/* O_DIRECT writes must start, end and sit in memory on this boundary (the
 * logical block size of any disk here is at most this). */
#define DIRECT_ALIGN 4096u

struct volio {
	struct nbd_handle *h;     /* NULL for a raw file written directly */
	uint64_t size;
	bool writable;
	struct slot slot[SLOTS];
	unsigned next;
	/* A raw regular file opened for writing: written with pwrite(),
	 * through DFD (O_DIRECT, -1 when the file system refuses it) for
	 * aligned writes and FD (the page cache) for the rest. */
	int fd, dfd;
	bool no_direct;           /* DFD refused a write: FD only (atomic) */
	char path[4096];
};

static int nbd_fail(struct err *e, const char *what)
{
	const char *m = nbd_get_error();

	return err_set(e, 500, "volume_io", "%s: %s", what, m ? m : "unknown libnbd error");
}

/* The direct way for a raw regular file opened for writing: 1 when taken,
 * 0 when PATH is something else (a block device, qcow2), -1 on failure. */
static int open_direct(struct volio *v, const char *path, const char *format,
		       struct err *e)
{
	struct stat st;

	if (strcmp(format, "raw") != 0 || stat(path, &st) < 0 || !S_ISREG(st.st_mode))
		return 0;
	snprintf(v->path, sizeof(v->path), "%s", path);
	v->fd = open(path, O_WRONLY | O_CLOEXEC);
	if (v->fd < 0)
		return err_errno(e, errno, "open %s", path);
	if (fstat(v->fd, &st) < 0) {
		err_errno(e, errno, "stat %s", path);
		close(v->fd);
		return -1;
	}
	/* tmpfs, for one, has no O_DIRECT: everything goes through FD. */
	v->dfd = open(path, O_WRONLY | O_CLOEXEC | O_DIRECT);
	v->size = (uint64_t)st.st_size;
	return 1;
}

struct volio *volio_open(const char *path, const char *format, bool writable,
			 struct err *e)
{
	struct volio *v = calloc(1, sizeof(*v));
	int64_t size;

	if (!v)
		abort();
	v->writable = writable;
	v->fd = v->dfd = -1;
	if (writable) {
		int r = open_direct(v, path, format, e);
		if (r != 0) {
			if (r < 0) {
				free(v);
				return NULL;
			}
			return v;
		}
	}
	v->h = nbd_create();
	if (!v->h) {
		nbd_fail(e, "libnbd");
		free(v);
		return NULL;
	}
	/* qemu-nbd exits when its one client disconnects. */
	char *rw[] = { "qemu-nbd", "-f", (char *)format, "--cache=writeback",
		       "--", (char *)path, NULL };
	char *ro[] = { "qemu-nbd", "-f", (char *)format, "--read-only", "--", (char *)path,
		       NULL };
	if ((!writable && nbd_add_meta_context(v->h, LIBNBD_CONTEXT_BASE_ALLOCATION) < 0) ||
	    nbd_connect_systemd_socket_activation(v->h, writable ? rw : ro) < 0) {
		char what[4200];
		snprintf(what, sizeof(what), "serve %s with qemu-nbd", path);
		nbd_fail(e, what);
		goto fail;
	}
	size = nbd_get_size(v->h);
	if (size < 0) {
		nbd_fail(e, "volume size");
		goto fail;
	}
	v->size = (uint64_t)size;
	return v;
fail:
	nbd_close(v->h);
	free(v);
	return NULL;
}

uint64_t volio_size(const struct volio *v)
{
	return v->size;
}

bool volio_parallel(const struct volio *v)
{
	return v && !v->h;
}

/* Wait for slot S's write, freeing the slot. */
static int slot_wait(struct volio *v, struct slot *s, struct err *e)
{
	int r;

	if (!s->cookie)
		return 0;
	while ((r = nbd_aio_command_completed(v->h, (uint64_t)s->cookie)) == 0)
		if (nbd_poll(v->h, -1) < 0) {
			s->cookie = 0;
			return nbd_fail(e, "write to the volume");
		}
	s->cookie = 0;
	return r < 0 ? nbd_fail(e, "write to the volume") : 0;
}

static int pwrite_all(int fd, const char *p, size_t n, uint64_t off)
{
	while (n) {
		ssize_t w = pwrite(fd, p, n, (off_t)off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -1;
		if (w == 0) {
			errno = EIO;
			return -1;
		}
		p += w;
		n -= (size_t)w;
		off += (uint64_t)w;
	}
	return 0;
}

/* The direct way: the aligned middle of the write through O_DIRECT (no
 * copy into the page cache, nothing left for the flush to write), the
 * unaligned ends through the page cache.  Synchronous: the caller's data
 * is on its way to the disk when this returns. */
static int direct_write(struct volio *v, uint64_t off, const char *p, size_t len,
			struct err *e)
{
	size_t head = 0, mid = 0;

	if (v->dfd >= 0 && !__atomic_load_n(&v->no_direct, __ATOMIC_RELAXED)) {
		uintptr_t a = (uintptr_t)p;
		/* Bytes up to the next aligned offset; the memory must be
		 * aligned there too. */
		head = (size_t)((DIRECT_ALIGN - off % DIRECT_ALIGN) % DIRECT_ALIGN);
		if (head < len && (a + head) % DIRECT_ALIGN == 0)
			mid = (len - head) / DIRECT_ALIGN * DIRECT_ALIGN;
		else
			head = len;
	} else {
		head = len;
	}
	if (head && pwrite_all(v->fd, p, head, off) < 0)
		goto fail;
	if (mid && pwrite_all(v->dfd, p + head, mid, off + head) < 0) {
		/* A file system that took O_DIRECT at open but refuses
		 * this write: the page cache from now on. */
		if (errno != EINVAL || pwrite_all(v->fd, p + head, mid, off + head) < 0)
			goto fail;
		__atomic_store_n(&v->no_direct, true, __ATOMIC_RELAXED);
	}
	if (head + mid < len &&
	    pwrite_all(v->fd, p + head + mid, len - head - mid, off + head + mid) < 0)
		goto fail;
	return 0;
fail:
	return err_errno(e, errno, "write %s", v->path);
}

int volio_write(struct volio *v, uint64_t off, const void *data, size_t len,
		struct err *e)
{
	const char *p = data;

	if (off > v->size || len > v->size - off)
		return err_set(e, 400, "image_too_large",
			       "write of %zu bytes at %llu passes the volume's end (%llu bytes)",
			       len, (unsigned long long)off, (unsigned long long)v->size);
	if (!v->h)
		return direct_write(v, off, p, len, e);
	while (len) {
		struct slot *s = &v->slot[v->next];
		size_t n = len < SLOT_BYTES ? len : SLOT_BYTES;

		if (slot_wait(v, s, e) < 0)
			return -1;
		if (!s->buf && !(s->buf = malloc(SLOT_BYTES)))
			abort();
		memcpy(s->buf, p, n);
		s->cookie = nbd_aio_pwrite(v->h, s->buf, n, off, NBD_NULL_COMPLETION, 0);
		if (s->cookie < 0) {
			s->cookie = 0;
			return nbd_fail(e, "write to the volume");
		}
		v->next = (v->next + 1) % SLOTS;
		p += n;
		off += n;
		len -= n;
	}
	return 0;
}

int volio_flush(struct volio *v, struct err *e)
{
	int rc = 0;

	if (!v->h)
		return fsync(v->fd) < 0 ? err_errno(e, errno, "flush %s", v->path) : 0;

	for (unsigned i = 0; i < SLOTS; i++)
		if (slot_wait(v, &v->slot[i], rc < 0 ? NULL : e) < 0)
			rc = -1;
	if (rc == 0 && v->writable && nbd_flush(v->h, 0) < 0)
		rc = nbd_fail(e, "flush the volume");
	return rc;
}

int volio_read(struct volio *v, uint64_t off, void *buf, size_t len, struct err *e)
{
	char *p = buf;

	if (!v->h)
		return err_set(e, 500, "internal", "%s is open for writing only", v->path);

	while (len) {
		size_t n = len < SLOT_BYTES ? len : SLOT_BYTES;
		if (nbd_pread(v->h, p, n, off, 0) < 0)
			return nbd_fail(e, "read the volume");
		p += n;
		off += n;
		len -= n;
	}
	return 0;
}

struct first_extent {
	bool seen, zero;
	uint64_t len;
};

static int on_extent(void *data, const char *ctx, uint64_t off, uint32_t *ent,
		     size_t n, int *error)
{
	struct first_extent *f = data;

	(void)off;
	(void)error;
	if (f->seen || strcmp(ctx, LIBNBD_CONTEXT_BASE_ALLOCATION) != 0 || n < 2)
		return 0;
	f->seen = true;
	f->len = ent[0];
	f->zero = (ent[1] & LIBNBD_STATE_ZERO) != 0;
	return 0;
}

bool volio_zero(struct volio *v, uint64_t off, uint64_t len, uint64_t *run)
{
	struct first_extent f = { 0 };
	uint64_t ask = len > (1ull << 30) ? (1ull << 30) : len;

	*run = len;
	if (!v->h || v->writable || nbd_can_meta_context(v->h, LIBNBD_CONTEXT_BASE_ALLOCATION) != 1)
		return false;
	if (nbd_block_status(v->h, ask, off,
			     (nbd_extent_callback){ .callback = on_extent, .user_data = &f },
			     0) < 0 || !f.seen || f.len == 0)
		return false;
	*run = f.len < len ? f.len : len;
	return f.zero;
}

void volio_close(struct volio *v)
{
	if (!v)
		return;
	if (!v->h) {
		close(v->fd);
		if (v->dfd >= 0)
			close(v->dfd);
		free(v);
		return;
	}
	for (unsigned i = 0; i < SLOTS; i++) {
		if (v->slot[i].cookie)
			slot_wait(v, &v->slot[i], NULL);
		free(v->slot[i].buf);
	}
	nbd_shutdown(v->h, 0);
	nbd_close(v->h);
	free(v);
}
