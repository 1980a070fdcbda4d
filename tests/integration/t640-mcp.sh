#!/bin/bash
# berth mcp, the MCP server (stdio) an agent drives berth with, driven by
# the official MCP client SDK from npm (tests/mcp/client.mjs): initialize,
# tools/list, create a machine, exec (stdout, stderr, exit code, stdin),
# write and read files (text and bytes), refusals as error results, an
# unknown tool as a JSON-RPC error, checkpoint and fork, delete.  Then the
# protocol's edges with raw lines: a parse error, a batch, a notification
# (no answer), ping.
. "$(dirname "$0")/../lib.sh"

SDK=$ROOT/build/node/node_modules/@modelcontextprotocol/sdk/dist/esm/client/index.js
if ! command -v node >/dev/null || [ ! -f "$SDK" ]; then
	skip "berth mcp with the MCP SDK: needs node and $SDK (sh deploy/install-deps.sh test)"
	finish
fi
start_hostd && build_tiny || { not_ok "hostd and image"; finish; }

node "$ROOT/tests/mcp/client.mjs" "$BIN/berth" "$STATE" m >"$T/mcp.out" 2>"$T/mcp.err"
done_seen=
while IFS='|' read -r kind what why; do
	case $kind in
	PASS) ok "mcp: $what" ;;
	FAIL) not_ok "mcp: $what"; diag "$why" ;;
	DONE) done_seen=1 ;;
	*) diag "mcp: $kind $what" ;;
	esac
done <"$T/mcp.out"
check_eq "the client's run finished" 1 "$done_seen" || diag "$(tail -5 "$T/mcp.err")"
check_eq "no machine is left" "" "$(machine_names)"
check_eq "  nor a domain" "" "$(test_domains)"

# The protocol's edges, a line each, answered in order.
out=$(printf '%s\n' \
	'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}' \
	'{"jsonrpc":"2.0","method":"notifications/initialized"}' \
	'not json' \
	'[{"jsonrpc":"2.0","id":2,"method":"ping"}]' \
	'{"jsonrpc":"2.0","id":3,"method":"ping"}' \
	'{"jsonrpc":"2.0","id":4,"method":"resources/list"}' \
	'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"exec","arguments":[]}}' |
	berth mcp)
check_eq "raw lines: one answer a request, none for the notification" 6 "$(printf '%s\n' "$out" | wc -l)"
check_match "  initialize: the version the client asked for" '"protocolVersion":"2025-06-18"' \
	"$(printf '%s\n' "$out" | sed -n 1p)"
check_match "  not JSON: -32700" '"code":-32700' "$(printf '%s\n' "$out" | sed -n 2p)"
check_match "  a batch: -32600" '"code":-32600' "$(printf '%s\n' "$out" | sed -n 3p)"
check_match "  ping: an empty result" '"id":3,"result":\{\}' "$(printf '%s\n' "$out" | sed -n 4p)"
check_match "  an unknown method: -32601" '"id":4,"error":\{"code":-32601' "$(printf '%s\n' "$out" | sed -n 5p)"
check_match "  arguments not an object: -32602" '"id":5,"error":\{"code":-32602' "$(printf '%s\n' "$out" | sed -n 6p)"
finish
