/*
 * Unit tests for users' SSH public key lines (hostd/userkeys.h): every
 * accepted type parses, with the fingerprint ssh-keygen -l prints (fixed
 * keys whose fingerprints ssh-keygen computed once, and fresh keys made by
 * ssh-keygen now, when it is installed); the base64 kept is canonical; bad
 * lines are refused with a reason: garbage base64, key data of another type
 * than the line says, data libssh refuses, an RSA key under 2048 bits or
 * over 16384, an authorized_keys options prefix, refused and unknown types,
 * comments too long or with control characters, several lines.  Then the
 * keys table (hostd/db.h: one owner per key, 409 "key_exists" naming no
 * one, lookups by key, deletion only by the owner) and the gateways'
 * session table (hostd/sessions.h).
 *
 * Built by the Makefile as build/default/tests/test_userkeys.  Prints TAP
 * lines and a closing count; exits 1 when a test failed.
 */
#include "hostd/userkeys.h"

#include "hostd/db.h"
#include "hostd/sessions.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/err.h"
#include "common/log.h"
#include "common/util.h"
#include "tests/unit/tap.h"
#include "common/banned.h"

/* Made with ssh-keygen 9.2; fingerprints from ssh-keygen -lf.  The two
 * security-key lines were assembled by hand (an ed25519 point, the P-256
 * point of the ecdsa key below, application "ssh:"): no device needed to
 * parse a public key. */
static const struct {
	const char *line, *type, *fingerprint, *comment;
} good[] = {
	{ "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFy2cmWqy01kAzUTF5Y8/k6nim2KHrAssQQ/DBRpUrMB"
	  " test ed25519", "ssh-ed25519",
	  "SHA256:4OyQmEsficamCZ8lW4u1s4MIqag8qVNz33XoKm81Ubc", "test ed25519" },
	{ "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQCYJhSNthDXkQTpMFUlfePq1gnj2TLz2nHAsahSLqDI"
	  "F0qe/ELayC7pttpqKK3rL1IMWuTcE1uYLaNZt1dj5W6VwqQIGADnRGboAC+AbYTVtgoRQ16ui7NA9EM+"
	  "Xb7K9i+IkGyvfzO7XyWR1xtxvIlv2QugjWBFsP0Ij3/Zcm40acEu0AngQIsMChG4EKcsXwbRKfoBin63"
	  "pDHDZBAmrh2oj0RCJw1yP+aQXZXcOnYTLCrx6xE/CLn/uxwgRbe599W3a4g4MMtdAe09bllerdv0bvhC"
	  "iQ3ku0STZWTz8V2WvCD7xphM5vK1ApekuXBnYsxrjYY0KEANXvNjRW1/Pgt/ test rsab2048",
	  "ssh-rsa", "SHA256:8qJflf8EThP7ZvSVIgjnQ5chEjEyTDjrOsIXhefutXA", "test rsab2048" },
	{ "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBMkIVLKm"
	  "VCUlK+PSO0muQrC8KudL5I3ndCPCFgKsqypqRzD+xIIS01U99pT/3AeZawtBnvsbt7OQMnSzX8OUehI="
	  " test ecdsab256", "ecdsa-sha2-nistp256",
	  "SHA256:zydaczNgkkMyUBC74NdoJCv47Q1alu734yM8/+HkHPs", "test ecdsab256" },
	{ "ecdsa-sha2-nistp384 AAAAE2VjZHNhLXNoYTItbmlzdHAzODQAAAAIbmlzdHAzODQAAABhBDtx0Xfx"
	  "FYn5dXeJ1dun/kz1VZCS+RnqxYeV8Pvj9KhjBDjxOb45izutlBgpIdClM/Sc+5l3k/8vdeOuTnmSOBoC"
	  "gQ71Geeai/PaN+BKbr876l/FGhUhHUsg5nY0fxc4DQ== test ecdsab384", "ecdsa-sha2-nistp384",
	  "SHA256:Y4sOvD3MTkFbF0+FheBOXhPVqpNc/TBFIU7TRVnKfYg", "test ecdsab384" },
	{ "ecdsa-sha2-nistp521 AAAAE2VjZHNhLXNoYTItbmlzdHA1MjEAAAAIbmlzdHA1MjEAAACFBAAXXCq2"
	  "elYe0tXF/3g8mQA/XhFcD46A1WcKFztT1F30+QR03MAIwQNa0Td/0tNtJnnuC8/KFX5d635XpoV19f1F"
	  "0gE7t7JB4MJ/2UzGBvY7Oh+Itr2/LVz2zKbRoJinctM4XBltAUZtnBixIPcDz2SLqSCRggclvSDBoMUz"
	  "Gfom+xxxiA== test ecdsab521", "ecdsa-sha2-nistp521",
	  "SHA256:BE/yr5z5VeD9o9g8NxkUQNrOGMsEzQbIMAthw3dB/KE", "test ecdsab521" },
	{ "sk-ssh-ed25519@openssh.com AAAAGnNrLXNzaC1lZDI1NTE5QG9wZW5zc2guY29tAAAAICZ7NnOX"
	  "fD4OPJC62ph2tTCw4H26zEVylk+yETmk+hl2AAAABHNzaDo= sk test",
	  "sk-ssh-ed25519@openssh.com", "SHA256:ff5tXFSfyKpt1ZMplAUpDX4Qrf8fZcbOVzgJd5SwbIE",
	  "sk test" },
	{ "sk-ecdsa-sha2-nistp256@openssh.com AAAAInNrLWVjZHNhLXNoYTItbmlzdHAyNTZAb3BlbnNz"
	  "aC5jb20AAAAIbmlzdHAyNTYAAABBBMkIVLKmVCUlK+PSO0muQrC8KudL5I3ndCPCFgKsqypqRzD+xIIS"
	  "01U99pT/3AeZawtBnvsbt7OQMnSzX8OUehIAAAAEc3NoOg== sk ecdsa test",
	  "sk-ecdsa-sha2-nistp256@openssh.com",
	  "SHA256:W8aAxQQGFbUASRTwgf8Y1+cS7CfqwK43uPpLEnUJerc", "sk ecdsa test" },
};

