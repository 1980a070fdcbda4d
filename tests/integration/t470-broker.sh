#!/bin/bash
# The credential broker (hostd/secrets.h, web/broker.h), with real guests
# and an HTTPS upstream in a network namespace of the test's (its own CA,
# which berth-web is told to trust: broker_ca_file) that answers only with
# the right x-api-key:
#  - secrets: added (the value from argv and from stdin), listed without
#    their values, refused for an http URL, a header with CR/LF, a reserved
#    header; another user's are not found;
#  - machine a, allowed: UP_BASE_URL is in its profile and /etc/environment,
#    a GET and a POST of 100 kB reach the upstream with the secret attached
#    (the guest's placeholder Authorization dropped, its own headers kept),
#    server-sent events arrive one by one as the upstream sends them, a
#    silent upstream is 504, an untrusted certificate 502, a path with
#    '..' 400; the secret is nowhere in the guest: env, /proc/*/environ, a
#    search of the disks and seed on the host side (which finds a marker the
#    guest wrote);
#  - machine b, not allowed: 403, as for a secret that does not exist;
#    taking a's address and MAC gets it nothing; berth secret log shows the
#    calls and the refusals;
#  - the boundary: another local user cannot use webctl.sock, berth-web's
#    user cannot pass a socket that is no guest's, root and other users on
#    the host and the network beyond cannot reach the broker's port;
#  - caps: a machine's 17th call open at once is 429, naming
#    broker_max_calls_per_machine;
#  - where the broker connects: a secret's URL to loopback (by name: the
#    address is checked after resolving), the host's own address, a
#    private network, link-local (instance metadata) is refused, naming
#    the address and broker_allow, and nothing listening there gets a
#    connection; with broker_allow the private one is reached;
#  - squatting: the default port is below 1024 (another local user cannot
#    bind it), and a user who holds it anyway (with the capability) while
#    berth-web is down gets no guest's request;
#  - a grant removed, a secret removed, a machine deleted: the variables
#    follow, the grants go.
. "$(dirname "$0")/../lib.sh"

for tool in ip nft openssl python3 setpriv; do
	command -v "$tool" >/dev/null 2>&1 || { skip "not installed: $tool"; finish; }
done

# Addresses of its own: t800 and t805 may run beside it.
INET_HERE=$INET.161
INET_THERE=$INET.162
UP=$INET.170
# A private address in the test internet: closed to the broker unless
# broker_allow names it.
PRIV=172.31.247.170
inet_up $UP $PRIV || { not_ok "the test internet"; finish; }

# ---- the upstream: a CA of the test's, a certificate for $UP, and one of
# no CA's (the broker must refuse it) ----
SECRET=sk-test-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
SECRET2=sk-other-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
(
	cd "$T" || exit 1
	openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 \
		-subj "/CN=berth t470 CA" 2>/dev/null &&
	openssl req -newkey rsa:2048 -nodes -keyout up.key -out up.csr -subj "/CN=$UP" 2>/dev/null &&
	printf 'subjectAltName=IP:%s,IP:%s\n' "$UP" "$PRIV" >up.ext &&
	openssl x509 -req -in up.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out up.pem \
		-days 2 -extfile up.ext 2>/dev/null &&
	openssl req -x509 -newkey rsa:2048 -nodes -keyout rogue.key -out rogue.pem -days 2 \
		-subj "/CN=$UP" -addext "subjectAltName=IP:$UP" 2>/dev/null
) || { not_ok "openssl makes the certificates"; finish; }
chmod 644 "$T/ca.pem"
UPS="$ROOT/tests/integration/broker_upstream.py"
ip netns exec "$INET_NS" python3 "$UPS" --listen "$UP:8443" --cert "$T/up.pem" --key "$T/up.key" \
	--header x-api-key --value "$SECRET" --value "$SECRET2" --log "$T/up.log" >"$T/up.out" 2>&1 &
PIDS+=($!)
ip netns exec "$INET_NS" python3 "$UPS" --listen "$PRIV:8443" --cert "$T/up.pem" --key "$T/up.key" \
	--header x-api-key --value "$SECRET" --log "$T/priv.log" >"$T/priv.out" 2>&1 &
PIDS+=($!)
ip netns exec "$INET_NS" python3 "$UPS" --listen "$UP:8444" --cert "$T/rogue.pem" \
	--key "$T/rogue.key" --header x-api-key --value "$SECRET" >"$T/rogue.out" 2>&1 &
PIDS+=($!)
# (python takes seconds to start on a loaded machine)
for _ in $(seq 300); do grep -q ready "$T/up.out" && grep -q ready "$T/rogue.out" &&
	grep -q ready "$T/priv.out" && break; sleep 0.1; done
