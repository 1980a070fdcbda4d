/*
 * Unit tests for the two places hostd reads text from outside: the
 * configuration file (config_load / config_set, hostd/config.h: every error
 * names file:line and the bad value) and API request bodies
 * (api_parse_body / api_get_size, hostd/api.h).
 *
 * Built by the Makefile as build/default/tests/test_config_json.  Prints
 * TAP lines and a closing count; exits 1 when a test failed.
 */
#include "hostd/api.h"
#include "hostd/config.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/err.h"
#include "tests/unit/tap.h"
#include "common/banned.h"

#define MIB (1ULL << 20)
#define GIB (1ULL << 30)
#define TIB (1ULL << 40)

static char dir[64];  /* temporary directory for config files */
static int nfile;

/* Write TEXT to a fresh config file; its path into OUT. */
static const char *conf_file(const char *text, char *out, size_t outlen)
{
	snprintf(out, outlen, "%s/berth-%d.conf", dir, ++nfile);
	if (write_file(out, text, strlen(text)) < 0)
		diag("cannot write %s", out);
	return out;
}

/* ---- config ------------------------------------------------------------------ */

static void test_config_good(void)
{
	struct config c;
	struct err e;
	char f[128];
	int rc;

	config_defaults(&c, "/var/lib/berth");
	check(strcmp(c.state_dir, "/var/lib/berth") == 0 && strcmp(c.storage, "qcow2") == 0 &&
	      strcmp(c.network, "routed") == 0 && strcmp(c.hypervisor, "auto") == 0 &&
	      strcmp(c.guest_network, "10.87.0.0/16") == 0 && strcmp(c.egress_default, "open") == 0 &&
	      strstr(c.egress_closed, "10.0.0.0/8") && strstr(c.egress_closed, "192.168.0.0/16") &&
	      c.max_vcpus == 64 && c.min_memory == 64 * MIB && c.max_body == 64 * 1024,
	      "config defaults: state dir, qcow2, routed on 10.87.0.0/16, egress open but the "
	      "private ranges, auto, limits");

	conf_file("# berth.conf\n"
		  "\n"
		  "   \n"
		  "storage = qcow2\n"
		  "network = user\n"
		  "guest_network = 10.99.0.0/16\n"
		  "hypervisor = tcg\n"
		  "libvirt_uri = qemu+ssh://h/system?keyfile=/k\n"
		  "log_level = debug\n"
		  "  # an indented comment\n"
		  "stop_timeout = 45\n"
		  "boot_timeout=300\n"
		  "max_vcpus = 8\n"
		  "min_memory = 128M\n"
		  "max_memory = 64G\n"
		  "max_disk = 2T\n"
		  "max_body = 1048576\n"
		  "storage_location = /srv/berth vols\n"
		  "\tcache_dir\t=\t/var/cache/x  \r\n"
		  "recipes_dir =\n",
		  f, sizeof(f));
	err_clear(&e);
	rc = config_load(&c, f, 1, &e);
	if (!check(rc == 0 && !err_isset(&e), "config: a good file loads"))
		diag("%s", e.msg);
	check_str(c.network, "user", "config: network = user");
	check_str(c.guest_network, "10.99.0.0/16", "config: guest_network");
	check_str(c.hypervisor, "tcg", "config: hypervisor = tcg");
	check_str(c.libvirt_uri, "qemu+ssh://h/system?keyfile=/k",
		  "config: a value may contain '='");
	check_str(c.log_level, "debug", "config: log_level");
	check(c.stop_timeout_s == 45 && c.boot_timeout_s == 300 && c.max_vcpus == 8,
	      "config: integers (with and without spaces around '=')");
	check(c.min_memory == 128 * MIB && c.max_memory == 64 * GIB &&
	      c.max_disk == 2 * TIB && c.max_body == 1048576,
	      "config: sizes with suffixes and bare bytes");
	check_str(c.storage_location, "/srv/berth vols",
		  "config: inner spaces kept, outer trimmed");
	check_str(c.cache_dir, "/var/cache/x", "config: tabs and CRLF trimmed");
	check_str(c.recipes_dir, "", "config: an empty value is allowed");
	check_str(c.state_dir, "/var/lib/berth", "config: state_dir is not a key, kept");

	/* config_set names its origin. */
	err_clear(&e);
	rc = config_set(&c, "network", "bridge", "--set", &e);
	check(rc == -1 && strncmp(e.msg, "--set: ", 7) == 0 && strstr(e.msg, "'bridge'"),
	      "config_set: error starts with WHERE and names the value");
	err_clear(&e);
	rc = config_set(&c, "max_vcpus", "16", "--set", &e);
	check(rc == 0 && c.max_vcpus == 16, "config_set: applies one key");
}

