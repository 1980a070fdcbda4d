#include "hostd/config.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/daemon.h"
#include "common/log.h"
#include "common/netpolicy.h"
#include "common/util.h"
#include "hostd/webctl.h"
#include "common/banned.h"

enum ctype { C_STR, C_INT, C_SIZE, C_BOOL, C_DUR };

struct copt {
	const char *key;
	enum ctype type;
	size_t off;
	size_t len;            /* C_STR: field size */
	long min, max;         /* C_INT bounds; C_DUR: seconds, and min -1 allows "never" */
	const char *const *choices; /* C_STR: allowed values, or NULL */
};

static const char *const storages[] = { "qcow2", "lvm-thin", NULL };
static const char *const networks[] = { "routed", "user", NULL };
static const char *const hypervisors[] = { "auto", "kvm", "tcg", NULL };
static const char *const levels[] = { "error", "warn", "info", "debug", NULL };

#define STR(k, f, ch) { k, C_STR, offsetof(struct config, f), sizeof(((struct config *)0)->f), 0, 0, ch }
#define INT(k, f, lo, hi) { k, C_INT, offsetof(struct config, f), 0, lo, hi, NULL }
#define SIZE(k, f) { k, C_SIZE, offsetof(struct config, f), 0, 0, 0, NULL }
#define DUR(k, f, lo, hi) { k, C_DUR, offsetof(struct config, f), 0, lo, hi, NULL }
#define BOOL(k, f) { k, C_BOOL, offsetof(struct config, f), 0, 0, 0, NULL }

static const struct copt options[] = {
	STR("storage", storage, storages),
	STR("storage_location", storage_location, NULL),
	STR("network", network, networks),
	STR("guest_network", guest_network, NULL),
	STR("dns_upstream", dns_upstream, NULL),
	STR("egress_default", egress_default, NULL),
	STR("egress_closed", egress_closed, NULL),
	STR("hypervisor", hypervisor, hypervisors),
	STR("libvirt_uri", libvirt_uri, NULL),
	INT("qemu_uid_base", qemu_uid_base, 1000, QEMU_UID_LAST),
	STR("qemu_group", qemu_group, NULL),
	BOOL("allow_root_qemu", allow_root_qemu),
	STR("recipes_dir", recipes_dir, NULL),
	STR("cache_dir", cache_dir, NULL),
	STR("log_level", log_level, levels),
	STR("sshgw_user", sshgw_user, NULL),
	STR("desktop_user", desktop_user, NULL),
	STR("web_user", web_user, NULL),
	STR("currency", currency, NULL),
	STR("price_vcpu_hour", price_vcpu_hour, NULL),
	STR("price_memory_gib_hour", price_memory_gib_hour, NULL),
	STR("price_storage_gib_month", price_storage_gib_month, NULL),
	INT("stop_timeout", stop_timeout_s, 1, 3600),
	INT("boot_timeout", boot_timeout_s, 1, 3600),
	INT("max_vcpus", max_vcpus, 1, 1024),
	INT("lvm_max_fill", max_fill, 1, 100),
	SIZE("min_memory", min_memory),
	SIZE("max_memory", max_memory),
	SIZE("max_disk", max_disk),
	INT("max_machines", max_machines, 0, 1000000),
	INT("max_running_vcpus", max_running_vcpus, 0, 1000000),
	SIZE("max_running_memory", max_running_memory),
	SIZE("max_total_disk", max_total_disk),
	INT("max_checkpoints", max_checkpoints, 0, 100000),
	INT("max_memory_checkpoints", max_memory_checkpoints, 0, 100000),
	INT("max_operations", max_operations, 0, 10000),
	INT("max_exports", max_exports, 0, 10000),
	INT("max_execs", max_execs, 0, 10000),
	SIZE("max_body", max_body),
	INT("api_max_connections", api_max_connections, 16, 65536),
	INT("api_max_connections_per_user", api_max_connections_per_user, 1, 65536),
	INT("api_reserved_connections", api_reserved_connections, 1, 65535),
	DUR("api_head_timeout", api_head_timeout_s, 1, 3600),
	DUR("api_send_timeout", api_send_timeout_s, 1, 86400),
	INT("max_host_exports", max_host_exports, 1, 1024),
	BOOL("suspend_compress", suspend_compress),
	INT("suspend_compress_level", suspend_compress_level, -10, 19),
	DUR("idle_timeout", idle_timeout_s, -1, 366L * 86400),
	INT("idle_cpu_percent", idle_cpu_percent, 0, 100),
	DUR("idle_check_interval", idle_check_s, 1, 3600),
	STR("http_listen", http_listen, NULL),
	STR("tls_cert", tls_cert, NULL),
	STR("tls_key", tls_key, NULL),
	STR("web_dir", web_dir, NULL),
	STR("desktop_url", desktop_url, NULL),
	INT("desktop_token_ttl", desktop_token_ttl_s, 1, 3600),
	INT("broker_port", broker_port, 0, 65535),
	STR("broker_ca_file", broker_ca_file, NULL),
	DUR("broker_timeout", broker_timeout_s, 1, 86400),
	SIZE("broker_max_body", broker_max_body),
	STR("broker_allow", broker_allow, NULL),
	INT("broker_max_calls_per_machine", broker_max_calls_per_machine, 1, WEBCTL_MAX_CONNS),
	INT("broker_max_calls_per_user", broker_max_calls_per_user, 1, WEBCTL_MAX_CONNS),
	INT("webctl_reserved_connections", webctl_reserved_connections, 0, WEBCTL_MAX_CONNS - 1),
	STR("preview_domain", preview_domain, NULL),
	STR("webhook_allow", webhook_allow, NULL),
	DUR("webhook_retry", webhook_retry_s, 1, 3600),
	INT("webhook_attempts", webhook_attempts, 1, 20),
};

