#include "hostd/machine.h"

#include <dirent.h>
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
#include "common/sshexec.h"
#include "common/util.h"
#include "hostd/idle.h"
#include "hostd/billing.h"
#include "hostd/seed.h"
#include "hostd/sessions.h"
#include "hostd/zmem.h"
#include "common/banned.h"

static const char *const action_names[] = {
	[ACT_START] = "start", [ACT_STOP] = "stop", [ACT_SUSPEND] = "suspend",
	[ACT_RESUME] = "resume", [ACT_RESTART] = "restart",
};

int machine_action_parse(const char *s, enum machine_action *out)
{
	for (size_t i = 0; i < sizeof(action_names) / sizeof(action_names[0]); i++) {
		if (strcmp(s, action_names[i]) == 0) {
			*out = (enum machine_action)i;
			return 0;
		}
	}
	return -1;
}

static void machine_dir(struct hostd *h, const char *id, char *out, size_t outlen)
{
	snprintf(out, outlen, "%s/machines/%s", h->cfg.state_dir, id);
}

static void dom_name(struct hostd *h, const struct machine *m, char *out, size_t outlen)
{
	/* A machine name has no '.', so OWNER.NAME never collides. */
	snprintf(out, outlen, "%s%s.%s", h->dom_prefix, m->owner, m->name);
}

/* A suspended machine's memory when hostd keeps it (suspend_compress; else
 * it is libvirt's managed save image): files in the machine's directory,
 * by stage.
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
	snprintf(out, outlen, "%s/%s", dir, file);
}

static bool image_is_zst(int kind)
{
	return kind == IMG_ZST || kind == IMG_WAKE_ZST;
}

/* The memory image machine ID wakes from (an enum mem_image), its path
 * into PATH (may be NULL); -1 when it has none. */
static int saved_image(struct hostd *h, const char *id, char *path, size_t len)
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

/* Remove every memory image file of machine ID, durably.  How many. */
static int discard_images(struct hostd *h, const char *id)
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

/* virt_state, counting hostd's memory images: a shut-off domain with one
 * that it has not run since is suspended. */
