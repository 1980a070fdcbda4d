#!/bin/bash
# The dashboard and the HTTP API: API tokens (made, listed, revoked, only
# their hash on disk), berth-web (its own user, no capabilities, hostd on
# no TCP port, hostd's web.sock closed to other users; 401 without a valid
# token, no gateway or root-only routes, no X-Berth-User, no path
# traversal, static files with their types), the dashboard in headless
# Chromium (tests/browser/dashboard.mjs: login, live cost, stop, CSV,
# phone width, a screenshot in build/test-artifacts/), HTTPS with a
# self-signed certificate, and bad listener settings refused (hostd's
# berth.conf checks, berth-web's TLS files and port).
. "$(dirname "$0")/../lib.sh"

OFF_PID=
trap '[ -n "$OFF_PID" ] && kill -KILL "$OFF_PID" 2>/dev/null; cleanup' EXIT
command -v setpriv >/dev/null || { skip "setpriv is not installed (util-linux)"; finish; }
PORT=$(free_port)
URL=http://127.0.0.1:$PORT
mkdir -p "$STATE"
# 3.6 per vCPU-hour: a running machine costs 0.001 a second.
cat >"$STATE/berth.conf" <<CONF
http_listen = 127.0.0.1:$PORT
price_vcpu_hour = 3.6
stop_timeout = 5
max_vcpus = 2
CONF
start_hostd && build_tiny || { not_ok "hostd and image"; finish; }
web_up || { not_ok "berth-web starts"; finish; }
ok "berth-web starts on http_listen"
check_eq "berth-web runs as its own user" berth-web "$(ps -o user= -p "$WEB_PID")"
check_eq "  with no capabilities" "0000000000000000 0000000000000000" \
	"$(awk '/^Cap(Eff|Prm):/ { printf "%s%s", s, $2; s = " " }' "/proc/$WEB_PID/status")"
check_absent "hostd listens on no TCP port" matching "pid=$HOSTD_PID," ss -Htlnp
check_match "  (berth-web does: the positive control)" "pid=$WEB_PID," "$(ss -Htlnp)"
check_eq "hostd's web.sock refuses another local user" 403 \
	"$(setpriv --reuid=nobody --regid=nogroup --clear-groups curl -s -o /dev/null \
		-w '%{http_code}' --unix-socket "$STATE/web.sock" http://berth/v1/info)"
check_eq "  and berth-web's own user without a token: 401" 401 \
	"$(setpriv --reuid=berth-web --regid=berth-web --clear-groups curl -s -o /dev/null \
		-w '%{http_code}' --unix-socket "$STATE/web.sock" http://berth/v1/info)"
check_eq "info gives the dashboard's URL" "$URL/" "$(berth info --json | json dashboard)"
berth create m --no-wait >/dev/null 2>&1 || not_ok "create m"

# Tokens.
TOK=$(berth token create --name dash 2>"$T/tok.err")
check_match "token create prints the secret once" '^berth_[0-9a-f]{64}$' "$TOK"
check_match "and says it is not shown again" 'not shown again' "$(cat "$T/tok.err")"
j=$(berth token create --json)
TOK2=$(echo "$j" | json token)
ID2=$(echo "$j" | json id)
check_eq "a token without --name is named 'token'" token "$(echo "$j" | json name)"
ls_json=$(berth token ls --json)
check_eq "token ls lists both" "dash token" "$(echo "$ls_json" | python3 -c \
	'import json,sys; print(" ".join(t["name"] for t in json.load(sys.stdin)["tokens"]))')"
check_absent "token ls never shows a secret" matching berth_ berth token ls --json
check "the database holds no secret, only hashes" python3 - "$STATE/berth.db" "$TOK" "$TOK2" <<'PY'
import hashlib, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
rows = db.execute("SELECT hash FROM tokens").fetchall()
hashes = {r[0] for r in rows}
ok = hashes == {hashlib.sha256(t.encode()).hexdigest() for t in sys.argv[2:]}
raw = open(sys.argv[1], "rb").read() + open(sys.argv[1] + "-wal", "rb").read()
sys.exit(0 if ok and not any(t.encode() in raw for t in sys.argv[2:]) else 1)
PY
msg=$(berth token create --name "$(printf 'a\tb')" 2>&1)
check_match "a name with a control character is refused" "invalid token name" "$msg"
msg=$(berth token rm x 2>&1)
check_match "token rm of a non-number is refused" "invalid token id 'x'" "$msg"
msg=$(berth token rm 999 2>&1)
check_match "token rm of an unknown id: not found" "no token 999" "$msg"

