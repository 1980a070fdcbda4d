/*
 * Unit tests for the cloud-init NoCloud seed (hostd/seed.h): seed_render's
 * exact meta-data and user-data (and, when python3 with PyYAML is there,
 * what the user-data means as YAML), its refusals, the genisoimage command
 * line seed_write runs (dry run), and a real seed.iso whose ISO 9660 volume
 * label is read from the primary volume descriptor and whose files are read
 * back with isoinfo when it is installed.
 *
 * Built by the Makefile as build/default/tests/test_seed.  Prints TAP lines
 * and a closing count; exits 1 when a test failed.
 */
#include "hostd/seed.h"

#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/err.h"
#include "common/run.h"
#include "hostd/sshkey.h"
#include "tests/unit/tap.h"
#include "common/banned.h"

#define ID "6f1c2a4e-8d0b-4c57-9e3a-2b7d5f60a1c9"
#define KEY1 "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE1+berth/gw berth-gateway"
#define KEY2 "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC7 other@host"

static const char *const two_keys[] = { KEY1, KEY2, NULL };

static const char *const want_meta =
	"instance-id: '" ID "'\nlocal-hostname: 'devbox'\n";
static const char *const want_user_root =
	"#cloud-config\n"
	"hostname: 'devbox'\n"
	"manage_etc_hosts: true\n"
	"ssh_authorized_keys:\n"
	"  - '" KEY1 "'\n"
	"  - '" KEY2 "'\n";

static struct seed seed_of(const char *host, const char *user,
			   const char *const *keys)
{
	struct seed s = { .instance_id = ID, .hostname = host, .user = user,
			  .keys = keys };
	return s;
}

/* What python3's yaml.safe_load_all makes of TEXT (the YAML 1.1 parser
 * cloud-init itself uses), as sorted compact JSON (a malloc'd string): the
 * document itself when TEXT holds one, else the list of documents.  Values
 * JSON cannot hold (a date) come out as "<type value>"; when the text is
 * not YAML, a message saying so.  NULL when python3 or PyYAML is missing
 * (*WHY says which). */
static char *yaml_as_json(const char *text, const char **why)
{
	static const char *missing;  /* cached: why YAML cannot be checked */
	char py[4096];
	char *out = NULL;
	int rc;

	if (!missing && !tool_find("python3", py, sizeof(py)))
		missing = "python3 not installed";
	*why = missing;
	if (missing)
		return NULL;
	{
		char *argv[] = { py, "-c",
			"import sys, json, yaml\n"
			"d = list(yaml.safe_load_all(sys.stdin.read()))\n"
			"print(json.dumps(d[0] if len(d) == 1 else d, sort_keys=True,"
			" separators=(',', ':'),"
			" default=lambda o: '<%s %s>' % (type(o).__name__, o)))",
			NULL };
		rc = tool_run(argv, text, &out);
	}
	if (rc != 0 && out && strstr(out, "No module named 'yaml'")) {
		missing = "PyYAML not installed";
		*why = missing;
		free(out);
		return NULL;
	}
	if (rc != 0) {
		/* Not YAML at all (or python3 broke): a result that fails every
		 * comparison, with the story in it. */
		struct buf b = BUF_INIT;
		buf_printf(&b, "python3/yaml failed (status %d): %s", rc, out ? out : "");
		free(out);
		return buf_detach(&b);
	}
	out[strcspn(out, "\n")] = '\0';
	return out;
}

static void check_yaml(const char *text, const char *want, const char *what)
{
	const char *why = NULL;
	char *got = yaml_as_json(text, &why);

	if (!got) {
		skip(what, "%s", why);
		return;
	}
	check_str(got, want, what);
	free(got);
}

/* Every valid machine name must reach cloud-init as that string: YAML 1.1
 * reads a bare 1234 as a number, yes as a boolean, null as nothing and
 * 2024-01-01 as a date.  One python3 run for all names: the meta-data and
 * user-data of each, as a stream of YAML documents. */
