#include "hostd/memimage.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "hostd/machine_steps.h"
#include "hostd/zmem.h"
#include "common/banned.h"

/* The memory image's files in the machine's directory, by stage:
 *   suspend.save      libvirt's save image (virt_save), until compressed;
 *                     complete once libvirt's magic says so
 *   suspend.zst.part  its compression under way
 *   suspend.zst       compressed and fsynced; suspend.save goes after it
 *   wake.zst, wake.save  the image being restored: renamed back when the
 *                     restore fails, removed when it worked
 *   wake.fifo         what libvirt reads a compressed image through
 *   woken             an image restored: never restored again, removed
 * A wake removes the image (durably) before it lets the guest's CPUs run,
 * and a cold boot removes any: while an image exists, the guest has not
 * run since it was saved, so restoring it is right whatever a crash left.
 * The order of the table is the order of preference. */
enum mem_image { IMG_ZST, IMG_WAKE_ZST, IMG_RAW, IMG_WAKE_RAW, IMG_N };
static const char *const image_files[] = {
	[IMG_ZST] = "suspend.zst", [IMG_WAKE_ZST] = "wake.zst",
	[IMG_RAW] = "suspend.save", [IMG_WAKE_RAW] = "wake.save",
	"suspend.zst.part", "wake.fifo", "woken",
};
#define IMAGE_FILES (sizeof(image_files) / sizeof(image_files[0]))

static void image_path(struct hostd *h, const char *id, const char *file, char *out,
		       size_t outlen)
{
	char dir[PATH_MAX];

	machine_dir(h, id, dir, sizeof(dir));
	xsnprintf(out, outlen, "%s/%s", dir, file);
}

static bool image_is_zst(int kind)
{
	return kind == IMG_ZST || kind == IMG_WAKE_ZST;
}

/* The memory image machine ID wakes from (an enum mem_image), its path
 * into PATH (may be NULL); -1 when it has none. */
static int image_find(struct hostd *h, const char *id, char *path, size_t len)
{
	char p[PATH_MAX];

	for (int i = 0; i < IMG_N; i++) {
		image_path(h, id, image_files[i], p, sizeof(p));
		if (image_is_zst(i) ? access(p, F_OK) == 0 : virt_save_image_complete(p)) {
			if (path)
				snprintf(path, len, "%s", p);
			return i;
		}
	}
	return -1;
}

/* fsync the machine directory holding PATH: a rename or unlink in it lasts. */
static void sync_dir_of(const char *path)
{
	char dir[PATH_MAX];
	char *slash;
	int fd;

	snprintf(dir, sizeof(dir), "%s", path);
	if (!(slash = strrchr(dir, '/')))
		return;
	*slash = '\0';
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || fsync(fd) < 0)
		log_warn("fsync %s: %s", dir, strerror(errno));
	if (fd >= 0)
		close(fd);
}

int memimage_discard(struct hostd *h, const char *id)
{
	char p[PATH_MAX];
	int n = 0;

	for (size_t i = 0; i < IMAGE_FILES; i++) {
		image_path(h, id, image_files[i], p, sizeof(p));
		if (unlink(p) == 0)
			n++;
		else if (errno != ENOENT)
			log_warn("remove %s: %s", p, strerror(errno));
	}
	if (n)
		sync_dir_of(p);
	return n;
}

static void *unlink_main(void *arg)
{
	unlink(arg);
	free(arg);
	return NULL;
}

/* Remove the file PATH on a thread of its own: dropping a large file's
 * pages from the page cache takes tens of ms that a wake need not wait
 * for.  Inline when no thread can start. */
static void unlink_later(const char *path)
{
	char *p = strdup(path);
	pthread_attr_t attr;
	pthread_t t;
	int rc;

	if (!p)
		abort();
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	rc = pthread_create(&t, &attr, unlink_main, p);
	pthread_attr_destroy(&attr);
	if (rc != 0)
		unlink_main(p);
}

bool memimage_find(struct hostd *h, const char *id, char *path, size_t len)
{
	return image_find(h, id, path, len) >= 0;
}

static double mib(uint64_t bytes)
{
	return (double)bytes / (1 << 20);
}

/* Compress M's raw memory image into its zstd one, then remove the raw
 * one: the end of a suspend, or of one a crash cut short.  SAVE_MS is how
 * long the save took (-1: unknown). */
static int compress_image(struct hostd *h, const struct machine *m, int64_t save_ms,
			  struct err *e)
{
	char raw[PATH_MAX], zst[PATH_MAX], saved[48] = "";
	struct zmem_stats st;
	int64_t t0 = mono_us();
	int rc;

