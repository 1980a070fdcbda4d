#!/bin/bash
# network = user, the fallback (QEMU's user-mode stack, a loopback port
# forwarded to the guest's SSH): a machine boots and answers; nothing of
# the host answers its guest (canaries on 127.0.0.1 and 0.0.0.0 through
# 10.0.2.2 and the host's addresses, on ::1 and :: through fec0::2 and the
# host's IPv6 address, hostd's HTTP port, the machine's own SSH forward)
# nor do closed ranges the host itself reaches, while a test "internet" in
# a namespace of the test's answers over TCP and UDP, and over IPv6 (the
# uid filter: QEMU's connections are refused by uid); another program
# taking its port while it sleeps moves it on the resume, memory intact;
# egress policies other than open are refused (409, saying why), at
# create and later.  No test traffic leaves this machine.
. "$(dirname "$0")/../lib.sh"
squatter=

# ---- a test internet, and closed ranges the host reaches ----
# Addresses of its own: t800 may run beside it with 198.51.100.1-53.
INET_HERE=$INET.129
INET_THERE=$INET.130
HOST=$INET.138
CLOSED="169.254.78.78 10.99.78.1"
inet_up $HOST $CLOSED || { not_ok "the test internet"; finish; }
# And over IPv6 (a documentation prefix: no closed range), on the veth.
V6_HERE=2001:db8:805::1
V6_THERE=2001:db8:805::2
vn=$(ip -n "$INET_NS" -o link show type veth | awk -F': ' '{ print $2 }' | cut -d@ -f1)
ip -6 addr add $V6_HERE/64 dev "$INET_VH" nodad &&
	ip -n "$INET_NS" -6 addr add $V6_THERE/64 dev "$vn" nodad ||
	{ not_ok "the test internet's IPv6"; finish; }
# TCP 8080 (IPv4 and IPv6) and UDP 5300 on every address of the namespace;
# canaries on the host (127.0.0.1 CP, 0.0.0.0 CP+1 TCP and CP+2 UDP, ::1
# CP+3, :: CP+4) log who came.
# UDP bound to the address asked: an answer must come from it.
ip netns exec "$INET_NS" python3 "$ROOT/tests/canary.py" "$T/inet.log" \
	tcp:0.0.0.0:8080 "tcp:[::]:8080" "udp:$HOST:5300" >"$T/inet.out" 2>&1 &
PIDS+=($!)
CP=$(free_ports 5)
python3 "$ROOT/tests/canary.py" "$T/canary.log" "tcp:127.0.0.1:$CP" "tcp:0.0.0.0:$((CP + 1))" \
	"udp:0.0.0.0:$((CP + 2))" "tcp:[::1]:$((CP + 3))" "tcp:[::]:$((CP + 4))" >"$T/canary.out" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do
	grep -q ready "$T/inet.out" 2>/dev/null && grep -q ready "$T/canary.out" 2>/dev/null && break
	sleep 0.1
done
check_eq "the host reaches the test internet" open "$(host_tcp $HOST 8080)"
for a in $CLOSED; do
	check_eq "the host reaches $a (routed into the namespace)" open "$(host_tcp "$a" 8080)"
