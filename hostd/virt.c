#include "hostd/virt.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>
#include <linux/kvm.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "hostd/zmem.h"
#include "common/banned.h"

struct virt {
	pthread_mutex_t lock;        /* guards conn replacement */
	virConnectPtr conn;
	char uri[128];
	bool kvm;
	char version[32];
	char why[128];               /* why not KVM, when TCG */
	bool allow_root;             /* allow_root_qemu: privileged QEMU logged, not refused */
	virt_event_fn event_fn;
	void *event_data;
	int event_id;
	pthread_t event_thread;
	volatile bool stop;
	volatile bool lost;          /* the connection closed (libvirtd restarted) */
	volatile bool reconnecting;  /* a reconnect thread runs */
};

/* The one instance, for the event loop's timer (registered once). */
static struct virt *tick_virt;

const char *vstate_name(enum vstate s)
{
	switch (s) {
	case VS_MISSING: return "missing";
	case VS_STOPPED: return "stopped";
	case VS_SUSPENDED: return "suspended";
	case VS_RUNNING: return "running";
	case VS_PAUSED: return "paused";
	case VS_BUSY: return "busy";
	}
	return "unknown";
}

/* The message of libvirt's last error on this thread, or a fallback. */
static const char *vmsg(void)
{
	virErrorPtr err = virGetLastError();

	return err && err->message ? err->message : "unknown libvirt error";
}

static int verr(struct err *e, const char *what, const char *uuid)
{
	return err_set(e, 500, "libvirt", "%s %s: %s", what, uuid ? uuid : "", vmsg());
}

/* XML 1.0 cannot carry control characters other than tab and newlines. */
/* network=user: the SSH forward's text in QEMU's argv. */
#define SSH_FWD_PREFIX "hostfwd=tcp:127.0.0.1:"
#define SSH_FWD_SUFFIX "-:22"

static bool xml_text_ok(const char *s)
{
	for (; s && *s; s++)
		if ((unsigned char)*s < 0x20 && *s != '\t' && *s != '\n' && *s != '\r')
			return false;
	return true;
}

