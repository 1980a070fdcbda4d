#!/bin/bash
# Who may get a machine's screen, and for how long: hostd's desktop socket
# attaches only with the one-use handle of a grant that redeeming a token
# for that very machine made (none, another machine's, a spent one are
# refused), and a viewer is cut within seconds, resume key and all, when
# the token family that let it in is revoked: the API token that minted
# its URL (DELETE /v1/tokens/ID), the owner's `berth desktop NAME
# --revoke`, or the machine's deletion; grants outlive a restart of hostd
# (a viewer stays, and is cut by a revocation after it), and a resume key
# carries its viewer's grant.  Viewers are raw RFB clients over the
# bridge's WebSocket (tests/integration/desktop_viewer.py).
. "$(dirname "$0")/../lib.sh"

# The bridge will not start without noVNC's files (it serves the page).
[ -f "$ROOT/build/node/node_modules/@novnc/novnc/core/rfb.js" ] ||
	{ skip "not installed: @novnc/novnc (make deps)"; finish; }
command -v curl >/dev/null 2>&1 || { skip "not installed: curl"; finish; }

BR_PID=
t720_cleanup() {
	[ -n "$BR_PID" ] && kill "$BR_PID" 2>/dev/null && wait "$BR_PID" 2>/dev/null
	cleanup
}
trap t720_cleanup EXIT

PORT=$(free_port)
HPORT=$(free_port)
mkdir -p "$STATE"
printf 'desktop_url = http://127.0.0.1:%s\nhttp_listen = 127.0.0.1:%s\n' "$PORT" "$HPORT" \
	>"$STATE/berth.conf"
start_hostd || { not_ok "hostd starts"; finish; }
web_up || not_ok "berth-web starts"
build_tiny || { not_ok "tiny image builds"; finish; }
berth create m1 --memory 256M >/dev/null 2>"$T/create.err" ||
	{ not_ok "create m1"; cat "$T/create.err"; finish; }
berth create m2 --memory 256M --no-start >/dev/null 2>>"$T/create.err" ||
	{ not_ok "create m2"; cat "$T/create.err"; finish; }

# ---- the desktop socket, as the bridge would use it (root may too) -----
# sock REQUEST-JSON...: each request on its own connection; one line per
# answer: "fds N handle|nohandle" or "error CODE".  "$H" in a request is
# the handle of the answer before (redeem's or attach's), "$H1" the first
# redeem's.
sock() {
	python3 - "$STATE/desktop.sock" "$@" <<'EOF'
import array, json, socket, sys
path, reqs = sys.argv[1], sys.argv[2:]
last, first = "", None
for r in reqs:
    req = json.loads(r.replace("$H1", first or "").replace("$H", last))
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    s.sendall((json.dumps(req) + "\n").encode())
    fds = array.array("i")
    data = b""
    while b"\n" not in data:
        msg, anc, _, _ = s.recvmsg(65536, socket.CMSG_SPACE(8))
        if not msg:
            break
        data += msg
        for lvl, typ, d in anc:
            if lvl == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                fds.frombytes(d[:len(d) - len(d) % fds.itemsize])
    for f in fds:
        socket.socket(fileno=f).close()
    s.close()
    a = json.loads(data)
    if "handle" in a:
        last = a["handle"]
        first = first or last
    if "error" in a:
        print("error", a["error"]["code"])
    else:
        print("fds", len(fds), "handle" if "handle" in a else "nohandle")
EOF
}
tok() { berth desktop "$1" --json | json token; }
T1=$(tok m1)
T2=$(tok m2)
out=$(sock '{"op":"attach","user":"root","machine":"m1","wake":false}' \
	"{\"op\":\"redeem\",\"user\":\"root\",\"machine\":\"m2\",\"token\":\"$T2\"}" \
	'{"op":"attach","user":"root","machine":"m1","wake":false,"handle":"$H"}' \
	"{\"op\":\"redeem\",\"user\":\"root\",\"machine\":\"m1\",\"token\":\"$T1\"}" \
	'{"op":"attach","user":"root","machine":"m1","wake":false,"handle":"$H"}' \
	'{"op":"attach","user":"root","machine":"m1","wake":false,"handle":"$H1"}' \
	'{"op":"attach","user":"root","machine":"m1","wake":false,"handle":"$H"}' | tr '\n' ,)
IFS=, read -r no_handle redeem2 other_machine redeem1 first spent next <<<"$out"
check_eq "attach without a handle is refused" "error invalid_handle" "$no_handle"
check_eq "redeem answers a handle" "fds 0 handle" "$redeem2"
check_eq "attach to m1 with a handle for m2 is refused" "error invalid_handle" "$other_machine"
check_match "attach with m1's handle gets its screen (and the next handle)" \
	"^fds [12] handle$" "$first"
