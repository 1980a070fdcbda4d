/*
 * Unit tests for common/buf.c's JSON string writer (buf_add_json_str):
 * what hostd's machine list is written with.  Quotes, backslashes and
 * control characters are escaped, valid UTF-8 passes through, and bytes
 * that are not UTF-8 become U+FFFD, so jansson always parses the result.
 *
 * Built by the Makefile as build/default/tests/test_buf.
 */
#include "common/buf.h"

#include <jansson.h>
#include <string.h>

#include "tests/unit/tap.h"
#include "common/banned.h"

/* S written as a JSON string, then parsed back: the decoded text in OUT. */
static int round_trip(const char *s, char *out, size_t outlen, char *json, size_t jsonlen)
{
	struct buf b = BUF_INIT;
	json_t *j;
	int rc = -1;

	buf_add_json_str(&b, s);
	snprintf(json, jsonlen, "%s", buf_str(&b));
	j = json_loadb(b.data, b.len, JSON_DECODE_ANY, NULL);
	if (j && json_is_string(j)) {
		snprintf(out, outlen, "%s", json_string_value(j));
		rc = 0;
	}
	json_decref(j);
	buf_free(&b);
	return rc;
}

int main(void)
{
	char out[256], json[256];

	check(round_trip("plain", out, sizeof(out), json, sizeof(json)) == 0 &&
	      !strcmp(json, "\"plain\"") && !strcmp(out, "plain"), "plain text as is");
	check(round_trip("a\"b\\c", out, sizeof(out), json, sizeof(json)) == 0 &&
	      !strcmp(json, "\"a\\\"b\\\\c\"") && !strcmp(out, "a\"b\\c"),
	      "quote and backslash escaped");
	check(round_trip("l1\nl2\tx\r\x01", out, sizeof(out), json, sizeof(json)) == 0 &&
	      !strcmp(json, "\"l1\\nl2\\tx\\u000d\\u0001\"") && !strcmp(out, "l1\nl2\tx\r\x01"),
	      "control characters escaped");
	check(round_trip("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", out, sizeof(out), json,
			 sizeof(json)) == 0 && !strcmp(out, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
	      "valid UTF-8 (2, 3 and 4 bytes) passes through");
	const char *bad[] = { "x\xff", "\xc3", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80",
			      "\xe2\x82", "\x80", NULL };
	for (int i = 0; bad[i]; i++) {
		int rc = round_trip(bad[i], out, sizeof(out), json, sizeof(json));
		if (!check(rc == 0 && strstr(json, "\\ufffd"),
			   "invalid UTF-8 #%d becomes U+FFFD and parses", i))
			diag("got %s", json);
	}
	check(round_trip("", out, sizeof(out), json, sizeof(json)) == 0 && !strcmp(json, "\"\""),
	      "empty string");

	/* base64: RFC 4648's vectors both ways, every byte value, bad text. */
	static const char *const vec[][2] = {
		{ "", "" }, { "f", "Zg==" }, { "fo", "Zm8=" }, { "foo", "Zm9v" },
		{ "foob", "Zm9vYg==" }, { "fooba", "Zm9vYmE=" }, { "foobar", "Zm9vYmFy" },
	};
	for (size_t i = 0; i < sizeof(vec) / sizeof(vec[0]); i++) {
		struct buf e = BUF_INIT, d = BUF_INIT;
		buf_add_base64(&e, vec[i][0], strlen(vec[i][0]));
		check(!strcmp(buf_str(&e), vec[i][1]), "base64 of '%s' is '%s' (got '%s')",
		      vec[i][0], vec[i][1], buf_str(&e));
		check(buf_add_unbase64(&d, vec[i][1], strlen(vec[i][1])) == 0 &&
		      d.len == strlen(vec[i][0]) && !memcmp(buf_str(&d), vec[i][0], d.len),
		      "'%s' decodes to '%s'", vec[i][1], vec[i][0]);
		buf_free(&e);
		buf_free(&d);
	}
	{
		unsigned char all[256];
		struct buf e = BUF_INIT, d = BUF_INIT;
		for (int i = 0; i < 256; i++)
			all[i] = (unsigned char)i;
		buf_add_base64(&e, all, sizeof(all));
		check(buf_add_unbase64(&d, e.data, e.len) == 0 && d.len == 256 &&
		      !memcmp(d.data, all, 256), "every byte value survives base64 both ways");
		buf_reset(&d);
		check(buf_add_unbase64(&d, "Zm9vYg", 6) == 0 && d.len == 4 &&
		      !memcmp(d.data, "foob", 4), "unpadded base64 decodes");
		static const char *const nots[] = { "Zm9vY", "Zm9v=", "Zg===", "Zm9v Yg==",
						    "Zm=9", "Zm9v\n", "Zg=a", "====", "*A==" };
		for (size_t i = 0; i < sizeof(nots) / sizeof(nots[0]); i++) {
			buf_reset(&d);
			buf_adds(&d, "kept");
			check(buf_add_unbase64(&d, nots[i], strlen(nots[i])) < 0 &&
			      !strcmp(buf_str(&d), "kept"), "'%s' is not base64, nothing appended",
			      nots[i]);
		}
		buf_free(&e);
		buf_free(&d);
	}
	return tap_done("test_buf");
}
