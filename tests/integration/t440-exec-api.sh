#!/bin/bash
# Commands through hostd (POST /v1/machines/NAME/exec, hostd/exec.c), for a
# user who is not root: `berth exec` as that user (stdout and stderr apart,
# the exit status, stdin of 1 MiB byte-exact, a wake), the NDJSON stream as
# it arrives (the first line before the command ends), a signal, more stdin
# and its EOF, the list of running commands, a timeout, env/cwd/user, a
# client that goes (its command is killed), the quota max_execs, every
# refusal with its message, the same route over HTTP with the user's token,
# and a command ended by its machine's deletion.
. "$(dirname "$0")/../lib.sh"

command -v setpriv >/dev/null || { skip "setpriv is not installed (util-linux)"; finish; }

chmod 711 "$T"
U=bt$$x
test_user "$U" || { not_ok "useradd $U"; finish; }
PORT=$(free_port)
mkdir -p "$STATE"
cat >>"$STATE/berth.conf" <<EOF
http_listen = 127.0.0.1:$PORT
max_execs = 2
api_send_timeout = 4s
EOF
start_hostd && build_tiny || { not_ok "hostd and image"; finish; }
web_up || not_ok "berth-web starts"

# ub ARGS...: the berth CLI as $U; ux ARGS...: exec_client.py as $U on the socket.
ub() { as_user "$U" "$BIN/berth" --state "$STATE" "$@"; }
# (/usr/bin/python3: a python of root's, pyenv's say, may be root's alone.)
ux() { as_user "$U" /usr/bin/python3 "$ROOT/tests/exec_client.py" --sock "$STATE/hostd.sock" "$@"; }
E=/v1/machines/m/exec
# outs FILE: the stdout pieces of a stream exec_client.py printed, joined,
# each newline as '|' (pieces may come joined or apart: both read the same).
outs() {
	python3 -c 'import json, re, sys
print("".join(json.loads(l.split(" ", 1)[1]).get("stdout", "") for l in open(sys.argv[1])
              if re.match(r"[0-9.]+ [{]", l)).replace("\r", "").replace("\n", "|"))' "$1"
}

check_eq "$U creates m" running "$(ub create m --json | json state)"

# berth exec as a user who is not root: through hostd.
check_eq "exec hostname as $U" m "$(ub exec m -- hostname)"
ub exec m -- sh -c 'exit 3'
check_eq "the exit status comes back" 3 "$?"
out=$(ub exec m -- sh -c 'echo to-out; echo to-err >&2' 2>"$T/err")
check_eq "stdout is separate" to-out "$out"
check_eq "stderr is separate" to-err "$(cat "$T/err")"
check_eq "arguments keep their quoting" "a b|c'd" "$(ub exec m -- printf '%s|%s' 'a b' "c'd")"
head -c 1048576 /dev/urandom >"$T/in.bin"
check_eq "1 MiB of stdin arrives byte-exact" "$(sha256sum <"$T/in.bin" | cut -d' ' -f1)" \
	"$(ub exec m -- sha256sum <"$T/in.bin" | cut -d' ' -f1)"
ub exec m -- head -c 3000000 /dev/urandom | wc -c >"$T/n"
check_eq "3 MB of stdout arrive whole" 3000000 "$(tr -d ' ' <"$T/n")"
ub exec m -- sh -c 'kill -TERM $$'
check_eq "a command killed by a signal: 128 + 15" 143 "$?"
ub exec nosuch -- true 2>"$T/err"
check_eq "exec in no machine: 255" 255 "$?"
check_eq "  saying so" "berth: no machine nosuch" "$(cat "$T/err")"

# The stream as it arrives.
ux stream $E '{"argv": ["sh", "-c", "echo first; sleep 4; echo second >&2; exit 5"]}' >"$T/s1"
diag "$(tr '\n' '|' <"$T/s1")"
check_match "the first line is the command's id" '^[0-9.]+ \{"id": [0-9]+\}$' "$(sed -n 1p "$T/s1")"
t_first=$(awk '/"stdout": "first/ { print $1 }' "$T/s1")
t_end=$(awk '/"exit"/ { print $1 }' "$T/s1")
check "its first output arrives before it ends (at ${t_first:-?} s, the end at ${t_end:-?} s)" \
	awk -v a="$t_first" -v b="$t_end" 'BEGIN { exit !(a != "" && b != "" && a < 3 && b >= 4) }'