	image_path(h, m->id, image_files[IMG_RAW], raw, sizeof(raw));
	image_path(h, m->id, image_files[IMG_ZST], zst, sizeof(zst));
	rc = zmem_compress(raw, zst, h->cfg.suspend_compress_level, &st, e);
	/* Like running a compressor: not hostd's own time. */
	ext_time_add(mono_us() - t0);
	if (rc < 0)
		return -1;
	hostd_crash_point(h, "suspend-after-compress");
	if (unlink(raw) < 0)
		log_warn("remove %s: %s", raw, strerror(errno));
	if (save_ms >= 0)
		snprintf(saved, sizeof(saved), "save %lld ms, ", (long long)save_ms);
	log_info("suspended %s/%s: memory %.1f MiB raw, %.1f MiB zstd (%.0f%%, level %d); "
		 "%scompress %lld ms", m->owner, m->name, mib(st.raw_bytes), mib(st.zst_bytes),
		 st.raw_bytes ? 100.0 * (double)st.zst_bytes / (double)st.raw_bytes : 0.0,
		 h->cfg.suspend_compress_level, saved, (long long)(st.us / 1000));
	return 0;
}

int memimage_suspend(struct hostd *h, struct machine *m, struct err *e)
{
	char raw[PATH_MAX];
	struct err ce = { 0 };
	int64_t t0 = mono_ms();

	/* The guest runs: whatever image it had is stale. */
	memimage_discard(h, m->id);
	image_path(h, m->id, image_files[IMG_RAW], raw, sizeof(raw));
	/* On failure the file stays: libvirt removes a save that failed, and
	 * one that completed although the call failed (a lost connection) is
	 * the memory of a suspended machine. */
	if (virt_save(h->virt, m->id, raw, e) < 0)
		return -1;
	hostd_crash_point(h, "suspend-after-save");
	if (compress_image(h, m, mono_ms() - t0, &ce) < 0)
		log_warn("suspend %s/%s: %s; its memory stays uncompressed in %s", m->owner,
			 m->name, ce.msg, raw);
	return 0;
}

/* Wake M from its memory image KIND at PATH.  libvirt restores it with the
 * guest's CPUs paused: a compressed image through a FIFO that a thread
 * fills while decompressing, so QEMU loads while the rest decompresses.
 * The guest runs only once the image proved whole and is removed. */
static int wake_from(struct hostd *h, struct machine *m, int kind, const char *path,
		     struct err *e)
{
	bool zst = image_is_zst(kind);
	char waking[PATH_MAX], fifo[PATH_MAX], woken[PATH_MAX];
	struct buf xml = BUF_INIT;
	struct zmem_feed *feed = NULL;
	struct err re = { 0 }, fe = { 0 };
	int rc = -1, frc = 0;
	int64_t t0 = mono_ms(), t_prep, t_restore, t_feed, t_removed;

	image_path(h, m->id, image_files[zst ? IMG_WAKE_ZST : IMG_WAKE_RAW], waking,
		   sizeof(waking));
	image_path(h, m->id, "wake.fifo", fifo, sizeof(fifo));
	/* hostd's XML of now, not the image's: its files made ready for its
	 * QEMU, the uid it runs as, a port of its own when another program
	 * took its SSH forward's (an image saved by an older berth included). */
	if (machine_port_refresh(h, m, e) < 0 || machine_xml_for_image(h, m, path, false, &xml, e) < 0)
		goto out;
	if (strcmp(path, waking) != 0 && rename(path, waking) < 0) {
		err_errno(e, errno, "rename %s", path);
		goto out;
	}
	hostd_crash_point(h, "wake-after-rename");
	if (zst) {
		unlink(fifo);
		if (mkfifo(fifo, 0600) < 0) {
			err_errno(&re, errno, "mkfifo %s", fifo);
			goto undo;
		}
		if (!(feed = zmem_feed_start(waking, fifo, &re)))
			goto undo;
	}
	t_prep = mono_ms();
	rc = virt_restore_paused(h->virt, zst ? fifo : waking, buf_str(&xml), &re);
	t_restore = mono_ms();
	if (feed)
		frc = zmem_feed_finish(feed, NULL, &fe);
	if (rc == 0 && frc < 0) {
		/* Restored from bytes that failed the check: never run it.  The
		 * image is no use; the disk is as it was at the suspend. */
		virt_destroy(h->virt, m->id, NULL);
		memimage_discard(h, m->id);
		err_set(e, 500, "memory_image", "wake %s: %s; the machine is stopped (its disk "
			"is as it was when suspended)", m->name, fe.msg);
		rc = -1;
		goto out;
	}
	if (rc < 0)
		goto undo;
	unlink(fifo);
	t_feed = mono_ms();
	/* Gone for good before the guest runs (see image_files).  A rename
	 * commits in a few ms; the unlink of a large file, fsynced, takes
	 * tens: that one comes after. */
	image_path(h, m->id, "woken", woken, sizeof(woken));
	if (rename(waking, woken) < 0)
		log_warn("rename %s: %s", waking, strerror(errno));
	sync_dir_of(waking);
	t_removed = mono_ms();
	hostd_crash_point(h, "wake-before-unpause");
	if (virt_unpause(h->virt, m->id, e) < 0)
		rc = -1;    /* restored, paused: resume unpauses it */
	unlink_later(woken);
	if (rc < 0)
		goto out;
	log_debug("machine %s/%s woke from %s in %lld ms: prepare %lld, restore %lld, "
		  "feed %lld, remove %lld, unpause %lld", m->owner, m->name, waking,
		  (long long)(mono_ms() - t0), (long long)(t_prep - t0),
		  (long long)(t_restore - t_prep), (long long)(t_feed - t_restore),
		  (long long)(t_removed - t_feed), (long long)(mono_ms() - t_removed));
	goto out;
undo:
	rc = -1;
	unlink(fifo);
	if (rename(waking, path) < 0)
		log_error("rename %s back to %s: %s (start-up reconciliation renames it)",
			  waking, path, strerror(errno));
	if (frc < 0)
		err_set(e, 500, "memory_image", "wake %s: %s (libvirt: %s)", m->name, fe.msg,
			re.msg);
	else if (e && !err_isset(e))
		*e = re;
out:
	buf_free(&xml);
	return rc;
}

