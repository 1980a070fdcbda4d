#!/bin/bash
# hostd's socket under a flood of connections (docs/security.md, "The API
# socket"): a local user of the test's own opens 2,000 idle connections and
# holds them; meanwhile another user's `berth ls` and root's answer within
# 2 s, the flooder keeps only api_max_connections_per_user of them (the
# rest are closed at once), a connection sending its request head a byte a
# second is closed at api_head_timeout, and so are the idle ones; during a
# storm of connects that keeps the listen backlog full, berth ls answers
# every time (the clients try a connect to a full backlog again).  Then,
# with a per-user cap above what users may hold together, the flooder
# takes the users' share and root and the gateway user still get in (the
# reserve).  No VM boots.
. "$(dirname "$0")/../lib.sh"

for c in useradd userdel setpriv /usr/bin/python3; do
	command -v "$c" >/dev/null || { skip "$c is not installed"; finish; }
done

FLOOD=$ROOT/tests/socket_flood.py
# Debian's, which every user may run (not a shim in root's home).
PY=/usr/bin/python3
FU=bflood$$
OTHER=nobody
# as USER CMD...: CMD as USER (its group, no others).  In the
# background, `as_argv USER` gives the setpriv argv, so that $! is CMD's
# pid (setpriv execs it), not a subshell's.
as_argv() { AS=(setpriv --reuid="$1" --regid="$(id -g "$1")" --clear-groups); }
as() {
	local AS
	as_argv "$1"
	shift
	"${AS[@]}" "$@"
}
# The user goes after its processes (PIDS, which cleanup ends).
drop_user() {
	for _ in $(seq 50); do
		id -u "$FU" >/dev/null 2>&1 || return 0
		userdel "$FU" 2>/dev/null && return 0
		sleep 0.1
	done
	echo "# cleanup: could not remove user $FU" >&2
}
trap 'cleanup; drop_user' EXIT
useradd -M -r -U -s /usr/sbin/nologin "$FU" || { not_ok "useradd $FU"; finish; }
mkdir -m 700 "$T/flood" && chown "$FU" "$T/flood"
STATUS=$T/flood/status

# ms CMD...: runs CMD, prints its wall time in ms; its exit status is
# CMD's, its output in $T/ms.out.
ms() {
	local t0 rc
	t0=$(date +%s%N)
	"$@" >"$T/ms.out" 2>&1
	rc=$?
	echo $((($(date +%s%N) - t0) / 1000000))
	return $rc
}
# field NAME: NAME's value in the flooder's status line.
field() { sed -n "s/.*\b$1=\([0-9.]*\).*/\1/p" "$STATUS" 2>/dev/null; }
# flood N: the flooder, N connections, until its status says it connected
# them all (60 s at most).  FLOOD_PID its pid (in PIDS).
flood() {
	rm -f "$STATUS"
	as_argv "$FU"
	"${AS[@]}" "$PY" "$FLOOD" hold "$STATE/hostd.sock" "$1" "$STATUS" &
	FLOOD_PID=$!
	PIDS+=("$FLOOD_PID")
	for _ in $(seq 600); do
		[ -s "$STATUS" ] && return 0
		sleep 0.1
	done
	return 1
}
unflood() { kill "$FLOOD_PID" 2>/dev/null; wait "$FLOOD_PID" 2>/dev/null; }

start_hostd || { not_ok "hostd starts"; finish; }
PER_USER=32 # the default api_max_connections_per_user
HEAD=10     # the default api_head_timeout, seconds

t=$(ms as "$OTHER" timeout 20 "$BIN/berth" --state "$STATE" ls)
rc=$?
check_eq "before the flood, $OTHER's berth ls answers" 0 "$rc"
[ "$rc" -eq 0 ] || sed 's/^/#   /' "$T/ms.out"
diag "$OTHER's berth ls without a flood: $t ms"

# The slow client starts with the flood: its deadline runs from its accept.
as_argv "$OTHER"
"${AS[@]}" "$PY" "$FLOOD" slow "$STATE/hostd.sock" >"$T/slow.out" 2>&1 &
SLOW_PID=$!
PIDS+=("$SLOW_PID")
t0=$(date +%s%N)
flood 2000 || { not_ok "the flooder connects"; finish; }
diag "flooder: $(cat "$STATUS") after $((($(date +%s%N) - t0) / 1000000)) ms"
sleep 1 # refused connections are closed at once: give them a second
check_eq "the flooder connected 2000 times" 2000 "$(($(field opened) + $(field failed)))"
check_eq "  and holds only its cap ($PER_USER), the rest closed at once" "$PER_USER" "$(field open)"

t=$(ms as "$OTHER" timeout 20 "$BIN/berth" --state "$STATE" ls)
rc=$?
check_eq "under the flood, $OTHER's berth ls answers" 0 "$rc"
[ "$rc" -eq 0 ] || sed 's/^/#   /' "$T/ms.out"
check "  within 2 s ($t ms)" test "$t" -lt 2000
diag "$OTHER's berth ls under the flood: $t ms"
t=$(ms timeout 20 "$BIN/berth" --state "$STATE" ls)
rc=$?
check_eq "under the flood, root's berth ls answers" 0 "$rc"
check "  within 2 s ($t ms)" test "$t" -lt 2000
diag "root's berth ls under the flood: $t ms"
check_eq "  while the flooder still holds its $PER_USER" "$PER_USER" "$(field open)"

