/*
 * Fuzz harness: what berth-web's E2B API (web/e2b.h) reads of a request
 * before hostd sees anything: a list's query string (every parameter it
 * takes, the metadata filter decoded twice as the SDK encodes it) and a
 * sandbox id against a user.  The input is "USER\nID\nQUERY".
 */
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "web/e2b.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const params[] = { "metadata", "state", "limit", "nextToken", "order",
					      "template", "startedAfter", NULL };
	char *s = malloc(size + 1), *user, *id, *query, name[64];

	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	user = s;
	id = strchr(user, '\n');
	if (!id)
		goto out;
	*id++ = '\0';
	query = strchr(id, '\n');
	if (!query)
		goto out;
	*query++ = '\0';
	if (e2b_id_name(id, user, name, sizeof(name)) && strlen(name) >= sizeof(name))
		abort();
	for (int i = 0; params[i]; i++) {
		bool bad = false;
		char *v = e2b_query_get(query, params[i], &bad);
		if (v && !strcmp(params[i], "metadata")) {
			json_t *f = e2b_metadata_filter(v);
			const char *k;
			json_t *val;
			json_object_foreach(f, k, val)
				if (!json_is_string(val))
					abort();
			json_decref(f);
		}
		free(v);
	}
	free(e2b_unescape(query, strlen(query), true));
out:
	free(s);
	return 0;
}