# The HTTP API.
code() { curl -s -o "$T/body" -w '%{http_code}' "$@"; }
AUTH=(-H "Authorization: Bearer $TOK")
check_eq "no token: 401" 401 "$(code "$URL/v1/machines")"
check_match "with a JSON error saying what is needed" '"code":"unauthorized".*berth token create' \
	"$(cat "$T/body")"
check_eq "a bad token: 401" 401 "$(code -H "Authorization: Bearer berth_$(printf '%064d' 0)" "$URL/v1/machines")"
check_match "with code invalid_token" '"code":"invalid_token"' "$(cat "$T/body")"
check_eq "a malformed Authorization: 401" 401 "$(code -H "Authorization: Basic eDp5" "$URL/v1/machines")"
check_eq "the token's machines: 200" 200 "$(code "${AUTH[@]}" "$URL/v1/machines")"
check_eq "they are the token owner's (root's m)" m "$(json machines.0.name <"$T/body")"
check_eq "usage over HTTP: 200" 200 "$(code "${AUTH[@]}" "$URL/v1/usage")"
check_match "usage has the machine's live rate" '"per_hour_nano":[1-9]' "$(cat "$T/body")"
since=$(( $(date +%s) / 3600 * 3600 - 3600 ))
check_eq "usage per hour (step=3600)" 200 "$(code "${AUTH[@]}" "$URL/v1/usage?since=$since&step=3600")"
check "two hourly buckets whose sum is the total (each rounded down)" python3 -c '
import json, sys
u = json.load(open(sys.argv[1]))
m = u["machines"][0]
ok = u["step"] == 3600 and len(u["series"]) == 2 and len(m["series"]) == 2
ok = ok and 0 <= m["total_nano"] - sum(m["series"]) <= 2 and u["series"] == m["series"]
sys.exit(0 if ok else 1)' "$T/body"
check_eq "a step giving too many buckets is refused" 400 \
	"$(code "${AUTH[@]}" "$URL/v1/usage?since=0&step=60")"
check_match "naming the step" "step '60'" "$(cat "$T/body")"
check_eq "gateway routes do not exist over HTTP (epoch)" 404 "$(code "${AUTH[@]}" "$URL/v1/gateway/epoch")"
check_eq "nor gateway auth" 404 "$(code "${AUTH[@]}" -X POST -d '{"key":"x"}' "$URL/v1/gateway/auth")"
check_eq "/metrics is not served over HTTP" 404 "$(code "${AUTH[@]}" "$URL/metrics")"
check_eq "root-only: image build refused" 403 "$(code "${AUTH[@]}" -X POST -d '{"recipe":"tiny"}' "$URL/v1/images")"
check_eq "root-only: image delete refused" 403 "$(code "${AUTH[@]}" -X DELETE "$URL/v1/images/tiny")"
check_eq "root-only: image import refused" 403 "$(code "${AUTH[@]}" -X PUT --data-binary x "$URL/v1/images/evil")"
check_eq "root-only: SSH credentials refused" 403 "$(code "${AUTH[@]}" -X POST "$URL/v1/machines/m/ssh")"
check_eq "a token cannot make tokens" 403 "$(code "${AUTH[@]}" -X POST -d '{}' "$URL/v1/tokens")"
check_match "and says where they are made" "berth token create" "$(cat "$T/body")"
check_eq "nor add SSH keys" 403 "$(code "${AUTH[@]}" -X POST -d '{"key":"ssh-ed25519 AAAA x"}' "$URL/v1/keys")"
hdr=$(curl -s -D - -o /dev/null "${AUTH[@]}" "$URL/v1/machines")
check_match "API answers over HTTP are never cached" 'Cache-Control: no-store' "$hdr"
# A large upload without a token: refused before its body is read.
truncate -s 64M "$T/big"
up=$(curl -s -o "$T/body" -w '%{http_code} %{size_upload}' -X PUT -H 'Expect:' \
	--data-binary @"$T/big" "$URL/v1/images/big")