check_eq "the host reaches the upstream with the key (positive control)" GET \
	"$(curl -s --cacert "$T/ca.pem" -H "x-api-key: $SECRET" "https://$UP:8443/v1/echo" | json method)"
check_eq "and is refused without it" 401 \
	"$(curl -s -o /dev/null -w '%{http_code}' --cacert "$T/ca.pem" "https://$UP:8443/v1/echo")"

# ---- hostd and berth-web, the broker on its default port ----
mkdir -p "$STATE"
cat >>"$STATE/berth.conf" <<EOF
http_listen = 127.0.0.1:$(free_port)
broker_ca_file = $T/ca.pem
broker_timeout = 3s
EOF
start_hostd || { not_ok "hostd starts"; finish; }
build_tiny || { not_ok "tiny image"; finish; }
web_up || { not_ok "berth-web starts"; finish; }
GW=$(echo "$GUEST_NET" | sed 's/\.0\/24$/.1/')
# The broker's port: the default's (9480 before it was made privileged).
BPORT=$(sed -n "s/.*credential broker on $GW:\([0-9]*\).*/\1/p" "$T/web.log" | head -1)
check_match "berth-web serves the broker on the gateway" "credential broker on $GW:[0-9]" \
	"$(cat "$T/web.log")"
check "  on a port below 1024 by default, which only root binds (port ${BPORT:-none})" \
	test "${BPORT:-99999}" -lt 1024
check_match "as berth-web's user" "listening on .* as uid $(id -u berth-web)" "$(cat "$T/web.log")"

# ---- secrets ----
berth secret add up --url "https://$UP:8443/v1/" --header "x-api-key: $SECRET" >"$T/add.out" 2>&1
check_match "secret add: up" "secret up added: https://$UP:8443/v1 .*UP_BASE_URL" "$(cat "$T/add.out")"
printf '%s\n' "$SECRET2" | berth secret add other --url "https://$UP:8443/v1" --header x-api-key \
	>/dev/null 2>"$T/add2.err"
