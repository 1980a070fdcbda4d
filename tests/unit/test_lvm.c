/* The lvm-thin backend against real captured lvm output
 * (tests/unit/data/lvm/, recorded inside tests/guest/lvm-vm.sh): in dry-run
 * mode a responder answers `lvm lvs` with a captured report, narrowed to
 * the LV asked for as lvs does, and every command line is checked. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/run.h"
#include "storage/storage.h"
#include "tests/unit/tap.h"
#include "common/banned.h"

static const char *report = "lvs-snapshot.json";   /* the captured state */
static const char *tags = "";                      /* lv_tags of the pool */

static json_t *captured(const char *file)
{
	char path[512];

	snprintf(path, sizeof(path), "tests/unit/data/lvm/%s", file);
	return json_load_file(path, 0, NULL);
}

/* Answer `lvm lvs ... TARGET` from the captured report; other tools
 * succeed silently (qemu-img info: a 64 MiB image). */
static int responder(const char *cmdline, struct buf *out, void *data)
{
	(void)data;
	if (!strncmp(cmdline, "qemu-img info", 13)) {
		buf_adds(out, "{\"virtual-size\": 67108864, \"format\": \"raw\"}");
		return 0;
	}
	if (!strncmp(cmdline, "thin_ls", 7)) {
		char *text = NULL;
		FILE *f = fopen("tests/unit/data/lvm/thin_ls.txt", "re");
		size_t n = 0;
		if (f && getdelim(&text, &n, '\0', f) > 0)
			buf_adds(out, text);
		free(text);
		if (f)
			fclose(f);
		return 0;
	}
	if (strncmp(cmdline, "lvm lvs", 7) != 0)
		return 0;
	const char *target = strrchr(cmdline, ' ') + 1;
	const char *slash = strchr(target, '/');
	if (strncmp(target, "vg", 2) != 0 || (target[2] != '/' && target[2] != '\0')) {
		buf_printf(out, "  Volume group \"%.*s\" not found", slash ? (int)(slash - target) : 99,
			   target);
		return 5;
	}
	json_t *j = captured(report), *lv, *row, *keep = json_array();
	size_t i;

	lv = json_object_get(json_array_get(json_object_get(j, "report"), 0), "lv");
	json_array_foreach(lv, i, row) {
		const char *name = json_string_value(json_object_get(row, "lv_name"));
		if (slash && strcmp(name, slash + 1) != 0)
			continue;
		if (!strcmp(name, "pool") || !strcmp(name, "small"))
			json_object_set_new(row, "lv_tags", json_string(tags));
		json_array_append(keep, row);
	}
	json_decref(j);
	if (slash && json_array_size(keep) == 0) {
		json_decref(keep);
		/* What lvm prints, and its status, for a missing LV. */
		buf_printf(out, "  Failed to find logical volume \"%s\"", target);
		return 5;
	}
	j = json_pack("{s:[{s:o}]}", "report", "lv", keep);
	char *text = json_dumps(j, JSON_INDENT(2));
	buf_adds(out, text);
	free(text);
	json_decref(j);
	return 0;
}

static void add(const char *vol, void *data)
{
	buf_printf(data, "%s ", vol);
}

