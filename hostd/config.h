/* hostd's configuration: a table of keys (STYLE.md #10).  Read from
 * STATE/berth.conf when present, or the file given with --config.
 * Format: `key = value` lines, `#` comments.  Every error names file:line
 * and the bad value. */
#ifndef BERTH_CONFIG_H
#define BERTH_CONFIG_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

struct config {
	char state_dir[PATH_MAX];
	char storage[32];              /* storage backend: "qcow2" or "lvm-thin" */
	char storage_location[PATH_MAX]; /* qcow2: directory ("" = STATE/volumes);
					    lvm-thin: VG/POOL */
	int max_fill;                  /* lvm-thin: no creation above this % use */
	char network[16];              /* "routed" (a tap each, hostd/net.h) or "user"
					  (QEMU's user-mode stack, a fallback) */
	char guest_network[20];        /* routed: the machines' IPv4 network (CIDR) */
	char dns_upstream[256];        /* routed: resolvers berth's forwards to ("" =
					  /etc/resolv.conf's) */
	char egress_default[4096];     /* a new machine's egress policy (hostd/egress.h) */
	char egress_closed[1024];      /* networks closed to every guest (CIDRs) */
	char hypervisor[16];           /* "auto", "kvm" or "tcg" */
	char libvirt_uri[128];
	int qemu_uid_base;             /* machine N's QEMU runs as uid base + N (its
					  qemu_index), never a user's */
	char qemu_group[64];           /* and as this group (kvm: it opens /dev/kvm) */
	bool allow_root_qemu;          /* development only: start on a libvirt whose
					  qemu.conf says user = "root" */
	char recipes_dir[PATH_MAX];    /* "" = next to the binary */
	char cache_dir[PATH_MAX];      /* downloaded packages for image recipes */
	char log_level[16];
	char sshgw_user[64];           /* local user berth-sshgw runs as ("" = none) */
	char desktop_user[64];         /* local user berth-desktop runs as ("" = none) */
	char web_user[64];             /* local user berth-web runs as ("" = none) */
	char currency[16];             /* what prices are in (a label) */
	char price_vcpu_hour[32];      /* per vCPU-hour while running (decimal) */
	char price_memory_gib_hour[32]; /* per GiB-hour of memory while running */
	char price_storage_gib_month[32]; /* per GiB-month (730 h) allocated, always */
	int stop_timeout_s;            /* ACPI shutdown, then force */
	int boot_timeout_s;            /* start --wait gives up after this */
	int max_vcpus;
	uint64_t min_memory, max_memory; /* bytes */
	uint64_t max_disk;             /* bytes */
	/* Per-user quotas (hostd/quota.h; root exempt; 0: none). */
	int max_machines;
	int max_running_vcpus;
	uint64_t max_running_memory;   /* bytes */
	uint64_t max_total_disk;       /* bytes: the machines' virtual disks */
	int max_checkpoints;           /* per machine */
	int max_memory_checkpoints;
	int max_operations;            /* requests changing machines at once */
	int max_exports;               /* exports at once */
	int max_execs;                 /* commands running through the API at once */
	uint64_t max_body;             /* largest API request body, bytes */
	int api_max_connections;       /* the socket's connections at once, everyone's */
	int api_max_connections_per_user; /* a user's (not root's or the gateway's) */
	int api_reserved_connections;  /* of api_max_connections, kept for root and the
					  gateway user */
	int64_t api_head_timeout_s;    /* a connection's request head must be complete
					  this long after its accept or last answer */
	int64_t api_send_timeout_s;    /* a streamed answer (an export) whose client reads
					  nothing this long is dropped */
	int max_host_exports;          /* exports at once, all users (each compresses on every CPU) */
	bool suspend_compress;         /* suspend: hostd stores the memory zstd-compressed
					  (else libvirt's raw managed save) */
	int suspend_compress_level;    /* its zstd level: -10 (zstd --fast=10) to 19 */
	int64_t idle_timeout_s;        /* idle policy: a running machine quiet this long is
					  suspended (seconds; -1 = never); per machine too */
	int idle_cpu_percent;          /* quiet: its vCPUs used less than this % of one */
	int64_t idle_check_s;          /* how often the policy looks */
	/* berth-web's (it asks hostd for them: GET /v1/web/settings). */
	char http_listen[80];          /* dashboard + API over HTTP: "ADDR:PORT" ("" = off) */
	char tls_cert[PATH_MAX];       /* PEM files: HTTPS when both are set */
	char tls_key[PATH_MAX];
	char web_dir[PATH_MAX];        /* the dashboard's files ("" = next to the binary) */
	char desktop_url[256];         /* where berth-desktop serves browsers */
	int desktop_token_ttl_s;       /* a desktop token must be used within this */
	/* The credential broker (berth-web's, on the guests' gateway; hostd/
	 * secrets.h): its port (0: off), the CA file it trusts for upstreams
	 * ("" = the system's store), how long an upstream may stay silent, the
	 * largest request body it forwards. */
	int broker_port;
	char broker_ca_file[PATH_MAX];
	int64_t broker_timeout_s;
	uint64_t broker_max_body;
	/* Networks the broker may connect to although they are closed
	 * (loopback, link-local, private, the host's own: common/netpolicy.h),
	 * CIDRs; calls a machine and a user's machines may have open at once,
	 * and webctl.sock's connections (WEBCTL_MAX_CONNS) kept from the
	 * broker's calls for previews (hostd/webctl.h). */
	char broker_allow[1024];
	int broker_max_calls_per_machine;
	int broker_max_calls_per_user;
	int webctl_reserved_connections;
	/* Previews (hostd/preview.h): berth-web serves port P of OWNER's
	 * machine NAME at P-NAME-OWNER.preview_domain. */
	char preview_domain[200];
	/* Lifecycle-event webhooks (hostd/webhooks.h): networks they may post
	 * to although closed (as broker_allow), CIDRs; the first retry's wait
	 * (doubling after each), and the tries in all. */
	char webhook_allow[1024];
	int64_t webhook_retry_s;
	int webhook_attempts;
};

#define HTTP_LISTEN_DEFAULT "127.0.0.1:8080"
/* The last uid a machine's QEMU may get: below systemd's foreign range
 * (0x7FFE0000). */
#define QEMU_UID_LAST 0x7FFDFFFF

/* Defaults for STATE_DIR. */
void config_defaults(struct config *c, const char *state_dir);
/* Apply FILE over C.  A missing file is an error only when REQUIRED. */
int config_load(struct config *c, const char *file, int required, struct err *e);
/* Apply the LEN bytes of TEXT (a config file's content, named FILE in the
 * errors) over C, line by line with config_load's own reader (for the
 * fuzz harness: no file). */
int config_parse(struct config *c, const char *text, size_t len, const char *file,
		 struct err *e);
/* The settings that go together: http_listen ADDR:PORT (numeric, or ""),
 * tls_cert and tls_key both or neither, and HTTPS unless http_listen is
 * loopback; broker_allow and webhook_allow lists of CIDRs.  400 "invalid_config" naming the value. */
int config_check(const struct config *c, struct err *e);
/* Apply one `key = value` (for tests and --set).  WHERE names the origin. */
int config_set(struct config *c, const char *key, const char *value,
	       const char *where, struct err *e);

#endif
