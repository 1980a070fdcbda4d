#!/bin/bash
# Previews (hostd/preview.h, web/preview.h): a web server in a machine
# reached at PORT-NAME-USER.localhost through berth-web, with curl, a
# client of our own (tests/preview_client.py) and headless Chromium
# (tests/browser/preview.mjs).  Private by default: refused without the
# cookie, a one-time link sets it for that host alone; public needs
# nothing.  HTTP/1.1 kept alive, bodies streamed both ways (Content-Length,
# chunked, close-delimited), X-Forwarded-*, berth's cookie never reaching
# the guest nor set by it, a malformed answer refused, a WebSocket echo.
# A suspended machine wakes on a request (a browser sees "waking…", curl
# is held), traffic keeps it awake for the idle policy, removing a preview
# or making it private cuts its connections, deleting the machine removes
# its previews.  Every refusal named (no such preview, bad port, not your
# machine, a label another user's names already spell, network = user);
# another local user, and berth-web's own user, cannot reach the guest's
# port themselves (the tap's output chain).
. "$(dirname "$0")/../lib.sh"

H2_PID=
S2=$T/state2
# The second hostd (network = user), when it ran: stopped, its table gone.
h2_down() {
	local i
	[ -n "$H2_PID" ] || return 0
	kill -KILL "$H2_PID" 2>/dev/null
	i=$(STATE=$S2 instance_id)
	[ -n "$i" ] && nft delete table inet "berth-$i" 2>/dev/null
	H2_PID=
}
trap 'h2_down; cleanup' EXIT
command -v setpriv >/dev/null || { skip "setpriv is not installed (util-linux)"; finish; }

chmod 711 "$T"
UB=tb$$
UC=x-tb$$
test_user "$UB" && test_user "$UC" || { not_ok "useradd $UB $UC"; finish; }
PORT=$(free_port)
mkdir -p "$STATE"
cat >>"$STATE/berth.conf" <<EOF
http_listen = 127.0.0.1:$PORT
idle_timeout = never
idle_check_interval = 1s
idle_cpu_percent = 0
EOF
start_hostd && build_tiny || { not_ok "hostd and image"; finish; }
web_up || { not_ok "berth-web starts"; finish; }
ub() { as_user "$UB" "$BIN/berth" --state "$STATE" "$@"; }
uc() { as_user "$UC" "$BIN/berth" --state "$STATE" "$@"; }
pc() { python3 "$ROOT/tests/preview_client.py" "$@"; }
# code URL [CURL ARGS...]: the HTTP status curl gets.
code() { local u=$1; shift; curl -s -o /dev/null -w '%{http_code}' "$@" "$u"; }

check_eq "m is running" running "$(berth create m --json | json state)"
berth exec m -- sh -c 'mkdir -p /www && echo "busybox page" >/www/index.html &&
	httpd -p 8000 -h /www && (webserve 8080 >/dev/null 2>&1 &)' ||
	not_ok "servers started in m"
for _ in $(seq 50); do
	berth exec m -- sh -c 'netstat -tln | grep -q ":8080 "' && break
	sleep 0.2
done
GUEST=$(berth show m --json | json ssh.host)
L=8080-m-root
U=http://$L.localhost:$PORT
PUB=http://8000-m-root.localhost:$PORT

# ---- refusals -------------------------------------------------------------
check_match "no preview yet: 404 no_preview" '"code":"no_preview"' "$(curl -s "$U/")"
check_eq "  its status" 404 "$(code "$U/")"
berth preview m 0 2>"$T/err"
check_eq "berth preview m 0: bad arguments" 2 "$?"
check_match "  saying the port is bad" "bad port '0'" "$(cat "$T/err")"
check_match "PUT .../previews/65536 is 400 invalid_port" '"invalid_port"' \
	"$(curl -s --unix-socket "$STATE/hostd.sock" -X PUT -d '{}' http://b/v1/machines/m/previews/65536)"
berth preview nosuch 8080 2>"$T/err"
check_match "no such machine: named" "no machine nosuch" "$(cat "$T/err")"
ub preview m 8080 2>"$T/err"
check_match "not your machine: another user's preview of root's m is 'no machine m'" \
	"no machine m" "$(cat "$T/err")"
