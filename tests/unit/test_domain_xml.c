/*
 * Unit tests for virt_domain_xml (hostd/virt.h): the libvirt domain XML of a
 * machine, for network=user (QEMU user networking with a loopback SSH
 * forward on QEMU's command line) and network=routed (the machine's tap), with
 * every value XML-escaped, and the refusal of invalid specs.  Pure: no
 * libvirt connection.  The XML is also checked for well-formedness with
 * xmllint and against libvirt's own domain schema with virt-xml-validate
 * when those are installed (skipped, never passed, when not).
 *
 * Built by the Makefile as build/default/tests/test_domain_xml.  Prints TAP
 * lines and a closing count; exits 1 when a test failed.
 */
#include "hostd/virt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/err.h"
#include "tests/unit/tap.h"
#include "common/banned.h"

#define XMLLINT "/usr/bin/xmllint"

static const char *const UUID = "6f1c2a4e-8d0b-4c57-9e3a-2b7d5f60a1c9";
static const char *const MAC = "52:54:00:12:34:56";

/* A complete, valid spec for network=user. */
static struct domain_spec spec_user(void)
{
	struct domain_spec s = {
		.dom_name = "berth-i1-alice-devbox",
		.uuid = UUID,
		.owner = "alice",
		.name = "devbox",
		.kvm = false,
		.vcpus = 2,
		.memory = 512ULL << 20,
		.kernel = "/var/lib/berth/images/tiny/vmlinuz",
		.initrd = "/var/lib/berth/images/tiny/initrd.img",
		.cmdline = "console=ttyS0 root=/dev/vda rw",
		.disk_path = "/var/lib/berth/volumes/m-1.qcow2",
		.disk_format = "qcow2",
		.disk_block = false,
		.seed_path = "/var/lib/berth/machines/1/seed.iso",
		.mac = MAC,
		.network = "user",
		.ssh_port = 40022,
		.console_log = "/var/lib/berth/machines/1/console.log",
		.qemu_uid = 2013265921,
		.qemu_gid = 107,
	};
	return s;
}

/* Render S; the XML (malloc'd) or NULL, with *RC and E filled. */
static char *render(const struct domain_spec *s, int *rc, struct err *e)
{
	struct buf b = BUF_INIT;

	err_clear(e);
	*rc = virt_domain_xml(s, &b, e);
	return buf_detach(&b);
}

/* Well-formed per xmllint (skip when it is not installed). */
static void check_wellformed(const char *xml, const char *what)
{
	char *argv[] = { XMLLINT, "--noout", "-", NULL };
	char *out = NULL;
	int rc;

	if (access(XMLLINT, X_OK) != 0) {
		skip(what, "xmllint not installed");
		return;
	}
	rc = tool_run(argv, xml, &out);
	if (!check(rc == 0, "%s", what)) {
		diag("xmllint (status %d): %s", rc, out ? out : "");
		diag("xml: %s", xml);
	}
	free(out);
}

/* Valid per libvirt's domain schema (skip when virt-xml-validate is not
 * installed). */
static void check_schema(const char *xml, const char *what)
{
	char tool[4096], dir[64], file[128];
	char *out = NULL;
	int rc;

	if (!tool_find("virt-xml-validate", tool, sizeof(tool))) {
		skip(what, "virt-xml-validate not installed");
		return;
	}
	if (!tmpdir_make(dir, sizeof(dir))) {
		check(false, "%s", what);
		diag("cannot make a temporary directory");
		return;
	}
	snprintf(file, sizeof(file), "%s/domain.xml", dir);
	if (write_file(file, xml, strlen(xml)) < 0) {
		check(false, "%s", what);
		diag("cannot write %s", file);
		tmpdir_remove(dir);
		return;
	}
	{
		char *argv[] = { tool, file, "domain", NULL };
		rc = tool_run(argv, NULL, &out);
	}
	if (!check(rc == 0, "%s", what)) {
		diag("virt-xml-validate (status %d): %s", rc, out ? out : "");
		diag("xml: %s", xml);
	}
	free(out);
	tmpdir_remove(dir);
}

