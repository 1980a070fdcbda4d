#!/bin/bash
# Checkpoints with memory and live forks (qcow2): restore returns a
# machine to the running state it had, processes and tmpfs included, and
# every checkpoint stays restorable; a live fork starts with its source's
# memory and both run on, isolated.
. "$(dirname "$0")/../lib.sh"

start_hostd && build_tiny || { not_ok "hostd and image"; finish; }
check_eq "create a" running "$(berth create a --json | json state)"
put() { berth exec "$1" -- sh -c "echo $2 > /tmp/value"; }
get() { berth exec "$1" -- cat /tmp/value; }
uptime_of() { berth exec "$1" -- cut -d' ' -f1 /proc/uptime; }

# A process whose pid tells whether it is the same one after a restore.
berth exec a -- sh -c 'sleep 100000 >/dev/null 2>&1 & echo $! > /tmp/pid'
put a one
up1=$(uptime_of a)
out=$(berth checkpoint a m1 --memory --json)
check_eq "checkpoint --memory of a running machine" true "$(echo "$out" | json memory)"
diag "memory checkpoint took $(echo "$out" | json took_ms) ms"
check_eq "the machine runs on" running "$(berth show a --json | json state)"
put a two
berth checkpoint a d2 >/dev/null
put a three
berth exec a -- sh -c 'kill $(cat /tmp/pid)'

check_eq "restore m1: running" running "$(berth restore a m1 --json | json state)"
check_eq "m1's tmpfs value is back" one "$(get a)"
check "the sleeping process is back, same pid" berth exec a -- sh -c 'kill -0 $(cat /tmp/pid)'
up2=$(uptime_of a)
check "uptime continues from the checkpoint ($up1 -> $up2), no reboot" \
	python3 -c "import sys; sys.exit(0 if float('$up2') >= float('$up1') else 1)"
check_eq "restore of the disk-only d2: running" running "$(berth restore a d2 --json | json state)"
# find fails when the exec does: the guest must answer, with no value.
check_absent "a disk-only checkpoint restores with a reboot (tmpfs empty)" \
	berth exec a -- find /tmp -maxdepth 1 -name value
berth restore a m1 >/dev/null
check_eq "m1 restores again (a checkpoint is not used up)" one "$(get a)"

# Live fork.
put a before-fork
out=$(berth fork a b --live --json)
check_eq "live fork b: running" running "$(echo "$out" | json state)"
diag "live fork took $(echo "$out" | json took_ms) ms"
check_eq "the source still runs" running "$(berth show a --json | json state)"
check_eq "b has a's tmpfs value" before-fork "$(get b)"
check "b has a's sleeping process" berth exec b -- sh -c 'kill -0 $(cat /tmp/pid)'
check_eq "b is called b" b "$(berth exec b -- hostname)"
check_match "b re-keyed by the image's berth-identity in one command (status 0)" \
	"b presents its own host key: berth-identity took [0-9]+ ms \\(status 0\\)" \
	"$(grep -E "b presents its own host key" "$T/hostd.log")"
check_eq "  and its host key is confirmed" confirmed "$(berth show b --json | json host_key_state)"
put a only-a
put b only-b
check_eq "after the fork a's memory is a's" only-a "$(get a)"
check_eq "and b's is b's" only-b "$(get b)"
check "b has its own SSH endpoint" test \
	"$(berth show b --json | json ssh.host):$(berth show b --json | json ssh.port)" != \
	"$(berth show a --json | json ssh.host):$(berth show a --json | json ssh.port)"
berth restart b >/dev/null
check_eq "b reboots as b (its seed)" b "$(berth exec b -- hostname)"

# Refusals.
berth stop a >/dev/null
out=$(berth checkpoint a m9 --memory 2>&1)
check_match "memory checkpoint of a stopped machine is refused" "only a running machine" "$out"
out=$(berth fork a c --live 2>&1)
check_match "live fork of a stopped machine is refused" "only a running machine" "$out"
out=$(curl -s --unix-socket "$STATE/hostd.sock" -H 'Content-Type: application/json' \
	--data-binary '{"name":"c","live":true,"from":"m1"}' http://x/v1/machines/a/fork)
check_match "live fork from a checkpoint is refused" "invalid_fork" "$out"
check_eq "nothing half-made: machines" "a b" \
	"$(berth ls --json | python3 -c 'import json,sys; print(" ".join(m["name"] for m in json.load(sys.stdin)["machines"]))')"
# (STATE/tmp was made by the image build and the live fork.)
check_absent "no memory image left in tmp" ls -A "$STATE/tmp"

a_dir=$STATE/machines/$(berth show a --json | json id)
check_eq "m1's memory image is in a's directory" ckpt-m1.mem "$(cd "$a_dir" && ls -d -- *.mem)"
berth checkpoint rm a m1 >/dev/null
check_absent "rm of a memory checkpoint removes its memory image" \
	find "$a_dir" -maxdepth 1 -name '*.mem'
berth rm a >/dev/null
berth rm b >/dev/null
check_eq "with every machine gone only the image's volume remains" base-tiny.qcow2 "$(ls "$STATE/volumes")"
finish
