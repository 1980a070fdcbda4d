/* Memory images in zstd.  libvirt 9.0 writes its save images raw (or
 * gzip/bzip2/xz/lzop, all slow), so hostd compresses a suspended machine's
 * image itself, as one zstd frame with a content checksum, and on wake feeds
 * it back to libvirt through a FIFO while decompressing: the restore reads
 * the compressed bytes once, and decompression overlaps QEMU's loading.
 * No libvirt here: plain files, a FIFO and libzstd. */
#ifndef BERTH_ZMEM_H
#define BERTH_ZMEM_H

#include <stdbool.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/err.h"

struct zmem_stats {
	uint64_t raw_bytes;   /* the file compressed */
	uint64_t zst_bytes;   /* the frame written */
	int64_t us;           /* time taken, fsyncs included */
};

/* Compress the file SRC into DST: one zstd frame at LEVEL (negative: zstd's
 * fast levels) with long-distance matching over a 128 MiB window, its
 * content size and a checksum, on up to four worker threads.  Written to
 * DST.part, fsynced, renamed to DST and the directory fsynced: DST is
 * either absent or complete, whenever the process dies.  SRC is left
 * alone.  Fills *ST (may be NULL).  On failure DST.part is removed; -1 with
 * E. */
int zmem_compress(const char *src, const char *dst, int level, struct zmem_stats *st,
		  struct err *e);

/* Up to MAX bytes of the start of the file PATH, decompressed when it is a
 * zstd file, appended to OUT (fewer when it is shorter).  0, or -1 with E. */
int zmem_head(const char *path, size_t max, struct buf *out, struct err *e);

/* Whether the N bytes at P start a zstd frame as zmem_compress writes them
 * (a frame header that says its content size, over 0 and at most
 * SIZE_MAX / 2): 0 with *CONTENT (that size) and *WINDOW (its window size),
 * or -1 with both 0.  What a wake checks before it maps *CONTENT bytes. */
int zmem_frame_check(const void *p, size_t n, uint64_t *content, uint64_t *window);

/* A thread that decompresses a zstd file into a FIFO for one reader. */
struct zmem_feed;

/* Open SRC, a frame zmem_compress wrote, and start feeding its content
 * into the FIFO at FIFO (which the caller made) once a reader opens it.
 * NULL with E when SRC cannot be opened or the thread cannot start. */
struct zmem_feed *zmem_feed_start(const char *src, const char *fifo, struct err *e);
/* The reader is done (its open and reads returned): stop waiting for it,
 * let the thread decompress to the end of the frame (checking it) and free
 * F.  -1 with E when SRC turned out truncated, corrupt or unreadable: what
 * the reader got may be wrong.  Else 0, with *DELIVERED (may be NULL)
 * telling whether the whole, checked content reached the reader (false
 * when it never came or left early). */
int zmem_feed_finish(struct zmem_feed *f, bool *delivered, struct err *e);

#endif