int virt_domain_xml(const struct domain_spec *s, struct buf *b, struct err *e)
{
	const char *fields[] = { s->dom_name, s->uuid, s->owner, s->name, s->kernel,
				 s->initrd, s->cmdline, s->disk_path, s->disk_format,
				 s->seed_path, s->mac, s->tap, s->console_log,
				 s->agent_socket };
	bool user, routed;

	if (s->vcpus < 1 || s->memory < (1 << 20) || !s->disk_path ||
	    !s->dom_name || !s->uuid || !s->owner || !s->name || !s->disk_format ||
	    !s->mac || !s->network)
		return err_set(e, 500, "internal", "domain %s: incomplete spec",
			       s->dom_name ? s->dom_name : "?");
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
		if (!xml_text_ok(fields[i]))
			return err_set(e, 400, "invalid_spec",
				       "domain %s: a value has a control character", s->dom_name);
	user = strcmp(s->network, "user") == 0;
	routed = strcmp(s->network, "routed") == 0;
	if (!user && !routed)
		return err_set(e, 500, "internal", "domain %s: unknown network '%s'",
			       s->dom_name, s->network);
	if (routed && (!s->tap || !*s->tap))
		return err_set(e, 500, "internal", "domain %s: no tap", s->dom_name);
	if (user && (s->ssh_port < 1 || s->ssh_port > 65535))
		return err_set(e, 500, "internal", "domain %s: no SSH port", s->dom_name);
	/* Without a label QEMU would run as libvirt's default user, which may
	 * be root: never. */
	if (s->qemu_uid == 0 || s->qemu_gid == 0)
		return err_set(e, 500, "internal", "domain %s: QEMU's uid and gid must not be "
			       "root's (uid %u, gid %u)", s->dom_name, s->qemu_uid, s->qemu_gid);
	buf_printf(b, "<domain type='%s' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>\n",
		   s->kvm ? "kvm" : "qemu");
	buf_adds(b, "  <name>");
	buf_add_xml(b, s->dom_name);
	buf_adds(b, "</name>\n  <uuid>");
	buf_add_xml(b, s->uuid);
	/* A VM generation id (QEMU's vmgenid): libvirt makes a new one at
	 * every start and restore, and a guest restored from memory (a
	 * template's machines, a live fork, a memory checkpoint's restore)
	 * sees it change: Linux (CONFIG_VMGENID, 5.18 on) then reseeds its
	 * RNG, so two machines from one memory image do not draw the same
	 * random bytes. */
	buf_adds(b, "</uuid>\n");
	if (!s->genid) {
		buf_adds(b, "  <genid/>\n");
	} else if (s->genid[0]) {
		buf_adds(b, "  <genid>");
		buf_add_xml(b, s->genid);
		buf_adds(b, "</genid>\n");
	}
	buf_adds(b, "  <metadata>\n    <berth:machine xmlns:berth='https://berth.dev/xmlns/machine/1'>\n      <berth:owner>");
	buf_add_xml(b, s->owner);
	buf_adds(b, "</berth:owner>\n      <berth:name>");
	buf_add_xml(b, s->name);
	buf_adds(b, "</berth:name>\n    </berth:machine>\n  </metadata>\n");
	buf_printf(b, "  <memory unit='KiB'>%llu</memory>\n",
		   (unsigned long long)(s->memory >> 10));
	buf_printf(b, "  <vcpu>%d</vcpu>\n", s->vcpus);
	if (s->cpu_shares > 0)
		buf_printf(b, "  <cputune>\n    <shares>%d</shares>\n  </cputune>\n", s->cpu_shares);
	if (s->io_weight > 0)
		buf_printf(b, "  <blkiotune>\n    <weight>%d</weight>\n  </blkiotune>\n", s->io_weight);
	if (s->memory_soft > 0)
		buf_printf(b, "  <memtune>\n    <soft_limit unit='KiB'>%llu</soft_limit>\n  </memtune>\n",
			   (unsigned long long)(s->memory_soft >> 10));
	buf_adds(b, "  <os>\n    <type arch='x86_64' machine='pc'>hvm</type>\n");
	if (s->kernel && *s->kernel) {
		/* Direct boot: QEMU loads the image's kernel itself. */
		buf_adds(b, "    <kernel>");
		buf_add_xml(b, s->kernel);
		buf_adds(b, "</kernel>\n");
		if (s->initrd && *s->initrd) {
			buf_adds(b, "    <initrd>");
			buf_add_xml(b, s->initrd);
			buf_adds(b, "</initrd>\n");
		}
		buf_adds(b, "    <cmdline>");
		buf_add_xml(b, s->cmdline ? s->cmdline : "");
		buf_adds(b, "</cmdline>\n");
	} else {
		/* Firmware boot: the BIOS runs the disk's boot loader. */
		buf_adds(b, "    <boot dev='hd'/>\n");
	}
	buf_adds(b, "  </os>\n  <features><acpi/><apic/></features>\n");
	/* A named CPU model, not host-passthrough (under nested KVM QEMU
	 * aborts on MSRs the outer hypervisor refuses, seen: MSR 0x10a), and
	 * not QEMU's default qemu64, which lacks SSE4.2 and POPCNT: programs
	 * built for x86-64-v2 (Claude Code's and OpenCode's native binaries)
	 * die of an illegal instruction on it.  Nehalem is x86-64-v2, TCG
	 * emulates it, and every x86-64 host of the last fifteen years has it. */
	buf_adds(b, "  <cpu mode='custom' match='exact' check='none'>"
		    "<model fallback='forbid'>Nehalem</model></cpu>\n");
	buf_adds(b, "  <clock offset='utc'/>\n"
		    "  <on_poweroff>destroy</on_poweroff>\n"
		    "  <on_reboot>restart</on_reboot>\n"
		    "  <on_crash>destroy</on_crash>\n"
		    "  <devices>\n");
	/* A block device (a thin LV) without the host's page cache: a thin
	 * snapshot taken while the guest is paused then holds every write. */
	buf_printf(b, "    <disk type='%s' device='disk'>\n"
		      "      <driver name='qemu' type='%s' discard='unmap'%s/>\n"
		      "      <source %s='", s->disk_block ? "block" : "file",
		   s->disk_format, s->disk_block ? " cache='none' io='native'" : "",
		   s->disk_block ? "dev" : "file");
	buf_add_xml(b, s->disk_path);
	buf_adds(b, "'/>\n      <target dev='vda' bus='virtio'/>\n    </disk>\n");
	if (s->seed_path) {
		buf_adds(b, "    <disk type='file' device='disk'>\n"
			    "      <driver name='qemu' type='raw'/>\n      <source file='");
		buf_add_xml(b, s->seed_path);
		buf_adds(b, "'/>\n      <target dev='vdb' bus='virtio'/>\n      <readonly/>\n    </disk>\n");
	}
	if (routed) {
		/* The tap hostd made (hostd/net.h): libvirtd attaches to it and
		 * hands QEMU the descriptor, so QEMU needs no privilege. */
		buf_adds(b, "    <interface type='ethernet'>\n      <mac address='");
		buf_add_xml(b, s->mac);
		buf_adds(b, "'/>\n      <target dev='");
		buf_add_xml(b, s->tap);
		buf_adds(b, "' managed='no'/>\n      <model type='virtio'/>\n    </interface>\n");
	}
	buf_adds(b, "    <serial type='pty'>\n");
	if (s->console_log) {
		buf_adds(b, "      <log file='");
		buf_add_xml(b, s->console_log);
		buf_adds(b, "' append='on'/>\n");
	}
	buf_adds(b, "      <target port='0'/>\n    </serial>\n"
		    "    <console type='pty'><target type='serial' port='0'/></console>\n");
	if (s->screen) {
		/* The screen, for berth-desktop: a VNC server that listens
		 * nowhere (-vnc none).  hostd asks libvirt for a connection
		 * (virt_open_screen: a socket pair, one end handed to QEMU), so
		 * no socket file exists that QEMU, which runs unprivileged,
		 * would have to create, or anyone else could reach. */
		buf_adds(b, "    <graphics type='vnc'>\n      <listen type='none'/>\n"
			    "    </graphics>\n");
	}
	if (s->agent_socket) {
		/* The clipboard, for berth-desktop, which speaks the host side
		 * of the SPICE agent protocol on it (docs/desktop.md).  A plain
		 * socket chardev, not QEMU's qemu-vdagent: that one blocks
		 * migration, so save and memory snapshots. */
		buf_adds(b, "    <channel type='unix'>\n      <source mode='bind' path='");
		buf_add_xml(b, s->agent_socket);
		buf_adds(b, "'/>\n      <target type='virtio' name='com.redhat.spice.0'/>\n"
			    "    </channel>\n");
	}
	buf_adds(b, "    <video><model type='vga'/></video>\n"
		    "    <memballoon model='none'/>\n"
		    "    <rng model='virtio'><backend model='random'>/dev/urandom</backend></rng>\n"
		    "  </devices>\n");
	/* QEMU runs as the machine's own uid (docs/architecture.md, "QEMU
	 * unprivileged"): a static DAC label, and relabel='no' so libvirt
	 * changes no file's owner (it would chown read-only bases to that uid
	 * for good); hostd gives each file the owner and mode it needs. */
	buf_printf(b, "  <seclabel type='static' model='dac' relabel='no'>\n"
		      "    <label>+%u:+%u</label>\n  </seclabel>\n", s->qemu_uid, s->qemu_gid);
	if (user) {
		/* QEMU user-mode networking with one loopback port forward to the
		 * guest's sshd: needs no bridge, survives managed save/restore.
		 * libvirt 9.0 has no <portForward>, so it is QEMU's argv.  Its PCI
		 * slot is fixed (0x1e) so it never takes one libvirt assigns. */
		buf_printf(b, "  <qemu:commandline>\n"
			      "    <qemu:arg value='-netdev'/>\n"
			      "    <qemu:arg value='user,id=berthnet0," SSH_FWD_PREFIX "%d"
			      SSH_FWD_SUFFIX "'/>\n"
			      "    <qemu:arg value='-device'/>\n"
			      "    <qemu:arg value='virtio-net-pci,netdev=berthnet0,bus=pci.0,addr=0x1e,mac=",
			   s->ssh_port);
		buf_add_xml(b, s->mac);
		buf_adds(b, "'/>\n  </qemu:commandline>\n");
	}
	buf_adds(b, "</domain>\n");
	return 0;
}

/* Whether KVM can run our guests.  /dev/kvm answering is not enough: on
 * the development machines it is kvm_pvm, which creates VMs and runs
 * real-mode code, yet a Debian kernel hangs before printing a byte.  There
 * the CPU shows no vmx/svm flag and KVM offers guests no SSE3
 * (CPUID.01H:ECX bit 0), which every real x86-64 host's KVM does.  So the
 * test: API version, a VM can be created, vmx or svm, and SSE3 offered.
 * hypervisor = kvm in the config overrides this. */
static bool kvm_usable(const char **why)
{
	struct kvm_cpuid2 *cpuid = NULL;
	int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC), vm = -1;
	bool ok = false;
	const int nent = 256;

	*why = "/dev/kvm cannot be opened";
	if (fd < 0)
		return false;
	*why = "/dev/kvm has an unknown API version";
	if (ioctl(fd, KVM_GET_API_VERSION, 0) != KVM_API_VERSION)
		goto out;
	*why = "KVM cannot create a VM";
	vm = ioctl(fd, KVM_CREATE_VM, 0);
	if (vm < 0)
		goto out;
	cpuid = calloc(1, sizeof(*cpuid) + nent * sizeof(cpuid->entries[0]));
	if (!cpuid)
		abort();
	cpuid->nent = nent;
	*why = "KVM does not report the CPUID it supports";
	if (ioctl(fd, KVM_GET_SUPPORTED_CPUID, cpuid) < 0)
		goto out;
	*why = "the CPU has no vmx or svm flag (a /dev/kvm of a nested or paravirtual kind)";
	{
		char *cpuinfo = file_read("/proc/cpuinfo", 1 << 22, NULL);
		bool virt = cpuinfo && (strstr(cpuinfo, " vmx") || strstr(cpuinfo, " svm"));
		free(cpuinfo);
		if (!virt)
			goto out;
	}
	*why = "KVM offers guests no SSE3 (a nested hypervisor that cannot run Linux guests)";
	for (unsigned i = 0; i < cpuid->nent; i++)
		if (cpuid->entries[i].function == 1 && (cpuid->entries[i].ecx & 1))
			ok = true;
	if (ok)
		*why = "";