check_match "stderr comes as stderr" '"stderr": "second' "$(cat "$T/s1")"
check_match "the last line is the exit status" '\{"exit": 5\}$' "$(tail -n 1 "$T/s1")"

# A quiet command outlasts api_send_timeout (4 s here): keepalive lines.
ux stream $E '{"argv": ["sh", "-c", "sleep 9; echo late"]}' >"$T/s9"
check_match "a command quiet for 9 s (api_send_timeout 4 s) is not dropped" \
	'"keepalive": true.*"stdout": "late\\n".*"exit": 0' "$(tr '\n' ' ' <"$T/s9")"

# A signal, stdin sent while it runs, its EOF, the list.
ux stream-then $E '{"argv": ["sleep", "100"]}' list signal:TERM >"$T/s2"
check_match "a running command is listed, with its argv" \
	'^list 200 \{"execs": \[\{"argv": \["sleep", "100"\], "id": [0-9]+, "started": [0-9]+, "stdin_open": false, "user": "root"\}\]\}' \
	"$(grep '^list' "$T/s2")"
check_match "signal TERM is taken" '^signal 200 .*"signal": "TERM"' "$(grep '^signal' "$T/s2")"
check_match "the command ends by it: 143, signal TERM" '\{"exit": 143, "signal": "TERM"\}$' "$(tail -n 1 "$T/s2")"
ux stream-then $E '{"argv": ["sh", "-c", "read a; echo got $a; cat"], "stdin": "b25lCg==", "stdin_open": true}' \
	stdin:two eof >"$T/s3"
check_eq "stdin: the request's, then more, then EOF" "got one|two" "$(outs "$T/s3")"
check_match "  and it ends" '"exit": 0\}$' "$(tail -n 1 "$T/s3")"
check_match "  more stdin is taken whole" '^stdin 200 \{"written": 3\}' "$(grep '^stdin' "$T/s3")"
ux stream-then $E '{"argv": ["true"]}' sleep:1 stdin:x >"$T/s4"
check_match "stdin for a command that ended (or never had it open): refused" \
	'^stdin (404|409) .*(no command [0-9]+ running in m|stdin is closed)' "$(grep '^stdin' "$T/s4")"

# A timeout kills it; env, cwd and user.
ux stream $E '{"argv": ["sleep", "100"], "timeout": 2}' >"$T/s5"
check_match "timeout 2: killed, said so" '"exit": 137, "signal": "KILL", "timed_out": true' "$(tail -n 1 "$T/s5")"
check "  within 8 s" awk 'END { exit !($1 < 8) }' "$T/s5"
ux stream $E '{"cmd": "echo \"$FOO\"; pwd; id -un", "env": {"FOO": "a b'"'"'c"}, "cwd": "/tmp", "user": "nobody"}' >"$T/s6"
check_eq "env, cwd and user (a shell string)" "a b'c|/tmp|nobody|" "$(outs "$T/s6")"

# A terminal: its size, a resize while it runs.
ux stream $E '{"argv": ["sh", "-c", "stty size; tty"], "pty": {"cols": 100, "rows": 30}}' >"$T/p1"
check_match "a command on a terminal of 100 x 30" '^30 100\|/dev/pts/[0-9]+\|$' "$(outs "$T/p1")"
ux stream-then $E '{"cmd": "sleep 2; stty size", "pty": {"cols": 80, "rows": 24}}' sleep:0.5 resize:132x43 >"$T/p2"
check_match "  resized while it runs: 132 x 43" '^43 132\|$' "$(outs "$T/p2")"
check_match "  the resize is taken" '^resize 200 \{"cols": 132, "id": [0-9]+, "rows": 43\}' "$(grep '^resize' "$T/p2")"
check_match "a resize of a command without a terminal: 409" '^resize 409 .*runs without a terminal' \
	"$(ux stream-then $E '{"argv": ["sleep", "1"]}' resize:80x24 | grep '^resize')"