check_eq "the label of a bad port on berth-web: 400 invalid_port" 400 \
	"$(code "http://0-m-root.localhost:$PORT/")"
check_match "a name two labels deep: 400 invalid_label" '"invalid_label"' \
	"$(curl -s "http://a.8080-m-root.localhost:$PORT/")"
# A label over 63 characters is no preview's, not the one its first 63 spell.
LONG=$(printf 'n%.0s' $(seq 53))
berth create "$LONG" --no-start >/dev/null || not_ok "a stopped machine of 53 characters"
berth preview "$LONG" 8080 >/dev/null 2>&1
check_eq "the preview of a label of 63 characters: private, 403 without the cookie" 403 \
	"$(code "http://8080-$LONG-root.localhost:$PORT/")"
check_eq "  the same name and 'xyz': 400, not a second name of it" 400 \
	"$(code "http://8080-$LONG-rootxyz.localhost:$PORT/")"
check_match "  saying why" '"invalid_label".*at most 63' \
	"$(curl -s "http://8080-$LONG-rootxyz.localhost:$PORT/")"
berth rm "$LONG" >/dev/null
# tb's m-x and x-tb's m spell the same label, 8080-m-x-tbPID.
ub create m-x --no-start >/dev/null && uc create m --no-start >/dev/null ||
	not_ok "two stopped machines for the label check"
check_match "$UB's preview of m-x is made" "^http://8080-m-x-$UB.localhost:$PORT/__berth/login" \
	"$(ub preview m-x 8080 2>/dev/null)"
uc preview m 8080 2>"$T/err"
check_match "$UC's m:8080 spells the same label: refused, saying so" \
	"another machine's preview is named 8080-m-x-$UB already" "$(cat "$T/err")"

# ---- private, the link, the cookie ---------------------------------------
LINK=$(berth preview m 8080 2>"$T/err")
check_match "berth preview m 8080 prints a one-time link" "^$U/__berth/login\\?token=[0-9a-f]{64}$" "$LINK"
check_match "  and says it is private, and where" "private, at $U/" "$(cat "$T/err")"
check_eq "without the cookie: 403" 403 "$(code "$U/")"
check_match "  login_needed, saying how to get in" \
	'"login_needed".*berth preview m 8080' "$(curl -s "$U/")"
check_match "  a browser gets a page saying so" 'This preview is private.*berth preview m 8080' \
	"$(curl -s -H 'Accept: text/html' "$U/" | tr '\n' ' ')"
hdr=$(curl -s -D - -o /dev/null -c "$T/jar" "$LINK")
check_match "the link: 303 to /" $'Location: /\r' "$hdr"
check_match "  setting berth_preview, HttpOnly, SameSite=Lax, for this host only (no Domain)" \
	'Set-Cookie: berth_preview=[0-9a-f]{64}; Path=/; Max-Age=604800; HttpOnly; SameSite=Lax'$'\r' "$hdr"
check_match "  the cookie jar has it for the host alone" "^#HttpOnly_$L.localhost	FALSE	/" \
	"$(grep berth_preview "$T/jar")"
check_eq "the link works once: its second use is 403" 403 "$(code "$LINK")"
check_match "  invalid_link" '"invalid_link"' "$(curl -s "$LINK")"
CV=$(awk '/berth_preview/ { print $NF }' "$T/jar")
CK="berth_preview=$CV"
TOKEN=${LINK##*token=}
check_eq "the database keeps no link or cookie secret: no byte string of either in berth.db*" 0 \
	"$(cat "$STATE"/berth.db* | grep -a -c -F -e "$TOKEN" -e "$CV")"
check_eq "  the cookie's sha256 is there (the positive control)" 1 \
	"$(cat "$STATE"/berth.db* | grep -a -c -F "$(printf '%s' "$CV" | sha256sum | cut -d' ' -f1)" |
	   awk '{ print ($1 > 0) }')"
