#!/bin/bash
# Commands over a WebSocket and the dashboard's terminal: berth-web's GET
# /v1/machines/NAME/exec/ws (web/wsexec.c) for a user who is not root,
# with a real hostd, berth-web and guest.  With a WebSocket client of the
# test's own (tests/ws_exec_client.py): stdout and stderr apart, the exit
# status, stdin of 1 MiB byte-exact in 64 KiB messages and its EOF, a
# signal, a PTY's size and a resize, keepalive pings, a client that closes,
# drops or stops answering pings (its command is killed), berth-web's stop
# (close 1001), the same over TLS (wss), and
# every refusal with its code: the handshake's (400, 405, 426), a missing,
# refused, revoked or malformed token, no such machine, another user's, a
# bad first message, none within 10 s, RFC 6455's (1002, 1007, 1009).  In
# Chromium (tests/browser/terminal.mjs): the page's terminal runs typed
# commands, follows the window's size, copies and pastes, reconnects after
# berth suspend.
. "$(dirname "$0")/../lib.sh"

command -v setpriv >/dev/null || { skip "setpriv is not installed (util-linux)"; finish; }

chmod 711 "$T"
U=bt$$t
V=bt$$v
test_user "$U" || { not_ok "useradd $U"; finish; }
test_user "$V" || { not_ok "useradd $V"; finish; }
PORT=$(free_port)
URL=http://127.0.0.1:$PORT
mkdir -p "$STATE"
cat >>"$STATE/berth.conf" <<EOF
http_listen = 127.0.0.1:$PORT
api_send_timeout = 4s
EOF
start_hostd && build_tiny || { not_ok "hostd and image"; finish; }
web_up || { not_ok "berth-web starts"; finish; }

ub() { as_user "$U" "$BIN/berth" --state "$STATE" "$@"; }
check_eq "$U creates m" running "$(ub create m --json | json state)"
TOK=$(ub token create --name term 2>/dev/null)
VTOK=$(as_user "$V" "$BIN/berth" --state "$STATE" token create --name other 2>/dev/null)
check_match "$U and $V have tokens" '^berth_[0-9a-f]{64} berth_[0-9a-f]{64}$' "$TOK $VTOK"

# ws OUT [--token T] NAME FIRST ACTION...: the client's lines into $T/OUT.
ws() {
	local out=$1
	shift
	python3 "$ROOT/tests/ws_exec_client.py" --timeout 60 "$@" >"$T/$out" 2>&1
}
# first FIELDS: the first message, $U's token and FIELDS of the exec's body.
first() { printf '{"token": "%s", %s}' "$TOK" "$1"; }
# line OUT KIND: what follows KIND on its first line in $T/OUT.
line() { sed -n "s/^[0-9.]* $2 //p" "$T/$1" | head -n 1; }
# kinds OUT: the kinds of the lines, in order (output pieces once).
kinds() { awk '{ k = $2; if (k != last) printf "%s ", k; last = k }' "$T/$1" | sed 's/ $//'; }
alive() { ub exec m -- sh -c "kill -0 $1 2>/dev/null && echo alive || echo gone"; }
# execs: $U's commands in m as hostd lists them, once none is listed (5 s
# at most).
execs() {
	local out
	for _ in $(seq 25); do
		out=$(curl -s -H "Authorization: Bearer $TOK" "$URL/v1/machines/m/exec")
		[ "$out" = '{"execs":[]}' ] && break
		sleep 0.2
	done
	echo "$out"
}

# The round trip: output as it comes, stdout and stderr apart, the exit.
ws s1 "$URL" m "$(first '"argv": ["sh", "-c", "echo out; echo err >&2; sleep 3; echo late; exit 3"]')"
diag "$(tr '\n' '|' <"$T/s1")"
check_match "the first message is the id" '^\{"id": [0-9]+\}$' "$(line s1 id)"
check_eq "stdout comes as stdout (a binary message)" '"out\n"' "$(line s1 stdout)"
check_eq "stderr as stderr" '"err\n"' "$(line s1 stderr)"
t_out=$(awk '$2 == "stdout" { print $1; exit }' "$T/s1")
t_end=$(awk '$2 == "exit" { print $1 }' "$T/s1")
check "output arrives as it is written (at ${t_out:-?} s, the end at ${t_end:-?} s)" \
	awk -v a="$t_out" -v b="$t_end" 'BEGIN { exit !(a != "" && b != "" && a < 2.5 && b >= 3) }'
