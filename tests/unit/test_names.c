/*
 * Unit tests for the pure string helpers every request goes through:
 * name_valid, user_name_valid, size_parse and size_format (common/util.h), buf_add_xml and
 * buf_add_shquoted (common/buf.h; the quoting is also checked against the
 * real /bin/sh).
 *
 * Built by the Makefile as build/default/tests/test_names.  Prints TAP
 * lines and a closing count; exits 1 when a test failed.
 */
#include "common/buf.h"
#include "common/util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/tap.h"
#include "common/banned.h"

#define KIB (1ULL << 10)
#define MIB (1ULL << 20)
#define GIB (1ULL << 30)
#define TIB (1ULL << 40)

/* ---- name_valid -------------------------------------------------------- */

static void name_is(const char *s, bool want, const char *what)
{
	bool got = name_valid(s);

	if (!check(got == want, "name_valid: %s", what))
		diag("name_valid(\"%s\") = %s", s, got ? "true" : "false");
}

static void test_name_valid(void)
{
	char n63[64], n64[65];

	memset(n63, 'a', 63);
	n63[63] = '\0';
	memset(n64, 'a', 64);
	n64[64] = '\0';

	name_is("devbox", true, "plain lowercase label");
	name_is("a", true, "one letter");
	name_is("7", true, "one digit");
	name_is("web-1", true, "letters, '-' and digits");
	name_is("a--b", true, "double '-' inside");
	name_is("0abc", true, "leading digit (RFC 1123)");
	name_is(n63, true, "63 characters");
	name_is(n64, false, "64 characters refused");
	name_is("", false, "empty refused");
	name_is("-web", false, "leading '-' refused");
	name_is("web-", false, "trailing '-' refused");
	name_is("-", false, "only '-' refused");
	name_is("Web", false, "uppercase refused");
	name_is("WEB", false, "all uppercase refused");
	name_is("my_box", false, "'_' refused");
	name_is("my.box", false, "'.' refused");
	name_is("a/b", false, "'/' refused");
	name_is("..", false, "'..' refused");
	name_is("a b", false, "space refused");
	name_is("caf\xc3\xa9", false, "UTF-8 (cafe with e-acute) refused");
	name_is("\xe2\x80\x93x", false, "UTF-8 en dash refused");
	name_is("box\n", false, "trailing newline refused");
}

/* ---- size_parse --------------------------------------------------------- */

static void parse_ok(const char *s, uint64_t unit, uint64_t want)
{
	uint64_t got = 0xdeadbeef;
	int rc = size_parse(s, unit, &got);

	if (!check(rc == 0 && got == want, "size_parse: \"%s\" (unit %llu) = %llu",
		   s, (unsigned long long)unit, (unsigned long long)want))
		diag("rc %d, got %llu", rc, (unsigned long long)got);
}

static void parse_bad(const char *s, uint64_t unit, const char *why)
{
	uint64_t got = 0xdeadbeef;
	int rc = size_parse(s, unit, &got);

	if (!check(rc == -1, "size_parse: \"%s\" refused (%s)", s, why))
		diag("rc %d, got %llu", rc, (unsigned long long)got);
}

static void test_size_parse(void)
{
	parse_ok("512M", 1, 512 * MIB);
	parse_ok("4G", 1, 4 * GIB);
	parse_ok("1T", 1, TIB);
	parse_ok("4GiB", 1, 4 * GIB);
	parse_ok("4Gi", 1, 4 * GIB);
	parse_ok("4GB", 1, 4 * GIB);
	parse_ok("4g", 1, 4 * GIB);
	parse_ok("64K", 1, 64 * KIB);
	parse_ok("64KiB", 1, 64 * KIB);
	parse_ok("512M", MIB, 512 * MIB);   /* a suffix ignores the unit */
	parse_ok("1024", 1, 1024);
	parse_ok("1024", MIB, 1024 * MIB);
	parse_ok("0", 1, 0);
	parse_ok("16777215T", 1, 16777215ULL * TIB);  /* largest in T */
	parse_ok("17592186044415M", 1, 17592186044415ULL * MIB);
	parse_ok("18446744073709551609", 1, UINT64_MAX - 6);
	/* The largest uint64_t is a size, not an overflow. */
	parse_ok("18446744073709551615", 1, UINT64_MAX);

	parse_bad("", 1, "empty");
	parse_bad("12X", 1, "unknown suffix");
	parse_bad("12P", 1, "no P suffix");
	parse_bad("-1", 1, "negative");
	parse_bad("+1", 1, "sign");
	parse_bad("1.5G", 1, "fraction");
	parse_bad("G", 1, "suffix without digits");
	parse_bad(" 4G", 1, "leading space");
	parse_bad("4 G", 1, "space before the suffix");
	parse_bad("4G ", 1, "trailing space");
	parse_bad("4Gb", 1, "bits suffix");
	parse_bad("4GiBs", 1, "junk after iB");
	parse_bad("4iB", 1, "iB without a unit letter");
	parse_bad("0x10", 1, "hex");
	parse_bad("99999999999T", 1, "overflow in T");
	parse_bad("16777216T", 1, "2^64 bytes in T");
	parse_bad("18446744073709551616", 1, "2^64 bytes");
	parse_bad("99999999999999999999999", 1, "digits overflow");
	parse_bad("17592186044416", MIB, "bare number times unit overflows");
}

