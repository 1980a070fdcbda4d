/* The network around machines: taps, routes, nftables, dnsmasq
 * (hostd/net.h).  The ruleset's text is net_rules.c's. */
#include "hostd/net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <nftables/libnftables.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/run.h"
#include "common/util.h"
#include "hostd/hostd.h"
#include "common/banned.h"

struct net {
	struct net_conf conf;
	pthread_mutex_t lock;      /* the nft context, the dnsmasq files */
	struct nft_ctx *nft;
	char dir[PATH_MAX];        /* STATE/net */
	char dns_domains[1 << 16]; /* " d1 d2 ": the domains dnsmasq's conf names */
	char dns_user[32], dns_group[32]; /* what dnsmasq runs as */
};

bool net_routed(const struct hostd *h)
{
	return strcmp(h->cfg.network, "routed") == 0;
}

const struct net_conf *net_conf(const struct hostd *h)
{
	return &h->net->conf;
}

/* CIDR TEXT into *NET, *PREFIX; false when it is not an IPv4 network with
 * its host bits clear. */
static bool parse_cidr4(const char *text, uint32_t *net, int *prefix)
{
	char a[20];
	const char *slash = strchr(text, '/');
	struct in_addr in;
	char *end;
	long p;

	if (!slash || (size_t)(slash - text) >= sizeof(a))
		return false;
	memcpy(a, text, (size_t)(slash - text));
	a[slash - text] = '\0';
	p = strtol(slash + 1, &end, 10);
	if (inet_pton(AF_INET, a, &in) != 1 || *end || end == slash + 1 || p < 0 || p > 32)
		return false;
	*net = ntohl(in.s_addr);
	*prefix = (int)p;
	return p == 32 || (*net & ~(0xffffffffu << (32 - p)) & 0xffffffffu) == 0 ||
	       (p == 0 && *net == 0);
}

int net_conf_make(struct hostd *h, struct net_conf *c, struct err *e)
{
	char list[sizeof(h->cfg.egress_closed)];
	char *save = NULL;

	memset(c, 0, sizeof(*c));
	xsnprintf(c->table, sizeof(c->table), "berth-%s", h->instance);
	xsnprintf(c->tap_prefix, sizeof(c->tap_prefix), "bt%.4s-", h->instance);
	if (!parse_cidr4(h->cfg.guest_network, &c->net, &c->prefix) || c->prefix < 8 ||
	    c->prefix > 28)
		return err_set(e, 400, "invalid_config", "guest_network = %s: an IPv4 network "
			       "from /8 to /28, such as 10.87.0.0/16", h->cfg.guest_network);
	c->mask = c->prefix ? 0xffffffffu << (32 - c->prefix) : 0;
	c->gateway = c->net + 1;
	c->has_gw_uid = h->has_sshgw;	/* SSH to the machines: berth-sshgw only */
	c->gw_uid = (uint32_t)h->sshgw_uid;
	c->broker_port = h->cfg.broker_port;
	c->has_web_uid = h->has_web;	/* the broker's answers: berth-web's only */
	c->web_uid = (uint32_t)h->web_uid;
	xsnprintf(list, sizeof(list), "%s", h->cfg.egress_closed);
	for (char *s = strtok_r(list, ", ", &save); s; s = strtok_r(NULL, ", ", &save)) {
		uint32_t n;
		int p;
		if (!parse_cidr4(s, &n, &p))
			return err_set(e, 400, "invalid_config", "egress_closed: '%s' is not an IPv4 "
				       "network (such as 10.0.0.0/8)", s);
		if (c->n_closed == sizeof(c->closed) / sizeof(c->closed[0]) - 16)
			return err_set(e, 400, "invalid_config", "egress_closed: more than %zu "
				       "networks", c->n_closed);
		xsnprintf(c->closed[c->n_closed++], sizeof(c->closed[0]), "%s", s);
	}
	return 0;
}

/* ---- nftables ------------------------------------------------------------ */

/* Run SCRIPT as one nftables transaction.  OUT (may be NULL) gets what nft
 * printed.  The caller holds the lock. */
static int nft_run(struct net *n, const char *script, struct buf *out, struct err *e)
{
	int rc;
	const char *msg;
	int64_t t0 = mono_us();

	rc = nft_run_cmd_from_buffer(n->nft, script);
	ext_time_add(mono_us() - t0);
	if (out)
		buf_adds(out, nft_ctx_get_output_buffer(n->nft));
	msg = nft_ctx_get_error_buffer(n->nft);
	if (rc != 0) {
		char first[600];
		xsnprintf(first, sizeof(first), "%.500s", msg && *msg ? msg : "failed");
		first[strcspn(first, "\n")] = '\0';
		log_debug("nft script that failed:\n%s", script);
		return err_set(e, 500, "nftables", "nftables: %s", first);
	}
	return 0;
}

/* ---- taps, addresses, routes -------------------------------------------- */

static int ip_cmd(char *const argv[], struct err *e)
{
	return run_argv(argv, NULL, e);
}

static void sysctl_write(const char *path, const char *value)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);

	if (fd < 0 || write(fd, value, strlen(value)) < 0)
		log_warn("%s: %s", path, strerror(errno));
	if (fd >= 0)
		close(fd);
}

static void tap_sysctl(const char *tap, const char *family, const char *key, const char *v)
{
	char path[PATH_MAX];

	xsnprintf(path, sizeof(path), "/proc/sys/net/%s/conf/%s/%s", family, tap, key);
	sysctl_write(path, v);
}