static void test_hostnames_yaml(void)
{
	static const char *const names[] = { "devbox", "web-1", "1234", "0123", "yes",
					     "null", "2024-01-01", NULL };
	struct buf stream = BUF_INIT;
	const char *why = NULL;
	json_error_t je;
	json_t *docs = NULL;
	char *text;
	size_t n = 0;

	for (size_t i = 0; names[i]; i++, n++) {
		struct buf meta = BUF_INIT, user = BUF_INIT;
		struct seed s = seed_of(names[i], "root", two_keys);
		seed_render(&s, &meta, &user, NULL);
		buf_printf(&stream, "%s%s\n---\n%s", i ? "\n---\n" : "",
			   buf_str(&meta), buf_str(&user));
		buf_free(&meta);
		buf_free(&user);
	}
	text = yaml_as_json(buf_str(&stream), &why);
	buf_free(&stream);
	if (!text) {
		skip("render: every valid name reaches cloud-init as a string", "%s", why);
		return;
	}
	docs = json_loads(text, 0, &je);
	if (!check(json_is_array(docs) && json_array_size(docs) == 2 * n,
		   "yaml: python3 read %zu documents", 2 * n))
		diag("%s", text);
	for (size_t i = 0; names[i] && json_array_size(docs) == 2 * n; i++) {
		json_t *meta = json_array_get(docs, 2 * i);
		json_t *user = json_array_get(docs, 2 * i + 1);
		json_t *lh = json_object_get(meta, "local-hostname");
		json_t *hn = json_object_get(user, "hostname");
		bool ok = json_is_string(lh) && strcmp(json_string_value(lh), names[i]) == 0 &&
			  json_is_string(hn) && strcmp(json_string_value(hn), names[i]) == 0;
		if (!check(ok, "render: machine name '%s' is the string '%s' in meta-data "
			   "and user-data (YAML)", names[i], names[i])) {
			char *a = json_dumps(lh ? lh : json_null(), JSON_ENCODE_ANY);
			char *b = json_dumps(hn ? hn : json_null(), JSON_ENCODE_ANY);
			diag("YAML reads local-hostname as %s, hostname as %s", a ? a : "?",
			     b ? b : "?");
			free(a);
			free(b);
		}
	}
	json_decref(docs);
	free(text);
}

/* ---- seed_render --------------------------------------------------------- */