/* ---- size_format -------------------------------------------------------- */

static void format_is(uint64_t bytes, const char *want)
{
	char out[32];

	memset(out, 'X', sizeof(out));
	size_format(bytes, out, sizeof(out));
	out[sizeof(out) - 1] = '\0';
	if (!check(strcmp(out, want) == 0, "size_format: %llu is \"%s\"",
		   (unsigned long long)bytes, want))
		diag("got \"%s\"", out);
}

static void test_size_format(void)
{
	char small[4];

	format_is(512 * MIB, "512M");
	format_is(4 * GIB, "4G");
	format_is(TIB, "1T");
	format_is(3 * GIB / 2, "1.5G");
	format_is(1024, "1K");
	format_is(1536, "1.5K");
	format_is(MIB, "1M");
	format_is(1024 * TIB, "1024T");
	format_is(1023, "1023B");
	format_is(0, "0B");

	/* What size_format prints in whole units parses back. */
	{
		static const uint64_t v[] = { 512 * MIB, 4 * GIB, TIB, 64 * KIB };
		bool ok = true;
		for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
			char s[32];
			uint64_t back = 0;
			size_format(v[i], s, sizeof(s));
			if (size_parse(s, 1, &back) < 0 || back != v[i]) {
				ok = false;
				diag("%llu -> \"%s\" -> %llu",
				     (unsigned long long)v[i], s,
				     (unsigned long long)back);
			}
		}
		check(ok, "size_format: whole sizes round-trip through size_parse");
	}

	/* A short buffer is cut, not overrun. */
	memset(small, 'X', sizeof(small));
	size_format(512 * MIB, small, 3);
	check(small[2] == '\0' && small[3] == 'X' && strcmp(small, "51") == 0,
	      "size_format: truncated to outlen");
}

/* ---- buf_add_xml --------------------------------------------------------- */

static void xml_is(const char *in, const char *want, const char *what)
{
	struct buf b = BUF_INIT;

	buf_adds(&b, "[");
	buf_add_xml(&b, in);
	buf_adds(&b, "]");
	check_str(buf_str(&b), want, what);
	buf_free(&b);
}

static void test_xml(void)
{
	xml_is("plain text", "[plain text]", "buf_add_xml: plain text unchanged");
	xml_is("", "[]", "buf_add_xml: empty string adds nothing");
	xml_is("&", "[&amp;]", "buf_add_xml: &");
	xml_is("<", "[&lt;]", "buf_add_xml: <");
	xml_is(">", "[&gt;]", "buf_add_xml: >");
	xml_is("'", "[&apos;]", "buf_add_xml: '");
	xml_is("\"", "[&quot;]", "buf_add_xml: \"");
	xml_is("a&b<c>d'e\"f", "[a&amp;b&lt;c&gt;d&apos;e&quot;f]",
	       "buf_add_xml: all five in one string");
	xml_is("&amp;", "[&amp;amp;]", "buf_add_xml: an entity is escaped again");
	xml_is("caf\xc3\xa9", "[caf\xc3\xa9]", "buf_add_xml: UTF-8 kept");

	{
		struct buf b = BUF_INIT;
		buf_add_xml(&b, "");
		check(b.len == 0 && strcmp(buf_str(&b), "") == 0,
		      "buf_add_xml: empty into an empty buffer leaves it empty");
		buf_free(&b);
	}
	{
		/* Grows past the first allocation. */
		struct buf b = BUF_INIT;
		char big[1001];
		bool ok;
		memset(big, '<', 1000);
		big[1000] = '\0';
		buf_add_xml(&b, big);
		ok = b.len == 4000 && strlen(buf_str(&b)) == 4000 &&
		     strncmp(buf_str(&b), "&lt;&lt;", 8) == 0;
		check(ok, "buf_add_xml: 1000 '<' become 4000 bytes");
		buf_free(&b);
	}
}