# One more of the flooder's, past its cap: a 503 and closed at once (it
# sends nothing).
got=$(as "$FU" "$PY" -c 'import socket, sys, time
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.settimeout(2)
t0, data = time.monotonic(), b""
try:
    while True:
        b = s.recv(4096)
        if not b: break
        data += b
    print("closed after %.0f ms:" % ((time.monotonic() - t0) * 1000), data.split(b"\r\n")[0].decode())
except socket.timeout:
    print("open after 2 s")' "$STATE/hostd.sock")
diag "the flooder's connection $((PER_USER + 1)): $got"
check_match "the flooder's connection beyond its cap is closed within 2 s, with a 503" \
	"^closed after [0-9]+ ms: HTTP/1.1 503" "$got"
check_match "  hostd says why" "refused a connection from uid $(id -u "$FU"): api_max_connections_per_user" \
	"$(grep -m1 'refused a connection' "$T/hostd.log")"

wait "$SLOW_PID"
slow=$(cat "$T/slow.out")
diag "slow client (a byte a second): $slow"
check_match "a request head sent a byte a second is cut" "^cut after" "$slow"
s=$(sed -n 's/^cut after \([0-9]*\).*/\1/p' "$T/slow.out")
check "  at api_head_timeout (${HEAD}s): after ${s:-?} s" test "${s:-0}" -ge $((HEAD - 1)) -a "${s:-99}" -le $((HEAD + 3))
# The flood's idle connections owe a head too.
for _ in $(seq 50); do
	[ "$(field open)" = 0 ] && break
	sleep 0.2
done
check_eq "the flooder's idle connections are closed at the head deadline" 0 "$(field open)"
unflood

# A storm: the flooder connects and closes as fast as it can, holding
# nothing, which keeps the socket's listen backlog full (hostd accepts
# fewer a second).  The CLI's connect waits for a place in it: root's and
# another user's berth ls answer every time, within 5 s (the clients'
# wait; 0.3 s alone here, up to 1.65 s in a full run).
as_argv "$FU"
"${AS[@]}" "$PY" "$FLOOD" storm "$STATE/hostd.sock" 12 >"$T/storm.out" 2>&1 &
STORM_PID=$!
PIDS+=("$STORM_PID")
sleep 1
storm_ok=0 storm_slow=0 storm_ms=
for i in 1 2 3 4 5 6; do
	if [ $((i % 2)) = 1 ]; then
		t=$(ms timeout 20 "$BIN/berth" --state "$STATE" ls)
	else
		t=$(ms as "$OTHER" timeout 20 "$BIN/berth" --state "$STATE" ls)
	fi
	rc=$?
	[ "$rc" -eq 0 ] && storm_ok=$((storm_ok + 1))
	[ "$rc" -eq 0 ] || sed 's/^/#   /' "$T/ms.out"
	[ "$t" -lt 5000 ] || storm_slow=$((storm_slow + 1))
	storm_ms+="$t "
	sleep 0.5
done
wait "$STORM_PID"
diag "the storm: $(cat "$T/storm.out"); berth ls took ${storm_ms}ms"
check "the storm made connects fail (its backlog was full)" \
	test "$(sed -n 's/.*failed=\([0-9]*\).*/\1/p' "$T/storm.out")" -gt 0
check_eq "during a storm of connects, root's and $OTHER's berth ls answer 6 of 6 times" 6 "$storm_ok"
check_eq "  each within 5 s" 0 "$storm_slow"

# The reserve: users may hold 600 - 100 together; a flooder allowed more
# than that on its own takes them all, and root and the gateway still
# connect.
kill_hostd
cat >>"$STATE/berth.conf" <<CONF
api_max_connections = 600
api_reserved_connections = 100
api_max_connections_per_user = 5000
api_head_timeout = 60s
CONF
start_hostd || { not_ok "hostd restarts with a small api_max_connections"; finish; }
flood 2000 || { not_ok "the flooder connects again"; finish; }
sleep 1
check_eq "the flooder holds the users' share (500)" 500 "$(field open)"
t=$(ms timeout 20 "$BIN/berth" --state "$STATE" ls)
rc=$?
check_eq "root's berth ls answers (the reserve)" 0 "$rc"
check "  within 2 s ($t ms)" test "$t" -lt 2000
diag "root's berth ls with the users' share taken: $t ms"
t=$(ms as "$OTHER" timeout 20 "$BIN/berth" --state "$STATE" ls)
check "another user's is refused (the users' share is taken)" test $? -ne 0
check_match "  saying why" "refused the connection: users' share of api_max_connections" \
	"$(head -1 "$T/ms.out")"
diag "  $OTHER: $(head -1 "$T/ms.out") ($t ms)"
for gw in berth-sshgw berth-desktop; do
	code=$(as "$gw" timeout 5 curl -s -o /dev/null -w '%{http_code}' \
		--unix-socket "$STATE/hostd.sock" http://berth/v1/gateway/epoch)
	check_eq "$gw's user gets an answer (the reserve)" 200 "$code"
done
unflood
finish
