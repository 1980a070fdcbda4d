#!/bin/bash
# E2B's control plane (web/e2b.h) driven by the real e2b SDK (npm, 2.51.0,
# pinned in web/package.json) with its documented self-hosted settings,
# E2B_DOMAIN=DOMAIN:PORT and E2B_API_KEY, over HTTPS with the test's own
# CA (NODE_EXTRA_CA_CERTS), DOMAIN's names resolved to loopback for the
# node process alone (tests/e2b/loopback.mjs), and nothing of berth's in
# between: create with metadata, envVars and a timeout makes a berth
# machine (berth ls, berth exec in it); list with metadata and state
# filters, pages; getInfo; setTimeout moves the deadline; pause suspends
# it (409 again: false); connect resumes it; a deadline passing pauses a
# sandbox with autoPause and deletes one without; kill, kill again false;
# a bad key is AuthenticationError; another user's sandbox is not found;
# a quota refusal is RateLimitError.  The older POST /sandboxes path, bad
# input and the hosts with raw curl.
. "$(dirname "$0")/../lib.sh"

SDK=$ROOT/build/node/node_modules/e2b/package.json
if ! command -v node >/dev/null || [ ! -f "$SDK" ] || ! command -v openssl >/dev/null; then
	skip "the E2B SDK: needs node, openssl and $SDK (sh deploy/install-deps.sh test)"
	finish
fi
command -v setpriv >/dev/null || { skip "setpriv is not installed (util-linux)"; finish; }
check_eq "the SDK is the pinned 2.51.0" 2.51.0 "$(json version <"$SDK")"

chmod 711 "$T"
UB=tb$$
test_user "$UB" || { not_ok "useradd $UB"; finish; }
ub() { as_user "$UB" "$BIN/berth" --state "$STATE" "$@"; }

# ---- a CA of the test's own, a certificate for DOMAIN and *.DOMAIN -----------
DOMAIN=berth.test
tls_ca "$DOMAIN" || { not_ok "the test's CA and certificate"; finish; }

PORT=$(free_port)
mkdir -p "$STATE"
cat >>"$STATE/berth.conf" <<EOF
http_listen = 127.0.0.1:$PORT
preview_domain = $DOMAIN
tls_cert = $T/tls/cert.pem
tls_key = $T/tls/key.pem
idle_timeout = never
idle_check_interval = 1s
max_machines = 1
EOF
start_hostd && build_tiny || { not_ok "hostd and image"; finish; }
web_up || { not_ok "berth-web starts"; finish; }

