#!/bin/bash
# SIGKILL of hostd in the middle of a create, at each step: after a restart
# there is no half-made machine, volume, domain, file or open ledger row, and
# the name can be used again.
. "$(dirname "$0")/../lib.sh"

# The ledger's open rows ("MACHINE_ID STATE"), one a line; fails when
# hostd does not answer.
open_ledger_rows() {
	local j
	j=$(curl -sf --unix-socket "$STATE/hostd.sock" http://x/v1/ledger) || return 1
	printf '%s' "$j" | python3 -c 'import json,sys
for r in json.load(sys.stdin)["ledger"]:
    if r["end"] is None: print(r["machine_id"], r["state"])'
}

start_hostd && build_tiny || { not_ok "hostd and image"; finish; }
kill_hostd TERM

for point in create-after-row create-after-volume create-after-seed create-after-define; do
	rm -f "$STATE/crash-point"
	start_hostd BERTH_TEST_CRASH_AT=$point || { not_ok "hostd starts ($point)"; continue; }
	berth create half --no-start >/dev/null 2>&1 &
	client=$!
	for _ in $(seq 100); do [ -e "$STATE/crash-point" ] && break; sleep 0.1; done
	check_eq "hostd reached $point" "$point" "$(cat "$STATE/crash-point" 2>/dev/null)"
	kill_hostd KILL
	wait "$client" 2>/dev/null
	start_hostd || { not_ok "hostd restarts after $point"; continue; }
	check_absent "$point: no machine row" machine_names
	check_absent "$point: no domain" test_domains
	check_eq "$point: only the image's volume" "base-tiny.qcow2" "$(ls "$STATE/volumes")"
	# STATE/machines itself is made by the first create that gets that far.
	check_absent "$point: no machine files" find "$STATE" -mindepth 2 -path "$STATE/machines/*"
	check_absent "$point: no open ledger row" open_ledger_rows
	kill_hostd TERM
done

check_eq "each interrupted create was undone by reconciliation" 4 \
	"$(grep -c 'reconcile: create of root/half was interrupted; removing it' "$T/hostd.log")"
start_hostd || not_ok "hostd starts"
check_eq "the name is free again" stopped "$(berth create half --no-start --json | json state)"
check_eq "rm" "deleted half" "$(berth rm half)"
finish