out:
	free(cpuid);
	if (vm >= 0)
		close(vm);
	close(fd);
	return ok;
}

static enum vstate map_event(int event, int detail)
{
	switch (event) {
	case VIR_DOMAIN_EVENT_STARTED:
	case VIR_DOMAIN_EVENT_RESUMED:
		return VS_RUNNING;
	case VIR_DOMAIN_EVENT_SUSPENDED:
	case VIR_DOMAIN_EVENT_PMSUSPENDED:
		return VS_PAUSED;
	case VIR_DOMAIN_EVENT_STOPPED:
		return detail == VIR_DOMAIN_EVENT_STOPPED_SAVED ? VS_SUSPENDED : VS_STOPPED;
	case VIR_DOMAIN_EVENT_CRASHED:
		return VS_STOPPED;
	default:
		return VS_BUSY;
	}
}

static int lifecycle_cb(virConnectPtr conn, virDomainPtr dom, int event,
			int detail, void *opaque)
{
	struct virt *v = opaque;
	char uuid[VIR_UUID_STRING_BUFLEN];
	enum vstate s = map_event(event, detail);

	(void)conn;
	if (s == VS_BUSY || !v->event_fn)
		return 0;
	if (virDomainGetUUIDString(dom, uuid) == 0)
		v->event_fn(uuid, s, v->event_data);
	return 0;
}

static void *event_loop(void *arg)
{
	struct virt *v = arg;

	while (!v->stop)
		if (virEventRunDefaultImpl() < 0)
			log_warn("libvirt event loop: %s", vmsg());
	return NULL;
}

static int event_tick_id = -1;

static void on_close(virConnectPtr conn, int reason, void *opaque)
{
	struct virt *v = opaque;

	(void)conn;
	log_warn("libvirt connection closed (reason %d); reconnecting", reason);
	v->lost = true;
}

static void report_domain_states(struct virt *v);
static int connect_locked(struct virt *v, struct err *e);

/* Reconnect off the event loop's thread, then report every domain's state
 * through the event callback: events that happened while libvirtd was
 * away were never delivered. */
static void *reconnect_thread(void *arg)
{
	struct virt *v = arg;
	struct err e = { 0 };
	bool warned = false;

	while (!v->stop) {
		err_clear(&e);
		pthread_mutex_lock(&v->lock);
		int rc = connect_locked(v, &e);
		pthread_mutex_unlock(&v->lock);
		if (rc == 0)
			break;
		if (!warned)
			log_warn("%s; retrying every second", e.msg);
		warned = true;
		sleep(1);
	}
	if (!v->stop) {
		log_info("reconnected to libvirt; re-reading machine states");
		report_domain_states(v);
	}
	v->reconnecting = false;
	return NULL;
}

static void tick(int timer, void *opaque)
{
	struct virt *v = tick_virt;
	pthread_t t;

	(void)timer;
	(void)opaque;
	if (!v || v->stop || !v->lost || v->reconnecting)
		return;
	v->lost = false;
	v->reconnecting = true;
	if (pthread_create(&t, NULL, reconnect_thread, v) == 0)
		pthread_detach(t);
	else
		v->reconnecting = false;
}

static int connect_locked(struct virt *v, struct err *e)
{
	if (v->conn && virConnectIsAlive(v->conn) == 1)
		return 0;
	if (v->conn) {
		log_warn("libvirt connection lost; reconnecting to %s", v->uri);
		virConnectUnregisterCloseCallback(v->conn, on_close);
		if (v->event_id >= 0)
			virConnectDomainEventDeregisterAny(v->conn, v->event_id);
		virConnectClose(v->conn);
		v->conn = NULL;
		v->event_id = -1;
	}
	v->conn = virConnectOpen(v->uri);
	if (!v->conn)
		return err_set(e, 503, "libvirt_unavailable", "cannot connect to libvirt at %s: %s",
			       v->uri, vmsg());
	v->event_id = virConnectDomainEventRegisterAny(
		v->conn, NULL, VIR_DOMAIN_EVENT_ID_LIFECYCLE,
		VIR_DOMAIN_EVENT_CALLBACK(lifecycle_cb), v, NULL);
	if (v->event_id < 0)
		log_warn("cannot register for libvirt lifecycle events: %s", vmsg());
	if (virConnectRegisterCloseCallback(v->conn, on_close, v, NULL) < 0)
		log_warn("cannot watch the libvirt connection: %s", vmsg());
	return 0;
}

/* The live connection (reconnecting if libvirtd restarted), or NULL. */
static virConnectPtr conn_get(struct virt *v, struct err *e)
{
	virConnectPtr c = NULL;

	pthread_mutex_lock(&v->lock);
	if (connect_locked(v, e) == 0) {
		c = v->conn;
		virConnectRef(c);
	}
	pthread_mutex_unlock(&v->lock);
	return c;
}

/* libvirt's default event loop, once per process; a periodic timer wakes it
 * so virt_close can stop the thread that runs it. */
static void register_impl(void)
{
	virEventRegisterDefaultImpl();
	event_tick_id = virEventAddTimeout(500, tick, NULL, NULL);
}

static virDomainPtr dom_get(struct virt *v, const char *uuid, virConnectPtr *connp,
			    struct err *e);
static void dom_put(virDomainPtr d, virConnectPtr c);

int virt_caps_check(const char *caps, struct err *e)
{
	const char *p, *end;
	int labels = 0;

	/* <secmodel><model>dac</model><doi>0</doi>
	 *   <baselabel type='kvm'>+64055:+107</baselabel>
	 *   <baselabel type='qemu'>+64055:+107</baselabel></secmodel> */
	for (p = strstr(caps, "<secmodel>"); p; p = strstr(end, "<secmodel>")) {
		end = strstr(p, "</secmodel>");
		if (!end)
			break;
		const char *m = strstr(p, "<model>dac</model>");
		if (!m || m > end)
			continue;
		for (const char *l = strstr(p, "<baselabel "); l && l < end;
		     l = strstr(l + 1, "<baselabel ")) {
			char type[16];
			unsigned long uid, gid;
			if (sscanf(l, "<baselabel type='%15[^']'>+%lu:+%lu</baselabel>", type, &uid,
				   &gid) != 3)
				continue;
			labels++;
			if (uid != 0 && gid != 0)
				continue;
			return err_set(e, 400, "qemu_privileged",
				       "libvirt runs QEMU as %s (its DAC base label for type '%s' is "
				       "+%lu:+%lu): in /etc/libvirt/qemu.conf, replace user = \"root\" "
				       "and group = \"root\" by user = \"libvirt-qemu\" and group = "
				       "\"kvm\" (deploy/install-deps.sh does) and restart libvirtd; "
				       "allow_root_qemu = yes in berth.conf overrides this for "
				       "development", uid == 0 ? "root" : "group root", type, uid, gid);
		}
	}
	if (labels == 0)
		return err_set(e, 400, "qemu_privileged",
			       "libvirt's capabilities name no DAC base label for QEMU, so whether "
			       "it runs QEMU as root cannot be told: check /etc/libvirt/qemu.conf "
			       "(user = \"libvirt-qemu\", group = \"kvm\", security_driver) and "
			       "restart libvirtd; allow_root_qemu = yes in berth.conf overrides "
			       "this for development");
	return 0;
}

