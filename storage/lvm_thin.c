/* The lvm-thin backend: volumes are thin LVs in one thin pool; an image's
 * base is a thin LV, machine disks, checkpoints and forks are thin
 * snapshots (independent of their origin: deleting one never breaks
 * another).  LOCATION is "VG/POOL".
 *
 * Debian 12 has no liblvm2app, so the lvm tools run from argv (common/run)
 * with `--reportformat json --units b --nosuffix` reports parsed by
 * jansson; every value in those reports is a string.  Guardrail: nothing is
 * created while the pool's data or metadata use is above max_fill. */
#include "storage/storage.h"
#include "storage/lvm_thin.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/log.h"
#include "common/run.h"
#include "common/util.h"
#include "common/banned.h"

struct lvm_pool {
	char vg[128];
	char pool[128];
	int max_fill;
	pthread_mutex_t usage_lock;  /* one metadata snapshot at a time */
};

/* "VG/NAME" into OUT. */
static void lv_path(const struct lvm_pool *p, const char *name, char *out, size_t len)
{
	snprintf(out, len, "%s/%s", p->vg, name);
}

/* Run `lvm lvs` for TARGET (a VG or VG/LV) with FIELDS; *ROWS gets the
 * "lv" array (a new reference).  A missing TARGET is 404 "not_found". */
static int lvs(const char *target, const char *fields, json_t **rows, struct err *e)
{
	struct buf out = BUF_INIT;
	struct run_opts o = { .out = &out };
	struct err local = { 0 };
	int rc = -1;
	char *const argv[] = { "lvm", "lvs", "--reportformat", "json", "--units", "b",
			       "--nosuffix", "-o", (char *)fields, (char *)target, NULL };

	*rows = NULL;
	if (run_argv(argv, &o, &local) < 0) {
		if (strstr(local.msg, "not found") || strstr(local.msg, "Failed to find"))
			err_set(e, 404, "not_found", "lvm: %s not found", target);
		else if (e && !err_isset(e))
			*e = local;
		goto out;
	}
	rc = lvm_report_rows(buf_str(&out), out.len, target, rows, e);
out:
	buf_free(&out);
	return rc;
}

int lvm_report_rows(const char *text, size_t len, const char *target, json_t **rows,
		    struct err *e)
{
	json_error_t je;
	json_t *j = json_loadb(text, len, 0, &je);
	json_t *lv = json_object_get(json_array_get(json_object_get(j, "report"), 0), "lv");
	int rc = -1;

	*rows = NULL;
	if (!json_is_array(lv)) {
		err_set(e, 500, "lvm_report", "lvm lvs %s: unexpected report: %s", target,
			j ? "no report[0].lv array" : je.text);
		goto out;
	}
	*rows = json_incref(lv);
	rc = 0;
out:
	json_decref(j);
	return rc;
}

static const char *field(json_t *row, const char *key)
{
	const char *s = json_string_value(json_object_get(row, key));
	return s ? s : "";
}

static uint64_t field_u64(json_t *row, const char *key)
{
	return strtoull(field(row, key), NULL, 10);
}

/* Percent values are "12.34", or "" (inactive LVs). */
static double field_pct(json_t *row, const char *key)
{
	const char *s = field(row, key);
	return *s ? strtod(s, NULL) : 0.0;
}

/* The pool's row: size, data and metadata use, tags. */
static int pool_row(struct lvm_pool *p, json_t **row, struct err *e)
{
	char target[300];
	json_t *rows;

	lv_path(p, p->pool, target, sizeof(target));
	if (lvs(target, "lv_name,lv_attr,lv_size,data_percent,metadata_percent,lv_tags",
		&rows, e) < 0)
		return -1;
	*row = json_incref(json_array_get(rows, 0));
	json_decref(rows);
	if (!*row)
		return err_set(e, 404, "not_found", "lvm: thin pool %s not found", target);
	return 0;
}

/* Refuse to create anything in a pool filled above max_fill. */
static int guard(struct lvm_pool *p, const char *what, struct err *e)
{
	json_t *row;
	double data, meta;

	if (pool_row(p, &row, e) < 0)
		return -1;
	data = field_pct(row, "data_percent");
	meta = field_pct(row, "metadata_percent");
	json_decref(row);
	if (data > p->max_fill || meta > p->max_fill)
		return err_set(e, 507, "pool_full",
			       "%s: thin pool '%s/%s' is %.0f%% full (data %.1f%%, metadata %.1f%%; "
			       "limit %d%%)", what, p->vg, p->pool, data > meta ? data : meta,
			       data, meta, p->max_fill);
	return 0;
}