#define ED25519_B64 "AAAAC3NzaC1lZDI1NTE5AAAAIFy2cmWqy01kAzUTF5Y8/k6nim2KHrAssQQ/DBRpUrMB"
#define ECDSA_B64 "AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBMkIVLKmVCUlK+PSO0mu" \
		  "QrC8KudL5I3ndCPCFgKsqypqRzD+xIIS01U99pT/3AeZawtBnvsbt7OQMnSzX8OUehI="
#define RSA1024_B64 "AAAAB3NzaC1yc2EAAAADAQABAAAAgQDAIWcLIJjW1KmdDBqhKQGh+ZftgsLPDiIxLyUMoTAF" \
	"gUCxbu3MlfD8Z0lzk+fHJmTgLiUB6cgFH4cXYwVIMKzy9+vfB0jTp8Trtqp/llzGa3Sq7Hn0bTbhWRkSij" \
	"iBtvRxOcQsVUpizXNRKFntZ1WJyrNu1LmyrPhj87nfv0qIhQ=="
#define DSA_B64 "AAAAB3NzaC1kc3MAAACBAMGd/ew30VuHr6L9MHdsSFrmn2nPUhH9vfQbBncmy0qdCf/d7qxw" \
	"BLFY0C53Pw+0PANsF6BK1zo0QzlFZMW6YtFb3qSRHZ4DWZPmJmGb3q/nZqgmyozO74AS10Y0Hqrp1FLQMT8/" \
	"ftk5KSLo0KqAQxgy9pXoSe8Qa+8feDhIanirAAAAFQCfo4ETlh1Rx5u11njekMHuW57umwAAAIAY3DNY8UlC" \
	"4gRdV5gSv5a+0bGPmAjsfHnP+8E66yV6yiUFDhRS0FjFzec0EpzW0yNXM92ZZzbRg+hYJWqBFguh6oCaaS1v" \
	"0B8ciooWsScKOaU8lJqS7u4CcUEv/V/xaQTjUqxr2yUxWeegnnHL1XqHlI8ZV+gGa4kWr+GHlo+EGAAAAIAu" \
	"2PiDhYJY9LDQHUaRiTxoiZ60Ah/c3V5iKA5puy7cZYS01bBP3IIHoK+vJCbxkzN/BMjsKquZA80JR1yEBvlZ" \
	"TAlP/GXrZiKqLOTE4uKedpBhOAFJCFc+UO80r5J4oY//F0WgGAcsY6qcQ9Y2vH1QP75Ivyi1R0/PyhoBc9bR0A=="