/* Load TEXT; expect -1, 400 invalid_config, and every NEEDLE in the
 * message (the first is LINE's "FILE:N: " prefix). */
static void config_bad(const char *text, int line, const char *value,
		       const char *what)
{
	struct config c;
	struct err e;
	char f[128], where[160];
	int rc;

	config_defaults(&c, "/s");
	conf_file(text, f, sizeof(f));
	snprintf(where, sizeof(where), "%s:%d: ", f, line);
	err_clear(&e);
	rc = config_load(&c, f, 1, &e);
	if (!check(rc == -1 && e.status == 400 && strcmp(e.code, "invalid_config") == 0 &&
		   strncmp(e.msg, where, strlen(where)) == 0 && strstr(e.msg, value),
		   "config: %s: fails naming FILE:%d and '%.24s%s'", what, line, value,
		   strlen(value) > 24 ? "..." : ""))
		diag("rc %d, status %d, code '%s', msg '%s'", rc, e.status, e.code, e.msg);
}

static void test_config_bad(void)
{
	char longval[81];
	struct buf b = BUF_INIT;

	config_bad("storage = qcow2\n# x\nnetwrok = nat\n", 3, "netwrok", "unknown key");
	config_bad("max_vcpus = 12x\n", 1, "12x", "bad number");
	config_bad("\n\nstop_timeout = 0\n", 3, "'0'", "number under the minimum");
	config_bad("max_vcpus = 2000\n", 1, "2000", "number over the maximum");
	config_bad("boot_timeout = 99999999999999999999\n", 1, "99999999999999999999",
		   "number overflowing long");
	config_bad("boot_timeout = 0x10\n", 1, "0x10", "hex number");
	config_bad("boot_timeout =\n", 1, "boot_timeout", "empty number");
	config_bad("max_disk = 12X\n", 1, "12X", "bad size");
	config_bad("max_memory = 1.5G\n", 1, "1.5G", "fractional size");
	config_bad("max_memory = -1\n", 1, "-1", "negative size");
	config_bad("# ok\nnetwork = bridge\n", 2, "bridge", "network not in the choices");
	config_bad("hypervisor = KVM\n", 1, "KVM", "hypervisor choices are case-sensitive");
	config_bad("log_level = verbose\n", 1, "verbose", "log_level not in the choices");
	config_bad("storage = lvm\n", 1, "lvm", "storage not in the choices");
	config_bad("storage qcow2\n", 1, "storage qcow2", "line without '='");
	config_bad("gateway_user = berth-gw\n", 1, "sshgw_user (default berth-sshgw) and desktop_user",
		   "the old single gateway_user, naming the two keys that replace it");
	config_bad("max_machines = -1\n", 1, "-1", "a negative quota");

	/* A value longer than its field. */
	memset(longval, 'n', 80);
	longval[80] = '\0';
	buf_printf(&b, "guest_network = %s\n", longval);
	config_bad(buf_str(&b), 1, longval, "value too long for guest_network");
	buf_free(&b);
}