check_eq "the exit status, then close 1000" '{"exit": 3}|1000' "$(line s1 exit)|$(line s1 close)"
check_eq "all of stdout" '"out\nlate\n"' "$(line s1 stdout-all)"

# stdin: 1 MiB in 64 KiB messages, byte-exact, then its EOF.
head -c 1048576 /dev/urandom >"$T/in.bin"
ws s2 "$URL" m "$(first '"argv": ["sha256sum"]')" waitid "stdin-file:$T/in.bin" eof
check_eq "1 MiB of stdin in 16 messages arrives byte-exact, EOF ends it" \
	"\"$(sha256sum <"$T/in.bin" | cut -d' ' -f1)  -\n\"" "$(line s2 stdout-all)"
check_eq "  exit 0" '{"exit": 0}' "$(line s2 exit)"
ws s3 "$URL" m "$(first '"cmd": "cat; sleep 2"')" waitid 'stdin:one\n' eof 'stdin:two\n'
check_eq "stdin after its EOF is refused, saying so" 'stdin_closed' \
	"$(line s3 refused | python3 -c 'import json,sys; print(json.load(sys.stdin)["error"]["code"])')"
check_eq "  and the command's output and end still come" '"one\n"|{"exit": 0}' \
	"$(line s3 stdout-all)|$(line s3 exit)"

# The token in Authorization (a client that can send it).
ws s4 --token "$TOK" "$URL" m '{"argv": ["id", "-un"]}'
check_eq "the token in Authorization, the body alone first: the command runs" '"root\n"|{"exit": 0}' \
	"$(line s4 stdout-all)|$(line s4 exit)"

# A signal, a terminal's size, a resize.
ws s5 "$URL" m "$(first '"argv": ["sleep", "100"]')" waitid sleep:0.7 signal:TERM
check_eq "signal TERM ends it: 143, TERM" '{"exit": 143, "signal": "TERM"}' "$(line s5 exit)"
ws s6 "$URL" m "$(first '"cmd": "stty size; sleep 1.5; stty size", "pty": {"cols": 100, "rows": 30}')" \
	waitid wait:'30 100' resize:132x43
check_eq "a PTY of 100 x 30, resized to 132 x 43 while it runs" '"30 100\r\n43 132\r\n"' \
	"$(line s6 stdout-all)"
ws s7 "$URL" m "$(first '"argv": ["sleep", "1"]')" waitid resize:80x24
check_match "a resize without a PTY is refused (no_pty), and the command goes on" \
	'"code": "no_pty".*\|\{"exit": 0\}$' "$(line s7 refused)|$(line s7 exit)"

# A quiet command: hostd's keepalives (api_send_timeout 4 s) come as pings.
ws s8 "$URL" m "$(first '"argv": ["sh", "-c", "sleep 5; echo done"]')"
check_eq "a command quiet for 5 s: pings (the client's pongs back), then its output" \
	'id ping stdout exit close stdout-all elapsed' "$(kinds s8 | sed 's/ping ping/ping/g')"

# A client that closes, or goes without a close: its command is killed.
for how in close drop; do
	ws "k-$how" "$URL" m "$(first '"argv": ["sh", "-c", "echo $$ > /tmp/p; exec sleep 1000"]')" \
		waitid sleep:1 "$how"
	pid=$(ub exec m -- cat /tmp/p)
	gone=
	for _ in $(seq 20); do
		[ "$(alive "${pid:-0}")" = gone ] && { gone=yes; break; }
		sleep 0.5
	done
	check_eq "a client that goes ($how): its command ($pid) is killed" yes "$gone"
done
check_match "  and hostd lists no command of $U's" '^\{"execs":\[\]\}$' \
	"$(execs)"

# A client that answers no ping (its network went, say): after 30 s of
# silence its session ends and its command is killed.  (In the background,
# while the refusals below run.)
ws np --no-pong "$URL" m "$(first '"argv": ["sleep", "1000"]')" &
NP=$!

# Refusals of the handshake (plain HTTP answers, as hostd's read).
code() { curl -s -o "$T/body" -w '%{http_code}' "$@"; }
WSH=(-H 'Upgrade: websocket' -H 'Connection: Upgrade' -H 'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==')
check_eq "a GET that is no upgrade: 400" 400 "$(code "$URL/v1/machines/m/exec/ws")"
check_match "  naming what is missing" '"invalid_upgrade".*Upgrade: websocket' "$(cat "$T/body")"
check_eq "version 8: 426" 426 "$(code "${WSH[@]}" -H 'Sec-WebSocket-Version: 8' "$URL/v1/machines/m/exec/ws")"
check_match "  with Sec-WebSocket-Version: 13" 'Sec-WebSocket-Version: 13' \
	"$(curl -s -D - -o /dev/null "${WSH[@]}" -H 'Sec-WebSocket-Version: 8' "$URL/v1/machines/m/exec/ws")"