check_match "a terminal of 0 columns: 400" '^400 .*"pty\\" must be' \
	"$(ux stream $E '{"argv": ["true"], "pty": {"cols": 0, "rows": 24}}')"

# A client that goes: its command is killed.
alive() { ub exec m -- sh -c "kill -0 $1 2>/dev/null && echo alive || echo gone"; }
ux stream-then $E '{"argv": ["sh", "-c", "echo $$ > /tmp/pid; exec sleep 1000"]}' sleep:4 close >/dev/null &
sp=$!
sleep 2
pid=$(ub exec m -- cat /tmp/pid)
check_match "a command runs with its client (pid ${pid:-none})" '^[0-9]+ alive$' "$pid $(alive "${pid:-0}")"
wait "$sp"
gone=
for _ in $(seq 20); do
	[ "$(alive "${pid:-0}")" = gone ] && { gone=yes; break; }
	sleep 0.5
done
check_eq "  and is killed when its client goes" yes "$gone"
check_match "  and no longer listed" '^200 \{"execs": \[\]\}' "$(ux call GET $E)"

# max_execs = 2: a third at once is refused.
ux stream $E '{"argv": ["sleep", "6"]}' >/dev/null &
PIDS+=($!)
ux stream $E '{"argv": ["sleep", "6"]}' >/dev/null &
PIDS+=($!)
sleep 2
check_match "a third command at once: 403 naming max_execs" \
	'^403 .*quota max_execs: 2 commands running at once at most, you have 2' \
	"$(ux stream $E '{"argv": ["true"]}')"
wait "${PIDS[@]}" 2>/dev/null
PIDS=()

# Refusals, each naming the problem.
check_match "argv and cmd both: 400" '^400 .*give the command as \\"argv\\".*one of them' \
	"$(ux stream $E '{"argv": ["true"], "cmd": "true"}')"
check_match "an unknown field: 400" "^400 .*unknown field 'argvv'" "$(ux stream $E '{"argvv": ["true"]}')"
check_match "an env name that is not one: 400" "^400 .*env: 'A-B' is not a variable name" \
	"$(ux stream $E '{"argv": ["true"], "env": {"A-B": "x"}}')"
check_match "stdin that is not base64: 400" '^400 .*\\"stdin\\" must be base64' \
	"$(ux stream $E '{"argv": ["true"], "stdin": "***"}')"
check_match "a bad user name: 400" '^400 .*\\"user\\" must be a user name' \
	"$(ux stream $E '{"argv": ["true"], "user": "-r"}')"
check_match "a signal that is not one: 400" '^400 .*must name a signal' \
	"$(ux call POST $E/1/signal '{"signal": "NOPE"}')"
check_match "a command id that is not one: 400" "^400 .*invalid command id 'x'" \
	"$(ux call POST $E/x/signal '{"signal": "TERM"}')"
check_match "stdin of no such command: 404" '^404 .*no command 999 running in m' \
	"$(ux call POST $E/999/stdin 'x')"
berth create r --no-start >/dev/null
check_match "exec in root's machine as $U: 404, as for none" '^404 .*no machine r' \
	"$(ux stream /v1/machines/r/exec '{"argv": ["true"]}')"
check_match "a stopped machine with wake false: 409" '^409 .*machine r is stopped' \
	"$(python3 "$ROOT/tests/exec_client.py" --sock "$STATE/hostd.sock" stream /v1/machines/r/exec '{"argv": ["true"], "wake": false}')"
check_absent "  and r was not started" matching "running" berth show r --json

# Over HTTP, with the user's token.
TOK=$(ub token create --name exec)
python3 "$ROOT/tests/exec_client.py" --url "http://127.0.0.1:$PORT" --token "$TOK" \
	stream $E '{"argv": ["echo", "over", "http"]}' >"$T/s7"
check_match "the same route over HTTP with $U's token" '"stdout": "over http\\n".*"exit": 0' "$(tr '\n' ' ' <"$T/s7")"
check_match "  and without the token: 401" '^401 ' \
	"$(python3 "$ROOT/tests/exec_client.py" --url "http://127.0.0.1:$PORT" stream $E '{"argv": ["true"]}')"
