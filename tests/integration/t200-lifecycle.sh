#!/bin/bash
# A machine's life: create -> running, exec (hostname, exit status, stdin,
# stderr), a file survives stop/start and restart, the ledger records every
# state, delete removes domain, volume and files.
. "$(dirname "$0")/../lib.sh"

start_hostd || { not_ok "hostd starts"; finish; }
ok "hostd starts"
check "the tiny image builds" build_tiny

info=$(berth info --json)
check_match "info names the hypervisor" '^(kvm|tcg)$' "$(echo "$info" | json hypervisor)"
check_eq "info names the storage backend" qcow2 "$(echo "$info" | json storage.backend)"
db_version=$(/usr/bin/python3 -c 'import sqlite3, sys
print(sqlite3.connect("file:" + sys.argv[1] + "?mode=ro", uri=True).execute("PRAGMA user_version").fetchone()[0])' \
	"$STATE/berth.db" 2>&1)
check_match "the database has a schema version" '^[1-9][0-9]*$' "$db_version"
check_eq "info gives that version" "$db_version" \
	"$(echo "$info" | json schema)"
check_match "berth info prints it" "database schema $db_version," "$(berth info)"

out=$(berth create demo --json)
check_eq "create demo: running" running "$(echo "$out" | json state)"
check_match "show gives an SSH endpoint (its address, port 22)" '^[0-9.]+:22$' \
	"$(berth show demo --json | json ssh.host):$(berth show demo --json | json ssh.port)"

check_eq "exec hostname prints the machine's name" demo "$(berth exec demo -- hostname)"
berth exec demo -- sh -c 'exit 7'
check_eq "exec exits with the command's status" 7 "$?"
check_eq "stdin reaches the command" "hello from stdin" "$(echo 'hello from stdin' | berth exec demo -- cat)"
out=$(berth exec demo -- sh -c 'echo to-out; echo to-err >&2' 2>"$T/err")
check_eq "stdout is separate" to-out "$out"
check_eq "stderr is separate" to-err "$(cat "$T/err")"
check_eq "arguments keep their quoting" "a b|c'd" "$(berth exec demo -- printf '%s|%s' 'a b' "c'd")"

# --connect-timeout: the time berth exec gives the connection, handshake
# and login (15 s by default).  The guest's SSH listener is frozen for 20 s
# (a guest too slow to answer): 2 s gives up in about 2 s, 60 s outlasts
# the freeze, and the default 15 s would not.
for v in 0 abc 5s 3601; do
	out=$(berth exec demo --connect-timeout "$v" -- true 2>&1)
	rc=$?
	check_eq "exec --connect-timeout $v is refused (exit 2)" 2 "$rc"
	check_match "... naming the option and the value" "--connect-timeout '$v': not a whole number of seconds" "$out"
done
berth exec demo -- sh -c 'for d in /proc/[0-9]*; do
	[ "$(cat $d/comm 2>/dev/null)" = dropbear ] || continue
	p=$(sed -n "s/^PPid:[[:space:]]*//p" $d/status)
	[ "$(cat /proc/$p/comm 2>/dev/null)" != dropbear ] && l=${d#/proc/}
done
setsid sh -c "sleep 20; kill -CONT $l" </dev/null >/dev/null 2>&1 &
kill -STOP $l'
t0=$(date +%s.%N)
berth exec demo --connect-timeout 2 -- true 2>"$T/err"
rc=$?
t1=$(date +%s.%N)
check_eq "exec --connect-timeout 2 with the listener frozen: exit 255" 255 "$rc"
check_match "... saying it timed out" "berth exec demo: .*timed out" "$(cat "$T/err")"
check "... within 10 s, not the default 15" awk -v a="$t0" -v b="$t1" 'BEGIN { exit !(b - a < 10) }'
check_eq "exec --connect-timeout 60 outlasts the freeze" ok "$(berth exec demo --connect-timeout 60 -- echo ok)"
t2=$(date +%s.%N)
diag "connect-timeout 2 gave up in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s; 60 answered after $(awk -v a="$t1" -v b="$t2" 'BEGIN { printf "%.1f", b - a }') s"
check "... after more than 15 s (the default would have given up)" awk -v a="$t1" -v b="$t2" 'BEGIN { exit !(b - a > 15) }'

berth exec demo -- sh -c 'echo persisted > /root/file; sync'
out=$(berth stop demo --json)
check_eq "stop: stopped" stopped "$(echo "$out" | json state)"
check_eq "libvirt agrees it is shut off" "shut off" "$(dom_state "$(dom_of demo)")"
check_eq "start: running" running "$(berth start demo --json | json state)"
check_eq "a file survives stop and start" persisted "$(berth exec demo -- cat /root/file)"
check_eq "restart: running" running "$(berth restart demo --json | json state)"
check_eq "a file survives restart" persisted "$(berth exec demo -- cat /root/file)"
check_eq "start of a running machine is a no-op" running "$(berth start demo --json | json state)"

# A guest that ignores the ACPI power button is forced off after the timeout.
berth exec demo -- killall -STOP acpid   # frozen, not killed: init would respawn it
t0=$(date +%s)
check_eq "stop with a guest ignoring ACPI: stopped" stopped "$(berth stop demo --timeout 2 --json | json state)"
check "it took the timeout, not the default 30 s" test $(( $(date +%s) - t0 )) -lt 15
check "the forced stop is logged" grep -q "root/demo did not shut down within 2 s; forced off" "$T/hostd.log"
check_eq "start after a forced stop: running" running "$(berth start demo --json | json state)"

# The ledger: one row per state, contiguous, only the last open.
berth ls --json > "$T/ls.json"
id=$(json machines.0.id < "$T/ls.json")
curl -s --unix-socket "$STATE/hostd.sock" http://x/v1/ledger > "$T/ledger.json"
res=$(python3 - "$T/ledger.json" "$id" <<'PY'
import json, sys
rows = [r for r in json.load(open(sys.argv[1]))["ledger"] if r["machine_id"] == sys.argv[2]]
states = [r["state"] for r in rows]
ok = all(r["end"] is not None for r in rows[:-1]) and rows[-1]["end"] is None
ok = ok and all(a["end"] == b["start"] for a, b in zip(rows, rows[1:]))
ok = ok and all(a["state"] != b["state"] for a, b in zip(rows, rows[1:]))
print(("ok" if ok else "bad") + " " + ",".join(states))
PY
)
check_match "the ledger has contiguous rows for every state" \
	'^ok creating,stopped,running,stopped,running,stopped,running,stopped,running$' "$res"

dom=$(dom_of demo)
vols_before=$(ls "$STATE/volumes" | wc -l)
check_eq "rm removes the machine" "deleted demo" "$(berth rm demo)"
check_no_line "its domain is gone" "$dom" $VIRSH list --all --name
check_eq "its volume is gone" $((vols_before - 1)) "$(ls "$STATE/volumes" | wc -l)"
check_absent "its files are gone" ls -A "$STATE/machines"
berth show demo >/dev/null 2>&1
check_eq "show of a deleted machine fails" 1 "$?"
finish
