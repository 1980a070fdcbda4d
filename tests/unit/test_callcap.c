/*
 * Unit tests of hostd/callcap.c, the broker's calls open at once: a
 * machine's cap, its owner's, the broker's share of webctl.sock (what
 * webctl_reserved_connections leaves), each refusal naming its setting,
 * and places given back.
 */
#include <string.h>

#include "hostd/callcap.h"
#include "tests/unit/tap.h"

int main(void)
{
	struct callcap *c = callcap_new();
	struct callcap_limits l = { .per_machine = 2, .per_user = 3, .total = 5, .reserved = 507 };
	struct err e = { 0 };
	int ok = 0;

	check(c != NULL, "a counter");
	if (!c)
		return tap_done("test_callcap");
	ok += callcap_take(c, "alice", "id-a", "a", &l, &e) == 0;
	ok += callcap_take(c, "alice", "id-a", "a", &l, &e) == 0;
	check(ok == 2 && callcap_count(c, NULL, "id-a") == 2, "a machine's first two calls");
	check(callcap_take(c, "alice", "id-a", "a", &l, &e) < 0 && e.status == 429 &&
	      !strcmp(e.code, "too_many_calls") &&
	      strstr(e.msg, "machine a has 2 calls") &&
	      strstr(e.msg, "broker_max_calls_per_machine = 2"),
	      "its third: 429 naming broker_max_calls_per_machine");
	err_clear(&e);
	check(callcap_take(c, "alice", "id-b", "b", &l, &e) == 0 &&
	      callcap_count(c, "alice", NULL) == 3, "another machine of hers: her third");
	check(callcap_take(c, "alice", "id-c", "c", &l, &e) < 0 && e.status == 429 &&
	      strstr(e.msg, "alice's machines have 3 calls") &&
	      strstr(e.msg, "broker_max_calls_per_user = 3"),
	      "her fourth, from a third machine: 429 naming broker_max_calls_per_user");
	err_clear(&e);
	check(callcap_take(c, "bob", "id-d", "d", &l, &e) == 0 &&
	      callcap_take(c, "bob", "id-e", "e", &l, &e) == 0, "bob's two: the broker's fifth");
	check(callcap_take(c, "carol", "id-f", "f", &l, &e) < 0 && e.status == 503 &&
	      !strcmp(e.code, "broker_busy") && strstr(e.msg, "hold 5 of") &&
	      strstr(e.msg, "other 507 are kept for previews (webctl_reserved_connections"),
	      "a sixth, anyone's: 503 naming webctl_reserved_connections");
	err_clear(&e);
	callcap_give(c, "bob", "id-d");
	check(callcap_take(c, "carol", "id-f", "f", &l, &e) == 0 &&
	      callcap_count(c, NULL, NULL) == 5, "a call's end gives its place to the next");
	callcap_give(c, "alice", "id-a");
	check(callcap_count(c, NULL, "id-a") == 1 &&
	      callcap_take(c, "alice", "id-a", "a", &l, &e) == 0 &&
	      callcap_take(c, "bob", "id-d", "d", &l, &e) < 0 && e.status == 503,
	      "machine a under its cap again takes the broker's last place");
	err_clear(&e);
	callcap_give(c, "alice", "id-a");
	callcap_give(c, "alice", "id-a");
	callcap_give(c, "alice", "id-b");
	callcap_give(c, "bob", "id-e");
	callcap_give(c, "carol", "id-f");
	check(callcap_count(c, NULL, NULL) == 0 && callcap_count(c, "alice", NULL) == 0 &&
	      callcap_count(c, "bob", NULL) == 0, "all given back: nothing counted");
	struct callcap_limits none = { 0 };
	int n = 0;
	for (int i = 0; i < 100; i++) {
		char id[16];
		snprintf(id, sizeof(id), "m%d", i);
		n += callcap_take(c, "dave", id, id, &none, &e) == 0;
	}
	check(n == 100 && callcap_count(c, "dave", NULL) == 100,
	      "caps of 0: none (100 machines' calls, the arrays grown)");
	callcap_free(c);
	return tap_done("test_callcap");
}