static int lvm_open(const char *location, const struct storage_opts *o, void **priv,
		    struct err *e)
{
	struct lvm_pool *p = calloc(1, sizeof(*p));
	const char *slash = strchr(location, '/');
	json_t *row = NULL;

	if (!p)
		abort();
	if (!slash || slash == location || !slash[1] || strchr(slash + 1, '/') ||
	    (size_t)(slash - location) >= sizeof(p->vg) || strlen(slash + 1) >= sizeof(p->pool)) {
		free(p);
		return err_set(e, 400, "invalid_config",
			       "lvm-thin storage_location '%s' must be VG/POOL", location);
	}
	snprintf(p->vg, sizeof(p->vg), "%.*s", (int)(slash - location), location);
	snprintf(p->pool, sizeof(p->pool), "%s", slash + 1);
	p->max_fill = o->max_fill;
	pthread_mutex_init(&p->usage_lock, NULL);
	if (pool_row(p, &row, e) < 0) {
		free(p);
		return -1;
	}
	if (field(row, "lv_attr")[0] != 't') {
		err_set(e, 400, "invalid_config", "lvm: %s is not a thin pool (attr %s)", location,
			field(row, "lv_attr"));
		json_decref(row);
		free(p);
		return -1;
	}
	json_decref(row);
	*priv = p;
	return 0;
}

static void lvm_close(void *priv)
{
	struct lvm_pool *p = priv;

	pthread_mutex_destroy(&p->usage_lock);
	free(p);
}

/* Device-mapper's name for VG/LV: each '-' doubled, joined by '-'. */
static void dm_name(const char *vg, const char *lv, const char *suffix, char *out, size_t len)
{
	struct buf b = BUF_INIT;

	for (const char *s = vg; *s; s++)
		buf_adds(&b, *s == '-' ? "--" : (char[]){ *s, 0 });
	buf_adds(&b, "-");
	for (const char *s = lv; *s; s++)
		buf_adds(&b, *s == '-' ? "--" : (char[]){ *s, 0 });
	buf_adds(&b, suffix);
	snprintf(out, len, "%s", buf_str(&b));
	buf_free(&b);
}

int lvm_thin_ls_find(const char *text, long id, uint64_t *exclusive, uint64_t *shared)
{
	/* A header line, then "DEV MAPPED EXCLUSIVE SHARED" per thin device. */
	for (const char *line = strchr(text, '\n'); line && *line; line = strchr(line, '\n')) {
		unsigned long long dev, mapped, ex, sh;
		line++;
		if (sscanf(line, "%llu %llu %llu %llu", &dev, &mapped, &ex, &sh) == 4 &&
		    (long)dev == id) {
			*exclusive = ex;
			*shared = sh;
			return 0;
		}
	}
	return -1;
}

/* thin_ls of a metadata snapshot: the only way to read a thin device's
 * exclusive and shared blocks while the pool is in use. */
static int lvm_vol_usage(void *priv, const char *vol, uint64_t *exclusive, uint64_t *shared,
			 struct err *e)
{
	struct lvm_pool *p = priv;
	char target[300], tpool[300], tmeta[300];
	struct buf out = BUF_INIT;
	struct run_opts o = { .out = &out };
	json_t *rows;
	int rc = -1;

