#!/bin/bash
# Checkpoints, restore and forks on the qcow2 backend: data goes back to the
# checkpoint, other checkpoints stay restorable, forks are isolated both
# ways, deleting what others depend on breaks nothing, bad input is refused,
# and a crash in the middle of a live checkpoint leaves a consistent machine.
. "$(dirname "$0")/../lib.sh"

start_hostd && build_tiny || { not_ok "hostd and image"; finish; }
check_eq "create a" running "$(berth create a --json | json state)"
put() { berth exec "$1" -- sh -c "echo $2 > /root/data; sync"; }
get() { berth exec "$1" -- cat /root/data; }

# Running machine: write, checkpoint, write, restore.
put a one
out=$(berth checkpoint a c1 --json)
check_eq "checkpoint c1 of a running machine" c1 "$(echo "$out" | json name)"
diag "checkpoint of a running machine took $(echo "$out" | json took_ms) ms"
check_eq "the machine kept running" running "$(berth show a --json | json state)"
put a two
berth checkpoint a c2 >/dev/null
put a three
check_eq "restore c1: running again" running "$(berth restore a c1 --json | json state)"
check_eq "c1's data is back" one "$(get a)"
berth restore a c2 >/dev/null
check_eq "c2 stays restorable after restoring c1" two "$(get a)"
berth restore a c1 >/dev/null
check_eq "and c1 again" one "$(get a)"
check_eq "checkpoints lists both, oldest first" "c1 c2" \
	"$(berth checkpoints a --json | python3 -c 'import json,sys; print(" ".join(c["name"] for c in json.load(sys.stdin)["checkpoints"]))')"

# Stopped machine.
berth stop a >/dev/null
berth checkpoint a c3 >/dev/null
check_eq "checkpoint of a stopped machine keeps it stopped" stopped "$(berth show a --json | json state)"
check_eq "restore of a stopped machine keeps it stopped" stopped "$(berth restore a c2 --json | json state)"
berth start a >/dev/null
check_eq "and the restored data is there" two "$(get a)"

# Forks: from a checkpoint and from the machine as it is, isolated both ways.
out=$(berth fork a b --from c1 --json)
check_eq "fork b from c1: running" running "$(echo "$out" | json state)"
diag "fork API call took $(echo "$out" | json took_ms) ms (boot included)"
check_eq "b has c1's data" one "$(get b)"
check_eq "b has its own hostname" b "$(berth exec b -- hostname)"
check "b has its own MAC" test "$(berth show b --json | json mac)" != "$(berth show a --json | json mac)"
check "b has its own SSH endpoint" test \
	"$(berth show b --json | json ssh.host):$(berth show b --json | json ssh.port)" != \
	"$(berth show a --json | json ssh.host):$(berth show a --json | json ssh.port)"