# ---- keys -------------------------------------------------------------------
TOKEN=$(berth token create --name e2b 2>"$T/token.err")
check_match "berth token create prints a berth token" '^berth_[0-9a-f]{64}$' "$TOKEN"
KEY=e2b_${TOKEN#berth_}
check_match "  and, beside it, the same as an E2B API key" \
	"as an E2B API key \\(E2B_API_KEY\\): $KEY\$" "$(cat "$T/token.err")"
check_eq "  --json has it as e2b_key" "e2b_" \
	"$(berth token create --name j --json | json e2b_key | cut -c1-4)"
UTOKEN=$(ub token create 2>/dev/null)
UKEY=e2b_${UTOKEN#berth_}
check_match "$UB has a token too" '^e2b_[0-9a-f]{64}$' "$UKEY"

# sdk OP ARG...: one SDK call as root's key (KEY=... sdk for another).
sdk() {
	E2B_API_KEY=${KEY_AS:-$KEY} E2B_DOMAIN=$DOMAIN:$PORT E2B_TEST_DOMAIN=$DOMAIN \
		NODE_EXTRA_CA_CERTS=$T/tls/ca.pem \
		node --import "$ROOT/tests/e2b/loopback.mjs" "$ROOT/tests/e2b/sdk.mjs" "$@"
}
# api METHOD PATH [CURL ARGS...]: curl on api.DOMAIN (status, then body),
# the name resolved to loopback for curl alone, with root's key.
api() {
	local m=$1 p=$2
	shift 2
	curl -s --cacert "$T/tls/ca.pem" --resolve "api.$DOMAIN:$PORT:127.0.0.1" -X "$m" \
		-w '\n%{http_code}' -H "X-API-Key: $KEY" "$@" "https://api.$DOMAIN:$PORT$p"
}
state() { berth show "$1" --json 2>/dev/null | json state; }
# wait_for SECONDS CMD...: poll CMD every 0.5 s until it succeeds.
wait_for() {
	local s=$1 i
	shift
	for i in $(seq $((s * 2))); do
		"$@" && return 0
		sleep 0.5
	done
	return 1
}
is_state() { [ "$(state "$1")" = "$2" ]; }
gone() { ! berth ls 2>/dev/null | grep -q "^$1 "; }
name_of() { echo "${1%-root}"; }

# ---- create -------------------------------------------------------------------
t0=$(date +%s%N)
out=$(sdk create tiny 120 '{"team":"a b&c","run":"1"}' '{"FOO":"bar baz"}')
t1=$(date +%s%N)
S1=$(echo "$out" | json sandboxId 2>/dev/null)
check_match "Sandbox.create(tiny, {metadata, envs, timeoutMs}) gives sandbox NAME-root ($out)" \
	'^e2b-[0-9a-f]{8}-root$' "$S1"
diag "Sandbox.create: $(((t1 - t0) / 1000000)) ms (a TCG boot until SSH answers)"
N1=$(name_of "$S1")
check_match "berth ls shows it, running" $'\n'"$N1 +running +tiny" "$(berth ls)"
j=$(berth show "$N1" --json)
check_eq "  its image is tiny" tiny "$(echo "$j" | json image)"
check_eq "  its metadata kept (a b&c)" '{"run": "1", "team": "a b&c"}' "$(echo "$j" | json metadata)"
check_eq "  its env (envVars) kept" '{"FOO": "bar baz"}' "$(echo "$j" | json env)"
check_eq "  its deadline deletes it" delete "$(echo "$j" | json expire_action)"
left=$(echo "$j" | json expires_in_s)
check "  in at most 120 s ($left)" test "$left" -le 120 -a "$left" -ge 60
check_match "berth show says so" "expires: +in [0-9]+[sm].*\\(then delete\\)" "$(berth show "$N1")"
check_match "  and shows the metadata" "metadata: +run=1, team=a b&c" "$(berth show "$N1")"
check_eq "berth exec works in it" "hi from e2b" "$(berth exec "$N1" -- echo hi from e2b)"

out=$(sdk create base 600 '{"team":"x"}' '{}' pause)
S2=$(echo "$out" | json sandboxId 2>/dev/null)
check_match "a second, base (the default image), autoPause ($out)" '^e2b-[0-9a-f]{8}-root$' "$S2"
N2=$(name_of "$S2")
check_eq "  its deadline suspends it" suspend "$(berth show "$N2" --json | json expire_action)"
check_eq "  from the default image" tiny "$(berth show "$N2" --json | json image)"

# ---- list, info ------------------------------------------------------------------
check_eq "Sandbox.list with a metadata filter {team: 'a b&c'}: S1 alone" "[\"$S1\"]" \
	"$(sdk list '{"metadata":{"team":"a b&c"}}' | python3 -c 'import json,sys
print(json.dumps([i["id"] for p in json.load(sys.stdin) for i in p]))')"
check_eq "  {team: x}: S2 alone" "[\"$S2\"]" \
	"$(sdk list '{"metadata":{"team":"x"}}' | python3 -c 'import json,sys
print(json.dumps([i["id"] for p in json.load(sys.stdin) for i in p]))')"
check_eq "  {team: x, run: 1}: none (ANDed)" "[]" \
	"$(sdk list '{"metadata":{"team":"x","run":"1"}}' | python3 -c 'import json,sys
print(json.dumps([i["id"] for p in json.load(sys.stdin) for i in p]))')"
check_eq "  state paused: none yet" "[]" \
	"$(sdk list '{"state":["paused"]}' | python3 -c 'import json,sys
print(json.dumps([i["id"] for p in json.load(sys.stdin) for i in p]))')"
pages=$(sdk list '{"state":["running"]}' 1)
check_eq "  limit 1: two pages of one, newest first (X-Next-Token)" "[[\"$S2\"], [\"$S1\"]]" \
	"$(echo "$pages" | python3 -c 'import json,sys
print(json.dumps([[i["id"] for i in p] for p in json.load(sys.stdin)]))')"
info=$(sdk info "$S1")
check_eq "Sandbox.getInfo: running" running "$(echo "$info" | json state)"
check_eq "  its metadata" "a b&c" "$(echo "$info" | json metadata.team)"
check_eq "  cpuCount, memoryMB, templateId" "1 512 tiny" \
	"$(echo "$info" | python3 -c 'import json,sys
i=json.load(sys.stdin); print(i["cpuCount"], i["memoryMB"], i["templateId"])')"
check_eq "  lifecycle onTimeout kill" kill "$(echo "$info" | json lifecycle.onTimeout)"
check_eq "  S2's: pause" pause "$(sdk info "$S2" | json lifecycle.onTimeout)"
end1=$(echo "$info" | json endAt)
check_match "  endAt is its deadline ($end1)" '^20[0-9]{2}-' "$end1"
m=$(sdk metrics "$S1")
check_eq "Sandbox.getMetrics: one sample, 1 vCPU, 512 MiB" "1 1 536870912" \
	"$(echo "$m" | python3 -c 'import json,sys
m=json.load(sys.stdin); print(len(m), m[0]["cpuCount"], m[0]["memTotal"])')"

# ---- setTimeout -------------------------------------------------------------------
check_eq "Sandbox.setTimeout(S1, 3000 s)" '"ok"' "$(sdk timeout "$S1" 3000)"
left=$(berth show "$N1" --json | json expires_in_s)
check "  the deadline moved: $left s left" test "$left" -gt 2900 -a "$left" -le 3000

# ---- pause, connect ----------------------------------------------------------------
PID=$(berth exec "$N2" -- sh -c 'sleep 100000 </dev/null >/dev/null 2>&1 & echo $!')
berth exec "$N2" -- sh -c 'echo marker >/tmp/marker'
check_match "a process runs in S2 ($PID) and /tmp has a file" '^[0-9]+ marker$' \
	"$PID $(berth exec "$N2" -- cat /tmp/marker)"
check_eq "Sandbox.pause(S2): true" true "$(sdk pause "$S2")"
check_eq "  berth shows it suspended (memory kept)" suspended "$(state "$N2")"
check_eq "  its deadline is off while paused" 0 "$(berth show "$N2" --json | json expires)"
check_eq "  pausing it again: false (409)" false "$(sdk pause "$S2")"
check_eq "Sandbox.list state paused: S2" "[\"$S2\"]" \
	"$(sdk list '{"state":["paused"]}' | python3 -c 'import json,sys
print(json.dumps([i["id"] for p in json.load(sys.stdin) for i in p]))')"
check_eq "Sandbox.getInfo(S2): paused" paused "$(sdk info "$S2" | json state)"
check_eq "Sandbox.connect(S2) resumes it" "$S2" "$(sdk connect "$S2" 600 | json sandboxId)"
check_eq "  berth shows it running" running "$(state "$N2")"
left=$(berth show "$N2" --json | json expires_in_s)
check "  with a new deadline ($left s)" test "$left" -gt 500 -a "$left" -le 600
check_eq "  its process still there, and /tmp's file (memory kept)" "alive marker" \
	"$(berth exec "$N2" -- sh -c "kill -0 $PID && echo alive") $(berth exec "$N2" -- cat /tmp/marker)"
check_eq "connect to a running one (S1, 60 s) keeps the later deadline" "$S1" \
	"$(sdk connect "$S1" 60 | json sandboxId)"
left=$(berth show "$N1" --json | json expires_in_s)
check "  still about 3000 s ($left)" test "$left" -gt 2800

# What the translation costs, measured: E2B's detail against berth's own
# GET of the same machine, through the same berth-web over TLS (curl, a new
# connection each; E2B's asks hostd twice: who the key is, then the machine).
t0=$(date +%s%N)
for _ in $(seq 20); do api GET "/sandboxes/$S2" >/dev/null; done
t1=$(date +%s%N)
for _ in $(seq 20); do
	curl -s -o /dev/null --cacert "$T/tls/ca.pem" --resolve "$DOMAIN:$PORT:127.0.0.1" \
		-H "Authorization: Bearer $TOKEN" "https://$DOMAIN:$PORT/v1/machines/$N2"
done
t2=$(date +%s%N)
diag "GET /sandboxes/ID: $(((t1 - t0) / 20000000)) ms each; GET /v1/machines/NAME: $(((t2 - t1) / 20000000)) ms each (20 of each)"

# ---- fork --------------------------------------------------------------------------------
t0=$(date +%s%N)
out=$(sdk fork "$S2" 1 300)
t1=$(date +%s%N)
F=$(echo "$out" | json 0)
check_match "Sandbox.fork(S2): one live fork ($out)" '^e2b-[0-9a-f]{8}-root$' "$F"
diag "Sandbox.fork: $(((t1 - t0) / 1000000)) ms"
NF=$(name_of "$F")
j=$(berth show "$NF" --json)
check_eq "  a berth machine, running, with S2's metadata and expire_action" \
	'running {"team": "x"} suspend' "$(echo "$j" | python3 -c 'import json,sys
m=json.load(sys.stdin); print(m["state"], json.dumps(m["metadata"]), m["expire_action"])')"
left=$(echo "$j" | json expires_in_s)
check "  its own deadline ($left s)" test "$left" -gt 200 -a "$left" -le 300
check_eq "  S2's process goes on in it (its memory), and /tmp's file" "alive marker" \
	"$(berth exec "$NF" -- sh -c "kill -0 $PID && echo alive") $(berth exec "$NF" -- cat /tmp/marker)"
check_eq "  S2 runs on" running "$(state "$N2")"
check_eq "Sandbox.kill(fork): true" true "$(sdk kill "$F")"
check "  gone" gone "$NF"

# ---- the deadline ---------------------------------------------------------------------
check_eq "setTimeout(S2, 2 s) with autoPause" '"ok"' "$(sdk timeout "$S2" 2)"
check "  the deadline pauses it (suspended, memory kept)" wait_for 60 is_state "$N2" suspended
check_eq "  and its deadline is cleared" 0 "$(berth show "$N2" --json | json expires)"
check_match "  the log says why" "deadline: root/$N2: suspending" "$(cat "$T/hostd.log")"
check_eq "  the SDK sees it paused" paused "$(sdk info "$S2" | json state)"
check_match "Sandbox.fork of a paused one: 409, SandboxError" '^ERR SandboxError: 409: .*not running' \
	"$(sdk fork "$S2")"
check_eq "setTimeout(S1, 2 s) without autoPause" '"ok"' "$(sdk timeout "$S1" 2)"
check "  the deadline deletes it" wait_for 60 gone "$N1"
check_match "  the log says why" "deadline: root/$N1: deleting" "$(cat "$T/hostd.log")"
check_match "Sandbox.getInfo(S1) now: SandboxNotFoundError" '^ERR SandboxNotFoundError' \
	"$(sdk info "$S1")"

# ---- kill --------------------------------------------------------------------------------
check_eq "Sandbox.kill(S2): true" true "$(sdk kill "$S2")"
check "  gone from berth ls" gone "$N2"
check_eq "  kill again: false" false "$(sdk kill "$S2")"
check_match "connect to it: SandboxNotFoundError" '^ERR SandboxNotFoundError' \
	"$(sdk connect "$S2" 60)"
check_match "pause: SandboxNotFoundError" '^ERR SandboxNotFoundError' "$(sdk pause "$S2")"
check_match "setTimeout: SandboxNotFoundError" '^ERR SandboxNotFoundError' \
	"$(sdk timeout "$S2" 60)"

# ---- keys and users ------------------------------------------------------------------------
ZERO=e2b_$(printf '0%.0s' $(seq 64))
check_match "a key that is no token: AuthenticationError" '^ERR AuthenticationError' \
	"$(KEY_AS=$ZERO sdk list)"
check_match "a key not e2b_HEX64: AuthenticationError" '^ERR AuthenticationError' \
	"$(KEY_AS=e2b_abc sdk list)"
check_match "the berth form of the key is not an E2B key: AuthenticationError" \
	'^ERR AuthenticationError' "$(KEY_AS=$TOKEN sdk list)"
ub create q --no-start >/dev/null || not_ok "$UB's stopped machine q"
check_eq "$UB's list: its machine q as sandbox q-$UB (any machine is a sandbox)" "[\"q-$UB\"]" \
	"$(KEY_AS=$UKEY sdk list | python3 -c 'import json,sys
print(json.dumps([i["id"] for p in json.load(sys.stdin) for i in p]))')"
check_eq "  paused (stopped)" paused "$(KEY_AS=$UKEY sdk info "q-$UB" | json state)"
check_match "root's getInfo of $UB's sandbox: SandboxNotFoundError" '^ERR SandboxNotFoundError' \
	"$(sdk info "q-$UB")"
check_eq "  kill: false, and q stays" "false stopped" \
	"$(sdk kill "q-$UB") $(ub show q --json | json state)"
check_eq "  as q-root (that name, root's): not found either" false "$(sdk kill "q-root")"
a=$(api GET "/sandboxes/q-$UB")
b=$(api GET "/sandboxes/nosuch-$UB")
check_eq "  the same answer as for a sandbox that is not (no existence oracle)" \
	"$(echo "$b" | sed "s/nosuch-$UB/X/")" "$(echo "$a" | sed "s/q-$UB/X/")"
check_match "$UB's create over its quota (max_machines 1): RateLimitError (429)" \
	'^ERR RateLimitError' "$(KEY_AS=$UKEY sdk create tiny 60 '{}' '{}')"
r=$(curl -s -D - -o /dev/null --cacert "$T/tls/ca.pem" --resolve "api.$DOMAIN:$PORT:127.0.0.1" \
	-H "X-API-Key: $UKEY" -d '{"templateID":"tiny"}' "https://api.$DOMAIN:$PORT/v2/sandboxes")
check_match "  with Retry-After" $'Retry-After: 1\r' "$r"
ub rm q >/dev/null

# ---- the older path and bad input, raw ----------------------------------------------------
r=$(api POST /sandboxes -H 'Content-Type: application/json' \
	-d '{"templateID":"tiny","timeout":300,"secure":true,"allow_internet_access":false,"metadata":{"via":"curl"}}')
check_eq "POST /sandboxes (2.45's path): 201" 201 "$(echo "$r" | tail -1)"
S3=$(echo "$r" | head -1 | json sandboxID)
check_match "  a Sandbox: sandboxID, envdVersion 0.6.4, envdAccessToken the caller's token" \
	"^$S3 0.6.4 $TOKEN\$" "$(echo "$r" | head -1 | python3 -c 'import json,sys
s=json.load(sys.stdin); print(s["sandboxID"], s["envdVersion"], s["envdAccessToken"])')"
N3=$(name_of "$S3")
check_eq "  allow_internet_access false: egress none" none \
	"$(berth show "$N3" --json | json egress.policy)"
check_eq "  GET /sandboxes/ID says allowInternetAccess false" false \
	"$(api GET "/sandboxes/$S3" | head -1 | json allowInternetAccess)"
check_eq "POST /sandboxes/ID/connect (unversioned) on a running one: 200" 200 \
	"$(api POST "/sandboxes/$S3/connect" -d '{"timeout":300}' | tail -1)"
check_eq "DELETE /sandboxes/ID: 204, empty" "
204" "$(api DELETE "/sandboxes/$S3")"
r=$(api DELETE "/sandboxes/$S3")
check_eq "  again: 404 with the JSON code" 404 "$(echo "$r" | tail -1)"
check_eq "  {\"code\":404,...}" 404 "$(echo "$r" | head -1 | json code)"
check "  gone from berth ls" gone "$N3"

bad() { # WHAT STATUS RE METHOD PATH [CURL ARGS]
	local what=$1 st=$2 re=$3 r
	shift 3
	r=$(api "$@")
	check_eq "$what: $st" "$st" "$(echo "$r" | tail -1)"
	check_match "  saying why" "\"code\": ?$st.*$re" "$(echo "$r" | head -1)"
}
bad "a body that is not JSON" 400 "JSON object" POST /v2/sandboxes -d 'not json'
bad "a negative timeout" 400 "timeout must be" POST /v2/sandboxes -d '{"templateID":"tiny","timeout":-1}'
bad "a template name berth cannot have" 400 "no berth template or image name" \
	POST /v2/sandboxes -d '{"templateID":"Bad_Name"}'
bad "a template that is not" 400 "template 'nosuch' not found" \
	POST /v2/sandboxes -d '{"templateID":"nosuch"}'
bad "network rules (not supported)" 400 "network is not supported" \
	POST /v2/sandboxes -d '{"templateID":"tiny","network":{"denyOut":["0.0.0.0/0"]}}'
bad "envVars not strings" 400 "envVars.X must be a string" \
	POST /v2/sandboxes -d '{"templateID":"tiny","envVars":{"X":1}}'
bad "an env name that is none (hostd's check)" 400 "not a variable's name" \
	POST /v2/sandboxes -d '{"templateID":"tiny","envVars":{"1X":"y"}}'
bad "list limit 0" 400 "limit must be 1 to 100" GET '/v2/sandboxes?limit=0'
bad "list state foo" 400 "running or paused" GET '/v2/sandboxes?state=foo'
bad "a nextToken not ours" 400 "nextToken" GET '/v2/sandboxes?nextToken=x'
bad "a metadata filter that is malformed" 400 "metadata must be" GET '/v2/sandboxes?metadata=%25zz'
# Refused at its head: with Expect: 100-continue the client sends no body
# (without it, one still sending when the refusal closes the connection
# may be reset before it reads the 413).
bad "a body over 64 KiB" 413 "at most" POST /v2/sandboxes -H 'Expect: 100-continue' \
	-d "$(head -c 70000 /dev/zero | tr '\0' a)"
head -c 70000 /dev/zero | tr '\0' a >"$T/big"
api POST /v2/sandboxes -H 'Transfer-Encoding: chunked' --data-binary @"$T/big" >/dev/null
check_match "a chunked body over 64 KiB: the connection is closed (curl: empty reply, or reset)" \
	'^(52|56)$' "$?"
bad "no such route" 404 "no route" GET /v1/info
bad "snapshots (not supported)" 404 "not supported" POST "/sandboxes/x-root/snapshots" -d '{}'
bad "fork count 0" 400 "count must be 1 to 8" POST "/sandboxes/x-root/fork" -d '{"count":0}'
check_absent "no sandbox was made by any of them" matching '^e2b-' berth ls
r=$(curl -s --cacert "$T/tls/ca.pem" --resolve "api.$DOMAIN:$PORT:127.0.0.1" -w '\n%{http_code}' \
	"https://api.$DOMAIN:$PORT/v2/sandboxes")
check_eq "no X-API-Key: 401" 401 "$(echo "$r" | tail -1)"
check_match "  with E2B's body" '"code": ?401' "$(echo "$r" | head -1)"
check_eq "berth's own API on the dashboard's host is unchanged" "root" \
	"$(curl -s --cacert "$T/tls/ca.pem" --resolve "$DOMAIN:$PORT:127.0.0.1" \
		-H "Authorization: Bearer $TOKEN" "https://$DOMAIN:$PORT/v1/info" | json user)"
check_match "an X-API-Key on the dashboard's host is nothing there (no E2B)" '"unauthorized"|"code":"' \
	"$(curl -s --cacert "$T/tls/ca.pem" --resolve "$DOMAIN:$PORT:127.0.0.1" \
		-H "X-API-Key: $KEY" "https://$DOMAIN:$PORT/v1/machines")"
check_match "a preview host is still a preview's" '"no_preview"' \
	"$(curl -s --cacert "$T/tls/ca.pem" --resolve "8080-x-root.$DOMAIN:$PORT:127.0.0.1" \
		"https://8080-x-root.$DOMAIN:$PORT/")"

# ---- the deadline and metadata are berth's own (PATCH, berth set) ---------------------
berth create d --no-start >/dev/null || not_ok "a stopped machine d"
check_match "berth set d --expires 1h --expire-action suspend" "expires: +in (1h|59m).*then suspend" \
	"$(berth set d --expires 1h --expire-action suspend)"
check_eq "  GET /v1/machines/d has it" "suspend 3600" \
	"$(berth show d --json | python3 -c 'import json,sys
m=json.load(sys.stdin); print(m["expire_action"], (m["expires_in_s"]+59)//60*60)')"
check_eq "berth set d --expires never: no deadline" 0 \
	"$(berth set d --expires never >/dev/null; berth show d --json | json expires)"
patch() { curl -s --unix-socket "$STATE/hostd.sock" -X PATCH -d "$1" http://b/v1/machines/d; }
check_match "PATCH expires_in -5: 400 invalid_expires" '"invalid_expires"' "$(patch '{"expires_in":-5}')"
check_match "PATCH expire_action kill: 400 invalid_expire_action" '"invalid_expire_action"' \
	"$(patch '{"expire_action":"kill"}')"
check_match "PATCH metadata with a number: 400 invalid_attrs" '"invalid_attrs".*metadata.k' \
	"$(patch '{"metadata":{"k":1}}')"
check_match "PATCH metadata of 65 keys: 400" '"invalid_attrs".*at most 64' \
	"$(patch "$(python3 -c 'import json; print(json.dumps({"metadata": {str(i): "v" for i in range(65)}}))')")"
check_eq "  d unchanged by them" "{} 0 suspend" \
	"$(berth show d --json | python3 -c 'import json,sys
m=json.load(sys.stdin); print(json.dumps(m["metadata"]), m["expires"], m["expire_action"])')"
check_eq "PATCH metadata {k: v}" '{"k": "v"}' "$(patch '{"metadata":{"k":"v"}}' | json metadata)"
check_eq "a delete deadline meets a machine that does not run too (expires 1 s)" 0 \
	"$(berth set d --expires 1s --expire-action delete >/dev/null; echo $?)"
check "  d is deleted" wait_for 30 gone d

# ---- measured: the SDK's create against berth create -----------------------------------
t0=$(date +%s%N)
berth create cmp >/dev/null || not_ok "berth create cmp"
t1=$(date +%s%N)
diag "berth create (same image, waits for SSH too): $(((t1 - t0) / 1000000)) ms"
berth rm cmp >/dev/null

check_absent "berth-web logged no error" matching 'ERROR|error:' cat "$T/web.log"
finish