check_eq "secret add: the value from stdin" "" "$(cat "$T/add2.err")"
berth secret add rogue --url "https://$UP:8444/v1" --header "x-api-key: $SECRET" >/dev/null
# secret NAME FIELD: field FIELD of secret NAME in berth secret ls --json.
secret() { berth --json secret ls | python3 -c 'import json, sys
s = [s for s in json.load(sys.stdin)["secrets"] if s["name"] == sys.argv[1]]
print(json.dumps(s[0][sys.argv[2]]) if s else "none")' "$@"; }
ls_json=$(berth --json secret ls)
check_eq "secret ls: the header's name" '["x-api-key"]' "$(secret up headers)"
check "secret ls: never a value" test "$(echo "$ls_json$(berth secret ls)" | grep -c -e "$SECRET" -e "$SECRET2")" = 0
berth secret add bad --url "http://$UP:8443" --header "x-api-key: $SECRET" 2>"$T/err"
check_match "an http URL is refused" "must be https://" "$(cat "$T/err")"
curl -s --unix-socket "$STATE/hostd.sock" -X POST http://b/v1/secrets \
	-d "{\"name\":\"bad\",\"url\":\"https://$UP\",\"headers\":[\"x-api-key: sk-CRLF\\r\\nX-Evil: 1\"]}" >"$T/crlf"
check_eq "a header with CR/LF is refused" invalid_header "$(json error.code <"$T/crlf")"
check "  without quoting its value" test "$(grep -c sk-CRLF "$T/crlf")" = 0
berth secret add bad --url "https://$UP" --header "Host: evil.test" 2>"$T/err"
check_match "a header the broker frames HTTP with is refused" "broker's own" "$(cat "$T/err")"
berth secret add log --url "https://$UP" --header "a: b" 2>"$T/err"
check_match "the name 'log' is refused" "not 'log'" "$(cat "$T/err")"
secret_names() { berth secret ls --json | python3 -c 'import json, sys
for s in json.load(sys.stdin)["secrets"]: print(s["name"])'; }
printf '\xff\xfekey\n' | berth secret add bin --url "https://$UP" --header x-api-key 2>"$T/err"
check_eq "a value that is not UTF-8: refused (2)" 2 "$?"
check_match "  saying so" "header x-api-key: its value must be UTF-8" "$(cat "$T/err")"
check_no_line "  and no secret bin is made" bin secret_names

# ---- two machines: a allowed, b not ----
berth create a >/dev/null || not_ok "create a"
berth create b >/dev/null || not_ok "create b"
A=$(berth show a --json | json ssh.host)
B=$(berth show b --json | json ssh.host)
check_match "set a --secret up" "secrets: +up" "$(berth set a --secret up)"
berth set a --secret rogue >/dev/null
check_match "show b: no secret" "secrets: +none" "$(berth show b)"
# A change is whole or nothing: a refusal of one part grants nothing.
out=$(berth set b --secret up --egress 'no such rule!' 2>&1)
check_match "set b --secret up with a bad egress policy: refused" "invalid_egress|egress" "$out"
check_match "  and b was not given up" "secrets: +none" "$(berth show b)"
out=$(berth set b --secret up --no-secret missing 2>&1)
check_match "set b --secret up --no-secret missing: refused, naming it" "no secret missing" "$out"
check_match "  and b was not given up" "secrets: +none" "$(berth show b)"

# wait_env MACHINE PATTERN [absent]: its /etc/berth/broker.env matches (or
# no longer matches) within 30 s.
wait_env() {
	local i got
	for i in $(seq 60); do
		got=$(berth exec "$1" -- cat /etc/berth/broker.env 2>/dev/null)
		if [ "${3:-}" = absent ]; then
			printf '%s' "$got" | grep -q "$2" || return 0
		else
			printf '%s' "$got" | grep -q "$2" && return 0
		fi
		sleep 0.5
	done
	return 1
}
check "a's variables are written" wait_env a "^UP_BASE_URL=http://$GW:$BPORT/up$"
check_eq "a login shell has UP_BASE_URL" "http://$GW:$BPORT/up" \
	"$(berth exec a -- sh -lc 'echo $UP_BASE_URL' 2>/dev/null)"
check_match "and /etc/environment a block of them" \
	"# berth-broker begin.*UP_BASE_URL=http://$GW:$BPORT/up.*# berth-broker end" \
	"$(berth exec a -- cat /etc/environment | tr '\n' ' ')"

# ---- calls from a ----
# ax CMD: CMD in a's login shell (its variables set).
ax() { berth exec a -- sh -lc "$1" 2>&1; }
out=$(ax 'wget -q -O - --header "Authorization: Bearer placeholder" --header "X-Custom: yes" "$UP_BASE_URL/echo?q=1"')
check_eq "GET through the broker: 200 from the upstream" GET "$(echo "$out" | json method)"
check_eq "  to the secret's URL and the path" /v1/echo "$(echo "$out" | json path)"
check_eq "  with the query" q=1 "$(echo "$out" | json query)"
check_eq "  with the secret's header" "<value 1>" "$(echo "$out" | json headers.x-api-key)"
check_eq "  without the guest's Authorization" "" "$(echo "$out" | json headers.authorization)"
check_eq "  with the guest's own headers" yes "$(echo "$out" | json headers.x-custom)"
# (busybox wget posts a file as a C string: text, not random bytes)
out=$(ax 'seq 1 30000 | head -c 100000 >/tmp/body; sha256sum </tmp/body | cut -d" " -f1
	wget -q -O - --post-file /tmp/body "$UP_BASE_URL/echo"')
check_eq "POST of 100 kB: the upstream gets the body whole" "$(echo "$out" | head -1)" \
	"$(echo "$out" | tail -1 | json body_sha256)"
# Server-sent events: 4 of them a second apart, each stamped as it comes.
ax 'wget -q -O - "$UP_BASE_URL/sse?n=4&gap=1" | while read -r l; do
	[ -n "$l" ] && echo "$(cut -d" " -f1 /proc/uptime) $l"; done' >"$T/sse"
check_eq "server-sent events: all four" "data: 0|data: 1|data: 2|data: 3" \
	"$(cut -d' ' -f2- "$T/sse" | paste -sd '|')"
spread=$(awk 'NR == 1 { a = $1 } { b = $1 } END { printf "%.0f", (b - a) * 10 }' "$T/sse")
check "  each as it comes, not at the end (first to last: ${spread}00 ms)" test "${spread:-0}" -ge 20
# A policy change flushes the machine's connections from conntrack: a
# stream through the broker goes on (its answers are taken up again).
ax 'wget -q -O - "$UP_BASE_URL/sse?n=5&gap=1" | grep -c data' >"$T/flush" &
flusher=$!
sleep 2.5
berth set a --egress open >/dev/null
for _ in $(seq 40); do kill -0 "$flusher" 2>/dev/null || break; sleep 0.5; done
kill "$flusher" 2>/dev/null
check_eq "a stream goes on through a conntrack flush (berth set --egress)" 5 "$(cat "$T/flush")"
out=$(ax 'wget -S -O /dev/null "$UP_BASE_URL/slow?s=8"')
check_match "a silent upstream: 504 after broker_timeout" "504" "$out"
out=$(ax 'wget -S -O /dev/null "$ROGUE_BASE_URL/echo"')
check_match "an upstream whose certificate no trusted CA signed: 502" "502" "$out"
# nc_broker MACHINE REQUEST-LINE: the broker's raw answer (busybox nc ends
# at its stdin's end: the pause lets the answer come).
nc_broker() { berth exec "$1" -- sh -c "(printf '$2\r\n\r\n'; sleep 2) | nc $GW $BPORT"; }
out=$(nc_broker a 'GET /up/../admin HTTP/1.0')
check_match "a path with '..': 400" "HTTP/1.[01] 400" "$out"
out=$(nc_broker a 'GET /up/echo HTTP/1.0')
check_match "the broker over HTTP/1.0, by hand: 200" "HTTP/1.[01] 200" "$out"
# Framing and header names the upstream would read otherwise
# (web/request.h): refused before hostd or the upstream hear of them.
# nc_raw MACHINE BYTES: the broker's raw answer to BYTES (printf's escapes).
nc_raw() { berth exec "$1" -- sh -c "(printf '$2'; sleep 2) | nc $GW $BPORT"; }
ups=$(wc -l <"$T/up.log")
out=$(nc_raw a 'POST /up/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\nContent-Length: 5\r\n\r\nhelloGET /v1/smuggled HTTP/1.1\r\nHost: x\r\n\r\n')
check_match "Transfer-Encoding gzip with a Content-Length (a request smuggled in the body): 400" \
	"HTTP/1.[01] 400 .*both Transfer-Encoding and Content-Length" "$(echo "$out" | tr -d '\r' | tr '\n' ' ')"
out=$(nc_raw a 'POST /up/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\nGET /v1/smuggled HTTP/1.1\r\nHost: x\r\n\r\n')
check_match "  gzip alone: 400" "HTTP/1.[01] 400 .*Transfer-Encoding must be" "$(echo "$out" | tr -d '\r' | tr '\n' ' ')"
out=$(nc_raw a 'GET /up/echo HTTP/1.1\r\nHost: x\r\nAuthorization : Bearer guest\r\n\r\n')
check_match "  a header name with a space before its colon (Authorization : ...): 400" \
	"HTTP/1.[01] 400 .*not a token" "$(echo "$out" | tr -d '\r' | tr '\n' ' ')"
out=$(nc_raw a 'GET /up/echo HTTP/1.1\r\nHost: x\r\nFoo\rX-Injected: 1\r\n\r\n')
check_match "  a bare CR in a header name: 400" "HTTP/1.[01] 400 .*not a token" \
	"$(echo "$out" | tr -d '\r' | tr '\n' ' ')"
out=$(nc_raw a 'TRACK /up/echo HTTP/1.1\r\nHost: x\r\n\r\n')
check_match "TRACK, as TRACE: 400" "HTTP/1.[01] 400 .*does not forward TRACK" "$(echo "$out" | tr -d '\r' | tr '\n' ' ')"
check_eq "  the upstream got none of these calls" "$ups" "$(wc -l <"$T/up.log")"
check_absent "  nor the request smuggled in a body" matching smuggled cat "$T/up.log"
out=$(nc_raw a 'GET /up/echo HTTP/1.1\r\nHost: x\r\n\r\n')
check_match "  (by hand, a call is answered: the positive control)" "HTTP/1.[01] 200" "$out"
out=$(ax 'wget -S -O - "http://'"$GW:$BPORT"'/nosuch/echo"')
check_match "a secret that does not exist: 403" "403" "$out"
out=$(ax 'wget -S -O - "http://'"$GW:$BPORT"'/other/echo"')
check_match "a secret of the owner's not allowed to a: 403" "403" "$out"

# ---- caps: a machine's calls open at once (broker_max_calls_per_machine,
# 16 by default) ----
out=$(ax 'for i in $(seq 16); do (wget -q -O - "$UP_BASE_URL/sse?n=6&gap=1" | grep -c data >/tmp/cap$i) & done
	sleep 3; (printf "GET /up/echo HTTP/1.0\r\n\r\n"; sleep 2) | nc '"$GW $BPORT"'; wait
	echo; echo "streamed: $(cat /tmp/cap* | awk "{ s += \$1 } END { print s }")"; rm -f /tmp/cap*')
check_match "a machine's 17th call open at once: 429" "HTTP/1.[01] 429" "$out"
check_match "  naming broker_max_calls_per_machine" "broker_max_calls_per_machine = 16" "$out"
check_match "  while its 16 others stream to their end (16 x 6 events)" "streamed: 96" "$out"
check_match "a's next call, the others over: 200" "HTTP/1.[01] 200" "$(nc_broker a 'GET /up/echo HTTP/1.0')"

# ---- where the broker connects: never loopback (here by name: checked
# after resolving), the host's own addresses, private networks,
# link-local, unless broker_allow says so ----
CANARY_LO=$(free_port)
cat >"$T/canary.py" <<'PY'
import socket, sys, threading
def serve(addr):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, int(sys.argv[1]))); s.listen(8)
    while True:
        c, a = s.accept(); print("conn", addr, flush=True); c.close()
for addr in sys.argv[2:]:
    threading.Thread(target=serve, args=(addr,), daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
PY
python3 "$T/canary.py" "$CANARY_LO" 127.0.0.1 "$INET_HERE" >"$T/lo.out" 2>&1 &
PIDS+=($!)
for _ in $(seq 50); do grep -q ready "$T/lo.out" && break; sleep 0.1; done
check_eq "the canaries answer the host (positive control)" "open|open" \
	"$(host_tcp 127.0.0.1 "$CANARY_LO")|$(host_tcp "$INET_HERE" "$CANARY_LO")"
sleep 0.5
lo_conns=$(grep -c conn "$T/lo.out")
berth secret add loop --url "https://localhost:$CANARY_LO/v1" --header "x-api-key: $SECRET" >/dev/null
berth secret add self --url "https://$INET_HERE:$CANARY_LO/v1" --header "x-api-key: $SECRET" >/dev/null
berth secret add priv --url "https://$PRIV:8443/v1" --header "x-api-key: $SECRET" >/dev/null
berth secret add meta --url "https://169.254.169.254/latest" --header "x-api-key: $SECRET" >/dev/null
for s in loop self priv meta; do berth set a --secret $s >/dev/null; done
out=$(nc_broker a 'GET /loop/echo HTTP/1.0' | tr -d '\r\n')
check_match "a secret's URL to localhost: 403" "HTTP/1.[01] 403" "$out"
check_match "  naming the address it resolved to and broker_allow" \
	"does not connect to 127.0.0.1 is loopback.*broker_allow" "$out"
out=$(nc_broker a 'GET /self/echo HTTP/1.0' | tr -d '\r\n')
check_match "to an address of the host's own ($INET_HERE): 403, saying so" \
	"HTTP/1.[01] 403.*$INET_HERE is an address of this host" "$out"
check_eq "  and neither canary got a connection" "$lo_conns" "$(grep -c conn "$T/lo.out")"
out=$(nc_broker a 'GET /priv/echo HTTP/1.0' | tr -d '\r\n')
check_match "to a private network ($PRIV): 403, naming it" \
	"HTTP/1.[01] 403.*$PRIV is private \(172.16.0.0/12\).*broker_allow" "$out"
check "  and the upstream there got no call" test ! -s "$T/priv.log"
out=$(nc_broker a 'GET /meta/echo HTTP/1.0' | tr -d '\r\n')
check_match "to link-local (instance metadata): 403, naming it" \
	"HTTP/1.[01] 403.*169.254.169.254 is link-local" "$out"
berth set a --no-secret self >/dev/null
berth set a --no-secret meta >/dev/null

# ---- the agents image's hook (images/recipes/agents/broker-env), for real
# in a: Claude Code's placeholder, Codex's settings ----
berth secret add anthropic --url "https://$UP:8443/v1" --header "x-api-key: $SECRET" >/dev/null
berth secret add openai --url "https://$UP:8443/v1" --header "x-api-key: $SECRET2" >/dev/null
berth exec a -- mkdir -p /usr/lib/berth >/dev/null
berth cp "$ROOT/images/recipes/agents/broker-env" a:/usr/lib/berth/broker-env >/dev/null
berth exec a -- sh -c 'mkdir -p /etc/codex; printf "model = \"m\"\n[profiles.p]\nmodel = \"n\"\n" >/etc/codex/config.toml'
berth set a --secret anthropic >/dev/null
berth set a --secret openai >/dev/null
check "a's variables: ANTHROPIC_BASE_URL and OPENAI_BASE_URL" wait_env a OPENAI_BASE_URL
check_eq "  Claude Code's token is a placeholder" berth-broker \
	"$(ax 'echo $ANTHROPIC_AUTH_TOKEN')"
check_eq "  Codex's key too" "berth-broker berth-broker" "$(ax 'echo $OPENAI_API_KEY $CODEX_API_KEY')"
check_eq "  Codex's config.toml: openai_base_url first, the rest kept" \
	"openai_base_url = \"http://$GW:$BPORT/openai\" # berth-broker|model = \"m\"|[profiles.p]|model = \"n\"" \
	"$(berth exec a -- cat /etc/codex/config.toml | paste -sd '|')"
out=$(ax 'wget -q -O - --header "Authorization: Bearer $ANTHROPIC_AUTH_TOKEN" "$ANTHROPIC_BASE_URL/echo"')
check_eq "  Claude Code's call: the placeholder dropped, the secret attached" \
	"<value 1>|" "$(echo "$out" | json headers.x-api-key)|$(echo "$out" | json headers.authorization)"
out=$(ax 'wget -q -O - --header "Authorization: Bearer $OPENAI_API_KEY" "$OPENAI_BASE_URL/echo"')
check_eq "  Codex's: openai's own secret" "<value 2>" "$(echo "$out" | json headers.x-api-key)"
berth set a --no-secret openai >/dev/null
check "openai no more: its variable goes" wait_env a OPENAI_BASE_URL absent
check_eq "  and Codex's line, the rest kept" "model = \"m\"|[profiles.p]|model = \"n\"" \
	"$(berth exec a -- cat /etc/codex/config.toml | paste -sd '|')"
berth set a --no-secret anthropic >/dev/null
check "anthropic no more" wait_env a ANTHROPIC_BASE_URL absent
check_eq "  no placeholder left" "" "$(ax 'echo $ANTHROPIC_AUTH_TOKEN$OPENAI_API_KEY')"
berth exec a -- rm -f /usr/lib/berth/broker-env >/dev/null

# ---- from b: 403 ----
out=$(berth exec b -- sh -c "wget -S -O - http://$GW:$BPORT/up/echo" 2>&1)
check_match "b, not allowed, is refused: 403" "403" "$out"
out=$(nc_broker b 'GET /up/echo HTTP/1.0')
check_match "  saying why" "may not use secret up" "$out"
check "  and gets no variable" test -z "$(berth exec b -- cat /etc/berth/broker.env 2>/dev/null)"

# ---- the secret is nowhere in the guest ----
check_eq "a's environment has no secret" 0 \
	"$(berth exec a -- sh -lc env 2>&1 | grep -c -e "$SECRET" -e "$SECRET2")"
check_eq "no process's environ in a has it" 0 \
	"$(berth exec a -- sh -c 'cat /proc/[0-9]*/environ' 2>/dev/null | tr '\0' '\n' | grep -c -e "$SECRET" -e "$SECRET2")"
check "  (and there are environments to read)" test \
	"$(berth exec a -- sh -c 'cat /proc/[0-9]*/environ' 2>/dev/null | tr '\0' '\n' | grep -c '^PATH=')" -gt 0
MARK=berth-t470-marker-$$-$RANDOM
berth exec a -- sh -c "echo $MARK >/root/marker; sync" >/dev/null
berth exec b -- sync >/dev/null
check "a marker the guest wrote is found on its disk (the search works)" \
	test -n "$(grep -rlaF "$MARK" "$STATE/volumes" 2>/dev/null)"
check_eq "the secrets are on no machine's disk, seed or console log" "" \
	"$(grep -rlaF -e "$SECRET" -e "$SECRET2" "$STATE/volumes" "$STATE/machines" 2>/dev/null)"

# ---- b takes a's address and MAC: the broker gets nothing from it ----
AMAC=$(berth show a --json | json mac)
BMAC=$(berth show b --json | json mac)
before=$(berth --json secret log --machine a --limit 1000 | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["calls"]))')
berth exec b -- sh -c "(sleep 1
	ip link set eth0 down; ip link set eth0 address $AMAC; ip link set eth0 up
	ip addr flush dev eth0; ip addr add $A/24 dev eth0; ip route add default via $GW
	timeout 4 wget -q -O /tmp/spoof http://$GW:$BPORT/up/echo && echo got >>/tmp/spoof.r || echo nothing >>/tmp/spoof.r
	netprobe tcp $GW $BPORT 1500 >>/tmp/spoof.r
	sleep 2
	ip link set eth0 down; ip link set eth0 address $BMAC; ip link set eth0 up
	ip addr flush dev eth0; ip addr add $B/24 dev eth0; ip route add default via $GW
	) >/dev/null 2>&1 &" >/dev/null 2>&1
sleep 11
check_eq "b as a: no answer from the broker" "nothing|timeout" \
	"$(berth exec b -- cat /tmp/spoof.r 2>/dev/null | paste -sd '|')"
after=$(berth --json secret log --machine a --limit 1000 | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["calls"]))')
check_eq "  and the log has no call of a's meanwhile" "$before" "$after"
check_match "b is itself again, refused as before" "403" \
	"$(berth exec b -- sh -c "wget -S -O - http://$GW:$BPORT/up/echo" 2>&1)"

