#!/bin/bash
# berth's MCP server over Streamable HTTP: POST /mcp on berth-web (web/mcp.c),
# its tools acting as the bearer token's user.  The transport's refusals
# with curl first (no token, an unknown token, GET, a foreign Origin, a
# protocol version it does not speak, not JSON, a batch, a notification, a
# body over the limit, a Content-Type that is not JSON); then the official
# MCP client SDK over its StreamableHTTPClientTransport (tests/mcp/client.mjs
# --http: initialize, tools/list, create a machine, exec with output, write
# and read files, refusals as error results) as user A; then the probes
# that need the machine: user B's token cannot see it, run a command in it
# or read its files through /mcp; a client that goes mid-command has its
# command killed; a berth-web that stops ends a running command at once;
# and A deletes the machine through /mcp.
. "$(dirname "$0")/../lib.sh"

SDK=$ROOT/build/node/node_modules/@modelcontextprotocol/sdk/dist/esm/client/streamableHttp.js
if ! command -v node >/dev/null || [ ! -f "$SDK" ]; then
	skip "/mcp with the MCP SDK: needs node and $SDK (sh deploy/install-deps.sh test)"
	finish
fi
command -v setpriv >/dev/null || { skip "setpriv is not installed (util-linux)"; finish; }

A=bt$$a
B=bt$$b
test_user "$A" && test_user "$B" || { not_ok "useradd $A $B"; finish; }
PORT=$(free_port)
mkdir -p "$STATE"
echo "http_listen = 127.0.0.1:$PORT" >>"$STATE/berth.conf"
start_hostd && build_tiny || { not_ok "hostd and image"; finish; }
web_up || { not_ok "berth-web starts"; finish; }
URL=http://127.0.0.1:$PORT/mcp
TA=$(as_user "$A" "$BIN/berth" --state "$STATE" token create --name mcp)
TB=$(as_user "$B" "$BIN/berth" --state "$STATE" token create --name mcp)
check_match "tokens for $A and $B" '^berth_.+ berth_.+$' "$TA $TB"

# post TOKEN BODY [CURL-ARG...]: POST BODY to /mcp with TOKEN ("": none)
# and Content-Type $CT (application/json); prints the status, then the
# body; the answer's head in $T/h.
post() {
	local tok=$1 body=$2 auth=()
	shift 2
	[ -n "$tok" ] && auth=(-H "Authorization: Bearer $tok")
	rm -f "$T/b" "$T/h"
	curl -sS -o "$T/b" -D "$T/h" -w '%{http_code}\n' "${auth[@]}" \
		-H "Content-Type: ${CT:-application/json}" \
		-H 'Accept: application/json, text/event-stream' \
		--data-binary "$body" "$@" "$URL"
	cat "$T/b" 2>/dev/null
}
INIT='{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t645","version":"1"}}}'
PING='{"jsonrpc":"2.0","id":2,"method":"ping"}'
# tool TOKEN NAME ARGS: a tools/call's answer (the whole JSON-RPC body).
tool() {
	post "$1" "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/call\",\"params\":{\"name\":\"$2\",\"arguments\":$3}}" \
		-H 'MCP-Protocol-Version: 2025-06-18' --max-time 600 | sed 1d
}

out=$(post "$TA" "$INIT")
check_match "initialize with A's token: 200, the version asked for" \
	'^200.*"protocolVersion":"2025-06-18"' "$(echo $out)"
check_match "  as JSON" '[Cc]ontent-[Tt]ype: application/json' "$(cat "$T/h")"
out=$(post "" "$INIT")
check_match "no token: 401 unauthorized" '^401 .*"unauthorized"' "$(echo $out)"
check_match "  with WWW-Authenticate: Bearer" 'WWW-Authenticate: Bearer' "$(cat "$T/h")"
out=$(post "berth_$(head -c 24 /dev/urandom | base64 | tr -d '/+=')" "$INIT")
check_match "an unknown token: 401 invalid_token" '^401 .*"invalid_token"' "$(echo $out)"
check_match "  with WWW-Authenticate: Bearer error=\"invalid_token\"" \
	'WWW-Authenticate: Bearer error="invalid_token"' "$(cat "$T/h")"
