#include "hostd/reconcile.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "hostd/billing.h"
#include "hostd/machine_steps.h"
#include "hostd/memimage.h"
#include "common/banned.h"

void reconcile_event(const char *uuid, enum vstate now, void *data)
{
	struct hostd *h = data;
	struct machine m;
	enum mstate st;

	/* An operation in progress records its own outcome; the events it
	 * causes on the way (paused during a save, ...) are not states. */
	if (busy_held(h->busy, uuid))
		return;
	if (db_machine_get_id(h->db, uuid, &m, NULL) < 0)
		return;
	if (m.state == MS_CREATING || m.state == MS_DELETING)
		return;
	/* Saved into hostd's own image: libvirt only sees it stop. */
	if (now == VS_STOPPED && memimage_find(h, uuid, NULL, 0))
		now = VS_SUSPENDED;
	if (!machine_state_of(now, &st))
		return;
	if (m.state != st)
		log_info("libvirt reports %s/%s %s", m.owner, m.name, mstate_name(st));
	db_machine_set_state(h->db, uuid, st, NULL);
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
		xsnprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
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
	machine_dom_name(h, m, name, sizeof(name));
	snprintf(path, sizeof(path), "/var/log/libvirt/qemu/%s.log", name);
	if (stat(path, &st) == 0)
		log_mtime = st.st_mtime;
	return bill_stop_time(m->state_since, h->last_alive, boot, log_mtime, now_s());
}

void reconcile_at_start(struct hostd *h)
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
		if (m->state == MS_CREATING || m->state == MS_DELETING) {
			log_warn("reconcile: %s of %s/%s was interrupted; removing it",
				 m->state == MS_CREATING ? "create" : "delete",
				 m->owner, m->name);
			if (machine_destroy_all(h, m, &e) < 0)
				log_error("reconcile: %s/%s: %s", m->owner, m->name, e.msg);
			m->id[0] = '\0';  /* gone: its domain and volume are orphans now */
			continue;
		}
		memimage_end_feed(h, m);
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
		memimage_reconcile(h, m, &vs, ran);
		if (vs == VS_PAUSED) {
			/* berth pauses a guest only around a checkpoint's snapshot:
			 * hostd died in that moment. */
			log_warn("reconcile: %s/%s was left paused; resuming it", m->owner, m->name);
			if (virt_unpause(h->virt, m->id, &e) == 0)
				vs = VS_RUNNING;
			else
				log_error("reconcile: %s/%s: %s", m->owner, m->name, e.msg);
		}
		enum mstate st;
		if (machine_state_of(vs, &st) && m->state != st) {
			int64_t t = now_s();
			/* It stopped while hostd was not looking: its running
			 * time ends when it stopped, not now. */
			if (!mstate_holds_cpu(st) && mstate_holds_cpu(m->state))
				t = stopped_at(h, m);
			log_warn("reconcile: %s/%s is %s in libvirt, %s in the database; correcting "
				 "(as of %llds ago)", m->owner, m->name, mstate_name(st),
				 mstate_name(m->state), (long long)(now_s() - t));
			db_machine_set_state_at(h->db, m->id, st, t, NULL);
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
