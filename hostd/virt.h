/* hostd's glue to libvirt: one connection (reopened when libvirtd
 * restarts), hypervisor detection, domain XML and the few domain
 * operations hostd needs.  Domains are addressed by UUID (the machine id).
 * Only hostd links this: a read-write libvirt connection is root. */
#ifndef BERTH_VIRT_H
#define BERTH_VIRT_H

#include <stdbool.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/err.h"

struct virt;

enum vstate {
	VS_MISSING,    /* no such domain */
	VS_STOPPED,    /* shut off, no saved memory */
	VS_SUSPENDED,  /* shut off with a managed save image (memory on disk) */
	VS_RUNNING,
	VS_PAUSED,
	VS_BUSY,       /* starting up, shutting down, crashed: transient */
};

/* berth's machine state name for S ("stopped", "running", ...). */
const char *vstate_name(enum vstate s);

struct domain_spec {
	const char *dom_name;      /* libvirt name: berth-INSTANCE-OWNER-NAME */
	const char *uuid;
	/* The VM generation id: NULL a new one (<genid/>: libvirt makes one
	 * at each start and restore); "" none; else this value (a restore
	 * into the same machine: libvirt refuses another). */
	const char *genid;
	const char *owner, *name;  /* recorded in <metadata> */
	bool kvm;                  /* type='kvm' (else 'qemu': TCG) */
	int vcpus;
	int io_weight;             /* its I/O weight (blkiotune, 100 to 1000), 0: none */
	uint64_t memory_soft;      /* bytes: reclaimed first above this (memtune soft_limit), 0: none */
	int cpu_shares;            /* its weight against other machines when the
				      host's CPUs are contended (0: none set) */
	uint64_t memory;           /* bytes */
	const char *kernel, *initrd, *cmdline; /* direct boot; no kernel: BIOS */
	const char *disk_path, *disk_format;
	bool disk_block;
	const char *seed_path;     /* NoCloud ISO, attached read-only as vdb */
	const char *mac;
	const char *network;       /* "routed" or "user" */
	const char *tap;           /* "routed": the machine's tap (hostd made it) */
	int ssh_port;              /* "user": 127.0.0.1:PORT -> guest :22 */
	const char *console_log;   /* serial console is logged here */
	bool screen;               /* the screen: VNC listening nowhere, reached only
				      through virt_open_screen (no socket file) */
	const char *agent_socket;  /* the clipboard: a virtio-serial port named
				      com.redhat.spice.0 (the vdagent's), bound
				      to this UNIX socket (NULL: none) */
	unsigned qemu_uid, qemu_gid; /* QEMU runs as this uid and gid: a static DAC
				      label with relabel='no' (libvirt chowns
				      nothing, hostd sets files' owners).  Both
				      must be non-zero: root is refused. */
};

/* Render the domain XML for S into OUT.  Pure: no libvirt call.  Every
 * value is XML-escaped.  Returns 0, or -1 with E for an invalid spec. */
int virt_domain_xml(const struct domain_spec *s, struct buf *out, struct err *e);

/* Called from libvirt's event thread when a domain of ours changes state.
 * UUID is the domain's; NEW is the state libvirt reports. */
typedef void (*virt_event_fn)(const char *uuid, enum vstate now, void *data);

/* Connect to URI.  HYPERVISOR is "auto", "kvm" or "tcg"; "auto" picks kvm
 * when /dev/kvm works and libvirt offers it.  Refuses (400
 * "qemu_privileged") a libvirt configured to run QEMU as root
 * (virt_caps_check) unless ALLOW_ROOT_QEMU, which is logged loudly; with it,
 * a QEMU found privileged after a start is logged, not refused.  Starts
 * libvirt's event loop thread; FN (may be NULL) gets lifecycle events.
 * NULL with E set. */
struct virt *virt_open(const char *uri, const char *hypervisor, bool allow_root_qemu,
		       virt_event_fn fn, void *data, struct err *e);

/* Whether libvirt's capabilities XML CAPS says QEMU runs unprivileged by
 * default: every base label of its DAC security model ("+UID:+GID" for
 * domain types qemu and kvm, from qemu.conf's user and group) has a uid
 * and a gid other than 0.  0 when so; -1 with E (400 "qemu_privileged",
 * naming /etc/libvirt/qemu.conf) when one is root's or CAPS has no DAC base
 * label to tell.  hostd's domains run as their own uid whatever this says
 * (their static label), but libvirt's other QEMU processes (its capability
 * probes) and other domains run as this default.  Pure: no libvirt call. */