out=$(post "" "$INIT" -H 'Authorization: Bearer a b')
check_match "a token with a space: 400 invalid_token" '^400 .*"invalid_token"' "$(echo $out)"
check_eq "GET /mcp (no SSE stream): 405" 405 \
	"$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $TA" \
	   -H 'Accept: text/event-stream' "$URL")"
check_match "  with Allow: POST" 'Allow: POST' "$(curl -s -D - -o /dev/null "$URL")"
check_eq "DELETE /mcp (no session): 405" 405 \
	"$(curl -s -o /dev/null -w '%{http_code}' -X DELETE -H "Authorization: Bearer $TA" "$URL")"

# Origin, against DNS rebinding: a page of evil.example whose name now
# points here sends its own name as Origin and as Host.
out=$(post "$TA" "$PING" -H "Origin: http://evil.example:$PORT" -H "Host: evil.example:$PORT")
check_match "a rebound page's Origin and Host (evil.example): 403 forbidden_origin" \
	'^403 .*"forbidden_origin"' "$(echo $out)"
out=$(post "$TA" "$PING" -H "Origin: http://evil.example")
check_match "another site's Origin: 403" '^403 ' "$(echo $out)"
out=$(post "$TA" "$PING" -H "Origin: https://127.0.0.1:$PORT")
check_match "  https for an http server's page: 403" '^403 ' "$(echo $out)"
out=$(post "$TA" "$PING" -H "Origin: null")
check_match "  Origin null: 403" '^403 ' "$(echo $out)"
out=$(post "$TA" "$PING" -H "Origin: http://127.0.0.1:$PORT")
check_match "this server's own Origin: 200" '^200 .*"result":\{\}' "$(echo $out)"
out=$(post "$TA" "$PING" -H "Origin: http://localhost:$PORT" -H "Host: localhost:$PORT")
check_match "  localhost's: 200" '^200 ' "$(echo $out)"

out=$(post "$TA" "$PING" -H 'MCP-Protocol-Version: 1900-01-01')
check_match "MCP-Protocol-Version it does not speak: 400" \
	'^400 .*"unsupported_protocol_version"' "$(echo $out)"
out=$(post "$TA" "$PING" -H 'MCP-Protocol-Version: 2025-06-18')
check_match "  2025-06-18: 200" '^200 ' "$(echo $out)"
out=$(post "$TA" 'not json')
check_match "not JSON: 400, JSON-RPC -32700" '^400 .*"code":-32700' "$(echo $out)"
out=$(post "$TA" "[$PING]")
check_match "a batch: 400, JSON-RPC -32600 (as berth mcp answers it)" \
	'^400 .*"code":-32600' "$(echo $out)"
out=$(post "$TA" '{"jsonrpc":"2.0","method":"notifications/initialized"}')
check_eq "a notification: 202, no body" "202" "$(echo $out)"
out=$(post "$TA" '{"jsonrpc":"2.0","id":3,"method":"resources/list"}')
check_match "an unknown method: 200, JSON-RPC -32601" '^200 .*"id":3,.*"code":-32601' \
	"$(echo $out)"
out=$(CT=text/plain post "$TA" "$PING")
check_match "Content-Type text/plain: 415" '^415 ' "$(echo $out)"
head -c $((9 << 20)) /dev/zero | tr '\0' ' ' >"$T/big"
out=$(post "$TA" "@$T/big")
check_match "a body of 9 MiB: 413 before it is read" '^413 .*"body_too_large"' "$(echo $out)"
curl -s -o /dev/null -H "Authorization: Bearer $TA" -H 'Content-Type: application/json' \
	-H 'Transfer-Encoding: chunked' --data-binary "@$T/big" "$URL"