check_match "an upload without a token: 401" '^401 ' "$up"
check "and its 64 MiB body was not all taken" test "${up#* }" -lt $((64 << 20))
up=$(curl -s -o "$T/body" -w '%{http_code} %{size_upload}' -X POST -H 'Expect:' \
	"${AUTH[@]}" --data-binary @"$T/big" "$URL/v1/machines")
check_match "a body over max_body with a token: 413" '^413 ' "$up"
rm -f "$T/big"
check_eq "X-Berth-User is refused over HTTP" 403 "$(code "${AUTH[@]}" -H 'X-Berth-User: other' "$URL/v1/machines")"
# Framing and header names hostd would read otherwise (web/request.h), by
# hand; and a client that shuts down its sending side after its request.
raw() { python3 "$ROOT/tests/raw_http.py" --wait 5 "$@" | tr '\r\n' '  '; }
RH="Host: 127.0.0.1:$PORT\r\nAuthorization: Bearer $TOK\r\n"
check_match "/v1: Transfer-Encoding gzip with a Content-Length, a request in the body: 400" \
	'^HTTP/1.1 400 .*"invalid_request".*both Transfer-Encoding and Content-Length' \
	"$(raw --shut 127.0.0.1 "$PORT" "POST /v1/machines/nosuch/start HTTP/1.1\r\n${RH}Transfer-Encoding: gzip\r\nContent-Length: 2\r\n\r\n{}GET /v1/info HTTP/1.1\r\n${RH}\r\n")"
check_match "  gzip alone: 400" '^HTTP/1.1 400 .*Transfer-Encoding must be .*chunked' \
	"$(raw --shut 127.0.0.1 "$PORT" "POST /v1/machines/nosuch/start HTTP/1.1\r\n${RH}Transfer-Encoding: gzip\r\n\r\n{}")"
check_match "  a header name with a space before its colon (X-Berth-User : other): 400" \
	'^HTTP/1.1 400 .*"invalid_request".*not a token' \
	"$(raw 127.0.0.1 "$PORT" "GET /v1/machines HTTP/1.1\r\n${RH}X-Berth-User : other\r\nConnection: close\r\n\r\n")"
check_match "  a bare CR in a header name: 400" '^HTTP/1.1 400 .*"invalid_request".*not a token' \
	"$(raw 127.0.0.1 "$PORT" "GET /v1/machines HTTP/1.1\r\n${RH}Foo\rX-Berth-User: other\r\nConnection: close\r\n\r\n")"
check_match "GET /v1/machines, then the client shuts down its sending side: still 200" \
	'^HTTP/1.1 200 .*"machines"' "$(raw --shut 127.0.0.1 "$PORT" "GET /v1/machines HTTP/1.1\r\n${RH}\r\n")"
check_eq "traversal (../) refused" 400 "$(code --path-as-is "$URL/../berth.conf")"
check_eq "traversal (%2e%2e) refused" 400 "$(code --path-as-is "$URL/%2e%2e/%2e%2e/etc/passwd")"
check_eq "hidden files refused" 400 "$(code "$URL/.git/config")"
check_eq "a missing file: 404" 404 "$(code "$URL/nope.html")"
check_eq "static files are GET only" 405 "$(code -X POST -d x "$URL/index.html")"
hdr=$(curl -s -D - -o /dev/null "$URL/")
check_match "/ is index.html as text/html" 'Content-Type: text/html' "$hdr"
check_match "index.html is never cached" 'Cache-Control: no-store' "$hdr"
check_match "app.js is JavaScript" 'Content-Type: text/javascript' "$(curl -s -D - -o /dev/null "$URL/app.js")"
check_match "style.css is CSS" 'Content-Type: text/css' "$(curl -s -D - -o /dev/null "$URL/style.css")"
check_eq "a static file needs no token" 200 "$(code "$URL/app.js")"

# The browser (node, Debian's chromium, playwright-core in build/node from
# deploy/install-deps.sh test): missing ones make it a skip, not a pass.
ART=$ROOT/build/test-artifacts
PW=$ROOT/build/node/node_modules/playwright-core/index.mjs
done_seen=0
if ! command -v node >/dev/null || [ ! -x /usr/bin/chromium ] || [ ! -f "$PW" ]; then
	skip "the dashboard in a browser: needs node, /usr/bin/chromium and $PW (sh deploy/install-deps.sh test)"
	: >"$T/browser.out"
	done_seen=skipped
	berth stop m >/dev/null
