#!/bin/bash
# The desktop (berth-desktop, hostd's tokens and descriptor passing, the
# noVNC page) with headless Chromium against one real machine: the guest's
# console pattern read from the canvas, typing and a mouse click that reach
# the guest, two viewers seeing the same update, live desktop sessions in
# hostd, refused tokens (reused, expired, another user's or machine's,
# unknown), waking a suspended machine with a visible "waking" state, a
# viewer that stays across suspend/resume and a restart, and the clipboard
# both ways (the guest's SPICE agent port, the tiny image's clipagent).
. "$(dirname "$0")/../lib.sh"

NODE_MODULES=$ROOT/build/node/node_modules
missing=
command -v node >/dev/null 2>&1 || missing="$missing node"
[ -x /usr/bin/chromium ] || missing="$missing chromium"
[ -d "$NODE_MODULES/playwright-core" ] || missing="$missing playwright-core"
[ -f "$NODE_MODULES/@novnc/novnc/core/rfb.js" ] || missing="$missing @novnc/novnc"
command -v curl >/dev/null 2>&1 || missing="$missing curl"
[ -z "$missing" ] || { skip "not installed:$missing (make deps)"; finish; }

chmod 711 "$T"
ART=$ROOT/build/test-artifacts
mkdir -p "$ART"
BR_PID=
BRW_PID=
BR2_PID=
t700_cleanup() {
	[ -n "$BR2_PID" ] && kill "$BR2_PID" 2>/dev/null && wait "$BR2_PID" 2>/dev/null
	[ -n "$BRW_PID" ] && kill "$BRW_PID" 2>/dev/null
	[ -n "$BR_PID" ] && kill "$BR_PID" 2>/dev/null
	[ -n "$BRW_PID" ] && wait "$BRW_PID" 2>/dev/null
	[ -n "$BR_PID" ] && wait "$BR_PID" 2>/dev/null
	cleanup
}
trap t700_cleanup EXIT

PORT=$(free_port)
TTL=15
mkdir -p "$STATE"
printf 'desktop_url = http://127.0.0.1:%s\ndesktop_token_ttl = %s\n' "$PORT" "$TTL" >"$STATE/berth.conf"
start_hostd || { not_ok "hostd starts"; finish; }
build_tiny || { not_ok "tiny image builds"; finish; }
T0=$(date +%s)
berth create dt --memory 256M >/dev/null 2>"$T/create.err" ||
	{ not_ok "create dt"; cat "$T/create.err"; finish; }
diag "dt up in $(($(date +%s) - T0)) s"

# Static files: a symbolic link in the page's directory is not followed.
# (A bridge of its own, before the main one: a bridge that starts drops
# the desktop sessions an earlier one left.)
mkdir -p "$T/page"
cp "$ROOT/desktop/page/index.html" "$ROOT/desktop/page/desktop.css" "$T/page/"
ln -s /etc/hostname "$T/page/link.css"
PORT2=$(free_port)
"$BIN/berth-desktop" --state "$STATE" --listen "127.0.0.1:$PORT2" --user berth-desktop \
	--page "$T/page" >>"$T/desktop2.log" 2>&1 &
BR2_PID=$!
for _ in $(seq 50); do
	grep -q "listening on" "$T/desktop2.log" && break
	sleep 0.1
done
check_eq "a page file is served whole" "200 $(stat -c %s "$T/page/desktop.css")" \
	"$(curl -s -o /dev/null -w '%{http_code} %{size_download}' "http://127.0.0.1:$PORT2/page/desktop.css")"
check_eq "a symbolic link under the page's directory is not followed" 404 \
	"$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT2/page/link.css")"
kill "$BR2_PID"
wait "$BR2_PID" 2>/dev/null
BR2_PID=

bridge_start "$PORT" --max-fps 30
check "berth-desktop listens" grep -q "listening on 127.0.0.1:$PORT as uid $(id -u berth-desktop)" "$T/desktop.log"

# A token minted now is expired by the end of the test.
EXPIRED=$(berth desktop dt --json | json token)
T_EXP=$(date +%s)

