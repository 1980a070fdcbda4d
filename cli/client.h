/* The CLI's client of hostd's JSON API: over its UNIX socket (libcurl), as
 * the user running it; or, with BERTH_URL (or --url) and an API token
 * (BERTH_TOKEN, or --token-file), through berth-web as the token's user,
 * from any machine. */
#ifndef BERTH_CLIENT_H
#define BERTH_CLIENT_H

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>

struct client {
	char state[PATH_MAX];   /* state directory */
	char sock[PATH_MAX];    /* STATE/hostd.sock, or berth-web's URL */
	char token[128];        /* with a URL: the API token ("" otherwise) */
	bool json;              /* --json: print JSON, not tables */
};

/* Send METHOD PATH with BODY (NULL for none; not consumed).  Returns 0
 * with *STATUS and *RESP (a new reference; NULL if the body was not JSON)
 * when hostd answered, or -1 with ERR set when it could not be reached. */
int client_call(const struct client *c, const char *method, const char *path,
		json_t *body, long *status, json_t **resp, char *err, size_t errlen);

/* C's API token, or NULL on hostd's socket (for the hostapi_*_as calls). */
const char *client_token(const struct client *c);

/* True when hostd answers on C's socket. */
bool client_alive(const struct client *c);

#endif