check_eq "with the cookie: the guest's page" "<!doctype html><title>webserve</title><h1>hello from m</h1>" \
	"$(curl -s -b "$CK" "$U/")"
check_eq "a forged cookie is refused" 403 "$(code "$U/" -b "berth_preview=$(printf '%064d' 7)")"

# ---- the proxy --------------------------------------------------------------
h=$(curl -s -b "$CK; app=1" -H 'X-Forwarded-For: 6.6.6.6' -H 'X-Real-IP: 6.6.6.6' \
	-H 'Forwarded: for=6.6.6.6' "$U/headers")
check_match "the guest sees X-Forwarded-For: the client's address" $'X-Forwarded-For: 127.0.0.1\r' "$h"
check_match "  X-Forwarded-Proto: http" $'X-Forwarded-Proto: http\r' "$h"
check_match "  X-Forwarded-Host and Host: the preview's host" \
	"Host: $L.localhost:$PORT"$'\r'".*X-Forwarded-Host: $L.localhost:$PORT" "$(echo "$h" | tr -d '\n')"
check_absent "  not the client's own forwarding headers" matching '6\.6\.6\.6' echo "$h"
check_match "  the client's other cookies" $'Cookie: app=1\r' "$h"
check_absent "  never berth's cookie" matching 'berth_preview' echo "$h"
h=$(curl -s -D - -o /dev/null -b "$CK" "$U/setcookie")
check_match "the guest's own cookies reach the client" 'Set-Cookie: app=1; Path=/' "$h"
check_absent "  but not one named berth_preview" matching 'berth_preview' echo "$h"
check_absent "  nor its Clear-Site-Data (every preview is one site: it would clear the others' cookies)" \
	matching '[Cc]lear-[Ss]ite-[Dd]ata' echo "$h"
check_match "  (webserve sends one: the positive control)" 'Clear-Site-Data: "cookies"' \
	"$(berth exec m -- wget -q -S -O /dev/null http://127.0.0.1:8080/setcookie 2>&1)"
head -c 5000000 /dev/urandom >"$T/in.bin"
want=$(sha256sum <"$T/in.bin" | cut -d' ' -f1)
check_eq "5 MB up and back (Content-Length), byte-exact" "$want" \
	"$(curl -s -b "$CK" --data-binary @"$T/in.bin" "$U/echo" | sha256sum | cut -d' ' -f1)"
check_eq "  and chunked" "$want" "$(curl -s -b "$CK" -H 'Transfer-Encoding: chunked' \
	--data-binary @"$T/in.bin" "$U/echo" | sha256sum | cut -d' ' -f1)"
check_eq "50 MB down with Content-Length" 52428800 "$(curl -s -b "$CK" "$U/bytes?n=52428800" | wc -c)"
check_eq "  and chunked" 52428800 "$(curl -s -b "$CK" "$U/bytes?n=52428800&chunked=1" | wc -c)"
check_eq "an answer ended by the guest's close" "closed by the server" "$(curl -s -b "$CK" "$U/close")"
check_match "HEAD: the length, no body" $'Content-Length: 60\r' "$(curl -s -I -b "$CK" "$U/")"
pc stream "$U/slow" "$CK" >"$T/slow"
read -r _ first <"$T/slow"
end=$(awk '/^end/ { print $2 }' "$T/slow")
check "a streamed answer's first bytes arrive before its end (${first:-?} s, end ${end:-?} s)" \
	awk -v a="$first" -v b="$end" 'BEGIN { exit !(a != "" && a < 1.0 && b >= 1.5) }'
check_match "a malformed answer (two framings): 502, saying so" \
	'"bad_gateway".*both Content-Length and Transfer-Encoding' "$(curl -s -b "$CK" "$U/bad")"
check_eq "the next request is fine" 200 "$(code "$U/" -b "$CK")"
check_eq "two requests on one client connection go on one connection to the guest" \
	"request 1 on this connection|request 2 on this connection" \
	"$(curl -s -b "$CK" "$U/conn" "$U/conn" | tr '\n' '|' | sed 's/|$//')"