static void test_user(void)
{
	struct domain_spec s = spec_user();
	struct err e;
	char *xml;
	int rc;

	xml = render(&s, &rc, &e);
	if (!check(rc == 0 && !err_isset(&e), "user: valid spec renders"))
		diag("rc %d: %s", rc, e.msg);
	check_has(xml, "<domain type='qemu'", "user: kvm=false gives type='qemu'");
	check_lacks(xml, "type='kvm'", "user: kvm=false has no type='kvm'");
	check_has(xml, "<model fallback='forbid'>Nehalem</model>",
		  "user: an x86-64-v2 CPU model (not qemu64)");
	check_lacks(xml, "host-passthrough", "user: no host-passthrough");
	check_has(xml, "xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'",
		  "user: declares the qemu namespace");
	check_has(xml, "<name>berth-i1-alice-devbox</name>", "user: domain name");
	check_has(xml, "<uuid>6f1c2a4e-8d0b-4c57-9e3a-2b7d5f60a1c9</uuid>",
		  "user: the UUID");
	check_has(xml, "<berth:owner>alice</berth:owner>", "user: owner in metadata");
	check_has(xml, "<berth:name>devbox</berth:name>", "user: name in metadata");
	check_has(xml, "<memory unit='KiB'>524288</memory>",
		  "user: 512 MiB of memory as 524288 KiB");
	check_has(xml, "<vcpu>2</vcpu>", "user: vcpus");
	check(!strstr(xml, "<cputune>"), "user: no CPU weight when the host has none");
	check(!strstr(xml, "<blkiotune>") && !strstr(xml, "<memtune>"),
	      "user: no I/O weight or memory soft limit when the host has none");
	check_has(xml, "<kernel>/var/lib/berth/images/tiny/vmlinuz</kernel>",
		  "user: kernel");
	check_has(xml, "<initrd>/var/lib/berth/images/tiny/initrd.img</initrd>",
		  "user: initrd");
	check_has(xml, "<cmdline>console=ttyS0 root=/dev/vda rw</cmdline>",
		  "user: cmdline");
	check_has(xml, "<disk type='file' device='disk'>\n"
		       "      <driver name='qemu' type='qcow2' discard='unmap'/>\n"
		       "      <source file='/var/lib/berth/volumes/m-1.qcow2'/>\n"
		       "      <target dev='vda' bus='virtio'/>",
		  "user: root disk: file, qcow2, path, vda");
	check_has(xml, "<driver name='qemu' type='raw'/>\n"
		       "      <source file='/var/lib/berth/machines/1/seed.iso'/>\n"
		       "      <target dev='vdb' bus='virtio'/>\n"
		       "      <readonly/>",
		  "user: seed as a raw read-only vdb");
	check_has(xml, "<log file='/var/lib/berth/machines/1/console.log' append='on'/>",
		  "user: serial console logged");
	check_has(xml, "<qemu:commandline>", "user: has a qemu:commandline");
	check_has(xml, "hostfwd=tcp:127.0.0.1:40022-:22",
		  "user: loopback forward of the SSH port to :22");
	check_has(xml, "mac=52:54:00:12:34:56'", "user: the MAC on the QEMU NIC");
	check_lacks(xml, "<interface", "user: no libvirt <interface>");
	check_has(xml, "</domain>\n", "user: document closed");
	check_wellformed(xml, "user: well-formed (xmllint)");
	check_schema(xml, "user: valid per libvirt's domain schema");
	free(xml);

	s.kvm = true;
	xml = render(&s, &rc, &e);
	check(rc == 0, "user kvm: renders");
	check_has(xml, "<domain type='kvm'", "user kvm: kvm=true gives type='kvm'");
	check_lacks(xml, "type='qemu'", "user kvm: no type='qemu'");
	free(xml);

	/* Optional parts left out. */
	s = spec_user();
	s.initrd = NULL;
	s.cmdline = NULL;
	s.seed_path = NULL;
	s.console_log = NULL;
	xml = render(&s, &rc, &e);
	check(rc == 0, "user minimal: renders without initrd, cmdline, seed, log");
	check_lacks(xml, "<initrd>", "user minimal: no <initrd>");
	check_has(xml, "<cmdline></cmdline>", "user minimal: empty cmdline");
	check_lacks(xml, "vdb", "user minimal: no seed disk");
	check_lacks(xml, "<log ", "user minimal: no console log");
	check_wellformed(xml, "user minimal: well-formed (xmllint)");
	free(xml);

	/* No kernel: firmware boot from the disk's own boot loader. */
	for (int k = 0; k < 2; k++) {
		s = spec_user();
		s.kernel = k ? "" : NULL;
		xml = render(&s, &rc, &e);
		check(rc == 0, "firmware (kernel %s): renders", k ? "\"\"" : "NULL");
		check_has(xml, "<boot dev='hd'/>", "firmware: boots from the disk");
		check_lacks(xml, "<kernel>", "firmware: no <kernel>");
		check_lacks(xml, "<initrd>", "firmware: no <initrd>, even when one is set");
		check_lacks(xml, "<cmdline>", "firmware: no <cmdline>");
		check_wellformed(xml, "firmware: well-formed (xmllint)");
		free(xml);
	}
	s = spec_user();
	xml = render(&s, &rc, &e);
	check_lacks(xml, "<boot dev=", "direct boot: no <boot dev>");
	free(xml);

	s = spec_user();
	s.initrd = "";
	xml = render(&s, &rc, &e);
	check(rc == 0 && strstr(xml, "<initrd>") == NULL,
	      "user: empty initrd gives no <initrd>");
	free(xml);

	/* A block device root disk. */
	s = spec_user();
	s.disk_block = true;
	s.disk_path = "/dev/berth/m-1";
	s.disk_format = "raw";
	xml = render(&s, &rc, &e);
	check(rc == 0, "block: renders");
	check_has(xml, "<disk type='block' device='disk'>\n"
		       "      <driver name='qemu' type='raw' discard='unmap' cache='none' io='native'/>\n"
		       "      <source dev='/dev/berth/m-1'/>",
		  "block: disk type='block', raw, no host cache, source dev");
	free(xml);

	/* Memory is rounded down to KiB, never up. */
	s = spec_user();
	s.memory = (1ULL << 30) + 1023;
	xml = render(&s, &rc, &e);
	check_has(xml, "<memory unit='KiB'>1048576</memory>",
		  "memory: 1 GiB + 1023 bytes is 1048576 KiB");
	free(xml);
}

