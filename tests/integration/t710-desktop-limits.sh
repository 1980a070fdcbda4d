#!/bin/bash
# berth-desktop under too many connections, no machine needed: at most 256
# connections at once (the 257th is closed at once, and the bridge serves
# again when some go), a connection that never sends its request is closed
# after 10 s, at most --max-unauth-per-addr of those per source address (so
# one address's silent connections leave the others served), and a bridge
# out of file descriptors (EMFILE on accept) backs off instead of spinning,
# then serves again once descriptors are free.
. "$(dirname "$0")/../lib.sh"

BR_PID=
BR2_PID=
t710_cleanup() {
	[ -n "$BR_PID" ] && kill "$BR_PID" 2>/dev/null && wait "$BR_PID" 2>/dev/null
	[ -n "$BR2_PID" ] && kill "$BR2_PID" 2>/dev/null && wait "$BR2_PID" 2>/dev/null
	cleanup
}
trap t710_cleanup EXIT

# start_bridge PORT LOG [PRLIMIT...]: berth-desktop on PORT, waits until it
# listens (BRIDGE_ARGS: more of its options).
start_bridge() {
	local port=$1 log=$2
	shift 2
	# shellcheck disable=SC2086
	"$@" "$BIN/berth-desktop" --state "$STATE" --listen "127.0.0.1:$port" --user berth-desktop \
		${BRIDGE_ARGS:-} >>"$log" 2>&1 &
	LAST_PID=$!
	for _ in $(seq 50); do
		grep -q "listening on 127.0.0.1:$port" "$log" && return 0
		sleep 0.1
	done
	return 1
}
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
# page PORT [FROM]: the status of a page request (from address FROM).
page() { curl -s -m 10 ${2:+--interface "$2"} -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/page/desktop.css"; }

mkdir -p "$STATE"
start_hostd || { not_ok "hostd starts"; finish; }

PORT=$(free_port)
start_bridge "$PORT" "$T/desktop.log" || { not_ok "berth-desktop listens"; cat "$T/desktop.log"; finish; }
BR_PID=$LAST_PID
check_eq "the page is served" 200 "$(page "$PORT")"

# 256 connections that send nothing (16 from each of 16 addresses: the
# limit per address is 32), then more.
python3 - "$PORT" >"$T/cap.out" 2>&1 <<'EOF' &
import socket, sys, time
port = int(sys.argv[1])
idle = [socket.create_connection(("127.0.0.1", port), source_address=("127.0.0.%d" % (1 + i % 16), 0))
        for i in range(256)]
time.sleep(1)  # all accepted and counted
extra = socket.create_connection(("127.0.0.1", port), source_address=("127.0.0.20", 0))
extra.settimeout(3)
t = time.monotonic()
try:
    got = extra.recv(100)
    print("257th:", "closed" if got == b"" else "answered", f"{time.monotonic() - t:.1f}")
except socket.timeout:
    print("257th: kept open")
except ConnectionResetError:
    print("257th: closed", f"{time.monotonic() - t:.1f}")
sys.stdout.flush()
for s in idle[:64]:
    s.close()
print("closed 64", flush=True)
time.sleep(30)  # the rest stay until the bridge closes them (head timeout)
EOF
CAP_PID=$!
for _ in $(seq 100); do grep -q "closed 64" "$T/cap.out" && break; sleep 0.1; done
check_match "the 257th connection is closed at once" "^257th: closed [0-2]\." "$(head -1 "$T/cap.out")"
check "the bridge says why" grep -q "256 connections at once, at most 256: 127.0.0.20:[0-9]* is turned away" "$T/desktop.log"
sleep 0.5
check_eq "with 64 of them gone, the page is served again" 200 "$(page "$PORT")"
t0=$(date +%s)
for _ in $(seq 150); do
	[ "$(ss -Htn state established "( sport = :$PORT )" | wc -l)" -eq 0 ] && break
	sleep 0.1
done
took=$(($(date +%s) - t0))
check_absent "the bridge closes connections that send no request (after 10 s)" \
	ss -Htn state established "( sport = :$PORT )"
diag "the 192 silent connections were closed by the bridge ~$took s after the check began"
kill "$CAP_PID" 2>/dev/null
wait "$CAP_PID" 2>/dev/null
check "the bridge lives on" kill -0 "$BR_PID"

# Silent connections from one address: --max-unauth-per-addr 8.
PORT3=$(free_port)
BRIDGE_ARGS="--max-unauth-per-addr 8" start_bridge "$PORT3" "$T/desktop3.log" ||
	{ not_ok "berth-desktop --max-unauth-per-addr 8 listens"; finish; }
BR3_PID=$LAST_PID
PIDS+=("$BR3_PID")
python3 "$(dirname "$0")/silent_conns.py" "$PORT3" 127.0.0.2 40 1 4 >"$T/silent.out" &
SILENT=$!
for _ in $(seq 100); do [ -s "$T/silent.out" ] && break; sleep 0.1; done
check_eq "40 silent connections from 127.0.0.2 (--max-unauth-per-addr 8): 8 kept" 8 "$(cat "$T/silent.out")"
check_eq "  meanwhile 127.0.0.1 is served" 200 "$(page "$PORT3" 127.0.0.1)"
check_eq "  and 127.0.0.2 is not" 000 "$(page "$PORT3" 127.0.0.2)"
wait "$SILENT" 2>/dev/null
check_eq "  once they are gone, 127.0.0.2 is served" 200 "$(page "$PORT3" 127.0.0.2)"
kill "$BR3_PID" 2>/dev/null; wait "$BR3_PID" 2>/dev/null

# Out of descriptors: a bridge allowed 48 (and any number of connections
# per address, so that it runs out of descriptors first).
PORT2=$(free_port)
BRIDGE_ARGS="--max-unauth-per-addr 256" start_bridge "$PORT2" "$T/desktop2.log" \
	prlimit --nofile=48:48 -- ||
	{ not_ok "berth-desktop listens with 48 descriptors"; cat "$T/desktop2.log"; finish; }
BR2_PID=$LAST_PID
check_eq "with 48 descriptors it serves the page" 200 "$(page "$PORT2")"
python3 - "$PORT2" "$T/fill.ready" "$T/fill.go" <<'EOF' &
import os, socket, sys, time
port, ready, go = int(sys.argv[1]), sys.argv[2], sys.argv[3]
idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(60)]
open(ready, "w").close()
while not os.path.exists(go):
    time.sleep(0.05)
for s in idle:
    s.close()
time.sleep(1)
EOF
FILL_PID=$!
for _ in $(seq 100); do [ -e "$T/fill.ready" ] && break; sleep 0.1; done
sleep 1
c0=$(cpu_ticks "$BR2_PID")
sleep 3
c1=$(cpu_ticks "$BR2_PID")
hz=$(getconf CLK_TCK)
check "accept failing with EMFILE is logged" grep -q "accept: Too many open files" "$T/desktop2.log"
check "and the bridge does not spin meanwhile (CPU $((c1 - c0)) ticks of $((3 * hz)) in 3 s)" \
	[ $((c1 - c0)) -lt $((3 * hz / 5)) ]
touch "$T/fill.go"
wait "$FILL_PID" 2>/dev/null
sleep 0.5
check_eq "with the descriptors free again, the page is served" 200 "$(page "$PORT2")"
check "the bridge lives on" kill -0 "$BR2_PID"

finish