out=$(pc keepalive "$U/headers" "$CK" 20)
check_eq "20 requests on one kept client connection: all answered" 20 "$(echo "$out" | grep -c '^200$')"
check_eq "  on one connection" "conn 1" "$(echo "$out" | tail -1)"

# ---- what a smuggler sends (web/request.h) -----------------------------------
# raw [--shut] REQUEST: berth-web's raw answer (tests/raw_http.py's
# escapes); glog: the heads the guest received since the last glog.
raw() {
	local o=()
	[ "$1" = --shut ] && { o=(--shut); shift; }
	python3 "$ROOT/tests/raw_http.py" --wait 5 "${o[@]}" 127.0.0.1 "$PORT" "$1" | tr '\r\n' '  '
}
glog() { curl -s -b "$CK" "$U/log"; }
HH="Host: $L.localhost:$PORT\r\nCookie: $CK\r\n"
glog >/dev/null
check_match "Transfer-Encoding: gzip with a Content-Length, a request smuggled in the body: 400" \
	'^HTTP/1.1 400 .*"invalid_request".*both Transfer-Encoding and Content-Length' \
	"$(raw --shut "POST /echo HTTP/1.1\r\n${HH}Transfer-Encoding: gzip\r\nContent-Length: 5\r\n\r\nhelloGET /smuggled HTTP/1.1\r\nHost: $L.localhost:$PORT\r\nX-Forwarded-For: 6.6.6.6\r\nCookie: $CK\r\n\r\n")"
check_match "Transfer-Encoding: gzip alone: 400" '^HTTP/1.1 400 .*Transfer-Encoding must be .*chunked' \
	"$(raw --shut "POST /echo HTTP/1.1\r\n${HH}Transfer-Encoding: gzip\r\n\r\nGET /smuggled2 HTTP/1.1\r\nHost: x\r\n\r\n")"
check_match "chunked and a Content-Length: 400" '^HTTP/1.1 400 .*both Transfer-Encoding and Content-Length' \
	"$(raw "POST /echo HTTP/1.1\r\n${HH}Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n")"
for h in 'X-Forwarded-For : 6.6.6.6' 'Cookie : berth_preview=forged' 'Content-Length : 30' \
	'Foo\rX-Injected: 1'; do
	check_match "a header line '$h': 400" '^HTTP/1.1 400 .*"invalid_request".*header' \
		"$(raw "GET /headers HTTP/1.1\r\n${HH}${h}\r\nConnection: close\r\n\r\n")"
done
check_absent "  none of these reached the guest: no smuggled request, no such header" \
	matching 'smuggled|6\.6\.6\.6|forged|X-Injected|Content-Length :' glog
check_match "  (the guest's log works: the positive control)" 'GET /conn HTTP/1.1' \
	"$(curl -s -b "$CK" "$U/conn" >/dev/null; glog)"
check_eq "TRACK: 405, as TRACE" "405 405" "$(code "$U/" -b "$CK" -X TRACK) $(code "$U/" -b "$CK" -X TRACE)"
check_absent "  neither reached the guest" matching 'TRACK|TRACE' glog
# A client that shuts down its sending side once its request is out.
check_match "a client that half-closes after its request gets the answer" \
	'^HTTP/1.1 200 .*hello from m' "$(raw --shut "GET / HTTP/1.1\r\n${HH}\r\n")"
check_match "  and a streamed one whole" '^HTTP/1.1 200 .*tick 1.*tick 4' \
	"$(raw --shut "GET /slow HTTP/1.1\r\n${HH}\r\n")"

check_eq "a WebSocket echo" "hello through berth" "$(pc ws "$U/ws" "$CK" 'hello through berth')"
pc ws "$U/ws" "" x 2>"$T/err" >/dev/null
check_match "  not without the cookie" 'no upgrade: HTTP/1.1 403' "$(cat "$T/err")"

# ---- public -----------------------------------------------------------------
berth preview m 8000 >/dev/null 2>&1
check_eq "a cookie of another preview's host is refused there" 403 "$(code "$PUB/" -b "$CK")"
check_eq "berth preview m 8000 --public prints its URL" "$PUB/" "$(berth preview m 8000 --public 2>/dev/null)"
check_eq "a public preview needs nothing (busybox httpd)" "busybox page" "$(curl -s "$PUB/")"
ls_out=$(berth preview ls)
check_match "preview ls: both, with their access" "m +8000 +public +$PUB/.*m +8080 +private +$U/" \
	"$(echo "$ls_out" | tr '\n' ' ')"