static void test_config_files(void)
{
	struct config c;
	struct err e;
	char f[128];
	int rc;

	snprintf(f, sizeof(f), "%s/absent.conf", dir);
	config_defaults(&c, "/s");
	err_clear(&e);
	rc = config_load(&c, f, 0, &e);
	check(rc == 0 && !err_isset(&e) && strcmp(c.network, "routed") == 0,
	      "config: a missing optional file is fine, defaults kept");
	err_clear(&e);
	rc = config_load(&c, f, 1, &e);
	if (!check(rc == -1 && err_isset(&e) && strstr(e.msg, f) &&
		   strstr(e.msg, "No such file"),
		   "config: a missing required file fails, naming it"))
		diag("rc %d: %s", rc, e.msg);

	/* A directory is not a config file: reading it fails (EISDIR). */
	err_clear(&e);
	rc = config_load(&c, dir, 1, &e);
	if (!check(rc == -1 && err_isset(&e) && strstr(e.msg, dir),
		   "config: a directory given as the file is an error"))
		diag("rc %d: %s", rc, e.msg);

	/* A line longer than the read buffer (4 KiB) is still one line: a
	 * long comment must not spill into a second "line". */
	{
		struct buf b = BUF_INIT;
		buf_adds(&b, "# ");
		for (int i = 0; i < 5000; i++)
			buf_adds(&b, "x");
		buf_adds(&b, "\nmax_vcpus = 9\nnetwork = bogus\n");
		conf_file(buf_str(&b), f, sizeof(f));
		buf_free(&b);
		config_defaults(&c, "/s");
		err_clear(&e);
		rc = config_load(&c, f, 1, &e);
		{
			char where[160];
			snprintf(where, sizeof(where), "%s:3: ", f);
			if (!check(rc == -1 && strncmp(e.msg, where, strlen(where)) == 0 &&
				   strstr(e.msg, "bogus") && c.max_vcpus == 9,
				   "config: after a 5000-byte comment line, line 2 applies "
				   "and the error is at FILE:3"))
				diag("rc %d, max_vcpus %d: %.200s", rc, c.max_vcpus, e.msg);
		}
	}
}

/* ---- api_parse_body ------------------------------------------------------------- */

static const char *const allowed[] = { "name", "image", "memory", "disk", NULL };

static json_t *parse(const char *text, struct err *e)
{
	struct buf b = BUF_INIT;
	json_t *j;

	if (text)
		buf_add(&b, text, strlen(text));
	err_clear(e);
	j = api_parse_body(&b, allowed, e);
	buf_free(&b);
	return j;
}

static void body_bad(const char *text, const char *code, const char *needle,
		     const char *what)
{
	struct err e;
	json_t *j = parse(text, &e);

	if (!check(j == NULL && e.status == 400 && strcmp(e.code, code) == 0 &&
		   (!needle || strstr(e.msg, needle)),
		   "body: %s: 400 %s", what, code))
		diag("status %d, code '%s', msg '%s'", e.status, e.code, e.msg);
	json_decref(j);
}

static void test_body(void)
{
	struct err e;
	json_t *j;

	j = parse(NULL, &e);
	check(j && json_is_object(j) && json_object_size(j) == 0 && !err_isset(&e),
	      "body: empty body is {}");
	json_decref(j);
	j = parse("{}", &e);
	check(j && json_is_object(j) && json_object_size(j) == 0, "body: {} is {}");
	json_decref(j);
	j = parse("{\"name\": \"devbox\", \"memory\": \"1G\"}", &e);
	check(j && strcmp(json_string_value(json_object_get(j, "name")), "devbox") == 0 &&
	      json_object_size(j) == 2,
	      "body: allowed fields are parsed");
	json_decref(j);
	j = parse(" \n{\"disk\": 10}\n", &e);
	check(j && json_integer_value(json_object_get(j, "disk")) == 10,
	      "body: surrounding whitespace is fine");
	json_decref(j);

	body_bad("{\"name\": }", "invalid_json", "line", "malformed JSON, message gives the line");
	body_bad("{\n\"name\": \"x\",\n}", "invalid_json", "line 3",
		 "trailing comma on line 3 names line 3");
	body_bad("{\"name\": \"x\"", "invalid_json", NULL, "unterminated object");
	body_bad("[1]", "invalid_json", NULL, "an array is refused");
	body_bad("1", "invalid_json", NULL, "a number is refused");
	body_bad("\"name\"", "invalid_json", NULL, "a string is refused");
	body_bad("null", "invalid_json", NULL, "null is refused");
	body_bad("{} {}", "invalid_json", NULL, "trailing data is refused");
	body_bad("{\"nmae\": \"devbox\"}", "unknown_field", "'nmae'",
		 "unknown field named in the message");
	body_bad("{\"name\": \"a\", \"vcpus\": 2}", "unknown_field", "'vcpus'",
		 "unknown field among known ones");
	body_bad("{\"name\": \"a\", \"name\": \"b\"}", "invalid_json", NULL,
		 "duplicate keys are refused");
	body_bad("{\"name\": \"a\\u0000b\"}", "invalid_json", NULL,
		 "a NUL inside a string is refused");

	{
		/* Bytes after a NUL in the body are not silently ignored. */
		struct buf b = BUF_INIT;
		buf_add(&b, "{}\0{\"x\":1}", 10);
		err_clear(&e);
		j = api_parse_body(&b, allowed, &e);
		check(j == NULL && e.status == 400, "body: a NUL byte in the body is refused");
		json_decref(j);
		buf_free(&b);
	}
}