/* Make the persistent tap NAME (nothing when it exists and no process
 * holds it; EBUSY when QEMU has it: then it is there too).  Not owned by
 * any user: only libvirtd (root) attaches to it and hands QEMU the fd. */
static int tap_make(const char *name, struct err *e)
{
	struct ifreq ifr;
	int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);

	if (fd < 0)
		return err_errno(e, errno, "open /dev/net/tun");
	memset(&ifr, 0, sizeof(ifr));
	ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
	xsnprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
	if (ioctl(fd, TUNSETIFF, &ifr) < 0) {
		int errnum = errno;
		close(fd);
		if (errnum == EBUSY)
			return 0;
		return err_errno(e, errnum, "make the tap %s", name);
	}
	if (ioctl(fd, TUNSETPERSIST, 1) < 0) {
		int errnum = errno;
		close(fd);
		return err_errno(e, errnum, "make the tap %s persistent", name);
	}
	close(fd);
	return 0;
}

static bool tap_exists(const char *name)
{
	char path[PATH_MAX];

	xsnprintf(path, sizeof(path), "/sys/class/net/%s", name);
	return access(path, F_OK) == 0;
}

static void tap_remove(const char *name)
{
	struct err e = { 0 };
	char *const argv[] = { "ip", "link", "delete", (char *)name, NULL };

	if (tap_exists(name) && ip_cmd(argv, &e) < 0)
		log_warn("remove the tap %s: %s", name, e.msg);
}

/* The guest-side identity machine M's guest uses: its own, or (a live
 * fork before its first boot) its source's. */
static void machine_view(const struct net_conf *c, const struct machine *m,
			 const struct egress *p, struct net_machine *out)
{
	memset(out, 0, sizeof(*out));
	out->index = m->net_index;
	xsnprintf(out->mac, sizeof(out->mac), "%s", m->mac);
	out->egress = p;
	if (m->net_alias[0]) {
		char ip[20];
		struct in_addr a;
		if (sscanf(m->net_alias, "%19s %17s", ip, out->alias_mac) == 2 &&
		    inet_pton(AF_INET, ip, &a) == 1)
			out->alias_ip = ntohl(a.s_addr);
	}
	(void)c;
}

/* Machine M's tap up with the gateway's address, a route to its address
 * and a permanent neighbour entry (no ARP to trust). */
static int tap_setup(struct net *n, const struct net_machine *m, struct err *e)
{
	const struct net_conf *c = &n->conf;
	char tap[32], gw[40], ip[40], alias[20];

	net_tap_name(c, m->index, tap, sizeof(tap));
	if (tap_make(tap, e) < 0)
		return -1;
	tap_sysctl(tap, "ipv6", "disable_ipv6", "1");
	tap_sysctl(tap, "ipv4", "rp_filter", "1");
	tap_sysctl(tap, "ipv4", "arp_ignore", "1");
	tap_sysctl(tap, "ipv4", "proxy_arp", "0");
	net_ip_text(c->gateway, gw, sizeof(gw));
	net_ip_text(net_machine_ip(c, m->index), ip, sizeof(ip));
	xsnprintf(gw + strlen(gw), sizeof(gw) - strlen(gw), "/32");
	/* The host's side of every tap of this instance has one MAC, kept
	 * when a tap is made anew (a hostd restart, a reboot): a guest
	 * restored from memory still has it in its ARP cache, a live fork's
	 * (its source's memory, on another tap) included, and could not ask
	 * again (its ARP names its source's address, which rp_filter refuses
	 * on its tap).  Each tap is a link of its own, so no two of them
	 * meet.  Locally administered, never one of QEMU's 52:54:00:... */
	char hwaddr[20];
	unsigned inst = (unsigned)strtoul(c->tap_prefix + 2, NULL, 16) & 0xffff;
	xsnprintf(hwaddr, sizeof(hwaddr), "02:b7:%02x:%02x:00:01", inst >> 8, inst & 0xff);
	char *const addr[] = { "ip", "addr", "replace", gw, "dev", tap, NULL };
	char *const up[] = { "ip", "link", "set", tap, "address", hwaddr, "up", NULL };
	char *const route[] = { "ip", "route", "replace", ip, "dev", tap, "src", gw, NULL };
	gw[strcspn(gw, "/")] = '\0';
	if (ip_cmd(addr, e) < 0 || ip_cmd(up, e) < 0 || ip_cmd(route, e) < 0)
		return -1;
	/* The guest answers for its address with its MAC, and no other: no
	 * ARP (which another guest could answer) is needed. */
	char *const neigh[] = { "ip", "neigh", "replace", ip, "lladdr", (char *)m->mac, "dev", tap,
				"nud", "permanent", NULL };
	if (ip_cmd(neigh, e) < 0)
		return -1;
	if (m->alias_ip) {
		net_ip_text(m->alias_ip, alias, sizeof(alias));
		char *const aneigh[] = { "ip", "neigh", "replace", alias, "lladdr",
					 (char *)m->alias_mac, "dev", tap, "nud", "permanent", NULL };
		if (ip_cmd(aneigh, e) < 0)
			return -1;
	}
	return 0;
}

/* ---- dnsmasq -------------------------------------------------------------- */

static void net_path(struct net *n, const char *file, char *out, size_t outlen)
{
	xsnprintf(out, outlen, "%s/%s", n->dir, file);
}