done
check_eq "the host's canary answers the host" open "$(host_tcp 127.0.0.1 "$CP")"
host_tcp6() { python3 -c 'import socket,sys
s=socket.socket(socket.AF_INET6); s.settimeout(2)
try: s.connect((sys.argv[1], int(sys.argv[2]))); print("open")
except Exception as e: print("closed")' "$@"; }
check_eq "the host reaches the test internet over IPv6" open "$(host_tcp6 $V6_THERE 8080)"
check_eq "the host's ::1 canary answers the host" open "$(host_tcp6 ::1 $((CP + 3)))"
check_eq "and its :: canary, on $V6_HERE" open "$(host_tcp6 $V6_HERE $((CP + 4)))"
: >"$T/canary.log"

mkdir -p "$STATE"
# A dashboard port of its own (8080 may be another test's): berth-web's HTTP port
# is one of the canaries.
printf 'network = user\nhttp_listen = 127.0.0.1:%s\n' "$(free_port)" >"$STATE/berth.conf"
start_hostd || { not_ok "hostd starts"; finish; }
web_up || not_ok "berth-web starts"
check_eq "hostd says network = user" user "$(berth info --json | json network)"
inst=$(berth info --json | json instance)
check "hostd says why network = user is a fallback" grep -q 'network = user is a fallback' "$T/hostd.log"
build_tiny || { not_ok "tiny image"; finish; }
berth create m1 >/dev/null || not_ok "create m1"
check_eq "the endpoint is a loopback port" 127.0.0.1 "$(berth show m1 --json | json ssh.host)"
check_eq "exec works" ok "$(berth exec m1 -- echo ok)"

# ---- the machine's SSH forward: root and berth-sshgw only ----
# banner_as USER PORT: what a connection as USER to 127.0.0.1:PORT reads first.
banner_as() { setpriv --reuid="$1" --regid="$(id -g "$1")" --clear-groups /usr/bin/python3 -c 'import socket,sys
s=socket.socket(); s.settimeout(10)
try:
    s.connect(("127.0.0.1", int(sys.argv[1]))); print(s.recv(64).decode(errors="replace").split("-")[0])
except Exception as e: print(type(e).__name__)' "$2"; }
fwd=$(berth show m1 --json | json ssh.port)
check_eq "root reaches the machine's SSH forward: a banner" SSH "$(banner_as root "$fwd")"
check_eq "berth-sshgw's user does too" SSH "$(banner_as berth-sshgw "$fwd")"
check_eq "another local user (nobody) is refused, so it cannot fill the guest sshd's slots" \
	ConnectionRefusedError "$(banner_as nobody "$fwd")"
check_eq "  nor can berth-desktop's user" ConnectionRefusedError "$(banner_as berth-desktop "$fwd")"

# ---- guest -> host: nothing; the internet: yes ----
probe() { berth exec m1 -- netprobe "$1" "$2" "$3" "${4:-2000}" 2>/dev/null; }
check "the table of the uid filter is there" nft list table inet "berth-$(berth info --json | json instance)"
port=$(berth show m1 --json | json ssh.port)
http_port=$(berth info --json | json dashboard | sed -n 's|.*:\([0-9]*\)/$|\1|p')
targets="10.0.2.2 $INET_HERE"
targets="$targets $(host_addresses | paste -sd ' ')"
check_match "10.0.2.2 $CP (the canary on the host's 127.0.0.1) is closed" 'refused|timeout' \
	"$(probe tcp 10.0.2.2 "$CP" 1500)"
for t in $targets; do
	check_match "host $t tcp $((CP + 1)) (canary on 0.0.0.0) is closed" 'refused|timeout' \
		"$(probe tcp "$t" $((CP + 1)) 1500)"
	check_match "host $t udp $((CP + 2)) (canary) is closed" 'refused|timeout' \
		"$(probe udp "$t" $((CP + 2)) 1500)"
done
check_eq "berth-web's HTTP answers the host" open "$(host_tcp 127.0.0.1 "${http_port:-0}")"
check_match "10.0.2.2 ${http_port:-(none)} (berth-web's HTTP) is closed" 'refused|timeout' \
	"$(probe tcp 10.0.2.2 "$http_port" 1500)"
check_match "10.0.2.2 $port (a machine's SSH forward) is closed" 'refused|timeout' \
	"$(probe tcp 10.0.2.2 "$port" 1500)"
# IPv6, QEMU's fec0::/64: first that the guest has its address (slirp's
# router advertisement) and reaches the internet over it, then that the
# host's ::1 (through fec0::2) and its own IPv6 address stay closed.
for _ in $(seq 30); do
	berth exec m1 -- ip -6 addr show dev eth0 2>/dev/null | grep -q 'inet6 fec0:' && break
	sleep 1
done
check_match "the guest has an IPv6 address from QEMU (fec0::/64)" 'inet6 fec0:' \
	"$(berth exec m1 -- ip -6 addr show dev eth0 2>&1)"
check_eq "the internet answers over IPv6 ([$V6_THERE]:8080)" open "$(probe tcp $V6_THERE 8080)"
check_match "fec0::2 $((CP + 3)) (the canary on the host's ::1) is closed" 'refused|timeout' \
	"$(probe tcp fec0::2 $((CP + 3)) 1500)"
check_match "fec0::2 $((CP + 4)) (the canary on ::) is closed" 'refused|timeout' \
	"$(probe tcp fec0::2 $((CP + 4)) 1500)"
check_match "the host's $V6_HERE $((CP + 4)) is closed" 'refused|timeout' \
	"$(probe tcp $V6_HERE $((CP + 4)) 1500)"
check "the canaries' log is there" test -f "$T/canary.log"
check_absent "no canary saw a guest" cat "$T/canary.log"
for c in $CLOSED; do
	check_match "$c (a closed range) does not answer" 'refused|timeout' "$(probe tcp "$c" 8080 1500)"
done
check_eq "the internet answers over TCP" open "$(probe tcp $HOST 8080)"
check_eq "and over UDP" open "$(probe udp $HOST 5300)"

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
PIDS+=($squatter)
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
check_eq "  the new port is for root and berth-sshgw only too" "SSH ConnectionRefusedError" \
	"$(banner_as root "$(berth show m1 --json | json ssh.port)") $(banner_as nobody "$(berth show m1 --json | json ssh.port)")"
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
kill_hostd TERM
check_no_line "no machine runs: hostd's stop removes the filter's table" "table inet berth-$inst" \
	nft list tables
finish
