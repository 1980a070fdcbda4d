/*
 * Fuzz harness: a viewer's HTTP request head as berth-desktop reads it
 * before anything is redeemed (desktop/request.c, called by desktop/main.c
 * conn_main and viewer): request_target for the request line, then for
 * /ws/ targets request_ws_split (user and machine names checked) and the
 * query's resume and token (request_query_get, request_token_ok), for
 * /state? targets its token and resume key.  The input is the head (the
 * bridge reads at most 8 KiB of it; a NUL ends it, as it ends the
 * bridge's string).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "desktop/request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char head[8192 + 1], token[64], key[64], *target, *user, *name, *query;

	if (size > 8192)
		size = 8192;
	memcpy(head, data, size);
	head[size] = '\0';
	target = request_target(head);
	if (!target)
		return 0;
	if (strncmp(target, "/ws/", 4) == 0) {
		if (!request_ws_split(target + 4, &user, &name, &query))
			return 0;
		if (request_query_get(query, "resume", token, sizeof(token)))
			request_token_ok(token);
		if (request_query_get(query, "token", token, sizeof(token)))
			request_token_ok(token);
	} else if (strncmp(target, "/state?", 7) == 0) {
		if (request_query_get(target + 7, "resume", key, sizeof(key)))
			request_token_ok(key);
		if (request_query_get(target + 7, "token", token, sizeof(token)))
			request_token_ok(token);
	}
	return 0;
}
