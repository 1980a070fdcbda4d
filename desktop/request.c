#include "desktop/request.h"

#include <string.h>

#include "common/util.h"
#include "common/banned.h"

char *request_target(char *head)
{
	char *sp1 = strchr(head, ' '), *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;

	if (!sp1 || !sp2 || strncmp(head, "GET ", 4) != 0)
		return NULL;
	*sp2 = '\0';
	return sp1 + 1;
}

bool request_ws_split(char *rest, char **user, char **name, char **query)
{
	*query = strchr(rest, '?');
	if (*query)
		*(*query)++ = '\0';
	*user = rest;
	*name = strchr(rest, '/');
	if (*name)
		*(*name)++ = '\0';
	return *name && user_name_valid(*user) && name_valid(*name);
}

bool request_query_get(const char *query, const char *key, char *out, size_t outlen)
{
	size_t kl = strlen(key);

	for (const char *p = query; p && *p; p = strchr(p, '&') ? strchr(p, '&') + 1 : NULL) {
		if (strncmp(p, key, kl) == 0 && p[kl] == '=') {
			size_t n = strcspn(p + kl + 1, "&");
			if (n >= outlen)
				return false;
			memcpy(out, p + kl + 1, n);
			out[n] = '\0';
			return true;
		}
	}
	return false;
}

bool request_token_ok(const char *t)
{
	if (!*t || strlen(t) > 60)
		return false;
	for (; *t; t++)
		if (!((*t >= 'a' && *t <= 'z') || (*t >= 'A' && *t <= 'Z') ||
		      (*t >= '0' && *t <= '9') || *t == '-' || *t == '_'))
			return false;
	return true;
}