/* The unsigned numbers after KEY ("\nUid:") in /proc status text, up to N. */
static int status_fields(const char *status, const char *key, int base,
			 unsigned long long *out, int n)
{
	const char *p = strstr(status, key);
	char *end;
	int got = 0;

	if (!p)
		return 0;
	p += strlen(key);
	while (got < n) {
		while (*p == ' ' || *p == '\t')
			p++;
		if (*p == '\n' || *p == '\0')
			break;
		errno = 0;
		out[got] = strtoull(p, &end, base);
		if (end == p || errno)
			break;
		got++;
		p = end;
	}
	return got;
}

int virt_proc_creds_parse(const char *status, struct proc_creds *out)
{
	unsigned long long uids[4], gids[4], cap;
	int nu = status_fields(status, "\nUid:", 10, uids, 4);
	int ng = status_fields(status, "\nGid:", 10, gids, 4);

	memset(out, 0, sizeof(*out));
	if (nu != 4 || ng != 4 || status_fields(status, "\nCapEff:", 16, &cap, 1) != 1)
		return -1;
	out->uid_min = out->uid_max = (unsigned)uids[0];
	out->gid_min = out->gid_max = (unsigned)gids[0];
	for (int i = 1; i < 4; i++) {
		if (uids[i] < out->uid_min)
			out->uid_min = (unsigned)uids[i];
		if (uids[i] > out->uid_max)
			out->uid_max = (unsigned)uids[i];
		if (gids[i] < out->gid_min)
			out->gid_min = (unsigned)gids[i];
		if (gids[i] > out->gid_max)
			out->gid_max = (unsigned)gids[i];
	}
	out->cap_eff = cap;
	return 0;
}

/* D's QEMU process: its pid from libvirt's pid file (qemu:///system keeps
 * it in /run/libvirt/qemu/NAME.pid) and its credentials from /proc. */
static int creds_of(struct virt *v, virDomainPtr d, long *pid, struct proc_creds *out,
		    struct err *e)
{
	const char *name = virDomainGetName(d);
	char path[PATH_MAX], *text = NULL;
	struct err le = { 0 };
	int rc = -1;

	*pid = -1;
	if (strcmp(v->uri, "qemu:///system") != 0)
		return err_set(e, 501, "not_supported", "QEMU's pid file is known for "
			       "qemu:///system only, not %s", v->uri);
	if (!name)
		return verr(e, "name of", NULL);
	snprintf(path, sizeof(path), "/run/libvirt/qemu/%s.pid", name);
	text = file_read(path, 64, &le);
	if (!text)
		return err_set(e, 500, "internal", "QEMU of %s: %s", name, le.msg);
	*pid = strtol(text, NULL, 10);
	free(text);
	if (*pid <= 0)
		return err_set(e, 500, "internal", "QEMU of %s: no pid in %s", name, path);
	snprintf(path, sizeof(path), "/proc/%ld/status", *pid);
	text = file_read(path, 1 << 16, &le);
	if (!text)
		return err_set(e, 500, "internal", "QEMU of %s (pid %ld): %s", name, *pid, le.msg);
	if (virt_proc_creds_parse(text, out) < 0)
		err_set(e, 500, "internal", "QEMU of %s: %s has no Uid, Gid or CapEff line",
			name, path);
	else
		rc = 0;
	free(text);
	return rc;
}

int virt_qemu_creds(struct virt *v, const char *uuid, long *pid, struct proc_creds *out,
		    struct err *e)
{
	virConnectPtr c;
	virDomainPtr d = dom_get(v, uuid, &c, e);
	long p = -1;
	int rc = -1;

	if (d)
		rc = creds_of(v, d, &p, out, e);
	if (pid)
		*pid = p;
	dom_put(d, c);
	return rc;
}

/* After D started or was restored: its QEMU must run unprivileged (its
 * static label says which uid; this catches a libvirt that ignored it).
 * A privileged one is destroyed, unless allow_root_qemu says to let it
 * run.  A QEMU whose credentials cannot be read is logged and let run:
 * the capabilities' check at start-up and the label stand. */
static int check_started(struct virt *v, virDomainPtr d, struct err *e)
{
	const char *name = virDomainGetName(d);
	struct proc_creds pc;
	struct err ce = { 0 };
	long pid;

	if (creds_of(v, d, &pid, &pc, &ce) < 0) {
		log_warn("cannot check which user %s's QEMU runs as: %s", name ? name : "?",
			 ce.msg);
		return 0;
	}
	if (pc.uid_min != 0 && pc.gid_min != 0 && pc.cap_eff == 0) {
		log_debug("domain %s: QEMU (pid %ld) runs as uid %u, gid %u, no capabilities",
			  name, pid, pc.uid_max, pc.gid_max);
		return 0;
	}
	if (v->allow_root) {
		log_warn("domain %s: QEMU (pid %ld) RUNS PRIVILEGED (uid %u, gid %u, effective "
			 "capabilities %#llx): let run because allow_root_qemu = yes", name, pid,
			 pc.uid_min, pc.gid_min, (unsigned long long)pc.cap_eff);
		return 0;
	}
	virDomainDestroy(d);
	return err_set(e, 500, "qemu_privileged",
		       "domain %s: its QEMU (pid %ld) ran as uid %u, gid %u with effective "
		       "capabilities %#llx, so hostd destroyed it: berth runs QEMU unprivileged "
		       "only (check /etc/libvirt/qemu.conf and libvirt's security drivers)",
		       name, pid, pc.uid_min, pc.gid_min, (unsigned long long)pc.cap_eff);
}

