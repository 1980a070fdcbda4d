#include "hostd/machine.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/sshexec.h"
#include "common/util.h"
#include "hostd/seed.h"
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

int machine_xml(struct hostd *h, const struct machine *m, struct buf *xml, struct err *e)
{
	struct image img;
	struct storage_vol_info vi;
	char dir[PATH_MAX], seed[PATH_MAX], log[PATH_MAX], name[200];

	if (db_image_get(h->db, m->image, &img, e) < 0 ||
	    storage_vol_info(h->st, m->volume, &vi, e) < 0)
		return -1;
	machine_dir(h, m->id, dir, sizeof(dir));
	snprintf(seed, sizeof(seed), "%s/seed.iso", dir);
	snprintf(log, sizeof(log), "%s/console.log", dir);
	dom_name(h, m, name, sizeof(name));
	struct domain_spec s = {
		.dom_name = name, .uuid = m->id, .owner = m->owner, .name = m->name,
		.kvm = virt_kvm(h->virt), .vcpus = m->vcpus, .memory = m->memory,
		.kernel = img.kernel, .initrd = img.initrd, .cmdline = img.cmdline,
		.disk_path = vi.path, .disk_format = vi.format, .disk_block = vi.block,
		.seed_path = seed, .mac = m->mac, .network = h->cfg.network,
		.nat_network = h->cfg.nat_network, .ssh_port = m->ssh_port,
		.console_log = log,
	};
	return virt_domain_xml(&s, xml, e);
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
	if (strcmp(h->cfg.network, "user") == 0 && (m.ssh_port = machine_pick_port(h)) < 0)
		return err_set(e, 503, "no_port", "no free loopback port for %s's SSH", r->name);

	/* The row comes first: from here on a crash leaves a "creating" row
	 * that start-up reconciliation undoes. */
	if (db_machine_insert(h->db, &m, e) < 0)
		return -1;
	if (hostd_busy_acquire(h, m.id, "create", m.name, e) < 0)
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
	hostd_busy_release(h, m.id);
	log_info("created machine %s/%s (%s, %d vCPU, %llu MiB, image %s)", m.owner,
		 m.name, m.id, m.vcpus, (unsigned long long)(m.memory >> 20), m.image);
	return db_machine_get_id(h->db, m.id, out, e);
undo:
	log_warn("create %s/%s failed: %s; removing what it made", m.owner, m.name, e->msg);
	if (machine_destroy_all(h, &m, NULL) < 0)
		log_error("create %s/%s: cleanup incomplete; start-up reconciliation will retry",
			  m.owner, m.name);
	hostd_busy_release(h, m.id);
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
		/* Stopping a suspended machine discards its saved memory:
		 * undefine-and-redefine is the portable way to drop it. */
		if (virt_remove(h->virt, m->id, e) < 0 || machine_define(h, m, e) < 0)
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
	if (hostd_busy_acquire(h, m->id, op, m->name, e) < 0)
		return -1;
	/* Read it again under the mark: the operation before may have moved
	 * its port or volume. */
	if (db_machine_get_id(h->db, m->id, m, e) < 0) {
		hostd_busy_release(h, m->id);
		return -1;
	}
	if (strcmp(m->state, "creating") == 0 || strcmp(m->state, "deleting") == 0 ||
	    virt_state(h->virt, m->id, vs, e) < 0) {
		err_set(e, 409, "busy", "machine %s is %s", name, m->state);
		hostd_busy_release(h, m->id);
		return -1;
	}
	return 0;
}

void machine_end(struct hostd *h, struct machine *m)
{
	enum vstate vs;

	/* Record what libvirt says now, whatever happened. */
	if (virt_state(h->virt, m->id, &vs, NULL) == 0 && vs != VS_BUSY && vs != VS_MISSING)
		db_machine_set_state(h->db, m->id, vstate_name(vs), NULL);
	hostd_busy_release(h, m->id);
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
			/* berth pauses guests only for a moment (a checkpoint): a
			 * paused one was left so by a crash or by libvirt. */
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
		if (virt_managed_save(h->virt, m.id, e) < 0)
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
	if (hostd_busy_acquire(h, m.id, "delete", m.name, e) < 0)
		return -1;
	if (db_machine_get_id(h->db, m.id, &m, e) < 0) {
		hostd_busy_release(h, m.id);
		return -1;
	}
	/* Journal first: a crash from here on is finished at start-up. */
	rc = db_machine_set_state(h->db, m.id, "deleting", e);
	if (rc == 0)
		rc = machine_destroy_all(h, &m, e);
	hostd_busy_release(h, m.id);
	if (rc == 0)
		log_info("deleted machine %s/%s", m.owner, m.name);
	return rc;
}

json_t *machine_json(struct hostd *h, const struct machine *m)
{
	struct storage_vol_info vi;
	struct image img;
	char host[64], name[200];
	int port = 0;
	json_t *j, *ssh = json_null();

	dom_name(h, m, name, sizeof(name));
	if (machine_endpoint(h, m, host, sizeof(host), &port, NULL) == 0) {
		const char *user = db_image_get(h->db, m->image, &img, NULL) == 0 ? img.user : "root";
		ssh = json_pack("{s:s, s:i, s:s}", "host", host, "port", port, "user", user);
	}
	j = json_pack("{s:s, s:s, s:s, s:s, s:s, s:i, s:I, s:I, s:I, s:I, s:s, s:o, s:s, s:s}",
		      "id", m->id, "name", m->name, "owner", m->owner,
		      "image", m->image, "state", m->state, "vcpus", m->vcpus,
		      "memory", (json_int_t)m->memory, "disk", (json_int_t)m->disk,
		      "created", (json_int_t)m->created,
		      "state_since", (json_int_t)m->state_since,
		      "mac", m->mac, "ssh", ssh, "domain", name,
		      "hypervisor", virt_hypervisor(h->virt));
	if (storage_vol_info(h->st, m->volume, &vi, NULL) == 0)
		json_object_set_new(j, "allocated", json_integer((json_int_t)vi.allocated_bytes));
	return j;
}

void machine_on_event(const char *uuid, enum vstate now, void *data)
{
	struct hostd *h = data;
	struct machine m;

	/* An operation in progress records its own outcome; the events it
	 * causes on the way (paused during a save, ...) are not states. */
	if (hostd_busy(h, uuid))
		return;
	if (db_machine_get_id(h->db, uuid, &m, NULL) < 0)
		return;
	if (strcmp(m.state, "creating") == 0 || strcmp(m.state, "deleting") == 0)
		return;
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
		if (virt_state(h->virt, m->id, &vs, &e) < 0) {
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
			log_warn("reconcile: %s/%s is %s in libvirt, %s in the database; correcting",
				 m->owner, m->name, vstate_name(vs), m->state);
			db_machine_set_state(h->db, m->id, vstate_name(vs), NULL);
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