static void test_render(void)
{
	struct buf meta = BUF_INIT, user = BUF_INIT;
	struct err e;
	struct seed s;
	int rc;

	s = seed_of("devbox", "root", two_keys);
	err_clear(&e);
	rc = seed_render(&s, &meta, &user, &e);
	if (!check(rc == 0 && !err_isset(&e), "render: root with two keys"))
		diag("rc %d: %s", rc, e.msg);
	check_str(buf_str(&meta), want_meta, "render: exact meta-data");
	check(strncmp(buf_str(&user), "#cloud-config\n", 14) == 0,
	      "render: user-data starts with #cloud-config");
	check_has(buf_str(&user), "\nhostname: 'devbox'\n", "render: hostname line");
	check_has(buf_str(&user), "ssh_authorized_keys:\n  - '" KEY1 "'\n  - '" KEY2 "'\n",
		  "render: each key as '  - KEY' (quoted) under ssh_authorized_keys");
	check_lacks(buf_str(&user), "users:", "render: root adds no users: entry");
	check_str(buf_str(&user), want_user_root, "render: exact user-data for root");
	check_yaml(buf_str(&user),
		   "{\"hostname\":\"devbox\",\"manage_etc_hosts\":true,\"ssh_authorized_keys\":[\"" KEY1
		   "\",\"" KEY2 "\"]}",
		   "render: user-data as YAML is hostname + the key list");
	check_yaml(buf_str(&meta),
		   "{\"instance-id\":\"" ID "\",\"local-hostname\":\"devbox\"}",
		   "render: meta-data as YAML");

	/* Appends: what was in the buffers stays. */
	buf_reset(&meta);
	buf_reset(&user);
	buf_adds(&meta, "M;");
	buf_adds(&user, "U;");
	err_clear(&e);
	rc = seed_render(&s, &meta, &user, &e);
	check(rc == 0 && strncmp(buf_str(&meta), "M;instance-id: ", 15) == 0 &&
	      strncmp(buf_str(&user), "U;#cloud-config\n", 16) == 0,
	      "render: appends to META and USER");

	/* A non-root default user gets the keys and passwordless sudo. */
	buf_reset(&meta);
	buf_reset(&user);
	s = seed_of("devbox", "debian", two_keys);
	err_clear(&e);
	rc = seed_render(&s, &meta, &user, &e);
	check(rc == 0, "render: non-root user");
	check_has(buf_str(&user), want_user_root,
		  "render: non-root: root's part as for root");
	check_has(buf_str(&user),
		  "users:\n"
		  "  - name: 'debian'\n"
		  "    sudo: 'ALL=(ALL) NOPASSWD:ALL'\n"
		  "    shell: /bin/bash\n"
		  "    ssh_authorized_keys:\n"
		  "      - '" KEY1 "'\n"
		  "      - '" KEY2 "'\n",
		  "render: non-root: users: entry with the keys and sudo");
	check_yaml(buf_str(&user),
		   "{\"hostname\":\"devbox\",\"manage_etc_hosts\":true,\"ssh_authorized_keys\":[\"" KEY1
		   "\",\"" KEY2 "\"],\"users\":[{\"name\":\"debian\",\"shell\":"
		   "\"/bin/bash\",\"ssh_authorized_keys\":[\"" KEY1 "\",\"" KEY2
		   "\"],\"sudo\":\"ALL=(ALL) NOPASSWD:ALL\"}]}",
		   "render: non-root: user-data as YAML");

	/* No keys at all. */
	buf_reset(&meta);
	buf_reset(&user);
	s = seed_of("devbox", "root", NULL);
	err_clear(&e);
	rc = seed_render(&s, &meta, &user, &e);
	check(rc == 0 && strcmp(buf_str(&user), "#cloud-config\nhostname: 'devbox'\n"
				"manage_etc_hosts: true\nssh_authorized_keys:\n") == 0,
	      "render: NULL key list gives an empty ssh_authorized_keys");

	/* A key comment with ": " must stay one string, not become a map. */
	{
		static const char *const colon[] = {
			"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE1 note: laptop", NULL
		};
		buf_reset(&meta);
		buf_reset(&user);
		s = seed_of("devbox", "root", colon);
		err_clear(&e);
		rc = seed_render(&s, &meta, &user, &e);
		if (rc < 0)
			check(e.status == 400,
			      "render: key with ': ' in its comment: refused (400)");
		else
			check_yaml(buf_str(&user),
				   "{\"hostname\":\"devbox\",\"manage_etc_hosts\":true,\"ssh_authorized_keys\":"
				   "[\"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE1 note: "
				   "laptop\"]}",
				   "render: key with ': ' in its comment stays a "
				   "string in the YAML (or is refused)");
	}

	/* The machine's host key: cloud-init's ssh_keys, the PEM text as a
	 * literal block. */
	{
		char *priv = NULL, *pub = NULL;
		struct err ke = { 0 };
		check(sshkey_ed25519(&priv, &pub, &ke) == 0 && strncmp(pub, "ssh-ed25519 ", 12) == 0,
		      "host key: an ed25519 pair made");
		buf_reset(&meta);
		buf_reset(&user);
		s = seed_of("devbox", "root", two_keys);
		s.host_key_private = priv;
		s.host_key_public = pub;
		err_clear(&e);
		rc = seed_render(&s, &meta, &user, &e);
		check(rc == 0, "host key: rendered");
		const char *why = NULL;
		char *j = yaml_as_json(buf_str(&user), &why);
		json_t *doc = j ? json_loads(j, 0, NULL) : NULL;
		json_t *keys = json_object_get(doc, "ssh_keys");
		const char *p = json_string_value(json_object_get(keys, "ed25519_private"));
		const char *q = json_string_value(json_object_get(keys, "ed25519_public"));
		if (!j)
			skip("host key: YAML", "%s", why);
		else if (!check(p && q && !strcmp(p, priv) && !strcmp(q, pub),
				"host key: ssh_keys.ed25519_private is the PEM text, "
				"ed25519_public the line"))
			diag("yaml: %s", j);
		json_decref(doc);
		free(j);
		s.host_key_private = "-----BEGIN OPENSSH PRIVATE KEY-----\nx'\n"
				     "-----END OPENSSH PRIVATE KEY-----\n";
		err_clear(&e);
		check(seed_render(&s, &meta, &user, &e) < 0 && e.status == 400,
		      "host key: PEM text with a quote is refused");
		s.host_key_private = "ssh-ed25519 AAAA";
		err_clear(&e);
		check(seed_render(&s, &meta, &user, &e) < 0 && e.status == 400,
		      "host key: something that is not PEM is refused");
		free(priv);
		free(pub);
	}

	buf_free(&meta);
	buf_free(&user);
}

