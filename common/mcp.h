/* berth's Model Context Protocol server, without its transport: the 14
 * tools (list, create, start, stop, suspend, delete machines; exec; read
 * and write files; checkpoint, restore, fork; desktop and preview URLs)
 * and the JSON-RPC 2.0 methods that serve them (initialize, ping,
 * tools/list, tools/call).  Two transports use it: `berth mcp` on stdin
 * and stdout (cli/mcp.c) and POST /mcp on berth-web (web/mcp.c).
 *
 * Each tool is one or two calls of berth's API through common/hostapi.c,
 * at the place and as the caller a struct mcp_host names: the CLI gives
 * hostd's socket (the user running it) or berth-web's URL with a token;
 * berth-web gives hostd's STATE/web.sock with the bearer token its client
 * sent, so hostd acts as that token's user and decides as for any other
 * caller.  What hostd refuses (no such machine, a quota) is the tool's
 * result with isError, in hostd's words; a malformed message, an unknown
 * method or tool is a JSON-RPC error. */
#ifndef BERTH_MCP_H
#define BERTH_MCP_H

#include <jansson.h>
#include <stdbool.h>

/* Where the tools' requests go, and as whom. */
struct mcp_host {
	const char *sock;       /* hostd's socket (hostd.sock, web.sock) or berth-web's URL */
	const char *token;      /* sent as a bearer token; NULL: none (the socket's user) */
	/* Optional (NULL: never): asked about once a second while a
	 * command (the exec tool) runs; true ends it (closing the
	 * connection to hostd, which kills the command), and the tool's
	 * result says so.  berth-web's: its client went, or it stops. */
	bool (*gone)(void *data);
	void *data;
};

/* JSON-RPC's error codes. */
#define MCP_PARSE_ERROR     (-32700)
#define MCP_INVALID_REQUEST (-32600)
#define MCP_NO_METHOD       (-32601)
#define MCP_INVALID_PARAMS  (-32602)

/* The answer to the message MSG (borrowed; any JSON value): a new
 * reference, or NULL when none is owed (a notification, or a client's
 * answer to a request of ours, which we never make).  A message that is
 * not an object (a batch: 2025-06-18 dropped them) is -32600.  Blocks for
 * as long as the tool's calls of hostd take. */
json_t *mcp_answer(const struct mcp_host *h, json_t *msg);

/* A JSON-RPC error answer to ID (borrowed; NULL: null) with CODE and
 * MESSAGE: a new reference. */
json_t *mcp_error(json_t *id, int code, const char *message);

/* Whether V is a protocol version this server speaks (for the HTTP
 * transport's MCP-Protocol-Version header). */
bool mcp_version_known(const char *v);

#endif