struct virt *virt_open(const char *uri, const char *hypervisor, bool allow_root_qemu,
		       virt_event_fn fn, void *data, struct err *e)
{
	struct virt *v = calloc(1, sizeof(*v));
	unsigned long ver = 0;
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	if (!v)
		abort();
	pthread_mutex_init(&v->lock, NULL);
	snprintf(v->uri, sizeof(v->uri), "%s", uri);
	v->event_fn = fn;
	v->event_data = data;
	v->event_id = -1;
	pthread_once(&once, register_impl);
	if (connect_locked(v, e) < 0)
		goto fail;
	if (virConnectGetLibVersion(v->conn, &ver) == 0)
		snprintf(v->version, sizeof(v->version), "%lu.%lu.%lu",
			 ver / 1000000, ver / 1000 % 1000, ver % 1000);
	{
		/* QEMU as root: refused, or (development) said loudly. */
		char *caps = virConnectGetCapabilities(v->conn);
		struct err ce = { 0 };
		if (!caps) {
			err_set(e, 503, "libvirt_unavailable", "libvirt's capabilities: %s", vmsg());
			goto fail;
		}
		int crc = virt_caps_check(caps, &ce);
		free(caps);
		v->allow_root = allow_root_qemu;
		if (crc < 0 && !allow_root_qemu) {
			if (e && !err_isset(e))
				*e = ce;
			goto fail;
		}
		if (crc < 0)
			log_warn("allow_root_qemu = yes: NOT SAFE FOR PRODUCTION: %s", ce.msg);
	}
	bool kvm_ok = false;
	const char *why = "hypervisor = tcg in the config";
	if (!strcmp(hypervisor, "kvm") || (!strcmp(hypervisor, "auto") && kvm_usable(&why))) {
		char *caps = virConnectGetDomainCapabilities(v->conn, NULL, "x86_64",
							      NULL, "kvm", 0);
		kvm_ok = caps != NULL;
		if (!kvm_ok)
			why = "libvirt does not offer kvm";
		free(caps);
	}
	if (strcmp(hypervisor, "kvm") == 0 && !kvm_ok) {
		err_set(e, 400, "invalid_config", "hypervisor = kvm, but %s", why);
		goto fail;
	}
	v->kvm = kvm_ok;
	snprintf(v->why, sizeof(v->why), "%s", kvm_ok ? "" : why);
	if (pthread_create(&v->event_thread, NULL, event_loop, v) != 0) {
		err_set(e, 500, "internal", "cannot start the libvirt event thread");
		goto fail;
	}
	tick_virt = v;
	log_info("libvirt %s at %s; machines run under %s%s%s", v->version, uri,
		 v->kvm ? "KVM" : "TCG (software emulation)", v->kvm ? "" : ": ", v->why);
	return v;
fail:
	if (v->conn)
		virConnectClose(v->conn);
	pthread_mutex_destroy(&v->lock);
	free(v);
	return NULL;
}

void virt_close(struct virt *v)
{
	if (!v)
		return;
	v->stop = true;
	tick_virt = NULL;
	pthread_join(v->event_thread, NULL);
	while (v->reconnecting)
		usleep(10 * 1000);
	if (v->conn) {
		virConnectUnregisterCloseCallback(v->conn, on_close);
		if (v->event_id >= 0)
			virConnectDomainEventDeregisterAny(v->conn, v->event_id);
		virConnectClose(v->conn);
	}
	pthread_mutex_destroy(&v->lock);
	free(v);
}

bool virt_kvm(const struct virt *v)
{
	return v->kvm;
}

const char *virt_hypervisor(const struct virt *v)
{
	return v->kvm ? "kvm" : "tcg";
}

const char *virt_why_tcg(const struct virt *v)
{
	return v->why;
}

const char *virt_version(const struct virt *v)
{
	return v->version;
}

/* Look up UUID; NULL with E set (404 "not_found" when missing). */
static virDomainPtr dom_get(struct virt *v, const char *uuid, virConnectPtr *connp,
			    struct err *e)
{
	virConnectPtr c = conn_get(v, e);
	virDomainPtr d;

	*connp = NULL;
	if (!c)
		return NULL;
	d = virDomainLookupByUUIDString(c, uuid);
	if (!d) {
		virErrorPtr ve = virGetLastError();
		if (ve && ve->code == VIR_ERR_NO_DOMAIN)
			err_set(e, 404, "not_found", "no libvirt domain %s", uuid);
		else
			verr(e, "lookup domain", uuid);
		virConnectClose(c);
		return NULL;
	}
	*connp = c;
	return d;
}

static void dom_put(virDomainPtr d, virConnectPtr c)
{
	if (d)
		virDomainFree(d);
	if (c)
		virConnectClose(c);
}

int virt_define(struct virt *v, const char *xml, struct err *e)
{
	int64_t t0 = mono_us();
	virConnectPtr c = conn_get(v, e);
	virDomainPtr d;

	if (!c)
		return -1;
	d = virDomainDefineXML(c, xml);
	ext_time_add(mono_us() - t0);
	if (!d) {
		verr(e, "define domain", NULL);
		virConnectClose(c);
		return -1;
	}
	dom_put(d, c);
	return 0;
}

/* D's state; *RAN (may be NULL) tells, for a shut-off domain, whether
 * libvirt says it ran since it last stopped by a save. */
static enum vstate state_ran(virDomainPtr d, bool *ran)
{
	int st = 0, reason = 0;

	if (ran)
		*ran = false;
	if (virDomainGetState(d, &st, &reason, 0) < 0)
		return VS_BUSY;
	if (ran && st == VIR_DOMAIN_SHUTOFF)
		*ran = reason != VIR_DOMAIN_SHUTOFF_UNKNOWN && reason != VIR_DOMAIN_SHUTOFF_SAVED &&
		       reason != VIR_DOMAIN_SHUTOFF_FAILED;
	switch (st) {
	case VIR_DOMAIN_RUNNING:
		return VS_RUNNING;
	case VIR_DOMAIN_PAUSED:
		/* Paused while libvirt writes the memory out (a save) or reads
		 * it in (a restore, until QEMU has loaded it all): libvirt's
		 * job, which ends by itself.  Not a pause anyone may undo. */
		return reason == VIR_DOMAIN_PAUSED_SAVE || reason == VIR_DOMAIN_PAUSED_STARTING_UP
			       ? VS_BUSY : VS_PAUSED;
	case VIR_DOMAIN_PMSUSPENDED:
		return VS_PAUSED;
	case VIR_DOMAIN_SHUTOFF:
		return virDomainHasManagedSaveImage(d, 0) == 1 ? VS_SUSPENDED : VS_STOPPED;
	default:
		return VS_BUSY;
	}
}

static enum vstate state_of(virDomainPtr d)
{
	return state_ran(d, NULL);
}

static void report_domain_states(struct virt *v)
{
	struct err e = { 0 };
	virConnectPtr c = conn_get(v, &e);
	virDomainPtr *doms = NULL;
	int n;

	if (!c)
		return;
	n = virConnectListAllDomains(c, &doms, 0);
	for (int i = 0; i < n; i++) {
		char uuid[VIR_UUID_STRING_BUFLEN];
		enum vstate s = state_of(doms[i]);
		if (s != VS_BUSY && v->event_fn && virDomainGetUUIDString(doms[i], uuid) == 0)
			v->event_fn(uuid, s, v->event_data);
		virDomainFree(doms[i]);
	}
	free(doms);
	virConnectClose(c);
}

