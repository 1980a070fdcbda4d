#include "hostd/transfer.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "common/buf.h"
#include "common/log.h"
#include "common/run.h"
#include "common/util.h"
#include "hostd/machine.h"
#include "storage/volio.h"
#include "common/banned.h"

/* Enough of a file's start to tell its format. */
#define HEAD 64
/* Zero blocks are skipped, not written: a new base reads as zeros. */
#define BLOCK (64u << 10)
#define STAGE (1u << 20)
#define NCHUNK 8
/* Writer threads when the sink takes writes from several at once (a raw
 * file written with O_DIRECT: each waits for the disk, so two keep it
 * busy while a write is in flight). */
#define NWRITER 2
/* The request's thread hashes the file's bytes (sha256) and copies them
 * into these buffers, for a decoder thread that recognises, decompresses
 * and hands chunks to the writers: the decompression, the longest part,
 * then has a thread to itself (no receiving, no hashing). */
#define HBUF (1u << 20)
#define NHBUF 8

struct chunk {
	unsigned char *data;  /* STAGE bytes */
	size_t len;
	uint64_t off;
};

enum kind { K_UNKNOWN, K_RAW, K_QCOW2, K_ZSTD };

/* Where the raw or qcow2 bytes go: straight into the new base volume (a
 * raw stream of known size), or into a file that qemu-img then imports
 * (qcow2 needs random access; a raw stream of unknown size has no volume
 * to go to yet). */
enum sink { SINK_NONE, SINK_VOLUME, SINK_FILE };

struct import {
	struct hostd *h;
	char name[64], key[80], volume[80], origin[256];
	char sha256[65];            /* expected; "" for none */
	char format[16];            /* insisted on; "" for none */
	char boot[16], kernel[PATH_MAX], initrd[PATH_MAX], cmdline[1024], user[64];
	uint64_t length;            /* announced, 0: unknown */
	uint64_t in_bytes;          /* fed so far */
	EVP_MD_CTX *md;

	unsigned char head[HEAD];   /* the file's first bytes, until known */
	size_t head_len;
	enum kind outer;            /* the file's format */
	ZSTD_DCtx *dz;
	size_t zret;                /* last ZSTD_decompressStream result */
	uint64_t content;           /* raw size announced by the zstd frame */
	enum kind inner;            /* what the (decompressed) bytes are */

	enum sink sink;
	uint64_t expect;            /* raw bytes the volume sink waits for */
	struct volio *vio;
	bool vol_made;
	int fd;
	char tmp[PATH_MAX];

	/* The disk's bytes are filled into chunks (decompressed in place);
	 * a full chunk goes to a writer thread, which skips its zero
	 * blocks and writes the rest, while the decoder thread fills the
	 * next.  While the decoder runs, the import's state is its own
	 * (until input_finish) except what mu guards. */
	struct chunk chunk[NCHUNK];
	int cur;                    /* chunk being filled, -1: none */
	uint64_t off;               /* disk offset of the next chunk */
	pthread_t writer[NWRITER];
	int nwriters;               /* running; 0: none */
	bool writer_on;
	pthread_mutex_t mu;
	pthread_cond_t work;         /* a chunk was queued, or stop */
	pthread_cond_t freed;        /* a chunk was freed (or a writer failed) */
	int queue[NCHUNK];          /* full chunks, in order */
	unsigned qhead, qlen;
	int freel[NCHUNK];          /* free chunks */
	unsigned nfree;
	bool stop;                  /* no more chunks will come */
	int64_t waited_us;          /* the filler's time waiting for a free chunk */
	bool wfailed;               /* the writer's failure, in werr */
	struct err werr;

	/* The decoder thread: input copied into hbuf[hcur] (-1: none), full
	 * buffers queued to it, decoded in order.  dead (atomic) tells the
	 * request's thread that the import failed: no more copies. */
	unsigned char *hbuf[NHBUF];
	size_t hlen[NHBUF];
	int hcur;
	pthread_t decoder;
	bool decoder_on;
	bool hdrop;                 /* drop what is queued (an abort) */
	bool dead;
	pthread_mutex_t hmu;
	pthread_cond_t hcv;
	int hq[NHBUF];
	unsigned hqhead, hqlen;
	int hfree[NHBUF];
	unsigned hnfree;
	bool hstop;

	bool failed;
	struct err err;
};

static const struct {
	const unsigned char *magic;
	size_t len;
	const char *what;
} others[] = {
	{ (const unsigned char *)"\x1f\x8b", 2, "a gzip file" },
	{ (const unsigned char *)"\xfd" "7zXZ\x00", 6, "an xz file" },
	{ (const unsigned char *)"BZh", 3, "a bzip2 file" },
	{ (const unsigned char *)"PK\x03\x04", 4, "a zip file" },
	{ (const unsigned char *)"KDMV", 4, "a VMDK image" },
	{ (const unsigned char *)"vhdxfile", 8, "a VHDX image" },
	{ (const unsigned char *)"conectix", 8, "a VHD image" },
	{ (const unsigned char *)"<<< ", 4, "a VirtualBox VDI image" },
	{ (const unsigned char *)"QEVM", 4, "a QED image" },
};