/* ---- buf_add_shquoted ---------------------------------------------------- */

static void sh_is(const char *in, const char *want, const char *what)
{
	struct buf b = BUF_INIT;

	buf_add_shquoted(&b, in);
	check_str(buf_str(&b), want, what);
	buf_free(&b);
}

/* The shell must read QUOTED(s) back as exactly S. */
static void sh_roundtrip(const char *const *args, const char *what)
{
	char sh[4096];
	struct buf script = BUF_INIT, want = BUF_INIT;
	char *out = NULL;
	int rc = -1;

	if (!tool_find("sh", sh, sizeof(sh))) {
		skip(what, "no sh in PATH");
		return;
	}
	buf_adds(&script, "printf '<%s>'");
	for (size_t i = 0; args[i]; i++) {
		buf_adds(&script, " ");
		buf_add_shquoted(&script, args[i]);
		buf_printf(&want, "<%s>", args[i]);
	}
	{
		char *argv[] = { sh, "-c", (char *)buf_str(&script), NULL };
		rc = tool_run(argv, NULL, &out);
	}
	if (!check(rc == 0 && out && strcmp(out, buf_str(&want)) == 0, "%s", what)) {
		diag("script [%s]", buf_str(&script));
		diag("sh printed [%s] (status %d)", out ? out : "", rc);
		diag("want       [%s]", buf_str(&want));
	}
	free(out);
	buf_free(&script);
	buf_free(&want);
}

static void test_shquoted(void)
{
	static const char *const nasty[] = {
		"a b", "it's", "", "$(echo pwned)", "`echo pwned`", "x\ny", "*",
		"\\", "\"q\"", "; true", "'", "''", "$HOME", "~", "a|b", "a&b",
		"#x", "-n", "%@+=:,./", NULL
	};

	sh_is("qemu-img", "qemu-img", "buf_add_shquoted: safe word unquoted");
	sh_is("/tmp/pool/base-x.qcow2.part", "/tmp/pool/base-x.qcow2.part",
	      "buf_add_shquoted: path unquoted");
	sh_is("a=b,c:d@e%f+g", "a=b,c:d@e%f+g",
	      "buf_add_shquoted: = , : @ % + unquoted");
	sh_is("", "''", "buf_add_shquoted: empty is ''");
	sh_is("a b", "'a b'", "buf_add_shquoted: space quoted");
	sh_is("it's", "'it'\\''s'", "buf_add_shquoted: quote as '\\''");
	sh_is("$HOME", "'$HOME'", "buf_add_shquoted: $ quoted");
	sh_is("~", "'~'", "buf_add_shquoted: ~ quoted");
	sh_is("*", "'*'", "buf_add_shquoted: glob quoted");
	sh_roundtrip(nasty, "buf_add_shquoted: /bin/sh reads back every argument");
}

/* ---- user_name_valid --------------------------------------------------- */

static void test_user_name_valid(void)
{
	static const struct {
		const char *s;
		bool want;
	} cases[] = {
		{ "root", true }, { "Alice.B_c", true }, { "uid1000", true },
		{ "a", true }, { "", false }, { "-x", false }, { "a/b", false },
		{ "a b", false }, { "ro\rot", false }, { "ro\not", false },
		{ "\x7f", false }, { "\xc3\xa9", false },
		{ "0123456789012345678901234567890123456789012345678901234567890123", false },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		bool got = user_name_valid(cases[i].s);
		if (!check(got == cases[i].want, "user_name_valid: case %zu is %s", i,
			   cases[i].want ? "valid" : "refused"))
			diag("user_name_valid(\"%s\") = %s", cases[i].s, got ? "true" : "false");
	}
}

int main(void)
{
	test_name_valid();
	test_user_name_valid();
	test_size_parse();
	test_size_format();
	test_xml();
	test_shquoted();
	return tap_done("test_names");
}