static void dnsmasq_reload(struct net *n);

/* The DHCP entry of machine M (its MAC, and a live fork's guest-side MAC,
 * to its address): STATE/net/dhcp/INDEX, read by dnsmasq when it changes. */
static int dhcp_entry(struct net *n, const struct net_machine *m, struct err *e)
{
	char path[PATH_MAX], ip[20], alias[20];
	struct buf b = BUF_INIT;
	int rc;

	char tmp[PATH_MAX];
	bool existed;

	xsnprintf(path, sizeof(path), "%s/dhcp/%d", n->dir, m->index);
	/* Written beside the directory and renamed in: dnsmasq reads every
	 * file that appears in it, a temporary one too. */
	xsnprintf(tmp, sizeof(tmp), "%s/dhcp-%d.tmp", n->dir, m->index);
	net_ip_text(net_machine_ip(&n->conf, m->index), ip, sizeof(ip));
	buf_printf(&b, "%s,%s\n", m->mac, ip);
	if (m->alias_ip) {
		net_ip_text(m->alias_ip, alias, sizeof(alias));
		buf_printf(&b, "%s,%s\n", m->alias_mac, alias);
	}
	existed = access(path, F_OK) == 0;
	rc = file_write_atomic(tmp, b.data, b.len, 0644, e);
	/* Readable through the directory only: its group is dnsmasq's. */
	if (rc == 0 && rename(tmp, path) < 0)
		rc = err_errno(e, errno, "rename %s", tmp);
	buf_free(&b);
	/* dnsmasq reads a new file by itself, but forgets what a changed one
	 * said only when told. */
	if (rc == 0 && existed)
		dnsmasq_reload(n);
	return rc;
}

static void dhcp_entry_remove(struct net *n, int index)
{
	char path[PATH_MAX];

	xsnprintf(path, sizeof(path), "%s/dhcp/%d", n->dir, index);
	if (unlink(path) == 0)
		dnsmasq_reload(n);
}

/* dnsmasq's pid when it runs with our configuration, else 0. */
static pid_t dnsmasq_pid(struct net *n)
{
	char path[PATH_MAX], buf[64], conf[PATH_MAX], cmd[PATH_MAX * 2];
	pid_t pid = 0;
	FILE *f;
	size_t len;

	net_path(n, "dnsmasq.pid", path, sizeof(path));
	net_path(n, "dnsmasq.conf", conf, sizeof(conf));
	if (!(f = fopen(path, "re")))
		return 0;
	if (fgets(buf, sizeof(buf), f))
		pid = (pid_t)strtol(buf, NULL, 10);
	fclose(f);
	if (pid <= 0)
		return 0;
	/* Its command line names our configuration file: not another
	 * process that took the pid. */
	xsnprintf(path, sizeof(path), "/proc/%ld/cmdline", (long)pid);
	if (!(f = fopen(path, "re")))
		return 0;
	len = fread(cmd, 1, sizeof(cmd) - 1, f);
	fclose(f);
	for (size_t i = 0; i < len; i++)
		if (cmd[i] == '\0')
			cmd[i] = ' ';
	cmd[len] = '\0';
	return strstr(cmd, conf) ? pid : 0;
}

/* dnsmasq reads its DHCP hosts anew (SIGHUP). */
static void dnsmasq_reload(struct net *n)
{
	pid_t pid = dnsmasq_pid(n);

	if (pid)
		kill(pid, SIGHUP);
}

static void dnsmasq_stop(struct net *n)
{
	pid_t pid = dnsmasq_pid(n);

	if (!pid)
		return;
	kill(pid, SIGTERM);
	for (int i = 0; i < 50 && kill(pid, 0) == 0; i++)
		usleep(20 * 1000);
	if (kill(pid, 0) == 0)
		kill(pid, SIGKILL);
}

/* Write dnsmasq's configuration (every domain of DOMAINS, " d1 d2 ", gets
 * its nftset) and start it anew. */