check_match "preview ls --all as root: every user's" "$UB +m-x +8080 +private" \
	"$(berth preview ls --all | tr '\n' ' ')"
check_absent "$UB's own list has only theirs" matching ' m +80' ub preview ls
# One client connection, two previews: each request gets its own guest
# connection, let in by its own access, never the one the last left.
check_eq "one client connection, 8080 with its cookie then public 8000: each its own server" \
	"200 <!doctype html><title>webserve</title><h1>hello from m</h1>|200 busybox page" \
	"$(pc pair "$U/" "$CK" "$PUB/" "" | tr '\n' '|' | sed 's/|$//')"
check_match "  public 8000 then 8080 without the cookie: refused, not the kept connection" \
	'^200 busybox page\|403 ' "$(pc pair "$PUB/" "" "$U/" "" | tr '\n' '|')"
check_match "  8080 with the cookie, then without it: refused" \
	'^200 <!doctype.*\|403 ' "$(pc pair "$U/" "$CK" "$U/" "" | tr '\n' '|')"

# ---- nobody else reaches the guest's port -------------------------------------
check_eq "root reaches the guest's port 8080 (the positive control)" open "$(pc probe "$GUEST" 8080)"
check_eq "another local user does not" closed "$(as_user "$UB" /usr/bin/python3 \
	"$ROOT/tests/preview_client.py" probe "$GUEST" 8080)"
check_eq "nor berth-web's own user" closed "$(as_user berth-web /usr/bin/python3 \
	"$ROOT/tests/preview_client.py" probe "$GUEST" 8080)"
check_eq "  nor port 8000" closed "$(as_user berth-web /usr/bin/python3 \
	"$ROOT/tests/preview_client.py" probe "$GUEST" 8000)"

# ---- the browser ----------------------------------------------------------------
ART=$ROOT/build/test-artifacts
PW=$ROOT/build/node/node_modules/playwright-core/index.mjs
LINK2=$(berth preview m 8080 2>/dev/null)
if ! command -v node >/dev/null || [ ! -x /usr/bin/chromium ] || [ ! -f "$PW" ]; then
	skip "previews in a browser: needs node, /usr/bin/chromium and $PW (sh deploy/install-deps.sh test)"
	berth suspend m >/dev/null
	berth resume m >/dev/null
else
	node "$ROOT/tests/browser/preview.mjs" "$U/" "$LINK2" "$PUB/" "$BIN/berth" "$STATE" m \
		"$ART" >"$T/browser.out" 2>&1
	done_seen=0
	while IFS='|' read -r kind what why; do
		case $kind in
		PASS) ok "browser: $what" ;;
		FAIL) not_ok "browser: $what"; diag "$why" ;;
		DONE) done_seen=1 ;;
		*) diag "browser: $kind $what" ;;
		esac
	done <"$T/browser.out"
	check_eq "the browser run finished" 1 "$done_seen"
fi

# ---- hostd's webctl socket ----------------------------------------------------------
CTL=$STATE/webctl.sock
check_match "root asks hostd for the public preview's connection: it is passed" \
	'^\{"grant": *"[0-9a-f]{16}".*\|fds 1$' \
	"$(pc ctl "$CTL" '{"op":"preview","label":"8000-m-root","cookies":[],"wake":"wait"}' | tr '\n' '|' | sed 's/|$//')"
check_match "another local user is not answered on webctl.sock" '"status": *403.*"forbidden".*\|fds 0' \
	"$(as_user "$UB" /usr/bin/python3 "$ROOT/tests/preview_client.py" ctl "$CTL" \
		'{"op":"preview","label":"8000-m-root","cookies":[],"wake":"wait"}' 2>&1 | tr '\n' '|')"