static int pwrite_all(int fd, const unsigned char *p, size_t n, off_t off)
{
	while (n) {
		ssize_t w = pwrite(fd, p, n, off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
		off += w;
	}
	return 0;
}

static bool all_zero(const unsigned char *p, size_t n)
{
	return n == 0 || (p[0] == 0 && memcmp(p, p + 1, n - 1) == 0);
}

/* Latch the first failure; what follows is dropped. */
static void fail(struct import *im, const struct err *e)
{
	if (im->failed)
		return;
	im->failed = true;
	im->err = *e;
}

static void failf(struct import *im, int status, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void failf(struct import *im, int status, const char *code, const char *fmt, ...)
{
	struct err e = { 0 };
	char msg[sizeof(e.msg)];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	err_set(&e, status, code, "%s", msg);
	fail(im, &e);
}

static enum kind sniff(struct import *im, const unsigned char *p, size_t n, bool outer)
{
	if (n >= 4 && memcmp(p, "\x28\xb5\x2f\xfd", 4) == 0) {
		if (!outer) {
			failf(im, 400, "unknown_format",
			      "%s: a zstd file inside a zstd file; decompress it once first",
			      im->origin);
			return K_UNKNOWN;
		}
		return K_ZSTD;
	}
	if (n >= 4 && memcmp(p, "QFI\xfb", 4) == 0)
		return K_QCOW2;
	for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++)
		if (n >= others[i].len && memcmp(p, others[i].magic, others[i].len) == 0) {
			failf(im, 400, "unknown_format",
			      "%s is %s; berth imports raw and qcow2 disk images, and their "
			      ".zst", im->origin, others[i].what);
			return K_UNKNOWN;
		}
	return K_RAW;
}

/* ---- sinks ------------------------------------------------------------ */

static int open_volume(struct import *im, uint64_t bytes)
{
	struct storage_vol_info vi;
	struct err e = { 0 };

	if (bytes == 0 || bytes % 512) {
		failf(im, 400, "unknown_format",
		      "%s is not a disk image: %llu bytes is not a whole number of "
		      "512-byte sectors, and it is neither qcow2 nor zstd",
		      im->origin, (unsigned long long)bytes);
		return -1;
	}
	if (storage_base_create(im->h->st, im->volume, bytes, &vi, &e) < 0) {
		fail(im, &e);
		return -1;
	}
	im->vol_made = true;
	im->vio = volio_open(vi.path, vi.format, true, &e);
	if (!im->vio) {
		fail(im, &e);
		return -1;
	}
	im->sink = SINK_VOLUME;
	im->expect = bytes;
	return 0;
}

static int open_file(struct import *im)
{
	char dir[PATH_MAX];

	xsnprintf(dir, sizeof(dir), "%s/tmp", im->h->cfg.state_dir);
	xsnprintf(im->tmp, sizeof(im->tmp), "%s/import-%s-XXXXXX", dir, im->name);
	if (mkdir_p(dir, 0700) < 0 || (im->fd = mkostemp(im->tmp, O_CLOEXEC)) < 0) {
		struct err e = { 0 };
		err_errno(&e, errno, "create a file in %s", dir);
		im->tmp[0] = '\0';
		fail(im, &e);
		return -1;
	}
	im->sink = SINK_FILE;
	return 0;
}

/* Write CHUNK, skipping zero blocks (a writer thread; several may run). */
static int write_chunk(struct import *im, const struct chunk *c, struct err *e)
{
	size_t i = 0;

	while (i < c->len) {
		size_t n = c->len - i < BLOCK ? c->len - i : BLOCK;
		if (all_zero(c->data + i, n)) {
			i += n;
			continue;
		}
		/* A run of blocks with data: one write. */
		size_t j = i + n;
		while (j < c->len) {
			size_t m = c->len - j < BLOCK ? c->len - j : BLOCK;
			if (all_zero(c->data + j, m))
				break;
			j += m;
		}
		if (im->sink == SINK_VOLUME) {
			if (volio_write(im->vio, c->off + i, c->data + i, j - i, e) < 0)
				return -1;
		} else if (pwrite_all(im->fd, c->data + i, j - i, (off_t)(c->off + i)) < 0) {
			return err_errno(e, errno, "write %s", im->tmp);
		}
		i = j;
	}
	return 0;
}

static void *writer_main(void *arg)
{
	struct import *im = arg;
	struct err e = { 0 };

	pthread_mutex_lock(&im->mu);
	for (;;) {
		while (!im->qlen && !im->stop)
			pthread_cond_wait(&im->work, &im->mu);
		if (!im->qlen)
			break;
		int k = im->queue[im->qhead];
		im->qhead = (im->qhead + 1) % NCHUNK;
		im->qlen--;
		bool skip = im->wfailed;
		pthread_mutex_unlock(&im->mu);
		int rc = skip ? 0 : write_chunk(im, &im->chunk[k], &e);
		pthread_mutex_lock(&im->mu);
		if (rc < 0 && !im->wfailed) {
			im->wfailed = true;
			im->werr = e;
		}
		im->freel[im->nfree++] = k;
		pthread_cond_signal(&im->freed);
	}
	pthread_mutex_unlock(&im->mu);
	return NULL;
}

/* The sink is open: start writing. */
static void start_writer(struct import *im)
{
	int n = im->sink == SINK_FILE || volio_parallel(im->vio) ? NWRITER : 1;

	for (int i = 0; i < n; i++)
		if (pthread_create(&im->writer[i], NULL, writer_main, im) != 0)
			abort();
	im->nwriters = n;
	im->writer_on = true;
}

/* Wait for the writer to write every chunk handed over; its failure
 * becomes the import's. */
static void stop_writer(struct import *im)
{
	if (!im->writer_on)
		return;
	pthread_mutex_lock(&im->mu);
	im->stop = true;
	pthread_cond_broadcast(&im->work);
	pthread_mutex_unlock(&im->mu);
	for (int i = 0; i < im->nwriters; i++)
		pthread_join(im->writer[i], NULL);
	im->nwriters = 0;
	im->writer_on = false;
	/* Every write is done: to stable storage with them (not after a
	 * failure, nor when import_free stopped the writers). */
	if (!im->wfailed && im->sink == SINK_VOLUME) {
		struct err e = { 0 };
		if (volio_flush(im->vio, &e) < 0) {
			im->wfailed = true;
			im->werr = e;
		}
	}
	if (im->wfailed)
		fail(im, &im->werr);
}

/* The chunk being filled, taking a free one (waiting for the writer when
 * all are queued); NULL after a failure. */
static struct chunk *cur_chunk(struct import *im)
{
	if (im->cur >= 0)
		return &im->chunk[im->cur];
	pthread_mutex_lock(&im->mu);
	if (!im->nfree && !im->wfailed) {
		int64_t t0 = mono_us();
		while (!im->nfree && !im->wfailed)
			pthread_cond_wait(&im->freed, &im->mu);
		im->waited_us += mono_us() - t0;
	}
	bool failed = im->wfailed;
	if (!failed)
		im->cur = im->freel[--im->nfree];
	pthread_mutex_unlock(&im->mu);
	if (failed) {
		stop_writer(im);
		return NULL;
	}
	struct chunk *c = &im->chunk[im->cur];
	/* Page-aligned: a raw base takes whole blocks with O_DIRECT. */
	if (!c->data && posix_memalign((void **)&c->data, 4096, STAGE) != 0)
		abort();
	c->len = 0;
	return c;
}

/* The disk's first bytes are known (the first chunk is full, or the file
 * ended): what they are decides where they go. */
static void choose_sink(struct import *im, const unsigned char *p, size_t n)
{
	/* A file that is not zstd was recognised by outer_start already. */
	im->inner = im->outer == K_ZSTD ? sniff(im, p, n, false) : im->outer;
	if (im->inner == K_UNKNOWN)
		return;
	if (im->format[0] && strcmp(im->format, im->inner == K_QCOW2 ? "qcow2" : "raw") != 0) {
		failf(im, 400, "wrong_format", "%s is %s, not %s", im->origin,
		      im->inner == K_QCOW2 ? "a qcow2 image" : "not a qcow2 image", im->format);
		return;
	}
	int rc;
	if (im->inner == K_QCOW2)
		rc = open_file(im);
	else if (im->outer == K_ZSTD)
		rc = im->content != ZSTD_CONTENTSIZE_UNKNOWN ? open_volume(im, im->content)
							     : open_file(im);
	else
		rc = im->length ? open_volume(im, im->length) : open_file(im);
	if (rc == 0)
		start_writer(im);
}

/* Hand the current chunk to the writer. */
static void hand_off(struct import *im)
{
	struct chunk *c = &im->chunk[im->cur];

	if (im->sink == SINK_NONE && !im->failed)
		choose_sink(im, c->data, c->len);
	if (!im->failed && im->sink == SINK_VOLUME && im->off + c->len > im->expect)
		failf(im, 400, "invalid_image", "%s holds more than the %llu bytes its header "
		      "announces", im->origin, (unsigned long long)im->expect);
	pthread_mutex_lock(&im->mu);
	if (im->failed) {
		im->freel[im->nfree++] = im->cur;
	} else {
		c->off = im->off;
		im->off += c->len;
		im->queue[(im->qhead + im->qlen) % NCHUNK] = im->cur;
		im->qlen++;
		pthread_cond_signal(&im->work);
	}
	pthread_mutex_unlock(&im->mu);
	im->cur = -1;
}

/* Disk bytes from the file itself (raw or qcow2): copied into chunks. */
static void raw_put(struct import *im, const unsigned char *p, size_t n)
{
	while (!im->failed && n) {
		struct chunk *c = cur_chunk(im);
		if (!c)
			return;
		size_t k = STAGE - c->len < n ? STAGE - c->len : n;
		memcpy(c->data + c->len, p, k);
		c->len += k;
		p += k;
		n -= k;
		if (c->len == STAGE)
			hand_off(im);
	}
}

/* Compressed bytes: decompressed straight into chunks. */
static void zstd_put(struct import *im, const unsigned char *p, size_t n)
{
	ZSTD_inBuffer in = { p, n, 0 };

	while (!im->failed && in.pos < in.size) {
		struct chunk *c = cur_chunk(im);
		if (!c)
			return;
		ZSTD_outBuffer out = { c->data, STAGE, c->len };
		size_t r = ZSTD_decompressStream(im->dz, &out, &in);
		if (ZSTD_isError(r)) {
			failf(im, 400, "corrupt_image", "%s: not a valid zstd stream: %s",
			      im->origin, ZSTD_getErrorName(r));
			return;
		}
		im->zret = r;
		c->len = out.pos;
		if (c->len == STAGE)
			hand_off(im);
	}
}

/* ---- the decoder thread -------------------------------------------------- */

static void feed_bytes(struct import *im, const unsigned char *p, size_t len);

static void *decoder_main(void *arg)
{
	struct import *im = arg;

	pthread_mutex_lock(&im->hmu);
	for (;;) {
		while (!im->hqlen && !im->hstop)
			pthread_cond_wait(&im->hcv, &im->hmu);
		if (!im->hqlen)
			break;
		int k = im->hq[im->hqhead];
		im->hqhead = (im->hqhead + 1) % NHBUF;
		im->hqlen--;
		bool drop = im->hdrop;
		pthread_mutex_unlock(&im->hmu);
		if (!drop && !im->failed) {
			feed_bytes(im, im->hbuf[k], im->hlen[k]);
			if (im->failed)
				__atomic_store_n(&im->dead, true, __ATOMIC_RELAXED);
		}
		pthread_mutex_lock(&im->hmu);
		im->hfree[im->hnfree++] = k;
		pthread_cond_broadcast(&im->hcv);
	}
	pthread_mutex_unlock(&im->hmu);
	return NULL;
}

/* Queue the buffer being filled to the decoder. */
static void input_hand_off(struct import *im)
{
	pthread_mutex_lock(&im->hmu);
	im->hq[(im->hqhead + im->hqlen) % NHBUF] = im->hcur;
	im->hqlen++;
	pthread_cond_broadcast(&im->hcv);
	pthread_mutex_unlock(&im->hmu);
	im->hcur = -1;
}

/* Copy N bytes at P for the decoder (request's thread). */
static void input_put(struct import *im, const unsigned char *p, size_t n)
{
	if (!im->decoder_on) {
		if (pthread_create(&im->decoder, NULL, decoder_main, im) != 0)
			abort();
		im->decoder_on = true;
	}
	while (n) {
		if (im->hcur < 0) {
			pthread_mutex_lock(&im->hmu);
			while (!im->hnfree)
				pthread_cond_wait(&im->hcv, &im->hmu);
			im->hcur = im->hfree[--im->hnfree];
			pthread_mutex_unlock(&im->hmu);
			if (!im->hbuf[im->hcur] && !(im->hbuf[im->hcur] = malloc(HBUF)))
				abort();
			im->hlen[im->hcur] = 0;
		}
		size_t have = im->hlen[im->hcur], k = HBUF - have < n ? HBUF - have : n;
		memcpy(im->hbuf[im->hcur] + have, p, k);
		im->hlen[im->hcur] += k;
		p += k;
		n -= k;
		if (im->hlen[im->hcur] == HBUF)
			input_hand_off(im);
	}
}

/* Decode what is left (or drop it: DROP) and wait for the decoder; the
 * import's state is then the request thread's alone again. */
static void input_finish(struct import *im, bool drop)
{
	if (!im->decoder_on)
		return;
	if (im->hcur >= 0)
		input_hand_off(im);
	pthread_mutex_lock(&im->hmu);
	im->hstop = true;
	im->hdrop = im->hdrop || drop;
	pthread_cond_broadcast(&im->hcv);
	pthread_mutex_unlock(&im->hmu);
	pthread_join(im->decoder, NULL);
	im->decoder_on = false;
}

/* The file's first bytes are known: its format. */
static void outer_start(struct import *im, const unsigned char *p, size_t n)
{
	im->outer = sniff(im, p, n, true);
	if (im->outer == K_UNKNOWN)
		return;
	if (im->outer != K_ZSTD) {
		raw_put(im, p, n);
		return;
	}
	im->content = ZSTD_getFrameContentSize(p, n);
	if (im->content == ZSTD_CONTENTSIZE_ERROR) {
		failf(im, 400, "corrupt_image", "%s: a zstd file with a broken frame header",
		      im->origin);
		return;
	}
	im->dz = ZSTD_createDCtx();
	if (!im->dz)
		abort();
	/* Files written with --long=31 need a window that large. */
	ZSTD_DCtx_setParameter(im->dz, ZSTD_d_windowLogMax, 31);
	zstd_put(im, p, n);
}

/* Decoder thread: the file's bytes, in order. */
static void feed_bytes(struct import *im, const unsigned char *p, size_t len)
{
	if (im->outer != K_UNKNOWN) {
		if (im->outer == K_ZSTD)
			zstd_put(im, p, len);
		else
			raw_put(im, p, len);
		return;
	}
	size_t k = HEAD - im->head_len < len ? HEAD - im->head_len : len;
	memcpy(im->head + im->head_len, p, k);
	im->head_len += k;
	if (im->head_len < HEAD)
		return;
	outer_start(im, im->head, im->head_len);
	if (im->failed || k == len)
		return;
	if (im->outer == K_ZSTD)
		zstd_put(im, p + k, len - k);
	else
		raw_put(im, p + k, len - k);
}

void import_feed(struct import *im, const void *data, size_t len)
{
	if (!len || __atomic_load_n(&im->dead, __ATOMIC_RELAXED))
		return;
	EVP_DigestUpdate(im->md, data, len);
	im->in_bytes += len;
	input_put(im, data, len);
}

/* ---- the catalog entry --------------------------------------------------- */

struct import *import_begin(struct hostd *h, const struct import_opts *o, struct err *e)
{
	struct image img;
	struct import *im;

	if (!name_valid(o->name))
		return err_set(e, 400, "invalid_name", "invalid image name '%s'", o->name), NULL;
	if (o->sha256 && *o->sha256) {
		size_t n = strspn(o->sha256, "0123456789abcdefABCDEF");
		if (n != 64 || o->sha256[64])
			return err_set(e, 400, "invalid_sha256",
				       "'%s' is not a sha256 (64 hexadecimal digits)", o->sha256), NULL;
	}
	if (o->format && *o->format && strcmp(o->format, "raw") && strcmp(o->format, "qcow2"))
		return err_set(e, 400, "invalid_format", "format '%s' is not raw or qcow2",
			       o->format), NULL;
	if (strcmp(o->boot, "direct") && strcmp(o->boot, "firmware"))
		return err_set(e, 400, "invalid_boot", "boot '%s' is not direct or firmware",
			       o->boot), NULL;
	if (!strcmp(o->boot, "direct") && (!o->kernel || !*o->kernel))
		return err_set(e, 400, "invalid_boot", "direct boot needs a kernel"), NULL;
	if (o->user && (!user_name_valid(o->user) || strpbrk(o->user, "\"'\\")))
		return err_set(e, 400, "invalid_user", "invalid user name: a login name of 1 to "
			       "63 printable ASCII characters, no space, quote, backslash or '/', "
			       "not starting with '-'"), NULL;
	im = calloc(1, sizeof(*im));
	if (!im)
		abort();
	im->h = h;
	im->fd = -1;
	snprintf(im->name, sizeof(im->name), "%s", o->name);
	snprintf(im->volume, sizeof(im->volume), "base-%s", o->name);
	snprintf(im->key, sizeof(im->key), "image:%s", o->name);
	snprintf(im->origin, sizeof(im->origin), "%s", o->origin ? o->origin : "the image");
	snprintf(im->sha256, sizeof(im->sha256), "%s", o->sha256 ? o->sha256 : "");
	for (char *c = im->sha256; *c; c++)
		if (*c >= 'A' && *c <= 'F')
			*c = (char)(*c - 'A' + 'a');
	snprintf(im->format, sizeof(im->format), "%s", o->format ? o->format : "");
	snprintf(im->boot, sizeof(im->boot), "%s", o->boot);
	snprintf(im->kernel, sizeof(im->kernel), "%s", o->kernel ? o->kernel : "");
	snprintf(im->initrd, sizeof(im->initrd), "%s", o->initrd ? o->initrd : "");
	snprintf(im->cmdline, sizeof(im->cmdline), "%s", o->cmdline ? o->cmdline : "");
	snprintf(im->user, sizeof(im->user), "%s", o->user ? o->user : "root");
	im->length = o->length;
	if (busy_acquire(h->busy, im->key, "import", o->name, e) < 0) {
		free(im);
		return NULL;
	}
	if (db_image_get(h->db, o->name, &img, NULL) == 0) {
		busy_release(h->busy, im->key);
		free(im);
		return err_set(e, 409, "exists", "image %s exists", o->name), NULL;
	}
	if (storage_vol_exists(h->st, im->volume)) {
		busy_release(h->busy, im->key);
		free(im);
		return err_set(e, 409, "exists", "volume %s exists (an image being deleted?)",
			       im->volume), NULL;
	}
	im->md = EVP_MD_CTX_new();
	if (!im->md || EVP_DigestInit_ex(im->md, EVP_sha256(), NULL) != 1)
		abort();
	im->cur = -1;
	pthread_mutex_init(&im->mu, NULL);
	pthread_cond_init(&im->work, NULL);
	pthread_cond_init(&im->freed, NULL);
	for (int i = 0; i < NCHUNK; i++)
		im->freel[im->nfree++] = i;
	im->hcur = -1;
	pthread_mutex_init(&im->hmu, NULL);
	pthread_cond_init(&im->hcv, NULL);
	for (int i = 0; i < NHBUF; i++)
		im->hfree[im->hnfree++] = i;
	return im;
}

static void import_free(struct import *im, bool keep_volume)
{
	input_finish(im, true);
	if (im->writer_on) {
		/* Nothing more gets written. */
		pthread_mutex_lock(&im->mu);
		im->wfailed = true;
		pthread_mutex_unlock(&im->mu);
		stop_writer(im);
	}
	if (im->vio)
		volio_close(im->vio);
	if (im->vol_made && !keep_volume)
		storage_vol_remove(im->h->st, im->volume, NULL);
	if (im->fd >= 0)
		close(im->fd);
	if (im->tmp[0])
		unlink(im->tmp);
	ZSTD_freeDCtx(im->dz);
	for (int i = 0; i < NCHUNK; i++)
		free(im->chunk[i].data);
	for (int i = 0; i < NHBUF; i++)
		free(im->hbuf[i]);
	pthread_mutex_destroy(&im->mu);
	pthread_cond_destroy(&im->work);
	pthread_cond_destroy(&im->freed);
	pthread_mutex_destroy(&im->hmu);
	pthread_cond_destroy(&im->hcv);
	EVP_MD_CTX_free(im->md);
	busy_release(im->h->busy, im->key);
	free(im);
}

void import_abort(struct import *im)
{
	if (im)
		import_free(im, false);
}

/* A qcow2 file from outside must stand alone: a backing file or an
 * external data file would make qemu-img read files of this host into
 * the image. */
static int check_qcow2(const char *path, const char *origin, struct err *e)
{
	struct buf out = BUF_INIT;
	struct run_opts ro = { .out = &out };
	char *const argv[] = { "qemu-img", "info", "--output=json", "-f", "qcow2", "--",
			       (char *)path, NULL };
	json_t *j = NULL, *data;
	int rc = -1;

	if (run_argv(argv, &ro, e) < 0) {
		e->status = 400;
		snprintf(e->code, sizeof(e->code), "corrupt_image");
		goto out;
	}
	j = json_loadb(buf_str(&out), out.len, 0, NULL);
	data = json_object_get(json_object_get(json_object_get(j, "format-specific"), "data"),
			       "data-file");
	if (!j || json_integer_value(json_object_get(j, "virtual-size")) <= 0) {
		err_set(e, 400, "corrupt_image", "%s: qemu-img finds no virtual size", origin);
		goto out;
	}
	if (json_object_get(j, "backing-filename") || data) {
		err_set(e, 400, "invalid_image",
			"%s has a %s; make it standalone first (qemu-img convert -O qcow2)",
			origin, data ? "data file elsewhere" : "backing file");
		goto out;
	}
	/* A cut-off qcow2 reads as zeros past its end: qemu-img check sees
	 * its tables point beyond it.  (Leaked clusters alone are harmless.) */
	struct buf co = BUF_INIT;
	struct run_opts cro = { .out = &co };
	struct err ce = { 0 };
	char *const check[] = { "qemu-img", "check", "--output=json", "-f", "qcow2", "--",
				(char *)path, NULL };
	run_argv(check, &cro, &ce);
	json_t *cj = json_loadb(buf_str(&co), co.len, 0, NULL);
	json_int_t bad = json_integer_value(json_object_get(cj, "corruptions")) +
			 json_integer_value(json_object_get(cj, "check-errors"));
	if (!cj || bad > 0)
		err_set(e, 400, "corrupt_image", "%s is a damaged qcow2 image (truncated?): %s",
			origin, cj ? "qemu-img check finds errors in its tables" : ce.msg);
	json_decref(cj);
	buf_free(&co);
	if (!cj || bad > 0)
		goto out;
	rc = 0;
out:
	json_decref(j);
	buf_free(&out);
	return rc;
}

static int copy_boot_file(const char *src, const char *dir, char *path, size_t len,
			  struct err *e)
{
	const char *base = strrchr(src, '/');

	xsnprintf(path, len, "%s/%s", dir, base ? base + 1 : src);
	return file_copy(src, path, 0644, e);
}

int import_end(struct import *im, struct image *out, struct err *e)
{
	struct storage_vol_info vi;
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned mdlen = 0;
	char dir[PATH_MAX];
	struct image img;
	bool dir_made = false;
	int64_t t0 = mono_ms();

	memset(&img, 0, sizeof(img));
	/* Every byte fed is decoded (or dropped after a failure). */
	input_finish(im, false);
	if (!im->failed && im->outer == K_UNKNOWN) {
		if (im->head_len == 0)
			failf(im, 400, "invalid_image", "%s is empty", im->origin);
		else
			outer_start(im, im->head, im->head_len);
	}
	if (!im->failed && im->outer == K_ZSTD && im->zret != 0)
		failf(im, 400, "corrupt_image",
		      "%s is truncated: its zstd stream ends in the middle of a frame", im->origin);
	/* The last chunk, then every write done. */
	if (!im->failed && im->cur >= 0 && im->chunk[im->cur].len)
		hand_off(im);
	if (!im->failed && im->sink == SINK_NONE)
		failf(im, 400, "invalid_image", "%s holds no data", im->origin);
	stop_writer(im);
	if (!im->failed && im->length && im->in_bytes != im->length)
		failf(im, 400, "truncated", "%s: %llu bytes arrived of %llu announced", im->origin,
		      (unsigned long long)im->in_bytes, (unsigned long long)im->length);
	if (!im->failed && im->sink == SINK_VOLUME && im->off != im->expect)
		failf(im, 400, "truncated", "%s is truncated: %llu bytes of a %llu-byte disk",
		      im->origin, (unsigned long long)im->off, (unsigned long long)im->expect);
	EVP_DigestFinal_ex(im->md, md, &mdlen);
	for (unsigned i = 0; i < mdlen && i < 32; i++)
		snprintf(img.sha256 + 2 * i, 3, "%02x", md[i]);
	if (!im->failed && im->sha256[0] && strcmp(im->sha256, img.sha256) != 0)
		failf(im, 400, "sha256_mismatch", "%s has sha256 %s, not the expected %s",
		      im->origin, img.sha256, im->sha256);
	if (im->failed) {
		*e = im->err;
		goto fail;
	}

	/* The bytes are in (the writer flushed them): make the base. */
	if (im->sink == SINK_VOLUME) {
		volio_close(im->vio);
		im->vio = NULL;
		if (storage_base_seal(im->h->st, im->volume, e) < 0)
			goto fail;
	} else {
		if (ftruncate(im->fd, (off_t)im->off) < 0) {
			err_errno(e, errno, "truncate %s", im->tmp);
			goto fail;
		}
		close(im->fd);
		im->fd = -1;
		if (im->inner == K_QCOW2 && check_qcow2(im->tmp, im->origin, e) < 0)
			goto fail;
		if (im->inner == K_RAW && (im->off == 0 || im->off % 512)) {
			err_set(e, 400, "unknown_format",
				"%s is not a disk image: %llu bytes is not a whole number of "
				"512-byte sectors", im->origin, (unsigned long long)im->off);
			goto fail;
		}
		if (storage_base_import(im->h->st, im->volume, im->tmp,
					im->inner == K_QCOW2 ? "qcow2" : "raw", e) < 0)
			goto fail;
		im->vol_made = true;
	}
	if (storage_vol_info(im->h->st, im->volume, &vi, e) < 0)
		goto fail;

	snprintf(img.name, sizeof(img.name), "%s", im->name);
	snprintf(img.volume, sizeof(img.volume), "%s", im->volume);
	snprintf(img.format, sizeof(img.format), "%s", vi.format);
	snprintf(img.boot, sizeof(img.boot), "%s", im->boot);
	snprintf(img.cmdline, sizeof(img.cmdline), "%s", im->cmdline);
	snprintf(img.user, sizeof(img.user), "%s", im->user);
	snprintf(img.source, sizeof(img.source), "%s%s", im->inner == K_QCOW2 ? "qcow2" : "raw",
		 im->outer == K_ZSTD ? ".zst" : "");
	img.source_size = im->in_bytes;
	/* The disk's size, not the volume's: a thin LV is rounded up to
	 * whole extents. */
	img.virtual_size = im->sink == SINK_VOLUME ? im->expect : vi.virtual_bytes;
	img.created = now_s();
	img.public_ = true;	/* root's: built or imported */
	xsnprintf(dir, sizeof(dir), "%s/images/%s", im->h->cfg.state_dir, im->name);
	if (im->kernel[0]) {
		if (mkdir_p(dir, 0755) < 0) {
			err_errno(e, errno, "create %s", dir);
			goto fail;
		}
		dir_made = true;
		if (copy_boot_file(im->kernel, dir, img.kernel, sizeof(img.kernel), e) < 0 ||
		    (im->initrd[0] &&
		     copy_boot_file(im->initrd, dir, img.initrd, sizeof(img.initrd), e) < 0))
			goto fail;
	}
	if (db_image_insert(im->h->db, &img, e) < 0)
		goto fail;
	log_info("image %s imported from %s (%s, %llu bytes, disk %llu bytes, sha256 %s); "
		 "waited %lld ms for the writer; finished in %lld ms", img.name, im->origin,
		 img.source, (unsigned long long)img.source_size,
		 (unsigned long long)img.virtual_size, img.sha256,
		 (long long)(im->waited_us / 1000), (long long)(mono_ms() - t0));
	*out = img;
	import_free(im, true);
	return 0;
fail:
	if (dir_made)
		remove_tree(dir, NULL);
	import_free(im, false);
	return -1;
}

int import_file(struct hostd *h, const struct import_opts *o, const char *path,
		struct image *out, struct err *e)
{
	struct import_opts fo = *o;
	struct import *im;
	struct stat sb;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	void *buf;

	if (fd < 0)
		return err_errno(e, errno, "open %s", path);
	if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
		close(fd);
		return err_set(e, 400, "invalid_image", "%s is not a regular file", path);
	}
	fo.length = (uint64_t)sb.st_size;
	if (!fo.origin)
		fo.origin = path;
	im = import_begin(h, &fo, e);
	if (!im) {
		close(fd);
		return -1;
	}
	buf = malloc(STAGE);
	if (!buf)
		abort();
	while ((n = read(fd, buf, STAGE)) > 0)
		import_feed(im, buf, (size_t)n);
	free(buf);
	if (n < 0) {
		err_errno(e, errno, "read %s", path);
		close(fd);
		import_abort(im);
		return -1;
	}
	close(fd);
	return import_end(im, out, e);
}