int virt_state(struct virt *v, const char *uuid, enum vstate *out, struct err *e)
{
	return virt_state_ran(v, uuid, out, NULL, e);
}

int virt_state_ran(struct virt *v, const char *uuid, enum vstate *out, bool *ran,
		   struct err *e)
{
	struct err local = { 0 };
	int64_t t0 = mono_us();
	virConnectPtr c;
	virDomainPtr d = dom_get(v, uuid, &c, &local);

	if (!d) {
		ext_time_add(mono_us() - t0);
		if (local.status == 404) {
			*out = VS_MISSING;
			return 0;
		}
		if (e && !err_isset(e))
			*e = local;
		return -1;
	}
	*out = state_ran(d, ran);
	dom_put(d, c);
	ext_time_add(mono_us() - t0);
	return 0;
}

int virt_vcpu_time(struct virt *v, const char *uuid, uint64_t *ns, struct err *e)
{
	virConnectPtr c;
	virDomainPtr d = dom_get(v, uuid, &c, e);
	virVcpuInfo info[64];
	int n;

	if (!d)
		return -1;
	n = virDomainGetVcpus(d, info, 64, NULL, 0);
	if (n < 0) {
		verr(e, "vCPU times of", uuid);
		dom_put(d, c);
		return -1;
	}
	*ns = 0;
	for (int i = 0; i < n; i++)
		*ns += info[i].cpuTime;
	dom_put(d, c);
	return 0;
}

/* Run OP on UUID's domain, timing it as external time. */
#define DOM_OP(v, uuid, e, what, expr) \
	do { \
		int64_t t0_ = mono_us(); \
		virConnectPtr c_; \
		virDomainPtr d = dom_get(v, uuid, &c_, e); \
		int rc_ = -1; \
		if (d) { \
			if ((expr) < 0) \
				verr(e, what, uuid); \
			else \
				rc_ = 0; \
		} \
		dom_put(d, c_); \
		ext_time_add(mono_us() - t0_); \
		return rc_; \
	} while (0)

int virt_start(struct virt *v, const char *uuid, struct err *e)
{
	int64_t t0 = mono_us();
	virConnectPtr c;
	virDomainPtr d = dom_get(v, uuid, &c, e);
	int rc = -1;

	if (d) {
		if (virDomainCreate(d) < 0)
			verr(e, "start", uuid);
		else
			rc = check_started(v, d, e);
	}
	dom_put(d, c);
	ext_time_add(mono_us() - t0);
	return rc;
}

int virt_destroy(struct virt *v, const char *uuid, struct err *e)
{
	DOM_OP(v, uuid, e, "force off", virDomainDestroy(d));
}

int virt_managed_save(struct virt *v, const char *uuid, struct err *e)
{
	DOM_OP(v, uuid, e, "suspend (managed save)", virDomainManagedSave(d, 0));
}

int virt_save(struct virt *v, const char *uuid, const char *path, struct err *e)
{
	DOM_OP(v, uuid, e, "suspend (save)", virDomainSaveFlags(d, path, NULL, 0));
}

int64_t virt_managed_save_bytes(struct virt *v, const char *dom_name)
{
	char path[PATH_MAX];
	struct stat st;

	/* libvirt's save directory for the system QEMU driver (its cfg->saveDir). */
	if (strcmp(v->uri, "qemu:///system") != 0)
		return -1;
	snprintf(path, sizeof(path), "/var/lib/libvirt/qemu/save/%s.save", dom_name);
	return stat(path, &st) == 0 ? (int64_t)st.st_size : -1;
}

int virt_saved_xml(struct virt *v, const char *uuid, char **xml, struct err *e)
{
	virConnectPtr c;
	virDomainPtr d = dom_get(v, uuid, &c, e);
	int rc = -1;

	*xml = NULL;
	if (!d)
		return -1;
	*xml = virDomainManagedSaveGetXMLDesc(d, VIR_DOMAIN_SAVE_IMAGE_XML_SECURE);
	if (!*xml)
		verr(e, "read the saved image's XML", uuid);
	else
		rc = 0;
	dom_put(d, c);
	return rc;
}

int virt_saved_define(struct virt *v, const char *uuid, const char *xml, struct err *e)
{
	DOM_OP(v, uuid, e, "rewrite the saved image's XML",
	       virDomainManagedSaveDefineXML(d, xml, 0));
}

int virt_open_screen(struct virt *v, const char *uuid, int *fd, struct err *e)
{
	virConnectPtr c;
	virDomainPtr d = dom_get(v, uuid, &c, e);
	int rc = -1;

	*fd = -1;
	if (!d)
		return -1;
	*fd = virDomainOpenGraphicsFD(d, 0, VIR_DOMAIN_OPEN_GRAPHICS_SKIPAUTH);
	if (*fd < 0) {
		err_set(e, 503, "no_screen", "cannot open the screen of %s: %s", uuid, vmsg());
	} else {
		fcntl(*fd, F_SETFD, FD_CLOEXEC);
		rc = 0;
	}
	dom_put(d, c);
	return rc;
}

bool virt_xml_has_agent(const char *xml)
{
	return strstr(xml, "com.redhat.spice.0") != NULL;
}

bool virt_xml_genid(const char *xml, char out[37])
{
	const char *p = xml ? strstr(xml, "<genid>") : NULL, *q;

	if (!p)
		return false;
	p += strlen("<genid>");
	q = strstr(p, "</genid>");
	if (!q || q - p != 36)
		return false;
	snprintf(out, 37, "%.*s", (int)(q - p), p);
	return true;
}

int virt_image_xml(const char *path, char **xml, struct err *e)
{
	struct buf head = BUF_INIT;
	size_t need = 64 << 10, want;
	int64_t t0 = mono_us();
	int r;

	*xml = NULL;
	/* The header says how long the XML is: read again when the first
	 * guess was short. */
	do {
		want = need;
		buf_reset(&head);
		r = zmem_head(path, want, &head, e);
		if (r == 0)
			r = virt_save_image_xml(head.data, head.len, &need, xml, e);
		if (r == 1 && (head.len < want || need <= want))
			r = err_set(e, 500, "memory_image", "%s is truncated", path);
	} while (r == 1);
	buf_free(&head);
	/* Reading (and decompressing) a file: not hostd's own time. */
	ext_time_add(mono_us() - t0);
	return r < 0 ? -1 : 0;
}

int virt_pause(struct virt *v, const char *uuid, struct err *e)
{
	DOM_OP(v, uuid, e, "pause", virDomainSuspend(d));
}

int virt_unpause(struct virt *v, const char *uuid, struct err *e)
{
	DOM_OP(v, uuid, e, "unpause", virDomainResume(d));
}

/* An external snapshot: vda moved onto the overlay NEW_PATH (which the
 * caller made) when that is non-NULL, the memory saved to MEM_PATH when
 * that is non-NULL. */