static int dnsmasq_start(struct hostd *h, struct net *n, const char *domains, struct err *e)
{
	const struct net_conf *c = &n->conf;
	char conf[PATH_MAX], path[PATH_MAX], net[20], gw[20], mask[20], set[32];
	struct buf b = BUF_INIT;
	int rc = -1;

	net_ip_text(c->net, net, sizeof(net));
	net_ip_text(c->gateway, gw, sizeof(gw));
	net_ip_text(c->mask, mask, sizeof(mask));
	net_path(n, "dnsmasq.conf", conf, sizeof(conf));
	buf_printf(&b, "# written by berth-hostd: the DHCP and DNS of instance %s's machines\n",
		   h->instance);
	buf_printf(&b, "interface=%s*\nexcept-interface=lo\nbind-dynamic\n", c->tap_prefix);
	/* No stop-dns-rebind: an answer in a closed range is harmless, the
	 * closed ranges hold whatever the resolver says (and dnsmasq counts
	 * the documentation ranges as private, which tests use). */
	buf_adds(&b, "no-hosts\ndomain-needed\nbogus-priv\n");
	buf_printf(&b, "user=%s\ngroup=%s\n", n->dns_user, n->dns_group);
	if (h->cfg.dns_upstream[0]) {
		char list[sizeof(h->cfg.dns_upstream)], *save = NULL;
		xsnprintf(list, sizeof(list), "%s", h->cfg.dns_upstream);
		buf_adds(&b, "no-resolv\n");
		for (char *s = strtok_r(list, ", ", &save); s; s = strtok_r(NULL, ", ", &save))
			buf_printf(&b, "server=%s\n", s);
	} else {
		buf_adds(&b, "resolv-file=/etc/resolv.conf\n");
	}
	buf_printf(&b, "dhcp-range=%s,static,%s,12h\n", net, mask);
	buf_printf(&b, "dhcp-option=option:router,%s\ndhcp-option=option:dns-server,%s\n", gw, gw);
	buf_adds(&b, "dhcp-authoritative\n");
	net_path(n, "dhcp", path, sizeof(path));
	buf_printf(&b, "dhcp-hostsdir=%s\n", path);
	net_path(n, "leases", path, sizeof(path));
	buf_printf(&b, "dhcp-leasefile=%s\n", path);
	net_path(n, "dnsmasq.pid", path, sizeof(path));
	buf_printf(&b, "pid-file=%s\n", path);
	net_path(n, "dnsmasq.log", path, sizeof(path));
	buf_printf(&b, "log-facility=%s\n", path);
	/* The resolver's answers for the domains egress policies name go
	 * into their sets: what those machines may reach. */
	for (const char *d = domains; *d;) {
		while (*d == ' ')
			d++;
		size_t len = strcspn(d, " ");
		if (!len)
			break;
		char dom[EGRESS_NAME_MAX];
		xsnprintf(dom, sizeof(dom), "%.*s", (int)len, d);
		net_domain_set(dom, set, sizeof(set));
		buf_printf(&b, "nftset=/%s/4#inet#%s#%s\n", dom, c->table, set);
		d += len;
	}
	/* One running with this very configuration (a hostd before this one
	 * started it: it outlives hostd, as machines do) is kept, so that a
	 * restart of hostd is no DHCP or DNS gap.  SIGHUP: it rereads the
	 * DHCP hosts (which may have changed meanwhile) and clears its cache,
	 * so the next answer for a name an egress policy allows is fetched
	 * anew and goes into the set of the table just made anew (t800). */
	char *now = file_read(conf, 1 << 20, NULL);
	bool same = now && strlen(now) == b.len && memcmp(now, b.data, b.len) == 0;
	free(now);
	pid_t running = dnsmasq_pid(n);
	if (same && running) {
		log_info("network: dnsmasq (pid %ld) runs with this configuration: kept",
			 (long)running);
		kill(running, SIGHUP);
		xsnprintf(n->dns_domains, sizeof(n->dns_domains), "%s", domains);
		rc = 0;
		goto out;
	}
	if (file_write_atomic(conf, b.data, b.len, 0644, e) < 0)
		goto out;
	dnsmasq_stop(n);
	xsnprintf(path, sizeof(path), "--conf-file=%s", conf);
	/* dnsmasq forks into the background once it listens: run_argv
	 * returns then, with its complaint when it could not. */
	char *const argv[] = { "dnsmasq", path, NULL };
	if (run_argv(argv, NULL, e) < 0)
		goto out;
	xsnprintf(n->dns_domains, sizeof(n->dns_domains), "%s", domains);
	rc = 0;
out:
	buf_free(&b);
	return rc;
}

/* " d1 d2 ": the domains of every machine's policy, each once; for machine
 * ID (when not NULL) those of P, its policy being set. */
static int policy_domains(struct hostd *h, const char *id, const struct egress *pol,
			  struct buf *out, struct err *e)
{
	struct machine *ms = NULL;
	size_t n = 0;
	struct egress *p = calloc(1, sizeof(*p));
	struct buf text = BUF_INIT;

	if (!p)
		abort();
	buf_adds(out, " ");
	if (db_machine_list(h->db, NULL, &ms, &n, e) < 0) {
		free(p);
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		buf_reset(&text);
		if (id && pol && strcmp(ms[i].id, id) == 0)
			*p = *pol;
		else if (ms[i].state == MS_DELETING ||
			 db_machine_egress(h->db, ms[i].id, &text, NULL) < 0 ||
			 egress_parse(text.len ? buf_str(&text) : h->cfg.egress_default, p, NULL) < 0)
			continue;
		for (size_t k = 0; p->mode == EGRESS_LIST && k < p->n; k++) {
			char key[EGRESS_NAME_MAX + 2];
			if (p->rule[k].kind != EG_NAME && p->rule[k].kind != EG_SUFFIX)
				continue;
			xsnprintf(key, sizeof(key), " %s ", p->rule[k].name);
			if (!strstr(buf_str(out), key))
				buf_printf(out, "%s ", p->rule[k].name);
		}
	}
	free(ms);
	free(p);
	buf_free(&text);
	return 0;
}

/* Restart dnsmasq when the domains named by all policies changed (with
 * machine ID's policy POL, being set, when not NULL). */
static int dnsmasq_follow(struct hostd *h, struct net *n, const char *id,
			  const struct egress *pol, struct err *e)
{
	struct buf d = BUF_INIT;
	int rc = 0;

	if (policy_domains(h, id, pol, &d, e) < 0)
		rc = -1;
	else if (strcmp(buf_str(&d), n->dns_domains) != 0 || !dnsmasq_pid(n))
		rc = dnsmasq_start(h, n, buf_str(&d), e);
	buf_free(&d);
	return rc;
}

/* Forget the DHCP lease of address IP: dnsmasq stopped, its lease file
 * rewritten without it, dnsmasq started again (a DNS blip of some ten
 * milliseconds for the other machines).  Nothing when no lease names IP. */