# ws TOKEN [USER/MACHINE [PAD]]: a WebSocket request straight to the
# bridge (with a PAD-byte header); prints the status line's code and the
# error code.
ws() {
	python3 - "$PORT" "$1" "${2:-root/dt}" "${3:-0}" <<'EOF'
import json, socket, sys
port, token, path, pad = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
s = socket.create_connection(("127.0.0.1", int(port)), timeout=60)
padding = f"X-Pad: {'p' * pad}\r\n" if pad else ""
s.sendall((f"GET /ws/{path}?token={token} HTTP/1.1\r\nHost: 127.0.0.1\r\n{padding}"
           "Upgrade: websocket\r\nConnection: Upgrade\r\nOrigin: http://127.0.0.1\r\n"
           "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
data = b""
while True:
    b = s.recv(65536)
    if not b:
        break
    data += b
    if data.startswith(b"HTTP/1.1 101"):
        break
head, _, body = data.partition(b"\r\n\r\n")
code = head.split(b" ")[1].decode() if head else "none"
try:
    print(code, json.loads(body)["error"]["code"])
except Exception:
    print(code, "-")
EOF
}

# ---- the browser --------------------------------------------------------
coproc NODE { exec node "$ROOT/tests/browser/desktop.mjs" 2>>"$T/node.err"; }
BRW_PID=$NODE_PID
# br COMMAND...: one command to the browser; its answer on stdout.
br() {
	local a
	echo "$*" >&"${NODE[1]}"
	if ! IFS= read -r -t 90 a <&"${NODE[0]}"; then
		echo "fail no answer"
		return
	fi
	echo "$a"
}
# brc DESC COMMAND...: passes when the browser answers "ok ...".
brc() {
	local desc=$1 a
	shift
	a=$(br "$@")
	if [[ $a == ok* ]]; then ok "$desc"; else not_ok "$desc"; diag "$*: $a"; fi
}

# The guest draws a known pattern on its VGA text console: bands of red,
# green and blue, 8 rows (128 pixels) each.
draw() { # COLOUR...: ANSI background numbers, one band each
	local script='exec >/dev/tty1; printf "\033[?25l\033[H\033[2J"'
	for c in "$@"; do
		script="$script; i=0; while [ \$i -lt 8 ]; do printf \"\033[${c}m%80s\" ''; i=\$((i+1)); done"
	done
	script="$script; printf '\033[0m'"
	berth exec dt -- sh -c "$script"
}
draw 41 42 44 || not_ok "the guest draws its pattern"

URL=$(berth desktop dt)
check_match "berth desktop prints the URL with the token in its fragment" \
	"^http://127\.0\.0\.1:$PORT/root/dt/#token=[A-Za-z0-9_-]{43}$" "$URL"
TOK_A=${URL##*token=}
T1=$(date +%s%N)
brc "a viewer connects" open A "$URL"
diag "page to connected: $((($(date +%s%N) - T1) / 1000000)) ms"
check_eq "the screen is the guest's 720x400 text console" "ok 720x400" "$(br size A)"
brc "canvas shows the red band" waitcolor A 360 64 170 0 0 20
brc "canvas shows the green band" waitcolor A 360 192 0 170 0 5
brc "canvas shows the blue band" waitcolor A 360 320 0 0 170 5
br shot A "$ART/t700-desktop.png" >/dev/null

# Typing in the browser reaches the guest's shell on tty1.
brc "typing in the page" type A "touch /tmp/typed-in-browser"
typed=no
for _ in $(seq 30); do
	berth exec dt -- test -f /tmp/typed-in-browser 2>/dev/null && { typed=yes; break; }
	sleep 1
done
check_eq "a command typed in the browser ran in the guest" yes "$typed"

# The mouse reaches the guest's PS/2 mouse (QEMU's i8042 AUX port, psmouse
# in the guest).  A reader in the guest copies that device's evdev records
# to a file: empty until the browser moves the pointer and clicks, then a
# relative motion and a press of the left button.
mdev=$(berth exec dt -- awk '/^H:/ && /mouse[0-9]/ {
	for (i = 2; i <= NF; i++) if ($i ~ /^event[0-9]+$/) print $i }' /proc/bus/input/devices)
if [[ $mdev =~ ^event[0-9]+$ ]]; then
	ok "the guest has a mouse ($mdev)"
	T2=$(date +%s%N)
	berth exec dt -- sh -c "cat /dev/input/$mdev >/tmp/mouse.ev 2>/dev/null </dev/null &
		echo \$! >/tmp/mouse.pid"
	sleep 1
	check_eq "its reader runs and has read nothing yet" "0" \
		"$(berth exec dt -- sh -c 'kill -0 "$(cat /tmp/mouse.pid)" && stat -c %s /tmp/mouse.ev')"
	brc "the pointer moves over the screen" mouse A 100 100
	brc "and clicks" mouse A 600 300 click
	seen=
	for _ in $(seq 20); do
		# struct input_event on x86-64: timeval, u16 type, u16 code, s32 value.
		seen=$(berth exec dt -- cat /tmp/mouse.ev | python3 -c '
import struct, sys
d = sys.stdin.buffer.read()
motion = press = False
for i in range(0, len(d) - 23, 24):
    _, _, typ, code, value = struct.unpack("<qqHHi", d[i:i + 24])
    motion |= typ == 2 and code in (0, 1) and value != 0  # EV_REL, REL_X or REL_Y
    press |= typ == 1 and code == 0x110 and value == 1    # EV_KEY, BTN_LEFT down
yes = lambda b: "yes" if b else "no"
print(f"{len(d) // 24} records, motion {yes(motion)}, left press {yes(press)}")')
		[[ $seen == *", motion yes, left press yes" ]] && break
		sleep 0.5
	done
	check_match "the guest's mouse moved and its left button was pressed" \
		'^[0-9]+ records, motion yes, left press yes$' "$seen"
	stopped=$(berth exec dt -- sh -c 'p=$(cat /tmp/mouse.pid) && kill "$p" &&
		rm -f /tmp/mouse.pid /tmp/mouse.ev || exit 1
		for i in 1 2 3 4 5 6 7 8 9 10; do
			kill -0 "$p" 2>/dev/null || { echo stopped; exit 0; }
			usleep 100000
		done')
	check_eq "the guest's reader is stopped" stopped "$stopped"
	diag "mouse: $seen; $((($(date +%s%N) - T2) / 1000000)) ms"
else
	not_ok "the guest has a mouse"
	diag "no event device with a mouse handler: $(berth exec dt -- cat /proc/bus/input/devices | grep -E '^[NH]:' | tr '\n' ' ')"
fi

# A second viewer; both see the next update.
brc "a second viewer connects" open B "$(berth desktop dt)"
sess=
for _ in $(seq 30); do
	sess=$(berth show dt --json | json sessions)
	[ "$sess" = 2 ] && break
	sleep 0.1
done
check_eq "hostd counts two desktop sessions" 2 "$sess"
draw 45 45 45 || not_ok "the guest draws again"
brc "viewer A sees the update" waitcolor A 360 200 170 0 170 20
brc "viewer B sees the update" waitcolor B 360 200 170 0 170 20

# Viewers that reset their connection in the middle of an update (each one
# is closed by both of its libvncserver threads): the bridge lives on.
churn() {
	python3 - "$PORT" "$@" <<'EOF'
import socket, struct, sys
port, tokens = int(sys.argv[1]), sys.argv[2:]
def frame(data):  # a masked binary WebSocket frame
    mask = b"\x01\x02\x03\x04"
    return bytes([0x82, 0x80 | len(data)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data))
done = 0
for t in tokens:
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall((f"GET /ws/root/dt?token={t} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               "Upgrade: websocket\r\nConnection: Upgrade\r\nOrigin: http://127.0.0.1\r\n"
               "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    data = b""
    while b"\r\n\r\n" not in data:
        data += s.recv(4096)
    rest = data.split(b"\r\n\r\n", 1)[1]
    while len(rest) < 2 + 12:  # the version, in a frame
        rest += s.recv(4096)
    s.sendall(frame(b"RFB 003.008\n"))
    s.recv(4096)                              # security types
    s.sendall(frame(b"\x01"))
    s.recv(4096)                              # security result
    s.sendall(frame(b"\x01"))                 # shared
    s.recv(4096)                              # server init
    s.sendall(frame(struct.pack(">BxH", 2, 1) + struct.pack(">i", 0)))  # raw
    s.sendall(frame(struct.pack(">BBHHHH", 3, 0, 0, 0, 720, 400)))       # the whole screen
    s.recv(1000)                              # a little of its 1.1 MB
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()                                 # reset, mid-update
    done += 1
print(done)
EOF
}
# (Two batches of 10: an owner holds at most 16 live tokens.)
churned=0
for _ in 1 2; do
	toks=()
	for _ in $(seq 10); do toks+=("$(berth desktop dt --json | json token)"); done
	churned=$((churned + $(churn "${toks[@]}")))
done
check_eq "20 viewers reset mid-update" 20 "$churned"
sleep 1
check "the bridge lives on" kill -0 "$BR_PID"

# Refusals, straight at the bridge.
check_eq "a used token is refused" "403 token_used" "$(ws "$TOK_A")"
OTHER=$(berth desktop dt --json | json token)
check_eq "a token for root/dt is refused for bob/dt" "403 wrong_machine" "$(ws "$OTHER" bob/dt)"
check_eq "and is spent by that attempt" "403 token_used" "$(ws "$OTHER")"
# A viewer whose connection broke comes back once with its resume key.
resume_seq() {
	python3 - "$PORT" "$1" <<'EOF'
import json, socket, sys, time, urllib.request
port, token = sys.argv[1], sys.argv[2]
def ws(cred):
    s = socket.create_connection(("127.0.0.1", int(port)), timeout=60)
    s.sendall((f"GET /ws/root/dt?{cred} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               "Upgrade: websocket\r\nConnection: Upgrade\r\nOrigin: http://127.0.0.1\r\n"
               "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    data = b""
    while b"\r\n\r\n" not in data:
        b = s.recv(65536)
        if not b:
            break
        data += b
    return s, data.split(b" ")[1].decode() if data else "none"
def state(key=None):
    shown = f"&resume={key}" if key else ""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/state?token={token}{shown}") as r:
        return json.load(r)
out = []
s, code = ws(f"token={token}")
out.append(code)
time.sleep(0.5)
key = state().get("resume", "")
out.append("once" if key and "resume" not in state() else "again")
s.close()
time.sleep(1)
s, code = ws(f"resume={key}")
out.append(code)
time.sleep(0.5)
# The next key: not to whoever knows the spent token, only to whoever
# shows the key this viewer came back with.
out.append("nokey" if "resume" not in state() else "leaked")
out.append("newkey" if state(key).get("resume", key) != key else "none")
s.close()
time.sleep(1)
s, code = ws(f"resume={key}")
out.append(code)
out.append(state(key).get("state", "?"))
print(" ".join(out))
EOF
}
check_eq "a broken viewer comes back with its resume key (told once), once" \
	"101 once 101 nokey newkey 403 refused" \
	"$(resume_seq "$(berth desktop dt --json | json token)")"
check_eq "an unknown token is refused" "403 invalid_token" "$(ws AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA)"

# Refused before the token is spent: a user name that is not one (here
# with a CR in it), a request head libvncserver would not take (over 4 KiB).
GOOD=$(berth desktop dt --json | json token)
check_eq "a bad user name in the URL is refused" "400 invalid_name" \
	"$(ws "$GOOD" "$(printf 'ro\rot/dt')")"
check_eq "a WebSocket request head over 4 KiB is refused" "431 too_large" \
	"$(ws "$GOOD" root/dt 5000)"
check_eq "neither spent the token" "101 -" "$(ws "$GOOD")"
check_absent "no CR reached the bridge's log" matching $'\r' cat "$T/desktop.log"

# One owner holds at most 16 live tokens: minting 20 evicts the oldest, and
# another user can still mint (the table is not full).
toks=()
for _ in $(seq 20); do toks+=("$(berth desktop dt --json | json token)"); done
check_eq "the 1st of 20 tokens minted at once is evicted" "403 token_expired" "$(ws "${toks[0]}")"
check_eq "the 20th is good" "101 -" "$(ws "${toks[19]}")"
code=$(curl -s -o /dev/null -w '%{http_code}' --unix-socket "$STATE/hostd.sock" \
	-H 'X-Berth-User: bob' -H 'Content-Type: application/json' -X POST \
	-d '{"name":"bd","image":"tiny","start":false}' http://berth/v1/machines)
check_eq "bob creates a stopped machine" 201 "$code"
code=$(curl -s -o /dev/null -w '%{http_code}' --unix-socket "$STATE/hostd.sock" \
	-H 'X-Berth-User: bob' -X POST http://berth/v1/machines/bd/desktop)
check_eq "bob can still mint a token" 200 "$code"
code=$(curl -s -o "$T/bob.json" -w '%{http_code}' --unix-socket "$STATE/hostd.sock" \
	-H 'X-Berth-User: bob' -X POST http://berth/v1/machines/dt/desktop)
check_eq "another user cannot mint a token for root's machine" 404 "$code"
left=$((T_EXP + TTL + 1 - $(date +%s)))
[ "$left" -gt 0 ] && sleep "$left"
check_eq "an expired token is refused" "403 token_expired" "$(ws "$EXPIRED")"
brc "a refused page says so" open R "http://127.0.0.1:$PORT/root/dt/#token=$OTHER" refused

brc "viewer A leaves" close A
brc "viewer B leaves" close B
brc "page R closes" close R
for _ in $(seq 50); do
	sess=$(berth show dt --json | json sessions)
	[ "$sess" = 0 ] && break
	sleep 0.1
done
check_eq "their sessions are closed" 0 "$sess"

# A viewer on a suspended machine wakes it: "waking dt…", then the screen
# as it was (the memory came back).
berth suspend dt >/dev/null || not_ok "suspend dt"
check_eq "dt is suspended" suspended "$(berth show dt --json | json state)"
a=$(br open C "$(berth desktop dt)" waking)
if [[ $a == "ok waking waking dt…" ]]; then ok "the page shows 'waking dt…'"; else not_ok "the page shows 'waking dt…'"; diag "$a"; fi
brc "the screen shows the blue waking frame" waitcolor C 5 5 32 48 96 10
br shot C "$ART/t700-waking.png" >/dev/null
a=$(br light C)
if [[ $a =~ ^ok\ ([0-9]+)$ ]] && [ "${BASH_REMATCH[1]}" -gt 200 ]; then
	ok "with text on it"
else
	not_ok "with text on it"; diag "$a"
fi
brc "then the machine's screen" wait C connected 60
check_eq "dt is running again" running "$(berth show dt --json | json state)"
brc "with its console as it was" waitcolor C 360 200 170 0 170 20

# The viewer stays across a suspend and resume of the machine.
berth suspend dt >/dev/null || not_ok "suspend dt again"
brc "the page shows 'machine stopped'" wait C stopped 30
berth resume dt >/dev/null || not_ok "resume dt"
brc "and reconnects by itself" wait C connected 60
brc "to the same screen" waitcolor C 360 200 170 0 170 20

# And across a restart (power off, boot): the bridge attaches again.
before=$(grep -c "root/dt: connected" "$T/desktop.log")
berth restart dt --no-wait >/dev/null || not_ok "restart dt"
after=$before
for _ in $(seq 600); do
	after=$(grep -c "root/dt: connected" "$T/desktop.log")
	[ "$after" -gt "$before" ] && break
	sleep 0.1
done
check "the bridge reattached after the restart" [ "$after" -gt "$before" ]
brc "the page is connected after the restart" wait C connected 30

# A restarted hostd forgets live sessions; the bridge opens its viewer's
# again (it checks hostd's epoch every 5 s).
check_eq "one desktop session before hostd restarts" 1 "$(berth show dt --json | json sessions)"
kill_hostd TERM
start_hostd || not_ok "hostd starts again"
sess=
for _ in $(seq 120); do
	sess=$(berth show dt --json | json sessions)
	[ "$sess" = 1 ] && break
	sleep 0.1
done
check_eq "the bridge reopened it after hostd's restart" 1 "$sess"
# The clipboard both ways, through the guest's SPICE agent port: the bridge
# is the agent's host (desktop/vdagent.h), the tiny image's clipagent the
# guest's agent.  noVNC sends ISO 8859-1 (libvncserver offers it no
# extended-clipboard Notify): é is one byte and must reach the guest as
# UTF-8.  The other way libvncserver hands noVNC UTF-8 (extended clipboard
# Provide), so a € arrives whole.
for _ in $(seq 60); do berth exec dt -- true 2>/dev/null && break; sleep 1; done
berth exec dt -- clipagent -d /tmp/clip-in || not_ok "clipagent starts in the guest"
# guest_clip WANT: until the guest's /tmp/clip-in holds WANT (30 s); its
# bytes in hex on stdout.
guest_clip() {
	local want hex
	want=$(printf '%s' "$1" | od -An -tx1 | tr -d ' \n')
	for _ in $(seq 30); do
		hex=$(berth exec dt -- od -An -tx1 /tmp/clip-in 2>/dev/null | tr -d ' \n')
		[ "$hex" = "$want" ] && break
		sleep 1
	done
	echo "$hex"
}
CLIP_IN="from the browser: café"
brc "text is put in the page's clipboard box" clipset C "$CLIP_IN"
check_eq "it arrives in the guest, é as UTF-8" \
	"$(printf '%s' "$CLIP_IN" | od -An -tx1 | tr -d ' \n')" "$(guest_clip "$CLIP_IN")"
check "the bridge spoke to the guest's agent" grep -q "agent: the guest's agent is there" \
	"$T/desktop.log"
# The guest's agent restarts, now offering its own text.
berth exec dt -- killall clipagent || not_ok "clipagent stops"
berth exec dt -- clipagent -d -o "from the guest: ü €" /tmp/clip-in ||
	not_ok "clipagent starts again, offering text"
brc "the guest's clipboard appears in the page, € and all" clipwait C "from the guest: ü €" 30
# Across a suspend and resume the bridge attaches the agent port again; text
# put in the page while the machine sleeps reaches it when it is back.
berth suspend dt >/dev/null || not_ok "suspend dt (clipboard)"
brc "the page shows 'machine stopped' (clipboard)" wait C stopped 30
CLIP_IN2="while it slept: naïve"
brc "text is put in the box while the machine is suspended" clipset C "$CLIP_IN2"
berth resume dt >/dev/null || not_ok "resume dt (clipboard)"
brc "the page reconnects (clipboard)" wait C connected 60
check_eq "the text arrives in the guest once it is back" \
	"$(printf '%s' "$CLIP_IN2" | od -An -tx1 | tr -d ' \n')" "$(guest_clip "$CLIP_IN2")"
CLIP_IN3="after the resume: Ærø"
brc "new text in the page's clipboard box" clipset C "$CLIP_IN3"
check_eq "and text put in the box after the resume" \
	"$(printf '%s' "$CLIP_IN3" | od -An -tx1 | tr -d ' \n')" "$(guest_clip "$CLIP_IN3")"
berth exec dt -- killall clipagent 2>/dev/null

echo quit >&"${NODE[1]}"
for _ in $(seq 100); do kill -0 "$BRW_PID" 2>/dev/null || break; sleep 0.1; done
kill "$BRW_PID" 2>/dev/null
wait "$BRW_PID" 2>/dev/null
BRW_PID=

check "the bridge logged the wake" grep -q "root/dt: awake" "$T/desktop.log"
bridge_end "$BR_PID"
BR_PID=
if [ "$nfail" -gt 0 ]; then sed "s/^/# node: /" "$T/node.err" | tail -10; fi
finish