else
	node "$ROOT/tests/browser/dashboard.mjs" "$URL/" "$TOK" m "$ART" >"$T/browser.out" 2>&1
fi
while IFS='|' read -r kind what why; do
	case $kind in
	PASS) ok "browser: $what" ;;
	FAIL) not_ok "browser: $what"; diag "$why" ;;
	SCREENSHOT) diag "screenshot: $what"; shot=$what ;;
	DONE) done_seen=1 ;;
	*) diag "browser: $kind $what" ;;
	esac
done <"$T/browser.out"
if [ "$done_seen" != skipped ]; then
	check_eq "the browser run finished" 1 "$done_seen"
	check "a screenshot was kept" test -s "${shot:-/nonexistent}"
	check_eq "the dashboard's stop went through the API: m is stopped" stopped \
		"$(berth show m --json | json state)"
fi
check_match "the token's use is recorded" '^[0-9]+$' \
	"$(berth token ls --json | json tokens.0.last_used)"

# Events as they come (server-sent events), through berth-web.
curl -sN -H "Authorization: Bearer $TOK" "$URL/v1/events?follow=1&machine=m" >"$T/sse" 2>&1 &
SSE_PID=$!
PIDS+=("$SSE_PID")
for _ in $(seq 50); do grep -q '^: berth events' "$T/sse" && break; sleep 0.1; done
check_match "GET /v1/events?follow=1: the stream opens at once" '^: berth events' "$(head -1 "$T/sse")"
berth start m --no-wait >/dev/null
for _ in $(seq 100); do grep -q '^event: started' "$T/sse" && break; sleep 0.2; done
check_match "  berth start m arrives as an event, with its cause" \
	'^data: \{"id": ?[0-9]+, ?"time": ?"[0-9T:.-]+Z", ?"owner": ?"root", ?"machine": ?"m", ?"kind": ?"started", ?"cause": ?"POST /v1/machines/m/start by root"\}$' \
	"$(grep -A1 '^event: started' "$T/sse" | tail -1)"
sid=$(sed -n 's/^id: //p' "$T/sse" | tail -1)
check_match "  Last-Event-ID replays what came after it" '^event: started$' \
	"$(curl -s -m 3 -H "Authorization: Bearer $TOK" -H "Last-Event-ID: $((sid - 1))" \
		"$URL/v1/events?follow=1&machine=m" | grep '^event:' | head -1)"
kill "$SSE_PID" 2>/dev/null
berth stop m >/dev/null

