/* One backend-neutral suite for the storage backends, through the
 * storage_*() wrappers, checking data with qemu-io:
 *   test_storage_suite                  qcow2 in a temporary directory
 *   BERTH_SUITE_BACKEND=lvm-thin test_storage_suite
 *                                       lvm-thin on $BERTH_LVM_DEVICE (a blank
 *                                       disk: tests/guest/lvm-vm.sh gives one)
 * A checkpoint is made the way hostd makes it: a thin snapshot where the
 * backend has them, else layering (the old volume frozen, a new one on it). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/run.h"
#include "common/util.h"
#include "storage/storage.h"
#include "tests/unit/tap.h"
#include "common/banned.h"

#define MIB (1024ULL * 1024)

static struct storage *st;
static const char *backend;

static const char *vpath(const char *vol)
{
	static struct storage_vol_info vi[4];
	static int n;
	struct storage_vol_info *v = &vi[n++ % 4];

	if (storage_vol_info(st, vol, v, NULL) < 0)
		return "/nonexistent";
	return v->path;
}

static const char *vfmt(const char *vol)
{
	struct storage_vol_info vi;

	return storage_vol_info(st, vol, &vi, NULL) == 0 ? vi.format : "raw";
}

/* qemu-io write/read of byte PAT over 1 MiB at OFF MiB of VOL. */
static bool io(const char *vol, const char *op, int pat, int off)
{
	char cmd[128];
	struct err e = { 0 };

	snprintf(cmd, sizeof(cmd), "%s -P 0x%02x %dM 1M", op, pat, off);
	char *const argv[] = { "qemu-io", "-f", (char *)vfmt(vol), "-c", cmd,
			       (char *)vpath(vol), NULL };
	struct buf out = BUF_INIT;
	struct run_opts o = { .out = &out };
	bool ok = run_argv(argv, &o, &e) == 0 && !strstr(buf_str(&out), "Pattern verification failed");
	buf_free(&out);
	return ok;
}

static int nvols;
static void count(const char *vol, void *data)
{
	(void)vol;
	(void)data;
	nvols++;
}

static int volumes(void)
{
	nvols = 0;
	storage_vol_list(st, count, NULL, NULL);
	return nvols;
}

/* Freeze VOL as hostd does; FROZEN gets the frozen volume, *WRITABLE the
 * one to go on writing to. */
static bool freeze(const char *vol, const char *frozen_name, char *frozen, char *writable,
		   uint64_t size)
{
	struct err e = { 0 };

	if (storage_can_snapshot(st)) {
		snprintf(frozen, 64, "%s", frozen_name);
		snprintf(writable, 64, "%s", vol);
		return storage_snapshot(st, vol, frozen_name, &e) == 0;
	}
	snprintf(frozen, 64, "%s", vol);
	snprintf(writable, 64, "%s", frozen_name);
	return storage_vol_create(st, frozen_name, vol, size, &e) == 0;
}