# ---- a client's request to a sleeping machine is held -----------------------------
berth suspend m >/dev/null
check_eq "m is suspended" suspended "$(berth show m --json | json state)"
check_match "berth-web's user asks for the private preview without a cookie: 403, no connection" \
	'"login_needed".*\|fds 0' "$(as_user berth-web /usr/bin/python3 "$ROOT/tests/preview_client.py" \
		ctl "$CTL" '{"op":"preview","label":"8080-m-root","cookies":[],"wake":"wait"}' | tr '\n' '|')"
check_eq "  and the machine was not woken" suspended "$(berth show m --json | json state)"
t0=$(date +%s.%N)
got=$(curl -s -m 300 -b "$CK" "$U/")
t1=$(date +%s.%N)
check_eq "curl is held while m wakes, then answered" "<!doctype html><title>webserve</title><h1>hello from m</h1>" "$got"
diag "woke and answered in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s"
check_eq "m runs again" running "$(berth show m --json | json state)"
# One whose client goes while the machine wakes: hostd says it holds the
# request ("waiting"), and from then on berth-web takes the client's
# close as its going: it stops waiting, and the request never reaches the
# guest (before, it went on once the machine ran, for no one).
glog >/dev/null
berth suspend m >/dev/null
python3 "$ROOT/tests/raw_http.py" --wait 0.1 127.0.0.1 "$PORT" \
	"GET /wakeprobe HTTP/1.1\r\n${HH}\r\n" >/dev/null
for _ in $(seq 100); do
	[ "$(berth show m --json | json state)" = running ] && break
	sleep 0.2
done
sleep 1
check_match "a client that goes while its request waits for the wake: berth-web stops waiting" \
	'preview 8080-m-root: the client went while its machine woke' "$(cat "$T/web.log")"
check_absent "  and its request never reaches the guest" matching wakeprobe glog
# A client connection kept across a suspend: hostd cuts its guest
# connection (the machine sleeps), and its next request wakes it.
PAUSE=6 pc keepalive "$U/" "$CK" 2 >"$T/ka2" &
KA2=$!
sleep 1
berth suspend m >/dev/null
wait "$KA2"
check_eq "a kept client connection across a suspend: its next request wakes m and is answered" \
	"200 200 conn 1" "$(tr '\n' ' ' <"$T/ka2" | sed 's/ $//')"

# ---- traffic is activity ---------------------------------------------------------
berth set m --idle 6s >/dev/null
PAUSE=1 pc keepalive "$U/" "$CK" 12 >/dev/null
check_eq "12 s of requests with a 6 s idle timeout: m stays up" running "$(berth show m --json | json state)"
check_eq "  the preview is what kept it" preview "$(berth show m --json | json idle.last_activity)"
for _ in $(seq 40); do
	[ "$(berth show m --json | json state)" = suspended ] && break
	sleep 0.5
done
check_eq "quiet, it is suspended after its timeout (the positive control)" suspended \
	"$(berth show m --json | json state)"
check_eq "a request wakes it again" 200 "$(code "$U/" -b "$CK" -m 300)"
berth set m --idle never >/dev/null

# ---- cuts -------------------------------------------------------------------------
[ "$(berth show m --json | json state)" = running ] || berth resume m >/dev/null
pc ws-hold "$U/ws" "$CK" 20 >"$T/hold" &
HOLD=$!
sleep 2
berth preview rm m 8080 >/dev/null
wait "$HOLD"
# (held until the rm, 2 s after the client was started: its own clock
# starts once python runs, 0.3 s later and more on a loaded machine)
check_match "removing the preview cuts its WebSocket within seconds" '^cut after ([1-5])\.' "$(cat "$T/hold")"
check_match "  and then its cookie finds no preview" '"no_preview"' "$(curl -s -b "$CK" "$U/")"
PAUSE=4 pc keepalive "$PUB/" "" 2 >"$T/ka" &
KA=$!
sleep 1
berth preview m 8000 >/dev/null 2>&1
wait "$KA"
check_eq "made private, a public preview's kept connection is cut: its next request is refused" \
	"200 403" "$(head -2 "$T/ka" | tr '\n' ' ' | sed 's/ $//')"
