#include "hostd/checkpoint.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/sshexec.h"
#include "common/util.h"
#include "hostd/events.h"
#include "hostd/exec.h"
#include "hostd/machine_steps.h"
#include "hostd/net.h"
#include "hostd/quota.h"
#include "hostd/secrets.h"
#include "common/banned.h"

/* A new volume name for machine M's next top: m-UUID-RANDOM. */
static int next_top(const struct machine *m, char *out, size_t outlen, struct err *e)
{
	unsigned char r[4];

	if (random_bytes(r, sizeof(r)) < 0)
		return err_set(e, 500, "internal", "random");
	snprintf(out, outlen, "m-%s-%02x%02x%02x%02x", m->id, r[0], r[1], r[2], r[3]);
	return 0;
}

/* Freeze M's current content.  Two ways, by backend:
 * - snapshot (lvm-thin): FROZEN is a new thin snapshot of M's volume; M
 *   stays on its volume (WRITABLE = M's);
 * - layering (qcow2): FROZEN is M's current volume; M moves to WRITABLE, a
 *   new overlay on it (for a running domain, a live disk-only snapshot).
 * A running guest is paused only for the moment this takes, and with MEM
 * its memory is saved there while it is paused: the disk and the memory are
 * of the same instant, and the disk holds what the guest had written, like
 * after a power cut.  The database is the caller's.  On failure nothing is
 * left. */
static int freeze_top(struct hostd *h, struct machine *m, enum vstate vs, const char *mem,
		      char *frozen, char *writable, size_t len, struct err *e)
{
	struct storage_vol_info vi;
	bool live = vs == VS_RUNNING || vs == VS_PAUSED;
	bool snap = storage_can_snapshot(h->st);
	char made[80];
	int64_t t0;
	int rc;

	if (vs == VS_SUSPENDED)
		return err_set(e, 409, "suspended",
			       "machine %s is suspended: resume or stop it first", m->name);
	if (vs == VS_BUSY || vs == VS_MISSING)
		return err_set(e, 409, "busy", "machine %s is %s", m->name, vstate_name(vs));
	if (mem && !live)
		return err_set(e, 409, "not_running",
			       "machine %s is %s: only a running machine has memory to save",
			       m->name, vstate_name(vs));
	if (next_top(m, made, sizeof(made), e) < 0)
		return -1;
	if (!snap) {
		if (storage_vol_create(h->st, made, m->volume, m->disk, e) < 0)
			return -1;
		hostd_crash_point(h, "checkpoint-after-volume");
		/* The running QEMU opens the new top: its uid's first (and the
		 * old top frozen, storage_vol_own). */
		if (live && (storage_vol_info(h->st, made, &vi, e) < 0 ||
			     machine_own_volume(h, m, made, e) < 0))
			goto undo;
	}
	if (snap || live) {
		t0 = mono_us();
		if (vs == VS_RUNNING && virt_pause(h->virt, m->id, e) < 0)
			goto undo;
		rc = mem ? virt_memory_snapshot(h->virt, m->id, mem, e) : 0;
		if (rc == 0)
			rc = snap ? storage_snapshot(h->st, m->volume, made, e)
				  : virt_disk_snapshot(h->virt, m->id, vi.path, e);
		struct err ue = { 0 };
		if (vs == VS_RUNNING && virt_unpause(h->virt, m->id, &ue) < 0)
			log_error("machine %s stays paused after its checkpoint: %s "
				  "(resume unpauses it)", m->name, ue.msg);
		if (rc < 0)
			goto undo;
		hostd_crash_point(h, "checkpoint-after-snapshot");
		log_debug("machine %s paused %lld us for a %s snapshot", m->name,
			  (long long)(mono_us() - t0), mem ? "memory and disk" : "disk");
	}
	snprintf(frozen, len, "%s", snap ? made : m->volume);
	snprintf(writable, len, "%s", snap ? m->volume : made);
	return 0;
undo:
	if (!snap)
		storage_vol_remove(h->st, made, NULL);
	if (mem)
		unlink(mem);
	return -1;
}

/* Freeze M's disk as it is now into FROZEN (80 bytes, a volume name), as
 * freeze_top, and move M onto its new writable top (recorded; a stopped
 * M's domain redefined).  MEM: its memory too. */
