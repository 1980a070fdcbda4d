/* berth-hostd: the privileged daemon.  Usage:
 *   berth-hostd --state DIR [--config FILE] [--log-level L]
 * Serves the JSON API on DIR/hostd.sock until SIGTERM or SIGINT.  Machines
 * are libvirt domains and outlive it; at start it reconciles its database
 * with libvirt and storage.
 *
 * Every file it makes is private (umask 077).  The state directory is 0711
 * and the socket 0666: any local user may call the API, as themselves
 * (hostd reads the peer's credentials), without listing the directory.
 * It refuses a state directory that it or a directory above it is not
 * root's or is writable by group or others (a sticky /tmp above a trusted
 * one excepted), and berth.conf or a key that is a symbolic link, someone
 * else's, or writable by group or others (common/util.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <grp.h>
#include <pwd.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "hostd/api.h"
#include "hostd/desktop.h"
#include "hostd/events.h"
#include "hostd/exec.h"
#include "hostd/hostd.h"
#include "hostd/idle.h"
#include "hostd/keyproof.h"
#include "hostd/image.h"
#include "hostd/template.h"
#include "hostd/machine.h"
#include "hostd/net.h"
#include "hostd/preview.h"
#include "hostd/reconcile.h"
#include "hostd/sampler.h"
#include "hostd/webhooks.h"
#include "hostd/secrets.h"
#include "hostd/usage.h"
#include "hostd/webctl.h"
#include "common/banned.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: berth-hostd --state DIR [--config FILE] [--log-level LEVEL]\n"
		   "                   [--desktop-url URL]\n");
}

/* The instance id: random, made once per state directory. */
static int load_instance(struct hostd *h, struct err *e)
{
	unsigned char r[4];
	int rc = db_meta_get(h->db, "instance", h->instance, sizeof(h->instance), e);

	if (rc < 0)
		return -1;
	if (rc == 1) {
		if (random_bytes(r, sizeof(r)) < 0)
			return err_errno(e, errno, "random");
		snprintf(h->instance, sizeof(h->instance), "%02x%02x%02x%02x", r[0], r[1], r[2], r[3]);
		if (db_meta_set(h->db, "instance", h->instance, e) < 0)
			return -1;
	}
	snprintf(h->dom_prefix, sizeof(h->dom_prefix), "berth-%s-", h->instance);
	return 0;
}

static void resolve_recipes(struct hostd *h)
{
	char dir[PATH_MAX];

	if (h->cfg.recipes_dir[0]) {
		snprintf(h->recipes_dir, sizeof(h->recipes_dir), "%s", h->cfg.recipes_dir);
		return;
	}
	/* bin/berth-hostd in a source tree: recipes are in ../images/recipes
	 * (build/asan/bin: ../../../images/recipes); one that `make install`
	 * put in PREFIX/bin finds them in PREFIX/lib/berth/recipes; else
	 * /usr/lib/berth/recipes. */
	if (exe_dir(dir, sizeof(dir)) == 0) {
		static const char *const rel[] = { "../images/recipes", "../../../images/recipes",
						   "../lib/berth/recipes", NULL };
		for (int i = 0; rel[i]; i++) {
			xsnprintf(h->recipes_dir, sizeof(h->recipes_dir), "%s/%s", dir, rel[i]);
			if (access(h->recipes_dir, R_OK) == 0)
				return;
		}
	}
	snprintf(h->recipes_dir, sizeof(h->recipes_dir), "/usr/lib/berth/recipes");
}

/* A gateway's identity: the uid of user NAME (config key KEY) into *UID,
 * *HAS false when NAME is "" or no such user exists (logged).  Root is
 * refused, since a gateway's requests are confined to its routes. */
static int lookup_gateway(const char *key, const char *name, bool *has, uid_t *uid,
			  struct err *e)
{
	struct passwd pw, *res = NULL;
	char buf[4096];

	*has = false;
	if (!name[0]) {
		log_info("no %s: only root may use its gateway routes", key);
		return 0;
	}
	if (getpwnam_r(name, &pw, buf, sizeof(buf), &res) != 0 || !res) {
		log_warn("%s '%s' does not exist: its gateway cannot call hostd as itself "
			 "(deploy/install-deps.sh creates it)", key, name);
		return 0;
	}
	if (pw.pw_uid == 0)
		return err_set(e, 400, "invalid_config", "%s = %s is root: the gateways must run "
			       "as unprivileged users", key, name);
	*uid = pw.pw_uid;
	*has = true;
	log_info("%s %s (uid %u)", key, name, (unsigned)pw.pw_uid);
	return 0;
}