static int external_snapshot(struct virt *v, const char *uuid, const char *new_path,
			     const char *mem_path, struct err *e)
{
	struct buf xml = BUF_INIT;
	unsigned flags = VIR_DOMAIN_SNAPSHOT_CREATE_ATOMIC | VIR_DOMAIN_SNAPSHOT_CREATE_NO_METADATA |
			 VIR_DOMAIN_SNAPSHOT_CREATE_REUSE_EXT;
	int64_t t0 = mono_us();
	virConnectPtr c;
	virDomainPtr d = dom_get(v, uuid, &c, e);
	virDomainSnapshotPtr snap = NULL;
	int rc = -1;

	if (!d)
		goto out;
	if ((new_path && !xml_text_ok(new_path)) || (mem_path && !xml_text_ok(mem_path))) {
		err_set(e, 400, "invalid_spec", "snapshot path has a control character");
		goto out;
	}
	buf_adds(&xml, "<domainsnapshot>");
	if (mem_path) {
		buf_adds(&xml, "<memory snapshot='external' file='");
		buf_add_xml(&xml, mem_path);
		buf_adds(&xml, "'/>");
	} else {
		flags |= VIR_DOMAIN_SNAPSHOT_CREATE_DISK_ONLY;
	}
	if (new_path) {
		buf_adds(&xml, "<disks><disk name='vda' snapshot='external' type='file'>"
			       "<driver type='qcow2'/><source file='");
		buf_add_xml(&xml, new_path);
		buf_adds(&xml, "'/></disk>");
	} else {
		buf_adds(&xml, "<disks><disk name='vda' snapshot='no'/>");
	}
	buf_adds(&xml, "<disk name='vdb' snapshot='no'/></disks></domainsnapshot>");
	snap = virDomainSnapshotCreateXML(d, buf_str(&xml), flags);
	if (!snap) {
		verr(e, mem_path ? "memory snapshot" : "disk snapshot", uuid);
		goto out;
	}
	rc = 0;
out:
	if (snap)
		virDomainSnapshotFree(snap);
	dom_put(d, c);
	buf_free(&xml);
	ext_time_add(mono_us() - t0);
	return rc;
}

int virt_disk_snapshot(struct virt *v, const char *uuid, const char *new_path,
		       struct err *e)
{
	return external_snapshot(v, uuid, new_path, NULL, e);
}

int virt_memory_snapshot(struct virt *v, const char *uuid, const char *mem_path,
			 struct err *e)
{
	return external_snapshot(v, uuid, NULL, mem_path, e);
}

/* libvirt's QEMU save image (src/qemu/qemu_saveimage.h, format 2): this
 * header in host byte order, then DATA_LEN bytes holding the domain XML
 * (NUL-terminated) and at COOKIE_OFFSET a cookie (NUL-terminated), then
 * QEMU's migration stream to the end of the file. */
struct save_header {
	char magic[16];          /* "LibvirtQemudSave" */
	uint32_t version;        /* 2 */
	uint32_t data_len;
	uint32_t was_running;
	uint32_t compressed;     /* 0: raw */
	uint32_t cookie_offset;
	uint32_t unused[14];
};

bool virt_save_image_complete(const char *path)
{
	struct save_header hd;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	bool ok;

	if (fd < 0)
		return false;
	/* libvirt writes "LibvirtQemudPart" first and the real magic last. */
	ok = read(fd, &hd, sizeof(hd)) == (ssize_t)sizeof(hd) &&
	     memcmp(hd.magic, "LibvirtQemudSave", 16) == 0;
	close(fd);
	return ok;
}

int virt_save_image_xml(const void *head, size_t len, size_t *need, char **xml,
			struct err *e)
{
	struct save_header hd;

	*xml = NULL;
	*need = sizeof(hd);
	if (len < sizeof(hd))
		return 1;
	memcpy(&hd, head, sizeof(hd));
	if (memcmp(hd.magic, "LibvirtQemudSave", 16) != 0 || hd.version != 2 ||
	    hd.data_len == 0 || hd.data_len > (16u << 20))
		return err_set(e, 500, "save_image", "not a complete libvirt save image "
			       "(format 2)");
	*need = sizeof(hd) + hd.data_len;
	if (len < *need)
		return 1;
	/* The XML is NUL-terminated inside the data; a cookie may follow. */
	const char *data = (const char *)head + sizeof(hd);
	size_t n = strnlen(data, hd.data_len);
	if (n == hd.data_len)
		return err_set(e, 500, "save_image", "save image's domain XML is not terminated");
	*xml = strndup(data, n);
	if (!*xml)
		abort();
	return 0;
}

int virt_save_image_retarget(const char *src, const char *dst, const char *xml,
			     struct err *e)
{
	struct save_header hd;
	char *data = NULL;
	int in = -1, out = -1, rc = -1;
	struct stat st;

	_Static_assert(sizeof(struct save_header) == 92, "libvirt save header is 92 bytes");
	in = open(src, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return err_errno(e, errno, "open %s", src);
	if (fstat(in, &st) < 0 || read(in, &hd, sizeof(hd)) != (ssize_t)sizeof(hd) ||
	    memcmp(hd.magic, "LibvirtQemudSave", 16) != 0 || hd.version != 2 || hd.compressed != 0 ||
	    hd.data_len == 0 || hd.data_len > (16u << 20) || hd.cookie_offset >= hd.data_len ||
	    (off_t)(sizeof(hd) + hd.data_len) > st.st_size) {
		err_set(e, 500, "save_image", "%s is not a save image berth can retarget "
			"(libvirt format 2, uncompressed)", src);
		goto out;
	}
	data = malloc(hd.data_len + 1);
	if (!data)
		abort();
	if (read(in, data, hd.data_len) != (ssize_t)hd.data_len) {
		err_errno(e, errno, "read %s", src);
		goto out;
	}
	data[hd.data_len] = '\0';
	/* cookie_offset 0 means the image has no cookie. */
	size_t xml_len = strlen(xml) + 1;
	struct buf nd = BUF_INIT;
	struct save_header nh = hd;
	buf_add(&nd, xml, xml_len);
	nh.cookie_offset = 0;
	if (hd.cookie_offset) {
		const char *cookie = data + hd.cookie_offset;
		buf_add(&nd, cookie, strnlen(cookie, hd.data_len - hd.cookie_offset));
		buf_add(&nd, "", 1);
		nh.cookie_offset = (uint32_t)xml_len;
	}
	nh.data_len = (uint32_t)nd.len;
	out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (out < 0) {
		err_errno(e, errno, "create %s", dst);
		buf_free(&nd);
		goto out;
	}
	if (write(out, &nh, sizeof(nh)) != (ssize_t)sizeof(nh) ||
	    write(out, nd.data, nd.len) != (ssize_t)nd.len) {
		err_errno(e, errno, "write %s", dst);
		buf_free(&nd);
		goto out;
	}
	buf_free(&nd);
	/* The migration stream, copied in the kernel. */
	off_t from = (off_t)(sizeof(hd) + hd.data_len);
	size_t left = (size_t)(st.st_size - from);
	while (left > 0) {
		ssize_t n = copy_file_range(in, &from, out, NULL, left, 0);
		if (n <= 0) {
			err_errno(e, n < 0 ? errno : EIO, "copy %s", src);
			goto out;
		}
		left -= (size_t)n;
	}
	rc = 0;
out:
	free(data);
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
	if (rc < 0)
		unlink(dst);
	return rc;
}

/* The <uuid> of domain XML, into OUT; false when it has none. */
static bool xml_uuid(const char *xml, char out[VIR_UUID_STRING_BUFLEN])
{
	const char *p = xml ? strstr(xml, "<uuid>") : NULL, *q;

	if (!p)
		return false;
	p += strlen("<uuid>");
	q = strstr(p, "</uuid>");
	if (!q || q - p != VIR_UUID_STRING_BUFLEN - 1)
		return false;
	snprintf(out, VIR_UUID_STRING_BUFLEN, "%.*s", (int)(q - p), p);
	return true;
}

static int restore(struct virt *v, const char *path, const char *xml, unsigned flags,
		   struct err *e)
{
	int64_t t0 = mono_us();
	virConnectPtr c = conn_get(v, e);
	virDomainPtr d = NULL;
	char uuid[VIR_UUID_STRING_BUFLEN], *saved = NULL;
	struct stat st;
	int rc = -1;