	lv_path(p, vol, target, sizeof(target));
	if (lvs(target, "lv_name,thin_id", &rows, e) < 0)
		return -1;
	long id = strtol(field(json_array_get(rows, 0), "thin_id"), NULL, 10);
	json_decref(rows);
	if (id <= 0)
		return err_set(e, 404, "not_found", "no thin volume %s", vol);
	dm_name(p->vg, p->pool, "-tpool", tpool, sizeof(tpool));
	dm_name(p->vg, p->pool, "_tmeta", tmeta, sizeof(tmeta));
	char path[320];
	snprintf(path, sizeof(path), "/dev/mapper/%s", tmeta);
	char *const reserve[] = { "dmsetup", "message", tpool, "0", "reserve_metadata_snap", NULL };
	char *const release[] = { "dmsetup", "message", tpool, "0", "release_metadata_snap", NULL };
	char *const ls[] = { "thin_ls", "--metadata-snap", "-o",
			     "DEV,MAPPED_BYTES,EXCLUSIVE_BYTES,SHARED_BYTES", path, NULL };
	pthread_mutex_lock(&p->usage_lock);
	if (run_argv(reserve, NULL, e) == 0) {
		rc = run_argv(ls, &o, e);
		run_argv(release, NULL, NULL);
	}
	pthread_mutex_unlock(&p->usage_lock);
	if (rc < 0)
		goto out;
	rc = lvm_thin_ls_find(buf_str(&out), id, exclusive, shared);
	if (rc < 0)
		err_set(e, 404, "not_found", "thin_ls: no device %ld (%s)", id, vol);
out:
	buf_free(&out);
	return rc;
}

static void remove_quietly(struct lvm_pool *p, const char *vol)
{
	char target[300];

	lv_path(p, vol, target, sizeof(target));
	char *const argv[] = { "lvm", "lvremove", "-q", "-f", target, NULL };
	run_argv(argv, NULL, NULL);
}

static bool lvm_vol_exists(void *priv, const char *vol)
{
	struct lvm_pool *p = priv;
	char target[300];
	json_t *rows;
	bool found;

	lv_path(p, vol, target, sizeof(target));
	if (lvs(target, "lv_name", &rows, NULL) < 0)
		return false;
	found = json_array_size(rows) == 1;
	json_decref(rows);
	return found;
}

static int lvm_vol_info(void *priv, const char *vol, struct storage_vol_info *info,
			struct err *e)
{
	struct lvm_pool *p = priv;
	char target[300];
	json_t *rows, *row;

	lv_path(p, vol, target, sizeof(target));
	if (lvs(target, "lv_name,lv_size,data_percent", &rows, e) < 0)
		return -1;
	row = json_array_get(rows, 0);
	if (!row) {
		json_decref(rows);
		return err_set(e, 404, "not_found", "no volume %s", vol);
	}
	snprintf(info->path, sizeof(info->path), "/dev/%s/%s", p->vg, vol);
	info->format = "raw";
	info->block = true;
	info->virtual_bytes = field_u64(row, "lv_size");
	/* What the pool really holds for this LV; blocks it shares with its
	 * origin count for both (thin_ls tells them apart: not yet used). */
	info->allocated_bytes = (uint64_t)((double)info->virtual_bytes *
					   field_pct(row, "data_percent") / 100.0);
	json_decref(rows);
	return 0;
}

static int lvm_base_import(void *priv, const char *vol, const char *src,
			   const char *src_format, struct err *e)
{
	struct lvm_pool *p = priv;
	char target[300], size[32], dev[4096];
	struct buf out = BUF_INIT;
	struct run_opts o = { .out = &out };
	json_t *j = NULL;
	int rc = -1;

	if (strcmp(src_format, "qcow2") && strcmp(src_format, "raw"))
		return err_set(e, 400, "invalid_format",
			       "image format '%s' is not qcow2 or raw", src_format);
	if (lvm_vol_exists(p, vol))
		return err_set(e, 409, "exists", "volume %s exists", vol);
	char *const info[] = { "qemu-img", "info", "--output=json", "-f", (char *)src_format,
			       (char *)src, NULL };
	if (run_argv(info, &o, e) < 0)
		goto out;
	j = json_loadb(buf_str(&out), out.len, 0, NULL);
	json_int_t bytes = json_integer_value(json_object_get(j, "virtual-size"));
	if (bytes <= 0) {
		err_set(e, 400, "invalid_image", "%s: no virtual size", src);
		goto out;
	}
	if (guard(p, "import", e) < 0)
		goto out;
	snprintf(size, sizeof(size), "%lldb", (long long)bytes);
	lv_path(p, p->pool, target, sizeof(target));
	char *const create[] = { "lvm", "lvcreate", "-q", "-T", target, "-V", size, "-n",
				 (char *)vol, NULL };
	if (run_argv(create, NULL, e) < 0)
		goto out;
	snprintf(dev, sizeof(dev), "/dev/%s/%s", p->vg, vol);
	/* A new thin LV reads as zeros: writing the image's zeros would
	 * allocate its whole size in the pool. */
	char *const convert[] = { "qemu-img", "convert", "-q", "-n", "--target-is-zero",
				  "-f", (char *)src_format, "-O", "raw", (char *)src, dev, NULL };
	if (run_argv(convert, NULL, e) < 0) {
		remove_quietly(p, vol);
		goto out;
	}
	rc = 0;
out:
	json_decref(j);
	buf_free(&out);
	return rc;
}