void config_defaults(struct config *c, const char *state_dir)
{
	memset(c, 0, sizeof(*c));
	snprintf(c->state_dir, sizeof(c->state_dir), "%s", state_dir);
	snprintf(c->storage, sizeof(c->storage), "qcow2");
	snprintf(c->network, sizeof(c->network), "routed");
	snprintf(c->guest_network, sizeof(c->guest_network), "10.87.0.0/16");
	snprintf(c->egress_default, sizeof(c->egress_default), "open");
	/* RFC 1918, shared address space (RFC 6598), IETF protocol
	 * assignments and benchmarking; loopback, link-local, multicast and
	 * the host's own networks are closed whatever this says. */
	snprintf(c->egress_closed, sizeof(c->egress_closed), "10.0.0.0/8,172.16.0.0/12,"
		 "192.168.0.0/16,100.64.0.0/10,192.0.0.0/24,198.18.0.0/15");
	snprintf(c->hypervisor, sizeof(c->hypervisor), "auto");
	snprintf(c->libvirt_uri, sizeof(c->libvirt_uri), "qemu:///system");
	/* 0x78000000: above what Debian, shadow and systemd hand out (users
	 * below 60000, subordinate ids of /etc/subuid from 100000 to
	 * SUB_UID_MAX 600100000, systemd-nspawn's container ranges up to
	 * 0x6FFFFFFF) and above sssd's default ID mapping (200000 to
	 * 2000200000); below systemd's foreign range (0x7FFE0000) and 2^31,
	 * so no tool reading uids as signed sees a negative one.  134 million
	 * machines fit (QEMU_UID_LAST). */
	c->qemu_uid_base = 0x78000000;
	snprintf(c->qemu_group, sizeof(c->qemu_group), "kvm");
	snprintf(c->cache_dir, sizeof(c->cache_dir), "/var/cache/berth");
	snprintf(c->log_level, sizeof(c->log_level), "info");
	snprintf(c->sshgw_user, sizeof(c->sshgw_user), "berth-sshgw");
	snprintf(c->desktop_user, sizeof(c->desktop_user), "berth-desktop");
	snprintf(c->web_user, sizeof(c->web_user), "berth-web");
	snprintf(c->desktop_url, sizeof(c->desktop_url), "http://127.0.0.1:6080");
	c->desktop_token_ttl_s = 60;
	/* Webhooks (hostd/webhooks.h): 5 s, 10 s, 20 s... 8 tries in all. */
	c->webhook_retry_s = 5;
	c->webhook_attempts = 8;
	/* A port below 1024, so that only root binds it (berth-web binds it
	 * before it drops to its user; a local user who took a port above
	 * 1023 while berth-web was down would be answered guests' calls, were
	 * it not for the output rule, hostd/net_rules.c), and that no service
	 * of /etc/services uses; model APIs'
	 * streams stay quiet a while (a long think), and requests carry
	 * images: Anthropic's API takes up to 32 MB. */
	c->broker_port = 948;
	c->broker_timeout_s = 300;
	c->broker_max_body = 32ULL << 20;
	/* A machine's agent streams a few answers at once (16 is more than
	 * any agent asks); a user's machines, 64 of webctl's 512 connections,
	 * which hold a thread of hostd's for each call; the broker's calls
	 * leave 64 for previews, their logins and berth-web's watch. */
	c->broker_max_calls_per_machine = 16;
	c->broker_max_calls_per_user = 64;
	c->webctl_reserved_connections = 64;
	/* Browsers and curl resolve every *.localhost name to loopback. */
	snprintf(c->preview_domain, sizeof(c->preview_domain), "localhost");
	/* Example prices, of the order of hosted offers'; set your own. */
	snprintf(c->currency, sizeof(c->currency), "USD");
	snprintf(c->price_vcpu_hour, sizeof(c->price_vcpu_hour), "0.02");
	snprintf(c->price_memory_gib_hour, sizeof(c->price_memory_gib_hour), "0.005");
	snprintf(c->price_storage_gib_month, sizeof(c->price_storage_gib_month), "0.10");
	c->stop_timeout_s = 30;
	c->boot_timeout_s = 180;
	c->max_vcpus = 64;
	c->min_memory = 64ULL << 20;
	c->max_memory = 256ULL << 30;
	c->max_disk = 16ULL << 40;
	/* A shared host's defaults: a user runs a few machines at once and
	 * keeps a few dozen; root (exempt) or berth.conf gives more. */
	c->max_machines = 20;
	c->max_running_vcpus = 16;
	c->max_running_memory = 32ULL << 30;
	c->max_total_disk = 1ULL << 40;
	c->max_checkpoints = 64;
	c->max_memory_checkpoints = 8;
	c->max_operations = 8;
	c->max_exports = 2;
	c->max_execs = 16;
	c->max_body = 64 << 10;
	/* A thread each (1 MiB of stack reserved, little used); a user's 32
	 * are many CLIs at once; the gateways open one per login. */
	c->api_max_connections = 1024;
	c->api_max_connections_per_user = 32;
	c->api_reserved_connections = 128;
	c->api_head_timeout_s = 10;
	c->api_send_timeout_s = 60;
	c->max_host_exports = 2;
	c->max_fill = 90;
	c->suspend_compress = true;
	/* zstd --fast=1: decompresses about twice as fast as level 1 (the
	 * wake waits on it), for an image about 13% larger (bench/wake.py). */
	c->suspend_compress_level = -1;
	c->idle_timeout_s = 15 * 60;
	c->idle_cpu_percent = 5;
	c->idle_check_s = 30;
	snprintf(c->http_listen, sizeof(c->http_listen), "%s", HTTP_LISTEN_DEFAULT);
}

