#!/bin/bash
# The idle policy on real machines: a quiet machine is suspended after its
# timeout and billed for storage only from then on; `berth exec` wakes it
# and holds it awake while it runs, and so does a command through hostd's
# exec route; a gateway session and guest CPU keep it
# awake; "never" (per machine) keeps it running; `berth set` changes the
# timeout; bad values are refused.  (A real SSH connection through
# berth-sshgw waking a suspended machine is t410's.)
. "$(dirname "$0")/../lib.sh"

mkdir -p "$STATE"
cat >"$STATE/berth.conf" <<'EOF'
idle_timeout = 6s
idle_check_interval = 1s
EOF
start_hostd && build_tiny || { not_ok "hostd and image"; finish; }

state() { berth show "$1" --json | json state; }
# wait_state NAME STATE SECONDS: poll until NAME is STATE.
wait_state() {
	local i
	for i in $(seq $((${3} * 2))); do
		[ "$(state "$1")" = "$2" ] && return 0
		sleep 0.5
	done
	return 1
}
# stays NAME STATE SECONDS: NAME is STATE all that time.
stays() {
	local i
	for i in $(seq $((${3} * 2))); do
		[ "$(state "$1")" = "$2" ] || { diag "$1 became $(state "$1") after $((i / 2)) s"; return 1; }
		sleep 0.5
	done
}

berth create m >/dev/null || not_ok "create m"
t0=$(berth show m --json | json state_since)
berth create keep --idle never >/dev/null || not_ok "create keep"
j=$(berth show m --json)
check_eq "m has the host's timeout" 6s "$(echo "$j" | json idle.timeout)"
check_eq "marked as the default" true "$(echo "$j" | json idle.default)"
check_eq "keep's own timeout is never" never "$(berth show keep --json | json idle.timeout)"

# A quiet machine is suspended with its memory.
check "quiet m is suspended by the idle policy" wait_state m suspended 40
t1=$(berth show m --json | json state_since)
diag "m suspended $((t1 - t0)) s after it started (a boot under TCG is busy, not quiet)"
check "not before its timeout" test $((t1 - t0)) -ge 6
check_eq "keep (never) still runs" running "$(state keep)"
check_match "the suspend is counted in /metrics" 'berth_idle_suspends_total [1-9]' \
	"$(curl -s --unix-socket "$STATE/hostd.sock" http://berth/metrics)"