check_eq "POST: 405" 405 "$(code -X POST "$URL/v1/machines/m/exec/ws")"
check_eq "a key that is not 16 bytes: 400" 400 "$(code -H 'Upgrade: websocket' -H 'Connection: Upgrade' \
	-H 'Sec-WebSocket-Version: 13' -H 'Sec-WebSocket-Key: c2hvcnQ=' "$URL/v1/machines/m/exec/ws")"
check_eq "a name that is no machine's: 400 invalid_name" 400 "$(code "${WSH[@]}" -H 'Sec-WebSocket-Version: 13' \
	"$URL/v1/machines/M_x/exec/ws")"
check_match "  saying so" '"invalid_name"' "$(cat "$T/body")"
check_eq "a token with a space in Authorization: 400 invalid_token" 400 "$(code "${WSH[@]}" \
	-H 'Sec-WebSocket-Version: 13' -H 'Authorization: Bearer berth_x y' "$URL/v1/machines/m/exec/ws")"

# Refusals of the command: its error, then close 4000 + hostd's status.
err_close() { echo "$(line "$1" error | python3 -c 'import json,sys; e = json.load(sys.stdin)["error"]; print(e["code"] + ": " + e["message"])')|$(line "$1" close)"; }
ws r1 "$URL" m '{"argv": ["id"]}'
check_match "no token: 4401, unauthorized" '^unauthorized: an API token is required.*\|4401 ' "$(err_close r1)"
ws r2 "$URL" m '{"token": "berth_0000000000000000000000000000000000000000000000000000000000000000", "argv": ["id"]}'
check_match "a refused token: 4401, invalid_token" '^invalid_token: invalid or revoked token\|4401 ' "$(err_close r2)"
ws r3 "$URL" m '{"token": "berth_x\r\nX-Berth-User: root", "argv": ["id"]}'
check_match "a token with CR LF and a header (no token has them): 4400, before hostd" \
	'^invalid_message: the token has characters that no token has.*\|4400 ' "$(err_close r3)"
ws r4 --token "$TOK" "$URL" m "$(first '"argv": ["id"]')"
check_match "a token in Authorization and in the message: 4400" '^invalid_message: a token came twice.*\|4400 ' \
	"$(err_close r4)"
ws r5 "$URL" nosuch "$(first '"argv": ["true"]')"
check_match "no such machine: 4404, naming it" '^not_found: no machine nosuch\|4404 ' "$(err_close r5)"
ws r6 "$URL" m "{\"token\": \"$VTOK\", \"argv\": [\"true\"]}"
check_match "$U's machine with $V's token: 4404, as for none" '^not_found: no machine m\|4404 ' "$(err_close r6)"
ws r7 "$URL" m "$(first '"argvv": ["true"]')"
check_match "an unknown field: 4400, hostd's message" "^unknown_field: unknown field 'argvv'\|4400 " "$(err_close r7)"
ws r8 "$URL" m 'ls -l'
check_match "a first message that is not JSON: 4400" '^invalid_message: the first message is not JSON.*\|4400 ' \
	"$(err_close r8)"
ws r9 "$URL" m - binary:6869
check_match "a binary first message: 4400" '^invalid_message: the first message must be text.*\|4400 ' \
	"$(err_close r9)"
ws r10 "$URL" m -
check_match "no first message in 10 s: 4408" '^timeout: no command within 10 s.*\|4408 ' "$(err_close r10)"
check "  after 10 s" awk '$2 == "close" { t = $1 } END { exit !(t >= 9.5 && t < 13) }' "$T/r10"
ws r11 "$URL" m "$(first '"argv": ["cat"]')" waitid 'text:{"stdin": "aGk="}'
check_match "a text message that is none of resize, signal, eof: 4400" \
	'^invalid_message: a text message is one of.*\|4400 ' "$(err_close r11)"
NTOK=$(ub token create --name gone 2>/dev/null)
NID=$(ub token ls --json | python3 -c 'import json,sys; print([t["id"] for t in json.load(sys.stdin)["tokens"] if t["name"] == "gone"][0])')
ub token rm "$NID" >/dev/null
ws r12 "$URL" m "{\"token\": \"$NTOK\", \"argv\": [\"true\"]}"
check_match "a revoked token: 4401" '^invalid_token: .*\|4401 ' "$(err_close r12)"