static void test_good(void)
{
	struct userkey k;
	struct err e;
	size_t n = sizeof(good) / sizeof(good[0]);

	for (size_t i = 0; i < n; i++) {
		err_clear(&e);
		if (!check(userkey_parse(good[i].line, &k, &e) == 0, "%s: parses", good[i].type)) {
			diag("%s", e.msg);
			continue;
		}
		check_str(k.type, good[i].type, "  its type");
		check_str(k.fingerprint, good[i].fingerprint, "  its fingerprint is ssh-keygen's");
		check_str(k.comment, good[i].comment, "  its comment");
		check(strstr(good[i].line, k.blob) != NULL, "  its base64 is the line's");
		check(k.id == 0 && k.owner[0] == '\0' && k.created == 0,
		      "  id, owner and created are left clear");
	}
}

static void test_forms(void)
{
	struct userkey k;
	struct err e = { 0 };
	json_t *j;

	check(userkey_parse("ssh-ed25519 " ED25519_B64, &k, &e) == 0 && k.comment[0] == '\0',
	      "no comment: parses, empty comment");
	err_clear(&e);
	check(userkey_parse("  \tssh-ed25519\t" ED25519_B64 "   my  laptop key \r\n", &k, &e) == 0 &&
	      strcmp(k.comment, "my  laptop key") == 0 && strcmp(k.blob, ED25519_B64) == 0,
	      "blanks around and a CRLF: trimmed; spaces inside the comment kept");
	err_clear(&e);
	check(userkey_parse("ssh-ed25519 " ED25519_B64 " Zoë's clé ✓", &k, &e) == 0 &&
	      strcmp(k.comment, "Zoë's clé ✓") == 0, "a UTF-8 comment");
	err_clear(&e);
	/* 'J' instead of 'I' sets the two bits the last character carries past
	 * the data: the same bytes, so the same key, kept canonical. */
	char odd[] = "ecdsa-sha2-nistp256 " ECDSA_B64;
	odd[strlen(odd) - 2] = 'J';
	check(userkey_parse(odd, &k, &e) == 0 && strcmp(k.blob, ECDSA_B64) == 0 &&
	      strcmp(k.fingerprint, good[2].fingerprint) == 0,
	      "non-canonical base64 (stray low bits): stored canonical");
	err_clear(&e);
	char comment[USERKEY_COMMENT_CHARS * 2 + 64];
	int len = snprintf(comment, sizeof(comment), "ssh-ed25519 " ED25519_B64 " ");
	for (int i = 0; i < USERKEY_COMMENT_CHARS; i++)
		len += snprintf(comment + len, sizeof(comment) - (size_t)len, "%c", 'a' + i % 26);
	check(userkey_parse(comment, &k, &e) == 0 && strlen(k.comment) == USERKEY_COMMENT_CHARS,
	      "a comment of exactly %d characters", USERKEY_COMMENT_CHARS);
	err_clear(&e);
	if (userkey_parse(good[0].line, &k, &e) == 0) {
		k.id = 7;
		k.created = 1796000000;
		j = userkey_json(&k);
		check(json_integer_value(json_object_get(j, "id")) == 7 &&
		      !strcmp(json_string_value(json_object_get(j, "type")), "ssh-ed25519") &&
		      !strcmp(json_string_value(json_object_get(j, "fingerprint")),
			      good[0].fingerprint) &&
		      !strcmp(json_string_value(json_object_get(j, "comment")), "test ed25519") &&
		      json_integer_value(json_object_get(j, "created")) == 1796000000 &&
		      json_object_size(j) == 5,
		      "userkey_json: id, type, fingerprint, comment, created");
		json_decref(j);
	}
}

