#!/bin/bash
# E2B's data plane (envd) on berth-web (web/envd.c), driven by a raw
# Connect client (tests/connect_client.py: it builds the envelopes and
# checks the framing byte by byte) over HTTP with the Host
# 49983-NAME-USER.localhost, as a user who is not root: process Start
# (output, exit codes), a background process that outlives its client,
# then Connect to it and SendSignal, SendInput and CloseStdin, a PTY and
# its resize, List; Stat, ListDir, MakeDir, Move, Remove, WatchDir; /files
# up (multipart with two files, octet-stream gzip, an empty file) and down;
# /health; E2b-Sandbox-Id routing; and the refusals: no token, a wrong one,
# another user's sandbox, a path the user may not write, malformed
# envelopes and JSON; a stream whose machine is deleted.
. "$(dirname "$0")/../lib.sh"

command -v setpriv >/dev/null || { skip "setpriv is not installed (util-linux)"; finish; }

chmod 711 "$T"
U=bt$$e
V=bt$$v
test_user "$U" && test_user "$V" || { not_ok "useradd $U $V"; finish; }
PORT=$(free_port)
mkdir -p "$STATE"
echo "http_listen = 127.0.0.1:$PORT" >>"$STATE/berth.conf"
start_hostd && build_tiny || { not_ok "hostd and image"; finish; }
web_up || not_ok "berth-web starts"

ub() { as_user "$U" "$BIN/berth" --state "$STATE" "$@"; }
TOK=$(ub token create --name envd 2>/dev/null)
VTOK=$(as_user "$V" "$BIN/berth" --state "$STATE" token create --name other 2>/dev/null)
check_match "a token for $U" '^berth_[0-9a-f]{64}$' "$TOK"
H=49983-m-$U.localhost
# cc ARGS...: the Connect client on m's envd host with U's token.
cc() { python3 "$ROOT/tests/connect_client.py" --port "$PORT" --host "$H" --token "$TOK" "$@"; }
P=/process.Process
F=/filesystem.Filesystem
# b64 S: S in base64; outs FILE KEY: the KEY data of a stream's messages,
# decoded and joined.
b64() { printf '%s' "$1" | base64 -w0; }
outs() {
	python3 -c 'import base64, json, sys
out = b""
for l in open(sys.argv[1]):
    p = l.split(" ", 2)
    if len(p) == 3 and p[1] == "msg":
        d = json.loads(p[2]).get("event", {}).get("data", {})
        out += base64.b64decode(d.get(sys.argv[2], ""))
sys.stdout.write(out.decode("utf-8", "replace"))' "$1" "$2"
}
pid_of() { sed -n 's/.*"start": {"pid": \([0-9]*\)}.*/\1/p' "$1" | head -1; }

check_eq "$U creates m" running "$(ub create m --json | json state)"

check_eq "GET /health: 204 while it runs" "204 " "$(cc get /health)"

# Start: output, then the exit code.
cc stream $P/Start '{"process": {"cmd": "/bin/sh", "args": ["-c", "echo hi; echo warn >&2"]}, "stdin": false}' >"$T/s1"
diag "$(tr '\n' '|' <"$T/s1")"
check_match "Start: the first message is start{pid}" '^[0-9.]+ msg \{"event": \{"start": \{"pid": [0-9]+\}\}\}$' "$(sed -n 1p "$T/s1")"
check_eq "  stdout as data.stdout" "hi" "$(outs "$T/s1" stdout)"
check_eq "  stderr as data.stderr" "warn" "$(outs "$T/s1" stderr)"
check_match "  the end event, exit code 0" 'msg \{"event": \{"end": \{"exitCode": 0, "exited": true, "status": "exit status 0"\}\}\}' "$(cat "$T/s1")"
check_match "  and the end-stream {} last" ' end \{\}$' "$(tail -n 1 "$T/s1")"

cc stream $P/Start '{"process": {"cmd": "/bin/sh", "args": ["-c", "exit 3"], "envs": {"X": "y"}, "cwd": "/tmp"}}' >"$T/s2"
check_match "a non-zero exit: exitCode 3, envd's error" '"end": \{"error": "exit status 3", "exitCode": 3, "exited": true, "status": "exit status 3"\}' "$(cat "$T/s2")"
cc stream $P/Start '{"process": {"cmd": "/bin/sh", "args": ["-c", "echo $X $PWD"], "envs": {"X": "y"}, "cwd": "/tmp"}}' >"$T/s3"
check_eq "envs and cwd reach the process" "y /tmp" "$(outs "$T/s3" stdout)"
cc stream $P/Start '{"process": {"cmd": "/bin/sh", "args": ["-c", "cd /nonexistent-dir"]}}' >"$T/s4"
check_match "a failing command's end: exited, non-zero" '"exitCode": [1-9]' "$(cat "$T/s4")"

