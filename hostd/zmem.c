#include "hostd/zmem.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
/* For ZSTD_getFrameHeader and ZSTD_d_stableOutBuffer: in zstd's
 * experimental API, exported by libzstd.so (1.4.4 on); hostd is built and
 * run against the same libzstd. */
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

#include "common/util.h"
#include "common/banned.h"

#define CHUNK (1 << 20)     /* reads, writes and the FIFO's size */
#define HUGE_PAGE (2 << 20) /* a transparent huge page */
#define MAX_WORKERS 4
#define WINDOW_LOG 27       /* zstd's default limit for decoders */
#define LEAD ((size_t)512 << 20) /* decoded ahead of the FIFO's reader, at most */
#define READAHEAD ((off_t)256 << 20) /* the disk reads the image ahead of the decoder */


static ssize_t read_some(int fd, char *p, size_t n)
{
	ssize_t r;

	do
		r = read(fd, p, n);
	while (r < 0 && errno == EINTR);
	return r;
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n);

	if (!p)
		abort();
	return p;
}

/* fsync the directory holding PATH, so a rename into it is durable. */
static int fsync_dir(const char *path, struct err *e)
{
	char dir[PATH_MAX];
	char *slash;
	int fd, rc = 0;

	snprintf(dir, sizeof(dir), "%s", path);
	slash = strrchr(dir, '/');
	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else if (slash == dir)
		dir[1] = '\0';
	else
		*slash = '\0';
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || fsync(fd) < 0)
		rc = err_errno(e, errno, "fsync %s", dir);
	if (fd >= 0)
		close(fd);
	return rc;
}

int zmem_compress(const char *src, const char *dst, int level, struct zmem_stats *st,
		  struct err *e)
{
	char part[PATH_MAX];
	int64_t t0 = mono_us();
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	int in = -1, out = -1, rc = -1;
	ZSTD_CCtx *cz = NULL;
	char *ibuf = NULL, *obuf = NULL;
	uint64_t written = 0;
	struct stat sb;
	size_t r;