wait "$NP"
check_match "a client that answers no ping: its session ends after 30 s (pings at 10 and 20 s)" \
	'^id ping eof stdout-all elapsed$' "$(kinds np)"
check "  at 30 to 35 s" awk '$2 == "elapsed" { t = $3 } END { exit !(t >= 30 && t < 36) }' "$T/np"
# The session logs its end once its command's stream is closed, a moment
# after the client saw the close.
for _ in $(seq 50); do
	grep -q 'its client answered nothing' "$T/web.log" && break
	sleep 0.2
done
check_match "  berth-web says why" 'm: its client answered nothing for 30 s after 3[0-9.]+ s' \
	"$(cat "$T/web.log")"
check_match "  and its command is killed" '^\{"execs":\[\]\}$' \
	"$(execs)"

# Handshakes that never send their first message (no token yet): at most
# 16 wait per client address, the next is refused at once (429); and
# however many addresses hold them, they take no place of a session whose
# token hostd accepted (the 256 of WSEXEC_MAX_SESSIONS).  17 addresses
# (127.0.0.2 to .18) open 17 each; meanwhile 127.0.0.1 runs a command.
cat >"$T/hold.py" <<'PY'
import base64, os, socket, sys, time
port, naddr, per, hold = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
socks, seen = [], {}
for a in range(naddr):
    for _ in range(per):
        s = socket.socket()
        s.bind(("127.0.0.%d" % (2 + a), 0))
        s.connect(("127.0.0.1", port))
        key = base64.b64encode(os.urandom(16)).decode()
        s.sendall(("GET /v1/machines/m/exec/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                   "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                   "Sec-WebSocket-Version: 13\r\n\r\n" % key).encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            d = s.recv(4096)
            if not d:
                break
            buf += d
        st = buf.split(b" ")[1].decode() if buf.count(b" ") else "none"
        if st == "429" and b"too_many_pending" not in buf:
            st = "429-without-its-code"
        seen[st] = seen.get(st, 0) + 1
        socks.append(s)
print(" ".join("%s:%d" % kv for kv in sorted(seen.items())), flush=True)
time.sleep(hold)
PY
python3 "$T/hold.py" "$PORT" 17 17 6 >"$T/hold.out" 2>&1 &
HOLD=$!
for _ in $(seq 100); do [ -s "$T/hold.out" ] && break; sleep 0.1; done
ws held "$URL" m "$(first '"argv": ["echo", "in"]')"
wait "$HOLD"
check_eq "17 handshakes from each of 17 addresses that say nothing: 16 each get 101, the 17th 429" \
	"101:272 429:17" "$(cat "$T/hold.out")"
check_eq "  meanwhile another address's command runs (272 wait, none counts yet)" '"in\n"|{"exit": 0}' \
	"$(line held stdout-all)|$(line held exit)"
check_match "  berth-web says why it refused" \
	'wsexec 127\.0\.0\.2: refused: 16 sessions of 127\.0\.0\.2 wait for their token' "$(cat "$T/web.log")"
# (272 upgraded connections closed at once: libmicrohttpd 0.9.75 freed
# some while their close was still inside it, web/upgrade.h)
sleep 1
check_eq "  and berth-web still answers once they all went at once" 200 "$(code "$URL/")"

# RFC 6455's refusals, after the command started: the close code says
# which, and the command is killed.
ws p1 "$URL" m "$(first '"argv": ["cat"]')" waitid frame:8205414243444546
check_eq "an unmasked frame: 1002" "1002 a client's frame must be masked" "$(line p1 close)"
head -c 65537 /dev/zero >"$T/big"
ws p2 "$URL" m "$(first '"argv": ["cat"]')" waitid "binary-file:$T/big"
check_eq "a message of 64 KiB + 1: 1009" "1009 a message over the size allowed" "$(line p2 close)"
ws p3 "$URL" m "$(first '"argv": ["cat"]')" waitid frame:81820000000000ff
check_eq "text that is not UTF-8: 1007" "1007 a text message that is not UTF-8" "$(line p3 close)"
ws p4 "$URL" m "$(first '"argv": ["cat"]')" waitid frame:c18100000000ff
check_eq "a reserved bit (compression was not agreed): 1002" \
	"1002 a reserved bit is set (no extension was agreed)" "$(line p4 close)"
check_match "  and their commands are killed: hostd lists none" '^\{"execs":\[\]\}$' \
	"$(execs)"

# The dashboard: its CSP as before; the terminal in Chromium.
check_match "the page's Content-Security-Policy is as strict as before" \
	"Content-Security-Policy: default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'" \
	"$(curl -s -D - -o /dev/null "$URL/" | tr -d '\r')"
for f in xterm/lib/xterm.js addon-fit/lib/addon-fit.js xterm/css/xterm.css; do
	check_eq "berth-web serves /xterm/$f" 200 "$(code "$URL/xterm/$f")"
done
ART=$ROOT/build/test-artifacts
PW=$ROOT/build/node/node_modules/playwright-core/index.mjs
if ! command -v node >/dev/null || [ ! -x /usr/bin/chromium ] || [ ! -f "$PW" ]; then
	skip "the terminal in a browser: needs node, /usr/bin/chromium and $PW (sh deploy/install-deps.sh test)"
else
	node "$ROOT/tests/browser/terminal.mjs" "$URL/" "$TOK" m "$ART" -- \
		setpriv --reuid="$U" --regid="$(id -g "$U")" --clear-groups \
		"$BIN/berth" --state "$STATE" suspend m >"$T/browser.out" 2>&1
	done_seen=0
	while IFS='|' read -r kind what why; do
		case $kind in
		PASS) ok "browser: $what" ;;
		FAIL) not_ok "browser: $what"; diag "$why" ;;
		SCREENSHOT) diag "screenshot: $what" ;;
		DONE) done_seen=1 ;;
		*) diag "browser: $kind $what" ;;
		esac
	done <"$T/browser.out"
	check_eq "the browser run finished" 1 "$done_seen"