static int freeze_now(struct hostd *h, struct machine *m, enum vstate vs, const char *mem,
		      char frozen[80], struct err *e)
{
	char old_top[80], new_top[80];

	snprintf(old_top, sizeof(old_top), "%s", m->volume);
	if (freeze_top(h, m, vs, mem, frozen, new_top, sizeof(new_top), e) < 0)
		return -1;
	if (strcmp(new_top, old_top) == 0)
		return 0;
	if (db_machine_set_volume(h->db, m->id, new_top, e) < 0) {
		if (vs == VS_STOPPED)
			storage_vol_remove(h->st, new_top, NULL);
		return -1;
	}
	snprintf(m->volume, sizeof(m->volume), "%s", new_top);
	if (vs == VS_STOPPED && machine_define(h, m, e) < 0)
		return -1;
	return 0;
}

int checkpoint_create(struct hostd *h, const char *owner, const char *name,
		      const char *ckpt, bool memory, struct checkpoint *out, struct err *e)
{
	struct machine m;
	struct checkpoint c;
	enum vstate vs;
	char new_top[80], old_top[80], frozen[80], gen[64];
	int rc = -1;

	memset(&c, 0, sizeof(c));
	if (ckpt && !name_valid(ckpt))
		return err_set(e, 400, "invalid_name",
			       "invalid checkpoint name '%s': use 1 to 63 of a-z, 0-9 and '-'", ckpt);
	if (machine_begin(h, owner, name, "checkpoint", &m, &vs, e) < 0)
		return -1;
	if (quota_check_checkpoint(h, &m, memory, e) < 0)
		goto out;
	if (!ckpt) {
		/* ckpt-YYYYMMDD-HHMMSS, with -2, -3... within one second. */
		time_t t = time(NULL);
		struct tm tm;
		char stamp[32];
		gmtime_r(&t, &tm);
		strftime(stamp, sizeof(stamp), "ckpt-%Y%m%d-%H%M%S", &tm);
		snprintf(gen, sizeof(gen), "%s", stamp);
		for (int i = 2; db_ckpt_get(h->db, m.id, gen, &c, NULL) == 0 && i < 1000; i++)
			snprintf(gen, sizeof(gen), "%s-%d", stamp, i);
		ckpt = gen;
	}
	if (db_ckpt_get(h->db, m.id, ckpt, &c, NULL) == 0) {
		err_set(e, 409, "exists", "machine %s has a checkpoint %s", name, ckpt);
		goto out;
	}
	snprintf(old_top, sizeof(old_top), "%s", m.volume);
	if (memory)
		xsnprintf(c.memory, sizeof(c.memory), "%s/machines/%s/ckpt-%s.mem",
			 h->cfg.state_dir, m.id, ckpt);
	if (freeze_top(h, &m, vs, memory ? c.memory : NULL, frozen, new_top, sizeof(new_top),
		       e) < 0)
		goto out;
	snprintf(c.machine_id, sizeof(c.machine_id), "%s", m.id);
	snprintf(c.name, sizeof(c.name), "%s", ckpt);
	snprintf(c.volume, sizeof(c.volume), "%s", frozen);
	c.created = now_s();
	if (db_ckpt_insert(h->db, &c, new_top, e) < 0) {
		if (strcmp(new_top, old_top) != 0 && vs == VS_STOPPED)
			storage_vol_remove(h->st, new_top, NULL);
		else if (strcmp(new_top, old_top) != 0)
			/* QEMU writes the new volume now: follow it. */
			db_machine_set_volume(h->db, m.id, new_top, NULL);
		volume_gc(h, frozen);
		if (c.memory[0])
			unlink(c.memory);
		goto out;
	}
	snprintf(m.volume, sizeof(m.volume), "%s", new_top);
	if (vs == VS_STOPPED && strcmp(new_top, old_top) != 0) {
		/* The checkpoint is made; the domain's definition follows the
		 * database at the next start anyway. */
		struct err de = { 0 };
		if (machine_define(h, &m, &de) < 0)
			log_warn("checkpoint %s of %s: redefine: %s (the next start redefines it)",
				 ckpt, m.name, de.msg);
	}
	log_info("checkpoint %s of %s/%s (volume %s%s%s)", ckpt, m.owner, m.name, frozen,
		 c.memory[0] ? ", memory " : "", c.memory);
	{
		char detail[160];
		snprintf(detail, sizeof(detail), "checkpoint %s%s", ckpt,
			 c.memory[0] ? " with memory" : "");
		events_emit(h, m.owner, m.name, "checkpointed", detail);
	}
	*out = c;
	rc = 0;
out:
	machine_end(h, &m);
	return rc;
}

