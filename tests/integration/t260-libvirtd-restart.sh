#!/bin/bash
# tests/run: exclusive (it restarts the libvirtd every other test uses)
# libvirtd restarts under a running hostd: machines keep running, hostd
# reconnects by itself, events flow again (a guest powering itself off is
# seen as stopped without any request touching it), and the API works.
. "$(dirname "$0")/../lib.sh"

start_hostd && build_tiny || { not_ok "hostd and image"; finish; }
check_eq "create m" running "$(berth create m --json | json state)"
dom=$(dom_of m)

pid=$(cat /run/libvirtd.pid 2>/dev/null)
check_match "libvirtd runs" '^[0-9]+$' "$pid"
kill "$pid"
for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
libvirtd -d
for _ in $(seq 100); do virsh -c qemu:///system version >/dev/null 2>&1 && break; sleep 0.1; done
check_eq "the machine kept running through the restart" running "$(dom_state "$dom")"
for _ in $(seq 50); do grep -q "reconnected to libvirt" "$T/hostd.log" && break; sleep 0.2; done
check "hostd reconnected by itself" grep -q "reconnected to libvirt" "$T/hostd.log"

# Nothing asks hostd about m now: only an event can tell it.
berth exec m -- poweroff
for _ in $(seq 100); do
	[ "$(curl -s --unix-socket "$STATE/hostd.sock" http://x/v1/ledger |
		python3 -c 'import json,sys; r=[x for x in json.load(sys.stdin)["ledger"] if x["end"] is None]; print(r[0]["state"] if r else "")')" = stopped ] && break
	sleep 0.2
done
check_eq "a guest powering off after the restart is recorded as stopped" stopped \
	"$(berth show m --json | json state)"
check_eq "and the machine starts again" running "$(berth start m --json | json state)"
check_eq "rm" "deleted m" "$(berth rm m)"
finish
