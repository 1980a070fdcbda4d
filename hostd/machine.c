#include "hostd/machine.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/sshexec.h"
#include "common/util.h"
#include "hostd/machine_steps.h"
#include "hostd/desktop.h"
#include "hostd/egress.h"
#include "hostd/events.h"
#include "hostd/exec.h"
#include "hostd/idle.h"
#include "hostd/memimage.h"
#include "hostd/net.h"
#include "hostd/prometheus.h"
#include "hostd/quota.h"
#include "hostd/sampler.h"
#include "hostd/seed.h"
#include "hostd/sshkey.h"
#include "hostd/sessions.h"
#include "common/banned.h"

/* A new machine's network index is picked and its row inserted under
 * this, so two creates never take the same address. */
static pthread_mutex_t create_lock = PTHREAD_MUTEX_INITIALIZER;

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

void machine_dir(struct hostd *h, const char *id, char *out, size_t outlen)
{
	xsnprintf(out, outlen, "%s/machines/%s", h->cfg.state_dir, id);
}

void machine_dom_name(struct hostd *h, const struct machine *m, char *out, size_t outlen)
{
	/* A machine name has no '.', so OWNER.NAME never collides. */
	snprintf(out, outlen, "%s%s.%s", h->dom_prefix, m->owner, m->name);
}

int machine_vstate(struct hostd *h, const char *id, enum vstate *vs, struct err *e)
{
	bool ran = false;

	if (virt_state_ran(h->virt, id, vs, &ran, e) < 0)
		return -1;
	if (*vs == VS_STOPPED && !ran && memimage_find(h, id, NULL, 0))
		*vs = VS_SUSPENDED;
	return 0;
}

bool machine_state_of(enum vstate vs, enum mstate *out)
{
	switch (vs) {
	case VS_STOPPED: *out = MS_STOPPED; return true;
	case VS_SUSPENDED: *out = MS_SUSPENDED; return true;
	case VS_RUNNING: *out = MS_RUNNING; return true;
	case VS_PAUSED: *out = MS_PAUSED; return true;
	case VS_MISSING:
	case VS_BUSY: break;
	}
	return false;
}

void machine_agent_path(struct hostd *h, const char *id, char *out, size_t outlen)
{
	xsnprintf(out, outlen, "%s/machines/%s/agent.sock", h->cfg.state_dir, id);
}

int machine_qemu_uid(struct hostd *h, const struct machine *m, unsigned *uid,
		     struct err *e)
{
	long long u = (long long)h->cfg.qemu_uid_base + m->qemu_index;

	*uid = 0;
	if (m->qemu_index < 1 || u > QEMU_UID_LAST)
		return err_set(e, 500, "qemu_uid", "machine %s: no uid for its QEMU (qemu_uid_base "
			       "%d + number %d is past %d)", m->name, h->cfg.qemu_uid_base,
			       m->qemu_index, QEMU_UID_LAST);
	*uid = (unsigned)u;
	return 0;
}

int machine_own_volume(struct hostd *h, const struct machine *m, const char *vol,
		       struct err *e)
{
	unsigned uid;

	if (machine_qemu_uid(h, m, &uid, e) < 0)
		return -1;
	return storage_vol_own(h->st, vol, uid, h->qemu_gid, e);
}

/* A file of the image's (kernel, initrd) that hostd keeps under
 * STATE/images/NAME: that directory and STATE/images root's, group G,
 * 0710, the file root's, 0440.  A file elsewhere is the administrator's:
 * left as it is. */
static int prepare_boot_file(struct hostd *h, const char *path, unsigned g, struct err *e)
{
	char images[PATH_MAX], dir[PATH_MAX];
	size_t n;
	char *slash;

	xsnprintf(images, sizeof(images), "%s/images/", h->cfg.state_dir);
	n = strlen(images);
	if (!path || !*path || strncmp(path, images, n) != 0)
		return 0;
	snprintf(dir, sizeof(dir), "%s", path);
	if (!(slash = strrchr(dir, '/')) || (size_t)(slash - dir) < n ||
	    strchr(dir + n, '/') != slash)
		return 0;
	*slash = '\0';
	images[n - 1] = '\0';
	if (path_set_owner(images, 0, g, 0710, e) < 0 || path_set_owner(dir, 0, g, 0710, e) < 0 ||
	    path_set_owner(path, 0, g, 0440, e) < 0)
		return -1;
	return 0;
}