check_eq "  chunked: the connection closed past 8 MiB, no answer (curl: empty reply)" 52 "$?"
out=$(post "$TA" "$PING")
check_match "berth-web answers on" '^200 ' "$(echo $out)"

# The official client, as A.
MCP_KEEP=1 node "$ROOT/tests/mcp/client.mjs" --http "$URL" "$TA" m >"$T/mcp.out" 2>"$T/mcp.err"
done_seen=
while IFS='|' read -r kind what why; do
	case $kind in
	PASS) ok "mcp over HTTP: $what" ;;
	FAIL) not_ok "mcp over HTTP: $what"; diag "$why" ;;
	DONE) done_seen=1 ;;
	*) diag "mcp: $kind $what" ;;
	esac
done <"$T/mcp.out"
check_eq "the client's run finished" 1 "$done_seen" || diag "$(tail -5 "$T/mcp.err")"
check_eq "m is A's" running "$(as_user "$A" "$BIN/berth" --state "$STATE" show m --json | json state)"

# B's token, on A's machine.
out=$(tool "$TB" exec '{"machine":"m","command":"touch /root/b-was-here"}')
check_match "B's exec in A's m: an error result, no machine m" \
	'no machine m.*"isError":true' "$out"
out=$(tool "$TB" read_file '{"machine":"m","path":"/root/mcp.txt"}')
check_match "B's read_file of A's m: no machine m" 'no machine m.*"isError":true' "$out"
out=$(tool "$TB" list_machines '{}')
check_match "B's list_machines: none" '"machines":\[\]' "$out"
out=$(tool "$TA" exec '{"machine":"m","command":"ls /root/b-was-here; echo $?"}')
check_match "  and nothing of B's ran in m (A looks)" '"stdout":"[12]\\n"' "$out"

# execs: A's commands running in m, on hostd's socket.
execs() {
	as_user "$A" curl -s --unix-socket "$STATE/hostd.sock" http://berth/v1/machines/m/exec |
		python3 -c 'import json,sys; print(len(json.load(sys.stdin)["execs"]))'
}
# sleeper: curl calling exec sleep 300 through /mcp, in the background (CP).
sleeper() {
	curl -s -o "$T/sleeper" -H "Authorization: Bearer $TA" -H 'Content-Type: application/json' \
		--data-binary '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"exec","arguments":{"machine":"m","command":"sleep 300"}}}' \
		"$URL" &
	CP=$!
}
# A client that goes mid-command: hostd kills the command.
sleeper
for _ in $(seq 100); do [ "$(execs)" = 1 ] && break; sleep 0.1; done
check_eq "a command through /mcp runs (hostd lists it)" 1 "$(execs)"
kill -TERM "$CP"
wait "$CP" 2>/dev/null
for _ in $(seq 100); do [ "$(execs)" = 0 ] && break; sleep 0.1; done
check_eq "  its client went: the command is gone within 10 s" 0 "$(execs)"

# berth-web stops while a command runs: it ends, and berth-web exits.
sleeper
for _ in $(seq 100); do [ "$(execs)" = 1 ] && break; sleep 0.1; done
t0=$(date +%s%N)
web_down
t1=$(date +%s%N)
wait "$CP" 2>/dev/null
check_eq "berth-web stopped with a command running through /mcp, within 5 s" yes \
	"$([ $(((t1 - t0) / 1000000)) -lt 5000 ] && echo yes || echo "no: $(((t1 - t0) / 1000000)) ms")"
for _ in $(seq 100); do [ "$(execs)" = 0 ] && break; sleep 0.1; done
check_eq "  and the command is gone" 0 "$(execs)"

web_up || not_ok "berth-web starts again"
out=$(tool "$TA" delete_machine '{"machine":"m"}')
check_match "A deletes m through /mcp" '"isError":false' "$out"
check_eq "no machine is left" "" "$(machine_names)"
check_eq "  nor a domain" "" "$(test_domains)"
check_absent "no sanitizer report in berth-web's log" \
	matching 'ERROR: AddressSanitizer|runtime error:' cat "$T/web.log"
finish
