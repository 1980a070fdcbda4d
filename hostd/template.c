#include "hostd/template.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/sshexec.h"
#include "common/util.h"
#include "hostd/checkpoint.h"
#include "hostd/events.h"
#include "hostd/machine.h"
#include "hostd/machine_steps.h"
#include "common/banned.h"

/* Builds in progress (this hostd's): what GET /v1/templates/NAME answers
 * before the row exists, and what makes a second build of a name 409 at
 * once. */
struct build {
	char name[64], owner[64], machine[32];
	const char *stage;   /* static: "boot", "setup", "save" */
	int64_t started_ms;
	struct build *next;
};
static struct build *builds;
static pthread_mutex_t builds_lock = PTHREAD_MUTEX_INITIALIZER;

static void build_stage(struct build *b, const char *stage)
{
	pthread_mutex_lock(&builds_lock);
	b->stage = stage;
	pthread_mutex_unlock(&builds_lock);
}

static void build_end(struct build *b)
{
	pthread_mutex_lock(&builds_lock);
	for (struct build **p = &builds; *p; p = &(*p)->next)
		if (*p == b) {
			*p = b->next;
			break;
		}
	pthread_mutex_unlock(&builds_lock);
}

json_t *template_building_json(const char *name, const char *user)
{
	json_t *j = NULL;

	pthread_mutex_lock(&builds_lock);
	for (struct build *b = builds; b; b = b->next)
		if (strcmp(b->name, name) == 0 &&
		    (strcmp(user, "root") == 0 || strcmp(user, b->owner) == 0)) {
			j = json_pack("{s:s, s:s, s:{s:s, s:s, s:I}}", "name", b->name, "owner",
				      b->owner, "building", "stage", b->stage, "machine", b->machine,
				      "elapsed_ms", (json_int_t)(mono_ms() - b->started_ms));
			break;
		}
	pthread_mutex_unlock(&builds_lock);
	return j;
}

/* What the setup command may write that the answer keeps. */
#define OUTPUT_MAX (1 << 20)

bool template_visible(const struct template *t, const char *user)
{
	return t->public_ || strcmp(user, "root") == 0 || strcmp(t->owner, user) == 0;
}

static void mem_path(struct hostd *h, const char *name, char *out, size_t outlen)
{
	xsnprintf(out, outlen, "%s/templates/%s.mem", h->cfg.state_dir, name);
}

json_t *template_json(const struct template *t)
{
	return json_pack("{s:s, s:s, s:b, s:s, s:i, s:I, s:I, s:s, s:I, s:I, s:I}",
			 "name", t->name, "owner", t->owner, "public", t->public_,
			 "image", t->image, "vcpus", t->vcpus, "memory", (json_int_t)t->memory,
			 "disk", (json_int_t)t->disk, "setup", t->setup,
			 "created", (json_int_t)t->created, "build_ms", (json_int_t)t->build_ms,
			 "memory_size", (json_int_t)t->mem_size);
}

/* The last line of OUT that is not empty, at most LEN bytes of it. */
static void last_line(const struct buf *out, char *line, size_t len)
{
	const char *s = out->len ? buf_str(out) : "";
	size_t n = strlen(s), end, start;

	while (n && (s[n - 1] == '\n' || s[n - 1] == '\r'))
		n--;
	end = n;
	while (n && s[n - 1] != '\n')
		n--;
	start = n;
	if (end - start >= len)
		start = end - (len - 1);
	snprintf(line, len, "%.*s", (int)(end - start), s + start);
}

/* The setup's watchdog: when TIMEOUT_MS pass before anything arrives on
 * CANCEL, it closes CTL, which ends the run (sshexec_io.ctl). */
struct watchdog {
	int cancel, ctl;
	int timeout_ms;
	bool fired;
};

static void *watchdog_run(void *arg)
{
	struct watchdog *w = arg;
	struct pollfd p = { .fd = w->cancel, .events = POLLIN };
	int r;

	while ((r = poll(&p, 1, w->timeout_ms)) < 0 && errno == EINTR)
		;
	if (r == 0) {
		w->fired = true;
		close(w->ctl);
		w->ctl = -1;
	}
	return NULL;
}

/* Run SETUP in the build machine MS (its user, over SSH, host key pinned),
 * its output into OUT, for at most TIMEOUT_S seconds.  0 when it exits 0. */