static void test_routed(void)
{
	struct domain_spec s = spec_user();
	struct err e;
	char *xml;
	int rc;

	s.network = "routed";
	s.tap = "bt1a2b-7";
	s.ssh_port = 0;  /* not needed when routed */
	xml = render(&s, &rc, &e);
	if (!check(rc == 0 && !err_isset(&e), "routed: renders without an SSH port"))
		diag("rc %d: %s", rc, e.msg);
	check_has(xml, "<interface type='ethernet'>\n"
		       "      <mac address='52:54:00:12:34:56'/>\n"
		       "      <target dev='bt1a2b-7' managed='no'/>\n"
		       "      <model type='virtio'/>\n"
		       "    </interface>",
		  "routed: the machine's own tap (not managed by libvirt), its MAC, virtio");
	check_lacks(xml, "qemu:commandline", "routed: no qemu:commandline");
	check_lacks(xml, "hostfwd", "routed: no hostfwd");
	check_has(xml, "<domain type='qemu'", "routed: type='qemu' with kvm=false");
	check_wellformed(xml, "routed: well-formed (xmllint)");
	check_schema(xml, "routed: valid per libvirt's domain schema");
	free(xml);
	s.tap = NULL;
	xml = render(&s, &rc, &e);
	check(rc < 0 && strstr(e.msg, "no tap"), "routed: refused without a tap");
	free(xml);
}