int checkpoint_delete(struct hostd *h, const char *owner, const char *name,
		      const char *ckpt, struct err *e)
{
	struct machine m;
	struct checkpoint c;
	enum vstate vs;
	int rc = -1;

	if (machine_begin(h, owner, name, "checkpoint rm", &m, &vs, e) < 0)
		return -1;
	if (db_ckpt_get(h->db, m.id, ckpt, &c, e) < 0 || db_ckpt_delete(h->db, m.id, ckpt, e) < 0)
		goto out;
	/* Kept while the machine's own volume or a fork is layered on it. */
	volume_gc(h, c.volume);
	if (c.memory[0])
		unlink(c.memory);
	log_info("deleted checkpoint %s of %s/%s", ckpt, m.owner, m.name);
	rc = 0;
out:
	machine_end(h, &m);
	return rc;
}

json_t *checkpoint_json(const struct checkpoint *c)
{
	return json_pack("{s:s, s:I, s:b}", "name", c->name, "created", (json_int_t)c->created,
			 "memory", c->memory[0] != '\0');
}

json_t *checkpoint_list_json(struct hostd *h, const char *owner, const char *name,
			     struct err *e)
{
	struct machine m;
	struct checkpoint *cs;
	size_t n;
	json_t *arr;

	if (db_machine_get(h->db, owner, name, &m, e) < 0 ||
	    db_ckpt_list(h->db, m.id, &cs, &n, e) < 0)
		return NULL;
	arr = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, checkpoint_json(&cs[i]));
	free(cs);
	return json_pack("{s:s, s:o}", "machine", name, "checkpoints", arr);
}

/* Start M from the save image MEM with M's own domain XML (its disk, port,
 * seed): a memory checkpoint's restore, or (FOREIGN: MEM is another
 * machine's) a live fork's start. */
static int restore_memory_now(struct hostd *h, struct machine *m, const char *mem,
			      bool foreign, struct err *e)
{
	struct buf xml = BUF_INIT;
	char copy[PATH_MAX];
	int rc = -1;

	if (machine_port_refresh(h, m, e) < 0)
		return -1;
	if (machine_xml_for_image(h, m, mem, foreign, &xml, e) < 0)
		goto out;
	if (!foreign) {
		rc = virt_restore(h->virt, mem, buf_str(&xml), e);
		goto out;
	}
	snprintf(copy, sizeof(copy), "%s.%s", mem, m->id);
	int64_t t0 = mono_ms();
	if (virt_save_image_retarget(mem, copy, buf_str(&xml), e) == 0) {
		int64_t t1 = mono_ms();
		rc = virt_restore(h->virt, copy, NULL, e);
		unlink(copy);
		log_info("%s restored from another's memory: the image's copy %lld ms, "
			 "libvirt's restore %lld ms", m->name, (long long)(t1 - t0),
			 (long long)(mono_ms() - t1));
	}
out:
	buf_free(&xml);
	return rc;
}

/* restore_memory_now under the running quotas: M runs afterwards. */
static int restore_memory(struct hostd *h, struct machine *m, const char *mem, bool foreign,
			  struct err *e)
{
	int held = quota_start_begin(h, m, e), rc;

	if (held < 0)
		return -1;
	rc = restore_memory_now(h, m, mem, foreign, e);
	quota_start_end(h, m, held, rc == 0);
	return rc;
}