int memimage_wake(struct hostd *h, struct machine *m, struct err *e)
{
	char path[PATH_MAX];
	int kind = image_find(h, m->id, path, sizeof(path));

	if (kind < 0)
		return err_set(e, 500, "internal", "machine %s has no memory image to wake from",
			       m->name);
	return wake_from(h, m, kind, path, e);
}

int64_t memimage_bytes(struct hostd *h, const struct machine *m)
{
	char path[PATH_MAX], name[200];
	struct stat st;

	if (m->state != MS_SUSPENDED)
		return -1;
	if (image_find(h, m->id, path, sizeof(path)) >= 0 && stat(path, &st) == 0)
		return st.st_size;
	machine_dom_name(h, m, name, sizeof(name));
	return virt_managed_save_bytes(h->virt, name);
}

/* A wake's FIFO left by a crash: libvirt may be waiting in its open() for
 * a writer that died.  Open it for writing and close it: that reader gets
 * an empty stream and its restore fails (the machine stays suspended),
 * instead of holding the domain's job for good.  Unlinked in between, so
 * no new reader finds it. */
void memimage_end_feed(struct hostd *h, const struct machine *m)
{
	char p[PATH_MAX];
	int fd;

	image_path(h, m->id, "wake.fifo", p, sizeof(p));
	fd = open(p, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd >= 0)
		log_warn("reconcile: %s/%s: ending a restore that waited for a wake cut short",
			 m->owner, m->name);
	unlink(p);
	if (fd >= 0)
		close(fd);
}

void memimage_reconcile(struct hostd *h, const struct machine *m, enum vstate *vs,
			     bool ran)
{
	static const int wakes[] = { IMG_WAKE_ZST, IMG_WAKE_RAW };
	char p[PATH_MAX], q[PATH_MAX], zst[PATH_MAX];
	bool live = *vs == VS_RUNNING || *vs == VS_PAUSED;
	struct err e = { 0 };

	image_path(h, m->id, "suspend.zst.part", p, sizeof(p));
	if (unlink(p) == 0)
		log_warn("reconcile: %s/%s: removed a compression of its memory that was cut short",
			 m->owner, m->name);
	image_path(h, m->id, "woken", p, sizeof(p));
	unlink(p);
	for (size_t i = 0; i < sizeof(wakes) / sizeof(wakes[0]); i++) {
		int w = wakes[i];
		image_path(h, m->id, image_files[w], p, sizeof(p));
		if (access(p, F_OK) != 0)
			continue;
		if (live) {
			/* libvirt restored it; only the removal and the unpause
			 * were left (the paused machine is resumed below). */
			log_warn("reconcile: %s/%s: finishing a wake that was cut short", m->owner,
				 m->name);
			unlink(p);
			sync_dir_of(p);
		} else if (!ran) {
			image_path(h, m->id, image_files[w == IMG_WAKE_ZST ? IMG_ZST : IMG_RAW], q,
				   sizeof(q));
			log_warn("reconcile: %s/%s: a wake was cut short; it stays suspended",
				 m->owner, m->name);
			if (rename(p, q) < 0)
				log_error("reconcile: rename %s to %s: %s", p, q, strerror(errno));
		}
	}
	if (live || ran) {
		/* Its memory is the live one, or it ran since the save. */
		if (memimage_discard(h, m->id))
			log_warn("reconcile: %s/%s is %s%s; removed its stale memory image", m->owner,
				 m->name, vstate_name(*vs), live ? "" : " and ran since it was saved");
		return;
	}
	image_path(h, m->id, image_files[IMG_RAW], p, sizeof(p));
	image_path(h, m->id, image_files[IMG_ZST], zst, sizeof(zst));
	if (access(p, F_OK) == 0) {
		if (access(zst, F_OK) == 0 || !virt_save_image_complete(p)) {
			/* Compressed already, or a save that never completed. */
			unlink(p);
		} else if (h->cfg.suspend_compress) {
			log_warn("reconcile: %s/%s: finishing its suspend (compressing its memory)",
				 m->owner, m->name);
			if (compress_image(h, m, -1, &e) < 0)
				log_error("reconcile: %s/%s: %s; its memory stays uncompressed",
					  m->owner, m->name, e.msg);
		}
	}
	if (*vs == VS_STOPPED && image_find(h, m->id, NULL, 0) >= 0)
		*vs = VS_SUSPENDED;
}
