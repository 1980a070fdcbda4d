#!/bin/bash
# Lifecycle-event webhooks on a real machine: a receiver on 127.0.0.1
# (webhook_receiver.py, opened by webhook_allow) checks each delivery's
# signature with the webhook's secret and records it.  created and started
# arrive signed, the body the event as /v1/events gives it; a suspend by
# the idle policy arrives with its "idle for" cause, a wake by berth exec
# with its own; a receiver that answers 500 twice gets the same delivery a
# third time (attempts 3, delivered), one that never answers 2xx ends
# failed after webhook_attempts; bad input is refused naming the field;
# closed addresses (loopback beyond webhook_allow, private, link-local,
# the guest network) are refused at registration and, after a restart
# without webhook_allow, at the connection; another user neither lists,
# deletes nor reads the log of the webhook; a removed webhook gets nothing
# more; a delivery in flight when hostd stops is delivered after it starts
# again.
. "$(dirname "$0")/../lib.sh"

command -v setpriv >/dev/null || { skip "setpriv is not installed (util-linux)"; finish; }

chmod 711 "$T"
U=bt$$w
test_user "$U" || { not_ok "useradd $U"; finish; }
mkdir -p "$STATE"
cat >"$STATE/berth.conf" <<'EOF'
idle_timeout = 6s
idle_check_interval = 1s
webhook_retry = 1s
webhook_attempts = 4
webhook_allow = 127.0.0.1/32
EOF
start_hostd && build_tiny || { not_ok "hostd and image"; finish; }

# The receiver.
RLOG=$T/received.jsonl
: >"$RLOG"
python3 "$ROOT/tests/integration/webhook_receiver.py" "$T/rport" "$RLOG" "$T" &
PIDS+=($!)
for _ in $(seq 50); do [ -s "$T/rport" ] && break; sleep 0.1; done
P=$(cat "$T/rport" 2>/dev/null)
check_match "the receiver listens" '^[0-9]+$' "$P"
R=http://127.0.0.1:$P

ub() { as_user "$U" "$BIN/berth" --state "$STATE" "$@"; }
api() { # api METHOD PATH [BODY]: "STATUS BODY" of hostd.sock as root
	curl -s -o "$T/api.out" -w '%{http_code}' --unix-socket "$STATE/hostd.sock" -X "$1" \
		${3:+-H 'Content-Type: application/json' -d "$3"} "http://berth$2"
	echo " $(cat "$T/api.out")"
}
# received NAME [FILTER]: the receiver's records for path NAME as JSON lines.
received() {
	python3 - "$RLOG" "$1" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r["name"] == sys.argv[2]:
        print(json.dumps(r))
PY
}
# wait_for SECONDS CMD...: until CMD succeeds.
wait_for() {
	local s=$1 i
	shift
	for i in $(seq $((s * 5))); do "$@" && return 0; sleep 0.2; done
	return 1
}
# has_event NAME KIND MACHINE: the receiver got KIND of MACHINE on NAME.
has_event() {
	received "$1" | python3 -c 'import json, sys
sys.exit(0 if any(json.loads(json.loads(l)["body"]).get("kind") == sys.argv[1] and
                  json.loads(json.loads(l)["body"]).get("machine") == sys.argv[2]
                  for l in sys.stdin) else 1)' "$2" "$3"
}
# event_of NAME KIND MACHINE FIELD: FIELD of the first such record ("body." fields the event's).
event_of() {
	received "$1" | python3 -c 'import json, sys
for l in sys.stdin:
    r = json.loads(l); b = json.loads(r["body"])
    if b.get("kind") == sys.argv[1] and b.get("machine") == sys.argv[2]:
        f = sys.argv[3]
        v = b.get(f[5:]) if f.startswith("body.") else r.get(f)
        print(json.dumps(v) if isinstance(v, (bool, dict, list)) else v); break' "$2" "$3" "$4"
}
# log_state ID: "STATE ATTEMPTS" of webhook ID's first delivery.
log_state() {
	berth webhook log "$1" --json | python3 -c 'import json, sys
d = json.load(sys.stdin)["deliveries"]
print(("%s %s" % (d[0]["state"], d[0]["attempts"])) if d else "none")'
}
add_hook() { # add_hook NAME [ARGS...]: the new webhook's id; its secret in $T/secret-NAME
	local name=$1 out
	shift
	out=$(berth webhook add "$R/$name" "$@" --json) || return 1
	echo "$out" | json secret >"$T/secret-$name"
	echo "$out" | json id
}