int checkpoint_restore(struct hostd *h, const char *owner, const char *name,
		       const char *ckpt, bool wait, struct machine *out, struct err *e)
{
	struct machine m;
	struct checkpoint c;
	enum vstate vs;
	char new_top[80], old_top[80];
	bool was_running = false;
	int rc = -1;

	if (!name_valid(ckpt))
		return err_set(e, 400, "invalid_name", "invalid checkpoint name '%s'", ckpt);
	if (machine_begin(h, owner, name, "restore", &m, &vs, e) < 0)
		return -1;
	if (db_ckpt_get(h->db, m.id, ckpt, &c, e) < 0)
		goto out;
	if (vs == VS_BUSY) {
		err_set(e, 409, "busy", "machine %s is changing state in libvirt; try again", name);
		goto out;
	}
	was_running = vs == VS_RUNNING || vs == VS_PAUSED;
	/* The present is being discarded: no shutdown grace.  SSH sessions
	 * kept to it would meet a guest that never knew them, or (restored
	 * from a memory image older than they) one that waits for old
	 * sequence numbers: none is used again. */
	execs_machine_reset(h->execs, m.id);
	if (was_running && virt_destroy(h->virt, m.id, e) < 0)
		goto out;
	if (vs == VS_SUSPENDED && machine_do_stop(h, &m, vs, 1, e) < 0)
		goto out;
	if (next_top(&m, new_top, sizeof(new_top), e) < 0 ||
	    storage_vol_create(h->st, new_top, c.volume, m.disk, e) < 0)
		goto out;
	if (db_machine_set_volume(h->db, m.id, new_top, e) < 0) {
		storage_vol_remove(h->st, new_top, NULL);
		goto out;
	}
	snprintf(old_top, sizeof(old_top), "%s", m.volume);
	snprintf(m.volume, sizeof(m.volume), "%s", new_top);
	if (machine_define(h, &m, e) < 0)
		goto out;
	volume_gc(h, old_top);
	log_info("restored %s/%s to checkpoint %s", m.owner, m.name, ckpt);
	{
		char detail[160];
		snprintf(detail, sizeof(detail), "checkpoint %s", ckpt);
		events_emit(h, m.owner, m.name, "restored", detail);
	}
	secrets_machine_restored(h, m.id);
	if (c.memory[0]) {
		/* Back to the running machine of that moment, memory and all. */
		if (restore_memory(h, &m, c.memory, false, e) < 0)
			goto out;
		was_running = true;
	} else if (was_running && machine_do_start(h, &m, VS_STOPPED, e) < 0) {
		goto out;
	}
	rc = 0;
out:
	machine_end(h, &m);
	if (rc == 0 && was_running && wait && machine_wait_ready(h, &m, h->cfg.boot_timeout_s, e) < 0)
		rc = -1;
	if (rc == 0)
		rc = db_machine_get_id(h->db, m.id, out, e);
	return rc;
}

/* The input of an image's berth-identity (docs/architecture.md, "Live
 * identity"): lines "KEY VALUE", the host key's PEM last, one line each.
 * Into a memfd (it holds a private key: never a file on disk); -1 on
 * failure. */
static int identity_input(struct hostd *h, const struct machine *f,
			  const struct live_identity *id)
{
	unsigned char rnd[64], mid[16];
	char hex[2 * sizeof(rnd) + 1];
	struct buf b = BUF_INIT;
	int fd = -1;

	if (random_bytes(rnd, sizeof(rnd)) < 0 || random_bytes(mid, sizeof(mid)) < 0)
		goto out;
	buf_printf(&b, "hostname %s\n", f->name);
	for (size_t i = 0; i < sizeof(rnd); i++)
		snprintf(hex + 2 * i, 3, "%02x", rnd[i]);
	buf_printf(&b, "random %s\n", hex);
	if (id->machine_id) {
		for (size_t i = 0; i < sizeof(mid); i++)
			snprintf(hex + 2 * i, 3, "%02x", mid[i]);
		buf_printf(&b, "machine-id %s\n", hex);
	}
	/* The seed's authorized keys (machine_create_from): hostd's own. */
	buf_printf(&b, "authorized-key %s\n", h->key.public_line);
	for (const char *l = id->host_key_private; *l;) {
		size_t n = strcspn(l, "\n");
		if (n)
			buf_printf(&b, "host-key %.*s\n", (int)n, l);
		l += n + (l[n] == '\n');
	}
	buf_adds(&b, "end\n");
	fd = memfd_create("berth-identity", MFD_CLOEXEC);
	if (fd >= 0 && (write(fd, b.data, b.len) != (ssize_t)b.len || lseek(fd, 0, SEEK_SET) < 0)) {
		close(fd);
		fd = -1;
	}
out:
	memset(rnd, 0, sizeof(rnd));
	memset(hex, 0, sizeof(hex));
	if (b.data)
		memset(b.data, 0, b.len);
	buf_free(&b);
	return fd;
}