static void test_escaping(void)
{
	struct domain_spec s = spec_user();
	struct err e;
	char *xml;
	int rc;

	s.dom_name = "berth-i1-<a&b>";
	s.owner = "o'wn&er";
	s.name = "n\"am<e";
	s.kernel = "/k&k/vmlinuz<1>";
	s.initrd = "/i'i/initrd";
	s.cmdline = "console=ttyS0 a=\"x y\" b='1' c&d <e>";
	s.disk_path = "/tmp/a&b<c'd.qcow2";
	s.seed_path = "/tmp/s'e&e<d.iso";
	s.console_log = "/tmp/l'o&g>.log";
	xml = render(&s, &rc, &e);
	check(rc == 0, "escaping: renders");
	check_has(xml, "<name>berth-i1-&lt;a&amp;b&gt;</name>", "escaping: domain name");
	check_has(xml, "<berth:owner>o&apos;wn&amp;er</berth:owner>", "escaping: owner");
	check_has(xml, "<berth:name>n&quot;am&lt;e</berth:name>", "escaping: name");
	check_has(xml, "<kernel>/k&amp;k/vmlinuz&lt;1&gt;</kernel>", "escaping: kernel");
	check_has(xml, "<initrd>/i&apos;i/initrd</initrd>", "escaping: initrd");
	check_has(xml, "<cmdline>console=ttyS0 a=&quot;x y&quot; b=&apos;1&apos; "
		       "c&amp;d &lt;e&gt;</cmdline>", "escaping: cmdline");
	check_has(xml, "<source file='/tmp/a&amp;b&lt;c&apos;d.qcow2'/>",
		  "escaping: disk path in an attribute");
	check_has(xml, "<source file='/tmp/s&apos;e&amp;e&lt;d.iso'/>",
		  "escaping: seed path");
	check_has(xml, "<log file='/tmp/l&apos;o&amp;g&gt;.log'", "escaping: log path");
	check_lacks(xml, "a&b<c'd", "escaping: raw disk path absent");
	check_lacks(xml, "c&d <e>", "escaping: raw cmdline absent");
	check_wellformed(xml, "escaping: well-formed (xmllint)");
	free(xml);

	s = spec_user();
	s.network = "routed";
	s.tap = "t'<&>";
	xml = render(&s, &rc, &e);
	check_has(xml, "<target dev='t&apos;&lt;&amp;&gt;' managed='no'/>",
		  "escaping: tap name");
	check_wellformed(xml, "escaping routed: well-formed (xmllint)");
	free(xml);

	/* A control character cannot be escaped in XML 1.0: the spec must be
	 * refused, or the result still be well-formed. */
	s = spec_user();
	s.cmdline = "console=ttyS0 \x01";
	xml = render(&s, &rc, &e);
	if (rc < 0)
		check(err_isset(&e), "control character in cmdline: refused");
	else
		check_wellformed(xml, "control character in cmdline: refused or "
				 "well-formed XML");
	free(xml);
}

/* The screen: VNC listening nowhere (berth-desktop's connection comes
 * from virt_open_screen), only when asked. */
static void test_screen(void)
{
	struct domain_spec s = spec_user();
	struct err e;
	char *xml;
	int rc;

	xml = render(&s, &rc, &e);
	check_lacks(xml, "<graphics", "screen: none unless asked");
	free(xml);
	s.screen = true;
	xml = render(&s, &rc, &e);
	check(rc == 0, "screen: renders");
	check_has(xml, "<graphics type='vnc'>\n      <listen type='none'/>\n    </graphics>",
		  "screen: VNC that listens nowhere (-vnc none)");
	check_lacks(xml, "socket=", "screen: no socket file (QEMU could not bind one)");
	check_lacks(xml, "autoport", "screen: no TCP port");
	check_wellformed(xml, "screen: well-formed (xmllint)");
	check_schema(xml, "screen: valid per libvirt's schema");
	free(xml);
}

