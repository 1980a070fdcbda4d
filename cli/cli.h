/* Shared pieces of the `berth` command. */
#ifndef BERTH_CLI_H
#define BERTH_CLI_H

#include <jansson.h>

#include "cli/client.h"

/* Call hostd; on a transport error or a non-2xx answer print the error
 * ("berth: no machine x") and return -1; else 0 with *RESP (a new ref). */
int cli_call(const struct client *c, const char *method, const char *path,
	     json_t *body, json_t **resp);

int cmd_up(struct client *c, int argc, char **argv);
int cmd_down(struct client *c, int argc, char **argv);

#endif
