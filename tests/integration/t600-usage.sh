#!/bin/bash
# The per-second meter on a real machine: running seconds billed as the
# ledger says and as the clock says (within a second or two of the
# commands' own time), storage only while suspended, a deleted machine
# stays billed for its life and no longer, totals per user, CSV, and a
# SIGKILL of hostd that leaves the ledger consistent.
. "$(dirname "$0")/../lib.sh"

mkdir -p "$STATE"
# 3.6 per vCPU-hour is 0.001 per second; storage is priced high enough
# that a small disk's few seconds show.
cat >"$STATE/berth.conf" <<'EOF'
currency = EUR
price_vcpu_hour = 3.6
price_memory_gib_hour = 0
price_storage_gib_month = 730000
EOF
start_hostd && build_tiny || { not_ok "hostd and image"; finish; }
usage() { berth usage --json; }
field() { # MACHINE FIELD < usage JSON
	python3 -c 'import json,sys
u=json.load(sys.stdin)
m=[x for x in u["machines"] if x["name"]==sys.argv[1]]
print(m[-1][sys.argv[2]] if m else "")' "$1" "$2"
}
ledger_running_s() { # seconds in running rows of MACHINE, per the ledger
	python3 - "$STATE/hostd.sock" "$1" <<'EOF'
import http.client, json, socket, sys, time
class C(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX); self.sock.connect(sys.argv[1])
c = C("berth"); c.request("GET", "/v1/ledger"); rows = json.load(c.getresponse())["ledger"]
now = int(time.time())
print(sum((r["end"] or now) - r["start"] for r in rows
          if r["name"] == sys.argv[2] and r["state"] in ("running", "paused")))
EOF
}

berth create m --no-start >/dev/null
t1=$(date +%s)
berth start m >/dev/null
sleep 3
berth suspend m >/dev/null
t2=$(date +%s)
wall=$((t2 - t1))
u=$(usage)
run=$(echo "$u" | field m running_s)
check_eq "billed running seconds are the ledger's" "$(ledger_running_s m)" "$run"
if [ "$run" -ge $((wall - 3)) ] && [ "$run" -le $((wall + 1)) ]; then
	ok "billed running seconds ($run) match the clock ($wall s from start to suspended)"
else
	not_ok "billed running seconds ($run) match the clock ($wall s)"
fi
check_eq "compute is running seconds × 0.001" \
	"$(python3 -c "print('%d.%09d' % divmod($run * 1000000, 10**9))")" "$(echo "$u" | field m compute)"
check_eq "the currency is the config's" EUR "$(echo "$u" | json currency)"
s1=$(echo "$u" | field m storage)
c1=$(echo "$u" | field m compute)
sleep 3
u=$(usage)
check_eq "while suspended: no compute" "$c1" "$(echo "$u" | field m compute)"
check "while suspended: storage goes on" python3 -c \
	"import sys; sys.exit(0 if float('$(echo "$u" | field m storage)') > float('$s1') > 0 else 1)"
show=$(berth show m --json)
check_eq "show has the machine's cost so far, in EUR" EUR "$(echo "$show" | json cost.currency)"
check "and its rate: storage only while suspended (< 3.6 an hour)" python3 -c \
	"import sys; sys.exit(0 if 0 < float('$(echo "$show" | json cost.per_hour)') < 3.6 else 1)"

