/* berth mcp: the MCP server (common/mcp.h) on standard input and output,
 * for an agent (Claude Code, Codex) to drive berth with: JSON-RPC 2.0, one
 * message a line (MCP's stdio transport).  Its tools act as the user
 * running it on hostd's socket (or, with --url, as the token's user
 * through berth-web).  Requests are answered one at a time, in order; a
 * notification gets no answer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "common/mcp.h"
#include "common/banned.h"

/* A message is at most this long (a file written through write_file). */
#define MCP_LINE_MAX (16u << 20)

/* MSG (taken; NULL: nothing) as one line on stdout. */
static void send_msg(json_t *msg)
{
	char *s = msg ? json_dumps(msg, JSON_COMPACT) : NULL;

	if (s) {
		fputs(s, stdout);
		fputc('\n', stdout);
		fflush(stdout);
		free(s);
	}
	json_decref(msg);
}

int cmd_mcp(struct client *c, int argc, char **argv)
{
	struct mcp_host h = { .sock = c->sock, .token = client_token(c) };
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;

	(void)argv;
	if (argc > 1) {
		fprintf(stderr, "usage: berth mcp   (an MCP server on stdin and stdout)\n");
		return 2;
	}
	while ((n = getline(&line, &cap, stdin)) >= 0) {
		json_error_t je;
		json_t *msg;
		while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
			line[--n] = '\0';
		if (n == 0)
			continue;
		if ((size_t)n > MCP_LINE_MAX) {
			send_msg(mcp_error(NULL, MCP_INVALID_REQUEST, "message too long"));
			continue;
		}
		msg = json_loadb(line, (size_t)n, JSON_REJECT_DUPLICATES, &je);
		if (!msg) {
			send_msg(mcp_error(NULL, MCP_PARSE_ERROR, "parse error: not JSON"));
			continue;
		}
		send_msg(mcp_answer(&h, msg));
		json_decref(msg);
	}
	free(line);
	return 0;
}
