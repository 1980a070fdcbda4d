#include "hostd/image.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/run.h"
#include "common/util.h"
#include "hostd/machine_steps.h"
#include "hostd/transfer.h"
#include "common/banned.h"

/* rm -rf PATH, from argv: a recipe's build directory may have subdirectories. */
static void remove_recursive(const char *path)
{
	char *const argv[] = { "rm", "-rf", "--", (char *)path, NULL };
	struct err e = { 0 };

	if (run_argv(argv, NULL, &e) < 0)
		log_warn("cannot remove %s: %s", path, e.msg);
}

/* Read the recipe's image.json into IMG (paths made absolute under DIR). */
static int read_manifest(const char *outdir, struct image *img, char *root,
			 size_t rootlen, char *root_format, size_t fmtlen,
			 struct err *e)
{
	char path[PATH_MAX];
	json_error_t je;
	json_t *j;
	const char *boot = NULL, *kernel = NULL, *initrd = "", *cmdline = "",
		   *user = "root", *format = "qcow2", *rootfile = "root.qcow2";
	int rc = -1;

	xsnprintf(path, sizeof(path), "%s/image.json", outdir);
	j = json_load_file(path, 0, &je);
	if (!j)
		return err_set(e, 500, "recipe_failed", "%s: %s (line %d)", path, je.text, je.line);
	if (json_unpack_ex(j, &je, 0, "{s:s, s?s, s?s, s?s, s?s, s?s, s?s}",
			   "boot", &boot, "kernel", &kernel, "initrd", &initrd,
			   "cmdline", &cmdline, "user", &user, "format", &format,
			   "root", &rootfile) < 0) {
		err_set(e, 500, "recipe_failed", "%s: %s", path, je.text);
		goto out;
	}
	if (strcmp(boot, "direct") != 0 && strcmp(boot, "firmware") != 0) {
		err_set(e, 500, "recipe_failed", "%s: boot '%s' is not direct or firmware", path, boot);
		goto out;
	}
	if (!strcmp(boot, "direct") && !kernel) {
		err_set(e, 500, "recipe_failed", "%s: direct boot needs a kernel", path);
		goto out;
	}
	if (!kernel || !strcmp(boot, "firmware"))
		kernel = initrd = "";
	if (strchr(kernel, '/') || strchr(initrd, '/') || strchr(rootfile, '/')) {
		err_set(e, 500, "recipe_failed", "%s: file names must not contain '/'", path);
		goto out;
	}
	if (strlen(kernel) > NAME_MAX || strlen(initrd) > NAME_MAX || strlen(rootfile) > NAME_MAX) {
		err_set(e, 500, "recipe_failed", "%s: a file name is longer than %d bytes", path,
			NAME_MAX);
		goto out;
	}
	snprintf(img->boot, sizeof(img->boot), "%s", boot);
	snprintf(img->kernel, sizeof(img->kernel), "%s", kernel);
	snprintf(img->initrd, sizeof(img->initrd), "%s", initrd);
	snprintf(img->cmdline, sizeof(img->cmdline), "%s", cmdline);
	snprintf(img->user, sizeof(img->user), "%s", user);
	xsnprintf(root, rootlen, "%s/%s", outdir, rootfile);
	snprintf(root_format, fmtlen, "%s", format);
	rc = 0;
out:
	json_decref(j);
	return rc;
}

int image_build(struct hostd *h, const char *recipe, const char *name,
		struct image *out, struct err *e)
{
	char script[PATH_MAX], tmp[PATH_MAX] = "", dir[PATH_MAX];
	char root[PATH_MAX], root_format[16], kernel[PATH_MAX], initrd[PATH_MAX];
	char cache_env[PATH_MAX + 16], mark[80];
	struct image img, old;
	int rc = -1;
	int64_t t0 = mono_ms();

	memset(&img, 0, sizeof(img));
	if (!name_valid(name))
		return err_set(e, 400, "invalid_name", "invalid image name '%s'", name);
	if (!name_valid(recipe))
		return err_set(e, 400, "invalid_recipe", "invalid recipe name '%s'", recipe);
	xsnprintf(script, sizeof(script), "%s/%s.sh", h->recipes_dir, recipe);
	if (access(script, R_OK) < 0)
		return err_set(e, 404, "not_found", "no image recipe '%s' (looked for %s)",
			       recipe, script);
	/* Before the long build; the import checks again under its mark. */
	if (db_image_get(h->db, name, &old, NULL) == 0)
		return err_set(e, 409, "exists", "image %s exists", name);
	/* One build per name: a second would run the whole recipe only to
	 * find the name taken at its import. */
	snprintf(mark, sizeof(mark), "build:%s", name);
	if (busy_acquire(h->busy, mark, "build", name, e) < 0) {
		snprintf(e->msg, sizeof(e->msg), "image %s is being built already", name);
		return -1;
	}