# A token acts for its own user only: root makes one for alice (as
# elsewhere, with X-Berth-User), a local user makes their own.
ATOK=$(curl -s --unix-socket "$STATE/hostd.sock" -H 'X-Berth-User: alice' -X POST \
	-d '{"name":"for-alice"}' http://berth/v1/tokens | json token)
check_match "root makes a token for alice" '^berth_[0-9a-f]{64}$' "$ATOK"
check_eq "alice's token sees none of root's machines" '{"machines":[]}' \
	"$(curl -s -H "Authorization: Bearer $ATOK" "$URL/v1/machines")"
check_eq "nor root's m by name (404)" 404 "$(code -H "Authorization: Bearer $ATOK" "$URL/v1/machines/m")"
check_eq "nor can it stop it" 404 "$(code -H "Authorization: Bearer $ATOK" -X POST "$URL/v1/machines/m/stop")"
check_eq "nor follow its events" "" \
	"$(curl -s -m 3 -H "Authorization: Bearer $ATOK" -H "Last-Event-ID: 0" "$URL/v1/events?follow=1" | grep '^event:')"
check_eq "root's token list does not show alice's" "dash token" "$(berth token ls --json | python3 -c \
	'import json,sys; print(" ".join(t["name"] for t in json.load(sys.stdin)["tokens"]))')"
NTOK=$(setpriv --reuid=nobody --regid=nogroup --clear-groups "$BIN/berth" --state "$STATE" \
	token create --name mine 2>/dev/null)
check_match "a local user makes their own token" '^berth_[0-9a-f]{64}$' "$NTOK"
check_eq "which lists nobody's machines: none" '{"machines":[]}' \
	"$(curl -s -H "Authorization: Bearer $NTOK" "$URL/v1/machines")"

# A token's user gets the share a local user gets on hostd.sock
# (api_max_connections_per_user, 32) of web.sock, where every connection
# is berth-web's: nobody's 32 followers of events hold theirs, their 33rd
# request is refused, and alice's and root's are answered meanwhile.
FPIDS=()
for i in $(seq 32); do
	curl -sN -H "Authorization: Bearer $NTOK" "$URL/v1/events?follow=1" >"$T/f$i" 2>&1 &
	FPIDS+=($!)
	PIDS+=($!)
done
for _ in $(seq 100); do
	[ "$(cat "$T"/f* 2>/dev/null | grep -c '^: berth events')" -ge 32 ] && break
	sleep 0.1
done
check_eq "nobody holds 32 event streams through berth-web" 32 "$(cat "$T"/f* | grep -c '^: berth events')"
check_match "  their 33rd request: 503 too_many_connections, naming the setting" \
	'^503 .*"too_many_connections".*api_max_connections_per_user' \
	"$(curl -s -w '%{http_code} ' -o "$T/f33" -H "Authorization: Bearer $NTOK" "$URL/v1/machines"; cat "$T/f33")"
check_eq "  alice's token is answered meanwhile" 200 "$(code -H "Authorization: Bearer $ATOK" "$URL/v1/machines")"
check_eq "  and root's" 200 "$(code -H "Authorization: Bearer $TOK" "$URL/v1/machines")"
kill "${FPIDS[@]}" 2>/dev/null
# (berth-web finds a quiet stream's client gone at its next write: the
# keepalive, within 15 s)
for _ in $(seq 250); do
	[ "$(code -H "Authorization: Bearer $NTOK" "$URL/v1/machines")" = 200 ] && break
	sleep 0.1
done
check_eq "  once they are closed, theirs again" 200 "$(code -H "Authorization: Bearer $NTOK" "$URL/v1/machines")"

# Revoked: refused at once.
berth token rm "$ID2" >/dev/null
check_eq "a revoked token: 401" 401 "$(code -H "Authorization: Bearer $TOK2" "$URL/v1/machines")"

# HTTPS with a self-signed certificate.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
	-subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 \
	-keyout "$T/key.pem" -out "$T/cert.pem" 2>"$T/openssl.err" || diag "$(cat "$T/openssl.err")"
# berth.conf names them as certbot lays them out: live/ links into archive/.
LE=$T/le
mkdir -p "$LE/archive/h" "$LE/live/h"
chmod 700 "$LE/archive" "$LE/live"
cp -p "$T/cert.pem" "$LE/archive/h/cert1.pem"
cp -p "$T/key.pem" "$LE/archive/h/privkey1.pem"
ln -s ../../archive/h/cert1.pem "$LE/live/h/cert.pem"
ln -s ../../archive/h/privkey1.pem "$LE/live/h/privkey.pem"
# Nor berth-web's: a follower through it is cut at its stop.
curl -sN -H "Authorization: Bearer $TOK" "$URL/v1/events?follow=1" >"$T/wstop" 2>&1 &
WSTOP=$!
PIDS+=("$WSTOP")
for _ in $(seq 50); do grep -q '^: berth events' "$T/wstop" && break; sleep 0.1; done
t0=$(date +%s%N)
web_down
check "berth-web stops within 5 s with a follower of events through it ($(( ($(date +%s%N) - t0) / 1000000 )) ms)" \
	test $(( ($(date +%s%N) - t0) / 1000000 )) -lt 5000
# (curl exits at its stream's end: a zombie of this shell's, or gone)
ended() { case $(ps -o stat= -p "$1" 2>/dev/null) in "" | Z*) return 0 ;; esac; return 1; }
for _ in $(seq 50); do ended "$WSTOP" && break; sleep 0.1; done
check "  and the follower's stream ended" ended "$WSTOP"
# A follower of events does not hold hostd's stop: its stream ends.
curl -sN --unix-socket "$STATE/hostd.sock" "http://b/v1/events?follow=1" >"$T/fstop" 2>&1 &
FSTOP=$!
PIDS+=("$FSTOP")
for _ in $(seq 50); do grep -q '^: berth events' "$T/fstop" && break; sleep 0.1; done
t0=$(date +%s%N)
kill_hostd TERM
check "hostd stops within 5 s with a follower of events connected ($(( ($(date +%s%N) - t0) / 1000000 )) ms)" \
	test $(( ($(date +%s%N) - t0) / 1000000 )) -lt 5000