/* Base64 for the test's own odd blobs. */
static void b64(const unsigned char *in, size_t len, struct buf *out)
{
	static const char abc[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

	for (size_t i = 0; i < len; i += 3) {
		uint32_t w = (uint32_t)in[i] << 16 | (i + 1 < len ? (uint32_t)in[i + 1] << 8 : 0) |
			     (i + 2 < len ? in[i + 2] : 0);
		char q[5] = { abc[w >> 18 & 63], abc[w >> 12 & 63],
			      i + 1 < len ? abc[w >> 6 & 63] : '=', i + 2 < len ? abc[w & 63] : '=', 0 };
		buf_adds(out, q);
	}
}

static size_t put_string(unsigned char *p, const void *s, size_t n)
{
	p[0] = (unsigned char)(n >> 24);
	p[1] = (unsigned char)(n >> 16);
	p[2] = (unsigned char)(n >> 8);
	p[3] = (unsigned char)n;
	memcpy(p + 4, s, n);
	return 4 + n;
}

/* An ssh-rsa line whose modulus has BITS bits (not a real key). */
static char *rsa_line(int bits)
{
	static unsigned char blob[8192];
	unsigned char n[4096];
	size_t len = 0, nlen = (size_t)(bits + 7) / 8 + 1;
	struct buf line = BUF_INIT;

	memset(n, 0x5a, nlen);
	n[0] = 0;
	n[1] = (unsigned char)(0xff >> ((8 - bits % 8) % 8));
	n[nlen - 1] |= 1;
	len += put_string(blob + len, "ssh-rsa", 7);
	len += put_string(blob + len, "\x01\x00\x01", 3);
	len += put_string(blob + len, n, nlen);
	buf_adds(&line, "ssh-rsa ");
	b64(blob, len, &line);
	return buf_detach(&line);
}

static void refused(const char *line, const char *why, const char *what)
{
	struct userkey k;
	struct err e = { 0 };
	int rc = userkey_parse(line, &k, &e);

	if (!check(rc < 0 && e.status == 400 && strcmp(e.code, "invalid_key") == 0 &&
		   strstr(e.msg, why) != NULL, "refused: %s", what))
		diag("rc %d, %d %s: %s (want '%s')", rc, e.status, e.code, e.msg, why);
	check(k.type[0] == '\0' && k.blob[0] == '\0' && k.fingerprint[0] == '\0',
	      "  and the key is left clear");
}

static void test_bad(void)
{
	struct buf b = BUF_INIT;
	char *l;

	refused("", "empty", "an empty line");
	refused("   \n", "empty", "a blank line");
	refused("ssh-ed25519", "no key data", "a type alone");
	refused("ssh-ed25519 AAAA!!!!", "not base64", "garbage base64");
	refused("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFy2cmWqy01kAzUTF5Y", "not base64",
		"base64 of the wrong length");
	refused("ssh-ed25519 AA=A", "not base64", "padding in the middle");
	refused("ssh-ed25519 AAAA", "not an SSH public key", "data too short for a type");
	refused("ssh-rsa " ED25519_B64, "the line says ssh-rsa but the key data is of type "
		"'ssh-ed25519'", "type mismatch: ssh-rsa line, ed25519 data");
	refused("ecdsa-sha2-nistp384 " ECDSA_B64, "but the key data is of type "
		"'ecdsa-sha2-nistp256'", "type mismatch between ECDSA curves");
	refused("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFy2cmWqy01kAzUTF5Y8/k6nim2KHrAssQQ/DA==",
		"not a valid ssh-ed25519 key", "truncated ed25519 data");
	refused("ssh-ed25519 " ED25519_B64 "AAA", "not base64",
		"stray characters after the data");
	/* The blob of the key above followed by a string "X". */
	refused("ssh-ed25519 " ED25519_B64 "AAAAAVg=", "not a valid ssh-ed25519 key",
		"ed25519 data with trailing bytes");
	refused("ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAzODQAAABBBMkI"
		"VLKmVCUlK+PSO0muQrC8KudL5I3ndCPCFgKsqypqRzD+xIIS01U99pT/3AeZawtBnvsbt7OQMnSzX8O"
		"UehI=", "not a valid ecdsa-sha2-nistp256 key", "ECDSA data naming another curve");
	refused("ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBAAA"
		"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
		"AAA=", "not a valid ecdsa-sha2-nistp256 key", "an ECDSA point not on the curve");
	refused("ssh-rsa " RSA1024_B64 " short", "the RSA key has 1024 bits: 2048 to 16384",
		"an RSA key of 1024 bits");
	l = rsa_line(2047);
	refused(l, "the RSA key has 2047 bits", "an RSA modulus of 2047 bits");
	free(l);
	l = rsa_line(16392);
	refused(l, "the RSA key has 16392 bits", "an RSA modulus over 16384 bits");
	free(l);
	refused("ssh-dss " DSA_B64 " old", "key type 'ssh-dss' is not accepted", "ssh-dss");
	refused("ssh-ed25519-cert-v01@openssh.com AAAA", "is not accepted", "a certificate");
	refused("ssh-foo " ED25519_B64, "unknown key type 'ssh-foo'", "an unknown type");
	refused(ED25519_B64, "unknown key type", "base64 without a type");
	refused("no-pty ssh-ed25519 " ED25519_B64 " c", "starts with options ('no-pty')",
		"an options prefix (no-pty)");
	refused("command=\"echo hi there\",no-port-forwarding ssh-ed25519 " ED25519_B64,
		"starts with options", "an options prefix with a quoted command");
	refused("restrict,from=\"10.0.0.0/8\" ecdsa-sha2-nistp256 " ECDSA_B64,
		"give the public key alone", "an options prefix before an ECDSA key");
	buf_adds(&b, "ssh-ed25519 " ED25519_B64 " ");
	for (int i = 0; i <= USERKEY_COMMENT_CHARS; i++)
		buf_adds(&b, "x");
	refused(buf_str(&b), "201 characters: at most 200", "a comment of 201 characters");
	buf_reset(&b);
	buf_adds(&b, "ssh-ed25519 " ED25519_B64 " ");
	for (int i = 0; i <= USERKEY_COMMENT_CHARS; i++)
		buf_adds(&b, "é");
	refused(buf_str(&b), "201 characters", "a comment of 201 two-byte characters");
	refused("ssh-ed25519 " ED25519_B64 " a\tb", "control character (U+0009)",
		"a tab in the comment");
	refused("ssh-ed25519 " ED25519_B64 " a\x1b[31mred", "control character (U+001B)",
		"an escape sequence in the comment");
	refused("ssh-ed25519 " ED25519_B64 " a\xc2\x85" "b", "control character (U+0085)",
		"a C1 control in the comment");
	refused("ssh-ed25519 " ED25519_B64 " \xff\xfe", "not UTF-8", "a comment not UTF-8");
	refused("ssh-ed25519 " ED25519_B64 " one\nssh-ed25519 " ED25519_B64 " two",
		"several lines", "two key lines at once");
	buf_reset(&b);
	for (int i = 0; i < 20000; i++)
		buf_adds(&b, "A");
	refused(buf_str(&b), "at most 16384", "a 20000-byte line");
	buf_free(&b);
}

/* Keys ssh-keygen makes now, compared with what ssh-keygen -lf says. */
static void test_ssh_keygen(void)
{
	static const char *const kinds[][3] = {
		{ "ed25519", "", "" }, { "rsa", "-b", "2048" }, { "rsa", "-b", "3072" },
		{ "ecdsa", "-b", "256" }, { "ecdsa", "-b", "384" }, { "ecdsa", "-b", "521" },
	};
	char keygen[4096], dir[64], path[128], pub[160];
	struct userkey k;
	struct err e;

	if (!tool_find("ssh-keygen", keygen, sizeof(keygen))) {
		skip("fresh keys from ssh-keygen", "ssh-keygen is not installed");
		return;
	}
	if (!tmpdir_make(dir, sizeof(dir))) {
		check(false, "make a temporary directory");
		return;
	}
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		char *out = NULL, *line = NULL, fp[128] = "";
		snprintf(path, sizeof(path), "%s/k%zu", dir, i);
		snprintf(pub, sizeof(pub), "%s.pub", path);
		char *gen[] = { keygen, "-q", "-t", (char *)kinds[i][0], "-N", "", "-C",
				"fresh key", "-f", path, kinds[i][1][0] ? (char *)kinds[i][1] : NULL,
				(char *)kinds[i][2], NULL };
		char *lf[] = { keygen, "-lf", pub, NULL };
		if (!check(tool_run(gen, NULL, NULL) == 0 && tool_run(lf, NULL, &out) == 0 &&
			   sscanf(out, "%*d %127s", fp) == 1,
			   "ssh-keygen makes a %s %s key", kinds[i][0], kinds[i][2])) {
			free(out);
			continue;
		}
		err_clear(&e);
		line = file_read(pub, 65536, NULL);
		if (check(line && userkey_parse(line, &k, &e) == 0, "  it parses"))
			check_str(k.fingerprint, fp, "  with ssh-keygen's fingerprint");
		else
			diag("%s", e.msg);
		free(line);
		free(out);
	}
	tmpdir_remove(dir);
}