/* The network daemons' users: three, so that none can make another's
 * requests (berth-desktop never gets an SSH credential, berth-web acts
 * only with the tokens it is given). */
static int lookup_gateways(struct hostd *h, struct err *e)
{
	if (lookup_gateway("sshgw_user", h->cfg.sshgw_user, &h->has_sshgw, &h->sshgw_uid, e) < 0 ||
	    lookup_gateway("desktop_user", h->cfg.desktop_user, &h->has_desktop,
			   &h->desktop_uid, e) < 0 ||
	    lookup_gateway("web_user", h->cfg.web_user, &h->has_web, &h->web_uid, e) < 0)
		return -1;
	if (h->has_sshgw && h->has_desktop && h->sshgw_uid == h->desktop_uid)
		return err_set(e, 400, "invalid_config", "sshgw_user and desktop_user are the same "
			       "user (uid %u): each gateway needs a user of its own",
			       (unsigned)h->sshgw_uid);
	if (h->has_web && ((h->has_sshgw && h->web_uid == h->sshgw_uid) ||
			   (h->has_desktop && h->web_uid == h->desktop_uid)))
		return err_set(e, 400, "invalid_config", "web_user is the user of %s (uid %u): "
			       "berth-web needs a user of its own",
			       h->has_sshgw && h->web_uid == h->sshgw_uid ? "sshgw_user" :
			       "desktop_user", (unsigned)h->web_uid);
	return 0;
}

/* Whether cgroup v2 has controller NAME (cgroup.controllers at its root). */
static bool v2_controller(const char *name)
{
	char buf[512] = "", *save = NULL;
	bool found = false;
	FILE *f = fopen("/sys/fs/cgroup/cgroup.controllers", "re");

	if (!f)
		return false;
	if (fgets(buf, sizeof(buf), f))
		for (char *t = strtok_r(buf, " \n", &save); t; t = strtok_r(NULL, " \n", &save))
			found |= !strcmp(t, name);
	fclose(f);
	return found;
}

/* Whether cgroup v1's blkio hierarchy offers weights: CFQ's blkio.weight at
 * its root, or BFQ's blkio.bfq.weight, which exists in child groups only
 * (libvirt's own, machine or machine.slice, or any other first-level one). */
static bool v1_blkio_weights(void)
{
	const char *root = "/sys/fs/cgroup/blkio";
	char path[PATH_MAX];
	struct dirent *d;
	bool found = access("/sys/fs/cgroup/blkio/blkio.weight", F_OK) == 0;
	DIR *dir = found ? NULL : opendir(root);

	while (dir && !found && (d = readdir(dir))) {
		if (d->d_type != DT_DIR || d->d_name[0] == '.')
			continue;
		xsnprintf(path, sizeof(path), "%s/%s/blkio.bfq.weight", root, d->d_name);
		found = access(path, F_OK) == 0;
	}
	if (dir)
		closedir(dir);
	return found;
}

/* Which weights libvirt can give machines: CPU with a cpu controller, I/O
 * with blkio's (v1) or io's (v2) weights, memory with a memory controller,
 * each cgroup v1's or v2's.  Without the controller the element would fail
 * every start (a container, the dm-thin test VM), so machines then get
 * none of that kind, logged once.  I/O weights act only on disks whose
 * scheduler is BFQ (/sys/block/DEV/queue/scheduler): docs/architecture.md. */
static void probe_weights(struct hostd *h)
{
	h->cpu_weights = access("/sys/fs/cgroup/cpu/cpu.shares", F_OK) == 0 || v2_controller("cpu");
	h->io_weights = v1_blkio_weights() || v2_controller("io");
	h->memory_weights = access("/sys/fs/cgroup/memory/memory.soft_limit_in_bytes", F_OK) == 0 ||
			    v2_controller("memory");
	if (h->cpu_weights)
		log_info("machines' CPU weights: 1024 per vCPU (cgroups' cpu controller)");
	else
		log_warn("no cgroup cpu controller: machines' CPU is not weighed by their vCPUs");
	if (h->io_weights)
		log_info("machines' I/O weights: 100 per vCPU (effective on disks scheduled by BFQ)");
	else
		log_warn("no cgroup I/O weights (BFQ): machines' I/O is not weighed");
	if (h->memory_weights)
		log_info("machines' memory soft limits: their memory and a quarter (256 MiB at least)");
	else
		log_warn("no cgroup memory controller: machines' memory has no soft limit");
}

