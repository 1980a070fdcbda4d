/*
 * Unit tests of the pure pieces of berth-web's E2B API (web/e2b.h): the
 * percent-decoding, the query's parameters, the metadata filter as the
 * e2b SDK encodes it (twice: docs/research/e2b-sdk.md 2.1.4) and the
 * sandbox ids of a user.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "web/e2b.h"
#include "tests/unit/tap.h"

static bool unescapes(const char *in, bool plus, const char *want)
{
	char *out = e2b_unescape(in, strlen(in), plus);
	bool ok = want ? out && !strcmp(out, want) : !out;

	if (!ok)
		printf("# unescape '%s': got '%s', want '%s'\n", in, out ? out : "(null)",
		       want ? want : "(null)");
	free(out);
	return ok;
}

static void test_unescape(void)
{
	check(unescapes("a%20b%26c", false, "a b&c"), "%%20 and %%26");
	check(unescapes("a+b", true, "a b") && unescapes("a+b", false, "a+b"),
	      "'+' a space only as a query's");
	check(unescapes("%2f%2F", false, "//"), "hex digits of either case");
	check(unescapes("", false, ""), "empty");
	check(unescapes("%", false, NULL) && unescapes("%2", false, NULL) &&
	      unescapes("a%zz", false, NULL) && unescapes("%g0", false, NULL),
	      "a cut or non-hex escape: refused");
	check(unescapes("a%00b", false, NULL), "an escape of NUL: refused");
	check(unescapes("%C3%A9", false, "\xc3\xa9"), "bytes of UTF-8");
}

static void test_query(void)
{
	bool bad = false;
	char *v;

	v = e2b_query_get("state=running,paused&limit=10", "limit", &bad);
	check(v && !strcmp(v, "10") && !bad, "a parameter after another");
	free(v);
	v = e2b_query_get("state=running%2Cpaused", "state", &bad);
	check(v && !strcmp(v, "running,paused"), "decoded");
	free(v);
	check(!e2b_query_get("limitx=1&xlimit=2", "limit", &bad) && !bad,
	      "a name that only begins or ends the same is not it");
	check(!e2b_query_get("limit", "limit", &bad), "no '=': absent");
	v = e2b_query_get("limit=", "limit", &bad);
	check(v && !v[0], "an empty value");
	free(v);
	v = e2b_query_get("a=1&limit=1&limit=2", "limit", &bad);
	check(v && !strcmp(v, "1"), "the first of two");
	free(v);
	check(!e2b_query_get("limit=%zz", "limit", &bad) && bad, "malformed: *bad");
}

static bool filter_is(const char *query, const char *want)
{
	bool bad = false, ok;
	char *md = e2b_query_get(query, "metadata", &bad);
	json_t *f = md ? e2b_metadata_filter(md) : NULL;
	char *got = f ? json_dumps(f, JSON_COMPACT | JSON_SORT_KEYS) : NULL;

	ok = want ? got && !strcmp(got, want) : !got;
	if (!ok)
		printf("# filter of '%s': got %s, want %s\n", query, got ? got : "(null)",
		       want ? want : "(null)");
	free(md);
	free(got);
	json_decref(f);
	return ok;
}

static void test_metadata(void)
{
	/* What the SDK 2.51.0 sent for {user: "a b&c"} (the research's capture). */
	check(filter_is("metadata=user%3Da%252520b%252526c", "{\"user\":\"a b&c\"}"),
	      "the SDK's capture: {user: 'a b&c'}");
	/* {team: "x", run: "1"}: two pairs. */
	check(filter_is("metadata=team%3Dx%26run%3D1&state=running",
			"{\"run\":\"1\",\"team\":\"x\"}"), "two pairs, ANDed by the caller");
	check(filter_is("metadata=k%25253D%3Dv%252526", "{\"k=\":\"v&\"}"),
	      "'=' in a key and '&' in a value, escaped twice");
	check(filter_is("metadata=", "{}"), "empty: no filter");
	check(filter_is("metadata=novalue", NULL), "a pair without '=': refused");
	check(filter_is("metadata=%3Dv", NULL), "an empty key: refused");
	check(filter_is("metadata=k%3D%25zz", NULL), "a malformed inner escape: refused");
}

static bool id_is(const char *id, const char *user, const char *want)
{
	char name[64];
	bool got = e2b_id_name(id, user, name, sizeof(name));

	return want ? got && !strcmp(name, want) : !got;
}

static void test_ids(void)
{
	check(id_is("e2b-1a2b3c4d-alice", "alice", "e2b-1a2b3c4d"), "NAME-USER");
	check(id_is("m-x-tb1", "tb1", "m-x") && id_is("m-x-tb1", "x-tb1", "m"),
	      "dashes in both: the caller's own user decides");
	check(id_is("e2b-1a2b3c4d-alice", "bob", NULL), "another user's: none");
	check(id_is("e2b-1a2b3c4d-xalice", "alice", NULL), "a user that only ends the same: none");
	check(id_is("-alice", "alice", NULL) && id_is("alice", "alice", NULL), "no name: none");
	check(id_is("Bad_Name-alice", "alice", NULL) && id_is("a--alice", "alice", NULL),
	      "what precedes is no machine name: none");
	check(id_is("../x-alice", "alice", NULL), "no path in a name");
	char longname[80];
	memset(longname, 'a', 64);
	snprintf(longname + 64, sizeof(longname) - 64, "-alice");
	check(id_is(longname, "alice", NULL), "a name of 64 characters: none");
}

int main(void)
{
	test_unescape();
	test_query();
	test_metadata();
	test_ids();
	return tap_done("test_e2b");
}