/* A machine started from another's memory (a live fork, a machine from a
 * template) runs with its hostname and, in its sshd, its host key
 * (ID->source_key).  Its seed is its own already, and so is the key
 * pinned for it.  berth's images re-key the running guest in one SSH
 * command: berth-identity (images since issue 18) is handed everything on
 * stdin; berth-seed --live (older ones) re-reads the seed.  Either way
 * what counts is that the guest then presents its own key, confirmed
 * here.  An image with neither gets `hostname NEW` and keeps presenting
 * the source's key until it reboots: that key stays pinned until then,
 * and its seed's is pinned at its first cold boot (host_key_next). */
static void reseed_running(struct hostd *h, struct machine *f, struct live_identity *id)
{
	struct image img;
	char host[64], err[512], cmd[512], got[HOST_KEY_MAX];
	int port, status = -1, in = -1;
	bool own = false;
	const char *how = "berth-seed --live";

	id->applied = false;
	if (db_image_get(h->db, f->image, &img, NULL) < 0 ||
	    machine_endpoint(h, f, host, sizeof(host), &port, NULL) != 0)
		return;
	int64_t wait_ms = machine_ssh_timeout_ms(h);
	struct sshexec_target t = { .host = host, .port = port, .user = img.user,
				    .key_b64 = h->key.private_pem,
				    .connect_timeout_ms = (int)wait_ms, .host_key = id->source_key };
	/* Root needs no sudo: knowing it here spares the guest an `id`. */
	const char *sudo = strcmp(img.user, "root") == 0 ? "" : "sudo -n ";
	int64_t began = mono_ms();
	if (id->host_key_private && (in = identity_input(h, f, id)) >= 0) {
		snprintf(cmd, sizeof(cmd),
			 "for f in /usr/lib/berth/berth-identity /etc/berth-identity; do "
			 "[ -x \"$f\" ] && exec %s\"$f\"; done; exit 5", sudo);
		how = "berth-identity";
		sshexec_run(&t, cmd, in, -1, -1, &status, err, sizeof(err));
		close(in);
		if (status == 0)
			id->applied = true;
	}
	if (status == 5 || in < 0) {
		/* No berth-identity (an image built before it): the seed. */
		status = -1;
		how = "berth-seed --live";
		snprintf(cmd, sizeof(cmd),
			 "for f in /usr/lib/berth/berth-seed /etc/berth-seed; do "
			 "[ -x \"$f\" ] && exec %s\"$f\" --live; done; %shostname '%s'; exit 3",
			 sudo, sudo, f->name);
		/* The connection may end before its status arrives (the guest's
		 * sshd restarting), and berth-seed may fail after its sshd took
		 * the new key: whatever the status, what counts is the key
		 * presented after (unless the image has no berth-seed). */
		sshexec_run(&t, cmd, -1, -1, -1, &status, err, sizeof(err));
	}
	int64_t ran = mono_ms();
	if (status != 3) {
		/* Each try may take the whole time left: a handshake with a
		 * guest that is still restarting its sshd under TCG took 9 to
		 * 27 s in t320, and a try that gives up sooner only starts the
		 * guest's work again.  A refused connection (the listener not
		 * yet back) is retried soon: it costs the guest nothing. */
		int64_t t0 = mono_ms(), left;
		while (!own && (left = wait_ms - (mono_ms() - t0)) > 0) {
			own = sshexec_host_key(host, port, NULL, (int)(left < 5000 ? 5000 : left),
					       got, sizeof(got), err, sizeof(err)) == 0 &&
			      sshexec_key_equal(got, f->host_key);
			if (!own)
				usleep(50 * 1000);
		}
	}
	if (own) {
		log_info("%s presents its own host key: %s took %lld ms (status %d), its sshd's "
			 "new key showed %lld ms later", f->name, how, (long long)(ran - began),
			 status, (long long)(mono_ms() - ran));
		f->host_key_state = HK_CONFIRMED;
		db_machine_set_host_key(h->db, f->id, f->host_key, HK_CONFIRMED, "", NULL);
		return;
	}
	id->applied = false;
	if (status != 3) {
		/* The guest was re-keyed, but the machine's own key did not
		 * show within the wait (a slow guest may still be restarting
		 * its sshd, as in t320's nested one): its own key stays pinned,
		 * and SSH to it is refused until it presents it (a reboot, from
		 * its seed, at the latest).  Never the source's: fail closed. */
		log_warn("%s did not present its own host key within %lld s (%s); "
			 "that key stays pinned, and SSH to it is refused until it does",
			 f->name, (long long)(wait_ms / 1000), status >= 0 ? "re-keying failed" : err);
		f->host_key_state = HK_CONFIRMED;
		db_machine_set_host_key(h->db, f->id, f->host_key, HK_CONFIRMED, "", NULL);
		return;
	}
	log_warn("live fork %s presents its source's host key until it reboots (its image "
		 "has no berth-seed); that key stays pinned until then", f->name);
	xsnprintf(f->host_key_next, sizeof(f->host_key_next), "%s", f->host_key);
	snprintf(f->host_key, sizeof(f->host_key), "%s", id->source_key);
	f->host_key_state = HK_CONFIRMED;
	db_machine_set_host_key(h->db, f->id, f->host_key, HK_CONFIRMED, f->host_key_next, NULL);
}