fi

# berth-web's stop: an open session's client is told (1001), its command
# killed.
ws s9 "$URL" m "$(first '"argv": ["sh", "-c", "echo $$ > /tmp/p; exec sleep 1000"]')" waitid \
	wait:never-written &
sp=$!
for _ in $(seq 50); do grep -q '^[0-9.]* id ' "$T/s9" 2>/dev/null && break; sleep 0.2; done
sleep 1
pid=$(ub exec m -- cat /tmp/p)
web_down
wait "$sp"
check_eq "berth-web stopping: an open session gets close 1001" "1001 berth-web is stopping" "$(line s9 close)"
gone=
for _ in $(seq 20); do
	[ "$(alive "${pid:-0}")" = gone ] && { gone=yes; break; }
	sleep 0.5
done
check_eq "  and its command ($pid) is killed" yes "$gone"
check_match "berth-web logs each session, how it ended" \
	'wsexec 127\.0\.0\.1: m: \{"exit":3\} after [0-9.]+ s' "$(cat "$T/web.log")"

# Over TLS (libmicrohttpd's: the session gets one end of a socket pair
# that libmicrohttpd pumps through TLS): the same session, and a client
# that drops is found out at the next ping.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
	-subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 \
	-keyout "$T/key.pem" -out "$T/cert.pem" 2>"$T/openssl.err" || diag "$(cat "$T/openssl.err")"
kill_hostd TERM
printf 'tls_cert = %s\ntls_key = %s\n' "$T/cert.pem" "$T/key.pem" >>"$STATE/berth.conf"
start_hostd && web_up || not_ok "hostd and berth-web with TLS"
SURL=https://127.0.0.1:$PORT
ws t1 --cafile "$T/cert.pem" "$SURL" m "$(first '"cmd": "stty size; read a; echo got $a", "pty": {"cols": 90, "rows": 20}')" \
	waitid wait:'20 90' 'stdin:tls\r'
check_eq "over TLS (wss): a PTY's size, stdin, output, the exit" '"20 90\r\ntls\r\ngot tls\r\n"|{"exit": 0}' \
	"$(line t1 stdout-all)|$(line t1 exit)"
ws t2 --cafile "$T/cert.pem" "$SURL" m "$(first '"argv": ["sh", "-c", "echo $$ > /tmp/p; exec sleep 1000"]')" \
	waitid sleep:1 drop
pid=$(ub exec m -- cat /tmp/p)
gone=
for _ in $(seq 30); do
	[ "$(alive "${pid:-0}")" = gone ] && { gone=yes; break; }
	sleep 0.5
done
check_eq "over TLS a client that drops: its command ($pid) is killed (by the next ping, 10 s)" yes "$gone"
web_down
check_absent "the tokens are in no log" matching "$TOK|$VTOK|$NTOK" cat "$T/web.log" "$T/hostd.log"
ub rm m >/dev/null
finish