/* QEMU runs as the machine's own uid: a static DAC label, relabel='no'. */
static void test_label(void)
{
	struct domain_spec s = spec_user();
	struct err e;
	char *xml;
	int rc;

	xml = render(&s, &rc, &e);
	check(rc == 0, "label: renders");
	check_has(xml, "  <seclabel type='static' model='dac' relabel='no'>\n"
		       "    <label>+2013265921:+107</label>\n  </seclabel>\n",
		  "label: static DAC label +UID:+GID, libvirt relabels nothing");
	check_lacks(xml, "type='dynamic'", "label: no dynamic label (libvirt's default user)");
	check_schema(xml, "label: valid per libvirt's schema");
	free(xml);
	s.kvm = true;
	xml = render(&s, &rc, &e);
	check_has(xml, "<label>+2013265921:+107</label>", "label: the same under KVM");
	free(xml);
}

/* The start-up check: libvirt's capabilities, captured from libvirtd 9.0
 * with qemu.conf's user = "root" and with user = "libvirt-qemu", group =
 * "kvm" (tests/unit/data/libvirt/). */
static char *read_data(const char *file)
{
	char path[256];
	FILE *f;
	char *buf = NULL;
	size_t len = 0;

	snprintf(path, sizeof(path), "tests/unit/data/libvirt/%s", file);
	f = fopen(path, "re");
	if (!f)
		return NULL;
	buf = calloc(1, 1 << 20);
	if (buf)
		len = fread(buf, 1, (1 << 20) - 1, f);
	fclose(f);
	if (buf)
		buf[len] = '\0';
	return buf;
}

/* TEXT with the first FROM replaced by TO (malloc'd). */
static char *replace(const char *text, const char *from, const char *to)
{
	const char *at = strstr(text, from);
	struct buf b = BUF_INIT;

	if (!at)
		return strdup(text);
	buf_add(&b, text, (size_t)(at - text));
	buf_adds(&b, to);
	buf_adds(&b, at + strlen(from));
	return buf_detach(&b);
}

static void test_caps(void)
{
	char *root = read_data("capabilities-root.xml");
	char *unpriv = read_data("capabilities-unprivileged.xml");
	char *x;
	struct err e;

	if (!check(root && unpriv, "caps: captured capabilities read")) {
		free(root);
		free(unpriv);
		return;
	}
	err_clear(&e);
	check(virt_caps_check(unpriv, &e) == 0 && !err_isset(&e),
	      "caps: user = libvirt-qemu, group = kvm (+64055:+107): accepted");
	err_clear(&e);
	if (!check(virt_caps_check(root, &e) == -1 && e.status == 400 &&
		   strcmp(e.code, "qemu_privileged") == 0, "caps: user = root (+0:+0): refused"))
		diag("status %d code %s: %s", e.status, e.code, e.msg);
	check(strstr(e.msg, "/etc/libvirt/qemu.conf") && strstr(e.msg, "user = \"root\"") &&
	      strstr(e.msg, "runs QEMU as root"),
	      "caps: the refusal names /etc/libvirt/qemu.conf and user = \"root\"");
	diag("%s", e.msg);
	/* Group root alone is a privilege too (root's group owns much). */
	x = replace(unpriv, "<baselabel type='qemu'>+64055:+107", "<baselabel type='qemu'>+64055:+0");
	err_clear(&e);
	check(virt_caps_check(x, &e) == -1 && strstr(e.msg, "group root"),
	      "caps: group = root (+64055:+0): refused, says group root");
	free(x);
	/* Only the kvm type's label root: still refused (every label counts). */
	x = replace(unpriv, "<baselabel type='kvm'>+64055:+107", "<baselabel type='kvm'>+0:+0");
	err_clear(&e);
	check(virt_caps_check(x, &e) == -1, "caps: type kvm's label root: refused");
	free(x);
	/* No DAC model: cannot tell, refused. */
	x = replace(unpriv, "<model>dac</model>", "<model>none</model>");
	err_clear(&e);
	check(virt_caps_check(x, &e) == -1 && strstr(e.msg, "cannot be told"),
	      "caps: no DAC security model: refused (cannot tell)");
	free(x);
	err_clear(&e);
	check(virt_caps_check("<capabilities/>", &e) == -1, "caps: empty capabilities: refused");
	free(root);
	free(unpriv);
}