int virt_caps_check(const char *caps, struct err *e);

/* What /proc/PID/status text STATUS says of a process: its real,
 * effective, saved and filesystem uids (the largest and smallest), its
 * gid, and its effective capabilities.  0, or -1 when a field is missing.
 * Pure. */
struct proc_creds {
	unsigned uid_min, uid_max;  /* over the four uids of the Uid: line */
	unsigned gid_min, gid_max;
	uint64_t cap_eff;
};
int virt_proc_creds_parse(const char *status, struct proc_creds *out);
/* The credentials of the QEMU process of running domain UUID (its pid from
 * libvirt's pid file in /run/libvirt/qemu, qemu:///system's), into *OUT,
 * its pid into *PID (may be NULL).  -1 with E when it cannot be read. */
int virt_qemu_creds(struct virt *v, const char *uuid, long *pid, struct proc_creds *out,
		    struct err *e);
void virt_close(struct virt *v);

bool virt_kvm(const struct virt *v);
/* "kvm" or "tcg". */
const char *virt_hypervisor(const struct virt *v);
/* Why machines run under TCG ("" under KVM). */
const char *virt_why_tcg(const struct virt *v);
/* libvirt's version as "9.0.0". */
const char *virt_version(const struct virt *v);

/* Define (or redefine, same UUID) a persistent domain from XML. */
int virt_define(struct virt *v, const char *xml, struct err *e);
int virt_state(struct virt *v, const char *uuid, enum vstate *out, struct err *e);
/* virt_state, and for a shut-off domain *RAN: whether libvirt says it ran
 * since it last stopped by a save (it was shut down, destroyed, crashed...),
 * which makes a memory image saved before stale.  False when it stopped by
 * a save or a failed start, or libvirt cannot tell (after a restart of
 * libvirtd).  A missing domain is VS_MISSING, not an error. */
int virt_state_ran(struct virt *v, const char *uuid, enum vstate *out, bool *ran,
		   struct err *e);
/* The CPU time UUID's vCPUs have used, summed (ns): what its guest ran,
 * not QEMU's own threads.  The domain must be running. */
int virt_vcpu_time(struct virt *v, const char *uuid, uint64_t *ns, struct err *e);
/* Start; restores from the managed save image when there is one.  Every
 * start and restore below checks the QEMU process it made: one that runs
 * as uid or gid 0 or has effective capabilities is destroyed and the call
 * fails (500 "qemu_privileged"), unless virt_open allowed root. */
int virt_start(struct virt *v, const char *uuid, struct err *e);
/* ACPI shutdown, waiting up to TIMEOUT_S, then force off.  *FORCED tells
 * which happened (may be NULL). */
int virt_shutdown(struct virt *v, const char *uuid, int timeout_s,
		  bool *forced, struct err *e);
int virt_destroy(struct virt *v, const char *uuid, struct err *e);
/* Save memory to disk and stop (libvirt managed save). */
int virt_managed_save(struct virt *v, const char *uuid, struct err *e);
/* Save memory to the file PATH and stop (virDomainSaveFlags): the domain
 * stays defined and has no managed save image; PATH is a libvirt save image
 * (libvirt's configured format) that virt_restore starts it from.  When
 * this fails the guest runs on and PATH is not a complete image. */
int virt_save(struct virt *v, const char *uuid, const char *path, struct err *e);
/* Size of the managed save image of the domain named DOM_NAME, or -1 when
 * it has none or it is not where libvirt's system driver keeps them. */
int64_t virt_managed_save_bytes(struct virt *v, const char *dom_name);
/* Destroy if running and undefine with its managed save image; a missing
 * domain is success. */
int virt_remove(struct virt *v, const char *uuid, struct err *e);
/* The domain XML in UUID's managed save image, into *XML (malloc'd, the
 * caller frees it). */
int virt_saved_xml(struct virt *v, const char *uuid, char **xml, struct err *e);
/* Replace the domain XML in UUID's managed save image by XML (which must be
 * ABI-compatible with it: same devices; paths, label, port may differ):
 * the start from it runs with XML. */