	if (!c)
		return -1;
	/* Which domain it will be, to check its QEMU after: from XML, or
	 * from the image when it is a file (a FIFO is read once, by
	 * libvirt). */
	if (!xml && stat(path, &st) == 0 && S_ISREG(st.st_mode))
		virt_image_xml(path, &saved, NULL);
	bool known = xml_uuid(xml ? xml : saved, uuid);
	free(saved);
	if (virDomainRestoreFlags(c, path, xml, flags) < 0) {
		verr(e, "restore from", path);
		goto out;
	}
	if (!known || !(d = virDomainLookupByUUIDString(c, uuid))) {
		log_warn("restored from %s: cannot tell which domain, so its QEMU's user is not "
			 "checked", path);
		rc = 0;
		goto out;
	}
	rc = check_started(v, d, e);
out:
	if (d)
		virDomainFree(d);
	virConnectClose(c);
	ext_time_add(mono_us() - t0);
	return rc;
}

int virt_restore(struct virt *v, const char *path, const char *xml, struct err *e)
{
	return restore(v, path, xml, VIR_DOMAIN_SAVE_RUNNING, e);
}

int virt_restore_paused(struct virt *v, const char *path, const char *xml, struct err *e)
{
	return restore(v, path, xml, VIR_DOMAIN_SAVE_PAUSED, e);
}

int virt_disk_path(struct virt *v, const char *uuid, char *out, size_t outlen,
		   struct err *e)
{
	virConnectPtr c;
	virDomainPtr d = dom_get(v, uuid, &c, e);
	char *xml = NULL;
	const char *p, *disk_end, *src;
	int rc = -1;

	if (!d)
		return -1;
	xml = virDomainGetXMLDesc(d, 0);
	if (!xml) {
		verr(e, "dumpxml", uuid);
		goto out;
	}
	/* The <disk> element whose target is vda: libvirt writes the
	 * attributes it generates with single quotes, source before target. */
	rc = 1;
	for (p = strstr(xml, "<disk "); p; p = strstr(p + 1, "<disk ")) {
		disk_end = strstr(p, "</disk>");
		if (!disk_end)
			break;
		const char *t = strstr(p, "<target dev='vda'");
		if (!t || t > disk_end)
			continue;
		src = strstr(p, "<source file='");
		if (!src || src > disk_end)
			break;
		src += strlen("<source file='");
		const char *q = strchr(src, '\'');
		if (!q || q > disk_end)
			break;
		snprintf(out, outlen, "%.*s", (int)(q - src), src);
		rc = 0;
		break;
	}
out:
	free(xml);
	dom_put(d, c);
	return rc;
}

int virt_shutdown(struct virt *v, const char *uuid, int timeout_s,
		  bool *forced, struct err *e)
{
	int64_t t0 = mono_us(), deadline = mono_ms() + (int64_t)timeout_s * 1000;
	virConnectPtr c;
	virDomainPtr d = dom_get(v, uuid, &c, e);
	int rc = -1;

	if (forced)
		*forced = false;
	if (!d)
		goto out;
	/* A paused guest cannot see the power button: force it at once. */
	enum vstate st = state_of(d);
	if (st == VS_PAUSED)
		deadline = 0;
	else if (st == VS_RUNNING && virDomainShutdown(d) < 0)
		log_warn("ACPI shutdown of %s failed: %s; forcing", uuid, vmsg());
	while (mono_ms() < deadline && virDomainIsActive(d) == 1)
		usleep(100 * 1000);
	if (virDomainIsActive(d) == 1) {
		if (forced)
			*forced = true;
		if (virDomainDestroy(d) < 0 && virDomainIsActive(d) == 1) {
			verr(e, "force off", uuid);
			goto out;
		}
	}
	rc = 0;
out:
	dom_put(d, c);
	ext_time_add(mono_us() - t0);
	return rc;
}

int virt_remove(struct virt *v, const char *uuid, struct err *e)
{
	struct err local = { 0 };
	int64_t t0 = mono_us();
	virConnectPtr c;
	virDomainPtr d = dom_get(v, uuid, &c, &local);
	int rc = -1;

	if (!d) {
		ext_time_add(mono_us() - t0);
		if (local.status == 404)
			return 0;
		if (e && !err_isset(e))
			*e = local;
		return -1;
	}
	if (virDomainIsActive(d) == 1 && virDomainDestroy(d) < 0 &&
	    virDomainIsActive(d) == 1) {
		verr(e, "force off", uuid);
		goto out;
	}
	if (virDomainUndefineFlags(d, VIR_DOMAIN_UNDEFINE_MANAGED_SAVE |
				   VIR_DOMAIN_UNDEFINE_SNAPSHOTS_METADATA |
				   VIR_DOMAIN_UNDEFINE_NVRAM) < 0) {
		verr(e, "undefine", uuid);
		goto out;
	}
	rc = 0;
out:
	dom_put(d, c);
	ext_time_add(mono_us() - t0);
	return rc;
}

int virt_list_prefix(struct virt *v, const char *prefix,
		     void (*fn)(const char *name, const char *uuid, void *data),
		     void *data, struct err *e)
{
	virConnectPtr c = conn_get(v, e);
	virDomainPtr *doms = NULL;
	int n;
	size_t plen = strlen(prefix);

	if (!c)
		return -1;
	n = virConnectListAllDomains(c, &doms, 0);
	if (n < 0) {
		verr(e, "list domains", NULL);
		virConnectClose(c);
		return -1;
	}
	for (int i = 0; i < n; i++) {
		const char *name = virDomainGetName(doms[i]);
		char uuid[VIR_UUID_STRING_BUFLEN];
		if (name && strncmp(name, prefix, plen) == 0 &&
		    virDomainGetUUIDString(doms[i], uuid) == 0)
			fn(name, uuid, data);
		virDomainFree(doms[i]);
	}
	free(doms);
	virConnectClose(c);
	return 0;
}