check_eq "  and a new one too" 403 "$(code "$PUB/")"

# ---- HTTPS ------------------------------------------------------------------------
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
	-subj /CN=localhost -addext 'subjectAltName=DNS:localhost,DNS:*.localhost' \
	-keyout "$T/key.pem" -out "$T/cert.pem" 2>"$T/openssl.err" || diag "$(cat "$T/openssl.err")"
chmod 600 "$T/key.pem"
web_down
kill_hostd TERM
printf 'tls_cert = %s\ntls_key = %s\n' "$T/cert.pem" "$T/key.pem" >>"$STATE/berth.conf"
start_hostd || not_ok "hostd restarts with TLS"
web_up || not_ok "berth-web restarts with TLS"
S=https://$L.localhost:$PORT
LINK=$(berth preview m 8080 2>/dev/null)
check_match "over HTTPS the link is https" "^$S/__berth/login\\?token=" "$LINK"
hdr=$(curl -sk -D - -o /dev/null "$LINK")
check_match "  its cookie is __Host-berth_preview, Secure" \
	'Set-Cookie: __Host-berth_preview=[0-9a-f]{64}; Path=/; Max-Age=604800; HttpOnly; SameSite=Lax; Secure'$'\r' "$hdr"
SV=$(echo "$hdr" | sed -n 's/^Set-Cookie: __Host-berth_preview=\([0-9a-f]*\);.*/\1/p')
check_eq "the page over HTTPS with it" "<!doctype html><title>webserve</title><h1>hello from m</h1>" \
	"$(curl -sk -b "__Host-berth_preview=$SV" "$S/")"
check_eq "  the same secret under the plain name is refused over HTTPS" 403 \
	"$(code "$S/" -k -b "berth_preview=$SV")"
h=$(curl -sk -b "__Host-berth_preview=$SV; app=2" "$S/headers")
check_match "  the guest sees X-Forwarded-Proto: https" $'X-Forwarded-Proto: https\r' "$h"
check_absent "  and no berth cookie" matching 'berth_preview' echo "$h"
check_eq "  a WebSocket over TLS" "hello over tls" \
	"$(pc ws "$S/ws" "__Host-berth_preview=$SV" 'hello over tls')"
pc ws-hold "$S/ws" "__Host-berth_preview=$SV" 30 >"$T/hold2" &
HOLD=$!
sleep 2
t0=$(date +%s%N)
web_down
t1=$(date +%s%N)
wait "$HOLD"
check "berth-web stops within 5 s with a WebSocket open ($(( (t1 - t0) / 1000000 )) ms)" \
	test $(( (t1 - t0) / 1000000 )) -lt 5000
check_match "  which it ends" '^cut after' "$(cat "$T/hold2")"

berth rm m >/dev/null
check_absent "deleting the machine removes its previews" matching ' m +80' berth preview ls

# ---- network = user --------------------------------------------------------------
mkdir -p "$S2"
echo "network = user" >"$S2/berth.conf"
"$BIN/berth-hostd" --state "$S2" >>"$T/hostd2.log" 2>&1 &
H2_PID=$!
for _ in $(seq 100); do "$BIN/berth" --state "$S2" info >/dev/null 2>&1 && break; sleep 0.1; done
"$BIN/berth" --state "$S2" image build tiny >/dev/null 2>&1 &&
	"$BIN/berth" --state "$S2" create u --no-start >/dev/null 2>&1 || not_ok "a machine with network = user"
"$BIN/berth" --state "$S2" preview u 8080 2>"$T/err"
check_match "network = user: previews refused, saying why" "previews need network = routed" \
	"$(cat "$T/err")"
"$BIN/berth" --state "$S2" rm u >/dev/null 2>&1
kill "$H2_PID"
wait "$H2_PID"
H2_PID=
check_absent "  and its hostd, stopping with no machine running, left no table" \
	matching "berth-$(STATE=$S2 instance_id)" nft list tables

check_absent "no sanitizer report or crash in berth-web's log" \
	matching 'ERROR: AddressSanitizer|runtime error|Segmentation' cat "$T/web.log"
finish