int virt_saved_define(struct virt *v, const char *uuid, const char *xml, struct err *e);
/* A descriptor connected to the running domain UUID's screen (its VNC
 * server, which listens nowhere else: libvirt hands QEMU the other end of
 * a socket pair), into *FD (close-on-exec; the caller closes it). */
int virt_open_screen(struct virt *v, const char *uuid, int *fd, struct err *e);

/* Whether domain XML (libvirt's, or a save image's) has the SPICE agent's
 * port (the clipboard channel; images saved before berth had it have
 * none). */
bool virt_xml_has_agent(const char *xml);
/* The <genid> value of domain XML (a libvirt's: a saved domain's) into
 * OUT (37 bytes); false when it has none. */
bool virt_xml_genid(const char *xml, char out[37]);
/* The domain XML stored in the save image at PATH, raw (libvirt's) or
 * zstd-compressed (hostd/zmem.c): *XML malloc'd, the caller frees it.  0,
 * or -1 with E (not a complete format-2 image, truncated, unreadable). */
int virt_image_xml(const char *path, char **xml, struct err *e);
/* Pause / unpause the guest's CPUs (virDomainSuspend/Resume). */
int virt_pause(struct virt *v, const char *uuid, struct err *e);
int virt_unpause(struct virt *v, const char *uuid, struct err *e);
/* Move the running domain's disk vda onto the qcow2 overlay NEW_PATH, which
 * the caller made with the current disk as its backing file: an external,
 * disk-only, atomic snapshot without libvirt metadata.  The old file is
 * frozen from then on. */
int virt_disk_snapshot(struct virt *v, const char *uuid, const char *new_path,
		       struct err *e);
/* The guest's memory saved to MEM_PATH, its disks untouched (an external
 * snapshot of memory alone).  libvirt pauses a running guest while it
 * writes and then lets it run on; a paused guest stays paused, which is how
 * a caller takes the disk's snapshot in the same instant.  MEM_PATH is a
 * libvirt save image: virt_restore starts a domain from it. */
int virt_memory_snapshot(struct virt *v, const char *uuid, const char *mem_path,
			 struct err *e);
/* Start a domain from the save image PATH, defined by XML (which must be
 * ABI-compatible with the saved one: same devices; paths, name, UUID may
 * differ).  The image is not consumed. */
int virt_restore(struct virt *v, const char *path, const char *xml, struct err *e);
/* virt_restore, with the guest's CPUs left paused (virt_unpause runs
 * them): the caller checks what it fed in before the guest runs. */
int virt_restore_paused(struct virt *v, const char *path, const char *xml, struct err *e);
/* Whether PATH is a complete libvirt save image: libvirt writes an image
 * under a "partial" magic and sets the real one once QEMU's state is all
 * in it. */
bool virt_save_image_complete(const char *path);
/* The domain XML stored in a libvirt save image, from HEAD, the image's
 * first LEN bytes.  0 with *XML set (malloc'd, the caller frees it); 1 when
 * LEN is too short, with *NEED the bytes the header and XML take; -1 with E
 * when HEAD is not a complete format-2 save image. */
int virt_save_image_xml(const void *head, size_t len, size_t *need, char **xml,
			struct err *e);
/* Write DST, a copy of the libvirt save image SRC whose domain XML is XML
 * (another machine's: name, UUID, disk, MAC), so that virt_restore(DST,
 * NULL) starts that machine with SRC's memory.  libvirt's own restore
 * refuses a different UUID (it is guest-visible ABI); a fork wants exactly
 * that.  Only libvirt 9's uncompressed format 2 is accepted: anything else
 * is refused, never guessed at. */
int virt_save_image_retarget(const char *src, const char *dst, const char *xml,
			     struct err *e);
/* The file the domain's vda uses now (the live definition when it runs),
 * into OUT.  1 when it has no file-backed vda. */
int virt_disk_path(struct virt *v, const char *uuid, char *out, size_t outlen,
		   struct err *e);

/* Call FN for each domain (defined or running) whose name starts with
 * PREFIX. */
int virt_list_prefix(struct virt *v, const char *prefix,
		     void (*fn)(const char *name, const char *uuid, void *data),
		     void *data, struct err *e);
#endif
