#!/bin/bash
# Suspend keeps memory: a value in the guest's tmpfs survives suspend and
# resume, the uptime continues, and libvirt holds a managed save image.
. "$(dirname "$0")/../lib.sh"

start_hostd && build_tiny || { not_ok "hostd and image"; finish; }
check_eq "create m1: running" running "$(berth create m1 --json | json state)"
token=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
berth exec m1 -- sh -c "echo $token > /tmp/value"
up1=$(berth exec m1 -- cut -d' ' -f1 /proc/uptime)

check_eq "suspend: suspended" suspended "$(berth suspend m1 --json | json state)"
dom=$(dom_of m1)
check_eq "libvirt: shut off" "shut off" "$(dom_state "$dom")"
check_match "libvirt holds a managed save image" 'Managed save: +yes' "$($VIRSH dominfo "$dom" | grep 'Managed save')"
berth exec m1 --no-wake -- true 2>/dev/null
check_eq "exec --no-wake on a suspended machine is refused" 255 "$?"
out=$(berth resume m1 --json)
check_eq "resume: running" running "$(echo "$out" | json state)"
diag "resume to SSH ready: $(echo "$out" | json ready_ms) ms"
check_eq "the tmpfs value survived" "$token" "$(berth exec m1 -- cat /tmp/value)"
up2=$(berth exec m1 -- cut -d' ' -f1 /proc/uptime)
check "uptime continued ($up1 -> $up2)" python3 -c "import sys; sys.exit(0 if float('$up2') >= float('$up1') else 1)"

# exec wakes a suspended machine.
berth suspend m1 >/dev/null
out=$(berth exec m1 -- cat /tmp/value 2>"$T/wake.err")
check_eq "exec wakes a suspended machine, memory intact" "$token" "$out"
check_match "and says so on stderr" '^woke m1: ready in' "$(cat "$T/wake.err")"

# Another program takes the machine's loopback port while it sleeps.
port=$(berth show m1 --json | json ssh.port)
berth suspend m1 >/dev/null
python3 -c 'import socket,sys,time
s=socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(1); time.sleep(120)' "$port" &
squatter=$!
sleep 0.5
check_eq "resume while another program holds its port: running" running "$(berth resume m1 --json | json state)"
check "the SSH port moved" test "$(berth show m1 --json | json ssh.port)" != "$port"
check_eq "memory survived the move" "$token" "$(berth exec m1 -- cat /tmp/value)"
kill "$squatter" 2>/dev/null; wait "$squatter" 2>/dev/null

berth stop m1 >/dev/null
berth resume m1 >/dev/null 2>&1
check_eq "resume of a stopped machine is refused" 1 "$?"
berth suspend m1 >/dev/null 2>&1
check_eq "suspend of a stopped machine is refused" 1 "$?"
check_eq "rm" "deleted m1" "$(berth rm m1)"
finish