static int dnsmasq_drop_lease(struct hostd *h, struct net *n, const char *ip, struct err *e)
{
	char path[PATH_MAX], key[32], line[512];
	struct buf keep = BUF_INIT;
	bool found = false;
	FILE *f;
	int rc = 0;

	net_path(n, "leases", path, sizeof(path));
	/* "EXPIRY MAC IP HOSTNAME CLIENT-ID" */
	xsnprintf(key, sizeof(key), " %s ", ip);
	if (!(f = fopen(path, "re")))
		return 0;
	while (fgets(line, sizeof(line), f)) {
		if (strstr(line, key))
			found = true;
		else
			buf_adds(&keep, line);
	}
	fclose(f);
	if (found) {
		char domains[sizeof(n->dns_domains)];
		xsnprintf(domains, sizeof(domains), "%s", n->dns_domains);
		dnsmasq_stop(n);
		if (file_write_atomic(path, keep.data ? keep.data : "", keep.len, 0644, e) < 0 ||
		    dnsmasq_start(h, n, domains, e) < 0)
			rc = -1;
	}
	buf_free(&keep);
	return rc;
}

/* ---- the pieces together -------------------------------------------------- */

/* The policy in force for machine M (its own, else egress_default) into P. */
static int machine_policy(struct hostd *h, const struct machine *m, struct egress *p,
			  struct err *e)
{
	struct buf text = BUF_INIT;
	int rc = db_machine_egress(h->db, m->id, &text, e);

	if (rc == 0)
		rc = egress_parse(text.len ? buf_str(&text) : h->cfg.egress_default, p, e);
	buf_free(&text);
	return rc;
}

/* The host's own IPv4 networks (its connected routes, but this instance's
 * taps): closed to guests, who must not reach the host's LAN neighbours. */
static void host_networks(struct net *n)
{
	struct net_conf *c = &n->conf;
	struct buf out = BUF_INIT;
	struct err e = { 0 };
	char *const argv[] = { "ip", "-4", "-o", "route", "show", "table", "main", "scope", "link",
			       NULL };
	struct run_opts o = { .out = &out };

	if (run_argv(argv, &o, &e) < 0) {
		log_warn("cannot read the host's networks: %s", e.msg);
		return;
	}
	for (char *line = out.data, *next; line && *line; line = next) {
		char dst[64], dev[32] = "";
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		const char *d = strstr(line, " dev ");
		/* A network (a /32 is a point-to-point peer, no LAN). */
		if (sscanf(line, "%63s", dst) != 1 || !strchr(dst, '/') || !d ||
		    sscanf(d, " dev %31s", dev) != 1)
			continue;
		if (strncmp(dev, c->tap_prefix, strlen(c->tap_prefix)) == 0 || strncmp(dev, "bt", 2) == 0)
			continue;
		if (c->n_closed < sizeof(c->closed) / sizeof(c->closed[0]) && strlen(dst) < 20) {
			xsnprintf(c->closed[c->n_closed++], sizeof(c->closed[0]), "%s", dst);
			log_debug("network: %s (dev %s) is the host's: closed to guests", dst, dev);
		}
	}
	buf_free(&out);
}

/* ---- network = user ------------------------------------------------------ */

/* The host's resolvers (what QEMU's user-mode DNS, 10.0.2.3, forwards
 * to): the nameserver lines of /etc/resolv.conf, at most MAX. */
static size_t host_resolvers(char out[][48], size_t max)
{
	FILE *f = fopen("/etc/resolv.conf", "re");
	char line[256], addr[64];
	unsigned char bin[16];
	size_t n = 0;

	if (!f)
		return 0;
	while (n < max && fgets(line, sizeof(line), f)) {
		if (sscanf(line, " nameserver %63s", addr) != 1)
			continue;
		addr[strcspn(addr, "%")] = '\0';
		if (inet_pton(AF_INET, addr, bin) == 1 || inet_pton(AF_INET6, addr, bin) == 1)
			xsnprintf(out[n++], sizeof(out[0]), "%s", addr);
	}
	fclose(f);
	return n;
}

/* The uids machines' QEMUs run as (hostd/config.h, qemu_uid_base). */
static void qemu_uids(const struct hostd *h, uint32_t *lo, uint32_t *hi)
{
	*lo = (uint32_t)h->cfg.qemu_uid_base;
	*hi = *lo + 0xffffff < QEMU_UID_LAST ? *lo + 0xffffff : QEMU_UID_LAST;
}

/* Load (ON) or remove this instance's user-mode filter (QUIET: a reload,
 * not logged).  Its own nft context: network = user keeps no struct net. */
