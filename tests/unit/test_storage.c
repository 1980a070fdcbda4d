/*
 * Unit tests for the qcow2 storage backend through the storage_*() wrappers
 * (storage/storage.h): first in dry-run mode, asserting the exact qemu-img
 * command lines and the refusals that happen before any tool runs; then for
 * real with qemu-img (skipped when it is not installed): import a raw base,
 * make O(1) overlays of 1 GiB and 100 GiB, read their sizes back, list and
 * remove volumes; a raw base streamed in (base_create, volio's direct
 * writes, base_seal) with an overlay on it that reads its bytes back
 * through qemu-nbd; who owns what (bases, a QEMU's volume, frozen layers).
 * Everything lives in one mkdtemp directory under /tmp
 * that is removed at the end, whatever failed.
 *
 * Built by the Makefile as build/default/tests/test_storage.  Prints TAP
 * lines and a closing count; exits 1 when a test failed.
 */
#include "storage/storage.h"
#include "storage/volio.h"

#include <endian.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/err.h"
#include "common/log.h"
#include "common/run.h"
#include "common/util.h"
#include "tests/unit/tap.h"
#include "common/banned.h"

#define MIB (1ULL << 20)
#define GIB (1ULL << 30)

static char root[64];  /* the test's temporary directory */

/* ROOT/REL into OUT. */
static const char *at(char *out, size_t outlen, const char *rel)
{
	snprintf(out, outlen, "%s/%s", root, rel);
	return out;
}

/* A minimal qcow2 header: magic, version 3, virtual size at offset 24. */
static int write_fake_qcow2(const char *path, uint64_t virtual_size)
{
	unsigned char h[104];
	uint32_t v3 = htobe32(3);
	uint64_t be = htobe64(virtual_size);

	memset(h, 0, sizeof(h));
	memcpy(h, "QFI\xfb", 4);
	memcpy(h + 4, &v3, 4);
	memcpy(h + 24, &be, 8);
	return write_file(path, h, sizeof(h));
}

static bool exists(const char *path)
{
	return access(path, F_OK) == 0;
}

static unsigned mode_of(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 ? (unsigned)(st.st_mode & 07777) : 0;
}

/* ---- volume lists ---------------------------------------------------------- */

struct names {
	char v[32][256];
	size_t n;
};