# ---- the log ----
berth --json secret log >"$T/log.json"
row() { python3 -c 'import json, sys
m, s, meth, path, st = sys.argv[1:6]
rows = [c for c in json.load(open(sys.argv[6]))["calls"] if c["machine"] == m and c["secret"] == s
        and c["method"] == meth and c["path"] == path and c["status"] == int(st)]
print(len(rows), rows[-1]["bytes_in"] if rows else -1, rows[-1]["bytes_out"] if rows else -1)' "$@" "$T/log.json"; }
check_match "log: a's GET /echo, 200, bytes out" "^[1-9][0-9]* 0 [1-9]" "$(row a up GET /echo 200)"
check_match "log: a's POST, 100000 bytes in" "^1 100000 [1-9]" "$(row a up POST /echo 200)"
check_match "log: a's events" "^[1-9][0-9]* 0 [1-9]" "$(row a up GET /sse 200)"
check_match "log: the silent upstream's 504" "^1 " "$(row a up GET /slow 504)"
check_match "log: the untrusted upstream's 502" "^1 " "$(row a rogue GET /echo 502)"
check_match "log: b refused, 403" "^[1-9]" "$(row b up GET /echo 403)"
check_match "log: a refused a secret that does not exist, 403" "^1 " "$(row a nosuch GET /echo 403)"
check_match "berth secret log as text" "b +up +GET +/echo +403" "$(berth secret log)"

# ---- another local user; the boundary ----
U=bt$$k
test_user "$U" || not_ok "useradd $U"
ub() { as_user "$U" "$BIN/berth" --state "$STATE" "$@"; }
ub secret ls >"$T/u.ls"
check "$U lists none of root's secrets" test "$(grep -c up "$T/u.ls")" = 0
ub secret rm up 2>"$T/err"
check_match "$U cannot remove root's secret" "no secret up" "$(cat "$T/err")"
ub set a --secret up 2>"$T/err"
check_match "$U cannot give root's machine a secret" "no machine a" "$(cat "$T/err")"
berth set a --secret nosuch 2>"$T/err"
check_match "a secret that does not exist cannot be allowed" "no secret nosuch" "$(cat "$T/err")"
# webctl_ask AS SOCKET_KIND: what hostd answers on webctl.sock to user AS,
# passing a socket: "none", or "tcp" (connected to hostd's own loopback
# listener... a TCP connection that is no guest's).
cat >"$T/ctl.py" <<'EOF'
import array, json, socket, sys
kind, sock = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX); s.settimeout(5); s.connect(sock)
line = json.dumps({"op": "broker", "secret": "up", "method": "GET", "path": "/echo"}).encode() + b"\n"
try:
    if kind == "none":
        s.sendall(line)
    else:
        t = socket.create_connection(("127.0.0.1", int(sys.argv[3])), timeout=5)
        s.sendmsg([line], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [t.fileno()]))])