int config_set(struct config *c, const char *key, const char *value,
	       const char *where, struct err *e)
{
	for (size_t i = 0; i < sizeof(options) / sizeof(options[0]); i++) {
		const struct copt *o = &options[i];
		char *field = (char *)c + o->off;
		if (strcmp(o->key, key) != 0)
			continue;
		switch (o->type) {
		case C_STR:
			if (o->choices) {
				size_t j;
				for (j = 0; o->choices[j]; j++)
					if (strcmp(o->choices[j], value) == 0)
						break;
				if (!o->choices[j])
					return err_set(e, 400, "invalid_config",
						       "%s: %s = '%s' is not one of the allowed values",
						       where, key, value);
			}
			if (strlen(value) >= o->len)
				return err_set(e, 400, "invalid_config",
					       "%s: %s = '%s' is longer than %zu bytes", where, key,
					       value, o->len - 1);
			snprintf(field, o->len, "%s", value);
			return 0;
		case C_INT: {
			char *end;
			errno = 0;
			long v = strtol(value, &end, 10);
			if (errno || *end || end == value || v < o->min || v > o->max)
				return err_set(e, 400, "invalid_config",
					       "%s: %s = '%s' is not a number from %ld to %ld",
					       where, key, value, o->min, o->max);
			*(int *)(void *)field = (int)v;
			return 0;
		}
		case C_SIZE: {
			uint64_t v;
			if (size_parse(value, 1, &v) < 0)
				return err_set(e, 400, "invalid_config",
					       "%s: %s = '%s' is not a size (e.g. 512M, 4G)",
					       where, key, value);
			*(uint64_t *)(void *)field = v;
			return 0;
		}
		case C_DUR: {
			int64_t v;
			if (duration_parse(value, &v) < 0 || (v < 0 && o->min >= 0) ||
			    (v >= 0 && (v < (o->min < 0 ? 1 : o->min) || v > o->max)))
				return err_set(e, 400, "invalid_config",
					       "%s: %s = '%s' is not a duration from %lds to %lds "
					       "(e.g. 90s, 15m, 2h%s)", where, key, value,
					       o->min < 0 ? 1 : o->min, o->max,
					       o->min < 0 ? ", or never" : "");
			*(int64_t *)(void *)field = v;
			return 0;
		}
		case C_BOOL: {
			static const char *const yes[] = { "true", "yes", "on", "1", NULL };
			static const char *const no[] = { "false", "no", "off", "0", NULL };
			for (size_t j = 0; yes[j]; j++) {
				if (strcmp(value, yes[j]) == 0 || strcmp(value, no[j]) == 0) {
					*(bool *)(void *)field = strcmp(value, yes[j]) == 0;
					return 0;
				}
			}
			return err_set(e, 400, "invalid_config",
				       "%s: %s = '%s' is not true or false", where, key, value);
		}
		}
	}
	if (!strcmp(key, "gateway_user"))
		return err_set(e, 400, "invalid_config", "%s: gateway_user is no more: the gateways "
			       "run as two users, sshgw_user (default berth-sshgw) and "
			       "desktop_user (default berth-desktop), each confined to its own "
			       "requests", where);
	return err_set(e, 400, "invalid_config", "%s: unknown key '%s'", where, key);
}