# Keepalives: a quiet process, Keepalive-Ping-Interval 1.
cc --keepalive 1 stream $P/Start '{"process": {"cmd": "sleep", "args": ["3"]}}' >"$T/ka"
nka=$(grep -c 'msg {"event": {"keepalive": {}}}' "$T/ka")
check "a process quiet for 3 s with Keepalive-Ping-Interval 1: keepalive messages ($nka)" test "$nka" -ge 2
check_match "  and its end after them" '"end": \{"exitCode": 0' "$(cat "$T/ka")"

# What the Connect layer costs: 10 Starts of true against 10 berth exec (hostd's
# exec over HTTP on the same kept SSH session).
ms=$(cc --repeat 10 stream $P/Start '{"process": {"cmd": "true"}}' | sed -n 's/^repeat //p')
t1=$(date +%s%N)
for _ in 1 2 3 4 5 6 7 8 9 10; do ub exec m -- true; done
t2=$(date +%s%N)
diag "Start of true, request to end-stream: $ms ms each (10, one client process); berth exec true: $(((t2 - t1) / 10000000)) ms each"

# A background process: its client goes after the start and first output.
cc stream $P/Start '{"process": {"cmd": "/bin/sh", "args": ["-c", "i=0; while true; do echo tick$i; i=$((i+1)); sleep 1; done"]}, "stdin": false}' 2 >"$T/bg"
BG=$(pid_of "$T/bg")
check_match "background: the client cut after 2 messages" 'cut$' "$(tail -n 1 "$T/bg")"
sleep 2
cc unary $P/List '{}' >"$T/list"
check_match "List shows it, with its config" "\"config\": \\{\"args\": \\[\"-c\", \"i=0; while true.*\"cmd\": \"/bin/sh\".*\"pid\": $BG\\}" "$(cat "$T/list")"
cc --timeout-ms 3500 stream $P/Connect "{\"process\": {\"pid\": $BG}}" >"$T/conn"
diag "$(tr '\n' '|' <"$T/conn" | cut -c1-400)"
check_match "Connect: start{pid} first" "^[0-9.]+ msg \\{\"event\": \\{\"start\": \\{\"pid\": $BG\\}\\}\\}" "$(sed -n 1p "$T/conn")"
check_match "  then its live output (it outlived its client)" 'tick[0-9]+' "$(outs "$T/conn" stdout)"
check_match "  ends at Connect-Timeout-Ms with deadline_exceeded" 'end \{"error": \{"code": "deadline_exceeded"' "$(tail -n 1 "$T/conn")"
check_eq "SendSignal SIGKILL: {}" "200 {}" "$(cc unary $P/SendSignal "{\"process\": {\"pid\": $BG}, \"signal\": \"SIGNAL_SIGKILL\"}")"
for _ in $(seq 50); do cc unary $P/List '{}' | grep -q "\"pid\": $BG}" || break; sleep 0.2; done
LS=$(cc unary $P/List '{}')
if [[ $LS == 200* && $LS != *"\"pid\": $BG}"* ]]; then ok "  it is listed no more"
else not_ok "  it is listed no more"; diag "$LS"; fi
check_match "SendSignal to it again: not_found (the SDK's false)" '^404 \{"code": "not_found"' \
	"$(cc unary $P/SendSignal "{\"process\": {\"pid\": $BG}, \"signal\": \"SIGNAL_SIGKILL\"}")"
check_match "Connect to a pid that is none: not_found" 'end \{"error": \{"code": "not_found"' \
	"$(cc stream $P/Connect '{"process": {"pid": 999999}}')"

# SendInput and CloseStdin: cat.
cc stream $P/Start '{"process": {"cmd": "cat"}, "stdin": true}' >"$T/cat" &
CATJ=$!
for _ in $(seq 100); do [ -n "$(pid_of "$T/cat")" ] && break; sleep 0.1; done
CAT=$(pid_of "$T/cat")
check_eq "SendInput stdin" "200 {}" "$(cc unary $P/SendInput "{\"process\": {\"pid\": $CAT}, \"input\": {\"stdin\": \"$(b64 'data-in')\"}}")"
check_eq "CloseStdin" "200 {}" "$(cc unary $P/CloseStdin "{\"process\": {\"pid\": $CAT}}")"
wait $CATJ
check_eq "  cat echoed it and ended" "data-in" "$(outs "$T/cat" stdout)"
check_match "  exit 0" '"exitCode": 0' "$(cat "$T/cat")"