	xsnprintf(tmp, sizeof(tmp), "%s/tmp/build-%s-XXXXXX", h->cfg.state_dir, name);
	xsnprintf(dir, sizeof(dir), "%s/tmp", h->cfg.state_dir);
	if (mkdir_p(dir, 0700) < 0 || !mkdtemp(tmp)) {
		err_errno(e, errno, "create a build directory in %s", dir);
		tmp[0] = '\0';
		goto out;
	}
	log_info("building image %s with recipe %s", name, script);
	snprintf(cache_env, sizeof(cache_env), "BERTH_CACHE=%s", h->cfg.cache_dir);
	char *env[] = { cache_env, NULL };
	char *const argv[] = { "bash", script, tmp, NULL };
	struct run_opts ro = { .env_add = env, .timeout_s = 3600 };
	if (run_argv(argv, &ro, e) < 0) {
		e->status = 500;
		snprintf(e->code, sizeof(e->code), "recipe_failed");
		goto out;
	}
	if (read_manifest(tmp, &img, root, sizeof(root), root_format, sizeof(root_format), e) < 0)
		goto out;
	log_info("image %s: recipe done in %lld ms; importing %s", name,
		 (long long)(mono_ms() - t0), root);
	xsnprintf(kernel, sizeof(kernel), "%s/%s", tmp, img.kernel);
	xsnprintf(initrd, sizeof(initrd), "%s/%s", tmp, img.initrd);
	struct import_opts o = {
		.name = name, .format = root_format, .origin = root, .boot = img.boot,
		.kernel = img.kernel[0] ? kernel : NULL, .initrd = img.initrd[0] ? initrd : NULL,
		.cmdline = img.cmdline, .user = img.user,
	};
	if (import_file(h, &o, root, out, e) < 0)
		goto out;
	log_info("image %s built in %lld ms (sha256 %s)", name,
		 (long long)(mono_ms() - t0), out->sha256);
	rc = 0;
out:
	if (tmp[0])
		remove_recursive(tmp);
	busy_release(h->busy, mark);
	return rc;
}

int image_delete(struct hostd *h, const char *name, struct err *e)
{
	struct image img;
	char dir[PATH_MAX], key[80];
	int users, rc = -1;

	if (db_image_get(h->db, name, &img, e) < 0)
		return -1;
	snprintf(key, sizeof(key), "image:%s", name);
	if (busy_acquire(h->busy, key, "delete", name, e) < 0)
		return -1;
	users = db_image_users(h->db, name, e);
	if (users < 0)
		goto out;
	if (users > 0) {
		err_set(e, 409, "in_use", "image %s is used by %d machine%s; delete them first",
			name, users, users == 1 ? "" : "s");
		goto out;
	}
	/* Row first: a crash after it leaves only orphans that start-up
	 * reconciliation removes. */
	if (db_image_delete(h->db, name, e) < 0)
		goto out;
	xsnprintf(dir, sizeof(dir), "%s/images/%s", h->cfg.state_dir, name);
	/* Collected, not removed: an image made from a machine is a frozen
	 * volume that machine's disk may still be layered on. */
	volume_gc(h, img.volume);
	remove_tree(dir, NULL);
	rc = 0;
out:
	busy_release(h->busy, key);
	return rc;
}

json_t *image_json(struct hostd *h, const struct image *img)
{
	struct storage_vol_info vi;
	int users = db_image_users(h->db, img->name, NULL);
	json_t *j = json_pack("{s:s, s:s, s:s, s:I, s:s, s:s, s:I, s:i, s:s, s:I, s:s?, s:b}",
			      "name", img->name, "boot", img->boot, "user", img->user,
			      "size", (json_int_t)img->virtual_size, "sha256", img->sha256,
			      "format", img->format, "created", (json_int_t)img->created,
			      "users", users < 0 ? 0 : users, "source", img->source,
			      "source_size", (json_int_t)img->source_size,
			      "owner", img->owner[0] ? img->owner : NULL, "public", img->public_);

	if (storage_vol_info(h->st, img->volume, &vi, NULL) == 0)
		json_object_set_new(j, "allocated", json_integer((json_int_t)vi.allocated_bytes));
	return j;
}

void image_reconcile(struct hostd *h)
{
	char dir[PATH_MAX], path[PATH_MAX];
	struct image img;
	struct dirent *de;
	DIR *d;

	xsnprintf(dir, sizeof(dir), "%s/images", h->cfg.state_dir);
	d = opendir(dir);
	if (!d)
		return;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.' || db_image_get(h->db, de->d_name, &img, NULL) == 0)
			continue;
		xsnprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		log_warn("reconcile: %s belongs to no image; removing it", path);
		remove_tree(path, NULL);
	}
	closedir(d);
	/* Builds a crash interrupted. */
	xsnprintf(dir, sizeof(dir), "%s/tmp", h->cfg.state_dir);
	d = opendir(dir);
	if (!d)
		return;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		xsnprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		log_info("reconcile: removing the interrupted build %s", path);
		remove_recursive(path);
	}
	closedir(d);
}