/* Whether S is a DNS name in lower case: labels of 1 to 63 of a-z, 0-9 and
 * '-' (not at either end), joined by dots, at most 190 characters (a
 * preview's label and a dot go before it). */
static bool preview_domain_valid(const char *s)
{
	size_t n = strlen(s), label = 0;

	if (n < 1 || n > 190 || s[0] == '.' || s[n - 1] == '.')
		return false;
	for (size_t i = 0; i <= n; i++) {
		char ch = s[i];
		if (ch == '.' || ch == '\0') {
			if (label == 0 || s[i - 1] == '-' || s[i - label] == '-')
				return false;
			label = 0;
		} else if ((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-') {
			if (++label > 63)
				return false;
		} else {
			return false;
		}
	}
	return true;
}

int config_check(const struct config *c, struct err *e)
{
	struct sockaddr_storage ss;
	socklen_t sslen;

	if (!preview_domain_valid(c->preview_domain))
		return err_set(e, 400, "invalid_config", "preview_domain = '%s' is not a DNS name "
			       "in lower case (labels of a-z, 0-9 and '-', separated by dots: "
			       "localhost, preview.example.com)", c->preview_domain);
	if (netpolicy_check_list("broker_allow", c->broker_allow, e) < 0)
		return -1;
	if (netpolicy_check_list("webhook_allow", c->webhook_allow, e) < 0)
		return -1;
	if (!c->http_listen[0])
		return 0;
	if (daemon_parse_listen(c->http_listen, &ss, &sslen) < 0)
		return err_set(e, 400, "invalid_config", "http_listen = '%s' is not ADDR:PORT with "
			       "a numeric address (127.0.0.1:8080, [::1]:8080, 0.0.0.0:443) and a "
			       "port from 1 to 65535", c->http_listen);
	if (!c->tls_cert[0] != !c->tls_key[0])
		return err_set(e, 400, "invalid_config", "HTTPS needs both tls_cert and tls_key "
			       "(only %s is set)", c->tls_cert[0] ? "tls_cert" : "tls_key");
	if (!c->tls_cert[0] && !daemon_addr_loopback(&ss))
		return err_set(e, 400, "invalid_config", "http_listen = %s is reachable from other "
			       "hosts: API tokens would cross the network in clear; set tls_cert "
			       "and tls_key, or listen on 127.0.0.1 (and reach it with ssh -L)",
			       c->http_listen);
	return 0;
}

static char *trim(char *s)
{
	char *end;

	while (*s == ' ' || *s == '\t')
		s++;
	end = s + strlen(s);
	while (end > s && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\n' ||
			   end[-1] == '\r'))
		*--end = '\0';
	return s;
}