# A PTY, its resize.
cc stream $P/Start '{"process": {"cmd": "/bin/sh", "args": ["-c", "stty size; read x; stty size"]}, "pty": {"size": {"cols": 80, "rows": 24}}}' >"$T/pty" &
PTYJ=$!
for _ in $(seq 100); do grep -q '"pty"' "$T/pty" && break; sleep 0.1; done
PT=$(pid_of "$T/pty")
check_eq "Update: the PTY resized" "200 {}" "$(cc unary $P/Update "{\"process\": {\"pid\": $PT}, \"pty\": {\"size\": {\"cols\": 100, \"rows\": 30}}}")"
sleep 0.5
check_eq "SendInput pty" "200 {}" "$(cc unary $P/SendInput "{\"process\": {\"pid\": $PT}, \"input\": {\"pty\": \"$(b64 $'\r')\"}}")"
wait $PTYJ
check_match "  its output came as data.pty: 24 80, then 30 100" '24 80.*30 100' "$(outs "$T/pty" pty | tr -d '\r' | tr '\n' ' ')"

# The filesystem service.
check_match "MakeDir with parents: its entry" '^200 \{"entry": \{.*"name": "d2".*"path": "/root/d1/d2".*"type": "FILE_TYPE_DIRECTORY"' \
	"$(cc unary $F/MakeDir '{"path": "/root/d1/d2"}')"
check_match "MakeDir again: already_exists" '^409 \{"code": "already_exists"' "$(cc unary $F/MakeDir '{"path": "/root/d1/d2"}')"
printf 'hello' >"$T/h.txt"
check_match "POST /files octet-stream" '^200 \[\{"name": "h.txt", "path": "/root/d1/h.txt", "type": "file"\}\]' \
	"$(cc post '/files?path=/root/d1/h.txt' application/octet-stream "$T/h.txt")"
check_match "Stat: EntryInfo as envd's" '^200 \{"entry": \{"group": "root", "mode": 420, "modifiedTime": "20[0-9-]+T[0-9:]+Z", "name": "h.txt", "owner": "root", "path": "/root/d1/h.txt", "permissions": "-rw-r--r--", "size": "5", "type": "FILE_TYPE_FILE"\}\}' \
	"$(cc unary $F/Stat '{"path": "/root/d1/h.txt"}')"
check_match "Stat of nothing: not_found" '^404 \{"code": "not_found"' "$(cc unary $F/Stat '{"path": "/nope"}')"
L=$(cc unary $F/ListDir '{"path": "/root/d1", "depth": 2}')
check_match "ListDir depth 2: d2 and h.txt" '"path": "/root/d1/d2".*"path": "/root/d1/h.txt"|"path": "/root/d1/h.txt".*"path": "/root/d1/d2"' "$L"
check_match "Move: the destination's entry" '^200 \{"entry": \{.*"path": "/root/d1/d2/g.txt"' \
	"$(cc unary $F/Move '{"source": "/root/d1/h.txt", "destination": "/root/d1/d2/g.txt"}')"
check_match "Move of nothing: not_found" '^404 \{"code": "not_found"' \
	"$(cc unary $F/Move '{"source": "/root/nope", "destination": "/root/x"}')"
check_eq "Remove (recursive)" "200 {}" "$(cc unary $F/Remove '{"path": "/root/d1"}')"
check_match "  gone" '^404 \{"code": "not_found"' "$(cc unary $F/Stat '{"path": "/root/d1"}')"