/* ---- api_get_size ---------------------------------------------------------------- */

static void size_ok(const char *text, const char *key, uint64_t unit, uint64_t want,
		    const char *what)
{
	struct err e;
	json_t *j = parse(text, &e);
	uint64_t out = 12345;
	int rc = -2;

	if (j) {
		err_clear(&e);
		rc = api_get_size(j, key, unit, &out, &e);
	}
	if (!check(rc == 0 && out == want && !err_isset(&e), "size: %s", what))
		diag("rc %d, out %llu, want %llu: %s", rc, (unsigned long long)out,
		     (unsigned long long)want, e.msg);
	json_decref(j);
}

static void size_bad(const char *text, const char *what)
{
	struct err e;
	json_t *j = parse(text, &e);
	uint64_t out = 12345;
	int rc = -2;

	if (j) {
		err_clear(&e);
		rc = api_get_size(j, "memory", MIB, &out, &e);
	}
	if (!check(rc == -1 && out == 0 && e.status == 400 &&
		   strcmp(e.code, "invalid_memory") == 0 && strstr(e.msg, "memory"),
		   "size: %s: 400 invalid_memory", what))
		diag("rc %d, out %llu, status %d code '%s' msg '%s'", rc,
		     (unsigned long long)out, e.status, e.code, e.msg);
	json_decref(j);
}

static void test_size(void)
{
	size_ok("{}", "memory", MIB, 0, "absent gives 0");
	size_ok("{\"memory\": 536870912}", "memory", MIB, 512 * MIB,
		"a JSON integer is bytes");
	size_ok("{\"memory\": \"512M\"}", "memory", MIB, 512 * MIB, "\"512M\"");
	size_ok("{\"memory\": \"512\"}", "memory", MIB, 512 * MIB,
		"\"512\" with unit 1 MiB is 512 MiB");
	size_ok("{\"disk\": \"512\"}", "disk", 1, 512, "\"512\" with unit 1 is 512 bytes");
	size_ok("{\"disk\": \"10G\"}", "disk", 1, 10 * GIB, "\"10G\"");
	size_ok("{\"disk\": \"4GiB\"}", "disk", 1, 4 * GIB, "\"4GiB\"");
	size_ok("{\"disk\": 9223372036854775807}", "disk", 1, 9223372036854775807ULL,
		"the largest JSON integer");

	size_bad("{\"memory\": \"\"}", "empty string");
	size_bad("{\"memory\": \"abc\"}", "\"abc\"");
	size_bad("{\"memory\": \"12X\"}", "\"12X\"");
	size_bad("{\"memory\": \"1.5G\"}", "\"1.5G\"");
	size_bad("{\"memory\": \"-5\"}", "\"-5\"");
	size_bad("{\"memory\": \"0\"}", "\"0\"");
	size_bad("{\"memory\": \"99999999999T\"}", "overflowing string");
	size_bad("{\"memory\": 0}", "0");
	size_bad("{\"memory\": -5}", "-5");
	size_bad("{\"memory\": true}", "true");
	size_bad("{\"memory\": null}", "null");
	size_bad("{\"memory\": 1.5}", "a real number");
	size_bad("{\"memory\": [512]}", "an array");
	size_bad("{\"memory\": {\"m\": 1}}", "an object");

	{
		struct err e;
		json_t *j = parse("{\"disk\": \"big\"}", &e);
		uint64_t out;
		err_clear(&e);
		check(j && api_get_size(j, "disk", 1, &out, &e) == -1 &&
		      strcmp(e.code, "invalid_disk") == 0,
		      "size: the code names the field (invalid_disk)");
		json_decref(j);
	}
}

int main(void)
{
	int rc;

	if (!tmpdir_make(dir, sizeof(dir))) {
		check(false, "make a temporary directory");
		return tap_done("test_config_json");
	}
	test_config_good();
	test_config_bad();
	test_config_files();
	test_body();
	test_size();
	rc = tap_done("test_config_json");
	tmpdir_remove(dir);
	return rc;
}
