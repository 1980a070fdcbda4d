#include "cli/client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/hostapi.h"
#include "common/banned.h"

int client_call(const struct client *c, const char *method, const char *path,
		json_t *body, long *status, json_t **resp, char *err, size_t errlen)
{
	if (hostapi_call_as(c->sock, client_token(c), method, path, body, status, resp, err,
			    errlen) == 0)
		return 0;
	size_t n = strlen(err);
	/* A hint for a local hostd (a URL's host is not ours to start): cut
	 * short when ERR is full, which is fine. */
	if (!client_token(c) &&
	    snprintf(err + n, errlen - n, " (is it running? try `berth up --state %s`)",
		     c->state) < 0)
		err[n] = '\0';
	return -1;
}

bool client_alive(const struct client *c)
{
	long status;
	json_t *resp;
	char err[512];
	bool ok = client_call(c, "GET", "/v1/info", NULL, &status, &resp, err, sizeof(err)) == 0 &&
		  status == 200;

	json_decref(resp);
	return ok;
}

const char *client_token(const struct client *c)
{
	return c->token[0] ? c->token : NULL;
}