static void collect(const char *vol, void *data)
{
	struct names *ns = data;

	if (ns->n < 32)
		snprintf(ns->v[ns->n++], sizeof(ns->v[0]), "%s", vol);
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* The pool's volumes, sorted and joined with ",", into OUT. */
static int list_joined(struct storage *st, char *out, size_t outlen, struct err *e)
{
	struct names ns;
	size_t len = 0;

	ns.n = 0;
	out[0] = '\0';
	if (storage_vol_list(st, collect, &ns, e) < 0)
		return -1;
	qsort(ns.v, ns.n, sizeof(ns.v[0]), cmp_name);
	for (size_t i = 0; i < ns.n; i++) {
		int n = snprintf(out + len, outlen - len, "%s%s", i ? "," : "", ns.v[i]);
		if (n < 0 || (size_t)n >= outlen - len)
			return -1;
		len += (size_t)n;
	}
	return 0;
}

/* ---- backend lookup -------------------------------------------------------- */

static void test_open(void)
{
	struct err e;
	struct storage *st;
	char p[256], pool[256];

	check(storage_find("qcow2") == &storage_qcow2, "find: qcow2 is the qcow2 backend");
	check(storage_find("lvm-thin") == &storage_lvm_thin, "find: lvm-thin is the lvm-thin backend");
	check(storage_find("zfs") == NULL && storage_find("") == NULL,
	      "find: unknown names give NULL");

	err_clear(&e);
	st = storage_open("zfs-magic", at(p, sizeof(p), "nopool"), &e);
	if (!check(st == NULL && e.status == 400 && strcmp(e.code, "invalid_config") == 0 &&
		   strstr(e.msg, "'zfs-magic'") != NULL,
		   "open: unknown backend: 400 invalid_config naming it"))
		diag("status %d code '%s' msg '%s'", e.status, e.code, e.msg);
	storage_close(st);
	check(!exists(p), "open: unknown backend creates nothing");

	/* A location that cannot be a directory. */
	write_file(at(p, sizeof(p), "afile"), "x", 1);
	at(pool, sizeof(pool), "afile/pool");
	err_clear(&e);
	st = storage_open("qcow2", pool, &e);
	if (!check(st == NULL && err_isset(&e) && strstr(e.msg, pool) != NULL,
		   "open: location under a file fails, naming it"))
		diag("msg '%s'", e.msg);
	storage_close(st);

	/* Creating the pool, and leftovers of interrupted creations. */
	at(pool, sizeof(pool), "open/a/b");
	err_clear(&e);
	st = storage_open("qcow2", pool, &e);
	if (!check(st != NULL, "open: creates a missing pool directory (mkdir -p)"))
		diag("%s", e.msg);
	check(mode_of(pool) == 0700, "open: pool directory is mode 0700");
	if (st) {
		check_str(storage_name(st), "qcow2", "open: storage_name");
		check_str(storage_location(st), pool, "open: storage_location");
	}
	storage_close(st);
	xsnprintf(p, sizeof(p), "%s/m-9.qcow2.part", pool);
	write_file(p, "half", 4);
	err_clear(&e);
	st = storage_open("qcow2", pool, &e);
	check(st != NULL && !exists(p), "open: removes *.part leftovers");
	if (st) {
		struct storage_pool_info pi;
		err_clear(&e);
		check(storage_pool_info(st, &pi, &e) == 0 && pi.total_bytes > 0 &&
		      pi.used_bytes <= pi.total_bytes,
		      "pool_info: total > 0 and used <= total");
	}
	storage_close(st);
	storage_close(NULL);
	check(true, "close: NULL is accepted");
}

/* ---- dry run --------------------------------------------------------------- */

/* Expect -1 with E set, nothing recorded in LOG. */
static void refused_dry(int rc, const struct err *e, struct buf *log,
			int status, const char *code, const char *what)
{
	bool ok = rc == -1 && err_isset(e) && log->len == 0 &&
		  (!status || e->status == status) && (!code || strcmp(e->code, code) == 0);

	if (!check(ok, "%s", what))
		diag("rc %d status %d code '%s' msg '%s' log [%s]", rc, e->status,
		     e->code, e->msg, buf_str(log));
	buf_reset(log);
}

static void test_dry(void)
{
	struct buf log = BUF_INIT, want = BUF_INIT;
	struct storage *st;
	struct err e;
	char pool[256], src[256], p[512], base[512];
	const uint64_t base_size = GIB;
	int rc;

	at(pool, sizeof(pool), "drypool");
	at(src, sizeof(src), "src dir/disk.raw");   /* a space: quoted in the log */
	err_clear(&e);
	st = storage_open("qcow2", pool, &e);
	if (!check(st != NULL, "dry: open a pool")) {
		diag("%s", e.msg);
		return;
	}
	snprintf(base, sizeof(base), "%s/base-x.qcow2", pool);

	/* qemu-img does not run: stand in for its output with a fabricated
	 * qcow2 header, which the backend then publishes as the base. */
	snprintf(p, sizeof(p), "%s/base-x.qcow2.part", pool);
	write_fake_qcow2(p, base_size);
	err_clear(&e);
	run_set_dry(&log);
	rc = storage_base_import(st, "base-x", src, "raw", &e);
	run_set_dry(NULL);
	if (!check(rc == 0, "dry import: succeeds"))
		diag("%s", e.msg);
	buf_printf(&want, "qemu-img convert -q -f raw -O qcow2 '%s' %s/base-x.qcow2.part\n",
		   src, pool);
	check_str(buf_str(&log), buf_str(&want),
		  "dry import: qemu-img convert -q -f raw -O qcow2 SRC POOL/base-x.qcow2.part");
	check(exists(base) && !exists(p) && mode_of(base) == 0440,
	      "dry import: the .part is published as base-x.qcow2, mode 0440");
	buf_reset(&log);
	buf_reset(&want);

	err_clear(&e);
	run_set_dry(&log);
	rc = storage_base_import(st, "base-q", src, "qcow2", &e);
	run_set_dry(NULL);
	buf_printf(&want, "qemu-img convert -q -f qcow2 -O qcow2 '%s' %s/base-q.qcow2.part\n",
		   src, pool);
	check_str(buf_str(&log), buf_str(&want), "dry import: a qcow2 source is -f qcow2");
	check(rc == -1 && !exists(p), "dry import: nothing produced: fails, no .part left");
	buf_reset(&log);
	buf_reset(&want);

	err_clear(&e);
	run_set_dry(&log);
	rc = storage_base_import(st, "base-v", src, "vmdk", &e);
	refused_dry(rc, &e, &log, 400, "invalid_format",
		    "dry import: format vmdk refused (400 invalid_format), no command");
	err_clear(&e);
	rc = storage_base_import(st, "base-x", src, "raw", &e);
	refused_dry(rc, &e, &log, 409, "exists",
		    "dry import: existing base: 409 exists, no command");

	/* Overlays. */
	snprintf(p, sizeof(p), "%s/m-1.qcow2.part", pool);
	write_fake_qcow2(p, 4 * GIB);
	err_clear(&e);
	rc = storage_vol_create(st, "m-1", "base-x", 4 * GIB, &e);
	buf_printf(&want, "qemu-img create -q -f qcow2 -u -F qcow2 -b %s %s/m-1.qcow2.part %llu\n",
		   base, pool, 4 * GIB);
	if (!check(rc == 0, "dry create: succeeds"))
		diag("%s", e.msg);
	check_str(buf_str(&log), buf_str(&want),
		  "dry create: qemu-img create -q -f qcow2 -u -F qcow2 -b BASE POOL/m-1.qcow2.part BYTES");
	snprintf(p, sizeof(p), "%s/m-1.qcow2", pool);
	check(exists(p) && mode_of(p) == 0600, "dry create: published as m-1.qcow2, mode 0600");
	buf_reset(&log);
	buf_reset(&want);

	err_clear(&e);
	rc = storage_vol_create(st, "m-2", "base-x", base_size, &e);
	buf_printf(&want, "qemu-img create -q -f qcow2 -u -F qcow2 -b %s %s/m-2.qcow2.part %llu\n",
		   base, pool, (unsigned long long)base_size);
	check_str(buf_str(&log), buf_str(&want),
		  "dry create: exactly the base's virtual size is accepted");
	buf_reset(&log);
	buf_reset(&want);

	err_clear(&e);
	rc = storage_vol_create(st, "m-3", "base-x", base_size - 1, &e);
	refused_dry(rc, &e, &log, 400, "invalid_disk",
		    "dry create: one byte under the base's size: 400 invalid_disk, no command");
	err_clear(&e);
	rc = storage_vol_create(st, "m-3", "base-x", 512, &e);
	refused_dry(rc, &e, &log, 400, "invalid_disk",
		    "dry create: 512 bytes: 400 invalid_disk, no command");
	check_has(e.msg, "1G", "dry create: the message names the image's size");
	err_clear(&e);
	rc = storage_vol_create(st, "m-1", "base-x", 4 * GIB, &e);
	refused_dry(rc, &e, &log, 409, "exists", "dry create: existing volume: 409 exists");
	err_clear(&e);
	rc = storage_vol_create(st, "m-3", "base-nope", 4 * GIB, &e);
	refused_dry(rc, &e, &log, 404, "not_found", "dry create: missing base: 404 not_found");
	snprintf(p, sizeof(p), "%s/base-junk.qcow2", pool);
	write_file(p, "this is not a qcow2 file, only junk text", 40);
	err_clear(&e);
	rc = storage_vol_create(st, "m-3", "base-junk", 4 * GIB, &e);
	refused_dry(rc, &e, &log, 0, NULL, "dry create: base that is not qcow2: refused");
	check_has(e.msg, "not a qcow2 file", "dry create: ... saying it is not qcow2");

	/* Names that could escape the pool or clash. */
	{
		static const char *const bad[] = { "a/b", "..", "../x", "Base-X", "", "-m",
						   "m.qcow2", "m_1", NULL };
		struct storage_vol_info vi;
		for (size_t i = 0; bad[i]; i++) {
			bool ok = true;
			err_clear(&e);
			ok &= storage_base_import(st, bad[i], src, "raw", &e) == -1 && err_isset(&e);
			err_clear(&e);
			ok &= storage_vol_create(st, bad[i], "base-x", 4 * GIB, &e) == -1 && err_isset(&e);
			err_clear(&e);
			ok &= storage_vol_create(st, "m-5", bad[i], 4 * GIB, &e) == -1 && err_isset(&e);
			err_clear(&e);
			ok &= storage_vol_remove(st, bad[i], &e) == -1 && err_isset(&e);
			err_clear(&e);
			ok &= storage_vol_info(st, bad[i], &vi, &e) == -1 && err_isset(&e);
			ok &= !storage_vol_exists(st, bad[i]);
			if (!check(ok && log.len == 0,
				   "dry names: '%s' refused by import, create (vol and "
				   "base), remove, info, exists; no command", bad[i]))
				diag("log [%s]", buf_str(&log));
			buf_reset(&log);
		}
	}
	run_set_dry(NULL);
	storage_close(st);
	buf_free(&log);
	buf_free(&want);
}

/* ---- for real -------------------------------------------------------------- */

static void test_real(void)
{
	char tool[4096], pool[256], src[256], p[512], list[1024];
	struct storage_vol_info vi;
	struct storage *st;
	struct err e;
	int rc;

	if (!tool_find("qemu-img", tool, sizeof(tool))) {
		skip("real: qcow2 volumes", "qemu-img not installed");
		return;
	}
	at(pool, sizeof(pool), "pool");
	at(src, sizeof(src), "tiny.raw");
	{
		/* 1 MiB of raw disk with a recognisable first sector. */
		char *data = calloc(1, MIB);
		if (data) {
			memcpy(data, "BERTH-BASE", 10);
			write_file(src, data, MIB);
			free(data);
		}
	}
	err_clear(&e);
	st = storage_open("qcow2", pool, &e);
	if (!check(st != NULL, "real: open a pool")) {
		diag("%s", e.msg);
		return;
	}

	err_clear(&e);
	rc = storage_base_import(st, "base-x", src, "raw", &e);
	if (!check(rc == 0, "real import: 1 MiB raw file becomes base-x"))
		diag("%s", e.msg);
	err_clear(&e);
	rc = storage_vol_info(st, "base-x", &vi, &e);
	snprintf(p, sizeof(p), "%s/base-x.qcow2", pool);
	if (!check(rc == 0 && strcmp(vi.path, p) == 0 && vi.format &&
		   strcmp(vi.format, "qcow2") == 0 && !vi.block &&
		   vi.virtual_bytes == MIB,
		   "real import: info: path, qcow2, file, 1 MiB virtual"))
		diag("rc %d path '%s' format '%s' virtual %llu: %s", rc, vi.path,
		     vi.format ? vi.format : "", (unsigned long long)vi.virtual_bytes, e.msg);
	check(mode_of(p) == 0440, "real import: base is read-only (0440)");
	check(storage_vol_exists(st, "base-x"), "real import: exists");

	err_clear(&e);
	rc = storage_vol_create(st, "m-1", "base-x", GIB, &e);
	if (!check(rc == 0, "real create: 1 GiB overlay"))
		diag("%s", e.msg);
	err_clear(&e);
	rc = storage_vol_create(st, "m-2", "base-x", 100 * GIB, &e);
	if (!check(rc == 0, "real create: 100 GiB overlay"))
		diag("%s", e.msg);

	err_clear(&e);
	rc = storage_vol_info(st, "m-1", &vi, &e);
	check_u64(rc == 0 ? vi.virtual_bytes : 0, GIB, "real info: m-1 is exactly 1 GiB");
	if (!check(rc == 0 && vi.allocated_bytes > 0 && vi.allocated_bytes < MIB,
		   "real info: m-1 allocates well under 1 MiB"))
		diag("allocated %llu", (unsigned long long)vi.allocated_bytes);
	err_clear(&e);
	rc = storage_vol_info(st, "m-2", &vi, &e);
	check_u64(rc == 0 ? vi.virtual_bytes : 0, 100 * GIB,
		  "real info: m-2 is exactly 100 GiB");
	if (!check(rc == 0 && vi.allocated_bytes > 0 && vi.allocated_bytes < MIB,
		   "real info: m-2 allocates well under 1 MiB"))
		diag("allocated %llu", (unsigned long long)vi.allocated_bytes);

	/* A size qemu-img cannot make exactly (not a multiple of 512): the
	 * volume must be BYTES, or be refused; not silently rounded up. */
	err_clear(&e);
	rc = storage_vol_create(st, "m-u", "base-x", GIB + 1, &e);
	if (rc == 0) {
		err_clear(&e);
		rc = storage_vol_info(st, "m-u", &vi, &e);
		if (!check(rc == 0 && vi.virtual_bytes == GIB + 1,
			   "real create: 1 GiB + 1 byte is refused or exactly that size"))
			diag("asked %llu bytes, got a volume of %llu", GIB + 1,
			     (unsigned long long)vi.virtual_bytes);
	} else {
		check(e.status == 400, "real create: 1 GiB + 1 byte is refused or exactly "
		      "that size");
	}
	storage_vol_remove(st, "m-u", NULL);

	/* qemu-img agrees: m-1 is an overlay on base-x, in qcow2. */
	{
		char *out = NULL;
		char want[600];
		char m1[512];
		snprintf(m1, sizeof(m1), "%s/m-1.qcow2", pool);
		char *argv[] = { tool, "info", "--output=json", m1, NULL };
		rc = tool_run(argv, NULL, &out);
		snprintf(want, sizeof(want), "\"backing-filename\": \"%s/base-x.qcow2\"", pool);
		check(rc == 0 && out && strstr(out, want) &&
		      strstr(out, "\"backing-filename-format\": \"qcow2\"") &&
		      strstr(out, "\"virtual-size\": 1073741824"),
		      "real create: qemu-img info shows base-x as the qcow2 backing file");
		if (rc != 0 || !out || !strstr(out, want))
			diag("qemu-img info: %s", out ? out : "");
		free(out);
	}

	/* Listing: volumes only, not leftovers or other files. */
	snprintf(p, sizeof(p), "%s/m-7.qcow2.part", pool);
	write_file(p, "half", 4);
	snprintf(p, sizeof(p), "%s/notes.txt", pool);
	write_file(p, "hello", 5);
	err_clear(&e);
	rc = list_joined(st, list, sizeof(list), &e);
	check(rc == 0, "real list: succeeds");
	check_str(list, "base-x,m-1,m-2", "real list: the three volumes");
	snprintf(p, sizeof(p), "%s/m-7.qcow2.part", pool);
	unlink(p);

	err_clear(&e);
	rc = storage_vol_create(st, "m-1", "base-x", GIB, &e);
	check(rc == -1 && e.status == 409 && strcmp(e.code, "exists") == 0,
	      "real create: existing volume: 409 exists");
	err_clear(&e);
	rc = storage_vol_create(st, "m-3", "base-x", MIB / 2, &e);
	snprintf(p, sizeof(p), "%s/m-3.qcow2", pool);
	check(rc == -1 && e.status == 400 && strcmp(e.code, "invalid_disk") == 0 &&
	      !exists(p), "real create: smaller than the base: 400 invalid_disk, nothing made");

	err_clear(&e);
	rc = storage_vol_remove(st, "m-2", &e);
	check(rc == 0 && !storage_vol_exists(st, "m-2"), "real remove: m-2 is gone");
	err_clear(&e);
	rc = storage_vol_remove(st, "m-2", &e);
	check(rc == 0 && !err_isset(&e), "real remove: removing it again succeeds");
	err_clear(&e);
	rc = storage_vol_info(st, "m-2", &vi, &e);
	check(rc == -1 && e.status == 404 && strcmp(e.code, "not_found") == 0,
	      "real info: removed volume: 404 not_found");
	err_clear(&e);
	rc = list_joined(st, list, sizeof(list), &e);
	check_str(list, "base-x,m-1", "real list: two volumes left");

	/* A failing qemu-img: the error carries its story, nothing is left. */
	at(p, sizeof(p), "no-such-file.raw");
	err_clear(&e);
	rc = storage_base_import(st, "base-y", p, "raw", &e);
	if (!check(rc == -1 && strstr(e.msg, "qemu-img") && strstr(e.msg, "no-such-file.raw"),
		   "real import: missing source: error names qemu-img and the file"))
		diag("rc %d: %s", rc, e.msg);
	snprintf(p, sizeof(p), "%s/base-y.qcow2.part", pool);
	check(!storage_vol_exists(st, "base-y") && !exists(p),
	      "real import: failed import leaves no volume and no .part");

	/* Reopening the pool keeps its volumes. */
	storage_close(st);
	err_clear(&e);
	st = storage_open("qcow2", pool, &e);
	list[0] = '\0';
	if (st)
		list_joined(st, list, sizeof(list), &e);
	check_str(list, "base-x,m-1", "real reopen: volumes persist");
	storage_close(st);
}

/* A base streamed in: base_create makes a sparse raw VOL.raw.part, volio
 * writes it directly (O_DIRECT for aligned blocks, the page cache for the
 * rest), base_seal publishes it read-only; an overlay names it with
 * backing format raw and reads its bytes; a qcow2 base of the same pool
 * (one stored before raw bases) keeps working beside it. */
static void test_raw_base(void)
{
	char tool[4096], pool[4096], p[4096], src[4096], parent[256], list[1024];
	struct storage_vol_info vi;
	struct storage *st;
	struct volio *v = NULL;
	struct err e;
	unsigned char *blk = NULL, *odd = NULL, got[256];
	int rc;

	if (!tool_find("qemu-img", tool, sizeof(tool)) || !tool_find("qemu-nbd", p, sizeof(p))) {
		skip("raw base", "qemu-img or qemu-nbd not installed");
		return;
	}
	at(pool, sizeof(pool), "rawpool");
	err_clear(&e);
	st = storage_open("qcow2", pool, &e);
	if (!check(st != NULL, "raw base: open a pool")) {
		diag("%s", e.msg);
		return;
	}
	err_clear(&e);
	rc = storage_base_create(st, "base-r", 4 * MIB, &vi, &e);
	xsnprintf(p, sizeof(p), "%s/base-r.raw.part", pool);
	if (!check(rc == 0 && strcmp(vi.path, p) == 0 && vi.format &&
		   strcmp(vi.format, "raw") == 0 && vi.virtual_bytes == 4 * MIB,
		   "raw base: base_create makes POOL/base-r.raw.part, raw, 4 MiB"))
		diag("rc %d path '%s' format '%s': %s", rc, vi.path, vi.format ? vi.format : "",
		     e.msg);
	check(!storage_vol_exists(st, "base-r"), "raw base: not a volume before base_seal");

	/* An aligned 64 KiB block at 0, an unaligned write from unaligned
	 * memory at 1 MiB + 7, and one past the end. */
	if (posix_memalign((void **)&blk, 4096, 64 << 10) != 0 || !(odd = malloc(300)))
		abort();
	memset(blk, 0xab, 64 << 10);
	memcpy(blk, "BERTH-RAW", 9);
	for (int i = 0; i < 300; i++)
		odd[i] = (unsigned char)i;
	err_clear(&e);
	v = volio_open(vi.path, "raw", true, &e);
	rc = v ? 0 : -1;
	if (!rc)
		rc = volio_write(v, 0, blk, 64 << 10, &e);
	if (!rc)
		rc = volio_write(v, MIB + 7, odd + 1, 299, &e);
	if (!rc)
		rc = volio_flush(v, &e);
	if (!check(rc == 0, "raw base: volio writes an aligned and an unaligned block, flushes"))
		diag("%s", e.msg);
	err_clear(&e);
	rc = v ? volio_write(v, 4 * MIB - 512, blk, 4096, &e) : -1;
	check(rc == -1 && e.status == 400, "raw base: a write past the end is refused");
	volio_close(v);

	err_clear(&e);
	rc = storage_base_seal(st, "base-r", &e);
	xsnprintf(p, sizeof(p), "%s/base-r.raw", pool);
	if (!check(rc == 0 && exists(p) && mode_of(p) == 0440,
		   "raw base: base_seal publishes base-r.raw, mode 0440"))
		diag("%s", e.msg);
	err_clear(&e);
	rc = storage_vol_info(st, "base-r", &vi, &e);
	if (!check(rc == 0 && strcmp(vi.path, p) == 0 && strcmp(vi.format, "raw") == 0 &&
		   vi.virtual_bytes == 4 * MIB && vi.allocated_bytes < 2 * MIB,
		   "raw base: info: raw, 4 MiB virtual, sparse (holes not allocated)"))
		diag("rc %d format %s virtual %llu allocated %llu: %s", rc, vi.format,
		     (unsigned long long)vi.virtual_bytes, (unsigned long long)vi.allocated_bytes,
		     e.msg);
	err_clear(&e);
	rc = storage_base_create(st, "base-r", MIB, &vi, &e);
	check(rc == -1 && e.status == 409, "raw base: base_create of an existing base: 409");

	/* A qcow2 base beside it, as stored before raw bases. */
	at(src, sizeof(src), "q.raw");
	write_file(src, "BERTH-QCOW2", 11);
	truncate(src, (off_t)MIB);
	err_clear(&e);
	rc = storage_base_import(st, "base-q", src, "raw", &e);
	check(rc == 0, "raw base: a qcow2 base in the same pool");
	err_clear(&e);
	rc = storage_base_create(st, "base-q", MIB, &vi, &e);
	xsnprintf(p, sizeof(p), "%s/base-q.raw.part", pool);
	check(rc == -1 && e.status == 409 && !exists(p),
	      "raw base: base_create of a name a qcow2 base holds: 409, nothing made");

	err_clear(&e);
	rc = storage_vol_create(st, "m-r", "base-r", GIB, &e);
	if (!check(rc == 0, "raw base: a 1 GiB overlay on it"))
		diag("%s", e.msg);
	err_clear(&e);
	rc = storage_vol_create(st, "m-q", "base-q", GIB, &e);
	check(rc == 0, "raw base: an overlay on the qcow2 base");
	{
		char *out = NULL, want[4200], m[4200];
		snprintf(m, sizeof(m), "%s/m-r.qcow2", pool);
		char *argv[] = { tool, "info", "--output=json", m, NULL };
		rc = tool_run(argv, NULL, &out);
		snprintf(want, sizeof(want), "\"backing-filename\": \"%s/base-r.raw\"", pool);
		if (!check(rc == 0 && out && strstr(out, want) &&
			   strstr(out, "\"backing-filename-format\": \"raw\""),
			   "raw base: qemu-img info: the overlay's backing file is base-r.raw, raw"))
			diag("qemu-img info: %s", out ? out : "");
		free(out);
	}
	err_clear(&e);
	rc = storage_vol_parent(st, "m-r", parent, sizeof(parent), &e);
	check_str(rc == 0 ? parent : "(failed)", "base-r", "raw base: m-r's parent is base-r");
	err_clear(&e);
	rc = storage_vol_parent(st, "base-r", parent, sizeof(parent), &e);
	check_str(rc == 0 ? parent : "(failed)", "", "raw base: base-r has no parent");
	err_clear(&e);
	check(storage_vol_dependents(st, "base-r", &e) == 1, "raw base: base-r has one dependent");
	err_clear(&e);
	rc = list_joined(st, list, sizeof(list), &e);
	check_str(list, "base-q,base-r,m-q,m-r", "raw base: list has both bases and overlays");

	/* The overlay reads the base's bytes (qemu-nbd, backing format raw). */
	err_clear(&e);
	rc = storage_vol_info(st, "m-r", &vi, &e);
	v = rc == 0 ? volio_open(vi.path, vi.format, false, &e) : NULL;
	bool same = false;
	if (v && volio_read(v, 0, got, 16, &e) == 0 && memcmp(got, blk, 16) == 0 &&
	    volio_read(v, MIB + 7, got, 256, &e) == 0 && memcmp(got, odd + 1, 256) == 0 &&
	    volio_read(v, 2 * MIB, got, 256, &e) == 0) {
		same = true;
		for (int i = 0; i < 256; i++)
			same = same && got[i] == 0;
	}
	if (!check(same, "raw base: the overlay reads the base's data and zeros in its holes"))
		diag("%s", e.msg);
	volio_close(v);

	err_clear(&e);
	rc = storage_vol_remove(st, "m-r", &e) | storage_vol_remove(st, "m-q", &e) |
	     storage_vol_remove(st, "base-q", &e) | storage_vol_remove(st, "base-r", &e);
	xsnprintf(p, sizeof(p), "%s/base-r.raw", pool);
	check(rc == 0 && !storage_vol_exists(st, "base-r") && !exists(p),
	      "raw base: removed, file gone");
	free(blk);
	free(odd);
	storage_close(st);
}

/* A relative pool location: hostd does not make storage_location absolute,
 * so the backend must either refuse it or work with it (libvirt needs an
 * absolute disk path, and qemu resolves a relative backing file against
 * the overlay's directory). */
static void test_relative(void)
{
	char tool[4096], cwd[4096];
	struct storage_vol_info vi;
	struct storage *st;
	struct err e;
	int rc;

	if (!tool_find("qemu-img", tool, sizeof(tool))) {
		skip("relative pool", "qemu-img not installed");
		return;
	}
	if (!getcwd(cwd, sizeof(cwd)) || chdir(root) < 0) {
		check(false, "relative pool: chdir to the test directory");
		return;
	}
	err_clear(&e);
	st = storage_open("qcow2", "relpool", &e);
	if (!st) {
		check(err_isset(&e), "relative pool: refused at open");
		goto out;
	}
	err_clear(&e);
	rc = storage_base_import(st, "base-r", "tiny.raw", "raw", &e);
	if (rc == 0) {
		err_clear(&e);
		rc = storage_vol_create(st, "m-r", "base-r", GIB, &e);
	}
	if (rc == 0) {
		err_clear(&e);
		rc = storage_vol_info(st, "m-r", &vi, &e);
	}
	if (!check(rc == 0 && vi.path[0] == '/',
		   "relative pool: refused at open, or base, overlay and an absolute "
		   "volume path all work"))
		diag("rc %d, path '%s': %s", rc, rc == 0 ? vi.path : "", e.msg);
	storage_close(st);
out:
	if (chdir(cwd) < 0)
		diag("cannot return to %s", cwd);
}

/* ---- owners: bases, QEMU's volume, freezing ------------------------------ */

static bool owned(const char *path, unsigned uid, unsigned gid, unsigned mode)
{
	struct stat st;

	return lstat(path, &st) == 0 && st.st_uid == uid && st.st_gid == gid &&
	       (unsigned)(st.st_mode & 07777) == mode;
}

static void diag_owner(const char *path)
{
	struct stat st;

	if (lstat(path, &st) == 0)
		diag("%s: %u:%u %04o", path, (unsigned)st.st_uid, (unsigned)st.st_gid,
		     (unsigned)(st.st_mode & 07777));
	else
		diag("%s: missing", path);
}

/* Pool opened with qemu_gid G: its directory root:G 0710, bases root:G
 * 0440; a new volume root's 0600; vol_own gives it to a QEMU and freezes
 * every layer under it. */
static void test_owners(void)
{
	const unsigned G = 4242, U = 2013265921, V = 2013265922;
	char tool[4096], pool[256], src[256], base[512], m1[512], m2[512], f1[512];
	struct storage_opts o = { .qemu_gid = G };
	struct storage *st;
	struct err e;
	int rc;

	if (geteuid() != 0) {
		skip("owners", "not root (chown)");
		return;
	}
	if (!tool_find("qemu-img", tool, sizeof(tool))) {
		skip("owners", "qemu-img not installed");
		return;
	}
	at(pool, sizeof(pool), "owned");
	at(src, sizeof(src), "owned.raw");
	{
		char *data = calloc(1, MIB);
		if (data) {
			write_file(src, data, MIB);
			free(data);
		}
	}
	err_clear(&e);
	st = storage_open_opts("qcow2", pool, &o, &e);
	if (!check(st != NULL, "owners: open a pool with a QEMU group")) {
		diag("%s", e.msg);
		return;
	}
	if (!check(owned(pool, 0, G, 0710), "owners: pool directory root:G 0710 (traverse only)"))
		diag_owner(pool);
	snprintf(base, sizeof(base), "%s/base-o.qcow2", pool);
	snprintf(m1, sizeof(m1), "%s/m-1.qcow2", pool);
	snprintf(m2, sizeof(m2), "%s/m-2.qcow2", pool);
	snprintf(f1, sizeof(f1), "%s/m-f.qcow2", pool);
	err_clear(&e);
	rc = storage_base_import(st, "base-o", src, "raw", &e);
	if (!check(rc == 0 && owned(base, 0, G, 0440), "owners: a base is root:G 0440")) {
		diag("%s", e.msg);
		diag_owner(base);
	}
	err_clear(&e);
	rc = storage_vol_create(st, "m-1", "base-o", GIB, &e);
	if (!check(rc == 0 && owned(m1, 0, 0, 0600),
		   "owners: an overlay on a base is root's, 0600, until given"))
		diag_owner(m1);
	err_clear(&e);
	rc = storage_vol_own(st, "m-1", U, G, &e);
	if (!check(rc == 0 && owned(m1, U, G, 0600) && owned(base, 0, G, 0440),
		   "owners: vol_own: U:G 0600, the base stays root:G 0440")) {
		diag("%s", e.msg);
		diag_owner(m1);
	}
	/* A checkpoint: m-2 on m-1, which U writes; given to U (before a live
	 * snapshot moves U's QEMU there), m-1 is frozen. */
	err_clear(&e);
	rc = storage_vol_create(st, "m-2", "m-1", GIB, &e);
	if (!check(rc == 0 && owned(m2, 0, 0, 0600) && owned(m1, U, G, 0600),
		   "owners: an overlay on U's volume is root's; U's stays U's until then"))
		diag_owner(m2);
	err_clear(&e);
	rc = storage_vol_own(st, "m-2", U, G, &e);
	if (!check(rc == 0 && owned(m2, U, G, 0600) && owned(m1, 0, G, 0440),
		   "owners: vol_own of the new top: U:G 0600, the old one frozen root:G 0440")) {
		diag("%s", e.msg);
		diag_owner(m2);
		diag_owner(m1);
	}
	/* A fork of that checkpoint: another QEMU's. */
	err_clear(&e);
	rc = storage_vol_create(st, "m-f", "m-1", GIB, &e);
	if (!check(rc == 0 && owned(f1, 0, 0, 0600) && owned(m1, 0, G, 0440),
		   "owners: an overlay on a frozen volume is root's, the frozen one stays"))
		diag_owner(f1);
	err_clear(&e);
	rc = storage_vol_own(st, "m-f", V, G, &e);
	check(rc == 0 && owned(f1, V, G, 0600) && owned(m2, U, G, 0600),
	      "owners: vol_own of the fork: V's, the source's volume stays U's");
	/* A layer a crash (or a berth that ran QEMU as root) left writable:
	 * vol_own freezes the whole chain under the volume. */
	chown(m1, U, 0);
	chmod(m1, 0600);
	chmod(base, 0644);
	err_clear(&e);
	rc = storage_vol_own(st, "m-2", U, G, &e);
	if (!check(rc == 0 && owned(m1, 0, G, 0440) && owned(base, 0, G, 0440),
		   "owners: vol_own freezes every layer under the volume")) {
		diag("%s", e.msg);
		diag_owner(m1);
		diag_owner(base);
	}
	/* Nothing to change: nothing changes (and it is fast). */
	{
		int64_t t0 = mono_us();
		for (int i = 0; i < 100; i++)
			storage_vol_own(st, "m-2", U, G, NULL);
		diag("vol_own of a 3-layer chain, nothing to change: %lld us",
		     (long long)((mono_us() - t0) / 100));
	}
	/* A symbolic link is refused, never followed. */
	{
		char link[512];
		snprintf(link, sizeof(link), "%s/m-l.qcow2", pool);
		symlink(m1, link);
		err_clear(&e);
		rc = storage_vol_own(st, "m-l", U, G, &e);
		check(rc == -1 && owned(m1, 0, G, 0440),
		      "owners: vol_own of a symbolic link: refused, its target untouched");
		unlink(link);
	}
	storage_close(st);
	/* Opened without a group: the directory is root's alone again. */
	err_clear(&e);
	st = storage_open("qcow2", pool, &e);
	check(st && owned(pool, 0, 0, 0700), "owners: pool without a QEMU group: root 0700");
	storage_close(st);
}

int main(void)
{
	int rc;

	log_threshold = LOG_WARN;
	if (!tmpdir_make(root, sizeof(root))) {
		check(false, "make a temporary directory under /tmp");
		return tap_done("test_storage");
	}
	test_open();
	test_dry();
	test_real();
	test_raw_base();
	test_relative();
	test_owners();
	rc = tap_done("test_storage");
	if (tmpdir_remove(root) < 0)
		fprintf(stderr, "test_storage: cannot remove %s\n", root);
	return rc;
}