/* A new thin LV: it reads as zeros.  Until a catalog row names it, the
 * start-up sweep collects it, so sealing has nothing to do. */
static int lvm_base_create(void *priv, const char *vol, uint64_t bytes,
			   struct storage_vol_info *info, struct err *e)
{
	struct lvm_pool *p = priv;
	char target[300], size[32];

	if (lvm_vol_exists(p, vol))
		return err_set(e, 409, "exists", "volume %s exists", vol);
	if (guard(p, "import", e) < 0)
		return -1;
	snprintf(size, sizeof(size), "%llub", (unsigned long long)bytes);
	lv_path(p, p->pool, target, sizeof(target));
	char *const create[] = { "lvm", "lvcreate", "-q", "-T", target, "-V", size, "-n",
				 (char *)vol, NULL };
	if (run_argv(create, NULL, e) < 0)
		return -1;
	if (lvm_vol_info(p, vol, info, e) < 0) {
		remove_quietly(p, vol);
		return -1;
	}
	return 0;
}

static int lvm_base_seal(void *priv, const char *vol, struct err *e)
{
	(void)priv;
	(void)vol;
	(void)e;
	return 0;
}

static int lvm_snapshot(void *priv, const char *vol, const char *snap, struct err *e)
{
	struct lvm_pool *p = priv;
	char origin[300];

	if (lvm_vol_exists(p, snap))
		return err_set(e, 409, "exists", "volume %s exists", snap);
	if (guard(p, "snapshot", e) < 0)
		return -1;
	lv_path(p, vol, origin, sizeof(origin));
	/* -kn: thin snapshots skip activation by default; ours are used. */
	char *const argv[] = { "lvm", "lvcreate", "-q", "-s", "-kn", "-n", (char *)snap,
			       origin, NULL };
	if (run_argv(argv, NULL, e) < 0) {
		if (lvm_vol_exists(p, snap))
			remove_quietly(p, snap);
		return -1;
	}
	return 0;
}

static int lvm_vol_create(void *priv, const char *vol, const char *base,
			  uint64_t bytes, struct err *e)
{
	struct lvm_pool *p = priv;
	struct storage_vol_info bi;
	char target[300], size[32];

	if (bytes % 512)
		return err_set(e, 400, "invalid_disk", "disk size %llu is not a multiple of 512 bytes",
			       (unsigned long long)bytes);
	if (lvm_vol_info(p, base, &bi, e) < 0)
		return -1;
	if (bytes < bi.virtual_bytes) {
		char want[32], have[32];
		size_format(bytes, want, sizeof(want));
		size_format(bi.virtual_bytes, have, sizeof(have));
		return err_set(e, 400, "invalid_disk", "disk %s is smaller than its image (%s)",
			       want, have);
	}
	if (lvm_snapshot(p, base, vol, e) < 0)
		return -1;
	if (bytes > bi.virtual_bytes) {
		snprintf(size, sizeof(size), "%llub", (unsigned long long)bytes);
		lv_path(p, vol, target, sizeof(target));
		char *const argv[] = { "lvm", "lvresize", "-q", "-L", size, target, NULL };
		if (run_argv(argv, NULL, e) < 0) {
			remove_quietly(p, vol);
			return -1;
		}
	}
	return 0;
}

static int lvm_vol_remove(void *priv, const char *vol, struct err *e)
{
	struct lvm_pool *p = priv;
	char target[300];
	struct err local = { 0 };
	json_t *rows;

	/* Missing is success; lvs failing for another reason is not. */
	lv_path(p, vol, target, sizeof(target));
	if (lvs(target, "lv_name", &rows, &local) < 0) {
		if (local.status == 404)
			return 0;
		if (e && !err_isset(e))
			*e = local;
		return -1;
	}
	json_decref(rows);
	char *const argv[] = { "lvm", "lvremove", "-q", "-f", target, NULL };
	return run_argv(argv, NULL, e);
}