static void render_refused(const struct seed *s, const char *code,
			   const char *what)
{
	struct buf meta = BUF_INIT, user = BUF_INIT;
	struct err e;
	int rc;

	err_clear(&e);
	rc = seed_render(s, &meta, &user, &e);
	if (!check(rc == -1 && e.status == 400 && strcmp(e.code, code) == 0,
		   "refused: %s: 400 %s", what, code))
		diag("rc %d, status %d, code '%s', msg '%s'", rc, e.status, e.code,
		     e.msg);
	buf_free(&meta);
	buf_free(&user);
}

static void test_refusals(void)
{
	static const char *const nl[] = { KEY1, "ssh-ed25519 AAAA x\nruncmd: [reboot]", NULL };
	static const char *const cr[] = { "ssh-ed25519 AAAA x\rother", NULL };
	static const char *const dq[] = { "ssh-ed25519 AAAA \"x\"", NULL };
	static const char *const sq[] = { "ssh-ed25519 AAAA it's", NULL };
	static const char *const bs[] = { "ssh-ed25519 AAAA a\\nb", NULL };
	static const char *const empty[] = { "", NULL };
	struct seed s;

	s = seed_of("devbox", "root", nl);
	render_refused(&s, "invalid_key", "key with a newline");
	s = seed_of("devbox", "debian", cr);
	render_refused(&s, "invalid_key", "key with a carriage return");
	s = seed_of("devbox", "root", dq);
	render_refused(&s, "invalid_key", "key with a double quote");
	s = seed_of("devbox", "root", sq);
	render_refused(&s, "invalid_key", "key with a single quote");
	s = seed_of("devbox", "root", bs);
	render_refused(&s, "invalid_key", "key with a backslash");
	s = seed_of("devbox", "root", empty);
	render_refused(&s, "invalid_key", "empty key");

	s = seed_of("Dev_Box", "root", two_keys);
	render_refused(&s, "invalid_name", "hostname Dev_Box");
	s = seed_of("", "root", two_keys);
	render_refused(&s, "invalid_name", "empty hostname");
	s = seed_of("box\nruncmd: [reboot]", "root", two_keys);
	render_refused(&s, "invalid_name", "hostname with a newline");
	s = seed_of("-box", "root", two_keys);
	render_refused(&s, "invalid_name", "hostname with a leading '-'");

	s = seed_of("devbox", "debian\n  - name: evil", two_keys);
	render_refused(&s, "invalid_seed", "user with a newline");
	s = seed_of("devbox", "", two_keys);
	render_refused(&s, "invalid_seed", "empty user");
	s = seed_of("devbox", "root", two_keys);
	s.instance_id = "id\nlocal-hostname: evil";
	render_refused(&s, "invalid_seed", "instance id with a newline");

	/* The message says which key. */
	{
		struct buf meta = BUF_INIT, user = BUF_INIT;
		struct err e;
		err_clear(&e);
		s = seed_of("devbox", "root", nl);
		seed_render(&s, &meta, &user, &e);
		check_has(e.msg, "public key 2", "refused: message names key 2");
		buf_free(&meta);
		buf_free(&user);
	}
}

/* ---- seed_write ---------------------------------------------------------- */