for _ in $(seq 50); do ended "$FSTOP" && break; sleep 0.1; done
check "  and the follower's stream ended" ended "$FSTOP"
printf 'tls_cert = %s\ntls_key = %s\n' "$LE/live/h/cert.pem" "$LE/live/h/privkey.pem" >>"$STATE/berth.conf"
start_hostd || not_ok "hostd restarts with TLS"
web_up || not_ok "berth-web restarts with TLS (certbot's live/ links)"
check_eq "info gives the https URL" "https://127.0.0.1:$PORT/" "$(berth info --json | json dashboard)"
check_eq "HTTPS with the token: 200" 200 "$(code --cacert "$T/cert.pem" "${AUTH[@]}" "https://127.0.0.1:$PORT/v1/machines")"
check_eq "HTTPS without a token: 401" 401 "$(code --cacert "$T/cert.pem" "https://127.0.0.1:$PORT/v1/machines")"
check_eq "HTTPS serves the page" 200 "$(code --cacert "$T/cert.pem" "https://127.0.0.1:$PORT/")"
curl -s -o /dev/null "https://127.0.0.1:$PORT/"
check_eq "the certificate is the configured one (without it curl cannot verify it: 60)" 60 "$?"
check "plain HTTP to the TLS port gets no answer" \
	bash -c "[ \"\$(curl -s -m 5 -o /dev/null -w '%{http_code}' '$URL/')\" != 200 ]"

# What one client may hold (web/conns.h), with short limits: a
# connection that sends no request head (no TLS handshake, even) is shut
# within --head-timeout; a kept one that trickles its next request line,
# within --idle-timeout of its answer; one address gets --max-per-addr
# connections at once and another address is still served.
web_down
web_up --head-timeout 2 --idle-timeout 3 --max-per-addr 8 || not_ok "berth-web with short limits"
python3 - "$PORT" "$T/cert.pem" >"$T/hold.out" 2>&1 <<'PY'
import socket, ssl, sys, time
port, ca = int(sys.argv[1]), sys.argv[2]
def closed_after(s, limit, trickle):
    """Seconds until the server closes S (TRICKLE: a byte sent every 0.5 s),
    or None."""
    t0 = time.monotonic()
    s.settimeout(0.5)
    while time.monotonic() - t0 < limit:
        try:
            if trickle:
                s.send(b"x")
            if s.recv(1) == b"":
                return time.monotonic() - t0
        except socket.timeout:
            continue
        except (ConnectionError, OSError, ssl.SSLError):
            return time.monotonic() - t0
    return None
s = socket.create_connection(("127.0.0.1", port))
t = closed_after(s, 15, False)
print("silent:", "closed %.1f" % t if t is not None else "open")
ctx = ssl.create_default_context(cafile=ca)
k = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="127.0.0.1")
k.sendall(b"GET /index.html HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
k.settimeout(5)
got = b""
while b"</html>" not in got:
    got += k.recv(65536)
print("kept:", got.split(b"\r\n")[0].decode())
t0 = time.monotonic()
t = closed_after(k, 15, True)
print("trickled:", "closed %.1f" % t if t is not None else "open")
# A page's request with a body that comes a byte at a time: refused at
# its head (it held the connection past both deadlines: the review's).
b = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="127.0.0.1")
b.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000000000\r\n\r\n")
b.settimeout(3)
try:
    first = b.recv(200).split(b"\r\n")[0].decode()
except socket.timeout:
    first = "no answer"
t = closed_after(b, 15, True)
print("slowbody:", first, "closed %.1f" % t if t is not None else "open")
held = []
for _ in range(8):
    c = socket.socket(); c.bind(("127.0.0.7", 0)); c.connect(("127.0.0.1", port)); held.append(c)
c = socket.socket(); c.bind(("127.0.0.7", 0)); c.connect(("127.0.0.1", port)); c.settimeout(3)
try:
    print("ninth:", "closed" if c.recv(1) == b"" else "data")
except socket.timeout:
    print("ninth: open")
except OSError:
    print("ninth: closed")
o = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), source_address=("127.0.0.8", 0)),
                    server_hostname="127.0.0.1")