check_eq "that handle, spent, is refused" "error invalid_handle" "$spent"
check_match "the handle the attach gave works once more" "^fds [12] handle$" "$next"
check_eq "the m2 handle used for m1 was burnt" "error invalid_handle" \
	"$(sock "{\"op\":\"redeem\",\"user\":\"root\",\"machine\":\"m2\",\"token\":\"$(tok m2)\"}" \
		'{"op":"attach","user":"root","machine":"m1","wake":false,"handle":"$H"}' \
		'{"op":"attach","user":"root","machine":"m2","wake":false,"handle":"$H1"}' | tail -1)"

# ---- the bridge ----------------------------------------------------------
bridge_start "$PORT"
check "berth-desktop listens" grep -q "listening on 127.0.0.1:$PORT" "$T/desktop.log"
VIEWER="python3 $ROOT/tests/integration/desktop_viewer.py $PORT"

# An API token's desktop URL, minted over HTTP; a second one left unused.
j=$(berth token create --name desk --json)
API=$(echo "$j" | json token)
API_ID=$(echo "$j" | json id)
http_tok() {
	curl -s -X POST -H "Authorization: Bearer $API" \
		"http://127.0.0.1:$HPORT/v1/machines/m1/desktop" | json token
}
TA=$(http_tok)
TA2=$(http_tok)
check_match "an API token mints desktop URLs over HTTP" '^[A-Za-z0-9_-]{43} [A-Za-z0-9_-]{43}$' \
	"$TA $TA2"
TB=$(tok m1)
# Viewer A (the API token's) and viewer B (a local user's): A is cut
# within 5 s of `berth token rm`, cannot come back, B stays.
out=$($VIEWER revoke root/m1 "$TA" "$TB" -- "$BIN/berth" --state "$STATE" token rm "$API_ID")
check_eq "revoking the API token cuts its viewer, which cannot resume; the other stays" \
	"connected connected cut 403 refused alive" "$out"
check_eq "its unused desktop URL is void" "403 token_revoked" "$($VIEWER try root/m1 "token=$TA2")"

# A resume key carries its viewer's grant: one that comes back to a screen
# whose upstream connection closed meanwhile (it had no viewer left) is
# attached again without a new token.  (A control: the old code passes it.)
closed=$(grep -c "root/m1: no viewers, upstream closed" "$T/desktop.log")
check_eq "a viewer back with its resume key after its screen closed sees the machine" \
	"connected 101 connected frame" "$($VIEWER comeback root/m1 "$(tok m1)" 2)"
check "  (the screen had closed its upstream connection in between)" \
	[ "$(grep -c "root/m1: no viewers, upstream closed" "$T/desktop.log")" -gt "$closed" ]

# Grants outlive a restart of hostd: a viewer let in by a second API
# token stays across it, and revoking the token after it cuts the viewer.
j=$(berth token create --name desk2 --json)
API=$(echo "$j" | json token)
API_ID=$(echo "$j" | json id)
$VIEWER watch root/m1 "$(http_tok)" 60 >"$T/watch.out" &
VPID=$!
for _ in $(seq 300); do grep -q connected "$T/watch.out" && break; sleep 0.1; done
check_eq "a viewer let in by another API token" "connected" "$(head -1 "$T/watch.out" | tr -d ' ')"
kill_hostd TERM
start_hostd || not_ok "hostd starts again"
sleep 3  # the bridge holds its grants again
check_eq "stays across hostd's restart" 1 "$(wc -l <"$T/watch.out")"
t0=$(date +%s.%N)
berth token rm "$API_ID" >/dev/null || not_ok "token rm $API_ID"
wait "$VPID"
read -r what at code st <<<"$(tail -1 "$T/watch.out")"
check_eq "revoking its API token after the restart cuts it; it cannot resume" \
	"cut 403 refused" "$what $code $st"
check "  within 5 s" python3 -c "import sys; sys.exit(not 0 <= float(sys.argv[1]) - float(sys.argv[2]) < 5)" \
	"${at:-0}" "$t0"

# The owner cuts every viewer of the machine.
TC=$(tok m1)
TD=$(tok m1)
out=$($VIEWER revoke root/m1 "$TC" "" -- "$BIN/berth" --state "$STATE" desktop m1 --revoke)
check_eq "berth desktop m1 --revoke cuts the machine's viewer, which cannot resume" \
	"connected cut 403 refused" "$out"
check_eq "and voids its unused desktop URL" "403 token_revoked" "$($VIEWER try root/m1 "token=$TD")"
check_match "the revocation is logged" "root/m1: [0-9]+ tokens voided" "$(cat "$T/hostd.log")"

# A deleted machine's viewer is cut.
TE=$(tok m1)
out=$($VIEWER revoke root/m1 "$TE" "" -- "$BIN/berth" --state "$STATE" rm m1)
check_eq "deleting the machine cuts its viewer, which cannot resume" \
	"connected cut 403 refused" "$out"

bridge_end "$BR_PID"
BR_PID=
finish