/* Make what M's domain names ready for its QEMU, which runs as UID and
 * the QEMU group (the static label of its XML; libvirt changes no
 * owner): its volume UID's alone (0600) and the layers it reads through
 * read-only (storage_vol_own); its seed UID's, read-only (its SSH host
 * key is in it: no other QEMU may read it); STATE/machines, its directory,
 * the image's kernel and initrd and their directories root's, group kvm,
 * so it may traverse and read them but neither list nor write.  What
 * libvirt makes there (the agent's socket, the console log, memory images)
 * is root's.  A stat per file when nothing changes: it runs before every
 * define, start, restore and wake. */
static int prepare_files(struct hostd *h, const struct machine *m, const struct image *img,
			 unsigned uid, struct err *e)
{
	char dir[PATH_MAX], p[PATH_MAX];
	unsigned g = h->qemu_gid;

	xsnprintf(p, sizeof(p), "%s/machines", h->cfg.state_dir);
	machine_dir(h, m->id, dir, sizeof(dir));
	if (path_set_owner(p, 0, g, 0710, e) < 0 || path_set_owner(dir, 0, g, 0710, e) < 0)
		return -1;
	xsnprintf(p, sizeof(p), "%s/seed.iso", dir);
	if (path_set_owner(p, uid, g, 0400, e) < 0 || prepare_boot_file(h, img->kernel, g, e) < 0 ||
	    prepare_boot_file(h, img->initrd, g, e) < 0 ||
	    storage_vol_own(h->st, m->volume, uid, g, e) < 0)
		return -1;
	return 0;
}

/* M's domain XML, and its files made ready for the QEMU it names: every
 * domain hostd defines or restores is rendered here.  SAVED: the XML of
 * the save image it is restored from (NULL: a define or a cold start):
 * the agent's channel and the VM generation id follow it (libvirt refuses
 * a restore whose devices or genid differ), but with NEW_GENID (another
 * machine's memory: a live fork, a template's machine) a new genid is
 * asked for, which the restored guest sees change (hostd/virt.c). */
static int xml_render(struct hostd *h, const struct machine *m, const char *saved,
		      bool new_genid, struct buf *xml, struct err *e)
{
	char genid[37] = "";
	bool agent = !saved || virt_xml_has_agent(saved);
	bool had_genid = saved && virt_xml_genid(saved, genid);
	struct image img;
	struct storage_vol_info vi;
	char dir[PATH_MAX], seed[PATH_MAX], log[PATH_MAX], name[200];
	char agent_sock[PATH_MAX], tap[32] = "";
	unsigned uid;

	if (h->net && m->net_index)
		net_tap_name(net_conf(h), m->net_index, tap, sizeof(tap));
	if (db_image_get(h->db, m->image, &img, e) < 0 ||
	    storage_vol_info(h->st, m->volume, &vi, e) < 0 ||
	    machine_qemu_uid(h, m, &uid, e) < 0 || prepare_files(h, m, &img, uid, e) < 0)
		return -1;
	machine_dir(h, m->id, dir, sizeof(dir));
	xsnprintf(seed, sizeof(seed), "%s/seed.iso", dir);
	xsnprintf(log, sizeof(log), "%s/console.log", dir);
	machine_agent_path(h, m->id, agent_sock, sizeof(agent_sock));
	machine_dom_name(h, m, name, sizeof(name));
	struct domain_spec s = {
		.dom_name = name, .uuid = m->id, .owner = m->owner, .name = m->name,
		.genid = !saved || (had_genid && new_genid) ? NULL : genid,
		.kvm = virt_kvm(h->virt), .vcpus = m->vcpus, .memory = m->memory,
		/* A machine weighs what it pays for: 1024 per vCPU (cgroups'
		 * default weight is 1024 a group, whatever its vCPUs). */
		.cpu_shares = h->cpu_weights ? 1024 * m->vcpus : 0,
		/* And I/O alike: BFQ's default weight, 100, per vCPU (libvirt
		 * takes 100 to 1000). */
		.io_weight = h->io_weights ? (m->vcpus >= 10 ? 1000 : 100 * m->vcpus) : 0,
		/* Memory: what the guest was given, plus QEMU's own (a quarter,
		 * 256 MiB at least) is the machine's; above it (its disk's page
		 * cache, a runaway QEMU) it is reclaimed first (cgroup v1's
		 * soft limit; v2's memory.high, which throttles it there). */
		.memory_soft = h->memory_weights ?
			m->memory + (m->memory / 4 > (256u << 20) ? m->memory / 4 : (256u << 20)) : 0,
		.kernel = img.kernel, .initrd = img.initrd, .cmdline = img.cmdline,
		.disk_path = vi.path, .disk_format = vi.format, .disk_block = vi.block,
		.seed_path = seed, .mac = m->mac, .network = h->cfg.network,
		.tap = h->net && m->net_index ? tap : NULL, .ssh_port = m->ssh_port,
		.console_log = log, .screen = true,
		.agent_socket = agent ? agent_sock : NULL,
		.qemu_uid = uid, .qemu_gid = h->qemu_gid,
	};
	return virt_domain_xml(&s, xml, e);
}