# ---- bad input: 400 naming the field, nothing made ----
for bad in 'ftp://127.0.0.1/' 'http://' 'http://user:pw@127.0.0.1/' "http://127.0.0.1:99999/" \
	   "http://127.0.0.1/#x" "http://127.0.0.1/$(head -c 600 /dev/zero | tr '\0' a)"; do
	out=$(api POST /v1/webhooks "{\"url\": \"$bad\"}")
	check_match "url '${bad:0:40}': 400 invalid_url" '^400 .*"invalid_url".*url' "$out"
done
check_match "no url: 400 naming url" '^400 .*"invalid_url".*url .*required' \
	"$(api POST /v1/webhooks '{}')"
check_match "an unknown kind: 400 invalid_events naming it" '^400 .*"invalid_events".*events\[1\]' \
	"$(api POST /v1/webhooks "{\"url\": \"$R/ok\", \"events\": [\"created\", \"exploded\"]}")"
check_match "events not a list: 400" '^400 .*"invalid_events"' \
	"$(api POST /v1/webhooks "{\"url\": \"$R/ok\", \"events\": \"created\"}")"
check_match "a bad machine name: 400 invalid_name" '^400 .*"invalid_name".*machine' \
	"$(api POST /v1/webhooks "{\"url\": \"$R/ok\", \"machine\": \"../x\"}")"
check_match "an unknown field: 400" '^400 ' \
	"$(api POST /v1/webhooks "{\"url\": \"$R/ok\", \"secret\": \"mine\"}")"
# Closed addresses: refused naming why (none is connected to).
gw=$(echo "$GUEST_NET" | sed 's|\.0/24$|.1|')
for u in "http://127.0.0.2:$P/" "http://[::1]:$P/" "http://169.254.169.254/latest" \
	 "https://10.1.2.3/" "http://192.168.1.1/" "http://$gw:8080/" "http://0.0.0.0:$P/"; do
	out=$(api POST /v1/webhooks "{\"url\": \"$u\"}")
	check_match "$u: 400 url_refused saying why" \
		'^400 .*"url_refused".*does not post there: .* is [a-z-]+.*webhook_allow' "$out"
done
check_eq "nothing was made" '{"webhooks": []}' "$(berth webhook ls --json | python3 -c \
	'import json,sys; print(json.dumps(json.load(sys.stdin)))')"

# ---- the webhooks ----
W1=$(add_hook ok)
check_match "berth webhook add: an id" '^[0-9]+$' "$W1"
check_match "  and a secret of 64 hex digits" '^[0-9a-f]{64}$' "$(cat "$T/secret-ok")"
W2=$(add_hook fail2 --events suspended --machine m)
W3=$(add_hook fail --events suspended,suspended)
ls=$(berth webhook ls --json)
check_eq "berth webhook ls: both, no secret" "$W1 $W2 $W3 False" "$(echo "$ls" | python3 -c '
import json, sys
w = json.load(sys.stdin)["webhooks"]
print(" ".join(str(x["id"]) for x in w), any("secret" in x for x in w))')"
check_eq "  their events and machine" '["suspended"] m ["suspended"] None 11' \
	"$(echo "$ls" | python3 -c 'import json, sys
w = {x["id"]: x for x in json.load(sys.stdin)["webhooks"]}
print(json.dumps(w['"$W2"']["events"]), w['"$W2"']["machine"], json.dumps(w['"$W3"']["events"]),
      w['"$W3"']["machine"], len(w['"$W1"']["events"]))')"
check_match "berth webhook ls: a table" "$W2 .* m +suspended +$R/fail2" "$(berth webhook ls)"
check_eq "the database is root's alone" 600 "$(stat -c %a "$STATE/berth.db")"

berth create m >/dev/null || not_ok "create m"
check "created arrives" wait_for 60 has_event ok created m
check "started arrives" wait_for 60 has_event ok started m
check_eq "  signed with the secret (HMAC-SHA256 of TIMESTAMP.BODY)" "true true" \
	"$(event_of ok created m sig_ok) $(event_of ok started m sig_ok)"