static int user_filter(struct hostd *h, bool on, bool quiet, struct err *e)
{
	struct net *n = calloc(1, sizeof(*n));
	struct buf script = BUF_INIT;
	char res[8][48];
	size_t nres = 0, nm = 0, np = 0;
	uint32_t lo = 0, hi = 0;
	struct machine *ms = NULL;
	int rc = -1, *ports = NULL;

	if (!n)
		abort();
	if (net_conf_make(h, &n->conf, e) < 0)
		goto out;
	if (!(n->nft = nft_ctx_new(NFT_CTX_DEFAULT))) {
		err_set(e, 500, "nftables", "cannot make an nftables context");
		goto out;
	}
	nft_ctx_buffer_output(n->nft);
	nft_ctx_buffer_error(n->nft);
	if (on) {
		host_networks(n);
		nres = host_resolvers(res, sizeof(res) / sizeof(res[0]));
		qemu_uids(h, &lo, &hi);
		if (db_machine_list(h->db, NULL, &ms, &nm, e) < 0)
			goto out;
		ports = calloc(nm + 1, sizeof(*ports));
		if (!ports)
			abort();
		for (size_t i = 0; i < nm; i++)
			if (ms[i].ssh_port > 0)
				ports[np++] = ms[i].ssh_port;
		net_user_ruleset(&n->conf, lo, hi, res, nres, ports, np, &script);
	} else {
		buf_printf(&script, "add table inet %s\ndelete table inet %s\n", n->conf.table,
			   n->conf.table);
	}
	rc = nft_run(n, buf_str(&script), NULL, e);
	if (rc < 0 && on && e) {
		char why[sizeof(e->msg)];
		xsnprintf(why, sizeof(why), "%s", e->msg);
		err_clear(e);
		err_set(e, 500, "nftables", "network = user: the filter that keeps guests from the "
			"host cannot be loaded (%.300s); hostd does not run machines without it "
			"(the kernel needs nf_tables)", why);
	}
	if (rc == 0 && on && !quiet) {
		log_info("network user: QEMU's connections (uids %u-%u) reach no address of the "
			 "host's and no closed range, but port 53 of %zu resolver(s) of "
			 "/etc/resolv.conf (table inet %s)", lo, hi, nres, n->conf.table);
		log_warn("network = user is a fallback: every machine's traffic is its QEMU's, so "
			 "egress policies other than open are refused and machines are told apart "
			 "only by uid; network = routed filters each machine on its own tap");
		if (h->cfg.allow_root_qemu)
			log_warn("allow_root_qemu = yes: a QEMU that runs as root is not filtered, and "
				 "its guest reaches the host's loopback through 10.0.2.2");
	}
out:
	if (n->nft)
		nft_ctx_free(n->nft);
	buf_free(&script);
	free(ports);
	free(ms);
	free(n);
	return rc;
}

int net_user_refresh(struct hostd *h, struct err *e)
{
	/* One reload at a time: each reads the ports of now. */
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	int rc;

	if (net_routed(h))
		return 0;
	pthread_mutex_lock(&lock);
	rc = user_filter(h, true, true, e);
	pthread_mutex_unlock(&lock);
	return rc;
}

static bool some_run(const struct machine *ms, size_t nm)
{
	for (size_t i = 0; i < nm; i++)
		if (ms[i].state == MS_RUNNING || ms[i].state == MS_PAUSED)
			return true;
	return false;
}

/* Whether a machine of this instance runs (or may: when the database
 * cannot tell, the rules stay). */
static bool any_running(struct hostd *h)
{
	struct machine *ms = NULL;
	size_t nm = 0;
	bool running = true;

	if (db_machine_list(h->db, NULL, &ms, &nm, NULL) == 0)
		running = some_run(ms, nm);
	free(ms);
	return running;
}

int net_start(struct hostd *h, struct err *e)
{
	struct net *n;
	struct machine *ms = NULL;
	struct net_machine *views = NULL;
	struct egress *pols = NULL;
	size_t nm = 0;
	char path[PATH_MAX];
	struct buf script = BUF_INIT;
	int rc = -1;

	if (!net_routed(h))
		return user_filter(h, true, false, e);
	n = calloc(1, sizeof(*n));
	if (!n)
		abort();
	pthread_mutex_init(&n->lock, NULL);
	h->net = n;
	xsnprintf(n->dir, sizeof(n->dir), "%s/net", h->cfg.state_dir);
	/* dnsmasq runs as berth-dns (else nobody), and reads the DHCP hosts
	 * in STATE/net/dhcp: the directories are its group's, and no one
	 * else's (nobody's when there is no berth-dns: then they are open
	 * to every local user). */
	struct group gr, *grp = NULL;
	char grbuf[4096];
	bool own = getgrnam_r("berth-dns", &gr, grbuf, sizeof(grbuf), &grp) == 0 && grp;
	xsnprintf(n->dns_user, sizeof(n->dns_user), "%s", own ? "berth-dns" : "nobody");
	xsnprintf(n->dns_group, sizeof(n->dns_group), "%s", own ? "berth-dns" : "nogroup");
	if (!own)
		log_warn("no user berth-dns (deploy/install-deps.sh creates it): dnsmasq runs as "
			 "nobody, and STATE/net is readable by every local user");
	net_path(n, "dhcp", path, sizeof(path));
	if (mkdir_p(path, 0750) < 0 ||
	    (own ? chown(n->dir, 0, gr.gr_gid) < 0 || chown(path, 0, gr.gr_gid) < 0 ||
		   chmod(n->dir, 0710) < 0 || chmod(path, 0750) < 0
		 : chmod(n->dir, 0755) < 0 || chmod(path, 0755) < 0)) {
		err_errno(e, errno, "create %s", path);
		goto out;
	}
	if (net_conf_make(h, &n->conf, e) < 0)
		goto out;
	host_networks(n);
	if (!(n->nft = nft_ctx_new(NFT_CTX_DEFAULT))) {
		err_set(e, 500, "nftables", "cannot make an nftables context");
		goto out;
	}
	nft_ctx_buffer_output(n->nft);
	nft_ctx_buffer_error(n->nft);
	/* The host routes for its guests. */
	sysctl_write("/proc/sys/net/ipv4/ip_forward", "1");
	if (db_machine_list(h->db, NULL, &ms, &nm, e) < 0)
		goto out;
	views = calloc(nm ? nm : 1, sizeof(*views));
	pols = calloc(nm ? nm : 1, sizeof(*pols));
	if (!views || !pols)
		abort();
	size_t k = 0;
	for (size_t i = 0; i < nm; i++) {
		struct err me = { 0 };
		if (!ms[i].net_index || ms[i].state == MS_CREATING || ms[i].state == MS_DELETING)
			continue;
		if (machine_policy(h, &ms[i], &pols[k], &me) < 0) {
			log_error("machine %s/%s: its egress policy does not parse (%s); it gets "
				  "none until it is set again", ms[i].owner, ms[i].name, me.msg);
			pols[k].mode = EGRESS_NONE;
		}
		machine_view(&n->conf, &ms[i], &pols[k], &views[k]);
		if (tap_setup(n, &views[k], &me) < 0 || dhcp_entry(n, &views[k], &me) < 0)
			log_error("machine %s/%s: %s", ms[i].owner, ms[i].name, me.msg);
		k++;
	}
	net_ruleset(&n->conf, views, k, &script);
	pthread_mutex_lock(&n->lock);
	rc = nft_run(n, buf_str(&script), NULL, e);
	if (rc == 0)
		rc = dnsmasq_follow(h, n, NULL, NULL, e);
	pthread_mutex_unlock(&n->lock);
	if (rc == 0) {
		char gw[20];
		net_ip_text(n->conf.gateway, gw, sizeof(gw));
		log_info("network routed: guests on %s (gateway %s), taps %s*, table inet %s, "
			 "%zu machines", h->cfg.guest_network, gw, n->conf.tap_prefix, n->conf.table,
			 k);
	}
out:
	buf_free(&script);
	free(views);
	free(pols);
	free(ms);
	return rc;
}