	if (st)
		memset(st, 0, sizeof(*st));
	if ((size_t)snprintf(part, sizeof(part), "%s.part", dst) >= sizeof(part))
		return err_set(e, 500, "internal", "path too long: %s", dst);
	in = open(src, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return err_errno(e, errno, "open %s", src);
	if (fstat(in, &sb) < 0) {
		err_errno(e, errno, "stat %s", src);
		goto out;
	}
	posix_fadvise(in, 0, 0, POSIX_FADV_SEQUENTIAL);
	out = open(part, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (out < 0) {
		err_errno(e, errno, "create %s", part);
		goto out;
	}
	cz = ZSTD_createCCtx();
	if (!cz)
		abort();
	r = ZSTD_CCtx_setParameter(cz, ZSTD_c_compressionLevel, level);
	if (!ZSTD_isError(r))
		r = ZSTD_CCtx_setParameter(cz, ZSTD_c_checksumFlag, 1);
	/* Matches up to 128 MiB back: a guest's memory repeats itself far
	 * apart (the same file in the page cache and in a process, copies of
	 * a binary).  On a 480 MiB image of bench/wake.py's guest: 23%
	 * smaller at levels -1 and 1, as fast to decompress; the wake's
	 * decoder holds that much. */
	if (!ZSTD_isError(r))
		r = ZSTD_CCtx_setParameter(cz, ZSTD_c_enableLongDistanceMatching, 1);
	if (!ZSTD_isError(r))
		r = ZSTD_CCtx_setParameter(cz, ZSTD_c_windowLog, WINDOW_LOG);
	if (!ZSTD_isError(r))
		r = ZSTD_CCtx_setPledgedSrcSize(cz, (unsigned long long)sb.st_size);
	if (ZSTD_isError(r)) {
		err_set(e, 500, "compress", "zstd level %d: %s", level, ZSTD_getErrorName(r));
		goto out;
	}
	/* Worker threads compress while this one reads and writes; a libzstd
	 * built without them refuses, and then this thread does it all.  At
	 * most four: the host's guests keep running meanwhile. */
	if (cpus > 1)
		ZSTD_CCtx_setParameter(cz, ZSTD_c_nbWorkers,
				       cpus > MAX_WORKERS ? MAX_WORKERS : (int)cpus);
	ibuf = xmalloc(CHUNK);
	obuf = xmalloc(CHUNK);
	for (;;) {
		ssize_t n = read_some(in, ibuf, CHUNK);
		if (n < 0) {
			err_errno(e, errno, "read %s", src);
			goto out;
		}
		ZSTD_EndDirective mode = n == 0 ? ZSTD_e_end : ZSTD_e_continue;
		ZSTD_inBuffer zin = { ibuf, (size_t)n, 0 };
		size_t left;
		do {
			ZSTD_outBuffer zo = { obuf, CHUNK, 0 };
			left = ZSTD_compressStream2(cz, &zo, &zin, mode);
			if (ZSTD_isError(left)) {
				err_set(e, 500, "compress", "compress %s: %s", src,
					ZSTD_getErrorName(left));
				goto out;
			}
			if (fd_write_all(out, obuf, zo.pos) < 0) {
				err_errno(e, errno, "write %s", part);
				goto out;
			}
			written += zo.pos;
		} while (mode == ZSTD_e_end ? left != 0 : zin.pos < zin.size);
		if (n == 0)
			break;
	}
	if (fsync(out) < 0) {
		err_errno(e, errno, "fsync %s", part);
		goto out;
	}
	rc = close(out);
	out = -1;
	if (rc < 0) {
		err_errno(e, errno, "close %s", part);
		goto out;
	}
	rc = -1;
	if (rename(part, dst) < 0) {
		err_errno(e, errno, "rename %s to %s", part, dst);
		goto out;
	}
	if (fsync_dir(dst, e) < 0)
		goto out;
	if (st) {
		st->raw_bytes = (uint64_t)sb.st_size;
		st->zst_bytes = written;
		st->us = mono_us() - t0;
	}
	rc = 0;
out:
	ZSTD_freeCCtx(cz);
	free(ibuf);
	free(obuf);
	close(in);
	if (out >= 0)
		close(out);
	if (rc < 0)
		unlink(part);
	return rc;
}

int zmem_head(const char *path, size_t max, struct buf *out, struct err *e)
{
	static const unsigned char magic[4] = { 0x28, 0xb5, 0x2f, 0xfd };
	size_t start = out->len;
	ZSTD_DCtx *dz = NULL;
	char *ibuf = NULL, *obuf = NULL;
	bool zst = false, first = true;
	int in, rc = -1;

	in = open(path, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return err_errno(e, errno, "open %s", path);
	ibuf = xmalloc(ZSTD_DStreamInSize());
	obuf = xmalloc(ZSTD_DStreamOutSize());
	dz = ZSTD_createDCtx();
	if (!dz)
		abort();
	while (out->len - start < max) {
		ssize_t n = read_some(in, ibuf, ZSTD_DStreamInSize());
		if (n < 0) {
			err_errno(e, errno, "read %s", path);
			goto out;
		}
		if (n == 0)
			break;
		if (first)
			zst = n >= 4 && memcmp(ibuf, magic, 4) == 0;
		first = false;
		if (!zst) {
			size_t take = (size_t)n < max - (out->len - start) ? (size_t)n
									: max - (out->len - start);
			buf_add(out, ibuf, take);
			continue;
		}
		ZSTD_inBuffer zin = { ibuf, (size_t)n, 0 };
		while (zin.pos < zin.size && out->len - start < max) {
			ZSTD_outBuffer zo = { obuf, ZSTD_DStreamOutSize(), 0 };
			size_t r = ZSTD_decompressStream(dz, &zo, &zin);
			if (ZSTD_isError(r)) {
				err_set(e, 500, "memory_image", "decompress %s: %s", path,
					ZSTD_getErrorName(r));
				goto out;
			}
			size_t take = zo.pos < max - (out->len - start) ? zo.pos
								       : max - (out->len - start);
			buf_add(out, obuf, take);
			if (r == 0)
				break;
		}
	}
	rc = 0;
out:
	ZSTD_freeDCtx(dz);
	free(ibuf);
	free(obuf);
	close(in);
	return rc;
}

int zmem_frame_check(const void *p, size_t n, uint64_t *content, uint64_t *window)
{
	ZSTD_frameHeader fh;

	*content = *window = 0;
	if (ZSTD_getFrameHeader(&fh, p, n) != 0 || fh.frameType != ZSTD_frame ||
	    fh.frameContentSize == ZSTD_CONTENTSIZE_UNKNOWN || fh.frameContentSize == 0 ||
	    fh.frameContentSize > SIZE_MAX / 2)
		return -1;
	*content = fh.frameContentSize;
	*window = fh.windowSize;
	return 0;
}

struct zmem_feed {
	pthread_t thread;
	int in;                 /* the zstd file */
	char src[PATH_MAX], fifo[PATH_MAX];
	atomic_bool done;       /* the reader is done: stop waiting for it */
	bool delivered;         /* all of the content reached the reader */
	bool no_splice;         /* vmsplice refused: write() */
	off_t ahead;            /* SRC is being read ahead up to here */
	struct err err;         /* reading or decompressing SRC failed */
};

/* Hand up to N bytes at P to the FIFO *OUT without waiting: the pages go
 * into the pipe by reference (vmsplice, no copy), so P's bytes must stay
 * as they are until the reader has read them.  How many it took.  When the
 * reader went away *OUT is closed and set to -1. */
static size_t feed_push(struct zmem_feed *f, int *out, const char *p, size_t n)
{
	size_t done = 0;

	while (done < n) {
		ssize_t w;
		if (!f->no_splice) {
			struct iovec iov = { .iov_base = (void *)(p + done), .iov_len = n - done };
			w = vmsplice(*out, &iov, 1, SPLICE_F_NONBLOCK);
			if (w < 0 && (errno == EINVAL || errno == ENOSYS || errno == EPERM)) {
				f->no_splice = true;
				continue;
			}
		} else {
			w = write(*out, p + done, n - done);
		}
		if (w > 0) {
			done += (size_t)w;
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN)
			break;
		close(*out);        /* EPIPE: the reader closed */
		*out = -1;
		break;
	}
	return done;
}

/* Ask the kernel to read SRC up to READAHEAD bytes past OFFSET, where
 * the decoder reads now (in steps, so a large image is not read into the
 * page cache all at once). */
static void feed_readahead(struct zmem_feed *f, off_t offset)
{
	while (f->ahead < offset + READAHEAD) {
		posix_fadvise(f->in, f->ahead, READAHEAD / 4, POSIX_FADV_WILLNEED);
		f->ahead += READAHEAD / 4;
	}
}

/* Wait for the FIFO's reader: opening it for writing without one fails
 * with ENXIO.  The fd, or -1 when the reader said it is done without
 * coming or the FIFO cannot be opened (F->err set). */
static int feed_open(struct zmem_feed *f)
{
	int out;

	while ((out = open(f->fifo, O_WRONLY | O_NONBLOCK | O_CLOEXEC)) < 0) {
		if (errno != ENXIO && errno != EINTR) {
			err_errno(&f->err, errno, "open %s", f->fifo);
			return -1;
		}
		if (atomic_load(&f->done))
			return -1;
		usleep(1000);
	}
	/* Fewer wake-ups of both sides with a larger pipe (best effort). */
	fcntl(out, F_SETPIPE_SZ, CHUNK);
	return out;
}

/* Decompress F's frame into OUT (-1: nowhere, only check it).
 *
 * The reader is libvirt, which reads the image's header at once, then
 * starts QEMU (half a second and more), which only then reads the rest:
 * so this decodes ahead of the reader, up to LEAD bytes, and the decoding
 * overlaps QEMU's start instead of its loading.  The frame says its
 * content size (zmem_compress pledges it), so it is decoded straight into
 * one anonymous mapping of that size (zstd's stable output buffer: no copy
 * through its window), whose pages go into the pipe by reference; the
 * pages behind both zstd's window and the pipe are given back as it goes,
 * so memory stays about LEAD and the window. */
static void feed_frame(struct zmem_feed *f, int out)
{
	ZSTD_DCtx *dz = NULL;
	uint64_t content = 0, window = 0;
	char *ibuf = xmalloc(CHUNK), *obuf = MAP_FAILED;
	size_t have = 0, r = 1, sent = 0, freed = 0;
	ZSTD_outBuffer zo = { NULL, 0, 0 };
	ZSTD_inBuffer zin;

	/* The frame header: at most 18 bytes at the start. */
	while (have < ZSTD_FRAMEHEADERSIZE_MAX) {
		ssize_t n = read_some(f->in, ibuf + have, ZSTD_FRAMEHEADERSIZE_MAX - have);
		if (n < 0) {
			err_errno(&f->err, errno, "read %s", f->src);
			goto out;
		}
		if (n == 0)
			break;
		have += (size_t)n;
	}
	if (zmem_frame_check(ibuf, have, &content, &window) < 0) {
		err_set(&f->err, 500, "memory_image", "%s is not a memory image "
			"(a zstd frame that says its size)", f->src);
		goto out;
	}
	obuf = mmap(NULL, (size_t)content, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (obuf == MAP_FAILED) {
		err_errno(&f->err, errno, "map %llu bytes to decompress %s",
			  (unsigned long long)content, f->src);
		goto out;
	}
	/* Huge pages: a fault per 2 MiB instead of per 4 KiB (faults cost
	 * more than the copy the stable buffer saves). */
	madvise(obuf, (size_t)content, MADV_HUGEPAGE);
	zo = (ZSTD_outBuffer){ obuf, (size_t)content, 0 };
	zin = (ZSTD_inBuffer){ ibuf, have, 0 };
	dz = ZSTD_createDCtx();
	if (!dz)
		abort();
	ZSTD_DCtx_setParameter(dz, ZSTD_d_stableOutBuffer, 1);
	ZSTD_DCtx_setParameter(dz, ZSTD_d_windowLogMax, WINDOW_LOG);
	for (;;) {
		if (out >= 0 && sent < zo.pos)
			sent += feed_push(f, &out, obuf + sent, zo.pos - sent);
		if (out < 0)
			sent = zo.pos;      /* no one to hand it to: only check it */
		/* Give back what neither zstd's window nor the pipe may use. */
		size_t upto = sent > 4 * CHUNK ? sent - 4 * CHUNK : 0;
		if (zo.pos - upto < window)
			upto = zo.pos > window ? zo.pos - window : 0;
		upto = upto / HUGE_PAGE * HUGE_PAGE;
		if (upto > freed) {
			madvise(obuf + freed, upto - freed, MADV_DONTNEED);
			freed = upto;
		}
		if (r == 0 && sent == zo.pos)
			break;
		if (r != 0 && zo.pos - sent < LEAD) {
			/* Decode a block's worth, so the pipe gets bytes as they come. */
			if (zin.pos == zin.size) {
				feed_readahead(f, lseek(f->in, 0, SEEK_CUR));
				ssize_t n = read_some(f->in, ibuf, CHUNK);
				if (n <= 0) {
					if (n < 0)
						err_errno(&f->err, errno, "read %s", f->src);
					else
						err_set(&f->err, 500, "memory_image", "%s is truncated",
							f->src);
					goto out;
				}
				zin = (ZSTD_inBuffer){ ibuf, (size_t)n, 0 };
			}
			size_t end = zin.size;
			if (end - zin.pos > ZSTD_BLOCKSIZE_MAX)
				zin.size = zin.pos + ZSTD_BLOCKSIZE_MAX;
			r = ZSTD_decompressStream(dz, &zo, &zin);
			zin.size = end;
			if (ZSTD_isError(r)) {
				err_set(&f->err, 500, "memory_image", "decompress %s: %s",
					f->src, ZSTD_getErrorName(r));
				goto out;
			}
			/* r == 0: decoded, its checksum matched, all flushed. */
			if (r == 0 && (zin.pos < zin.size || read_some(f->in, ibuf, 1) != 0)) {
				err_set(&f->err, 500, "memory_image",
					"%s has data after its zstd frame", f->src);
				goto out;
			}
			continue;
		}
		/* Ahead by LEAD, or all decoded: wait for the reader to read. */
		struct pollfd pfd = { .fd = out, .events = POLLOUT };
		if (poll(&pfd, 1, 100) == 0 && atomic_load(&f->done)) {
			/* It is done without reading the rest. */
			close(out);
			out = -1;
		}
	}
	f->delivered = out >= 0;
out:
	if (out >= 0)
		close(out);
	ZSTD_freeDCtx(dz);
	free(ibuf);
	if (obuf != MAP_FAILED)
		munmap(obuf, (size_t)content);
}

static void *feed_main(void *arg)
{
	struct zmem_feed *f = arg;
	int out;

	/* The image of a machine idle for long is out of the page cache:
	 * have the disk read ahead while libvirt starts QEMU. */
	feed_readahead(f, 0);
	out = feed_open(f);
	if (out >= 0)
		feed_frame(f, out);
	/* A reader that opens the FIFO after this (a libvirt that opened the
	 * image twice) must see an empty stream and fail, not wait forever
	 * for a writer. */
	while (!atomic_load(&f->done)) {
		int fd = open(f->fifo, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
		if (fd >= 0)
			close(fd);
		usleep(2000);
	}
	return NULL;
}

struct zmem_feed *zmem_feed_start(const char *src, const char *fifo, struct err *e)
{
	struct zmem_feed *f = calloc(1, sizeof(*f));

	if (!f)
		abort();
	snprintf(f->src, sizeof(f->src), "%s", src);
	snprintf(f->fifo, sizeof(f->fifo), "%s", fifo);
	atomic_init(&f->done, false);
	f->in = open(src, O_RDONLY | O_CLOEXEC);
	if (f->in < 0) {
		err_errno(e, errno, "open %s", src);
		free(f);
		return NULL;
	}
	posix_fadvise(f->in, 0, 0, POSIX_FADV_SEQUENTIAL);
	if (pthread_create(&f->thread, NULL, feed_main, f) != 0) {
		err_set(e, 500, "internal", "cannot start a thread to decompress %s", src);
		close(f->in);
		free(f);
		return NULL;
	}
	return f;
}

int zmem_feed_finish(struct zmem_feed *f, bool *delivered, struct err *e)
{
	int rc = 0;

	atomic_store(&f->done, true);
	pthread_join(f->thread, NULL);
	if (err_isset(&f->err)) {
		if (e && !err_isset(e))
			*e = f->err;
		rc = -1;
	}
	if (delivered)
		*delivered = rc == 0 && f->delivered;
	close(f->in);
	free(f);
	return rc;
}