check_eq "  X-Berth-Event says the kind, Content-Type JSON" "created application/json" \
	"$(event_of ok created m event) $(event_of ok created m content_type)"
id=$(event_of ok created m body.id)
check_eq "  the body is the event as GET /v1/events gives it" "True" \
	"$(berth events m --json | python3 -c 'import json, sys
ev = [e for e in json.load(sys.stdin)["events"] if e["id"] == int(sys.argv[1])]
print(bool(ev) and ev[0] == json.loads(sys.argv[2]))' "$id" "$(event_of ok created m body)")"
check_match "  its cause" "image tiny; POST /v1/machines by root" "$(event_of ok created m body.cause)"

check "a suspend by the idle policy arrives" wait_for 60 has_event ok suspended m
check_match "  with its cause" '^idle for [0-9]+s \(timeout 6s\)$' "$(event_of ok suspended m body.cause)"
check_eq "  signed" true "$(event_of ok suspended m sig_ok)"

# 500, 500, 200: the same delivery three times, then delivered.
check "the receiver answering 500 twice gets it a third time" wait_for 30 \
	eval '[ "$(received fail2 | wc -l)" -ge 3 ]'
check_eq "  the same delivery each time, signed each time" "1 True" \
	"$(received fail2 | python3 -c 'import json, sys
r = [json.loads(l) for l in sys.stdin]
print(len({x["delivery"] for x in r}), all(x["sig_ok"] for x in r))')"
check "  its log: delivered after 3 attempts" wait_for 10 eval \
	'[ "$(log_state "$W2")" = "delivered 3" ]'
check_match "  berth webhook log: a table" "suspended +delivered +3 .*HTTP 200" \
	"$(berth webhook log "$W2")"
check_eq "  only the suspend of m went to it (its events and machine)" suspended \
	"$(received fail2 | python3 -c 'import json, sys
print(" ".join(sorted({json.loads(json.loads(l)["body"])["kind"] for l in sys.stdin})))')"
# Never 2xx: webhook_attempts (4) tries, backing off, then failed.
check "the receiver that never answers 2xx: failed" wait_for 30 eval \
	'[ "$(log_state "$W3")" = "failed 4" ]'