void net_stop(struct hostd *h)
{
	struct net *n = h->net;
	struct machine *ms = NULL;
	size_t nm = 0;
	char tap[32], script[128];

	if (!n) {
		/* network = user: the filter stays while a QEMU runs. */
		if (!net_routed(h) && !any_running(h))
			user_filter(h, false, false, NULL);
		return;
	}
	pthread_mutex_lock(&n->lock);
	/* Machines that run keep their network (DHCP renewals wait for the
	 * next hostd); when none runs, nothing of it is left. */
	if (db_machine_list(h->db, NULL, &ms, &nm, NULL) == 0) {
		if (!some_run(ms, nm)) {
			dnsmasq_stop(n);
			for (size_t i = 0; i < nm; i++) {
				if (!ms[i].net_index)
					continue;
				net_tap_name(&n->conf, ms[i].net_index, tap, sizeof(tap));
				tap_remove(tap);
			}
			xsnprintf(script, sizeof(script), "add table inet %s\ndelete table inet %s\n",
				  n->conf.table, n->conf.table);
			if (n->nft)
				nft_run(n, script, NULL, NULL);
		}
	}
	free(ms);
	if (n->nft)
		nft_ctx_free(n->nft);
	pthread_mutex_unlock(&n->lock);
	pthread_mutex_destroy(&n->lock);
	free(n);
	h->net = NULL;
}

int net_pick_index(struct hostd *h, struct err *e)
{
	struct net *n = h->net;
	int max = n ? net_max_index(&n->conf) : 0;

	char ip[20];

	for (int i = 1; i <= max; i++) {
		net_ip_text(net_machine_ip(&n->conf, i), ip, sizeof(ip));
		if (!db_net_index_used(h->db, i, ip))
			return i;
	}
	return err_set(e, 503, "no_address", "the guest network %s has no free address",
		       h->cfg.guest_network);
}

int net_machine_add(struct hostd *h, const struct machine *m, struct err *e)
{
	struct net *n = h->net;
	struct egress *p;
	struct net_machine v;
	struct buf script = BUF_INIT;
	char tap[32];
	int rc = -1;

	if (!n)
		return net_user_refresh(h, e);	/* network = user: its SSH forward */
	p = calloc(1, sizeof(*p));
	if (!p)
		abort();
	if (machine_policy(h, m, p, e) < 0)
		goto out;
	machine_view(&n->conf, m, p, &v);
	net_tap_name(&n->conf, m->net_index, tap, sizeof(tap));
	pthread_mutex_lock(&n->lock);
	net_machine_script(&n->conf, &v, true, &script);
	if (tap_setup(n, &v, e) == 0 && dhcp_entry(n, &v, e) == 0 &&
	    nft_run(n, buf_str(&script), NULL, e) == 0 && dnsmasq_follow(h, n, NULL, NULL, e) == 0)
		rc = 0;
	pthread_mutex_unlock(&n->lock);
	if (rc < 0)
		net_machine_remove(h, m);
out:
	buf_free(&script);
	free(p);
	return rc;
}