static int run_setup(struct hostd *h, const char *tname, const struct machine_ssh *ms,
		     const char *setup, int timeout_s, struct buf *out, struct err *e)
{
	char err[512] = "", tail[200];
	int fd = memfd_create("berth-template-setup", MFD_CLOEXEC), rc = -1, run;
	int ctl[2] = { -1, -1 }, cancel[2] = { -1, -1 };
	struct sshexec_target t = { .host = ms->host, .port = ms->port, .user = ms->user,
				    .key_b64 = h->key.private_pem,
				    .connect_timeout_ms = machine_ssh_timeout_ms(h),
				    .host_key = ms->m.host_key };
	struct sshexec_io io = { .in = -1, .status = -1 };
	struct watchdog w = { .timeout_ms = timeout_s * 1000 };
	pthread_t th;
	struct stat sb;

	if (fd < 0 || pipe2(ctl, O_CLOEXEC) < 0 || pipe2(cancel, O_CLOEXEC) < 0) {
		err_errno(e, errno, "template %s: memfd or pipe", tname);
		goto out;
	}
	io.out = io.err = fd;
	io.ctl = ctl[0];
	w.cancel = cancel[0];
	w.ctl = ctl[1];
	if (pthread_create(&th, NULL, watchdog_run, &w) != 0) {
		err_set(e, 500, "internal", "template %s: cannot start a thread", tname);
		goto out;
	}
	run = sshexec_run_io(&t, setup, &io, err, sizeof(err));
	if (write(cancel[1], "x", 1) < 0)
		log_warn("template %s: cannot stop the setup's watchdog", tname);
	pthread_join(th, NULL);
	ctl[1] = w.ctl;
	if (fstat(fd, &sb) == 0 && sb.st_size > 0) {
		off_t from = sb.st_size > OUTPUT_MAX ? sb.st_size - OUTPUT_MAX : 0;
		char chunk[65536];
		ssize_t n;
		while ((n = pread(fd, chunk, sizeof(chunk), from)) > 0) {
			buf_add(out, chunk, (size_t)n);
			from += n;
		}
	}
	if (w.fired) {
		err_set(e, 504, "timeout", "template %s: the setup command did not end within "
			"%d s", tname, timeout_s);
		goto out;
	}
	if (run < 0) {
		err_set(e, 502, "ssh_failed", "template %s: cannot run the setup command: %s",
			tname, err);
		goto out;
	}
	if (io.status != 0) {
		last_line(out, tail, sizeof(tail));
		err_set(e, 422, "setup_failed", "template %s: the setup command exited with "
			"status %d%s%s", tname, io.status, tail[0] ? ": " : "", tail);
		goto out;
	}
	rc = 0;
out:
	for (int i = 0; i < 2; i++) {
		if (ctl[i] >= 0)
			close(ctl[i]);
		if (cancel[i] >= 0)
			close(cancel[i]);
	}
	if (fd >= 0)
		close(fd);
	return rc;
}

int template_create(struct hostd *h, const struct template_req *r, struct template *out,
		    struct buf *output, struct err *e)
{
	struct template t;
	struct machine_ssh ms;
	struct machine m;
	struct checkpoint c;
	char build[32], dir[PATH_MAX], mem[PATH_MAX];
	unsigned char rnd[4];
	int64_t t0 = mono_ms();
	bool made = false, saved = false;
	int rc = -1;