/* Network = routed: a live fork's guest runs with its source's memory, so
 * with its address and MAC (ALIAS, "IP MAC"); the host maps them to the
 * fork's own on the fork's tap (hostd/net.h) until its first cold boot. */
static int live_fork_alias(struct hostd *h, struct machine *f, const char *alias,
			   struct err *e)
{
	struct machine old = *f;

	if (!h->net || !alias || !alias[0] || !f->net_index)
		return 0;
	if (db_machine_set_net(h->db, f->id, f->net_index, alias, e) < 0)
		return -1;
	xsnprintf(f->net_alias, sizeof(f->net_alias), "%s", alias);
	net_machine_remove(h, &old);
	return net_machine_add(h, f, e);
}

void checkpoint_source_alias(struct hostd *h, const struct machine *src, char *out, size_t outlen)
{
	char ip[20];

	out[0] = '\0';
	if (!h->net || !src->net_index)
		return;
	/* A live fork of a live fork: the guest's address is the first's. */
	if (src->net_alias[0]) {
		snprintf(out, outlen, "%s", src->net_alias);
		return;
	}
	net_ip_text(net_machine_ip(net_conf(h), src->net_index), ip, sizeof(ip));
	snprintf(out, outlen, "%s %s", ip, src->mac);
}

int checkpoint_live_start(struct hostd *h, struct machine *f, const char *mem,
			  const char *alias, struct live_identity *id, bool wait, struct err *e)
{
	if (busy_acquire(h->busy, f->id, "fork", f->name, e) < 0)
		goto fail;
	if (live_fork_alias(h, f, alias, e) < 0 || restore_memory(h, f, mem, true, e) < 0) {
		busy_release(h->busy, f->id);
		goto fail;
	}
	db_machine_set_state(h->db, f->id, MS_RUNNING, NULL);
	busy_release(h->busy, f->id);
	reseed_running(h, f, id);
	if (wait && machine_wait_ready(h, f, h->cfg.boot_timeout_s, e) < 0)
		return -1;
	return 0;
fail:
	machine_delete(h, f->owner, f->name, NULL);
	return -1;
}

/* The event of NEW_NAME, a fork of OWNER's NAME (at checkpoint FROM). */
static void fork_event(struct hostd *h, const char *owner, const char *name,
		       const char *new_name, const char *from, bool live)
{
	char detail[200];

	snprintf(detail, sizeof(detail), "%sfork of %s%s%s", live ? "live " : "", name,
		 from ? " at checkpoint " : "", from ? from : "");
	events_emit(h, owner, new_name, "forked", detail);
}