check_match "the log says why" "idle: root/m quiet for [0-9]+s" "$(cat "$T/hostd.log")"
# From then on storage only: its running seconds stop.
r1=$(berth usage --json | python3 -c 'import json,sys
print([x for x in json.load(sys.stdin)["machines"] if x["name"]=="m"][0]["running_s"])')
sleep 2
r2=$(berth usage --json | python3 -c 'import json,sys
print([x for x in json.load(sys.stdin)["machines"] if x["name"]=="m"][0]["running_s"])')
check_match "its running seconds are billed as numbers ($r1, $r2)" '^[0-9]+ [0-9]+$' "$r1 $r2"
check_eq "suspended by the policy: no running seconds billed" "$r1" "$r2"

# berth exec wakes it, and holds it while it runs (longer than the timeout).
check_eq "berth exec wakes it" hi "$(berth exec m -- echo hi 2>/dev/null)"
check_eq "it runs" running "$(state m)"
# Its events say what happened and why (GET /v1/events, berth events).
ev=$(berth events m --json | python3 -c 'import json, sys
for e in json.load(sys.stdin)["events"]: print(e["kind"] + "|" + e["cause"])')
check_eq "events: created, started, suspended, woke, in order" "created started suspended woke" \
	"$(printf '%s\n' "$ev" | cut -d'|' -f1 | tr '\n' ' ' | sed 's/ $//')"
check_match "  created: its image, and the request that did it" \
	"^created\|image tiny; POST /v1/machines by root$" "$(printf '%s\n' "$ev" | sed -n 1p)"
check_match "  suspended by the idle policy: how long it was quiet" \
	"^suspended\|idle for [0-9]+s \(timeout 6s\)$" "$(printf '%s\n' "$ev" | sed -n 3p)"
check_match "  woke for berth exec" "^woke\|[A-Z]+ /v1/machines/m/[a-z/]+ by root$" \
	"$(printf '%s\n' "$ev" | sed -n 4p)"
check_match "berth events: a table with the cause" "woke +[A-Z]+ /v1/machines/m/" "$(berth events m)"
check_eq "keep's events are not m's" "created started" \
	"$(berth events keep --json | python3 -c 'import json, sys
print(" ".join(e["kind"] for e in json.load(sys.stdin)["events"]))')"
check_eq "after= gives those after an id: none after the last" 0 \
	"$(berth events --after "$(berth events --json | python3 -c 'import json, sys
print(json.load(sys.stdin)["events"][-1]["id"])')" --json | python3 -c 'import json, sys
print(len(json.load(sys.stdin)["events"]))')"
berth exec m -- sleep 11 >/dev/null 2>&1 &
exec_pid=$!
sleep 2
check_eq "an exec in progress is the last activity" exec "$(berth show m --json | json idle.last_activity)"
check "an exec longer than the timeout keeps it running" stays m running 8
wait "$exec_pid"
check "after the exec, quiet again: suspended" wait_state m suspended 20

# A command through hostd (POST .../exec, what other users' berth exec
# uses) wakes it and holds it the same way.
python3 "$ROOT/tests/exec_client.py" --sock "$STATE/hostd.sock" stream /v1/machines/m/exec \
	'{"argv": ["sleep", "11"]}' >"$T/x.out" &
xpid=$!
# (the wake takes seconds, more on a loaded machine: a full run read
# "connect", the credential's, after a fixed 3 s)
for _ in $(seq 300); do grep -q '"id"' "$T/x.out" 2>/dev/null && break; sleep 0.1; done
for _ in $(seq 50); do
	[ "$(berth show m --json | json idle.last_activity)" = exec ] && break
	sleep 0.1
done
check_eq "a command through hostd wakes it and is the last activity" "running exec" \
	"$(state m) $(berth show m --json | json idle.last_activity)"
check "  it keeps it running past the timeout" stays m running 7
wait "$xpid"
check_match "  the command ran to its end" '"exit": 0' "$(tail -n 1 "$T/x.out")"
check "after it, quiet again: suspended" wait_state m suspended 20

# A gateway session (what berth-sshgw and berth-desktop open) keeps it awake.
berth exec m -- true >/dev/null 2>&1
sid=$(curl -s --unix-socket "$STATE/hostd.sock" -X POST http://berth/v1/gateway/sessions \
	-d '{"user":"root","machine":"m","kind":"ssh","from":"test"}' | json session)
check_match "a session opened" '^[0-9]+$' "$sid"
check "a machine with a session is not suspended" stays m running 9
check_eq "the session is what keeps it" session "$(berth show m --json | json idle.last_activity)"
curl -s --unix-socket "$STATE/hostd.sock" -X DELETE "http://berth/v1/gateway/sessions/$sid" \
	-d '{}' >/dev/null
check "the session closed: suspended" wait_state m suspended 20

# Guest CPU above idle_cpu_percent keeps it awake.
berth exec m -- sh -c 'setsid sh -c "echo \$\$ >/tmp/loop.pid; while :; do :; done" \
	</dev/null >/dev/null 2>&1 &' >/dev/null 2>&1
check "a busy guest is not suspended" stays m running 9
check_eq "its CPU is what keeps it" cpu "$(berth show m --json | json idle.last_activity)"
check "its CPU shows" test "$(berth show m --json | json idle.cpu_percent)" -ge 5
berth exec m -- sh -c 'kill $(cat /tmp/loop.pid)' >/dev/null 2>&1
check "the loop ended: suspended" wait_state m suspended 20

# Per machine: berth set.
out=$(berth set keep --idle 4s)
check_match "berth set changes the timeout" "suspended after 4s quiet" "$out"
check "keep follows its new timeout" wait_state keep suspended 30
check_eq "default again" 6s "$(berth set keep --idle default --json | json idle.timeout)"
berth set keep --idle never >/dev/null
check_eq "never again" never "$(berth show keep --json | json idle.timeout)"
check_eq "a setting changes nothing of the state" suspended "$(state keep)"

# Bad values: refused, nothing changed.
for bad in 5x 0 -3 "" 1000d 1.5h; do
	msg=$(berth set keep --idle "$bad" 2>&1)
	rc=$?
	if [ $rc -ne 0 ] && [[ $msg =~ "idle must be a duration" ]]; then
		ok "berth set --idle '$bad' is refused"
	else
		not_ok "berth set --idle '$bad' is refused"; diag "rc $rc: $msg"
	fi
done
msg=$(berth create bad --idle soon --no-start 2>&1)
check_match "create --idle soon is refused" "idle must be a duration" "$msg"
check_no_line "and leaves no machine" bad machine_names
msg=$(curl -s --unix-socket "$STATE/hostd.sock" -X PATCH http://berth/v1/machines/keep -d '{}')
check_match "a PATCH with nothing to change is refused" nothing_to_change "$msg"
msg=$(curl -s --unix-socket "$STATE/hostd.sock" -X PATCH http://berth/v1/machines/keep \
	-d '{"idle":"1m","vcpus":2}')
check_match "a PATCH of another field is refused" unknown_field "$msg"
check_eq "keep's timeout unchanged" never "$(berth show keep --json | json idle.timeout)"

# A bad config value stops hostd with the file and line.
kill_hostd TERM
echo "idle_timeout = soon" >>"$STATE/berth.conf"
line=$(wc -l <"$STATE/berth.conf")
out=$(timeout 20 "$BIN/berth-hostd" --state "$STATE" 2>&1)
check_match "idle_timeout = soon: hostd names the line" "berth.conf:$line: idle_timeout = 'soon' is not a duration" "$out"
sed -i '$d' "$STATE/berth.conf"
start_hostd || not_ok "hostd restarts"

finish
