/*
 * Unit tests of what a request may set of a machine's attributes
 * (hostd/attrs.h): the deadline's forms, its action, metadata and env, and
 * every refusal naming its field.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostd/attrs.h"
#include "tests/unit/tap.h"

/* attrs_parse of the JSON TEXT: 0 or -1; the error's code in CODE. */
static int parse(const char *text, struct attrs_req *r, char *code, size_t codelen,
		 json_t **keep)
{
	struct err e = { 0 };
	json_t *j = json_loads(text, JSON_ALLOW_NUL, NULL);
	int rc;

	if (!j) {
		printf("# bad test JSON: %s\n", text);
		return -2;
	}
	rc = attrs_parse(j, r, &e);
	snprintf(code, codelen, "%s", rc < 0 ? e.code : "");
	if (rc < 0)
		printf("# %s: %s\n", text, e.msg);
	*keep = j;
	return rc;
}

static bool refused(const char *text, const char *want)
{
	struct attrs_req r;
	char code[64];
	json_t *j = NULL;
	bool ok = parse(text, &r, code, sizeof(code), &j) == -1 && !strcmp(code, want);

	json_decref(j);
	return ok;
}

static void test_expires(void)
{
	struct attrs_req r;
	char code[64];
	json_t *j;

	check(parse("{\"expires_in\": 300}", &r, code, sizeof(code), &j) == 0 && r.expires_set &&
	      r.expires_in == 300 && !r.action && !r.metadata && !r.env && attrs_any(&r),
	      "seconds");
	json_decref(j);
	check(parse("{\"expires_in\": \"10m\"}", &r, code, sizeof(code), &j) == 0 &&
	      r.expires_in == 600, "a duration");
	json_decref(j);
	check(parse("{\"expires_in\": null}", &r, code, sizeof(code), &j) == 0 && r.expires_set &&
	      r.expires_in == 0, "null: none");
	json_decref(j);
	check(parse("{\"expires_in\": \"never\"}", &r, code, sizeof(code), &j) == 0 &&
	      r.expires_set && r.expires_in == 0, "never: none");
	json_decref(j);
	check(parse("{\"expires_in\": 0}", &r, code, sizeof(code), &j) == 0 && r.expires_set &&
	      r.expires_in == 0, "0: none");
	json_decref(j);
	check(parse("{}", &r, code, sizeof(code), &j) == 0 && !attrs_any(&r), "{}: nothing");
	json_decref(j);
	check(refused("{\"expires_in\": -5}", "invalid_expires"), "negative: refused");
	check(refused("{\"expires_in\": 31708801}", "invalid_expires"), "over 366 days: refused");
	check(refused("{\"expires_in\": \"soon\"}", "invalid_expires"), "a word: refused");
	check(refused("{\"expires_in\": 1.5}", "invalid_expires"), "a fraction: refused");
	check(refused("{\"expires_in\": true}", "invalid_expires"), "a boolean: refused");
}

static void test_action(void)
{
	struct attrs_req r;
	char code[64];
	json_t *j;

	check(parse("{\"expire_action\": \"suspend\"}", &r, code, sizeof(code), &j) == 0 &&
	      !strcmp(r.action, "suspend") && !r.expires_set, "suspend");
	json_decref(j);
	check(parse("{\"expire_action\": \"delete\"}", &r, code, sizeof(code), &j) == 0 &&
	      !strcmp(r.action, "delete"), "delete");
	json_decref(j);
	check(refused("{\"expire_action\": \"kill\"}", "invalid_expire_action"),
	      "kill (E2B's word): refused");
	check(refused("{\"expire_action\": null}", "invalid_expire_action"), "null: refused");
}

static void test_maps(void)
{
	struct attrs_req r;
	char code[64];
	json_t *j;

	check(parse("{\"metadata\": {\"a b\": \"c&d\"}, \"env\": {\"FOO_1\": \"x y\"}}", &r, code,
		    sizeof(code), &j) == 0 && r.metadata && r.env, "metadata and env");
	json_decref(j);
	check(parse("{\"metadata\": null, \"env\": {}}", &r, code, sizeof(code), &j) == 0 &&
	      r.metadata && r.env && attrs_any(&r), "null and {} clear them");
	json_decref(j);
	check(refused("{\"metadata\": []}", "invalid_attrs"), "metadata an array: refused");
	check(refused("{\"metadata\": {\"k\": 1}}", "invalid_attrs"), "a number: refused");
	check(refused("{\"metadata\": {\"\": \"v\"}}", "invalid_attrs"), "an empty key: refused");
	check(refused("{\"metadata\": {\"k\": \"a\\u0000b\"}}", "invalid_attrs"),
	      "a NUL in a value: refused");
	check(refused("{\"env\": {\"1X\": \"v\"}}", "invalid_attrs") &&
	      refused("{\"env\": {\"A-B\": \"v\"}}", "invalid_attrs") &&
	      refused("{\"env\": {\"A B\": \"v\"}}", "invalid_attrs"),
	      "env names that are not variables': refused");
	char big[5200];
	snprintf(big, sizeof(big), "{\"metadata\": {\"k\": \"%04100d\"}}", 0);
	check(refused(big, "invalid_attrs"), "a value of 4100 bytes: refused");
	struct buf b = BUF_INIT;
	buf_adds(&b, "{\"metadata\": {");
	for (int i = 0; i < 65; i++)
		buf_printf(&b, "%s\"k%d\": \"v\"", i ? "," : "", i);
	buf_adds(&b, "}}");
	check(refused(buf_str(&b), "invalid_attrs"), "65 keys: refused");
	buf_free(&b);
}

int main(void)
{
	test_expires();
	test_action();
	test_maps();
	return tap_done("test_attrs");
}
