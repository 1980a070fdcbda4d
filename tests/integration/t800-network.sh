#!/bin/bash
# The boundary around machines (network = routed), with real guests and a
# test "internet": a network namespace of this test's, reached from the
# host through a veth, with addresses outside the private ranges
# (198.51.100.0/24, only /32 routes), a resolver answering allowed.test
# and blocked.test, TCP and UDP echo servers, and listeners on addresses the
# host keeps closed (link-local, private) that the host itself reaches.
#  - From a guest: nothing of the host answers (canaries on 0.0.0.0, the
#    gateway, the host's addresses, hostd's and the gateways' ports),
#    but DHCP and DNS; the closed ranges do not answer though the host
#    reaches them; the internet does, TCP and UDP.
#  - Egress policies: none reaches nothing, an allow list exactly what it
#    lists, by name and by CIDR and port; a malformed rule is refused and the
#    policy in force stays; a change cuts an open connection within a second;
#    berth egress log shows both sides.
#  - Two machines: neither reaches the other; a guest that takes the other's
#    address and MAC gets nothing, and the gateway and berth exec still
#    reach the right machine.
# No test traffic leaves this machine: only loopback, the test's namespace
# and the guests' taps.
. "$(dirname "$0")/../lib.sh"

for tool in ip nft dnsmasq python3; do
	command -v "$tool" >/dev/null 2>&1 || { skip "not installed: $tool"; finish; }
done

ALLOWED=$INET.10
BLOCKED=$INET.20
RESOLVER=$INET.53
# Closed ranges, routed into the namespace too, so that the host reaches
# them (the positive control) and only berth's rules stop guests.
CLOSED="169.254.77.77 10.99.77.1 172.16.77.1 192.168.77.1 100.64.77.1"

# ---- the test internet ----
inet_up $ALLOWED $BLOCKED $RESOLVER $CLOSED || { not_ok "the test internet"; finish; }
# Servers: TCP echo on 8080 and 9090 and UDP echo on 5300, on every
# address; a drip on 8081 (a line every 100 ms, for the cut).
cat >"$T/srv.py" <<'EOF'
import socket, socketserver, sys, threading, time
class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        while True:
            d = self.request.recv(65536)
            if not d: return
            self.request.sendall(d[:1] if len(d) < 16 else b"k")
class Drip(socketserver.BaseRequestHandler):
    def handle(self):
        i = 0
        while True:
            try: self.request.sendall(b"drip %d\n" % i)
            except OSError: return
            i += 1; time.sleep(0.1)
class T(socketserver.ThreadingTCPServer):
    allow_reuse_address = True; daemon_threads = True
for port, h in ((8080, Echo), (9090, Echo), (8081, Drip)):
    threading.Thread(target=T(("0.0.0.0", port), h).serve_forever, daemon=True).start()
def udp(addr):
    # One socket per address: an answer must come from the address asked.
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind((addr, 5300))
    while True:
        d, a = u.recvfrom(2048); u.sendto(b"pong", a)