int main(void)
{
	char dir[256] = "", raw[300], location[300];
	struct err e = { 0 };
	struct storage_vol_info vi;
	char f1[64], w1[64], f2[64], w2[64];
	int before;

	backend = getenv("BERTH_SUITE_BACKEND");
	if (!backend)
		backend = "qcow2";
	if (!tmpdir_make(dir, sizeof(dir)))
		return 1;
	if (!strcmp(backend, "lvm-thin")) {
		const char *dev = getenv("BERTH_LVM_DEVICE");
		char *const argv[] = { "sh", "deploy/lvm-thin-setup.sh", (char *)(dev ? dev : ""),
				       "suite", "pool", NULL };
		if (!check(dev && run_argv(argv, NULL, &e) == 0, "lvm: deploy/lvm-thin-setup.sh makes VG and pool"))
			diag("%s", e.msg);
		snprintf(location, sizeof(location), "suite/pool");
	} else {
		snprintf(location, sizeof(location), "%s/pool", dir);
	}
	st = storage_open(backend, location, &e);
	if (!check(st != NULL, "%s: open %s", backend, location)) {
		diag("%s", e.msg);
		tmpdir_remove(dir);
		return tap_done("test_storage_suite");
	}
	check(storage_claim(st, "suite0001", &e) == 0, "%s: claim the pool", backend);

	/* An image: 64 MiB raw, pattern 0x11 in its first MiB. */
	snprintf(raw, sizeof(raw), "%s/image.raw", dir);
	{
		char *const mk[] = { "qemu-img", "create", "-q", "-f", "raw", raw, "64M", NULL };
		char *const wr[] = { "qemu-io", "-f", "raw", "-c", "write -P 0x11 0 1M", raw, NULL };
		check(run_argv(mk, NULL, NULL) == 0 && run_argv(wr, NULL, NULL) == 0,
		      "make a 64 MiB raw image with a pattern");
	}
	err_clear(&e);
	check(storage_base_import(st, "base-img", raw, "raw", &e) == 0, "%s: import the image", backend);
	check(storage_vol_info(st, "base-img", &vi, &e) == 0 && vi.virtual_bytes == 64 * MIB,
	      "%s: the base is 64 MiB", backend);
	if (!check(vi.allocated_bytes < 8 * MIB, "%s: and allocates about its 1 MiB of data, not 64 MiB",
		   backend))
		diag("allocated %llu bytes", (unsigned long long)vi.allocated_bytes);

	/* A machine disk of 128 MiB on it. */
	err_clear(&e);
	check(storage_vol_create(st, "m-1", "base-img", 128 * MIB, &e) == 0, "%s: create m-1 (128 MiB)", backend);
	check(storage_vol_info(st, "m-1", &vi, &e) == 0 && vi.virtual_bytes == 128 * MIB,
	      "%s: m-1 is 128 MiB", backend);
	check(io("m-1", "read", 0x11, 0), "%s: m-1 has the image's data", backend);

	/* write, checkpoint, write, restore. */
	check(io("m-1", "write", 0x22, 1), "%s: write A into m-1", backend);
	check(freeze("m-1", "m-1-c1", f1, w1, 128 * MIB), "%s: checkpoint c1", backend);
	check(io(w1, "write", 0x33, 1), "%s: write B after c1", backend);
	check(freeze(w1, "m-1-c2", f2, w2, 128 * MIB), "%s: checkpoint c2", backend);
	check(io(w2, "write", 0x44, 1), "%s: write C after c2", backend);
	err_clear(&e);
	check(storage_vol_create(st, "m-1-r1", f1, 128 * MIB, &e) == 0, "%s: restore c1 (new volume on it)", backend);
	check(io("m-1-r1", "read", 0x22, 1), "%s: c1's data is back", backend);
	err_clear(&e);
	check(storage_vol_create(st, "m-1-r2", f2, 128 * MIB, &e) == 0, "%s: restore c2 too", backend);
	check(io("m-1-r2", "read", 0x33, 1), "%s: c2 stays valid and has its data", backend);
	check(io(w2, "read", 0x44, 1), "%s: the live volume still has C", backend);

	/* Fork isolation both ways. */
	err_clear(&e);
	check(storage_vol_create(st, "f-1", f1, 128 * MIB, &e) == 0, "%s: fork f-1 from c1", backend);
	check(io("f-1", "write", 0x55, 2) && io(w2, "write", 0x66, 2), "%s: both write at 2 MiB", backend);
	check(io("f-1", "read", 0x55, 2), "%s: the fork sees its own write", backend);
	check(io(w2, "read", 0x66, 2), "%s: the origin sees its own write", backend);
	check(io("f-1", "read", 0x22, 1), "%s: the fork has c1's data", backend);
	{
		uint64_t ex = 0, sh = 0;
		err_clear(&e);
		if (!check(storage_vol_usage(st, "f-1", &ex, &sh, &e) == 0 && ex >= 1 * MIB && sh >= 1 * MIB,
			   "%s: usage: the fork's own write is exclusive, c1's data shared", backend))
			diag("exclusive %llu shared %llu: %s", (unsigned long long)ex,
			     (unsigned long long)sh, e.msg);
	}

	/* Given to a QEMU's uid (hostd does it before every start): the
	 * volume's file or device node is that uid's alone, and what it reads
	 * through is root's, read-only. */
	{
		const unsigned U = 2013265921, G = 4242;
		char real[PATH_MAX];
		struct stat sb;
		err_clear(&e);
		int rc = storage_vol_own(st, "f-1", U, G, &e);
		bool owned = rc == 0 && realpath(vpath("f-1"), real) && stat(real, &sb) == 0 &&
			     sb.st_uid == U && sb.st_gid == G && (sb.st_mode & 07777) == 0600;
		if (!check(owned, "%s: vol_own: f-1 is uid %u's, group %u, 0600", backend, U, G))
			diag("rc %d: %s", rc, e.msg);
		check(io("f-1", "read", 0x55, 2), "%s: f-1 reads as before", backend);
		if (!storage_can_snapshot(st))
			check(stat(vpath(f1), &sb) == 0 && sb.st_uid == 0 && (sb.st_mode & 0222) == 0,
			      "%s: the layer f-1 reads through is root's, read-only", backend);
		err_clear(&e);
		check(storage_vol_own(st, "no-such-vol", U, G, &e) < 0, "%s: vol_own of a missing "
		      "volume fails", backend);
	}

	/* Deletion with dependents. */
	int deps = storage_vol_dependents(st, f1, &e);
	if (storage_can_snapshot(st)) {
		check(deps == 0, "%s: thin volumes are independent (c1 has %d dependents)", backend, deps);
		err_clear(&e);
		check(storage_vol_remove(st, f1, &e) == 0, "%s: remove c1 while the fork exists", backend);
		check(io("f-1", "read", 0x22, 1) && io("m-1-r1", "read", 0x22, 1),
		      "%s: the fork and the restore still read c1's data", backend);
	} else {
		check(deps >= 2, "%s: c1 has dependents (%d): hostd keeps it", backend, deps);
	}

	/* Failures leave nothing behind. */
	before = volumes();
	err_clear(&e);
	check(storage_vol_create(st, "x-1", "no-such-base", 128 * MIB, &e) < 0, "%s: a missing base is refused", backend);
	err_clear(&e);
	check(storage_vol_create(st, "x-2", "base-img", 1 * MIB, &e) < 0 && e.status == 400,
	      "%s: a disk smaller than its base is refused (400)", backend);
	err_clear(&e);
	check(storage_vol_create(st, "m-1-r1", "base-img", 128 * MIB, &e) < 0 && e.status == 409,
	      "%s: an existing name is refused (409)", backend);
	{
		char bad[300];
		snprintf(bad, sizeof(bad), "%s/corrupt.qcow2", dir);
		write_file(bad, "QFI\xfbgarbage", 11);
		err_clear(&e);
		check(storage_base_import(st, "base-bad", bad, "qcow2", &e) < 0, "%s: a corrupt image is refused", backend);
	}
	check(volumes() == before, "%s: and no failure left a volume (%d, was %d)", backend, volumes(), before);

	/* The pool-full guard (thin pools), on a small second pool so that
	 * filling it is quick under emulation. */
	if (!strcmp(backend, "lvm-thin")) {
		struct storage *small;
		char *const mk[] = { "lvm", "lvcreate", "-q", "-T", "suite/small", "-L", "64m", NULL };
		err_clear(&e);
		check(run_argv(mk, NULL, &e) == 0, "lvm-thin: a 64 MiB pool suite/small");
		small = storage_open("lvm-thin", "suite/small", &e);
		struct storage *big = st;
		st = small;
		err_clear(&e);
		check(small && storage_base_import(small, "base-s", raw, "raw", &e) == 0 &&
		      storage_vol_create(small, "fill", "base-s", 64 * MIB, &e) == 0,
		      "lvm-thin: a volume as big as the small pool");
		char of[300];
		snprintf(of, sizeof(of), "of=%s", vpath("fill"));
		char *const dd[] = { "dd", "if=/dev/urandom", of, "bs=1M", "count=60", "oflag=direct", NULL };
		run_argv(dd, NULL, NULL);
		before = volumes();
		err_clear(&e);
		check(small && storage_vol_create(small, "x-3", "base-s", 64 * MIB, &e) < 0 && e.status == 507 &&
		      !strcmp(e.code, "pool_full"), "lvm-thin: a create in a full pool is refused (507 pool_full)");
		check_has(e.msg, "suite/small", "lvm-thin: the error names the pool");
		diag("%s", e.msg);
		err_clear(&e);
		check(small && storage_snapshot(small, "fill", "x-4", &e) < 0 && !strcmp(e.code, "pool_full"),
		      "lvm-thin: so is a snapshot");
		err_clear(&e);
		check(small && storage_base_import(small, "base-t", raw, "raw", &e) < 0 && !strcmp(e.code, "pool_full"),
		      "lvm-thin: and an import");
		check(volumes() == before, "lvm-thin: and nothing was made");
		storage_close(small);
		st = big;
	} else {
		skip("pool-full guard", "the qcow2 backend has no pool of its own");
	}
	storage_close(st);
	tmpdir_remove(dir);
	return tap_done("test_storage_suite");
}