# WatchDir: start first, then the events.
ub exec m -- mkdir -p /root/w
ub exec m -- sh -c 'echo old >/root/w/gone'
cc --timeout-ms 7000 stream $F/WatchDir '{"path": "/root/w"}' >"$T/watch" &
WJ=$!
for _ in $(seq 100); do grep -q 'msg' "$T/watch" && break; sleep 0.1; done
ub exec m -- sh -c 'echo a >/root/w/a; rm /root/w/gone'
sleep 2
ub exec m -- sh -c 'echo more >>/root/w/a'
wait $WJ
diag "$(tr '\n' '|' <"$T/watch")"
check_match "WatchDir: {\"start\": {}} first" '^[0-9.]+ msg \{"start": \{\}\}$' "$(sed -n 1p "$T/watch")"
check_match "  CREATE" '"filesystem": \{"name": "a", "type": "EVENT_TYPE_CREATE"\}' "$(cat "$T/watch")"
check_match "  REMOVE" '"filesystem": \{"name": "gone", "type": "EVENT_TYPE_REMOVE"\}' "$(cat "$T/watch")"
check_match "  WRITE" '"filesystem": \{"name": "a", "type": "EVENT_TYPE_WRITE"\}' "$(cat "$T/watch")"
check_match "  the end at its timeout: deadline_exceeded" 'end \{"error": \{"code": "deadline_exceeded"' "$(tail -n 1 "$T/watch")"
check_match "WatchDir of nothing: not_found" 'end \{"error": \{"code": "not_found"' \
	"$(cc stream $F/WatchDir '{"path": "/root/nowhere"}')"

# /files: multipart with two files, octet-stream gzip, empty, download.
head -c 100000 /dev/urandom >"$T/one.bin"
printf 'second file\n' >"$T/two.txt"
check_match "POST /files multipart, two files (one relative to home)" \
	'^200 \[\{"name": "rel.bin", "path": "/root/rel.bin", "type": "file"\}, \{"name": "b.txt", "path": "/tmp/up/b.txt", "type": "file"\}\]' \
	"$(cc multipart /files "rel.bin=$T/one.bin" "/tmp/up/b.txt=$T/two.txt")"
check_eq "  GET /files: the first byte-exact" "200 100000 $(sha256sum <"$T/one.bin" | cut -d' ' -f1)" \
	"$(cc get '/files?path=rel.bin')"
check_eq "  the second" "200 12 $(sha256sum <"$T/two.txt" | cut -d' ' -f1)" "$(cc get '/files?path=/tmp/up/b.txt')"
head -c 300000 /dev/urandom | base64 >"$T/plain"
gzip -c "$T/plain" >"$T/plain.gz"
check_match "POST /files octet-stream with Content-Encoding: gzip" '^200 \[\{"name": "z.txt"' \
	"$(cc post '/files?path=/root/z.txt' application/octet-stream "$T/plain.gz" gzip)"
check_eq "  arrives inflated" "200 $(wc -c <"$T/plain" | tr -d ' ') $(sha256sum <"$T/plain" | cut -d' ' -f1)" \
	"$(cc get '/files?path=/root/z.txt')"
: >"$T/empty"
cc post '/files?path=/root/empty' application/octet-stream "$T/empty" >/dev/null
check_eq "an empty file: Content-Length 0" "200 0 $(sha256sum </dev/null | cut -d' ' -f1)" "$(cc get '/files?path=/root/empty')"
check_match "GET /files of nothing: 404 {code: 404}" '^404 \{"code":404' "$(cc get '/files?path=/root/nope')"
check_match "GET /files of a directory: 400" '^400 ' "$(cc get '/files?path=/root')"
printf 'x\n' >"$T/bad.gz"
check_match "gzip that is not: 400" '^400 ' "$(cc post '/files?path=/root/q' application/octet-stream "$T/bad.gz" gzip)"
check_match "a multipart body cut short: 400, nothing written" '^400 ' \
	"$(cc raw /files 'multipart/form-data; boundary=XX' "$(printf -- '--XX\r\nContent-Disposition: form-data; name="file"; filename="/root/cut"\r\n\r\nabc' | xxd -p | tr -d '\n')")"
check_match "  (no /root/cut)" '^404 ' "$(cc unary $F/Stat '{"path": "/root/cut"}')"

# Refusals.
cc_none() { python3 "$ROOT/tests/connect_client.py" --port "$PORT" --host "$H" "$@"; }
check_match "no token: 401 unauthenticated" '^401 \{"code": "unauthenticated"' "$(cc_none unary $F/Stat '{"path": "/"}')"
check_match "no token on a stream: 200 + end-stream unauthenticated" 'end \{"error": \{"code": "unauthenticated"' \
	"$(cc_none stream $P/Start '{"process": {"cmd": "true"}}')"
check_match "a wrong token: 401" '^401 \{"code": "unauthenticated"' \
	"$(cc_none --token "berth_$(head -c 32 /dev/urandom | xxd -p -c 64)" unary $F/Stat '{"path": "/"}')"