# Metrics: a wake through `berth exec` is timed; machines by state; totals.
berth exec m -- true
metrics=$(curl -s --unix-socket "$STATE/hostd.sock" http://berth/metrics)
check_match "metrics: the wake is in the histogram" 'berth_wake_seconds_count 1' "$metrics"
check_match "metrics: machines by state" 'berth_machines\{state="running"\} 1' "$metrics"
check_match "metrics: the billed total" 'berth_billed_total\{currency="EUR"\} [0-9]+\.[0-9]{9}' "$metrics"
check_match "metrics: API answers by status" 'berth_api_responses_total\{code="200"\} [0-9]+' "$metrics"
check_match "metrics: running seconds" 'berth_running_seconds_total [1-9][0-9]*' "$metrics"
msg=$(setpriv --reuid=nobody --regid=nogroup --clear-groups curl -s \
	--unix-socket "$STATE/hostd.sock" http://berth/metrics)
check_match "metrics are root's" "only root" "$msg"

# A second machine, deleted: billed for its life, then no more.
berth create d >/dev/null
sleep 2
berth rm d >/dev/null
d1=$(usage | field d total)
check_eq "a deleted machine is still in the usage" True "$(usage | field d deleted)"
sleep 2
check_eq "and costs nothing more after its deletion" "$d1" "$(usage | field d total)"

# Totals: the user's total is the sum of the machines' (rounded once).
u=$(usage)
check_eq "one user" root "$(echo "$u" | json users.0.owner)"
check "the user's total is the machines' sum (within rounding)" python3 -c "
import json,sys
u=json.loads(sys.argv[1]); s=sum(m['total_nano'] for m in u['machines'])
t=u['users'][0]['total_nano']; sys.exit(0 if 0 <= t - s <= len(u['machines']) else 1)" "$u"
csv=$(berth usage --csv)
check_eq "CSV header" "machine_id,owner,name,deleted,running_s,storage_gib_s,compute,storage,total,currency" \
	"$(echo "$csv" | head -1)"
check_match "CSV has a row per machine" ",root,m,false,[0-9]+,[0-9]+,[0-9.]+,[0-9.]+,[0-9.]+,EUR" "$csv"
since=$(usage | json until)
r=$(berth usage --since "$since" --json | field m running_s)
check "--since now: only the seconds since then ($r)" test "$r" -le $(($(date +%s) - since))
refuse_msg=$(berth usage --since yesterday 2>&1)
check_match "a bad --since is refused" "not a time" "$refuse_msg"
msg=$(setpriv --reuid=nobody --regid=nogroup --clear-groups "$BIN/berth" --state "$STATE" \
	usage --all 2>&1)
check_match "only root sees every user's usage" "only root" "$msg"

# SIGKILL of hostd while m runs: the ledger stays consistent.
berth start m >/dev/null
sleep 2
kill_hostd KILL
sleep 2
start_hostd || not_ok "hostd restarts"
check "after SIGKILL: one open ledger row per machine, no overlaps" python3 - "$STATE/berth.db" <<'EOF'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
rows = db.execute("SELECT machine_id, state, start, end FROM ledger ORDER BY machine_id, id").fetchall()
by = {}
for mid, st, s, e in rows:
    by.setdefault(mid, []).append((st, s, e))
bad = False
for mid, rs in by.items():
    opens = [r for r in rs if r[2] is None]
    if len(opens) > 1: bad = True; print("# two open rows", mid)
    for a, b in zip(rs, rs[1:]):
        if a[2] is None or a[2] > b[1]: bad = True; print("# overlap", mid, a, b)
sys.exit(1 if bad else 0)
EOF
check "running again: the rate has the vCPU's 3.6 an hour" python3 -c \
	"import sys; sys.exit(0 if float('$(berth show m --json | json cost.per_hour)') >= 3.6 else 1)"
r1=$(usage | field m running_s)
sleep 2
r2=$(usage | field m running_s)
check "billing goes on after the restart" test "$r2" -gt "$r1"


# A power cut: hostd and the machine end at the same moment.  The running
# interval ends then (at most a second off), not when hostd starts again.
alive=$(python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(
	"SELECT value FROM meta WHERE key=\"alive\"").fetchone()[0])' "$STATE/berth.db")
check "hostd's heartbeat is at most 2 s old" test $(($(date +%s) - alive)) -le 2
dom=$(dom_of m)
tk=$(date +%s)
kill_hostd KILL
$VIRSH destroy "$dom" >/dev/null
td=$(date +%s)  # the machine ended between tk and td
sleep 6
start_hostd || not_ok "hostd restarts after the cut"
end=$(python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(
	"SELECT end FROM ledger WHERE name=\"m\" AND state=\"running\" ORDER BY id DESC LIMIT 1"
	).fetchone()[0])' "$STATE/berth.db")
diag "cut from $tk to $td, running interval ended at $end, hostd back at $(date +%s)"
check "after the cut, the running interval ends at the cut (±1 s)" \
	test "${end:-0}" -ge $((tk - 1)) -a "${end:-0}" -le $((td + 1))
check_eq "m is stopped" stopped "$(berth show m --json | json state)"

finish