static int machine_state(struct hostd *h, const char *id, enum vstate *vs, struct err *e)
{
	bool ran = false;

	if (virt_state_ran(h->virt, id, vs, &ran, e) < 0)
		return -1;
	if (*vs == VS_STOPPED && !ran && saved_image(h, id, NULL, 0) >= 0)
		*vs = VS_SUSPENDED;
	return 0;
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

/* Suspend the running M into hostd's own memory image: libvirt saves it
 * raw, hostd compresses it.  A failed compression keeps the raw image (the
 * machine is suspended all the same, and wakes from it). */
static int suspend_to_image(struct hostd *h, struct machine *m, struct err *e)
{
	char raw[PATH_MAX];
	struct err ce = { 0 };
	int64_t t0 = mono_ms();

	/* The guest runs: whatever image it had is stale. */
	discard_images(h, m->id);
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

/* network=user: M's SSH forward, as the image at PATH would restore it,
 * must be M's port, which first moves if another program took it.  XML
 * gets the image's domain XML with the port changed when it differs, and
 * stays empty when it does not. */
static int image_port_xml(struct hostd *h, struct machine *m, const char *path,
			  struct buf *xml, struct err *e)
{
	static const char fwd[] = "hostfwd=tcp:127.0.0.1:";
	struct buf head = BUF_INIT;
	size_t want, need = 64 << 10;
	char *saved = NULL, *at, *end;
	int r, rc = -1;

	if (!port_is_free(m->ssh_port)) {
		int p = machine_pick_port(h);
		if (p < 0)
			return err_set(e, 503, "no_port", "no free loopback port for %s", m->name);
		if (db_machine_set_port(h->db, m->id, p, e) < 0)
			return -1;
		log_info("machine %s: port %d is taken; SSH moves to %d", m->name, m->ssh_port, p);
		m->ssh_port = p;
	}
	do {
		int64_t t0 = mono_us();
		want = need;
		buf_reset(&head);
		r = zmem_head(path, want, &head, e);
		ext_time_add(mono_us() - t0);
		if (r == 0)
			r = virt_save_image_xml(head.data, head.len, &need, &saved, e);
		if (r == 1 && (head.len < want || need <= want))
			r = err_set(e, 500, "memory_image", "%s is truncated", path);
	} while (r == 1);
	if (r < 0)
		goto out;
	at = strstr(saved, fwd);
	if (!at) {
		err_set(e, 500, "memory_image", "%s has no SSH forward in its domain XML", path);
		goto out;
	}
	at += strlen(fwd);
	if (strtol(at, &end, 10) != m->ssh_port) {
		buf_add(xml, saved, (size_t)(at - saved));
		buf_printf(xml, "%d", m->ssh_port);
		buf_adds(xml, end);
	}
	rc = 0;
out:
	free(saved);
	buf_free(&head);
	return rc;
}

/* Wake M from its memory image KIND at PATH.  libvirt restores it with the
 * guest's CPUs paused: a compressed image through a FIFO that a thread
 * fills while decompressing, so QEMU loads while the rest decompresses.
 * The guest runs only once the image proved whole and is removed. */
static int wake_from_image(struct hostd *h, struct machine *m, int kind, const char *path,
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
	if (strcmp(h->cfg.network, "user") == 0 && image_port_xml(h, m, path, &xml, e) < 0)
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
	rc = virt_restore_paused(h->virt, zst ? fifo : waking, xml.len ? buf_str(&xml) : NULL,
				 &re);
	t_restore = mono_ms();
	if (feed)
		frc = zmem_feed_finish(feed, NULL, &fe);
	if (rc == 0 && frc < 0) {
		/* Restored from bytes that failed the check: never run it.  The
		 * image is no use; the disk is as it was at the suspend. */
		virt_destroy(h->virt, m->id, NULL);
		discard_images(h, m->id);
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

void machine_vnc_path(struct hostd *h, const char *id, char *out, size_t outlen)
{
	snprintf(out, outlen, "%s/machines/%s/vnc.sock", h->cfg.state_dir, id);
}

void machine_agent_path(struct hostd *h, const char *id, char *out, size_t outlen)
{
	snprintf(out, outlen, "%s/machines/%s/agent.sock", h->cfg.state_dir, id);
}

static int xml_render(struct hostd *h, const struct machine *m, bool agent, struct buf *xml,
		      struct err *e)
{
	struct image img;
	struct storage_vol_info vi;
	char dir[PATH_MAX], seed[PATH_MAX], log[PATH_MAX], vnc[PATH_MAX], name[200];
	char agent_sock[PATH_MAX];

	if (db_image_get(h->db, m->image, &img, e) < 0 ||
	    storage_vol_info(h->st, m->volume, &vi, e) < 0)
		return -1;
	machine_dir(h, m->id, dir, sizeof(dir));
	snprintf(seed, sizeof(seed), "%s/seed.iso", dir);
	snprintf(log, sizeof(log), "%s/console.log", dir);
	machine_vnc_path(h, m->id, vnc, sizeof(vnc));
	machine_agent_path(h, m->id, agent_sock, sizeof(agent_sock));
	dom_name(h, m, name, sizeof(name));
	struct domain_spec s = {
		.dom_name = name, .uuid = m->id, .owner = m->owner, .name = m->name,
		.kvm = virt_kvm(h->virt), .vcpus = m->vcpus, .memory = m->memory,
		.kernel = img.kernel, .initrd = img.initrd, .cmdline = img.cmdline,
		.disk_path = vi.path, .disk_format = vi.format, .disk_block = vi.block,
		.seed_path = seed, .mac = m->mac, .network = h->cfg.network,
		.nat_network = h->cfg.nat_network, .ssh_port = m->ssh_port,
		.console_log = log, .vnc_socket = vnc,
		.agent_socket = agent ? agent_sock : NULL,
	};
	return virt_domain_xml(&s, xml, e);
}

int machine_xml(struct hostd *h, const struct machine *m, struct buf *xml, struct err *e)
{
	return xml_render(h, m, true, xml, e);
}

int machine_xml_for_image(struct hostd *h, const struct machine *m, const char *path,
			  struct buf *xml, struct err *e)
{
	struct buf head = BUF_INIT;
	size_t need = 64 * 1024, want;
	char *saved = NULL;
	int r;

	do {
		want = need;
		buf_reset(&head);
		r = zmem_head(path, want, &head, e);
		if (r == 0)
			r = virt_save_image_xml(head.data, head.len, &need, &saved, e);
		if (r == 1 && (head.len < want || need <= want))
			r = err_set(e, 500, "memory_image", "%s is truncated", path);
	} while (r == 1);
	buf_free(&head);
	if (r < 0)
		return -1;
	r = xml_render(h, m, strstr(saved, "com.redhat.spice.0") != NULL, xml, e);
	free(saved);
	return r;
}

int machine_define(struct hostd *h, const struct machine *m, struct err *e)
{
	struct buf xml = BUF_INIT;
	int rc = -1;

	if (machine_xml(h, m, &xml, e) == 0 && virt_define(h->virt, buf_str(&xml), e) == 0)
		rc = 0;
	buf_free(&xml);
	return rc;
}

/* A loopback port for M's SSH forward that no machine and no process uses. */
int machine_pick_port(struct hostd *h)
{
	for (int i = 0; i < 50; i++) {
		int p = port_pick_free();
		if (p > 0 && !db_port_used(h->db, p))
			return p;
	}
	return -1;
}

void volume_gc(struct hostd *h, const char *vol)
{
	char cur[80], parent[80];
	struct err e = { 0 };

	snprintf(cur, sizeof(cur), "%s", vol);
	while (cur[0]) {
		err_clear(&e);
		if (!storage_vol_exists(h->st, cur) || db_volume_named(h->db, cur, &e) != 0 ||
		    storage_vol_dependents(h->st, cur, &e) != 0 ||
		    storage_vol_parent(h->st, cur, parent, sizeof(parent), &e) < 0)
			break;
		if (storage_vol_remove(h->st, cur, &e) < 0) {
			log_error("remove volume %s: %s", cur, e.msg);
			break;
		}
		log_debug("removed volume %s (nothing names or needs it)", cur);
		snprintf(cur, sizeof(cur), "%s", parent);
	}
}

/* Remove every resource of M (domain, machine dir, row, checkpoints) and
 * then its volumes, unless other volumes still depend on them (forks keep
 * the checkpoints they were made from).  Used to undo a failed or
 * interrupted create and to finish a delete.  Keeps going after a failure
 * and reports the first. */
static int machine_destroy_all(struct hostd *h, const struct machine *m, struct err *e)
{
	char dir[PATH_MAX];
	struct checkpoint *cs = NULL;
	size_t nc = 0;
	int rc = 0;

	machine_dir(h, m->id, dir, sizeof(dir));
	if (virt_remove(h->virt, m->id, e) < 0)
		rc = -1;
	if (remove_tree(dir, e) < 0)
		rc = -1;
	if (rc < 0)
		return -1;
	if (db_ckpt_list(h->db, m->id, &cs, &nc, e) < 0 || db_machine_delete(h->db, m->id, e) < 0) {
		free(cs);
		return -1;
	}
	/* The rows are gone: a crash from here leaves volumes that nothing
	 * names, which start-up reconciliation collects. */
	if (m->volume[0])
		volume_gc(h, m->volume);
	for (size_t i = 0; i < nc; i++)
		volume_gc(h, cs[i].volume);
	free(cs);
	return 0;
}

static int validate_create(struct hostd *h, const struct create_req *r,
			   struct image *img, struct err *e)
{
	char a[32], b[32];

	if (!name_valid(r->name))
		return err_set(e, 400, "invalid_name",
			       "invalid machine name '%s': use 1 to 63 of a-z, 0-9 and '-', "
			       "not starting or ending with '-'", r->name);
	if (!name_valid(r->image))
		return err_set(e, 400, "invalid_image", "invalid image name '%s'", r->image);
	if (r->vcpus < 1 || r->vcpus > h->cfg.max_vcpus)
		return err_set(e, 400, "invalid_vcpus", "vcpus %d is out of range 1..%d",
			       r->vcpus, h->cfg.max_vcpus);
	if (r->memory < h->cfg.min_memory || r->memory > h->cfg.max_memory ||
	    r->memory % (1 << 20)) {
		size_format(h->cfg.min_memory, a, sizeof(a));
		size_format(h->cfg.max_memory, b, sizeof(b));
		return err_set(e, 400, "invalid_memory",
			       "memory %llu bytes is out of range %s..%s (whole MiB)",
			       (unsigned long long)r->memory, a, b);
	}
	if (r->disk % 512)
		return err_set(e, 400, "invalid_disk",
			       "disk %llu bytes is not a multiple of 512 bytes",
			       (unsigned long long)r->disk);
	if (db_image_get(h->db, r->image, img, e) < 0)
		return -1;
	if (r->disk && (r->disk < img->virtual_size || r->disk > h->cfg.max_disk)) {
		size_format(img->virtual_size, a, sizeof(a));
		size_format(h->cfg.max_disk, b, sizeof(b));
		return err_set(e, 400, "invalid_disk",
			       "disk %llu bytes is out of range %s (image %s)..%s",
			       (unsigned long long)r->disk, a, r->image, b);
	}
	return 0;
}

int machine_create(struct hostd *h, const struct create_req *r,
		   struct machine *out, struct err *e)
{
	return machine_create_from(h, r, NULL, out, e);
}

int machine_create_from(struct hostd *h, const struct create_req *r, const char *base,
			struct machine *out, struct err *e)
{
	struct image img;
	struct machine m;
	char dir[PATH_MAX];
	const char *keys[] = { h->key.public_line, NULL };

	memset(&m, 0, sizeof(m));
	if (validate_create(h, r, &img, e) < 0)
		return -1;
	if (uuid_generate(m.id) < 0 || mac_generate(m.mac) < 0)
		return err_errno(e, errno, "random");
	snprintf(m.owner, sizeof(m.owner), "%s", r->owner);
	snprintf(m.name, sizeof(m.name), "%s", r->name);
	snprintf(m.image, sizeof(m.image), "%s", r->image);
	snprintf(m.volume, sizeof(m.volume), "m-%s", m.id);
	m.vcpus = r->vcpus;
	m.memory = r->memory;
	m.disk = r->disk ? r->disk : img.virtual_size;
	m.idle_timeout = r->idle_timeout;
	if (strcmp(h->cfg.network, "user") == 0 && (m.ssh_port = machine_pick_port(h)) < 0)
		return err_set(e, 503, "no_port", "no free loopback port for %s's SSH", r->name);

	/* The row comes first: from here on a crash leaves a "creating" row
	 * that start-up reconciliation undoes. */
	if (db_machine_insert(h->db, &m, e) < 0)
		return -1;
	if (busy_acquire(h->busy, m.id, "create", m.name, e) < 0)
		goto undo;
	hostd_crash_point(h, "create-after-row");
	if (storage_vol_create(h->st, m.volume, base ? base : img.volume, m.disk, e) < 0)
		goto undo;
	hostd_crash_point(h, "create-after-volume");
	machine_dir(h, m.id, dir, sizeof(dir));
	if (mkdir_p(dir, 0700) < 0) {
		err_errno(e, errno, "create %s", dir);
		goto undo;
	}
	struct seed s = { .instance_id = m.id, .hostname = m.name, .user = img.user, .keys = keys };
	if (seed_write(&s, dir, e) < 0)
		goto undo;
	hostd_crash_point(h, "create-after-seed");
	if (machine_define(h, &m, e) < 0)
		goto undo;
	hostd_crash_point(h, "create-after-define");
	if (db_machine_set_state(h->db, m.id, "stopped", e) < 0)
		goto undo;
	busy_release(h->busy, m.id);
	log_info("created machine %s/%s (%s, %d vCPU, %llu MiB, image %s)", m.owner,
		 m.name, m.id, m.vcpus, (unsigned long long)(m.memory >> 20), m.image);
	return db_machine_get_id(h->db, m.id, out, e);
undo:
	log_warn("create %s/%s failed: %s; removing what it made", m.owner, m.name, e->msg);
	if (machine_destroy_all(h, &m, NULL) < 0)
		log_error("create %s/%s: cleanup incomplete; start-up reconciliation will retry",
			  m.owner, m.name);
	busy_release(h->busy, m.id);
	return -1;
}

int machine_endpoint(struct hostd *h, const struct machine *m, char *host,
		     size_t hostlen, int *port, struct err *e)
{
	if (strcmp(h->cfg.network, "user") == 0) {
		snprintf(host, hostlen, "127.0.0.1");
		*port = m->ssh_port;
		return 0;
	}
	*port = 22;
	return virt_nat_address(h->virt, m->id, host, hostlen, e);
}

int machine_wait_ready(struct hostd *h, const struct machine *m, int timeout_s,
		      struct err *e)
{
	int64_t deadline = mono_ms() + (int64_t)timeout_s * 1000;
	char host[64];
	int port;

	while (mono_ms() < deadline) {
		enum vstate vs;
		if (virt_state(h->virt, m->id, &vs, e) < 0)
			return -1;
		if (vs != VS_RUNNING && vs != VS_BUSY)
			return err_set(e, 409, "not_running",
				       "machine %s stopped while booting (state %s); see its console log",
				       m->name, vstate_name(vs));
		/* A slow guest (TCG in TCG: 2-5 s) sends its banner late: a
		 * probe waits up to 10 s for it, never past the deadline. */
		int64_t left = deadline - mono_ms();
		int r = machine_endpoint(h, m, host, sizeof(host), &port, NULL);
		if (r == 0 && sshexec_banner_ready(host, port, left < 10000 ? (int)left : 10000))
			return 0;
		usleep(200 * 1000);
	}
	return err_set(e, 504, "timeout", "machine %s: SSH did not answer within %d s",
		       m->name, timeout_s);
}

/* Start M from stopped (a cold boot: the domain is redefined so its XML
 * follows the config) or from suspended (restore the saved memory). */
int machine_do_start(struct hostd *h, struct machine *m, enum vstate vs, struct err *e)
{
	char image[PATH_MAX];
	int kind;

	if (vs == VS_SUSPENDED && (kind = saved_image(h, m->id, image, sizeof(image))) >= 0)
		return wake_from_image(h, m, kind, image, e);
	/* From here a suspended machine has libvirt's managed save image. */
	if (vs == VS_SUSPENDED && strcmp(h->cfg.network, "user") == 0 &&
	    !port_is_free(m->ssh_port)) {
		/* The saved QEMU would fail to bind its forward, for good. */
		int p = machine_pick_port(h);
		if (p < 0)
			return err_set(e, 503, "no_port", "no free loopback port for %s", m->name);
		/* The database first: if the image cannot be rewritten, it is
		 * put back; the other way round would lose the new port. */
		if (db_machine_set_port(h->db, m->id, p, e) < 0)
			return -1;
		if (virt_saved_set_port(h->virt, m->id, m->ssh_port, p, e) < 0) {
			db_machine_set_port(h->db, m->id, m->ssh_port, NULL);
			return -1;
		}
		log_info("machine %s: port %d is taken; SSH moves to %d", m->name, m->ssh_port, p);
		m->ssh_port = p;
	}
	if (vs == VS_STOPPED || vs == VS_MISSING) {
		/* A cold boot: a memory image left behind is stale from now on. */
		if (discard_images(h, m->id))
			log_warn("machine %s/%s: removed a memory image it had run since", m->owner,
				 m->name);
		if (strcmp(h->cfg.network, "user") == 0 && !port_is_free(m->ssh_port)) {
			int p = machine_pick_port(h);
			if (p < 0)
				return err_set(e, 503, "no_port", "no free loopback port for %s", m->name);
			log_info("machine %s: port %d is taken; SSH moves to %d", m->name,
				 m->ssh_port, p);
			if (db_machine_set_port(h->db, m->id, p, e) < 0)
				return -1;
			m->ssh_port = p;
		}
		if (machine_define(h, m, e) < 0)
			return -1;
	}
	return virt_start(h->virt, m->id, e);
}

int machine_do_stop(struct hostd *h, struct machine *m, enum vstate vs, int timeout_s,
		   struct err *e)
{
	bool forced = false;

	if (vs == VS_STOPPED || vs == VS_MISSING)
		return 0;
	if (vs == VS_SUSPENDED) {
		/* Stopping a suspended machine discards its saved memory: hostd's
		 * image, or libvirt's managed save, for which undefine-and-redefine
		 * is the portable way to drop it. */
		enum vstate lv;
		discard_images(h, m->id);
		if (virt_state(h->virt, m->id, &lv, e) < 0)
			return -1;
		if (lv == VS_SUSPENDED &&
		    (virt_remove(h->virt, m->id, e) < 0 || machine_define(h, m, e) < 0))
			return -1;
		return 0;
	}
	if (virt_shutdown(h->virt, m->id, timeout_s, &forced, e) < 0)
		return -1;
	if (forced)
		log_warn("machine %s/%s did not shut down within %d s; forced off",
			 m->owner, m->name, timeout_s);
	return 0;
}

int machine_begin(struct hostd *h, const char *owner, const char *name, const char *op,
		  struct machine *m, enum vstate *vs, struct err *e)
{
	if (db_machine_get(h->db, owner, name, m, e) < 0)
		return -1;
	if (busy_acquire(h->busy, m->id, op, m->name, e) < 0)
		return -1;
	/* Read it again under the mark: the operation before may have moved
	 * its port or volume. */
	if (db_machine_get_id(h->db, m->id, m, e) < 0) {
		busy_release(h->busy, m->id);
		return -1;
	}
	if (strcmp(m->state, "creating") == 0 || strcmp(m->state, "deleting") == 0 ||
	    machine_state(h, m->id, vs, e) < 0) {
		err_set(e, 409, "busy", "machine %s is %s", name, m->state);
		busy_release(h->busy, m->id);
		return -1;
	}
	return 0;
}

void machine_end(struct hostd *h, struct machine *m)
{
	enum vstate vs;

	/* Record what libvirt says now, whatever happened. */
	if (machine_state(h, m->id, &vs, NULL) == 0 && vs != VS_BUSY && vs != VS_MISSING)
		db_machine_set_state(h->db, m->id, vstate_name(vs), NULL);
	busy_release(h->busy, m->id);
}

int machine_act(struct hostd *h, const char *owner, const char *name,
		enum machine_action a, const struct act_opts *o,
		struct machine *out, int64_t *ready_ms, struct err *e)
{
	struct machine m;
	enum vstate vs;
	int rc = -1;
	int timeout = o && o->timeout_s > 0 ? o->timeout_s : h->cfg.stop_timeout_s;
	int64_t t0 = mono_ms();

	if (ready_ms)
		*ready_ms = -1;
	if (machine_begin(h, owner, name, action_names[a], &m, &vs, e) < 0)
		return -1;
	switch (a) {
	case ACT_START:
	case ACT_RESUME:
		if (a == ACT_RESUME && vs == VS_STOPPED) {
			err_set(e, 409, "not_suspended",
				"machine %s is stopped, not suspended: use start", name);
			goto out;
		}
		if (vs == VS_PAUSED) {
			/* berth pauses guests only for a moment (a checkpoint, a
			 * wake): a paused one was left so by a crash or by libvirt.
			 * A memory image it was restored from goes before it runs. */
			discard_images(h, m.id);
			if (virt_unpause(h->virt, m.id, e) < 0)
				goto out;
		} else if (vs != VS_RUNNING && machine_do_start(h, &m, vs, e) < 0) {
			goto out;
		}
		break;
	case ACT_STOP:
		if (machine_do_stop(h, &m, vs, timeout, e) < 0)
			goto out;
		break;
	case ACT_SUSPEND:
		if (vs == VS_SUSPENDED)
			break;
		if (vs != VS_RUNNING && vs != VS_PAUSED) {
			err_set(e, 409, "not_running",
				"machine %s is %s: only a running machine can be suspended",
				name, vstate_name(vs));
			goto out;
		}
		if (h->cfg.suspend_compress ? suspend_to_image(h, &m, e) < 0
					    : virt_managed_save(h->virt, m.id, e) < 0)
			goto out;
		break;
	case ACT_RESTART:
		if (machine_do_stop(h, &m, vs, timeout, e) < 0)
			goto out;
		/* The machine was off in between: the ledger says so. */
		if (vs != VS_STOPPED && db_machine_set_state(h->db, m.id, "stopped", e) < 0)
			goto out;
		if (machine_do_start(h, &m, VS_STOPPED, e) < 0)
			goto out;
		break;
	}
	rc = 0;
out:
	machine_end(h, &m);
	if (rc == 0 && o && o->wait && a != ACT_STOP && a != ACT_SUSPEND) {
		if (machine_wait_ready(h, &m, h->cfg.boot_timeout_s, e) < 0)
			rc = -1;
		else if (ready_ms)
			*ready_ms = mono_ms() - t0;
	}
	if (rc == 0)
		rc = db_machine_get_id(h->db, m.id, out, e);
	return rc;
}

int machine_delete(struct hostd *h, const char *owner, const char *name,
		   struct err *e)
{
	struct machine m;
	int rc;

	if (db_machine_get(h->db, owner, name, &m, e) < 0)
		return -1;
	if (busy_acquire(h->busy, m.id, "delete", m.name, e) < 0)
		return -1;
	if (db_machine_get_id(h->db, m.id, &m, e) < 0) {
		busy_release(h->busy, m.id);
		return -1;
	}
	/* Journal first: a crash from here on is finished at start-up. */
	rc = db_machine_set_state(h->db, m.id, "deleting", e);
	if (rc == 0)
		rc = machine_destroy_all(h, &m, e);
	busy_release(h->busy, m.id);
	if (rc == 0)
		log_info("deleted machine %s/%s", m.owner, m.name);
	return rc;
}

/* What a suspended machine's saved memory takes on disk: hostd's image,
 * or libvirt's; -1 when it is not suspended or nothing tells. */
static int64_t memory_bytes(struct hostd *h, const struct machine *m)
{
	char path[PATH_MAX], name[200];
	struct stat st;

	if (strcmp(m->state, "suspended") != 0)
		return -1;
	if (saved_image(h, m->id, path, sizeof(path)) >= 0 && stat(path, &st) == 0)
		return st.st_size;
	dom_name(h, m, name, sizeof(name));
	return virt_managed_save_bytes(h->virt, name);
}

static void add_key(struct buf *b, const char *key)
{
	buf_add(b, ",\"", 2);
	buf_adds(b, key);
	buf_add(b, "\":", 2);
}

static void add_str(struct buf *b, const char *key, const char *v)
{
	add_key(b, key);
	buf_add_json_str(b, v);
}

static void add_int(struct buf *b, const char *key, long long v)
{
	char n[24];

	add_key(b, key);
	buf_add(b, n, (size_t)snprintf(n, sizeof(n), "%lld", v));
}

void machine_write_json(struct hostd *h, const struct machine *m, const char *user,
			int64_t allocated, struct buf *b)
{
	char host[64], name[200], t[32];
	int port = 0;
	int64_t mem;
	const char *op;
	uint64_t done, total;
	struct idle_view iv;

	dom_name(h, m, name, sizeof(name));
	buf_adds(b, "{\"id\":");
	buf_add_json_str(b, m->id);
	add_str(b, "name", m->name);
	add_str(b, "owner", m->owner);
	add_str(b, "image", m->image);
	add_str(b, "state", m->state);
	add_int(b, "vcpus", m->vcpus);
	add_int(b, "memory", (long long)m->memory);
	add_int(b, "disk", (long long)m->disk);
	add_int(b, "created", m->created);
	add_int(b, "state_since", m->state_since);
	add_str(b, "mac", m->mac);
	add_key(b, "ssh");
	if (machine_endpoint(h, m, host, sizeof(host), &port, NULL) == 0) {
		buf_adds(b, "{\"host\":");
		buf_add_json_str(b, host);
		add_int(b, "port", port);
		add_str(b, "user", user);
		buf_adds(b, "}");
	} else {
		buf_adds(b, "null");
	}
	add_str(b, "domain", name);
	add_str(b, "hypervisor", virt_hypervisor(h->virt));
	if (allocated >= 0)
		add_int(b, "allocated", allocated);
	if ((mem = memory_bytes(h, m)) >= 0)
		add_int(b, "memory_bytes", mem);
	/* The gateways' live sessions on it (the idle policy reads them). */
	add_int(b, "sessions", sessions_count(h->sessions, m->id));
	idle_view(h, m, &iv);
	duration_format(iv.timeout, t, sizeof(t));
	add_key(b, "idle");
	buf_adds(b, "{\"timeout\":");
	buf_add_json_str(b, t);
	add_int(b, "timeout_s", iv.timeout);
	add_key(b, "default");
	buf_adds(b, iv.is_default ? "true" : "false");
	if (iv.seen) {
		add_int(b, "quiet_s", iv.quiet_s);
		add_str(b, "last_activity", iv.last_activity);
		add_int(b, "cpu_percent", iv.cpu_percent);
		if (iv.timeout > 0)
			add_int(b, "suspend_in_s", iv.timeout > iv.quiet_s ? iv.timeout - iv.quiet_s : 0);
	}
	buf_adds(b, "}");
	/* A long operation in progress (an export), with its progress. */
	if (busy_get(h->busy, m->id, &op, &done, &total) && total) {
		add_key(b, "operation");
		buf_adds(b, "{\"op\":");
		buf_add_json_str(b, op);
		add_int(b, "done", (long long)done);
		add_int(b, "total", (long long)total);
		buf_adds(b, "}");
	}
	buf_adds(b, "}");
}

json_t *machine_json(struct hostd *h, const struct machine *m)
{
	struct storage_vol_info vi;
	struct image img;
	struct buf b = BUF_INIT;
	json_t *j;

	machine_write_json(h, m, db_image_get(h->db, m->image, &img, NULL) == 0 ? img.user : "root",
			   storage_vol_info(h->st, m->volume, &vi, NULL) == 0
				   ? (int64_t)vi.allocated_bytes : -1, &b);
	j = json_loadb(b.data, b.len, 0, NULL);
	if (!j) {
		/* The writer's own output: a bug, not input; still answered. */
		log_error("machine %s: its JSON does not parse: %s", m->id, buf_str(&b));
		j = json_pack("{s:s, s:s, s:s}", "id", m->id, "state", m->state, "error",
			      "internal: see hostd's log");
	}
	buf_free(&b);
	return j;
}

void machine_on_event(const char *uuid, enum vstate now, void *data)
{
	struct hostd *h = data;
	struct machine m;

	/* An operation in progress records its own outcome; the events it
	 * causes on the way (paused during a save, ...) are not states. */
	if (busy_held(h->busy, uuid))
		return;
	if (db_machine_get_id(h->db, uuid, &m, NULL) < 0)
		return;
	if (strcmp(m.state, "creating") == 0 || strcmp(m.state, "deleting") == 0)
		return;
	/* Saved into hostd's own image: libvirt only sees it stop. */
	if (now == VS_STOPPED && saved_image(h, uuid, NULL, 0) >= 0)
		now = VS_SUSPENDED;
	if (strcmp(m.state, vstate_name(now)) != 0)
		log_info("libvirt reports %s/%s %s", m.owner, m.name, vstate_name(now));
	db_machine_set_state(h->db, uuid, vstate_name(now), NULL);
}

struct sweep {
	struct hostd *h;
	struct machine *ms;
	size_t n;
	struct buf in_use;   /* " VOL VOL ": volumes a domain of ours references */
};

static bool known_machine(const struct sweep *s, const char *uuid)
{
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->ms[i].id, uuid) == 0)
			return true;
	return false;
}

static void volume_at(struct hostd *h, const char *path, char *out, size_t len);

static void sweep_domain(const char *name, const char *uuid, void *data)
{
	struct sweep *s = data;
	struct err e = { 0 };
	char path[4096], vol[80];

	if (known_machine(s, uuid)) {
		if (virt_disk_path(s->h->virt, uuid, path, sizeof(path), NULL) == 0) {
			volume_at(s->h, path, vol, sizeof(vol));
			if (vol[0])
				buf_printf(&s->in_use, " %s ", vol);
		}
		return;
	}
	log_warn("reconcile: domain %s (%s) has no machine; removing it", name, uuid);
	if (virt_remove(s->h->virt, uuid, &e) < 0)
		log_error("reconcile: %s", e.msg);
}

static void sweep_volume(const char *vol, void *data)
{
	struct sweep *s = data;
	char key[100];

	/* A disk some domain of ours references is never collected, whatever
	 * the database says. */
	snprintf(key, sizeof(key), " %s ", vol);
	if (strstr(buf_str(&s->in_use), key))
		return;

	if (storage_vol_exists(s->h->st, vol) && db_volume_named(s->h->db, vol, NULL) == 0 &&
	    storage_vol_dependents(s->h->st, vol, NULL) == 0)
		log_warn("reconcile: volume %s is named by nothing and needed by nothing; removing it",
			 vol);
	volume_gc(s->h, vol);
}

struct find_path {
	struct hostd *h;
	const char *path;
	char vol[80];
};

static void match_path(const char *vol, void *data)
{
	struct find_path *f = data;
	struct storage_vol_info vi;

	if (storage_vol_info(f->h->st, vol, &vi, NULL) == 0 && strcmp(vi.path, f->path) == 0)
		snprintf(f->vol, sizeof(f->vol), "%s", vol);
}

/* Whether volume ABOVE is layered (at any depth) on volume BELOW. */
static bool layered_on(struct hostd *h, const char *above, const char *below)
{
	char cur[80], parent[80];

	snprintf(cur, sizeof(cur), "%s", above);
	for (int depth = 0; depth < 1000; depth++) {
		if (storage_vol_parent(h->st, cur, parent, sizeof(parent), NULL) < 0 || !parent[0])
			return false;
		if (strcmp(parent, below) == 0)
			return true;
		snprintf(cur, sizeof(cur), "%s", parent);
	}
	return false;
}

/* The volume at PATH, into OUT ("" when none). */
static void volume_at(struct hostd *h, const char *path, char *out, size_t len)
{
	struct find_path f = { .h = h, .path = path };

	out[0] = '\0';
	if (storage_vol_list(h->st, match_path, &f, NULL) == 0)
		snprintf(out, len, "%s", f.vol);
}

/* A domain's disk may be newer than the database: a crash between a
 * checkpoint's snapshot (live: QEMU already writes the new volume;
 * stopped: the definition already names it) and its database update.
 * When the domain's volume is layered on the database's, follow the
 * domain: the writes after the checkpoint are there. */
static void sync_domain_volume(struct hostd *h, struct machine *m)
{
	char path[4096], vol[80];
	struct storage_vol_info vi;

	if (virt_disk_path(h->virt, m->id, path, sizeof(path), NULL) != 0 ||
	    (storage_vol_info(h->st, m->volume, &vi, NULL) == 0 && strcmp(vi.path, path) == 0))
		return;
	volume_at(h, path, vol, sizeof(vol));
	if (!vol[0]) {
		log_error("reconcile: %s/%s's domain uses %s, which is no volume", m->owner, m->name,
			  path);
		return;
	}
	if (!layered_on(h, vol, m->volume))
		return;   /* an older definition: the next start redefines it */
	log_warn("reconcile: %s/%s's domain uses volume %s, layered on %s that the database "
		 "names; following the domain", m->owner, m->name, vol, m->volume);
	if (db_machine_set_volume(h->db, m->id, vol, NULL) == 0)
		snprintf(m->volume, sizeof(m->volume), "%s", vol);
}

/* Remove memory images in machine M's directory that no checkpoint names
 * (a crash between a memory snapshot and its row). */
static void sweep_memory_images(struct hostd *h, const struct machine *m)
{
	char dir[PATH_MAX], path[PATH_MAX];
	struct checkpoint *cs = NULL;
	size_t n = 0;
	struct dirent *de;
	DIR *d;

	machine_dir(h, m->id, dir, sizeof(dir));
	if (db_ckpt_list(h->db, m->id, &cs, &n, NULL) < 0 || !(d = opendir(dir))) {
		free(cs);
		return;
	}
	while ((de = readdir(d))) {
		size_t len = strlen(de->d_name);
		bool named = false;
		if (strncmp(de->d_name, "ckpt-", 5) != 0 || len < 4 ||
		    strcmp(de->d_name + len - 4, ".mem") != 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		for (size_t i = 0; i < n && !named; i++)
			named = strcmp(cs[i].memory, path) == 0;
		if (!named) {
			log_warn("reconcile: memory image %s belongs to no checkpoint; removing it", path);
			unlink(path);
		}
	}
	closedir(d);
	free(cs);
}

/* A wake's FIFO left by a crash: libvirt may be waiting in its open() for
 * a writer that died.  Open it for writing and close it: that reader gets
 * an empty stream and its restore fails (the machine stays suspended),
 * instead of holding the domain's job for good.  Unlinked in between, so
 * no new reader finds it. */
static void end_stale_feed(struct hostd *h, const struct machine *m)
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

/* Finish or undo what a crash left of a suspend or a wake of M: *VS and
 * RAN are libvirt's view (virt_state_ran); *VS becomes VS_SUSPENDED when M
 * keeps a memory image. */
static void reconcile_images(struct hostd *h, const struct machine *m, enum vstate *vs,
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
		if (discard_images(h, m->id))
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
	if (*vs == VS_STOPPED && saved_image(h, m->id, NULL, 0) >= 0)
		*vs = VS_SUSPENDED;
}

/* When machine M, running in the ledger, stopped while hostd was down
 * (bill_stop_time): the host's boot time against hostd's last heartbeat,
 * or libvirt's log of its domain, which QEMU's end writes to last. */
static int64_t stopped_at(struct hostd *h, const struct machine *m)
{
	char name[200], path[PATH_MAX], line[256];
	int64_t boot = 0, log_mtime = 0;
	struct stat st;
	FILE *f = fopen("/proc/stat", "re");

	if (f) {
		long long b;
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "btime %lld", &b) == 1)
				boot = b;
		fclose(f);
	}
	dom_name(h, m, name, sizeof(name));
	snprintf(path, sizeof(path), "/var/log/libvirt/qemu/%s.log", name);
	if (stat(path, &st) == 0)
		log_mtime = st.st_mtime;
	return bill_stop_time(m->state_since, h->last_alive, boot, log_mtime, now_s());
}

void machine_reconcile(struct hostd *h)
{
	struct sweep s = { .h = h, .in_use = BUF_INIT };
	struct err e = { 0 };

	if (db_machine_list(h->db, NULL, &s.ms, &s.n, &e) < 0) {
		log_error("reconcile: %s", e.msg);
		return;
	}
	for (size_t i = 0; i < s.n; i++) {
		struct machine *m = &s.ms[i];
		enum vstate vs;
		bool ran = false;
		err_clear(&e);
		if (!strcmp(m->state, "creating") || !strcmp(m->state, "deleting")) {
			log_warn("reconcile: %s of %s/%s was interrupted; removing it",
				 !strcmp(m->state, "creating") ? "create" : "delete",
				 m->owner, m->name);
			if (machine_destroy_all(h, m, &e) < 0)
				log_error("reconcile: %s/%s: %s", m->owner, m->name, e.msg);
			m->id[0] = '\0';  /* gone: its domain and volume are orphans now */
			continue;
		}
		end_stale_feed(h, m);
		if (virt_state_ran(h->virt, m->id, &vs, &ran, &e) < 0) {
			log_error("reconcile: %s/%s: %s", m->owner, m->name, e.msg);
			continue;
		}
		if (vs == VS_MISSING) {
			log_warn("reconcile: %s/%s has no libvirt domain; defining it again",
				 m->owner, m->name);
			if (machine_define(h, m, &e) < 0) {
				log_error("reconcile: %s/%s: %s", m->owner, m->name, e.msg);
				continue;
			}
			vs = VS_STOPPED;
		}
		if (vs == VS_BUSY)
			continue;
		sync_domain_volume(h, m);
		sweep_memory_images(h, m);
		reconcile_images(h, m, &vs, ran);
		if (vs == VS_PAUSED) {
			/* berth pauses a guest only around a checkpoint's snapshot:
			 * hostd died in that moment. */
			log_warn("reconcile: %s/%s was left paused; resuming it", m->owner, m->name);
			if (virt_unpause(h->virt, m->id, &e) == 0)
				vs = VS_RUNNING;
			else
				log_error("reconcile: %s/%s: %s", m->owner, m->name, e.msg);
		}
		if (strcmp(m->state, vstate_name(vs)) != 0) {
			int64_t t = now_s();
			/* It stopped while hostd was not looking: its running
			 * time ends when it stopped, not now. */
			if (vs != VS_RUNNING && vs != VS_PAUSED &&
			    (!strcmp(m->state, "running") || !strcmp(m->state, "paused")))
				t = stopped_at(h, m);
			log_warn("reconcile: %s/%s is %s in libvirt, %s in the database; correcting "
				 "(as of %llds ago)", m->owner, m->name, vstate_name(vs), m->state,
				 (long long)(now_s() - t));
			db_machine_set_state_at(h->db, m->id, vstate_name(vs), t, NULL);
		}
	}
	/* Orphans: domains of this instance that no row names, and volumes
	 * that no row names and no volume needs. */
	err_clear(&e);
	if (virt_list_prefix(h->virt, h->dom_prefix, sweep_domain, &s, &e) < 0)
		log_error("reconcile: %s", e.msg);
	if (storage_vol_list(h->st, sweep_volume, &s, &e) < 0)
		log_error("reconcile: %s", e.msg);
	buf_free(&s.in_use);
	free(s.ms);
}