check_match "no token on /files: 401" '^401 ' "$(cc_none get '/files?path=/root/empty')"
check_match "the token as e2b_HEX works" '^200 \{"entry"' \
	"$(cc_none --token "e2b_${TOK#berth_}" unary $F/Stat '{"path": "/"}')"
check_match "$V's token on $U's sandbox: not_found" '^404 \{"code": "not_found"' \
	"$(cc_none --token "$VTOK" unary $F/Stat '{"path": "/"}')"
check_match "  its /health too: 404" '^404 ' "$(cc_none --token "$VTOK" get /health)"
check_match "a sandbox id that is not: not_found" '^404 \{"code": "not_found"' \
	"$(python3 "$ROOT/tests/connect_client.py" --port "$PORT" --host "49983-nosuch-$U.localhost" --token "$TOK" unary $F/Stat '{"path": "/"}')"
# (tiny's login user is root, who writes anywhere: the probe is a command as
# nobody, which the Basic user selects)
cc --user nobody stream $P/Start '{"process": {"cmd": "/bin/sh", "args": ["-c", "id -un; touch /root/by-nobody"]}}' >"$T/nobody"
check_eq "as user nobody (Authorization: Basic), the command runs as nobody" nobody "$(outs "$T/nobody" stdout)"
check_match "  and its write to /root is refused: permission denied, exit 1" 'Permission denied' "$(outs "$T/nobody" stderr)"
check_match "  exitCode 1" '"exitCode": 1' "$(cat "$T/nobody")"
check_match "  (/root/by-nobody is not there)" '^404 ' "$(cc unary $F/Stat '{"path": "/root/by-nobody"}')"
cc stream $P/Start '{"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "echo via-sh $0"]}}' >"$T/bash"
check_match "/bin/bash (what the SDK runs) on an image without bash: its /bin/sh" '^via-sh ' "$(outs "$T/bash" stdout)"
check_match "files as another user than the login user: refused" '^401 \{"code": "unauthenticated"' \
	"$(cc --user nobody unary $F/Stat '{"path": "/"}')"
check_match "an envelope with the compression flag: 200 + end-stream invalid_argument" '^200 \.\.\.\..\{"error":\{"code":"invalid_argument"' \
	"$(cc raw $P/Start application/connect+json 01000000027b7d)"
check_match "an envelope whose length is not the body's: invalid_argument" '^200 .*"code":"invalid_argument"' \
	"$(cc raw $P/Start application/connect+json 00000000ff7b7d)"
check_match "a stream body of 3 bytes: invalid_argument" '^200 .*"code":"invalid_argument"' \
	"$(cc raw $P/Start application/connect+json 000000)"
check_match "unary JSON that is not: 400 invalid_argument" '^400 \{"code": "invalid_argument"' \
	"$(cc raw $F/Stat application/json 7b2270617468)"
check_match "a JSON array: invalid_argument" '^400 \{"code": "invalid_argument"' "$(cc unary $F/Stat '[1]')"
check_match "an unknown method: unimplemented" '^501 \{"code": "unimplemented"' "$(cc unary $P/StreamInput '{}')"
check_eq "berth-web still up after all that" "204 " "$(cc get /health)"

# E2b-Sandbox-Id on another host (E2B_SANDBOX_URL's single endpoint).
check_match "routed by E2b-Sandbox-Id on 127.0.0.1" '^200 \{"entry": \{.*"path": "/tmp"' \
	"$(python3 "$ROOT/tests/connect_client.py" --port "$PORT" --host "127.0.0.1:$PORT" --sandbox "m-$U" --token "$TOK" unary $F/Stat '{"path": "/tmp"}')"

# A stream whose machine goes: an end-stream error, not a cut body.
cc stream $P/Start '{"process": {"cmd": "sleep", "args": ["300"]}}' >"$T/del" &
DJ=$!
for _ in $(seq 100); do [ -n "$(pid_of "$T/del")" ] && break; sleep 0.1; done
ub suspend m >/dev/null 2>&1
check_eq "GET /health of a suspended machine: 502" 502 "$(cc get /health | cut -d' ' -f1)"
ub delete m >/dev/null 2>&1
wait $DJ
check_match "a stream whose machine was deleted ends with an end-stream error" 'end \{"error": \{"code": "unavailable"' "$(tail -n 1 "$T/del")"
check_match "berth-web's log has no crash" 'listening' "$(cat "$T/web.log")"
kill -0 "$WEB_PID" 2>/dev/null && ok "berth-web still runs" || not_ok "berth-web still runs"

finish