/* The QEMU group's gid, from qemu_group: every machine's QEMU runs in it
 * (kvm: it opens /dev/kvm), and reads the bases and frozen volumes
 * through it.  Root's group is refused. */
static int lookup_qemu_group(struct hostd *h, struct err *e)
{
	struct group gr, *res = NULL;
	char buf[4096];

	if (getgrnam_r(h->cfg.qemu_group, &gr, buf, sizeof(buf), &res) != 0 || !res)
		return err_set(e, 400, "invalid_config", "qemu_group = %s: no such group (Debian's "
			       "libvirt-daemon-system makes kvm)", h->cfg.qemu_group);
	if (gr.gr_gid == 0)
		return err_set(e, 400, "invalid_config", "qemu_group = %s is root's group: QEMU "
			       "must run unprivileged", h->cfg.qemu_group);
	h->qemu_gid = gr.gr_gid;
	return 0;
}

/* QEMU runs as the machine's uid, in group GID: it opens its files by
 * name, so every directory above PATH must let it pass (x for others, or
 * for group GID).  Refused at start rather than at the first boot, which
 * would fail with a bare "Permission denied". */
static int check_qemu_reachable(const char *path, unsigned gid, struct err *e)
{
	char dir[PATH_MAX];
	struct stat st;
	char *slash;

	snprintf(dir, sizeof(dir), "%s", path);
	while ((slash = strrchr(dir, '/')) && slash != dir) {
		*slash = '\0';
		if (stat(dir, &st) < 0)
			continue;
		if ((st.st_mode & S_IXOTH) || (st.st_gid == gid && (st.st_mode & S_IXGRP)))
			continue;
		return err_set(e, 400, "invalid_config", "machines' QEMU (group %u, a uid of its "
			       "own) cannot reach %s: %s is mode %04o, owner %u:%u (give others, "
			       "or that group, search permission: chmod o+x)", gid, path, dir,
			       (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid,
			       (unsigned)st.st_gid);
	}
	return 0;
}

/* Descriptors: the API holds one per connection (api_max_connections),
 * libvirt, machines' consoles and transfers more.  The soft limit is
 * raised to the hard one, and both to at least NOFILE_WANT where allowed
 * (root may raise the hard limit). */
#define NOFILE_WANT 8192

static void raise_nofile(const struct config *cfg)
{
	struct rlimit rl;
	rlim_t before;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return;
	before = rl.rlim_cur;
	if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < NOFILE_WANT) {
		struct rlimit want = { NOFILE_WANT, NOFILE_WANT };
		if (setrlimit(RLIMIT_NOFILE, &want) == 0)
			rl = want;
	}
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0 || getrlimit(RLIMIT_NOFILE, &rl) < 0) {
		log_warn("cannot raise the limit of open files (%llu): %s",
			 (unsigned long long)before, strerror(errno));
		return;
	}
	if (rl.rlim_cur != RLIM_INFINITY &&
	    rl.rlim_cur < (rlim_t)cfg->api_max_connections + 256)
		log_warn("open files limited to %llu: api_max_connections = %d may not fit "
			 "(raise the hard limit, LimitNOFILE= under systemd)",
			 (unsigned long long)rl.rlim_cur, cfg->api_max_connections);
	else
		log_info("open files: up to %llu (was %llu)", (unsigned long long)rl.rlim_cur,
			 (unsigned long long)before);
}

/* Other users reach the socket only through directories they may
 * traverse: say so when one above STATE is closed to them. */