/* ---- export ------------------------------------------------------------- */

#define EXPORT_CHUNK (4u << 20)

struct export {
	struct hostd *h;
	struct machine m;
	struct volio *v;
	uint64_t size, off;
	ZSTD_CCtx *cz;
	unsigned char *in, *zeros;
	ZSTD_inBuffer zin;
	bool ending, done;
	int64_t t0;
	uint64_t out_bytes;
};

struct export *export_begin(struct hostd *h, const char *owner, const char *name,
			    const char *ckpt, struct err *e)
{
	struct export *x = calloc(1, sizeof(*x));
	struct storage_vol_info vi;
	struct checkpoint c;
	enum vstate vs;
	const char *vol;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	if (!x)
		abort();
	x->h = h;
	x->t0 = mono_ms();
	/* Threads are bounded: max_host_exports × (one per CPU + the connection's). */
	if (atomic_fetch_add(&h->exports, 1) >= h->cfg.max_host_exports) {
		atomic_fetch_sub(&h->exports, 1);
		free(x);
		err_set(e, 503, "too_many_exports", "%d exports are running (max_host_exports): try "
			"again when one has finished", h->cfg.max_host_exports);
		return NULL;
	}
	if (machine_begin(h, owner, name, "export", &x->m, &vs, e) < 0) {
		atomic_fetch_sub(&h->exports, 1);
		free(x);
		return NULL;
	}
	if (ckpt) {
		if (db_ckpt_get(h->db, x->m.id, ckpt, &c, e) < 0)
			goto fail;
		vol = c.volume;
	} else {
		if (vs == VS_RUNNING || vs == VS_PAUSED || vs == VS_BUSY) {
			err_set(e, 409, "running",
				"machine %s is %s: its disk changes as it is read; stop or suspend "
				"it, or export a checkpoint (berth checkpoint %s, then %s@NAME)",
				name, vstate_name(vs), name, name);
			goto fail;
		}
		vol = x->m.volume;
	}
	if (storage_vol_info(h->st, vol, &vi, e) < 0)
		goto fail;
	x->v = volio_open(vi.path, vi.format, false, e);
	if (!x->v)
		goto fail;
	x->size = volio_size(x->v);
	if (x->m.disk && x->m.disk < x->size)
		x->size = x->m.disk;  /* a thin LV is rounded up to whole extents */
	x->cz = ZSTD_createCCtx();
	x->in = malloc(EXPORT_CHUNK);
	x->zeros = calloc(1, EXPORT_CHUNK);
	if (!x->cz || !x->in || !x->zeros)
		abort();
	/* Threads and long-distance matching (a disk repeats itself far
	 * apart); the frame says how big the disk is and carries a checksum. */
	ZSTD_CCtx_setParameter(x->cz, ZSTD_c_compressionLevel, 3);
	ZSTD_CCtx_setParameter(x->cz, ZSTD_c_nbWorkers, cpus > 1 ? (int)cpus : 1);
	ZSTD_CCtx_setParameter(x->cz, ZSTD_c_enableLongDistanceMatching, 1);
	ZSTD_CCtx_setParameter(x->cz, ZSTD_c_windowLog, 27);
	ZSTD_CCtx_setParameter(x->cz, ZSTD_c_checksumFlag, 1);
	ZSTD_CCtx_setPledgedSrcSize(x->cz, x->size);
	log_info("exporting %s/%s%s%s (%llu bytes)", owner, name, ckpt ? "@" : "",
		 ckpt ? ckpt : "", (unsigned long long)x->size);
	return x;
fail:
	volio_close(x->v);
	machine_end(h, &x->m);
	atomic_fetch_sub(&h->exports, 1);
	free(x);
	return NULL;
}