/* /proc/PID/status of the two QEMUs those libvirtds started. */
static void test_proc_creds(void)
{
	char *root = read_data("qemu-status-root.txt");
	char *unpriv = read_data("qemu-status-unprivileged.txt");
	struct proc_creds pc;

	if (!check(root && unpriv, "creds: captured /proc status read")) {
		free(root);
		free(unpriv);
		return;
	}
	check(virt_proc_creds_parse(unpriv, &pc) == 0 && pc.uid_min == 2013265921 &&
	      pc.uid_max == 2013265921 && pc.gid_min == 107 && pc.gid_max == 107 &&
	      pc.cap_eff == 0, "creds: unprivileged QEMU: uid 2013265921, gid 107, CapEff 0");
	check(virt_proc_creds_parse(root, &pc) == 0 && pc.uid_min == 0 && pc.gid_min == 0 &&
	      pc.cap_eff == 0x1fffeffffffULL, "creds: QEMU as root: uid 0, CapEff 1fffeffffff");
	check(virt_proc_creds_parse("Name:\tqemu\nUid:\t5\t5\n", &pc) == -1,
	      "creds: truncated status: -1");
	{
		/* One uid of the four root's (a saved set-uid, say): uid_min 0. */
		char *x = replace(unpriv, "Uid:\t2013265921\t2013265921\t2013265921",
				  "Uid:\t2013265921\t2013265921\t0");
		check(virt_proc_creds_parse(x, &pc) == 0 && pc.uid_min == 0 &&
		      pc.uid_max == 2013265921, "creds: a saved uid 0 shows in uid_min");
		free(x);
	}
	free(root);
	free(unpriv);
}

static void refused(const struct domain_spec *s, const char *what)
{
	struct err e;
	char *xml;
	int rc;

	xml = render(s, &rc, &e);
	if (!check(rc == -1 && err_isset(&e) && e.msg[0] != '\0' &&
		   strstr(e.msg, s->dom_name) != NULL,
		   "invalid: %s: -1, error names the domain", what)) {
		diag("rc %d, status %d, code '%s', msg '%s'", rc, e.status, e.code, e.msg);
		if (rc == 0)
			diag("xml: %s", xml);
	}
	free(xml);
}

static void test_invalid(void)
{
	struct domain_spec s;

	s = spec_user();
	s.vcpus = 0;
	refused(&s, "vcpus 0");
	s = spec_user();
	s.vcpus = -1;
	refused(&s, "vcpus -1");
	s = spec_user();
	s.memory = 1023ULL << 10;
	refused(&s, "memory under 1 MiB");
	s = spec_user();
	s.disk_path = NULL;
	refused(&s, "no disk path");
	s = spec_user();
	s.ssh_port = 0;
	refused(&s, "network user without an SSH port");
	s = spec_user();
	s.ssh_port = 65536;
	refused(&s, "network user with SSH port 65536");
	s = spec_user();
	s.ssh_port = -22;
	refused(&s, "network user with SSH port -22");
	/* Neither "user" nor "nat": a domain without any network would be
	 * unreachable. */
	s = spec_user();
	s.network = "bridge";
	refused(&s, "network 'bridge' (neither user nor nat)");
	s = spec_user();
	s.qemu_uid = 0;
	refused(&s, "QEMU uid 0 (root)");
	s = spec_user();
	s.qemu_gid = 0;
	refused(&s, "QEMU gid 0 (root's group)");

	{
		/* The first error is kept: a set error is not overwritten. */
		struct buf b = BUF_INIT;
		struct err e;
		err_clear(&e);
		err_set(&e, 409, "earlier", "the first error");
		s = spec_user();
		s.vcpus = 0;
		check(virt_domain_xml(&s, &b, &e) == -1 &&
		      strcmp(e.code, "earlier") == 0,
		      "invalid: an error already set is kept");
		buf_free(&b);
		/* E may be NULL. */
		check(virt_domain_xml(&s, &b, NULL) == -1,
		      "invalid: NULL error pointer is allowed");
		buf_free(&b);
	}
}

