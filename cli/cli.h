/* Shared pieces of the `berth` command. */
#ifndef BERTH_CLI_H
#define BERTH_CLI_H

#include <jansson.h>

#include "cli/client.h"

/* Call hostd; on a transport error or a non-2xx answer print the error
 * ("berth: no machine x") and return -1; else 0 with *RESP (a new ref). */
int cli_call(const struct client *c, const char *method, const char *path,
	     json_t *body, json_t **resp);

/* Output helpers (main.c). */
void print_json(json_t *j);
/* `berth WHAT rm ID`: DELETE ROUTE/ID, printing "DONE WHAT ID"; 2 for an
 * ID that is not a positive number, 1 when hostd refuses. */
int cli_delete_id(const struct client *c, const char *what, const char *route,
		  const char *id_s, const char *done);
const char *jstr(json_t *o, const char *k);
long long jint(json_t *o, const char *k);
/* O's integer K as a size ("1.5G"), "-" when absent. */
void fmt_size(json_t *o, const char *k, char *out, size_t outlen);
/* ARGV[*I] is NAME: its value (advancing *I), or NULL. */
const char *optval(int argc, char **argv, int *i, const char *name);

int cmd_up(struct client *c, int argc, char **argv);
int cmd_image(struct client *c, int argc, char **argv);
int cmd_usage(struct client *c, int argc, char **argv);
int cmd_down(struct client *c, int argc, char **argv);
int cmd_token(struct client *c, int argc, char **argv);
int cmd_desktop(struct client *c, int argc, char **argv);

#endif