int machine_xml(struct hostd *h, const struct machine *m, struct buf *xml, struct err *e)
{
	return xml_render(h, m, NULL, false, xml, e);
}

int machine_xml_for_image(struct hostd *h, const struct machine *m, const char *path,
			  bool new_genid, struct buf *xml, struct err *e)
{
	char *saved = NULL;
	int r;

	if (virt_image_xml(path, &saved, e) < 0)
		return -1;
	r = xml_render(h, m, saved, new_genid, xml, e);
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

/* A loopback port for an SSH forward that nothing listens on and no
 * machine has recorded, or -1. */
static int pick_port(struct hostd *h)
{
	for (int i = 0; i < 50; i++) {
		int p = port_pick_free();
		if (p > 0 && !db_port_used(h->db, p))
			return p;
	}
	return -1;
}

int machine_port_refresh(struct hostd *h, struct machine *m, struct err *e)
{
	int p;

	if (strcmp(h->cfg.network, "user") != 0 || port_is_free(m->ssh_port))
		return 0;
	if ((p = pick_port(h)) < 0)
		return err_set(e, 503, "no_port", "no free loopback port for %s", m->name);
	if (db_machine_set_port(h->db, m->id, p, e) < 0)
		return -1;
	log_info("machine %s: port %d is taken; SSH moves to %d", m->name, m->ssh_port, p);
	m->ssh_port = p;
	if (net_user_refresh(h, e) < 0)
		return -1;
	return 1;
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

/* Used to undo a failed or interrupted create and to finish a delete;
 * forks keep the checkpoints they were made from. */
int machine_destroy_all(struct hostd *h, const struct machine *m, struct err *e)
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
	/* Its tap and rules (the domain that held the tap is gone). */
	net_machine_remove(h, m);
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
	if (r->egress) {
		struct egress *p = calloc(1, sizeof(*p));
		int rc;
		if (!p)
			abort();
		rc = egress_parse(r->egress, p, e);
		if (rc == 0 && !net_routed(h) && p->mode != EGRESS_OPEN)
			rc = err_set(e, 409, "egress_needs_routed", "egress policies need network = "
				     "routed; this host runs network = %s", h->cfg.network);
		free(p);
		if (rc < 0)
			return -1;
	}
	if (db_image_get(h->db, r->image, img, e) < 0)
		return -1;
	/* Another user's private image answers as a missing one. */
	if (!image_visible(img, r->owner))
		return err_set(e, 404, "not_found", "no image %s", r->image);
	if (r->disk && (r->disk < img->virtual_size || r->disk > h->cfg.max_disk)) {
		size_format(img->virtual_size, a, sizeof(a));
		size_format(h->cfg.max_disk, b, sizeof(b));
		return err_set(e, 400, "invalid_disk",
			       "disk %llu bytes is out of range %s (image %s)..%s",
			       (unsigned long long)r->disk, a, r->image, b);
	}
	return 0;
}

int machine_create(struct hostd *h, const struct create_req *r, struct machine *out,
		   int64_t *ready_ms, struct err *e)
{
	struct act_opts o = { .wait = r->wait };

	if (ready_ms)
		*ready_ms = -1;
	if (machine_create_from(h, r, NULL, out, e) < 0)
		return -1;
	if (!r->start)
		return 0;
	/* Create-and-start gives a running machine or nothing. */
	if (machine_act(h, r->owner, r->name, ACT_START, &o, out, ready_ms, e) < 0) {
		if (machine_delete(h, r->owner, r->name, NULL) < 0)
			log_error("create %s: cannot remove the machine that failed to start",
				  r->name);
		return -1;
	}
	return 0;
}

/* 0 when no user has UID; else -1 with E naming who has it. */
static int qemu_uid_free(unsigned uid, const struct machine *m, struct err *e)
{
	struct passwd pw, *res = NULL;
	char buf[4096];

	if (getpwuid_r(uid, &pw, buf, sizeof(buf), &res) != 0 || !res)
		return 0;
	return err_set(e, 500, "qemu_uid", "machine %s: its QEMU's uid %u is user %s's: set "
		       "qemu_uid_base to a range no user has", m->name, uid, pw.pw_name);
}

int machine_create_from(struct hostd *h, const struct create_req *r, const char *base,
			struct machine *out, struct err *e)
{
	struct image img;
	struct machine m;
	char dir[PATH_MAX], path[PATH_MAX], *hk_priv = NULL, *hk_pub = NULL;
	const char *keys[] = { h->key.public_line, NULL };
	unsigned uid;
	int rc = -1;

	memset(&m, 0, sizeof(m));
	if (validate_create(h, r, &img, e) < 0)
		return -1;
	if (uuid_generate(m.id) < 0 || mac_generate(m.mac) < 0)
		return err_errno(e, errno, "random");
	/* Its own SSH host key: in its seed, pinned from the start. */
	if (sshkey_ed25519(&hk_priv, &hk_pub, e) < 0)
		return -1;
	snprintf(m.host_key, sizeof(m.host_key), "%s", hk_pub);
	m.host_key_state = HK_SEED;
	snprintf(m.owner, sizeof(m.owner), "%s", r->owner);
	snprintf(m.name, sizeof(m.name), "%s", r->name);
	snprintf(m.image, sizeof(m.image), "%s", r->image);
	snprintf(m.volume, sizeof(m.volume), "m-%s", m.id);
	m.vcpus = r->vcpus;
	m.memory = r->memory;
	m.disk = r->disk ? r->disk : img.virtual_size;
	m.idle_timeout = r->idle_timeout;
	if (strcmp(h->cfg.network, "user") == 0 && (m.ssh_port = pick_port(h)) < 0) {
		err_set(e, 503, "no_port", "no free loopback port for %s's SSH", r->name);
		goto out;
	}

	/* The row comes first: from here on a crash leaves a "creating" row
	 * that start-up reconciliation undoes.  Its network address is
	 * picked and taken in the same breath. */
	pthread_mutex_lock(&create_lock);
	if (quota_check_create(h, m.owner, m.disk, e) < 0 ||
	    (net_routed(h) && (m.net_index = net_pick_index(h, e)) < 0)) {
		pthread_mutex_unlock(&create_lock);
		goto out;
	}
	rc = db_machine_insert(h->db, &m, r->egress, e);
	pthread_mutex_unlock(&create_lock);
	if (rc < 0)
		goto out;
	rc = -1;
	if (busy_acquire(h->busy, m.id, "create", m.name, e) < 0)
		goto undo;
	hostd_crash_point(h, "create-after-row");
	if (storage_vol_create(h->st, m.volume, base ? base : img.volume, m.disk, e) < 0)
		goto undo;
	hostd_crash_point(h, "create-after-volume");
	/* Its QEMU's uid must be no user's (qemu_uid_base picks a range
	 * nobody has; this makes sure). */
	if (machine_qemu_uid(h, &m, &uid, e) < 0 || qemu_uid_free(uid, &m, e) < 0)
		goto undo;
	machine_dir(h, m.id, dir, sizeof(dir));
	xsnprintf(path, sizeof(path), "%s/machines", h->cfg.state_dir);
	if (mkdir_p(dir, 0700) < 0) {
		err_errno(e, errno, "create %s", dir);
		goto undo;
	}
	if (path_set_owner(path, 0, h->qemu_gid, 0710, e) < 0 ||
	    path_set_owner(dir, 0, h->qemu_gid, 0710, e) < 0)
		goto undo;
	struct seed s = { .instance_id = m.id, .hostname = m.name, .user = img.user, .keys = keys,
			  .host_key_private = hk_priv, .host_key_public = hk_pub };
	xsnprintf(path, sizeof(path), "%s/seed.iso", dir);
	if (seed_write(&s, dir, e) < 0 || path_set_owner(path, uid, h->qemu_gid, 0400, e) < 0)
		goto undo;
	hostd_crash_point(h, "create-after-seed");
	/* Its tap, address and rules: before the domain, which names the tap. */
	if (net_machine_add(h, &m, e) < 0)
		goto undo;
	if (machine_define(h, &m, e) < 0)
		goto undo;
	hostd_crash_point(h, "create-after-define");
	if (db_machine_set_state(h->db, m.id, MS_STOPPED, e) < 0)
		goto undo;
	busy_release(h->busy, m.id);
	log_info("created machine %s/%s (%s, %d vCPU, %llu MiB, image %s)", m.owner,
		 m.name, m.id, m.vcpus, (unsigned long long)(m.memory >> 20), m.image);
	if (!base) {
		char detail[160];
		snprintf(detail, sizeof(detail), "image %s", m.image);
		events_emit(h, m.owner, m.name, "created", detail);
	}
	if (db_machine_get_id(h->db, m.id, out, e) < 0)
		goto out;
	/* Storage is billed from its creation, not from the next minute. */
	sampler_record(h, out);
	if (r->host_key_private) {
		*r->host_key_private = hk_priv;
		hk_priv = NULL;
	}
	rc = 0;
	goto out;
undo:
	log_warn("create %s/%s failed: %s; removing what it made", m.owner, m.name, e->msg);
	if (machine_destroy_all(h, &m, NULL) < 0)
		log_error("create %s/%s: cleanup incomplete; start-up reconciliation will retry",
			  m.owner, m.name);
	busy_release(h->busy, m.id);
out:
	if (hk_priv)
		memset(hk_priv, 0, strlen(hk_priv));
	free(hk_priv);
	free(hk_pub);
	return rc;
}

/* POLICY ("default": the host's) parsed into *P, and possible on this
 * host: 0, or -1 with E. */
static int egress_of(struct hostd *h, const char *policy, struct egress *p, struct err *e)
{
	if (egress_parse(strcmp(policy, "default") == 0 ? h->cfg.egress_default : policy, p,
			 e) < 0)
		return -1;
	if (!net_routed(h) && p->mode != EGRESS_OPEN)
		return err_set(e, 409, "egress_needs_routed", "egress policies need network = "
			       "routed; this host runs network = %s, where a guest's connections "
			       "are QEMU's own and cannot be told apart per machine",
			       h->cfg.network);
	return 0;
}

int machine_egress_check(struct hostd *h, const char *policy, struct err *e)
{
	struct egress *p = calloc(1, sizeof(*p));
	int rc;

	if (!p)
		abort();
	rc = egress_of(h, policy, p, e);
	free(p);
	return rc;
}

int machine_set_egress(struct hostd *h, struct machine *m, const char *policy,
		       struct err *e)
{
	struct egress *p = calloc(1, sizeof(*p)), *old = calloc(1, sizeof(*old));
	bool dflt = strcmp(policy, "default") == 0;
	struct buf text = BUF_INIT, was = BUF_INIT;
	int rc = -1;

	if (!p || !old)
		abort();
	if (egress_of(h, policy, p, e) < 0)
		goto out;
	egress_format(p, &text);
	if (db_machine_egress(h->db, m->id, &was, e) < 0 ||
	    egress_parse(was.len ? buf_str(&was) : h->cfg.egress_default, old, e) < 0)
		goto out;
	if (m->net_index && net_machine_policy(h, m, p, e) < 0)
		goto out;
	if (db_machine_set_egress(h->db, m->id, dflt ? "" : buf_str(&text), e) < 0) {
		/* The policy in force stays the recorded one. */
		if (m->net_index)
			net_machine_policy(h, m, old, NULL);
		goto out;
	}
	log_info("machine %s/%s: egress %s%s", m->owner, m->name, buf_str(&text),
		 dflt ? " (the default)" : "");
	rc = 0;
out:
	free(p);
	free(old);
	buf_free(&text);
	buf_free(&was);
	return rc;
}

int machine_host_key(struct hostd *h, struct machine *m, struct err *e)
{
	char host[64], got[HOST_KEY_MAX], why[512];
	int port;

	if (m->host_key_state == HK_CONFIRMED || m->host_key_state == HK_TOFU)
		return 0;
	if (machine_endpoint(h, m, host, sizeof(host), &port, e) != 0)
		return -1;
	if (sshexec_host_key(host, port, NULL, 20000, got, sizeof(got), why, sizeof(why)) < 0)
		return err_set(e, 503, "unreachable", "machine %s: %s", m->name, why);
	if (m->host_key_state == HK_SEED && sshexec_key_equal(got, m->host_key)) {
		m->host_key_state = HK_CONFIRMED;
		log_info("machine %s/%s answers with the host key of its seed", m->owner, m->name);
	} else {
		/* The image ignores the seed's key (or the machine was made
		 * before berth pinned keys): the key of its first answer is
		 * pinned from now on. */
		if (m->host_key_state == HK_SEED)
			log_warn("machine %s/%s presents a host key other than its seed's: its "
				 "image ignores cloud-init's ssh_keys; pinning the key of this "
				 "first answer (trust on first use)", m->owner, m->name);
		else
			log_info("machine %s/%s had no pinned host key; pinning the key of this "
				 "answer (trust on first use)", m->owner, m->name);
		snprintf(m->host_key, sizeof(m->host_key), "%s", got);
		m->host_key_state = HK_TOFU;
	}
	return db_machine_set_host_key(h->db, m->id, m->host_key, m->host_key_state,
				       m->host_key_next, e);
}

int machine_endpoint(struct hostd *h, const struct machine *m, char *host,
		     size_t hostlen, int *port, struct err *e)
{
	(void)e;
	if (strcmp(h->cfg.network, "user") == 0) {
		snprintf(host, hostlen, "127.0.0.1");
		*port = m->ssh_port;
		return 0;
	}
	/* Routed: its own address, which the host routes to its tap. */
	if (!h->net || !m->net_index)
		return 1;
	net_ip_text(net_machine_ip(net_conf(h), m->net_index), host, hostlen);
	*port = 22;
	return 0;
}

int machine_ssh(struct hostd *h, const char *owner, const char *name, bool wake,
		struct machine_ssh *out, struct err *e)
{
	struct image img;
	int r;

	memset(out, 0, sizeof(*out));
	out->woke_ms = -1;
	if (wake ? machine_wake(h, owner, name, true, &out->m, &out->woke_ms, e) < 0
		 : machine_settle(h, owner, name, &out->m, e) < 0)
		return -1;
	if (out->m.state != MS_RUNNING)
		return err_set(e, 409, "not_running", "machine %s is %s", name,
			       mstate_name(out->m.state));
	if (db_image_get(h->db, out->m.image, &img, e) < 0)
		return -1;
	snprintf(out->user, sizeof(out->user), "%s", img.user);
	r = machine_endpoint(h, &out->m, out->host, sizeof(out->host), &out->port, e);
	if (r < 0)
		return -1;
	if (r > 0)
		return err_set(e, 503, "no_address", "machine %s has no address yet", name);
	/* The client checks the machine's host key before it sends anything
	 * of the user's: the key is confirmed (or first pinned) now. */
	struct err ke = { 0 };
	if (machine_host_key(h, &out->m, &ke) < 0)
		log_warn("%s; the client is given the key pinned so far", ke.msg);
	/* A connection is about to start: the idle policy must not take the
	 * machine away before its session or exec is registered. */
	idle_touch(h, out->m.id, "connect");
	return 0;
}

int machine_ssh_timeout_ms(const struct hostd *h)
{
	int ms = h->cfg.boot_timeout_s * 1000 / 3;

	return ms < 20000 ? 20000 : ms;
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

static int do_start(struct hostd *h, struct machine *m, enum vstate vs, struct err *e)
{
	int old_port = m->ssh_port, r;

	if (vs == VS_SUSPENDED && memimage_find(h, m->id, NULL, 0))
		return memimage_wake(h, m, e);
	if (vs == VS_SUSPENDED) {
		/* libvirt's managed save image: it starts with hostd's XML of
		 * now (its files made ready, its QEMU's label, an image saved
		 * by an older berth included), and with a port of its own: its
		 * QEMU would fail to bind a forward another program took, for
		 * good.  The database moves first: if the image cannot be
		 * rewritten, the port is put back (the other way round would
		 * lose the new port). */
		char *saved = NULL;
		struct buf xml = BUF_INIT;
		if ((r = machine_port_refresh(h, m, e)) < 0)
			return -1;
		int rc = virt_saved_xml(h->virt, m->id, &saved, e);
		if (rc == 0)
			rc = xml_render(h, m, saved, false, &xml, e);
		if (rc == 0)
			rc = virt_saved_define(h->virt, m->id, buf_str(&xml), e);
		free(saved);
		buf_free(&xml);
		if (rc < 0) {
			if (r > 0) {
				db_machine_set_port(h->db, m->id, old_port, NULL);
				m->ssh_port = old_port;
			}
			return -1;
		}
	}
	if (vs == VS_STOPPED || vs == VS_MISSING) {
		/* A cold boot: a memory image left behind is stale from now on. */
		if (memimage_discard(h, m->id))
			log_warn("machine %s/%s: removed a memory image it had run since", m->owner,
				 m->name);
		/* A live fork's guest takes its own address and MAC at its
		 * first boot: the host maps its source's no more. */
		if (m->net_alias[0]) {
			struct machine old = *m;
			if (db_machine_set_net(h->db, m->id, m->net_index, "", e) < 0)
				return -1;
			m->net_alias[0] = '\0';
			net_machine_remove(h, &old);
			if (net_machine_add(h, m, e) < 0)
				return -1;
		}
		/* A live fork that ran with its source's host key takes its
		 * seed's at its first boot. */
		if (m->host_key_next[0]) {
			if (db_machine_set_host_key(h->db, m->id, m->host_key_next, HK_SEED, "", e) < 0)
				return -1;
			snprintf(m->host_key, sizeof(m->host_key), "%s", m->host_key_next);
			m->host_key_state = HK_SEED;
			m->host_key_next[0] = '\0';
		}
		if (machine_port_refresh(h, m, e) < 0 || machine_define(h, m, e) < 0)
			return -1;
	}
	return virt_start(h->virt, m->id, e);
}

int machine_do_start(struct hostd *h, struct machine *m, enum vstate vs, struct err *e)
{
	int held = quota_start_begin(h, m, e), rc;

	if (held < 0)
		return -1;
	rc = do_start(h, m, vs, e);
	quota_start_end(h, m, held, rc == 0);
	return rc;
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
		memimage_discard(h, m->id);
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
	if (m->state == MS_CREATING || m->state == MS_DELETING ||
	    machine_vstate(h, m->id, vs, e) < 0) {
		err_set(e, 409, "busy", "machine %s is %s", name, mstate_name(m->state));
		busy_release(h->busy, m->id);
		return -1;
	}
	return 0;
}

void machine_end(struct hostd *h, struct machine *m)
{
	enum vstate vs;
	enum mstate st;

	/* Record what libvirt says now, whatever happened. */
	if (machine_vstate(h, m->id, &vs, NULL) == 0 && machine_state_of(vs, &st))
		db_machine_set_state(h->db, m->id, st, NULL);
	busy_release(h->busy, m->id);
}

/* The event of action A done on M, which was VS before. */
static void act_event(struct hostd *h, const struct machine *m, enum machine_action a,
		      enum vstate vs)
{
	const char *kind = NULL;

	switch (a) {
	case ACT_START:
	case ACT_RESUME:
		kind = vs == VS_RUNNING ? NULL : vs == VS_SUSPENDED ? "woke" : "started";
		break;
	case ACT_STOP:
		kind = vs == VS_STOPPED ? NULL : "stopped";
		break;
	case ACT_SUSPEND:
		kind = vs == VS_SUSPENDED ? NULL : "suspended";
		break;
	case ACT_RESTART:
		kind = "restarted";
		break;
	}
	if (kind)
		events_emit(h, m->owner, m->name, kind, NULL);
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
			memimage_discard(h, m.id);
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
		if (h->cfg.suspend_compress ? memimage_suspend(h, &m, e) < 0
					    : virt_managed_save(h->virt, m.id, e) < 0)
			goto out;
		break;
	case ACT_RESTART:
		if (machine_do_stop(h, &m, vs, timeout, e) < 0)
			goto out;
		/* The machine was off in between: the ledger says so. */
		if (vs != VS_STOPPED && db_machine_set_state(h->db, m.id, MS_STOPPED, e) < 0)
			goto out;
		if (machine_do_start(h, &m, VS_STOPPED, e) < 0)
			goto out;
		break;
	}
	rc = 0;
	act_event(h, &m, a, vs);
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
	rc = db_machine_set_state(h->db, m.id, MS_DELETING, e);
	if (rc == 0)
		rc = machine_destroy_all(h, &m, e);
	busy_release(h->busy, m.id);
	if (rc < 0)
		return -1;
	/* A deleted machine has no sessions left. */
	sessions_drop_machine(h->sessions, m.id);
	execs_machine_gone(h->execs, m.id);
	/* Nor viewers: their grants end, and the bridge drops them. */
	desktop_revoke(h->desktop, m.owner, m.name, 0, NULL, NULL);
	log_info("deleted machine %s/%s", m.owner, m.name);
	events_emit(h, m.owner, m.name, "deleted", NULL);
	return 0;
}

/* How long a connection waits for another operation on its machine (the
 * idle policy suspending it, say) before it gives up. */
#define WAKE_WAIT_MS 60000

int machine_settle(struct hostd *h, const char *owner, const char *name,
		   struct machine *out, struct err *e)
{
	if (db_machine_get(h->db, owner, name, out, e) < 0)
		return -1;
	/* "running" with an operation under way may be a suspend: its end is
	 * waited for, then the state read again, so a connection never gets
	 * a guest being saved. */
	for (int64_t t0 = mono_ms(); out->state == MS_RUNNING && busy_held(h->busy, out->id) &&
	     mono_ms() - t0 < WAKE_WAIT_MS;) {
		usleep(100 * 1000);
		if (db_machine_get(h->db, owner, name, out, e) < 0)
			return -1;
	}
	return 0;
}

int machine_wake(struct hostd *h, const char *owner, const char *name, bool wait,
		 struct machine *out, int64_t *woke_ms, struct err *e)
{
	struct act_opts o = { .wait = wait };
	int64_t t0;

	*woke_ms = -1;
	if (machine_settle(h, owner, name, out, e) < 0)
		return -1;
	if (out->state == MS_RUNNING)
		return 0;
	/* Another operation on it (a suspend, a checkpoint, its create) is
	 * waited for, then the wake goes on. */
	t0 = mono_ms();
	while (machine_act(h, owner, name, ACT_START, &o, out, NULL, e) < 0) {
		if (e->status != 409 || strcmp(e->code, "busy") != 0 ||
		    mono_ms() - t0 > WAKE_WAIT_MS)
			return -1;
		err_clear(e);
		usleep(200 * 1000);
	}
	*woke_ms = mono_ms() - t0;
	prom_wake(*woke_ms);
	return 0;
}


void machine_check_qemus(struct hostd *h)
{
	struct machine *ms = NULL;
	struct proc_creds pc;
	size_t n = 0;
	int bad = 0;

	if (db_machine_list(h->db, NULL, &ms, &n, NULL) < 0)
		return;
	for (size_t i = 0; i < n; i++) {
		struct err e = { 0 };
		enum vstate vs;
		unsigned uid = 0;
		long pid;
		/* Reconciliation made the rows follow libvirt. */
		if ((ms[i].state != MS_RUNNING && ms[i].state != MS_PAUSED) ||
		    virt_state(h->virt, ms[i].id, &vs, NULL) < 0 ||
		    (vs != VS_RUNNING && vs != VS_PAUSED))
			continue;
		machine_qemu_uid(h, &ms[i], &uid, NULL);
		if (virt_qemu_creds(h->virt, ms[i].id, &pid, &pc, &e) < 0) {
			log_warn("machine %s/%s: cannot tell which user its QEMU runs as: %s",
				 ms[i].owner, ms[i].name, e.msg);
			continue;
		}
		if (pc.uid_min == 0 || pc.gid_min == 0 || pc.cap_eff) {
			log_warn("machine %s/%s: its QEMU (pid %ld) RUNS PRIVILEGED (uid %u, gid %u, "
				 "effective capabilities %#llx), started before berth ran QEMU "
				 "unprivileged: stop and start it (a restart, a suspend and resume) to "
				 "run it as uid %u", ms[i].owner, ms[i].name, pid, pc.uid_min,
				 pc.gid_min, (unsigned long long)pc.cap_eff, uid);
			bad++;
		} else if (pc.uid_min != uid || pc.uid_max != uid) {
			log_warn("machine %s/%s: its QEMU (pid %ld) runs as uid %u, not its own %u "
				 "(qemu_uid_base changed?): a restart moves it", ms[i].owner,
				 ms[i].name, pid, pc.uid_min, uid);
		}
	}
	if (bad)
		log_warn("%d running machine(s) with a privileged QEMU", bad);
	free(ms);
}