put a2 x 2>/dev/null
berth fork a c >/dev/null
check_eq "fork c of the running a has a's data" two "$(get c)"
kinds() { berth events "$1" --json | python3 -c 'import json, sys
print(" ".join(e["kind"] + ":" + e["cause"].split(";")[0] for e in json.load(sys.stdin)["events"]))'; }
check_match "events of a: checkpointed c1, restored c1, c2" \
	"checkpointed:checkpoint c1 .*restored:checkpoint c1 .*restored:checkpoint c2" "$(kinds a)"
check_match "  b: forked from a at c1, then started" "^forked:fork of a at checkpoint c1 started:" "$(kinds b)"
check_match "  c: forked from the running a" "^forked:(live )?fork of a( |$)" "$(kinds c)"
put a from-a
put c from-c
put b from-b
check_eq "a's write stays in a" from-a "$(get a)"
check_eq "c's write stays in c" from-c "$(get c)"
check_eq "b's write stays in b" from-b "$(get b)"

# Deletion with dependents: b was made from c1, c from a's frozen state.
check_eq "rm checkpoint c1 while b depends on it" "deleted checkpoint c1 of a" "$(berth checkpoint rm a c1)"
check_eq "rm a while b and c depend on its volumes" "deleted a" "$(berth rm a)"
berth restart b >/dev/null && berth restart c >/dev/null
check_eq "b survives (after a reboot, reading its whole chain)" from-b "$(get b)"
check_eq "c survives" from-c "$(get c)"
berth exec b -- sh -c 'dd if=/dev/urandom of=/root/big bs=1M count=8 2>/dev/null; sync; md5sum /root/big' > "$T/sum1"
berth restart b >/dev/null
check_eq "b reads back what it wrote after a reboot" "$(cat "$T/sum1")" "$(berth exec b -- md5sum /root/big)"
berth rm b >/dev/null
berth rm c >/dev/null
check_eq "with every machine gone only the image's volume remains" base-tiny.qcow2 "$(ls "$STATE/volumes")"

# Bad input.
berth create d --no-start >/dev/null
req() { curl -s -o "$T/body" -w '%{http_code}' --unix-socket "$STATE/hostd.sock" -X "$1" \
	-H 'Content-Type: application/json' --data-binary "$3" "http://berth$2"; echo " $(json error.code < "$T/body") $(json error.message < "$T/body")"; }
check_match "invalid checkpoint name" '^400 invalid_name .*Bad' "$(req POST /v1/machines/d/checkpoints '{"name":"Bad"}')"
berth checkpoint d k1 >/dev/null
check_match "duplicate checkpoint" '^409 exists .*k1' "$(req POST /v1/machines/d/checkpoints '{"name":"k1"}')"
check_match "restore of a missing checkpoint" '^404 not_found no checkpoint nope' "$(req POST /v1/machines/d/restore '{"checkpoint":"nope"}')"
check_match "fork from a missing checkpoint" '^404 not_found no checkpoint nope' "$(req POST /v1/machines/d/fork '{"name":"e","from":"nope"}')"
check_match "fork onto an existing name" '^409 exists machine d exists' "$(req POST /v1/machines/d/fork '{"name":"d"}')"
check_match "fork with an invalid name" '^400 invalid_name' "$(req POST /v1/machines/d/fork '{"name":"E!"}')"
check_match "checkpoint of a missing machine" '^404 not_found no machine ghost' "$(req POST /v1/machines/ghost/checkpoints '{}')"
check_match "rm of a missing checkpoint" '^404 not_found no checkpoint nope' "$(req DELETE /v1/machines/d/checkpoints/nope '')"
berth start d >/dev/null && berth suspend d >/dev/null
check_match "checkpoint of a suspended machine" '^409 suspended .*resume or stop' "$(req POST /v1/machines/d/checkpoints '{}')"
check_eq "nothing half-made: d's checkpoints" k1 \
	"$(berth checkpoints d --json | python3 -c 'import json,sys; print(" ".join(c["name"] for c in json.load(sys.stdin)["checkpoints"]))')"
berth resume d >/dev/null

# SIGKILL of hostd in the middle of a live checkpoint.
for point in checkpoint-after-volume checkpoint-after-snapshot; do
	kill_hostd TERM
	rm -f "$STATE/crash-point"
	start_hostd BERTH_TEST_CRASH_AT=$point || not_ok "hostd starts ($point)"
	berth checkpoint d "k-$point" >/dev/null 2>&1 &
	client=$!
	for _ in $(seq 100); do [ -e "$STATE/crash-point" ] && break; sleep 0.1; done
	check_eq "hostd reached $point" "$point" "$(cat "$STATE/crash-point" 2>/dev/null)"
	kill_hostd KILL
	wait "$client" 2>/dev/null
	start_hostd || not_ok "hostd restarts after $point"
	check_eq "$point: d still runs" running "$(berth show d --json | json state)"
	put d "after-$point"
	check_eq "$point: d writes and reads" "after-$point" "$(get d)"
	berth restart d >/dev/null
	check_eq "$point: and keeps it across a reboot" "after-$point" "$(get d)"
	check_eq "$point: k1 restores" running "$(berth restore d k1 --json | json state)"
done
check "the live snapshot interrupted after QEMU switched volumes was followed" \
	grep -q "reconcile: root/d's domain uses volume .* following the domain" "$T/hostd.log"
berth rm d >/dev/null
check_eq "after the crashes nothing is left behind" base-tiny.qcow2 "$(ls "$STATE/volumes")"
finish