static void check_reachable(const char *state)
{
	char dir[PATH_MAX];
	struct stat st;
	char *slash;

	snprintf(dir, sizeof(dir), "%s", state);
	while ((slash = strrchr(dir, '/')) && slash != dir) {
		*slash = '\0';
		if (stat(dir, &st) == 0 && !(st.st_mode & S_IXOTH)) {
			log_warn("%s (mode %04o) is closed to other users: only root can reach "
				 "%s/hostd.sock", dir, (unsigned)(st.st_mode & 07777), state);
			return;
		}
	}
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "state", required_argument, NULL, 's' },
		{ "config", required_argument, NULL, 'c' },
		{ "log-level", required_argument, NULL, 'l' },
		{ "desktop-url", required_argument, NULL, 'd' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static struct hostd h;
	const char *state = NULL, *config = NULL, *level = NULL, *desktop_url = NULL;
	char path[PATH_MAX], vols[PATH_MAX];
	struct err e = { 0 };
	struct api *api = NULL, *web = NULL;
	sigset_t sigs;
	int c, sig, lock_fd = -1, rc = 1;
	enum log_level lvl;

	log_init("berth-hostd");
	umask(077);
	while ((c = getopt_long(argc, argv, "s:c:l:h", opts, NULL)) != -1) {
		switch (c) {
		case 's': state = optarg; break;
		case 'c': config = optarg; break;
		case 'l': level = optarg; break;
		case 'd': desktop_url = optarg; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (!state || optind != argc) {
		usage(stderr);
		return 2;
	}
	if (state[0] != '/') {
		fprintf(stderr, "berth-hostd: --state must be an absolute path, not '%s'\n", state);
		return 2;
	}
	/* Paths under it must fit a UNIX socket address (108 bytes). */
	if (strlen(state) > 80) {
		fprintf(stderr, "berth-hostd: --state path longer than 80 bytes: %s\n", state);
		return 2;
	}
	h.started_ms = mono_ms();
	h.busy = busy_new();
	/* Whoever may write in the state directory or above it may replace
	 * berth.conf, the keys or the database: refused before reading any. */
	if (dir_check_trusted(state, "state directory", &e) < 0)
		goto fail;
	config_defaults(&h.cfg, state);
	snprintf(path, sizeof(path), "%s/berth.conf", state);
	if (config_load(&h.cfg, config ? config : path, config != NULL, &e) < 0)
		goto fail;
	if (level && config_set(&h.cfg, "log_level", level, "--log-level", &e) < 0)
		goto fail;
	/* berth up --desktop-port: the URLs must name the bridge's port. */
	if (desktop_url &&
	    config_set(&h.cfg, "desktop_url", desktop_url, "--desktop-url", &e) < 0)
		goto fail;
	if (config_check(&h.cfg, &e) < 0)
		goto fail;
	if (log_level_parse(h.cfg.log_level, &lvl) == 0)
		log_threshold = lvl;
	raise_nofile(&h.cfg);

	/* Block the signals we wait for before any thread starts. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);

	if (mkdir_p(state, 0711) < 0 || chmod(state, 0711) < 0) {
		err_errno(&e, errno, "create state directory %s", state);
		goto fail;
	}
	if (dir_check_trusted(state, "state directory", &e) < 0)
		goto fail;
	check_reachable(state);
	probe_weights(&h);
	if (lookup_gateways(&h, &e) < 0 || lookup_qemu_group(&h, &e) < 0)
		goto fail;
	snprintf(path, sizeof(path), "%s/machines", state);
	if (check_qemu_reachable(path, h.qemu_gid, &e) < 0)
		goto fail;
	h.sessions = sessions_new();
	h.execs = execs_new();
	h.keyproof = keyproof_new();
	snprintf(path, sizeof(path), "%s/hostd.lock", state);
	lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (lock_fd < 0 || flock(lock_fd, LOCK_EX | LOCK_NB) < 0) {
		err_set(&e, 409, "busy", "another berth-hostd holds %s", path);
		goto fail;
	}
	snprintf(path, sizeof(path), "%s/berth.db", state);
	h.db = db_open(path, &e);
	if (!h.db || load_instance(&h, &e) < 0)
		goto fail;
	{
		/* The last second the previous run was alive (reconcile). */
		char alive[32] = "";
		if (db_meta_get(h.db, "alive", alive, sizeof(alive), NULL) == 0)
			h.last_alive = strtoll(alive, NULL, 10);
	}
	snprintf(path, sizeof(path), "%s/keys", state);
	if (gwkey_load_or_create(path, &h.key, &e) < 0)
		goto fail;
	snprintf(vols, sizeof(vols), "%s/volumes", state);
	if (!strcmp(h.cfg.storage, "lvm-thin") && !h.cfg.storage_location[0]) {
		err_set(&e, 400, "invalid_config", "storage = lvm-thin needs storage_location = VG/POOL "
			"(deploy/lvm-thin-setup.sh makes one)");
		goto fail;
	}
	struct storage_opts so = { .max_fill = h.cfg.max_fill, .qemu_gid = h.qemu_gid };
	h.st = storage_open_opts(h.cfg.storage, h.cfg.storage_location[0] ? h.cfg.storage_location : vols,
				 &so, &e);
	if (!h.st || storage_claim(h.st, h.instance, &e) < 0)
		goto fail;
	if (!strcmp(h.cfg.storage, "qcow2") &&
	    check_qemu_reachable(storage_location(h.st), h.qemu_gid, &e) < 0)
		goto fail;
	/* Refuses a libvirt that runs QEMU as root. */
	h.virt = virt_open(h.cfg.libvirt_uri, h.cfg.hypervisor, h.cfg.allow_root_qemu,
			   reconcile_event, &h, &e);
	if (!h.virt)
		goto fail;
	log_info("machines' QEMU runs as uid %d + the machine's number, group %s (%u), "
		 "no capabilities", h.cfg.qemu_uid_base, h.cfg.qemu_group, h.qemu_gid);
	resolve_recipes(&h);
	log_info("state %s, instance %s, storage %s at %s, network %s, recipes %s",
		 state, h.instance, storage_name(h.st), storage_location(h.st),
		 h.cfg.network, h.recipes_dir);

	/* Machines' taps, rules, DHCP and DNS, before their domains are
	 * looked at (a domain names its tap). */
	if (net_start(&h, &e) < 0)
		goto fail;
	reconcile_at_start(&h);
	machine_check_qemus(&h);
	image_reconcile(&h);
	template_reconcile(&h);
	/* Prices recorded, storage sampled now and every minute. */
	if (usage_prices_sync(&h, &e) < 0 || sampler_start(&h, &e) < 0 ||
	    idle_start(&h, &e) < 0)
		goto fail;

	snprintf(path, sizeof(path), "%s/desktop.sock", state);
	h.desktop = desktop_start(&h, path, &e);
	if (!h.desktop)
		goto fail;
	/* The credential broker's secrets, and berth-web's descriptors. */
	if (secrets_start(&h, &e) < 0)
		goto fail;
	if (previews_start(&h, &e) < 0)
		goto fail;
	/* Webhooks' deliveries: what is pending resumes now. */
	if (webhooks_start(&h, &e) < 0)
		goto fail;
	snprintf(path, sizeof(path), "%s/webctl.sock", state);
	if (!(h.webctl = webctl_start(&h, path, &e)))
		goto fail;
	snprintf(path, sizeof(path), "%s/hostd.sock", state);
	api = api_start(&h, path, false, &e);
	if (!api)
		goto fail;
	/* berth-web's: the API for the token holders it serves over HTTP. */
	snprintf(path, sizeof(path), "%s/web.sock", state);
	web = api_start(&h, path, true, &e);
	if (!web)
		goto fail;
	snprintf(path, sizeof(path), "%s/hostd.pid", state);
	{
		char pid[32];
		int n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
		file_write_atomic(path, pid, (size_t)n, 0600, NULL);
	}
	log_info("ready in %lld ms", (long long)(mono_ms() - h.started_ms));

	while (sigwait(&sigs, &sig) == 0) {
		if (sig == SIGTERM || sig == SIGINT)
			break;
	}
	log_info("signal %d: stopping (machines keep running)", sig);
	execs_stop(h.execs);
	events_stop();
	api_stop(web);
	api_stop(api);
	unlink(path);
	rc = 0;
	goto out;
fail:
	log_error("%s", e.msg);
	execs_stop(h.execs);
	events_stop();
	api_stop(web);
	api_stop(api);
out:
	webctl_stop(h.webctl);
	webhooks_stop(&h);
	previews_stop(&h);
	secrets_stop(&h);
	idle_stop(&h);
	desktop_stop(h.desktop);
	net_stop(&h);
	sampler_stop(&h);
	virt_close(h.virt);
	storage_close(h.st);
	gwkey_free(&h.key);
	db_close(h.db);
	sessions_free(h.sessions);
	execs_free(h.execs);
	keyproof_free(h.keyproof);
	busy_free(h.busy);
	if (lock_fd >= 0)
		close(lock_fd);
	return rc;
}