static struct userkey owned(int which, const char *owner)
{
	struct userkey k;

	userkey_parse(good[which].line, &k, NULL);
	snprintf(k.owner, sizeof(k.owner), "%s", owner);
	return k;
}

static void test_db(void)
{
	char dir[64], path[128];
	struct db *db;
	struct err e = { 0 };
	struct userkey a, b, c, got, *list = NULL;
	size_t n = 0;

	if (!tmpdir_make(dir, sizeof(dir))) {
		check(false, "make a temporary directory");
		return;
	}
	snprintf(path, sizeof(path), "%s/berth.db", dir);
	db = db_open(path, &e);
	if (!check(db != NULL, "db: opens with the keys table")) {
		diag("%s", e.msg);
		tmpdir_remove(dir);
		return;
	}
	a = owned(0, "alice");
	b = owned(2, "alice");
	c = owned(1, "bob");
	check(db_key_insert(db, &a, &e) == 0 && a.id > 0 && a.created > 0,
	      "db: alice adds a key: it gets an id and a time");
	check(db_key_insert(db, &b, &e) == 0 && b.id > a.id, "db: and a second one");
	check(db_key_insert(db, &c, &e) == 0, "db: bob adds his");
	struct userkey again = owned(0, "alice");
	err_clear(&e);
	check(db_key_insert(db, &again, &e) < 0 && e.status == 409 &&
	      strcmp(e.code, "key_exists") == 0, "db: alice's key again: 409 key_exists");
	struct userkey stolen = owned(0, "mallory");
	err_clear(&e);
	check(db_key_insert(db, &stolen, &e) < 0 && e.status == 409 &&
	      strcmp(e.code, "key_exists") == 0 && strstr(e.msg, "alice") == NULL &&
	      strstr(e.msg, good[0].fingerprint) != NULL,
	      "db: the same key for another user: 409, naming the key and not alice");
	err_clear(&e);
	check(db_key_list(db, "alice", &list, &n, &e) == 0 && n == 2 && list[0].id == a.id &&
	      list[1].id == b.id && strcmp(list[1].blob, b.blob) == 0 &&
	      strcmp(list[1].fingerprint, good[2].fingerprint) == 0 &&
	      strcmp(list[0].comment, "test ed25519") == 0,
	      "db: alice lists her two keys, oldest first, with every field");
	free(list);
	check(db_key_list(db, "nobody", &list, &n, &e) == 0 && n == 0, "db: nobody has none");
	free(list);
	check(db_key_find(db, c.type, c.blob, &got, &e) == 0 && strcmp(got.owner, "bob") == 0 &&
	      got.id == c.id, "db: a key is found by type and blob: bob's");
	err_clear(&e);
	check(db_key_find(db, "ssh-rsa", a.blob, &got, &e) < 0 && e.status == 404 &&
	      strcmp(e.code, "unknown_key") == 0, "db: the blob under another type: unknown_key");
	err_clear(&e);
	check(db_key_delete(db, "bob", a.id, &e) < 0 && e.status == 404 &&
	      strcmp(e.code, "not_found") == 0, "db: bob cannot delete alice's key: 404");
	err_clear(&e);
	check(db_key_delete(db, "alice", a.id, &e) == 0, "db: alice deletes it");
	check(db_key_delete(db, "alice", a.id, &e) < 0 && e.status == 404,
	      "db: deleting it again: 404");
	err_clear(&e);
	check(db_key_find(db, a.type, a.blob, &got, &e) < 0 && e.status == 404,
	      "db: and it is unknown now");
	err_clear(&e);
	stolen = owned(0, "mallory");
	check(db_key_insert(db, &stolen, &e) == 0, "db: so another user may register it");
	db_close(db);
	tmpdir_remove(dir);
}

