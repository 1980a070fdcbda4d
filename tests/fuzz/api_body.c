/*
 * Fuzz harness: hostd's JSON request bodies (hostd/api.c api_parse_body,
 * then api_get_size on the fields that take sizes), as a local user or a
 * token's holder sends them to POST/PATCH routes.  The input is the body.
 * The allowed keys are POST /v1/machines' (the widest list), and the
 * values go through what do_create checks them with (name_valid,
 * api_get_size, duration_parse); the body is also parsed against an empty
 * list (what a route with no fields refuses).
 */
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/err.h"
#include "common/util.h"
#include "hostd/api.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* POST /v1/machines' list (do_create). */
	static const char *const create[] = { "name", "image", "vcpus", "memory", "disk",
					      "start", "wait", "idle", "egress", NULL };
	static const char *const none[] = { NULL };
	struct buf body = { .data = (char *)data, .len = size, .cap = size };
	struct err e = { 0 };
	uint64_t v;
	json_t *j;

	j = api_parse_body(&body, create, &e);
	if (j) {
		const char *name = json_string_value(json_object_get(j, "name"));
		const char *idle = json_string_value(json_object_get(j, "idle"));
		int64_t s;
		if (name)
			name_valid(name);
		if (idle)
			duration_parse(idle, &s);
		api_get_size(j, "memory", 1ULL << 20, &v, &e);
		api_get_size(j, "disk", 1, &v, &e);
		json_decref(j);
	}
	e = (struct err){ 0 };
	j = api_parse_body(&body, none, &e);
	json_decref(j);
	return 0;
}