check_eq "  after 4 requests" 4 "$(received fail | wc -l)"
check_match "  the log's last answer" "failed +4 .*HTTP status 500" "$(berth webhook log "$W3")"
gaps=$(received fail | python3 -c 'import json, sys
t = [int(json.loads(l)["timestamp"]) for l in sys.stdin]
print(t[-1] - t[0])')
check "  backing off: the 4 tries span 1+2+4 s at least ($gaps s)" test "$gaps" -ge 6

# A wake by berth exec arrives with its cause.
berth exec m -- true >/dev/null 2>&1
check "a wake arrives" wait_for 60 has_event ok woke m
check_match "  with its cause (berth exec's request)" '/v1/machines/m/[a-z/]+ by root$' \
	"$(event_of ok woke m body.cause)"
check_eq "every delivery to ok was signed" "True" "$(received ok | python3 -c 'import json, sys
r = [json.loads(l) for l in sys.stdin]; print(bool(r) and all(x["sig_ok"] for x in r))')"

diag "event to delivery at the receiver (first attempts to ok): $(received ok | python3 -c '
import json, sys, datetime
d = []
for l in sys.stdin:
    r = json.loads(l); b = json.loads(r["body"])
    t = datetime.datetime.strptime(b["time"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()
    d.append((r["at"] - t) * 1000)
d.sort()
print("%d deliveries, median %.0f ms, max %.0f ms" % (len(d), d[len(d) // 2], d[-1]) if d else "none")')"

# ---- another user ----
out=$(ub webhook ls --json)
check_eq "$U lists none of root's" '[]' "$(echo "$out" | python3 -c 'import json, sys
print(json.dumps(json.load(sys.stdin)["webhooks"]))')"
out=$(ub webhook rm "$W1" 2>&1)
check_match "$U cannot remove root's: 404" "no webhook $W1" "$out"
out=$(ub webhook log "$W1" 2>&1)
check_match "$U cannot read its log: 404" "no webhook $W1" "$out"
check_match "  (the log route itself, 404 no_webhook)" '"no_webhook"' \
	"$(as_user "$U" curl -s --unix-socket "$STATE/hostd.sock" "http://berth/v1/webhooks/$W1/deliveries")"
check_eq "  root's is still there" "$W1" "$(berth webhook ls --json | python3 -c 'import json, sys
print(json.load(sys.stdin)["webhooks"][0]["id"])')"
UB=$(ub webhook add "$R/okb" --json | json id)
check_match "$U adds one of their own" '^[0-9]+$' "$UB"
check_match "  root cannot read its log as root's (404)" "no webhook $UB" \
	"$(berth webhook log "$UB" 2>&1)"
# 16 at most.
for i in $(seq 2 16); do ub webhook add "$R/okb" >/dev/null 2>&1; done
out=$(ub webhook add "$R/okb" 2>&1)
check_match "the 17th: 409 naming the limit" "16 webhooks already" "$out"
check_eq "  $U has 16" 16 "$(ub webhook ls --json | python3 -c 'import json, sys
print(len(json.load(sys.stdin)["webhooks"]))')"
for i in $(ub webhook ls --json | python3 -c 'import json, sys
print(" ".join(str(w["id"]) for w in json.load(sys.stdin)["webhooks"]))'); do
	ub webhook rm "$i" >/dev/null || not_ok "$U removes webhook $i"
done
check_eq "root's machines' events went to none of $U's" 0 "$(received okb | wc -l)"

# Through berth-web's socket, with a token.
TOK=$(berth token create --name hooks 2>/dev/null)
out=$(curl -s --unix-socket "$STATE/web.sock" -H "Authorization: Bearer $TOK" \
	-H 'Content-Type: application/json' -d "{\"url\": \"$R/okt\", \"events\": [\"deleted\"]}" \
	http://berth/v1/webhooks)
WT=$(echo "$out" | json id)
check_match "a token adds one on web.sock (with its secret)" '^[0-9]+ [0-9a-f]{64}$' \
	"$WT $(echo "$out" | json secret)"
check_match "  and lists it there" "\"id\": ?$WT," "$(curl -s --unix-socket "$STATE/web.sock" \
	-H "Authorization: Bearer $TOK" http://berth/v1/webhooks)"
check_match "  and removes it" "\"deleted\": ?$WT\}" "$(curl -s --unix-socket "$STATE/web.sock" \
	-H "Authorization: Bearer $TOK" -X DELETE "http://berth/v1/webhooks/$WT")"

# ---- a removed webhook gets nothing more; a redirect, a silent receiver, TLS ----
WR=$(add_hook redir --events created --machine m2)
WH=$(add_hook hangt --events created --machine m2)
# An HTTPS receiver whose certificate no trusted CA signed.
openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 \
	-keyout "$T/tls.pem" -out "$T/tls.crt" -days 1 2>/dev/null && cat "$T/tls.crt" >>"$T/tls.pem"
python3 "$ROOT/tests/integration/webhook_receiver.py" "$T/tport" "$T/tls.jsonl" "$T" "$T/tls.pem" &
PIDS+=($!)
for _ in $(seq 50); do [ -s "$T/tport" ] && break; sleep 0.1; done
WS=$(berth webhook add "https://127.0.0.1:$(cat "$T/tport")/ok" --events created --machine m2 --json | json id)
check_match "an https webhook" '^[0-9]+$' "$WS"
W5=$(add_hook failx --events created --machine m2)
before=$(received failx | wc -l)
berth create m2 --no-start >/dev/null || not_ok "create m2"
check "its first try arrives" wait_for 20 eval '[ "$(received failx | wc -l)" -gt "$before" ]'
berth webhook rm "$W5" >/dev/null || not_ok "remove webhook $W5"
at_rm=$(received failx | wc -l)
sleep 8
after=$(received failx | wc -l)
check "removed: no more tries in 8 s (at most one in flight): $at_rm then $after" \
	test "$after" -le $((at_rm + 1))
check_match "  its log is gone (404)" "no webhook $W5" "$(berth webhook log "$W5" 2>&1)"
check_eq "  and its queue, from the database" 0 "$(python3 -c 'import sqlite3, sys
print(sqlite3.connect(sys.argv[1]).execute(
    "SELECT count(*) FROM webhook_deliveries WHERE webhook_id = ?", (int(sys.argv[2]),)).fetchone()[0])' \
	"$STATE/berth.db" "$W5")"
check "a redirect is not followed: the attempt failed (302)" wait_for 10 eval \
	"berth webhook log $WR | grep -q 'HTTP status 302'"
dr=$(berth webhook log "$WR" --json | json deliveries.0.id)
check_eq "  /ok never got its delivery ($dr)" "0" "$(received ok | python3 -c 'import json, sys
print(sum(json.loads(l)["delivery"] == sys.argv[1] for l in sys.stdin))' "$dr")"
check "https with a certificate no CA signed: refused by hostd" wait_for 10 eval \
	"berth webhook log $WS --json | json deliveries.0.last_error | grep -Eq 'SSL|certificate'"
check_eq "  the receiver got no request" 0 "$(cat "$T/tls.jsonl" 2>/dev/null | wc -l)"
check "a receiver silent for 10 s: the attempt times out, the next delivers" wait_for 25 eval \
	'[ "$(log_state "$WH")" = "delivered 2" ]'
gap=$(received hangt | python3 -c 'import json, sys
t = [int(json.loads(l)["timestamp"]) for l in sys.stdin]
print(t[1] - t[0] if len(t) == 2 else -1)')
check "  the second try 10 s after the first at least (+1 s backoff): $gap s" test "$gap" -ge 10
berth webhook rm "$WR" >/dev/null
berth webhook rm "$WH" >/dev/null
berth webhook rm "$WS" >/dev/null

# ---- a delivery in flight when hostd stops: delivered after it starts ----
W4=$(add_hook hang1 --events deleted --machine m2)
berth rm m2 >/dev/null || not_ok "rm m2"
check "the deletion's delivery is in flight (the receiver holds it)" wait_for 20 \
	eval '[ "$(received hang1 | wc -l)" -ge 1 ]'
t0=$(date +%s%N)
kill_hostd TERM
ms=$((($(date +%s%N) - t0) / 1000000))
diag "hostd stopped in $ms ms with a delivery in flight"
check "  hostd stops at once with it in flight ($ms ms)" test "$ms" -lt 5000
check_eq "  it is pending in the database" "pending" "$(python3 -c 'import sqlite3, sys
print(sqlite3.connect(sys.argv[1]).execute(
    "SELECT state FROM webhook_deliveries WHERE webhook_id = ?", (int(sys.argv[2]),)).fetchone()[0])' \
	"$STATE/berth.db" "$W4")"
start_hostd || not_ok "hostd starts again"
check "  delivered after the restart" wait_for 30 eval '[ "$(log_state "$W4")" = "delivered 1" ]'
check_eq "  the same delivery, twice received, signed" "2 1 True" \
	"$(received hang1 | python3 -c 'import json, sys
r = [json.loads(l) for l in sys.stdin]
print(len(r), len({x["delivery"] for x in r}), all(x["sig_ok"] for x in r))')"

# ---- without webhook_allow: refused at registration and at the connection ----
kill_hostd TERM
sed -i '/^webhook_allow/d' "$STATE/berth.conf"
start_hostd || not_ok "hostd starts without webhook_allow"
out=$(api POST /v1/webhooks "{\"url\": \"$R/ok\"}")
check_match "127.0.0.1 without webhook_allow: 400 saying it is loopback" \
	'^400 .*"url_refused".*there: 127\.0\.0\.1 is loopback.*webhook_allow' "$out"
n_ok=$(received ok | wc -l)
berth create m3 --no-start >/dev/null || not_ok "create m3"
check "an event for the webhook made before: refused at the connection" wait_for 20 eval \
	"berth webhook log $W1 | grep -q 'refused: hostd does not post there: 127.0.0.1 is loopback'"
check_eq "  the receiver got nothing" "$n_ok" "$(received ok | wc -l)"
berth rm m3 >/dev/null 2>&1
berth webhook rm "$W1" >/dev/null
check_eq "each (webhook, event) had a delivery id of its own, never reused" true \
	"$(python3 -c 'import json, sys
pairs = {}
for l in open(sys.argv[1]):
    r = json.loads(l)
    pairs.setdefault(r["delivery"], set()).add((r["name"], json.loads(r["body"])["id"]))
print(str(len(pairs) > 5 and all(len(v) == 1 for v in pairs.values())).lower())' "$RLOG")"

finish