	memset(&t, 0, sizeof(t));
	if (!name_valid(r->name))
		return err_set(e, 400, "invalid_name", "invalid template name '%s': use 1 to 63 "
			       "of a-z, 0-9 and '-', not starting or ending with '-'", r->name);
	if (r->setup && strlen(r->setup) >= sizeof(t.setup))
		return err_set(e, 400, "invalid_setup", "the setup command is longer than %zu "
			       "bytes", sizeof(t.setup) - 1);
	if (db_template_get(h->db, r->name, &t, NULL) == 0)
		return err_set(e, 409, "exists", "template %s exists", r->name);
	if (random_bytes(rnd, sizeof(rnd)) < 0)
		return err_set(e, 500, "internal", "random");
	snprintf(build, sizeof(build), "tpl-%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2], rnd[3]);
	struct build me = { .stage = "boot", .started_ms = t0 };
	snprintf(me.name, sizeof(me.name), "%s", r->name);
	snprintf(me.owner, sizeof(me.owner), "%s", r->owner);
	snprintf(me.machine, sizeof(me.machine), "%s", build);
	pthread_mutex_lock(&builds_lock);
	for (struct build *b = builds; b; b = b->next)
		if (strcmp(b->name, r->name) == 0) {
			pthread_mutex_unlock(&builds_lock);
			return err_set(e, 409, "exists", "template %s is being built", r->name);
		}
	me.next = builds;
	builds = &me;
	pthread_mutex_unlock(&builds_lock);
	struct create_req cr = { .owner = r->owner, .name = build, .image = r->image,
				 .vcpus = r->vcpus, .memory = r->memory, .disk = r->disk,
				 .idle_timeout = -1, .start = true, .wait = true };
	log_info("template %s: building in machine %s/%s (image %s)", r->name, r->owner, build,
		 r->image);
	/* Create-and-start gives a running machine or nothing. */
	if (machine_create(h, &cr, &m, NULL, e) < 0)
		goto out;
	made = true;
	if (machine_ssh(h, r->owner, build, false, &ms, e) < 0)
		goto out;
	build_stage(&me, "setup");
	if (r->setup && r->setup[0] && run_setup(h, r->name, &ms, r->setup, r->timeout_s, output, e) < 0)
		goto out;
	/* Disk and memory of one instant. */
	build_stage(&me, "save");
	if (checkpoint_create(h, r->owner, build, "template", true, &c, e) < 0 ||
	    db_machine_get(h->db, r->owner, build, &m, e) < 0)
		goto out;
	xsnprintf(dir, sizeof(dir), "%s/templates", h->cfg.state_dir);
	if (mkdir_p(dir, 0700) < 0) {
		err_errno(e, errno, "create %s", dir);
		goto out;
	}
	mem_path(h, r->name, mem, sizeof(mem));
	if (rename(c.memory, mem) < 0) {
		err_errno(e, errno, "template %s: move %s", r->name, c.memory);
		goto out;
	}
	saved = true;
	struct stat sb;
	snprintf(t.name, sizeof(t.name), "%s", r->name);
	snprintf(t.owner, sizeof(t.owner), "%s", r->owner);
	t.public_ = r->public_;
	snprintf(t.image, sizeof(t.image), "%s", m.image);
	snprintf(t.volume, sizeof(t.volume), "%s", c.volume);
	t.vcpus = m.vcpus;
	t.memory = m.memory;
	t.disk = m.disk;
	snprintf(t.host_key, sizeof(t.host_key), "%s", m.host_key);
	checkpoint_source_alias(h, &m, t.net_alias, sizeof(t.net_alias));
	/* The address the saved guest uses stays the template's. */
	t.net_index = t.net_alias[0] ? m.net_index : 0;
	snprintf(t.setup, sizeof(t.setup), "%s", r->setup ? r->setup : "");
	t.created = now_s();
	t.build_ms = mono_ms() - t0;
	t.mem_size = stat(mem, &sb) == 0 ? (uint64_t)sb.st_size : 0;
	/* The row names the frozen volume before the build machine goes:
	 * deleting it keeps what the template needs. */
	if (db_template_insert(h->db, &t, e) < 0)
		goto out;
	rc = 0;
	log_info("template %s made in %lld ms (memory image %llu bytes)", t.name,
		 (long long)t.build_ms, (unsigned long long)t.mem_size);
	*out = t;
out:
	if (made) {
		struct err de = { 0 };
		if (machine_delete(h, r->owner, build, &de) < 0)
			log_error("template %s: cannot remove its build machine %s: %s", r->name,
				  build, de.msg);
	}
	if (rc < 0 && saved)
		unlink(mem);
	build_end(&me);
	return rc;
}

int template_delete(struct hostd *h, const char *owner, const char *name, struct err *e)
{
	struct template t;
	char mem[PATH_MAX];

	if (db_template_get(h->db, name, &t, e) < 0)
		return -1;
	if (!template_visible(&t, owner))
		return err_set(e, 404, "no_template", "no template %s", name);
	if (strcmp(owner, "root") != 0 && strcmp(t.owner, owner) != 0)
		return err_set(e, 403, "forbidden", "template %s is %s's: only they or root may "
			       "delete it", name, t.owner);
	if (db_template_delete(h->db, name, e) < 0)
		return -1;
	mem_path(h, name, mem, sizeof(mem));
	unlink(mem);
	/* Machines made from it are layered on its volume: it stays for them. */
	volume_gc(h, t.volume);
	log_info("template %s deleted by %s", name, owner);
	return 0;
}

/* The identity left to give a machine F just restored from a template,
 * over SSH with its own host key: /etc/machine-id (32 hex digits of the
 * host's randomness) and 64 random bytes mixed into its RNG (on top of
 * the reseed the new VM generation id makes). */
static void apply_identity(struct hostd *h, const struct machine *f)
{
	struct machine_ssh ms;
	struct err e = { 0 };
	unsigned char id[16], seed[64];
	char hex[33], cmd[512], err[256] = "";
	int fd = -1, status = -1;

	if (machine_ssh(h, f->owner, f->name, false, &ms, &e) < 0) {
		log_warn("machine %s from a template: no SSH for its machine id: %s", f->name,
			 e.msg);
		return;
	}
	if (random_bytes(id, sizeof(id)) < 0 || random_bytes(seed, sizeof(seed)) < 0)
		return;
	for (size_t i = 0; i < sizeof(id); i++)
		snprintf(hex + 2 * i, 3, "%02x", id[i]);
	fd = memfd_create("berth-template-seed", MFD_CLOEXEC);
	if (fd < 0 || write(fd, seed, sizeof(seed)) != (ssize_t)sizeof(seed) ||
	    lseek(fd, 0, SEEK_SET) < 0)
		goto out;
	snprintf(cmd, sizeof(cmd),
		 "s=; [ \"$(id -u)\" = 0 ] || s='sudo -n'; "
		 "$s sh -c 'cat >/dev/urandom; echo %s >/etc/machine-id.new && "
		 "mv /etc/machine-id.new /etc/machine-id'", hex);
	struct sshexec_target t = { .host = ms.host, .port = ms.port, .user = ms.user,
				    .key_b64 = h->key.private_pem,
				    .connect_timeout_ms = machine_ssh_timeout_ms(h),
				    .host_key = ms.m.host_key };
	if (sshexec_run(&t, cmd, fd, -1, -1, &status, err, sizeof(err)) < 0 || status != 0)
		log_warn("machine %s from a template: setting its machine id failed (%s%d)",
			 f->name, err[0] ? err : "status ", status);
out:
	memset(seed, 0, sizeof(seed));
	if (fd >= 0)
		close(fd);
}

int template_instantiate(struct hostd *h, const char *owner, const char *tname,
			 const char *new_name, bool wait, struct machine *out, struct err *e)
{
	struct template t;
	struct machine f;
	char mem[PATH_MAX], detail[120];
	int64_t t0 = mono_ms();

	if (!name_valid(tname))
		return err_set(e, 400, "invalid_template", "invalid template name '%s'", tname);
	if (db_template_get(h->db, tname, &t, e) < 0)
		return -1;
	/* Another user's private template answers as a missing one. */
	if (!template_visible(&t, owner))
		return err_set(e, 404, "no_template", "no template %s", tname);
	if (db_machine_get(h->db, owner, new_name, &f, NULL) == 0)
		return err_set(e, 409, "exists", "machine %s exists", new_name);
	mem_path(h, tname, mem, sizeof(mem));
	char *hk_priv = NULL;
	struct create_req cr = { .owner = owner, .name = new_name, .image = t.image,
				 .vcpus = t.vcpus, .memory = t.memory, .disk = t.disk,
				 .host_key_private = &hk_priv };
	if (machine_create_from(h, &cr, t.volume, &f, e) < 0)
		return -1;
	/* Re-keyed, named, its machine id and randomness given in one SSH
	 * command when its image has berth-identity; else berth-seed --live,
	 * then apply_identity. */
	struct live_identity id = { .source_key = t.host_key, .host_key_private = hk_priv,
				    .machine_id = true };
	int rc = checkpoint_live_start(h, &f, mem, t.net_alias, &id, false, e);
	if (hk_priv)
		memset(hk_priv, 0, strlen(hk_priv));
	free(hk_priv);
	if (rc < 0)
		return -1;
	if (!id.applied)
		apply_identity(h, &f);
	log_info("machine %s/%s from template %s running in %lld ms", owner, new_name, tname,
		 (long long)(mono_ms() - t0));
	snprintf(detail, sizeof(detail), "from template %s", tname);
	events_emit(h, owner, new_name, "forked", detail);
	if (wait && machine_wait_ready(h, &f, h->cfg.boot_timeout_s, e) < 0)
		return -1;
	return db_machine_get_id(h->db, f.id, out, e);
}

void template_reconcile(struct hostd *h)
{
	char dir[PATH_MAX], path[PATH_MAX], name[64];
	struct template t;
	struct dirent *de;
	DIR *d;

	xsnprintf(dir, sizeof(dir), "%s/templates", h->cfg.state_dir);
	d = opendir(dir);
	if (!d)
		return;
	while ((de = readdir(d))) {
		size_t n = strlen(de->d_name);
		if (de->d_name[0] == '.')
			continue;
		snprintf(name, sizeof(name), "%.*s", n > 4 ? (int)(n - 4) : 0, de->d_name);
		if (n > 4 && n - 4 < sizeof(name) && strcmp(de->d_name + n - 4, ".mem") == 0 &&
		    db_template_get(h->db, name, &t, NULL) == 0)
			continue;
		xsnprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		log_warn("reconcile: %s belongs to no template; removing it", path);
		unlink(path);
	}
	closedir(d);
}