/* The clipboard: the SPICE agent's virtio-serial port on a UNIX socket
 * (berth-desktop), only when asked. */
static void test_agent(void)
{
	struct domain_spec s = spec_user();
	struct err e;
	char *xml;
	int rc;

	xml = render(&s, &rc, &e);
	check_lacks(xml, "<channel", "agent: none without a socket");
	free(xml);
	s.agent_socket = "/var/lib/berth/machines/1/agent.sock";
	xml = render(&s, &rc, &e);
	check(rc == 0, "agent: renders");
	check_has(xml, "<channel type='unix'>\n      <source mode='bind' "
		  "path='/var/lib/berth/machines/1/agent.sock'/>\n      <target type='virtio' "
		  "name='com.redhat.spice.0'/>\n    </channel>", "agent: the channel on the socket");
	check_lacks(xml, "qemu-vdagent", "agent: not QEMU's own vdagent (it blocks save)");
	check_wellformed(xml, "agent: well-formed (xmllint)");
	check_schema(xml, "agent: valid per libvirt's schema");
	free(xml);
	s.agent_socket = "/tmp/a'g&<.sock";
	xml = render(&s, &rc, &e);
	check_has(xml, "path='/tmp/a&apos;g&amp;&lt;.sock'", "agent: socket path escaped");
	free(xml);
	s.agent_socket = "/tmp/a\001.sock";
	refused(&s, "agent socket with a control character");
}

/* A CPU weight, when hostd found a cpu controller: in <cputune>. */
static void test_cpu_shares(void)
{
	struct domain_spec s = spec_user();
	struct buf b = BUF_INIT;
	struct err e = { 0 };

	s.cpu_shares = 2048;
	check(virt_domain_xml(&s, &b, &e) == 0 &&
	      strstr(buf_str(&b), "  <cputune>\n    <shares>2048</shares>\n  </cputune>\n"),
	      "cpu_shares: <cputune><shares>2048</shares>");
	buf_free(&b);
}

/* I/O weight and memory soft limit, when hostd found their controllers. */
static void test_io_memory_weights(void)
{
	struct domain_spec s = spec_user();
	struct buf b = BUF_INIT;
	struct err e = { 0 };

	s.io_weight = 200;
	s.memory_soft = 768ull << 20;
	check(virt_domain_xml(&s, &b, &e) == 0, "weights: the XML is made");
	check_has(buf_str(&b), "  <blkiotune>\n    <weight>200</weight>\n  </blkiotune>\n",
		  "io_weight: <blkiotune><weight>200</weight>");
	check_has(buf_str(&b), "  <memtune>\n    <soft_limit unit='KiB'>786432</soft_limit>\n  </memtune>\n",
		  "memory_soft: <memtune><soft_limit> in KiB");
	buf_free(&b);
}

int main(void)
{
	test_cpu_shares();
	test_io_memory_weights();
	test_user();
	test_routed();
	test_escaping();
	test_screen();
	test_label();
	test_caps();
	test_proc_creds();
	test_agent();
	test_invalid();
	return tap_done("test_domain_xml");
}