for addr in sys.argv[1:]:
    threading.Thread(target=udp, args=(addr,), daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
EOF
ip netns exec "$INET_NS" python3 "$T/srv.py" $ALLOWED $BLOCKED $CLOSED >"$T/srv.log" 2>&1 &
PIDS+=($!)
ip netns exec "$INET_NS" dnsmasq --conf-file=/dev/null --keep-in-foreground --no-resolv \
	--no-hosts --listen-address="$RESOLVER" --bind-interfaces --local-ttl=600 \
	--address=/allowed.test/$ALLOWED --address=/blocked.test/$BLOCKED \
	--pid-file="$T/ns-dnsmasq.pid" --log-facility="$T/ns-dnsmasq.log" &
PIDS+=($!)
for _ in $(seq 50); do grep -q ready "$T/srv.log" 2>/dev/null && break; sleep 0.1; done
check_eq "the host reaches the test internet" open "$(host_tcp $ALLOWED 8080)"
for a in $CLOSED; do
	check_eq "the host reaches $a (routed into the namespace)" open "$(host_tcp "$a" 8080)"
done

# ---- canaries on the host: every connection is logged ----
CP=$(free_ports 5)
python3 "$ROOT/tests/canary.py" "$T/canary.log" "tcp:127.0.0.1:$CP" "tcp:[::1]:$((CP + 1))" \
	"tcp:0.0.0.0:$((CP + 2))" "udp:0.0.0.0:$((CP + 3))" >"$T/canary.out" 2>&1 &
PIDS+=($!)
for _ in $(seq 50); do grep -q ready "$T/canary.out" 2>/dev/null && break; sleep 0.1; done

# ---- hostd, routed, resolving through the test's resolver ----
mkdir -p "$STATE"
# A dashboard port of its own (8080 may be another test's): berth-web's
# HTTP port is one of the canaries.
printf 'dns_upstream = %s\nhttp_listen = 127.0.0.1:%s\n' "$RESOLVER" "$(free_port)" >>"$STATE/berth.conf"
start_hostd || { not_ok "hostd starts"; finish; }
web_up || not_ok "berth-web starts"
build_tiny || { not_ok "tiny image"; finish; }
berth create a >/dev/null || not_ok "create a"
berth create b >/dev/null || not_ok "create b"
A=$(berth show a --json | json ssh.host)
B=$(berth show b --json | json ssh.host)
GW=$(echo "$A" | sed 's/\.[0-9]*$/.1/')
check_match "a has an address of the guest network" "^${GUEST_NET%.0/24}\\." "$A"
check "b has another" test "$A" != "$B"
check_eq "the host's canary answers the host (positive control)" open "$(host_tcp 127.0.0.1 "$CP")"
: >"$T/canary.log"

# probe MACHINE PROTO IP PORT [MS]: what the guest gets.
probe() { berth exec "$1" -- netprobe "$2" "$3" "$4" "${5:-2000}" 2>/dev/null; }

# ---- guest -> host: nothing but DHCP and DNS ----
targets="$GW $INET.1"
targets="$targets $(host_addresses | paste -sd ' ')"
http_port=$(berth info --json | json dashboard | sed -n 's|.*:\([0-9]*\)/$|\1|p')
for t in $targets; do
	check_eq "a: host $t tcp $((CP + 2)) (canary on 0.0.0.0) is closed" timeout \
		"$(probe a tcp "$t" $((CP + 2)) 1500)"
	check_eq "a: host $t udp $((CP + 3)) (canary) is closed" timeout \
		"$(probe a udp "$t" $((CP + 3)) 1500)"
	check_eq "a: host $t ssh port 22 is closed" timeout "$(probe a tcp "$t" 22 1500)"
	check_eq "a: host $t berth-web's HTTP port (${http_port:-none}) is closed" timeout \
		"$(probe a tcp "$t" "${http_port:-0}" 1500)"
done
check_eq "berth-web's HTTP port answers the host" open "$(host_tcp 127.0.0.1 "${http_port:-0}")"
check "the canaries' log is there" test -f "$T/canary.log"
# The canaries' log, less connections from the host itself: other tests
# running beside this one connect to loopback ports of their own, which
# free_port may have given this test's canaries too (a guest's connection
# comes from its own address: the taps' anti-spoofing makes it so).
not_from_host() {
	local own
	own=$(ip -o addr show | awk '{ split($4, a, "/"); print a[1] }') || return 1
	awk 'NR == FNR { own[$1] = 1; next } !($NF in own)' <(echo "$own") "$1"
}
check_absent "no canary saw a guest" not_from_host "$T/canary.log"
check_match "DNS on the gateway answers" "$ALLOWED" \
	"$(berth exec a -- nslookup allowed.test "$GW" 2>/dev/null)"
check "b's address is closed to a (no guest reaches another)" \
	test "$(probe a tcp "$B" 22 1500)" != open
for c in $CLOSED; do
	check_match "a: $c (closed range) does not answer" 'refused|timeout|unreachable' \
		"$(probe a tcp "$c" 8080 1500)"
done

# ---- the internet: open ----
check_eq "open: the internet answers over TCP" open "$(probe a tcp $ALLOWED 8080)"
check_eq "open: and over UDP" open "$(probe a udp $ALLOWED 5300)"
check_eq "open: and by name (the gateway's resolver)" open \
	"$(berth exec a -- sh -c "netprobe tcp \$(nslookup blocked.test $GW | awk '/^Address/ { a = \$NF } END { print a }') 8080" 2>/dev/null)"

# ---- egress policies ----
set_egress() { berth set a --egress "$1" >/dev/null 2>"$T/set.err"; }
check "none: set" set_egress none
check_eq "none: the internet is refused at once (TCP reset)" refused "$(probe a tcp $ALLOWED 8080)"
check_match "none: UDP too" 'refused|timeout' "$(probe a udp $ALLOWED 5300)"
check_match "none: DNS still answers" "$ALLOWED" \
	"$(berth exec a -- nslookup allowed.test "$GW" 2>/dev/null)"
check_eq "b keeps the host's default" open "$(probe b tcp $ALLOWED 8080)"
check "allow list by name and port: set" set_egress allowed.test:8080
check_eq "the policy reads back" allowed.test:8080 "$(berth show a --json | json egress.policy)"
berth exec a -- nslookup allowed.test "$GW" >/dev/null 2>&1
check_eq "allowed.test:8080 is reached" open "$(probe a tcp $ALLOWED 8080)"
check_eq "allowed.test's other port is refused" refused "$(probe a tcp $ALLOWED 9090)"
# A restart of hostd keeps the machines' dnsmasq (no DHCP or DNS gap), and
# the name allowed is reached again after it: the table is made anew, its
# sets empty, and dnsmasq's cache is cleared, so the next answer (from
# upstream) fills them again.
dns_pid=$(cat "$STATE/net/dnsmasq.pid" 2>/dev/null)
kill_hostd TERM
start_hostd || { not_ok "hostd starts again"; finish; }
check "a restart of hostd keeps the machines' dnsmasq (pid $dns_pid)" \
	test -n "$dns_pid" -a "$(cat "$STATE/net/dnsmasq.pid" 2>/dev/null)" = "$dns_pid"
check "  which runs on" kill -0 "${dns_pid:-none}"
berth exec a -- nslookup allowed.test "$GW" >/dev/null 2>&1
check_eq "  and allowed.test:8080 is reached after it" open "$(probe a tcp $ALLOWED 8080)"
berth exec a -- nslookup blocked.test "$GW" >/dev/null 2>&1
check_eq "blocked.test is refused" refused "$(probe a tcp $BLOCKED 8080)"
check "allow list by CIDR: set" set_egress "$INET.16/28"
check_eq "the CIDR's host is reached on any port" open "$(probe a tcp $BLOCKED 9090)"
check_eq "and over UDP" open "$(probe a udp $BLOCKED 5300)"
check_eq "allowed.test (not in it) is refused" refused "$(probe a tcp $ALLOWED 8080)"
before=$(berth show a --json | json egress.policy)
check "a malformed rule is refused" test "$(berth set a --egress 'allowed.test,not_a_name' >/dev/null 2>&1; echo $?)" -ne 0
check_match "naming the rule" "not_a_name" "$(berth set a --egress 'allowed.test,not_a_name' 2>&1)"
check_match "a port out of range is refused, naming it" "99999" "$(berth set a --egress 'allowed.test:99999' 2>&1)"
check_eq "and the policy in force stays" "$before" "$(berth show a --json | json egress.policy)"
check_eq "as its rules do" open "$(probe a tcp $BLOCKED 9090)"
# 10.99.77.1 answers the host (checked above): only the closed ranges stop it.
check "a rule naming a closed range: set" set_egress "10.99.77.0/24,$INET.16/28"
check_match "the closed range stays closed" 'refused|timeout|unreachable' "$(probe a tcp 10.99.77.1 8080)"
check_eq "while the rule's other range is reached" open "$(probe a tcp $BLOCKED 9090)"

# A change cuts a connection it no longer allows, within a second.
check "open again" set_egress open
berth exec a -- sh -c "setsid netprobe stream $ALLOWED 8081 /tmp/drip </dev/null >/dev/null 2>&1 &" \
	>/dev/null 2>&1
for _ in $(seq 50); do
	[ "$(berth exec a -- sh -c 'wc -l </tmp/drip' 2>/dev/null)" -ge 5 ] 2>/dev/null && break
	sleep 0.2
done
check "the stream flows" test "$(berth exec a -- sh -c 'wc -l </tmp/drip' 2>/dev/null)" -ge 5
t0=$(date +%s%N)
set_egress "$BLOCKED"
t1=$(date +%s%N)
diag "berth set --egress took $(((t1 - t0) / 1000000)) ms"
sleep 1
end=$(berth exec a -- cat /tmp/drip.end 2>/dev/null)
check_match "the connection was cut within a second (the guest's next send met a reset)" 'reset' "$end"
n1=$(berth exec a -- sh -c 'wc -l </tmp/drip' 2>/dev/null)
sleep 1
check_eq "nothing more arrives" "$n1" "$(berth exec a -- sh -c 'wc -l </tmp/drip' 2>/dev/null)"
log=$(berth egress log a 2>&1)
check_match "berth egress log shows what was allowed" "$ALLOWED +tcp +8081" "$log"
check_match "and what was refused" "denied.*
.*$ALLOWED +tcp +8080" "$log"
j=$(berth --json egress log a)
check_eq "the API too" "allowed $ALLOWED 8081, denied $ALLOWED 8080" "$(echo "$j" | python3 -c 'import json, sys
j = json.load(sys.stdin)
def has(side, port):
    return any(d["address"] == sys.argv[1] and d["protocol"] == "tcp" and d["port"] == port
               for d in j[side])
print("allowed %s 8081, denied %s 8080" % (sys.argv[1] if has("allowed", 8081) else "-",
                                          sys.argv[1] if has("denied", 8080) else "-"))' "$ALLOWED")"
set_egress default

# ---- spoofing: a takes b's address and MAC for 8 s ----
BMAC=$(berth show b --json | json mac)
AMAC=$(berth show a --json | json mac)
berth exec a -- sh -c "(sleep 1
	ip link set eth0 down; ip link set eth0 address $BMAC; ip link set eth0 up
	ip addr flush dev eth0; ip addr add $B/24 dev eth0; ip route add default via $GW
	netprobe tcp $ALLOWED 8080 1500 >/tmp/spoof
	timeout 3 nslookup allowed.test $GW >/dev/null 2>&1 && echo open >>/tmp/spoof ||
		echo timeout >>/tmp/spoof
	sleep 6
	ip link set eth0 down; ip link set eth0 address $AMAC; ip link set eth0 up
	ip addr flush dev eth0; ip addr add $A/24 dev eth0; ip route add default via $GW
	) >/dev/null 2>&1 &" >/dev/null 2>&1
sleep 4
check_eq "meanwhile berth exec reaches b itself" b "$(berth exec b -- hostname 2>/dev/null)"
check_eq "and b still reaches the internet" open "$(probe b tcp $ALLOWED 8080)"
sleep 8
spoof=$(berth exec a -- cat /tmp/spoof 2>/dev/null)
check_eq "a, as b, got nothing (internet and DNS)" "timeout
timeout" "$spoof"
check_eq "a is itself again" open "$(probe a tcp $ALLOWED 8080)"

berth rm a >/dev/null
berth rm b >/dev/null
finish