except BrokenPipeError:
    pass  # hostd answered and closed at once: its line is there to read
print(json.loads(s.makefile().readline())["error"]["code"])
EOF
HTTP_PORT=$(sed -n 's/^http_listen = 127.0.0.1://p' "$STATE/berth.conf")
check_eq "another user's request on webctl.sock: 403" forbidden \
	"$(as_user "$U" /usr/bin/python3 "$T/ctl.py" tcp "$STATE/webctl.sock" "$HTTP_PORT" 2>&1)"
check_eq "  (root's is answered: a broker call without the guest's socket)" invalid_fds \
	"$(python3 "$T/ctl.py" none "$STATE/webctl.sock" 2>&1)"
check_eq "berth-web's user passing a socket that is no guest's: refused" invalid_socket \
	"$(as_user berth-web /usr/bin/python3 "$T/ctl.py" tcp "$STATE/webctl.sock" "$HTTP_PORT" 2>&1)"
check_eq "berth-web's user cannot connect to a guest (to forge one): closed" closed \
	"$(as_user berth-web /usr/bin/python3 -c 'import socket,sys
s=socket.socket(); s.settimeout(2)
try: s.connect((sys.argv[1], 22)); print("open")
except Exception: print("closed")' "$A")"
check_match "the broker listens on the gateway (positive control)" "$GW:$BPORT" "$(ss -Hltn)"
check_eq "root on the host cannot reach the broker's port" closed "$(host_tcp "$GW" "$BPORT")"
check_eq "nor another local user" closed "$(as_user "$U" /usr/bin/python3 -c 'import socket,sys
s=socket.socket(); s.settimeout(2)
try: s.connect((sys.argv[1], int(sys.argv[2]))); print("open")
except Exception: print("closed")' "$GW" "$BPORT")"
CANARY=$(free_port)
python3 -c 'import socket,sys
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(8); print("ready", flush=True)
while True: s.accept()[0].close()' "$INET_HERE" "$CANARY" >"$T/canary.out" 2>&1 &
PIDS+=($!)
for _ in $(seq 50); do grep -q ready "$T/canary.out" && break; sleep 0.1; done
ip -n "$INET_NS" route add "$GW/32" via "$INET_HERE" 2>/dev/null
ns_tcp() { ip netns exec "$INET_NS" python3 -c 'import socket,sys
s=socket.socket(); s.settimeout(2)
try: s.connect((sys.argv[1], int(sys.argv[2]))); print("open")
except Exception: print("closed")' "$@"; }
check_eq "the network reaches the host (positive control)" open "$(ns_tcp "$INET_HERE" "$CANARY")"
check_eq "but not the broker's port, routed to the gateway" closed "$(ns_tcp "$GW" "$BPORT")"

# ---- grants and secrets go, the variables follow ----
berth set b --secret other >/dev/null
check "b's variables: OTHER_BASE_URL" wait_env b "^OTHER_BASE_URL="
out=$(berth exec b -- sh -lc 'wget -q -O - "$OTHER_BASE_URL/echo"' 2>&1)
check_eq "b calls with secret other: that secret's value attached" "<value 2>" \
	"$(echo "$out" | json headers.x-api-key)"
berth secret rm other >/dev/null
check "a secret removed: b's variable goes" wait_env b OTHER_BASE_URL absent
out=$(berth exec b -- sh -c "wget -S -O - http://$GW:$BPORT/other/echo" 2>&1)
check_match "  and its calls are refused" "403" "$out"
check_match "set a --no-secret rogue" "secrets: +loop, priv, up$" "$(berth set a --no-secret rogue)"
check "a's ROGUE_BASE_URL goes" wait_env a ROGUE_BASE_URL absent
# A grant to a stopped machine: its variables are written at its next start.
berth stop b >/dev/null
berth set b --secret up >/dev/null
berth start b >/dev/null
check "a grant while stopped: written at the next start" wait_env b "^UP_BASE_URL="
check_match "  and b's calls now answered" '"<value 1>"' \
	"$(berth exec b -- sh -lc 'wget -q -O - "$UP_BASE_URL/echo"' 2>&1)"
# ---- squatting: berth-web down, another local user on the broker's port ----
web_down
check_eq "another local user cannot bind the broker's port (below 1024)" EACCES \
	"$(as_user "$U" /usr/bin/python3 -c 'import errno,socket,sys
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try: s.bind((sys.argv[1], int(sys.argv[2]))); print("bound")
except OSError as e: print(errno.errorcode.get(e.errno, e.errno))' "$GW" "$BPORT")"
cat >"$T/squat.py" <<'PY'
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(8); print("ready", flush=True)
while True:
    c, a = s.accept(); print("conn", a[0], flush=True)
    c.recv(4096); c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 8\r\n\r\nsquatted"); c.close()
PY
# One who holds it anyway (with the capability to bind it, or a port above
# 1023 set in berth.conf): its answers never leave for a guest.
setpriv --reuid="$U" --regid="$(id -g "$U")" --clear-groups --inh-caps +net_bind_service \
	--ambient-caps +net_bind_service /usr/bin/python3 "$T/squat.py" "$GW" "$BPORT" \
	>"$T/squat.out" 2>&1 &
SQUAT=$!
PIDS+=($SQUAT)
for _ in $(seq 50); do grep -q ready "$T/squat.out" && break; sleep 0.1; done
check "  (with the capability, the squatter binds it: the probe's premise)" grep -q ready "$T/squat.out"
out=$(berth exec a -- sh -c "timeout 5 wget -q -O - http://$GW:$BPORT/up/echo 2>&1; echo end")
check_eq "a guest's call to a squatted broker port gets no answer" 0 "$(echo "$out" | grep -c squatted)"
check_eq "  and the squatter accepts no connection" 0 "$(grep -c conn "$T/squat.out")"
kill "$SQUAT" 2>/dev/null
wait "$SQUAT" 2>/dev/null

# ---- broker_allow: the private upstream allowed, hostd and berth-web
# started again ----
priv_calls=$(wc -l <"$T/priv.log" 2>/dev/null || echo 0)
kill_hostd TERM
echo "broker_allow = $PRIV/32" >>"$STATE/berth.conf"
start_hostd || not_ok "hostd starts again with broker_allow"
web_up || not_ok "berth-web starts again"
out=$(nc_broker a 'GET /priv/echo HTTP/1.0')
check_match "broker_allow = $PRIV/32: the private upstream is reached, 200" "HTTP/1.[01] 200" "$out"
check "  (its log has the call)" test "$(wc -l <"$T/priv.log" 2>/dev/null || echo 0)" -gt "$priv_calls"
check_match "  loopback still refused" "HTTP/1.[01] 403" "$(nc_broker a 'GET /loop/echo HTTP/1.0')"
check_eq "before a is deleted: up's machines" '["a", "b"]' "$(secret up machines)"
berth rm a >/dev/null
check_eq "a machine deleted: its grants go" '["b"]' "$(secret up machines)"
berth rm b >/dev/null
finish