uint64_t export_size(const struct export *x)
{
	return x->size;
}

ssize_t export_read(struct export *x, void *buf, size_t max)
{
	ZSTD_outBuffer out = { buf, max, 0 };
	struct err e = { 0 };

	while (out.pos == 0 && !x->done) {
		if (x->zin.pos == x->zin.size && !x->ending) {
			uint64_t run, n = x->size - x->off;
			if (n == 0) {
				x->ending = true;
			} else {
				if (n > EXPORT_CHUNK)
					n = EXPORT_CHUNK;
				/* Holes are not read: they are zeros. */
				bool zero = volio_zero(x->v, x->off, n, &run);
				n = run;
				if (!zero && volio_read(x->v, x->off, x->in, n, &e) < 0) {
					log_error("export of %s/%s: %s", x->m.owner, x->m.name, e.msg);
					return -1;
				}
				x->zin = (ZSTD_inBuffer){ zero ? x->zeros : x->in, n, 0 };
				x->off += n;
				busy_progress(x->h->busy, x->m.id, x->off, x->size);
			}
		}
		size_t r = ZSTD_compressStream2(x->cz, &out, &x->zin,
						x->ending ? ZSTD_e_end : ZSTD_e_continue);
		if (ZSTD_isError(r)) {
			log_error("export of %s/%s: zstd: %s", x->m.owner, x->m.name,
				  ZSTD_getErrorName(r));
			return -1;
		}
		if (x->ending && r == 0)
			x->done = true;
	}
	x->out_bytes += out.pos;
	return (ssize_t)out.pos;
}

void export_end(struct export *x)
{
	if (!x)
		return;
	if (x->done)
		log_info("exported %s/%s: %llu bytes into %llu in %lld ms", x->m.owner, x->m.name,
			 (unsigned long long)x->size, (unsigned long long)x->out_bytes,
			 (long long)(mono_ms() - x->t0));
	else
		log_warn("export of %s/%s stopped after %llu of %llu bytes", x->m.owner,
			 x->m.name, (unsigned long long)x->off, (unsigned long long)x->size);
	volio_close(x->v);
	ZSTD_freeCCtx(x->cz);
	free(x->in);
	free(x->zeros);
	machine_end(x->h, &x->m);
	atomic_fetch_sub(&x->h->exports, 1);
	free(x);
}
