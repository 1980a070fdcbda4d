/* What every command of `berth` uses (cli.c): calling hostd and saying
 * what went wrong, printing its answers, reading their fields, reading
 * options.  Errors go to stderr as "berth: MESSAGE"; --json (C->json)
 * turns tables into the answer's JSON on stdout. */
#ifndef BERTH_CLI_H
#define BERTH_CLI_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cli/client.h"

/* METHOD PATH with BODY (NULL: none; not consumed).  Returns 0 with *RESP
 * (a new reference, never NULL) for a 2xx answer with a JSON body.  Else
 * -1 with *RESP NULL, having printed why on stderr: hostd's message ("berth:
 * no machine x"), or why it could not be reached; with --json, an error
 * answer's JSON goes to stdout too. */
int cli_call(const struct client *c, const char *method, const char *path,
	     json_t *body, json_t **resp);

/* Prints answer R (borrowed) as text; DATA is cli_call_print's. */
typedef void cli_print_fn(json_t *r, void *data);

/* cli_call, then the answer printed: its JSON with --json, else by
 * PRINT(R, DATA) (NULL: nothing).  Returns 0, or 1 when cli_call failed
 * (it said why): the command's exit status. */
int cli_call_print(const struct client *c, const char *method, const char *path,
		   json_t *body, cli_print_fn *print, void *data);

/* `berth WHAT rm ID`: DELETE ROUTE/ID, printing "DONE WHAT ID" (with --json,
 * the answer).  Returns 0; 2 for an ID that is not a positive number
 * (having said so); 1 when cli_call failed. */
int cli_delete_id(const struct client *c, const char *what, const char *route,
		  const char *id_s, const char *done);

/* J (borrowed) on stdout as indented JSON, and a newline. */
void cli_print_json(json_t *j);

/* O's string K, or "" when O is not an object or K no string.  The
 * string belongs to O. */
const char *cli_jstr(json_t *o, const char *k);
/* O's integer K, or 0 when there is none. */
long long cli_jint(json_t *o, const char *k);
/* O's integer K as a size ("1.5G") into OUT (OUTLEN bytes), or "-" when
 * it is absent or not an integer. */
void cli_fmt_size(json_t *o, const char *k, char *out, size_t outlen);

/* The value of option NAME when ARGV[*I] is "NAME=VALUE" or "NAME" with a
 * value after it (then *I is advanced past the value); NULL otherwise, *I
 * unchanged (NAME last, without its value, is not NAME).  The value
 * points into ARGV. */
const char *cli_optval(int argc, char **argv, int *i, const char *name);

/* A transfer's progress on stderr (when ON: stderr is a terminal and
 * --json is off), redrawn at most five times a second: LABEL, the bytes
 * so far, of how many, the rate, the time left.  For an export (MACHINE
 * set, C its client) the bar shows the disk read so far, which hostd
 * tells in the machine's "operation". */
struct cli_progress {
	bool on;           /* stderr is a terminal and --json is off */
	const char *label;
	int64_t t0, drawn;
	bool any;
	/* An export: the bar shows the disk read so far, which hostd tells
	 * in the machine's "operation"; the bytes written are compressed. */
	const struct client *c;
	const char *machine;
	uint64_t done, total;
};
/* hostapi's progress callback; DATA a struct cli_progress. */
void cli_progress_draw(uint64_t done, uint64_t total, void *data);
/* The bar cleared from the terminal. */
void cli_progress_end(struct cli_progress *p);

#endif