o.sendall(b"GET /index.html HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
print("other:", o.recv(100).split(b"\r\n")[0].decode())
PY
out=$(cat "$T/hold.out")
check_match "a connection that sends nothing is shut within 2 s (+1)" "silent: closed [23]\." "$out"
check_match "  a kept connection is served first" "kept: HTTP/1.1 200" "$out"
check_match "  and shut within 3 s (+1) of its answer while it trickles" "trickled: closed [34]\." "$out"
check_match "a page's request with a body (a byte at a time): 413 at its head, and shut" \
	"slowbody: HTTP/1.1 413 .* closed [0-4]\." "$out"
check_match "one address's ninth connection at --max-per-addr 8: shut at once" "ninth: closed" "$out"
check_match "  while another address is served" "other: HTTP/1.1 200" "$out"
check_match "berth-web says why it shut them" "closed 1 connection without a complete request head within 2s" \
	"$(cat "$T/web.log")"

# Bad settings are refused with the setting named: berth.conf's by hostd
# (it leaves no hostd), the TLS files and the port by berth-web.
bad_conf() { # CONF-LINES... : hostd refuses to start; prints its log
	local s=$T/bad
	rm -rf "$s"; mkdir -p "$s"
	printf '%s\n' "$@" >"$s/berth.conf"
	timeout 20 "$BIN/berth-hostd" --state "$s" >"$T/bad.log" 2>&1
	echo "exit=$? $(cat "$T/bad.log")"
}
# bad_web CONF-LINES...: hostd starts with them, berth-web refuses to;
# prints berth-web's exit status and log.
bad_web() {
	local s=$T/badweb
	rm -rf "$s"; mkdir -p "$s"
	printf '%s\n' "$@" >"$s/berth.conf"
	"$BIN/berth-hostd" --state "$s" >"$T/badweb-hostd.log" 2>&1 &
	OFF_PID=$!
	timeout 40 "$BIN/berth-web" --state "$s" >"$T/badweb.log" 2>&1
	echo "exit=$? $(cat "$T/badweb.log")"
	kill "$OFF_PID"; wait "$OFF_PID" 2>/dev/null; OFF_PID=
}
check_match "http_listen without a port is refused" "exit=1 .*http_listen = 'localhost' is not ADDR:PORT" \
	"$(bad_conf 'http_listen = localhost')"
check_match "a port out of range is refused" "exit=1 .*http_listen = '127.0.0.1:70000'" \
	"$(bad_conf 'http_listen = 127.0.0.1:70000')"
check_match "tls_cert without tls_key is refused" "exit=1 .*both tls_cert and tls_key" \
	"$(bad_conf "http_listen = 127.0.0.1:$(free_port)" "tls_cert = $T/cert.pem")"
check_match "a non-loopback address without TLS is refused" \
	"exit=1 .*http_listen = 0.0.0.0:[0-9]+ is reachable from other hosts" \
	"$(bad_conf "http_listen = 0.0.0.0:$(free_port)")"
check_match "an unreadable certificate is named" "exit=1 .*tls_cert = $T/none.pem" \
	"$(bad_web "http_listen = 127.0.0.1:$(free_port)" "tls_cert = $T/none.pem" "tls_key = $T/key.pem")"
ln -s "$LE/archive/h/privkey1.pem" "$T/their-key.pem"
chown -h nobody "$T/their-key.pem"
check_match "a TLS key through a link another user owns is refused" \
	"exit=1 .*tls_key = $T/their-key.pem: $T/their-key.pem is a symbolic link owned by uid $(id -u nobody)" \
	"$(bad_web "http_listen = 127.0.0.1:$(free_port)" "tls_cert = $T/cert.pem" "tls_key = $T/their-key.pem")"
cp -p "$T/key.pem" "$T/open-key.pem"
chmod 644 "$T/open-key.pem"
check_match "a private key every user can read is refused" \
	"exit=1 .*tls_key = $T/open-key.pem is open to every user \\(mode 0644\\)" \
	"$(bad_web "http_listen = 127.0.0.1:$(free_port)" "tls_cert = $T/cert.pem" "tls_key = $T/open-key.pem")"
check_match "a configured address in use is an error" "exit=1 .*listen on 127.0.0.1:$PORT: Address already in use" \
	"$(bad_web "http_listen = 127.0.0.1:$PORT")"
check_match "http_listen empty: hostd runs, berth-web has nothing to serve" \
	"exit=1 .*http_listen is empty in berth.conf" "$(bad_web 'http_listen =')"
check_match "  (that hostd did start)" "ready in" "$(cat "$T/badweb-hostd.log")"

finish
