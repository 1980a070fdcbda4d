#!/bin/bash
# Exports and their clients (docs/security.md): a client that starts an
# export and reads nothing is dropped after api_send_timeout, which
# releases the machine (a delete works again); while it holds one, a
# second export waits its turn (max_host_exports, each compresses on every CPU:
# 503 too_many_exports); a client that reads gets the whole disk.  No VM
# boots: the machines are made --no-start from an imported disk of random
# bytes (it does not compress, so a client that reads nothing stalls the
# export within the first megabyte).
. "$(dirname "$0")/../lib.sh"

SEND=3 # api_send_timeout, seconds
mkdir -p "$STATE"
cat >>"$STATE/berth.conf" <<CONF
api_send_timeout = ${SEND}s
max_host_exports = 1
CONF
start_hostd || { not_ok "hostd starts"; finish; }
head -c 64M /dev/urandom >"$T/rnd.raw"
berth image import rnd "$T/rnd.raw" >/dev/null &&
	berth create m1 --image rnd --no-start >/dev/null &&
	berth create m2 --image rnd --no-start >/dev/null ||
	{ not_ok "an image and two machines"; finish; }

# export NAME FILE: the export over the socket into FILE; prints the status.
export_to() {
	curl -s -o "$2" -w '%{http_code}' --unix-socket "$STATE/hostd.sock" \
		"http://berth/v1/machines/$1/export"
}
check_eq "a client that reads gets m2's export" 200 "$(export_to m2 "$T/m2.zst")"
check_eq "  the whole disk" "$(sha256sum <"$T/rnd.raw" | cut -c1-64)" \
	"$(zstd -dc "$T/m2.zst" 2>/dev/null | head -c 64M | sha256sum | cut -c1-64)"

# The stalled client: a small receive buffer, the request, then nothing read.
python3 - "$STATE/hostd.sock" <<'PY' &
import socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
s.connect(sys.argv[1])
s.sendall(b"GET /v1/machines/m1/export HTTP/1.1\r\nHost: berth\r\n\r\n")
time.sleep(120)
PY
STALL_PID=$!
PIDS+=("$STALL_PID")
t0=$(date +%s%N)
# The export has begun when hostd says so.
for _ in $(seq 100); do
	grep -q "exporting root/m1" "$T/hostd.log" && break
	sleep 0.1
done
berth rm m1 >"$T/rm.out" 2>&1
check_match "while the stalled export runs, m1 cannot be deleted" "busy|export" "$(cat "$T/rm.out")"
check_eq "  and a second export waits its turn (max_host_exports = 1)" 503 "$(export_to m2 "$T/m2b.zst")"
check_match "  saying so" "too_many_exports" "$(head -c 300 "$T/m2b.zst" | tr -d '\0')"

ms=
for _ in $(seq $((SEND * 10 + 100))); do
	if berth rm m1 >"$T/rm.out" 2>&1; then
		ms=$((($(date +%s%N) - t0) / 1000000))
		break
	fi
	sleep 0.1
done
check "the stalled client is dropped and m1 released: deleted after ${ms:-never} ms" test -n "$ms"
diag "stalled export dropped, m1 deleted $ms ms after the request (api_send_timeout ${SEND}s)"
check "  not before api_send_timeout" test "${ms:-0}" -ge $((SEND * 1000 - 500))
check "  nor long after it" test "${ms:-99999}" -le $((SEND * 1000 + 5000))
check_match "hostd says the export stopped" "export of root/m1 stopped after" \
	"$(grep -m1 'export of root/m1' "$T/hostd.log")"
check_eq "the export slot is free again: m2's export" 200 "$(export_to m2 "$T/m2c.zst")"
kill "$STALL_PID" 2>/dev/null
finish