int checkpoint_fork(struct hostd *h, const struct fork_req *r, struct machine *out,
		    struct err *e)
{
	const char *owner = r->owner, *name = r->name, *new_name = r->new_name, *from = r->from;
	bool live = r->live;
	struct machine m, f;
	struct checkpoint c;
	enum vstate vs;
	char base[80], mem[PATH_MAX] = "", *hk_priv = NULL;
	int rc = -1;

	if (live && from)
		return err_set(e, 400, "invalid_fork",
			       "a live fork copies the machine as it runs: it takes no checkpoint");
	if (!name_valid(new_name))
		return err_set(e, 400, "invalid_name",
			       "invalid machine name '%s': use 1 to 63 of a-z, 0-9 and '-', "
			       "not starting or ending with '-'", new_name);
	if (db_machine_get(h->db, owner, new_name, &f, NULL) == 0)
		return err_set(e, 409, "exists", "machine %s exists", new_name);
	if (from && !name_valid(from))
		return err_set(e, 400, "invalid_name", "invalid checkpoint name '%s'", from);
	if (machine_begin(h, owner, name, "fork", &m, &vs, e) < 0)
		return -1;
	if (from) {
		if (db_ckpt_get(h->db, m.id, from, &c, e) < 0)
			goto out;
		snprintf(base, sizeof(base), "%s", c.volume);
	} else {
		/* Freeze the machine as it is now; the frozen volume has no
		 * name of its own and lives as long as something is layered
		 * on it. */
		if (live) {
			/* The fork's first answers come with the source's host
			 * key: it must be the one pinned. */
			struct err ke = { 0 };
			if (machine_host_key(h, &m, &ke) < 0)
				log_warn("live fork of %s: %s", m.name, ke.msg);
			xsnprintf(mem, sizeof(mem), "%s/tmp", h->cfg.state_dir);
			mkdir_p(mem, 0700);
			xsnprintf(mem, sizeof(mem), "%s/tmp/fork-%s-%s.mem", h->cfg.state_dir, m.id,
				 new_name);
		}
		if (freeze_now(h, &m, vs, live ? mem : NULL, base, e) < 0)
			goto out;
	}
	rc = 0;
	/* The fork's volume is made while the source is still marked busy:
	 * until it exists nothing else holds its base (a checkpoint rm or a
	 * delete of the source would collect it). */
	/* Its egress policy is its source's. */
	struct buf egress = BUF_INIT;
	db_machine_egress(h->db, m.id, &egress, NULL);
	struct create_req cr = { .owner = owner, .name = new_name, .image = m.image,
				 .vcpus = m.vcpus, .memory = m.memory, .disk = m.disk,
				 .idle_timeout = m.idle_timeout,
				 .egress = egress.len ? buf_str(&egress) : NULL,
				 .host_key_private = live ? &hk_priv : NULL };
	rc = machine_create_from(h, &cr, base, &f, e);
	buf_free(&egress);
	if (rc == 0)
		secrets_machine_forked(h, m.id, f.id, !from);
	if (rc < 0) {
		rc = -1;
		if (!from)
			volume_gc(h, base);
		if (mem[0])
			unlink(mem);
	}
out:
	machine_end(h, &m);
	if (rc < 0)
		return -1;
	if (live) {
		/* The fork starts from the source's memory in its own domain. */
		char alias[40];
		checkpoint_source_alias(h, &m, alias, sizeof(alias));
		struct live_identity id = { .source_key = m.host_key,
					    .host_key_private = hk_priv };
		rc = checkpoint_live_start(h, &f, mem, alias, &id, false, e);
		if (hk_priv)
			memset(hk_priv, 0, strlen(hk_priv));
		free(hk_priv);
		unlink(mem);
		/* As below: a thin snapshot made only to fork from goes now. */
		volume_gc(h, base);
		if (rc < 0)
			return -1;
		log_info("live fork %s/%s -> %s", owner, name, new_name);
		fork_event(h, owner, name, new_name, NULL, true);
		if (r->wait && machine_wait_ready(h, &f, h->cfg.boot_timeout_s, e) < 0)
			return -1;
		return db_machine_get_id(h->db, f.id, out, e);
	}
	log_info("forked %s/%s into %s%s%s", owner, name, new_name, from ? " from checkpoint " : "",
		 from ? from : "");
	fork_event(h, owner, name, new_name, from, false);
	/* A snapshot made only to fork from is named by nothing: with
	 * independent (thin) volumes it goes now. */
	if (!from)
		volume_gc(h, base);
	if (r->start) {
		/* Like create: a fork asked to start runs, or is not there. */
		struct act_opts o = { .wait = r->wait };
		if (machine_act(h, owner, new_name, ACT_START, &o, &f, NULL, e) < 0) {
			machine_delete(h, owner, new_name, NULL);
			return -1;
		}
	}
	*out = f;
	return 0;
}

