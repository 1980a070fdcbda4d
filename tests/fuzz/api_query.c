/*
 * Fuzz harness: what hostd reads of a request's path and query string.
 * The input is "METHOD PATH[?QUERY]": the path goes to api_route_find (the
 * route table, the {name} check, the 414 for a long path), as api_handler
 * passes it; the query's values (libmicrohttpd splits and unescapes them in
 * hostd; here split at & and =, unescaped not at all) go to what reads them:
 * api_usage_range for since and step, name_valid for checkpoint.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/util.h"
#include "hostd/api.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1), *method, *path, *query, *save = NULL;
	const char *since = NULL, *step = NULL, *ckpt = NULL, *args[4];
	char scratch[1024];   /* struct req's */
	bool all = false;
	struct err e = { 0 };
	int64_t a, b;

	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	method = s;
	path = strchr(s, ' ');
	if (!path)
		goto out;
	*path++ = '\0';
	query = strchr(path, '?');
	if (query)
		*query++ = '\0';
	for (char *kv = query ? strtok_r(query, "&", &save) : NULL; kv;
	     kv = strtok_r(NULL, "&", &save)) {
		char *eq = strchr(kv, '=');
		if (!eq || !eq[1])
			continue;
		*eq = '\0';
		if (strcmp(kv, "since") == 0)
			since = eq + 1;
		else if (strcmp(kv, "step") == 0)
			step = eq + 1;
		else if (strcmp(kv, "checkpoint") == 0)
			ckpt = eq + 1;
		else if (strcmp(kv, "all") == 0)
			all = strcmp(eq + 1, "1") == 0;
	}
	api_route_find(method, path, all, scratch, sizeof(scratch), args, &e);
	e = (struct err){ 0 };
	api_usage_range(since, step, 1764633600, &a, &b, &e);
	if (ckpt)
		name_valid(ckpt);
out:
	free(s);
	return 0;
}