void net_machine_remove(struct hostd *h, const struct machine *m)
{
	struct net *n = h->net;
	struct egress none = { .mode = EGRESS_NONE };
	struct net_machine v;
	struct buf script = BUF_INIT;
	struct err e = { 0 };
	char tap[32];

	if (!n || !m->net_index)
		return;
	machine_view(&n->conf, m, &none, &v);
	net_machine_remove_script(&n->conf, &v, &script);
	net_tap_name(&n->conf, m->net_index, tap, sizeof(tap));
	pthread_mutex_lock(&n->lock);
	if (nft_run(n, buf_str(&script), NULL, &e) < 0)
		log_warn("machine %s/%s: removing its rules: %s", m->owner, m->name, e.msg);
	dhcp_entry_remove(n, m->net_index);
	tap_remove(tap);
	/* Its lease goes too: dnsmasq would not give the address to the next
	 * machine with this index (another MAC) while the lease lasts. */
	char ip[20];
	net_ip_text(net_machine_ip(&n->conf, m->net_index), ip, sizeof(ip));
	if (dnsmasq_drop_lease(h, n, ip, &e) < 0)
		log_warn("dnsmasq: %s", e.msg);
	err_clear(&e);
	if (dnsmasq_follow(h, n, NULL, NULL, &e) < 0)
		log_warn("dnsmasq: %s", e.msg);
	pthread_mutex_unlock(&n->lock);
	buf_free(&script);
}

int net_machine_policy(struct hostd *h, const struct machine *m, const struct egress *p,
		       struct err *e)
{
	struct net *n = h->net;
	struct net_machine v;
	struct buf script = BUF_INIT;
	char ip[20], zone[16];
	int rc = -1;

	if (!n)
		return 0;
	for (size_t k = 0; p->mode == EGRESS_LIST && k < p->n; k++)
		if (p->rule[k].kind == EG_NET6)
			return err_set(e, 400, "invalid_egress", "egress: machines have IPv4 only; "
				       "an IPv6 rule would allow nothing");
	machine_view(&n->conf, m, p, &v);
	net_machine_script(&n->conf, &v, false, &script);
	pthread_mutex_lock(&n->lock);
	if (nft_run(n, buf_str(&script), NULL, e) < 0)
		goto out;
	/* Its connections go: those still allowed are taken up again at
	 * their next packet (conntrack picks up a TCP stream midway), the
	 * others meet the new policy, which resets them. */
	net_ip_text(v.alias_ip ? v.alias_ip : net_machine_ip(&n->conf, m->net_index), ip, sizeof(ip));
	xsnprintf(zone, sizeof(zone), "%d", m->net_index);
	char *const argv[] = { "conntrack", "-D", "--orig-zone", zone, NULL };
	struct err ce = { 0 };
	struct buf out = BUF_INIT;
	struct run_opts o = { .out = &out };
	/* conntrack exits 1 when there was nothing to delete. */
	if (run_argv(argv, &o, &ce) < 0 && !strstr(ce.msg, "0 flow entries"))
		log_debug("conntrack -D --orig-zone %s: %s", zone, ce.msg);
	buf_free(&out);
	rc = dnsmasq_follow(h, n, m->id, p, e);
out:
	pthread_mutex_unlock(&n->lock);
	buf_free(&script);
	return rc;
}

/* One element of a dynamic set as nft -j lists it, into ARR. */
static void log_element(json_t *el, int64_t timeout, json_t *arr)
{
	json_t *val, *concat, *inner = json_object_get(el, "elem");
	json_int_t expires = 0, packets = 0;

	/* {"elem": {"val": {"concat": [ADDR, PROTO, PORT]}, "expires": S,
	 * "counter": {"packets": N, ...}}} */
	if (!json_is_object(inner))
		return;
	expires = json_integer_value(json_object_get(inner, "expires"));
	packets = json_integer_value(json_object_get(json_object_get(inner, "counter"), "packets"));
	val = json_object_get(inner, "val");
	concat = json_object_get(val, "concat");
	if (!json_is_array(concat) || json_array_size(concat) != 3)
		return;
	json_array_append_new(arr, json_pack("{s:O, s:O, s:O, s:I, s:I}",
		"address", json_array_get(concat, 0), "protocol", json_array_get(concat, 1),
		"port", json_array_get(concat, 2), "count", packets,
		"seconds_ago", (json_int_t)(timeout - expires)));
}

json_t *net_egress_log(struct hostd *h, const struct machine *m, struct err *e)
{
	struct net *n = h->net;
	json_t *res, *lists[2];
	const char *names[2] = { "ok", "deny" };

	if (!n)
		return json_pack("{s:[], s:[]}", "allowed", "denied");
	res = json_object();
	pthread_mutex_lock(&n->lock);
	nft_ctx_output_set_flags(n->nft, NFT_CTX_OUTPUT_JSON);
	for (int k = 0; k < 2; k++) {
		struct buf out = BUF_INIT;
		char cmd[128];
		json_t *j, *items;
		size_t i;
		json_t *it;
		lists[k] = json_array();
		xsnprintf(cmd, sizeof(cmd), "list set inet %s m%d-%s", n->conf.table, m->net_index,
			  names[k]);
		if (nft_run(n, cmd, &out, e) < 0) {
			buf_free(&out);
			continue;
		}
		j = json_loads(buf_str(&out), 0, NULL);
		items = json_object_get(j, "nftables");
		json_array_foreach(items, i, it) {
			json_t *set = json_object_get(it, "set"), *elems, *el;
			size_t q;
			if (!set)
				continue;
			elems = json_object_get(set, "elem");
			json_array_foreach(elems, q, el)
				log_element(el, 3600, lists[k]);
		}
		json_decref(j);
		buf_free(&out);
	}
	nft_ctx_output_set_flags(n->nft, 0);
	pthread_mutex_unlock(&n->lock);
	json_object_set_new(res, "allowed", lists[0]);
	json_object_set_new(res, "denied", lists[1]);
	return res;
}