/* The lines of F, named FILE in errors. */
static int config_read(struct config *c, FILE *f, const char *file, struct err *e)
{
	char *line = NULL, where[PATH_MAX + 32];
	size_t cap = 0;
	int lineno = 0, rc = 0;

	while (getline(&line, &cap, f) >= 0) {
		char *s = trim(line), *eq;
		lineno++;
		snprintf(where, sizeof(where), "%s:%d", file, lineno);
		if (*s == '\0' || *s == '#')
			continue;
		eq = strchr(s, '=');
		if (!eq) {
			rc = err_set(e, 400, "invalid_config",
				     "%s: expected 'key = value', got '%s'", where, s);
			break;
		}
		*eq = '\0';
		if (config_set(c, trim(s), trim(eq + 1), where, e) < 0) {
			rc = -1;
			break;
		}
	}
	if (rc == 0 && ferror(f))
		rc = err_errno(e, errno, "config %s: read", file);
	free(line);
	return rc;
}

int config_parse(struct config *c, const char *text, size_t len, const char *file,
		 struct err *e)
{
	FILE *f;
	int rc;

	if (len == 0)
		return 0;
	f = fmemopen((void *)text, len, "r");
	if (!f)
		return err_errno(e, errno, "config %s", file);
	rc = config_read(c, f, file, e);
	fclose(f);
	return rc;
}

int config_load(struct config *c, const char *file, int required, struct err *e)
{
	struct err oe = { 0 };
	int fd = file_open_trusted(file, &oe), rc;
	FILE *f;

	/* Not through a link, root's (or this daemon user's), writable by no
	 * one else: whoever can change it runs hostd's storage and network. */
	if (fd < 0) {
		if (errno == ENOENT && !required)
			return 0;
		return err_set(e, 400, "invalid_config", "config %s", oe.msg);
	}
	if (!(f = fdopen(fd, "re"))) {
		close(fd);
		return err_errno(e, errno, "config %s", file);
	}
	rc = config_read(c, f, file, e);
	fclose(f);
	return rc;
}