/* The LV's device node, as the domain names it (/dev/VG/VOL, a symbolic
 * link to /dev/dm-N), owned by the QEMU that uses it.  No lvm command: this
 * runs before every start.  udev, where it runs, resets a node's owner on
 * the LV's next change event (its activation, a snapshot of it suspending
 * it); a QEMU that has it open is not affected, and the next start sets
 * it again. */
static int lvm_vol_own(void *priv, const char *vol, unsigned uid, unsigned gid,
		       struct err *e)
{
	struct lvm_pool *p = priv;
	char link[300], node[PATH_MAX];
	struct stat st;

	snprintf(link, sizeof(link), "/dev/%s/%s", p->vg, vol);
	if (!realpath(link, node))
		return errno == ENOENT ? err_set(e, 404, "not_found", "volume %s: no device %s "
						 "(not active?)", vol, link)
				       : err_errno(e, errno, "volume %s: %s", vol, link);
	if (stat(node, &st) < 0)
		return err_errno(e, errno, "volume %s: %s", vol, node);
	if (!S_ISBLK(st.st_mode))
		return err_set(e, 500, "internal", "volume %s: %s is not a block device", vol, node);
	return path_set_owner(node, uid, gid, 0600, e) < 0 ? -1 : 0;
}

static int lvm_vol_list(void *priv, void (*fn)(const char *vol, void *data), void *data,
			struct err *e)
{
	struct lvm_pool *p = priv;
	json_t *rows, *row;
	size_t i;

	if (lvs(p->vg, "lv_name,lv_attr,pool_lv", &rows, e) < 0)
		return -1;
	/* Only the thin LVs of our pool; not the pool, not other LVs. */
	json_array_foreach(rows, i, row)
		if (!strcmp(field(row, "pool_lv"), p->pool) && field(row, "lv_attr")[0] == 'V')
			fn(field(row, "lv_name"), data);
	json_decref(rows);
	return 0;
}

static int lvm_claim(void *priv, const char *tag, struct err *e)
{
	struct lvm_pool *p = priv;
	char want[160], target[300];
	json_t *row;
	int rc = 0;

	if (pool_row(p, &row, e) < 0)
		return -1;
	snprintf(want, sizeof(want), "berth_%s", tag);
	const char *tags = field(row, "lv_tags");
	const char *other = strstr(tags, "berth_");
	if (other && strncmp(other, want, strlen(want)) != 0) {
		rc = err_set(e, 409, "pool_taken",
			     "thin pool %s/%s belongs to another berth instance (tags %s), not %s",
			     p->vg, p->pool, tags, tag);
	} else if (!other) {
		lv_path(p, p->pool, target, sizeof(target));
		char *const argv[] = { "lvm", "lvchange", "-q", "--addtag", want, target, NULL };
		rc = run_argv(argv, NULL, e);
	}
	json_decref(row);
	return rc;
}

static int lvm_pool_info(void *priv, struct storage_pool_info *info, struct err *e)
{
	struct lvm_pool *p = priv;
	json_t *row;

	if (pool_row(p, &row, e) < 0)
		return -1;
	info->total_bytes = field_u64(row, "lv_size");
	info->used_bytes = (uint64_t)((double)info->total_bytes *
				      field_pct(row, "data_percent") / 100.0);
	json_decref(row);
	return 0;
}

const struct storage_ops storage_lvm_thin = {
	.name = "lvm-thin",
	.open = lvm_open,
	.close = lvm_close,
	.base_import = lvm_base_import,
	.base_create = lvm_base_create,
	.base_seal = lvm_base_seal,
	.vol_create = lvm_vol_create,
	.snapshot = lvm_snapshot,
	.vol_remove = lvm_vol_remove,
	.vol_own = lvm_vol_own,
	.vol_exists = lvm_vol_exists,
	.vol_info = lvm_vol_info,
	.vol_list = lvm_vol_list,
	.claim = lvm_claim,
	.vol_usage = lvm_vol_usage,
	.pool_info = lvm_pool_info,
};
