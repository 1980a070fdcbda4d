#include "storage/storage.h"

#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "common/banned.h"

struct storage {
	const struct storage_ops *ops;
	void *priv;
	char *location;
};

static const struct storage_ops *const backends[] = {
	&storage_qcow2,
	&storage_lvm_thin,
};

const struct storage_ops *storage_find(const char *name)
{
	for (size_t i = 0; i < sizeof(backends) / sizeof(backends[0]); i++)
		if (strcmp(backends[i]->name, name) == 0)
			return backends[i];
	return NULL;
}

struct storage *storage_open(const char *name, const char *location,
			     struct err *e)
{
	return storage_open_opts(name, location, NULL, e);
}

struct storage *storage_open_opts(const char *name, const char *location,
				  const struct storage_opts *o, struct err *e)
{
	const struct storage_ops *ops = storage_find(name);
	struct storage_opts defaults = { .max_fill = 90 };
	struct storage *st;

	if (!ops) {
		err_set(e, 400, "invalid_config",
			"unknown storage backend '%s' (known: qcow2, lvm-thin)", name);
		return NULL;
	}
	if (o && o->max_fill > 0)
		defaults.max_fill = o->max_fill;
	if (o)
		defaults.qemu_gid = o->qemu_gid;
	st = calloc(1, sizeof(*st));
	if (!st)
		abort();
	st->ops = ops;
	st->location = strdup(location);
	if (!st->location)
		abort();
	if (ops->open(location, &defaults, &st->priv, e) < 0) {
		free(st->location);
		free(st);
		return NULL;
	}
	return st;
}

void storage_close(struct storage *st)
{
	if (!st)
		return;
	if (st->ops->close)
		st->ops->close(st->priv);
	free(st->location);
	free(st);
}

const char *storage_name(const struct storage *st)
{
	return st->ops->name;
}

const char *storage_location(const struct storage *st)
{
	return st->location;
}

static int check_vol(const char *vol, struct err *e)
{
	/* Volume names are hostd's own ("base-NAME", "m-UUID"): DNS-label
	 * characters only, so no backend ever sees a path separator. */
	if (!name_valid(vol))
		return err_set(e, 500, "internal", "invalid volume name '%s'", vol);
	return 0;
}

int storage_base_import(struct storage *st, const char *vol, const char *src,
			const char *src_format, struct err *e)
{
	if (check_vol(vol, e) < 0)
		return -1;
	return st->ops->base_import(st->priv, vol, src, src_format, e);
}

int storage_base_create(struct storage *st, const char *vol, uint64_t bytes,
			struct storage_vol_info *info, struct err *e)
{
	if (check_vol(vol, e) < 0)
		return -1;
	if (bytes == 0)
		return err_set(e, 400, "invalid_image", "an image of 0 bytes");
	return st->ops->base_create(st->priv, vol, bytes, info, e);
}

int storage_base_seal(struct storage *st, const char *vol, struct err *e)
{
	if (check_vol(vol, e) < 0)
		return -1;
	return st->ops->base_seal(st->priv, vol, e);
}

int storage_vol_create(struct storage *st, const char *vol, const char *base,
		       uint64_t bytes, struct err *e)
{
	if (check_vol(vol, e) < 0 || check_vol(base, e) < 0)
		return -1;
	return st->ops->vol_create(st->priv, vol, base, bytes, e);
}

bool storage_can_snapshot(const struct storage *st)
{
	return st->ops->snapshot != NULL;
}

int storage_snapshot(struct storage *st, const char *vol, const char *snap, struct err *e)
{
	if (check_vol(vol, e) < 0 || check_vol(snap, e) < 0)
		return -1;
	if (!st->ops->snapshot)
		return err_set(e, 501, "not_supported", "storage backend %s: snapshots not supported",
			       st->ops->name);
	return st->ops->snapshot(st->priv, vol, snap, e);
}

int storage_vol_remove(struct storage *st, const char *vol, struct err *e)
{
	if (check_vol(vol, e) < 0)
		return -1;
	return st->ops->vol_remove(st->priv, vol, e);
}

int storage_vol_own(struct storage *st, const char *vol, unsigned uid, unsigned gid,
		    struct err *e)
{
	if (check_vol(vol, e) < 0)
		return -1;
	if (!st->ops->vol_own)
		return 0;
	return st->ops->vol_own(st->priv, vol, uid, gid, e);
}

bool storage_vol_exists(struct storage *st, const char *vol)
{
	return name_valid(vol) && st->ops->vol_exists(st->priv, vol);
}

int storage_vol_info(struct storage *st, const char *vol,
		     struct storage_vol_info *info, struct err *e)
{
	memset(info, 0, sizeof(*info));
	if (check_vol(vol, e) < 0)
		return -1;
	return st->ops->vol_info(st->priv, vol, info, e);
}

int storage_vol_list(struct storage *st,
		     void (*fn)(const char *vol, void *data), void *data,
		     struct err *e)
{
	return st->ops->vol_list(st->priv, fn, data, e);
}

int storage_pool_info(struct storage *st, struct storage_pool_info *info,
		      struct err *e)
{
	memset(info, 0, sizeof(*info));
	if (!st->ops->pool_info)
		return err_set(e, 501, "not_supported",
			       "storage backend %s: pool info not supported",
			       st->ops->name);
	return st->ops->pool_info(st->priv, info, e);
}

int storage_vol_parent(struct storage *st, const char *vol, char *parent,
		       size_t len, struct err *e)
{
	if (len)
		parent[0] = '\0';
	if (check_vol(vol, e) < 0)
		return -1;
	if (!st->ops->vol_parent)
		return 0;
	return st->ops->vol_parent(st->priv, vol, parent, len, e);
}

struct dependents {
	struct storage *st;
	const char *vol;
	int n;
	bool unsure;   /* a volume's parent could not be read */
};

static void count_child(const char *vol, void *data)
{
	struct dependents *d = data;
	char parent[256];

	if (d->st->ops->vol_parent(d->st->priv, vol, parent, sizeof(parent), NULL) < 0) {
		/* Removed meanwhile is fine; unreadable means "maybe". */
		if (d->st->ops->vol_exists(d->st->priv, vol))
			d->unsure = true;
		return;
	}
	if (strcmp(parent, d->vol) == 0)
		d->n++;
}

int storage_vol_dependents(struct storage *st, const char *vol, struct err *e)
{
	struct dependents d = { st, vol, 0, false };

	if (check_vol(vol, e) < 0)
		return -1;
	if (!st->ops->vol_parent)
		return 0;
	if (st->ops->vol_list(st->priv, count_child, &d, e) < 0)
		return -1;
	/* Never "no dependents" on a guess: a caller would remove VOL. */
	if (d.unsure)
		return err_set(e, 500, "internal", "cannot tell what depends on volume %s", vol);
	return d.n;
}

int storage_claim(struct storage *st, const char *tag, struct err *e)
{
	if (!st->ops->claim)
		return 0;
	return st->ops->claim(st->priv, tag, e);
}

int storage_vol_usage(struct storage *st, const char *vol, uint64_t *exclusive,
		      uint64_t *shared, struct err *e)
{
	*exclusive = *shared = 0;
	if (check_vol(vol, e) < 0)
		return -1;
	if (!st->ops->vol_usage)
		return err_set(e, 501, "not_supported", "storage backend %s: usage not supported",
			       st->ops->name);
	return st->ops->vol_usage(st->priv, vol, exclusive, shared, e);
}