/* The boot files of SRC (a direct-boot image) copied into DIR for IMG. */
static int copy_boot_files(const struct image *src, const char *dir, struct image *img,
			   struct err *e)
{
	const char *files[2] = { src->kernel, src->initrd };
	char *into[2] = { img->kernel, img->initrd };

	if (!src->kernel[0])
		return 0;
	if (mkdir_p(dir, 0755) < 0)
		return err_errno(e, errno, "create %s", dir);
	for (int i = 0; i < 2; i++) {
		const char *base = strrchr(files[i], '/');
		if (!files[i][0])
			continue;
		xsnprintf(into[i], sizeof(img->kernel), "%s/%s", dir, base ? base + 1 : files[i]);
		if (file_copy(files[i], into[i], 0644, e) < 0)
			return -1;
	}
	return 0;
}

int checkpoint_image(struct hostd *h, const char *owner, const char *name, const char *image,
		     const char *ckpt, struct image *out, struct err *e)
{
	struct machine m;
	struct checkpoint c;
	struct image src, img;
	enum vstate vs;
	char base[80], dir[PATH_MAX];
	bool froze = false;
	int rc = -1;

	if (!name_valid(image))
		return err_set(e, 400, "invalid_name", "invalid image name '%s': use 1 to 63 of "
			       "a-z, 0-9 and '-'", image);
	if (ckpt && !name_valid(ckpt))
		return err_set(e, 400, "invalid_name", "invalid checkpoint name '%s'", ckpt);
	if (db_image_get(h->db, image, &img, NULL) == 0)
		return err_set(e, 409, "exists", "image %s exists", image);
	if (machine_begin(h, owner, name, "image", &m, &vs, e) < 0)
		return -1;
	if (db_image_get(h->db, m.image, &src, e) < 0)
		goto out;
	if (ckpt) {
		if (db_ckpt_get(h->db, m.id, ckpt, &c, e) < 0)
			goto out;
		snprintf(base, sizeof(base), "%s", c.volume);
	} else {
		if (freeze_now(h, &m, vs, NULL, base, e) < 0)
			goto out;
		froze = true;
	}
	memset(&img, 0, sizeof(img));
	snprintf(img.name, sizeof(img.name), "%s", image);
	snprintf(img.volume, sizeof(img.volume), "%s", base);
	snprintf(img.format, sizeof(img.format), "%s", src.format);
	snprintf(img.boot, sizeof(img.boot), "%s", src.boot);
	snprintf(img.cmdline, sizeof(img.cmdline), "%s", src.cmdline);
	snprintf(img.user, sizeof(img.user), "%s", src.user);
	snprintf(img.source, sizeof(img.source), "machine");
	snprintf(img.owner, sizeof(img.owner), "%s", owner);
	img.virtual_size = m.disk;
	img.created = now_s();
	img.public_ = false;
	xsnprintf(dir, sizeof(dir), "%s/images/%s", h->cfg.state_dir, image);
	if (copy_boot_files(&src, dir, &img, e) < 0 || db_image_insert(h->db, &img, e) < 0) {
		remove_tree(dir, NULL);
		goto out;
	}
	log_info("image %s made from %s/%s%s%s (private to %s)", image, owner, name,
		 ckpt ? ", checkpoint " : "", ckpt ? ckpt : "", owner);
	*out = img;
	rc = 0;
out:
	machine_end(h, &m);
	/* A volume frozen for an image that was not made: nothing names it. */
	if (rc < 0 && froze)
		volume_gc(h, base);
	return rc;
}
