#!/bin/bash
# network = user, the fallback (QEMU's user-mode stack, a loopback port
# forwarded to the guest's SSH): a machine boots and answers; another
# program taking its port while it sleeps moves it on the resume, memory
# intact; egress policies other than open are refused (409, saying why),
# at create and later.
. "$(dirname "$0")/../lib.sh"
squatter=
trap '[ -n "$squatter" ] && kill "$squatter" 2>/dev/null; cleanup' EXIT

mkdir -p "$STATE"
echo "network = user" >"$STATE/berth.conf"
start_hostd || { not_ok "hostd starts"; finish; }
check_eq "hostd says network = user" user "$(berth info --json | json network)"
build_tiny || { not_ok "tiny image"; finish; }
berth create m1 >/dev/null || not_ok "create m1"
check_eq "the endpoint is a loopback port" 127.0.0.1 "$(berth show m1 --json | json ssh.host)"
check_eq "exec works" ok "$(berth exec m1 -- echo ok)"
token=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
berth exec m1 -- sh -c "echo $token > /tmp/value"

# Another program takes the machine's loopback port while it sleeps: the
# restore gets the image's XML with the new port.
port=$(berth show m1 --json | json ssh.port)
berth suspend m1 >/dev/null
# SO_REUSEADDR: the port may still have TIME_WAIT connections of the
# exec above, which a plain bind refuses; a listening socket is what counts.
python3 -c 'import socket,sys,time
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(1); print("held", flush=True); time.sleep(300)' \
	"$port" >"$T/squatter.out" &
squatter=$!
# It says when it listens: a python3 that starts on a loaded machine may
# take seconds.
for _ in $(seq 600); do
	grep -q held "$T/squatter.out" 2>/dev/null && break
	kill -0 "$squatter" 2>/dev/null || break
	sleep 0.1
done
check "the squatter holds the port" grep -q held "$T/squatter.out"
check_eq "resume while another program holds its port: running" running "$(berth resume m1 --json | json state)"
check "the SSH port moved" test "$(berth show m1 --json | json ssh.port)" != "$port"
check_eq "memory survived the move" "$token" "$(berth exec m1 -- cat /tmp/value)"
kill "$squatter" 2>/dev/null; wait "$squatter" 2>/dev/null; squatter=

# Egress policies need network = routed.
out=$(berth set m1 --egress none 2>&1)
check_match "set --egress none is refused, saying why" 'egress policies need network = routed' "$out"
check_eq "the policy stays open" open "$(berth show m1 --json | json egress.policy)"
check_eq "set --egress open is fine" open "$(berth set m1 --egress open --json | json egress.policy)"
out=$(berth create m2 --egress 198.51.100.0/24 --no-start 2>&1)
check_match "create --egress with rules is refused" 'egress policies need network = routed' "$out"
check "and made nothing" test "$(berth show m2 --json 2>/dev/null | json name)" = ""
berth rm m1 >/dev/null
finish