/* The contents of DIR/NAME (malloc'd) or NULL. */
static char *read_in(const char *dir, const char *name)
{
	char path[4096], *text;
	struct stat st;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "re");
	if (!f)
		return NULL;
	if (fstat(fileno(f), &st) < 0 || !(text = malloc((size_t)st.st_size + 1))) {
		fclose(f);
		return NULL;
	}
	n = fread(text, 1, (size_t)st.st_size, f);
	text[n] = '\0';
	fclose(f);
	return text;
}

static bool exists_in(const char *dir, const char *name)
{
	char path[4096];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return access(path, F_OK) == 0;
}

static unsigned mode_in(const char *dir, const char *name)
{
	char path[4096];
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return stat(path, &st) == 0 ? (unsigned)(st.st_mode & 07777) : 0;
}

static void test_write_dry(void)
{
	struct buf log = BUF_INIT, want = BUF_INIT;
	struct seed s = seed_of("devbox", "root", two_keys);
	char dir[64], part[128];
	struct err e;
	char *text;
	int rc;

	if (!check(tmpdir_make(dir, sizeof(dir)), "dry: make a temporary directory"))
		return;
	/* genisoimage does not run in a dry run, so stand in for its output:
	 * seed_write then renames it into place. */
	snprintf(part, sizeof(part), "%s/seed.iso.part", dir);
	write_file(part, "ISO", 3);

	err_clear(&e);
	run_set_dry(&log);
	rc = seed_write(&s, dir, &e);
	run_set_dry(NULL);
	if (!check(rc == 0, "dry: seed_write succeeds"))
		diag("rc %d: %s", rc, e.msg);
	buf_printf(&want, "genisoimage -quiet -output %s/seed.iso.part -volid cidata "
		   "-joliet -rock %s/user-data %s/meta-data\n", dir, dir, dir);
	check_str(buf_str(&log), buf_str(&want),
		  "dry: exactly one genisoimage command line, user-data then meta-data");

	text = read_in(dir, "meta-data");
	check_str(text, want_meta, "dry: DIR/meta-data holds the meta-data");
	free(text);
	text = read_in(dir, "user-data");
	check_str(text, want_user_root, "dry: DIR/user-data holds the user-data");
	free(text);
	check(mode_in(dir, "meta-data") == 0600 && mode_in(dir, "user-data") == 0600,
	      "dry: meta-data and user-data are mode 0600 (the host key's private half)");
	text = read_in(dir, "seed.iso");
	check(text && strcmp(text, "ISO") == 0 && !exists_in(dir, "seed.iso.part"),
	      "dry: the .part is renamed to seed.iso");
	free(text);
	check(!exists_in(dir, "meta-data.tmp") && !exists_in(dir, "user-data.tmp"),
	      "dry: no temporary files left");

	/* A refused seed writes nothing and runs nothing. */
	{
		static const char *const bad[] = { "bad\nkey", NULL };
		char dir2[64];
		struct seed b = seed_of("devbox", "root", bad);

		buf_reset(&log);
		if (tmpdir_make(dir2, sizeof(dir2))) {
			err_clear(&e);
			run_set_dry(&log);
			rc = seed_write(&b, dir2, &e);
			run_set_dry(NULL);
			check(rc == -1 && e.status == 400 && log.len == 0 &&
			      !exists_in(dir2, "meta-data") &&
			      !exists_in(dir2, "user-data"),
			      "dry: refused seed: 400, no command, no files");
			tmpdir_remove(dir2);
		} else {
			check(false, "dry: make a second temporary directory");
		}
	}
	buf_free(&log);
	buf_free(&want);
	tmpdir_remove(dir);
}

/* The 32-byte volume identifier of the ISO 9660 primary volume descriptor
 * (sector 16) of PATH into OUT (33 bytes); false when PATH is not ISO 9660. */