# The same token from the CLI, anywhere: berth exec through berth-web as
# $U, run by another user (nobody, who has no machine of their own).
nb() { setpriv --reuid=nobody --regid=nogroup --clear-groups env BERTH_URL="http://127.0.0.1:$PORT" \
	BERTH_TOKEN="${NB_TOKEN:-$TOK}" "$BIN/berth" "$@"; }
out=$(nb exec m -- sh -c 'echo via; echo web >&2; exit 5' 2>"$T/nb.err")
check_eq "berth exec with BERTH_URL and $U's token, as nobody: exit 5" "5 via web" \
	"$? $out $(cat "$T/nb.err")"
check_eq "  it acts as $U: berth ls shows m" m "$(nb ls --json | json machines.0.name)"
check_eq "  stdin goes through" piped "$(echo piped | nb exec m -- cat)"
check_match "  --state beside BERTH_URL: refused, naming both (not one silently)" \
	"--state names a local berth-hostd and BERTH_URL berth-web at http://127.0.0.1:$PORT" \
	"$(nb --state /nonexistent ls 2>&1)"
check_match "  a revoked token is refused, named" "invalid or revoked token" \
	"$(NB_TOKEN=berth_$(printf '%064d' 0) nb exec m -- true 2>&1)"

# Through berth-web, a client that goes is found at the next line of its
# stream (hostd's keepalives: every 2 s here), and its command killed; one
# that only shuts down its sending side after its request gets it all.
python3 "$ROOT/tests/exec_client.py" --url "http://127.0.0.1:$PORT" --token "$TOK" stream-then $E \
	'{"argv": ["sh", "-c", "echo $$ > /tmp/pid; exec sleep 1000"]}' sleep:2 close >/dev/null
pid=$(ub exec m -- cat /tmp/pid)
gone=
for _ in $(seq 20); do
	[ "$(alive "${pid:-0}")" = gone ] && { gone=yes; break; }
	sleep 0.5
done
check_eq "through berth-web, a command ($pid) is killed when its client goes" yes "$gone"
body='{"argv": ["sh", "-c", "sleep 3; echo after"]}'
out=$(python3 "$ROOT/tests/raw_http.py" --shut --wait 20 127.0.0.1 "$PORT" \
	"POST $E HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer $TOK\r\nContent-Type: application/json\r\nContent-Length: ${#body}\r\n\r\n$body" |
	tr '\r\n' '  ')
check_match "through berth-web, a client that half-closes after its request gets the stream whole" \
	'^HTTP/1.1 200 .*"stdout": ?"YWZ0ZXIK".*"exit": ?0' "$out"

# A sleeping machine wakes for a command.
ub suspend m >/dev/null
ub exec m -- true 2>"$T/err"
check_eq "exec in a suspended machine: it wakes, the command runs" 0 "$?"
check_match "  saying so" "woke m: ready in" "$(cat "$T/err")"

# hostd keeps its SSH session to m for the next command; a restore from a
# memory checkpoint older than that session must not reuse it (the guest
# would wait for the sequence numbers of its past).
ub exec m -- true
ub checkpoint m c1 --memory >/dev/null
ub exec m -- sh -c 'echo after > /tmp/v'
ub restore m c1 >/dev/null
t0=$(date +%s)
out=$(ub exec m -- sh -c 'cat /tmp/v 2>/dev/null || echo none')
check_eq "after a memory restore, a command sees the checkpoint's memory" none "$out"
check "  within 10 s (no kept session from after the checkpoint reused)" test $(($(date +%s) - t0)) -lt 10
check_match "  commands ran on kept sessions before" "ended: \{\"exit\":0\} \(on a kept session\)" "$(cat "$T/hostd.log")"

# Its machine deleted: the command ends, and says why.
ux stream $E '{"argv": ["sleep", "1000"]}' >"$T/s8" &
sp=$!
sleep 2
ub rm m >/dev/null
wait "$sp"
check_match "a command whose machine is deleted ends, saying why" \
	'"error": \{"code": "ended", "message": "its machine was deleted"\}' "$(tail -n 1 "$T/s8")"
berth rm r >/dev/null
finish