static void test_sessions(void)
{
	struct sessions *s = sessions_new();
	struct err e = { 0 };
	struct session x;
	int64_t a, b, c;

	a = sessions_open(s, "m1", "alice", "devbox", "ssh", "192.0.2.1", &e);
	b = sessions_open(s, "m1", "alice", "devbox", "desktop", "", &e);
	c = sessions_open(s, "m2", "bob", "devbox", "ssh", "192.0.2.2", &e);
	check(a > 0 && b > a && c > b && sessions_count(s, "m1") == 2 &&
	      sessions_count(s, "m2") == 1 && sessions_count(s, "m3") == 0,
	      "sessions: ids grow; counted per machine");
	check(sessions_open(s, "m1", "alice", "devbox", "telnet", "", &e) < 0 &&
	      e.status == 400 && strcmp(e.code, "invalid_kind") == 0,
	      "sessions: kind other than ssh or desktop: 400 invalid_kind");
	err_clear(&e);
	check(sessions_close(s, a, "desktop", 10, 20, &x, &e) < 0 && e.status == 404 &&
	      sessions_count(s, "m1") == 2, "sessions: closing one as another kind: 404");
	err_clear(&e);
	check(sessions_close(s, a, "ssh", 10, 20, &x, &e) == 0 && x.id == a &&
	      strcmp(x.kind, "ssh") == 0 && strcmp(x.from, "192.0.2.1") == 0 &&
	      sessions_count(s, "m1") == 1, "sessions: closing one");
	check(sessions_close(s, a, NULL, 0, 0, NULL, &e) < 0 && e.status == 404,
	      "sessions: closing it again: 404");
	err_clear(&e);
	check(sessions_drop_machine(s, "m1") == 1 && sessions_count(s, "m1") == 0 &&
	      sessions_count(s, "m2") == 1, "sessions: a deleted machine's are dropped");
	check(sessions_close(s, b, NULL, 0, 0, NULL, &e) < 0 && e.status == 404,
	      "sessions: a dropped one is gone");
	sessions_free(s);
	sessions_free(NULL);
}

int main(void)
{
	log_threshold = LOG_WARN;
	test_good();
	test_forms();
	test_bad();
	test_ssh_keygen();
	test_db();
	test_sessions();
	return tap_done("test_userkeys");
}
