#!/bin/bash
# Machines outlive hostd: SIGKILL stops none of them, and a restarted hostd
# reconciles its database with what libvirt did meanwhile.  While it runs,
# libvirt's events keep the states true.
. "$(dirname "$0")/../lib.sh"

start_hostd && build_tiny || { not_ok "hostd and image"; finish; }
check_eq "create a: running" running "$(berth create a --json | json state)"
check_eq "create b: running" running "$(berth create b --json | json state)"
da=$(dom_of a)
host_a=$(berth show a --json | json ssh.host)
port_a=$(berth show a --json | json ssh.port)
db=$(dom_of b)

kill_hostd KILL
sleep 1
check_eq "after SIGKILL of hostd, a runs" running "$(dom_state "$da")"
check_eq "after SIGKILL of hostd, b runs" running "$(dom_state "$db")"
check_eq "and answers OpenSSH's ssh with the gateway key" a \
	"$(ssh -q -i "$STATE/keys/gateway" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
		-o BatchMode=yes -p "$port_a" "root@$host_a" hostname)"

start_hostd || not_ok "hostd restarts"
check_eq "restarted hostd lists a running" running "$(berth show a --json | json state)"
check_eq "restarted hostd lists b running" running "$(berth show b --json | json state)"
check_eq "exec still works" b "$(berth exec b -- hostname)"

# Changes behind hostd's back while it is dead.
berth stop b >/dev/null
kill_hostd KILL
$VIRSH destroy "$da" >/dev/null
$VIRSH start "$db" >/dev/null
start_hostd || not_ok "hostd restarts again"
check_eq "a destroyed while hostd was down: stopped" stopped "$(berth show a --json | json state)"
check_eq "b started while hostd was down (marked stopped): corrected to running" running \
	"$(berth show b --json | json state)"
grep -q "reconcile: root/b is running in libvirt, stopped in the database" "$T/hostd.log"
check_eq "the correction is logged" 0 "$?"

# While hostd runs, libvirt events update states.
$VIRSH destroy "$db" >/dev/null
for _ in $(seq 50); do
	[ "$(berth show b --json | json state)" = stopped ] && break
	sleep 0.1
done
check_eq "a domain stopped under hostd's feet is seen as stopped" stopped "$(berth show b --json | json state)"

check_eq "rm a" "deleted a" "$(berth rm a)"
check_eq "rm b" "deleted b" "$(berth rm b)"
finish