static bool iso_volume_id(const char *path, char out[33])
{
	unsigned char pvd[2048];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return false;
	n = pread(fd, pvd, sizeof(pvd), 16 * 2048);
	close(fd);
	if (n != (ssize_t)sizeof(pvd) || pvd[0] != 1 || memcmp(pvd + 1, "CD001", 5) != 0)
		return false;
	memcpy(out, pvd + 40, 32);
	out[32] = '\0';
	return true;
}

static void test_write_real(void)
{
	struct buf user = BUF_INIT, meta = BUF_INIT;
	struct seed s = seed_of("devbox", "debian", two_keys);
	char dir[64], iso[128], vol[33], tool[4096];
	struct err e;
	int rc;

	if (!tool_find("genisoimage", tool, sizeof(tool))) {
		skip("real: seed.iso", "genisoimage not installed");
		return;
	}
	if (!check(tmpdir_make(dir, sizeof(dir)), "real: make a temporary directory"))
		return;
	snprintf(iso, sizeof(iso), "%s/seed.iso", dir);
	err_clear(&e);
	rc = seed_write(&s, dir, &e);
	if (!check(rc == 0, "real: seed_write runs genisoimage"))
		diag("rc %d: %s", rc, e.msg);
	check(exists_in(dir, "seed.iso") && !exists_in(dir, "seed.iso.part"),
	      "real: DIR/seed.iso exists, no .part left");
	if (check(iso_volume_id(iso, vol), "real: seed.iso is ISO 9660 (CD001 at sector 16)"))
		check_str(vol, "cidata                          ",
			  "real: volume label is 'cidata' (space padded)");

	seed_render(&s, &meta, &user, NULL);
	if (tool_find("isoinfo", tool, sizeof(tool))) {
		char *out = NULL;
		char *argv_d[] = { tool, "-d", "-i", iso, NULL };
		char *argv_u[] = { tool, "-R", "-i", iso, "-x", "/user-data", NULL };
		char *argv_m[] = { tool, "-R", "-i", iso, "-x", "/meta-data", NULL };

		rc = tool_run(argv_d, NULL, &out);
		check(rc == 0 && out && strstr(out, "Volume id: cidata\n"),
		      "real: isoinfo -d says Volume id: cidata");
		free(out);
		rc = tool_run(argv_u, NULL, &out);
		check_str(rc == 0 ? out : NULL, buf_str(&user),
			  "real: /user-data in the ISO is the rendered user-data");
		free(out);
		rc = tool_run(argv_m, NULL, &out);
		check_str(rc == 0 ? out : NULL, buf_str(&meta),
			  "real: /meta-data in the ISO is the rendered meta-data");
		free(out);
	} else {
		skip("real: files in the ISO", "isoinfo not installed");
	}

	/* Rewriting replaces the ISO atomically. */
	s = seed_of("other", "root", two_keys);
	err_clear(&e);
	rc = seed_write(&s, dir, &e);
	{
		char *text = read_in(dir, "meta-data");
		check(rc == 0 && text && strstr(text, "local-hostname: 'other'\n") &&
		      iso_volume_id(iso, vol),
		      "real: a second seed_write replaces the seed");
		free(text);
	}

	/* genisoimage missing: the error names it and no .part is left. */
	{
		char empty[64];
		const char *old = getenv("PATH");
		char *saved = old ? strdup(old) : NULL;

		if (tmpdir_make(empty, sizeof(empty))) {
			unlink(iso);
			setenv("PATH", empty, 1);
			err_clear(&e);
			rc = seed_write(&s, dir, &e);
			if (saved)
				setenv("PATH", saved, 1);
			else
				unsetenv("PATH");
			if (!check(rc == -1 && strstr(e.msg, "genisoimage") &&
				   !exists_in(dir, "seed.iso") &&
				   !exists_in(dir, "seed.iso.part"),
				   "real: without genisoimage: error names it, no ISO"))
				diag("rc %d: %s", rc, e.msg);
			tmpdir_remove(empty);
		}
		free(saved);
	}

	buf_free(&user);
	buf_free(&meta);
	tmpdir_remove(dir);
}

int main(void)
{
	test_render();
	test_hostnames_yaml();
	test_refusals();
	test_write_dry();
	test_write_real();
	return tap_done("test_seed");
}