int main(void)
{
	struct buf log = BUF_INIT;
	struct err e = { 0 };
	struct storage *st;
	struct storage_vol_info vi;
	struct storage_pool_info pi;

	run_set_dry(&log);
	run_set_dry_responder(responder, NULL);

	st = storage_open("lvm-thin", "vg", &e);
	check(!st && e.status == 400 && strstr(e.msg, "must be VG/POOL"), "open: 'vg' is refused: VG/POOL");
	err_clear(&e);
	st = storage_open("lvm-thin", "vg/v1", &e);
	check(!st && strstr(e.msg, "is not a thin pool"), "open: a thin LV is not a pool");
	err_clear(&e);
	st = storage_open("lvm-thin", "nosuchvg/pool", &e);
	check(!st && e.status == 404, "open: a missing pool is 404 (%s)", e.msg);
	err_clear(&e);
	st = storage_open("lvm-thin", "vg/pool", &e);
	if (!check(st != NULL, "open: vg/pool (attr twi-aotz--)")) {
		diag("%s", e.msg);
		return tap_done("test_lvm");
	}

	check(storage_vol_info(st, "v1", &vi, &e) == 0, "info: v1");
	check_str(vi.path, "/dev/vg/v1", "info: the device path");
	check(vi.block && !strcmp(vi.format, "raw"), "info: a raw block device");
	check_u64(vi.virtual_bytes, 4294967296ULL, "info: lv_size in bytes");
	check_u64(vi.allocated_bytes, (unsigned long long)(4294967296.0 * 0.29 / 100), "info: data_percent of the size");
	check(storage_vol_exists(st, "s1") && !storage_vol_exists(st, "nope"), "exists: s1 yes, nope no");
	err_clear(&e);
	check(storage_vol_info(st, "nope", &vi, &e) < 0 && e.status == 404, "info: a missing LV is 404");

	buf_reset(&log);
	err_clear(&e);
	check(storage_vol_create(st, "m-1", "v1", 4294967296ULL, &e) == 0, "create: m-1 from v1, same size");
	check_has(buf_str(&log), "lvm lvcreate -q -s -kn -n m-1 vg/v1\n", "create: an active thin snapshot (-kn)");
	check_lacks(buf_str(&log), "lvresize", "create: same size, no resize");
	buf_reset(&log);
	check(storage_vol_create(st, "m-2", "v1", 8589934592ULL, &e) == 0, "create: m-2 twice the size");
	check_has(buf_str(&log), "lvm lvresize -q -L 8589934592b vg/m-2\n", "create: then grown with lvresize");
	buf_reset(&log);
	err_clear(&e);
	check(storage_vol_create(st, "s1", "v1", 4294967296ULL, &e) < 0 && e.status == 409,
	      "create: an existing LV name is 409");
	err_clear(&e);
	check(storage_vol_create(st, "m-3", "v1", 1048576, &e) < 0 && e.status == 400 &&
	      strstr(e.msg, "smaller than its image"), "create: smaller than the origin is 400");
	check_lacks(buf_str(&log), "lvcreate", "create: refusals run no lvcreate");

	buf_reset(&log);
	err_clear(&e);
	check(storage_snapshot(st, "v1", "c-1", &e) == 0, "snapshot: c-1 of v1");
	check_has(buf_str(&log), "lvm lvcreate -q -s -kn -n c-1 vg/v1\n", "snapshot: the command line");

	buf_reset(&log);
	err_clear(&e);
	check(storage_base_import(st, "base-x", "/img/x.raw", "raw", &e) == 0, "import: base-x");
	check_has(buf_str(&log), "qemu-img info --output=json -f raw /img/x.raw\n"
		  "lvm lvs", "import: size from qemu-img, then the pool's fill");
	check_has(buf_str(&log), "lvm lvcreate -q -T vg/pool -V 67108864b -n base-x\n"
		  "qemu-img convert -q -n --target-is-zero -f raw -O raw /img/x.raw /dev/vg/base-x\n",
		  "import: a thin LV of the image's size, filled by qemu-img without its zeros");

	buf_reset(&log);
	check(storage_vol_remove(st, "nope", &e) == 0, "remove: a missing LV is success");
	check_lacks(buf_str(&log), "lvremove", "remove: and runs no lvremove");
	check(storage_vol_remove(st, "s1", &e) == 0 &&
	      strstr(buf_str(&log), "lvm lvremove -q -f vg/s1\n"), "remove: lvremove -f vg/s1");

	{
		struct buf names = BUF_INIT;
		check(storage_vol_list(st, add, &names, &e) == 0, "list: the pool's thin LVs");
		check_str(buf_str(&names), "s1 v1 ", "list: s1 and v1, not the pool");
		buf_free(&names);
	}
	check(storage_pool_info(st, &pi, &e) == 0 && pi.total_bytes == 1073741824ULL &&
	      pi.used_bytes == (uint64_t)(1073741824.0 * 1.17 / 100), "pool info: size and data use");

	buf_reset(&log);
	check(storage_claim(st, "abcd1234", &e) == 0, "claim: an untagged pool");
	check_has(buf_str(&log), "lvm lvchange -q --addtag berth_abcd1234 vg/pool\n", "claim: tags the pool");
	tags = "berth_abcd1234";
	buf_reset(&log);
	check(storage_claim(st, "abcd1234", &e) == 0 && !strstr(buf_str(&log), "lvchange"),
	      "claim: ours already, nothing to do");
	tags = "berth_ffff0000";
	err_clear(&e);
	check(storage_claim(st, "abcd1234", &e) < 0 && e.status == 409 && !strcmp(e.code, "pool_taken"),
	      "claim: another instance's pool is 409 pool_taken");
	/* Exclusive and shared bytes: thin_ls of a metadata snapshot. */
	report = "lvs-thin-id.json";
	uint64_t ex = 0, sh = 0;
	buf_reset(&log);
	err_clear(&e);
	check(storage_vol_usage(st, "s1", &ex, &sh, &e) == 0, "usage: s1 (thin id 2)");
	check(ex == 2097152 && sh == 8388608, "usage: 2 MiB exclusive, 8 MiB shared, as thin_ls says");
	check_has(buf_str(&log), "dmsetup message vg-pool-tpool 0 reserve_metadata_snap\n"
		  "thin_ls --metadata-snap -o DEV,MAPPED_BYTES,EXCLUSIVE_BYTES,SHARED_BYTES "
		  "/dev/mapper/vg-pool_tmeta\n"
		  "dmsetup message vg-pool-tpool 0 release_metadata_snap\n",
		  "usage: reserve, thin_ls, release");
	err_clear(&e);
	check(storage_vol_usage(st, "pool", &ex, &sh, &e) < 0 && e.status == 404,
	      "usage: the pool itself has no thin id (404)");
	report = "lvs-snapshot.json";
	storage_close(st);

	/* A full pool: the captured state with the 64 MiB pool at 100%. */
	report = "lvs-pool-full.json";
	tags = "";
	err_clear(&e);
	st = storage_open("lvm-thin", "vg/small", &e);
	check(st != NULL, "full: open vg/small");
	buf_reset(&log);
	err_clear(&e);
	check(st && storage_vol_create(st, "m-9", "f1", 134217728, &e) < 0 && e.status == 507 &&
	      !strcmp(e.code, "pool_full"), "full: a create is refused with 507 pool_full");
	check_has(e.msg, "thin pool 'vg/small' is 100% full (data 100.0%, metadata 11.4%; limit 90%)",
		  "full: the message names the pool and its fill");
	err_clear(&e);
	check(st && storage_snapshot(st, "f1", "c-9", &e) < 0 && !strcmp(e.code, "pool_full"),
	      "full: so is a snapshot");
	check_lacks(buf_str(&log), "lvcreate", "full: no lvcreate ran");
	storage_close(st);

	/* The pool at vg/pool is 1.17% full: under a 1% limit it is full too. */
	report = "lvs-snapshot.json";
	struct storage_opts o = { .max_fill = 1 };
	err_clear(&e);
	st = storage_open_opts("lvm-thin", "vg/pool", &o, &e);
	err_clear(&e);
	check(st && storage_snapshot(st, "v1", "c-2", &e) < 0 && strstr(e.msg, "limit 1%"),
	      "limit: lvm_max_fill is honoured");
	storage_close(st);

	run_set_dry_responder(NULL, NULL);
	run_set_dry(NULL);
	buf_free(&log);
	return tap_done("test_lvm");
}

