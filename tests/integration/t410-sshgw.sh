#!/bin/bash
# The SSH gateway (berth-sshgw) with OpenSSH's clients against one real
# machine: exit codes and signals as direct ssh gives them, separate
# stdout/stderr, stdin EOF, a terminal (size, TERM), 100 MiB both ways,
# scp, sftp, rsync, -L, -W, ProxyCommand and ProxyJump to the machine's own
# sshd, agent forwarding, waking a suspended (memory kept) and a stopped
# machine, live sessions in hostd, refusals that say nothing about other
# users' machines, garbage and oversized packets before authentication, the
# login grace, the per-address limit of refused keys, unauthenticated
# connections per address and the key exchange timeout, 100 concurrent
# sessions, the session log line.
. "$(dirname "$0")/../lib.sh"

missing=
for tool in ssh scp sftp ssh-keygen ssh-agent ssh-add rsync curl; do
	command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
done
[ -z "$missing" ] || { skip "not installed:$missing (openssh-client, rsync, curl)"; finish; }

# The gateway drops to berth-sshgw, which must reach STATE/hostd.sock through
# $T (mktemp made it 0700).
chmod 711 "$T"
unset SSH_AUTH_SOCK SSH_AGENT_PID
SSHGW=$BIN/berth-sshgw

# ---- processes of this test: ended on every exit, failures included ----
BG=()		# gateways, background ssh clients
AGENT_PID=
# alive PID: PID exists and is not a zombie.
alive() {
	local st
	st=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) && [ "$st" != Z ]
}
# stop_pid PID [SIG]: SIG (TERM), then KILL after 5 s; reaps it.
stop_pid() {
	kill "-${2:-TERM}" "$1" 2>/dev/null
	for _ in $(seq 50); do
		alive "$1" || break
		sleep 0.1
	done
	kill -KILL "$1" 2>/dev/null
	wait "$1" 2>/dev/null
}
# forget PID...: reaped, no longer ours to end.
forget() {
	local p q keep=()
	for q in "${BG[@]}"; do
		for p in "$@"; do [ "$q" = "$p" ] && continue 2; done
		keep+=("$q")
	done
	BG=("${keep[@]}")
}
t410_cleanup() {
	local p
	for p in "${BG[@]}"; do kill "$p" 2>/dev/null; done
	[ -n "$AGENT_PID" ] && kill "$AGENT_PID" 2>/dev/null
	for p in "${BG[@]}"; do stop_pid "$p"; done
	cleanup
}
trap t410_cleanup EXIT

# start_gw PORT LOG ARGS...: a gateway on 127.0.0.1:PORT; its pid in GW_PID.
start_gw() {
	local port=$1 log=$2
	shift 2
	"$SSHGW" --state "$STATE" --listen "127.0.0.1:$port" --log-level info "$@" >>"$log" 2>&1 &
	GW_PID=$!
	BG+=("$GW_PID")
	for _ in $(seq 100); do
		grep -q "listening on 127.0.0.1:$port" "$log" 2>/dev/null && return 0
		alive "$GW_PID" || break
		sleep 0.1
	done
	diag "berth-sshgw did not come up on port $port; log:"
	tail -20 "$log" | sed 's/^/# /'
	return 1
}
# A tool may hang only this long.
TMO=120
OPTS=(-F /dev/null -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null
	-o LogLevel=ERROR -o BatchMode=yes -o IdentitiesOnly=yes -o ConnectTimeout=20)
OPTS_S="${OPTS[*]}"
# gw [-k KEY] [-p PORT] SSH-ARGS...: ssh through a gateway (k1, the main one).
gw() {
	local key=$T/k1 port=$P1
	[ "$1" = -k ] && { key=$2; shift 2; }
	[ "$1" = -p ] && { port=$2; shift 2; }
	timeout -k 5 "$TMO" ssh "${OPTS[@]}" -i "$key" -p "$port" "$@"
}
# bg_gw OUT ERR SSH-ARGS...: gw in the background, its pid (timeout's, which
# passes a TERM on to ssh) in BG_PID and BG.
bg_gw() {
	local out=$1 err=$2
	shift 2
	timeout -k 5 "$TMO" ssh "${OPTS[@]}" -i "$T/k1" -p "$P1" "$@" </dev/null >"$out" 2>"$err" &
	BG_PID=$!
	BG+=("$BG_PID")
}
# direct SSH-ARGS...: ssh to the machine's own endpoint with the gateway key.
direct() { timeout -k 5 "$TMO" ssh "${OPTS[@]}" -i "$STATE/keys/gateway" -p "$VM_PORT" "$@"; }
sessions() { berth show m1 --json | json sessions; }
# wait_sessions N: until m1 has N live sessions (3 s at most); prints the count.
wait_sessions() {
	local s
	for _ in $(seq 30); do
		s=$(sessions)
		[ "$s" = "$1" ] && break
		sleep 0.1
	done
	echo "$s"
}

# A terminal for ssh -t: 37 rows x 111 columns, TERM=xterm-256color; prints
# what the terminal showed (without CRs), exits as the program did.
cat >"$T/ttyrun.py" <<'EOF'
import fcntl, os, pty, struct, sys, termios
pid, fd = pty.fork()
if pid == 0:
    fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 37, 111, 0, 0))
    os.environ["TERM"] = "xterm-256color"
    os.execvp(sys.argv[1], sys.argv[1:])
out = b""
while True:
    try:
        b = os.read(fd, 65536)
    except OSError:
        break
    if not b:
        break
    out += b
_, st = os.waitpid(pid, 0)
sys.stdout.write(out.decode(errors="replace").replace("\r", ""))
sys.exit(os.waitstatus_to_exitcode(st))
EOF
# A raw TCP client: MODE read (only reads), oversize (a valid banner, then a
# packet length of 0x7fffffff and junk), random (64 KiB of random bytes).
# Prints "closed SECONDS" when the gateway closed the connection within
# TIMEOUT, else "open SECONDS".
cat >"$T/raw.py" <<'EOF'
import os, socket, struct, sys, time
mode, port, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
s = socket.create_connection(("127.0.0.1", port))
s.settimeout(timeout)
t0 = time.monotonic()
try:
    if mode == "oversize":
        s.sendall(b"SSH-2.0-x\r\n" + struct.pack(">I", 0x7fffffff) + os.urandom(4096))
    elif mode == "random":
        s.sendall(os.urandom(65536))
    while s.recv(65536):
        pass
    res = "closed"
except socket.timeout:
    res = "open"
except (ConnectionResetError, BrokenPipeError):
    res = "closed"
print("%s %.1f" % (res, time.monotonic() - t0))
EOF
# Read what a TCP port gives until it closes; retried while it gives nothing
# (the program behind it may be restarting).
cat >"$T/readport.py" <<'EOF'
import socket, sys, time
for _ in range(20):
    try:
        s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
        got = b""
        while True:
            b = s.recv(4096)
            if not b:
                break
            got += b
        if got:
            sys.stdout.write(got.decode(errors="replace"))
            sys.exit(0)
    except OSError:
        pass
    time.sleep(0.3)
sys.exit(1)
EOF

# ---- a machine, keys, the gateway ----
start_hostd && build_tiny || { not_ok "hostd and image"; finish; }
check_eq "create m1: running" running "$(berth create m1 --memory 512M --json | json state)"
VM_PORT=$(berth show m1 --json | json ssh.port)
VM_HOST=$(berth show m1 --json | json ssh.host)
for k in k1 k2 k3 kbob; do ssh-keygen -q -t ed25519 -N '' -C "t410 $k" -f "$T/$k"; done
# A squatter (root acting for mallory, signing with her own key k3) cannot
# take root's public key k1 before root does: ssh m1@ below lands in root's
# m1.
out=$(curl -s -w ' %{http_code}' --unix-socket "$STATE/hostd.sock" -X POST -H 'X-Berth-User: mallory' \
	-H 'Content-Type: application/json' --data-binary "$(SIGNER=$T/k3 key_body "$T/k1" mallory)" \
	http://berth/v1/keys)
check_match "mallory registering root's public key without its private key: refused" ' 400$' "$out"
check_match "root's key k1 registered" "^added key" "$(berth key add "$T/k1.pub")"
out=$(curl -s -w ' %{http_code}' --unix-socket "$STATE/hostd.sock" -X POST -H 'X-Berth-User: bob' \
	-H 'Content-Type: application/json' --data-binary "$(key_body "$T/kbob" bob)" http://berth/v1/keys)
check_match "bob's key registered (root acting for bob, signed with it)" ' 201$' "$out"
P1=$(free_port)
start_gw "$P1" "$T/sshgw.log" || { not_ok "the gateway starts"; finish; }
GW1=$GW_PID
ok "the gateway listens on 127.0.0.1:$P1"

# ---- exec: status, signal, streams, stdin ----
out=$(gw m1@127.0.0.1 'echo hi; exit 7' 2>"$T/first.err")
check_eq "exec: exit 7 arrives as 7" "7 hi" "$? $out"
check_eq "  the key's first login says whose it is, on stderr" \
	"berth: this is the first login with key $(ssh-keygen -lf "$T/k1.pub" | awk '{print $2}'): it signs you in as root" \
	"$(cat "$T/first.err")"
gw m1@127.0.0.1 true 2>"$T/second.err"
check_eq "  the second says nothing" "" "$(cat "$T/second.err")"
gw -v m1@127.0.0.1 'kill -TERM $$' 2>"$T/sig.err"
rc_gw=$?
direct -v "root@$VM_HOST" 'kill -TERM $$' 2>"$T/sig-direct.err"
rc_direct=$?
check_eq "exec: killed by SIGTERM: exit 255, as direct ssh to the machine" "255 255" "$rc_gw $rc_direct"
check "  the client gets the exit-signal (ssh -v: rtype exit-signal)" grep -q 'rtype exit-signal' "$T/sig.err"
check "  (direct ssh gets one too)" grep -q 'rtype exit-signal' "$T/sig-direct.err"
gw m1@127.0.0.1 'echo to-out; echo to-err >&2; echo more-out' >"$T/o" 2>"$T/e"
check_eq "stdout and stderr stay separate" "to-out more-out|to-err" "$(tr '\n' ' ' <"$T/o" | sed 's/ $//')|$(cat "$T/e")"
check_eq "stdin's EOF reaches the command" "abcdone" "$(printf abc | gw m1@127.0.0.1 'cat; echo done')"

# ---- a terminal ----
out=$(timeout -k 5 60 python3 "$T/ttyrun.py" ssh "${OPTS[@]}" -i "$T/k1" -p "$P1" -t m1@127.0.0.1 \
	'stty size; echo "term=$TERM"; tty; exit 3')
rc=$?
check_eq "ssh -t: the terminal's size arrives" "37 111" "$(echo "$out" | sed -n 1p)"
check_eq "ssh -t: TERM arrives" "term=xterm-256color" "$(echo "$out" | sed -n 2p)"
check_match "ssh -t: a pty on the machine, exit status 3" '^/dev/pts/[0-9]+ 3$' "$(echo "$out" | sed -n 3p) $rc"

# ---- bulk data, scp, sftp, rsync ----
head -c 100M /dev/urandom >"$T/big"
want=$(sha256sum <"$T/big" | cut -d' ' -f1)
t0=$(date +%s.%N)
got=$(gw m1@127.0.0.1 cat <"$T/big" | sha256sum | cut -d' ' -f1)
t1=$(date +%s.%N)
check_eq "100 MiB through 'ssh m1 cat': the same bytes back" "$want" "$got"
diag "100 MiB each way in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s"
rm -f "$T/big"

head -c 3M /dev/urandom >"$T/f1"
timeout -k 5 "$TMO" scp "${OPTS[@]}" -i "$T/k1" -P "$P1" "$T/f1" m1@127.0.0.1:/tmp/f1
check_eq "scp to the machine: exit 0" 0 "$?"
check_eq "  the machine has the same bytes" "$(sha256sum <"$T/f1" | cut -d' ' -f1)" \
	"$(gw m1@127.0.0.1 'sha256sum /tmp/f1' | cut -d' ' -f1)"
timeout -k 5 "$TMO" scp "${OPTS[@]}" -i "$T/k1" -P "$P1" m1@127.0.0.1:/tmp/f1 "$T/f1.scp"
check_eq "scp from the machine: exit 0" 0 "$?"
check "  the same bytes (cmp)" cmp -s "$T/f1" "$T/f1.scp"
printf 'put %s /tmp/f2\nget /tmp/f2 %s\nls -l /tmp\n' "$T/f1" "$T/f2.sftp" |
	timeout -k 5 "$TMO" sftp "${OPTS[@]}" -i "$T/k1" -P "$P1" -b - m1@127.0.0.1 >"$T/sftp.out" 2>&1
check_eq "sftp put, get, ls: exit 0" 0 "$?"
check "  get returns what put sent (cmp)" cmp -s "$T/f1" "$T/f2.sftp"
check_match "  ls lists it with its size" ' 3145728 .* /tmp/f2' "$(cat "$T/sftp.out")"

mkdir -p "$T/tree/sub/deeper"
head -c 2M /dev/urandom >"$T/tree/blob"
echo "small file" >"$T/tree/sub/small"
printf 'x%.0s' $(seq 1000) >"$T/tree/sub/deeper/xs"
ln -s sub/small "$T/tree/link"
RSH="ssh $OPTS_S -i $T/k1 -p $P1"
timeout -k 5 "$TMO" rsync -a -e "$RSH" "$T/tree/" m1@127.0.0.1:/tmp/tree/ 2>"$T/rsync.err"
check_eq "rsync -e ssh to the machine: exit 0" 0 "$?"
[ -s "$T/rsync.err" ] && sed 's/^/# /' "$T/rsync.err"
check_eq "  the machine has the tree" \
	"$(cd "$T/tree" && sha256sum blob sub/small sub/deeper/xs)"$'\n'"sub/small" \
	"$(gw m1@127.0.0.1 'cd /tmp/tree && sha256sum blob sub/small sub/deeper/xs && readlink link')"
echo "changed on the machine" | gw m1@127.0.0.1 'cat > /tmp/tree/sub/small'
echo "changed on the machine" >"$T/expect-small"
timeout -k 5 "$TMO" rsync -a -e "$RSH" m1@127.0.0.1:/tmp/tree/ "$T/tree.back/" 2>"$T/rsync.err"
check_eq "rsync -e ssh from the machine: exit 0" 0 "$?"
cp "$T/expect-small" "$T/tree/sub/small"
check "  the same tree back, with the change (diff -r)" diff -r "$T/tree" "$T/tree.back"

# ---- forwarding: -L, -W, ProxyCommand, ProxyJump ----
gw m1@127.0.0.1 "setsid sh -c 'while :; do echo hello-vm | nc -l -p 7777; done' </dev/null >/dev/null 2>&1 &"
LP=$(free_port)
bg_gw /dev/null "$T/fwd.err" -N -o ExitOnForwardFailure=yes -L "127.0.0.1:$LP:127.0.0.1:7777" m1@127.0.0.1
fwd=$BG_PID
out=$(timeout -k 5 60 python3 "$T/readport.py" "$LP")
check_eq "ssh -L: a program listening in the machine answers through the local port" hello-vm "$out"
check_eq "  twice" hello-vm "$(timeout -k 5 60 python3 "$T/readport.py" "$LP")"
stop_pid "$fwd"
forget "$fwd"
out=$(gw -W 127.0.0.1:22 m1@127.0.0.1 </dev/null | head -1 | tr -d '\r')
check_match "ssh -W 127.0.0.1:22: dropbear's banner" '^SSH-2\.0-dropbear' "$out"
# A port nobody listens on in the machine: refused, as direct ssh is.
gw -W 127.0.0.1:7778 m1@127.0.0.1 </dev/null >/dev/null 2>"$T/w.err"
check_eq "ssh -W to a closed port: exit 255, as direct" 255 "$?"
check_match "  the client says the forwarding failed" 'open failed|forwarding failed' "$(cat "$T/w.err")"
out=$(timeout -k 5 "$TMO" ssh "${OPTS[@]}" -i "$STATE/keys/gateway" \
	-o "ProxyCommand=ssh $OPTS_S -i $T/k1 -p $P1 -W %h:%p m1@127.0.0.1" \
	-p 22 root@127.0.0.1 'echo "via ProxyCommand on $(hostname)"')
check_eq "ProxyCommand (ssh -W): the machine's sshd with the gateway key" "via ProxyCommand on m1" "$out"
cat >"$T/ssh_config" <<EOF
Host *
	StrictHostKeyChecking no
	UserKnownHostsFile /dev/null
	LogLevel ERROR
	BatchMode yes
	IdentitiesOnly yes
Host t410-gw
	HostName 127.0.0.1
	Port $P1
	User m1
	IdentityFile $T/k1
Host t410-vm
	HostName 127.0.0.1
	Port 22
	User root
	IdentityFile $STATE/keys/gateway
	ProxyJump t410-gw
EOF
out=$(timeout -k 5 "$TMO" ssh -F "$T/ssh_config" t410-vm 'echo "jumped to $(hostname)"')
check_eq "ProxyJump: the machine's sshd with the gateway key" "jumped to m1" "$out"

# ---- agent forwarding ----
eval "$(ssh-agent -s -a "$T/agent.sock")" >/dev/null
AGENT_PID=$SSH_AGENT_PID
ssh-add -q "$STATE/keys/gateway" 2>/dev/null
check "a local agent holds the gateway key" grep -qF -- "$(ssh-keygen -lf "$STATE/keys/gateway" | awk '{print $2}')" <(ssh-add -l)
# dbclient in the machine logs in to the machine's own sshd, whose only key
# is the gateway key: only the agent can sign.
out=$(gw -A m1@127.0.0.1 'dbclient -y root@127.0.0.1 echo agent-ok' 2>"$T/agent.err")
check_eq "ssh -A: the forwarded agent signs for dbclient in the machine" agent-ok "$out"
[ "$out" = agent-ok ] || sed 's/^/# /' "$T/agent.err"
# The command runs (it prints dbclient's status), only dbclient fails.
out=$(gw m1@127.0.0.1 'dbclient -y root@127.0.0.1 echo agent-ok 2>/dev/null; echo "dbclient: $?"')
check_match "  without -A it cannot" '^dbclient: [1-9][0-9]*$' "$out"
kill "$AGENT_PID" 2>/dev/null
AGENT_PID=
unset SSH_AUTH_SOCK SSH_AGENT_PID

# ---- live sessions in hostd ----
check_eq "no sessions before" 0 "$(wait_sessions 0)"
bg_gw /dev/null /dev/null m1@127.0.0.1 'sleep 4'
sl=$BG_PID
check_eq "while 'ssh m1 sleep 4' runs: sessions 1" 1 "$(wait_sessions 1)"
wait "$sl"
check_eq "  it ends with status 0" 0 "$?"
forget "$sl"
check_eq "  after it: sessions 0" 0 "$(wait_sessions 0)"
# hostd forgets live sessions when it restarts; the gateway sees the new
# run (it asks every 5 s) and registers its live connections again.
bg_gw /dev/null /dev/null m1@127.0.0.1 'sleep 30'
sl=$BG_PID
check_eq "while 'ssh m1 sleep 30' runs: sessions 1" 1 "$(wait_sessions 1)"
kill_hostd TERM
start_hostd
s=
for _ in $(seq 150); do
	s=$(sessions)
	[ "$s" = 1 ] && break
	sleep 0.1
done
check_eq "  hostd restarted: the gateway registers it again" 1 "$s"
stop_pid "$sl"
forget "$sl"
check_eq "  after it: sessions 0" 0 "$(wait_sessions 0)"

# ---- waking ----
token=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
gw m1@127.0.0.1 "echo $token > /tmp/value"
check_eq "suspend m1" suspended "$(berth suspend m1 --json | json state)"
out=$(gw m1@127.0.0.1 cat /tmp/value 2>"$T/wake.err")
check_eq "ssh to a suspended machine wakes it, memory kept (tmpfs value)" "$token" "$out"
check_match "  stderr: waking m1… ready in S s" '^waking m1… ready in [0-9.]+ s$' "$(cat "$T/wake.err")"
check_eq "  m1 runs" running "$(berth show m1 --json | json state)"
# last_events NAME N: NAME's last N events, "kind|cause" a line.
last_events() { berth events "$1" --limit "$2" --json | python3 -c 'import json, sys
for e in json.load(sys.stdin)["events"]: print(e["kind"] + "|" + e["cause"])'; }
check_eq "  its events: suspended by berth suspend, woke by ssh from the client's address" \
	"suspended|POST /v1/machines/m1/suspend by root woke|ssh from 127.0.0.1" \
	"$(last_events m1 2 | tr '\n' ' ' | sed 's/ $//')"
check_eq "stop m1" stopped "$(berth stop m1 --json | json state)"
out=$(gw m1@127.0.0.1 'echo "booted $(hostname)"; cat /tmp/value 2>/dev/null' 2>"$T/wake.err")
check_eq "ssh to a stopped machine boots it (tmpfs empty)" "booted m1" "$out"
check_eq "  its event: started by ssh from the client's address" "started|ssh from 127.0.0.1" \
	"$(last_events m1 1)"
check_match "  stderr: waking m1… ready in S s" '^waking m1… ready in [0-9.]+ s$' "$(cat "$T/wake.err")"
diag "woke: $(cat "$T/wake.err")"

# ---- USER+NAME ----
check_eq "root+m1: logs in as root" root "$(gw root+m1@127.0.0.1 'id -un')"
out=$(gw nobody2+m1@127.0.0.1 true 2>&1)
check_eq "nobody2+m1 (no such user in the machine): 255, and why" \
	"255 berth: cannot log in to m1 as nobody2" "$? $out"

# ---- refusals ----
out=$(gw -k "$T/k2" m1@127.0.0.1 true 2>&1)
check_eq "an unregistered key: exit 255" 255 "$?"
check_match "  Permission denied" 'Permission denied \(publickey\)' "$out"
gw -k "$T/kbob" zz-first@127.0.0.1 true >/dev/null 2>&1	# the first login's note
out_bob=$(gw -k "$T/kbob" m1@127.0.0.1 true 2>&1)
rc_bob=$?
out_none=$(gw -k "$T/kbob" zz-nowhere@127.0.0.1 true 2>&1)
rc_none=$?
out_none_root=$(gw zz-nowhere@127.0.0.1 true 2>&1)
rc_none_root=$?
check_eq "bob asking for root's m1: 255, no machine m1" "255 berth: no machine m1" "$rc_bob $out_bob"
check_eq "  the same as bob asking for a machine no one has (name substituted)" \
	"$rc_bob $out_bob" "$rc_none ${out_none//zz-nowhere/m1}"
check_eq "  the same as root asking for a machine no one has" \
	"$rc_bob $out_bob" "$rc_none_root ${out_none_root//zz-nowhere/m1}"

# ---- garbage before authentication ----
check_match "an oversized packet after a valid banner: the connection is closed" '^closed ' \
	"$(timeout -k 5 30 python3 "$T/raw.py" oversize "$P1" 10)"
check_match "64 KiB of random bytes: the connection is closed" '^closed ' \
	"$(timeout -k 5 30 python3 "$T/raw.py" random "$P1" 10)"
check_eq "the gateway serves on" still-here "$(gw m1@127.0.0.1 'echo still-here')"

# ---- a second gateway: login grace, refused-key limit ----
P2=$(free_port)
if start_gw "$P2" "$T/sshgw2.log" --login-grace 2 --auth-fail-limit 3; then
	GW2=$GW_PID
	check_eq "second gateway (--login-grace 2 --auth-fail-limit 3): k1 works" ok2 \
		"$(gw -p "$P2" m1@127.0.0.1 'echo ok2')"
	out=$(timeout -k 5 30 python3 "$T/raw.py" read "$P2" 10)
	check_match "a client that only reads is closed after the grace (2 s; got: $out)" \
		'^closed (1\.[5-9]|[2-3]\.[0-9]|4\.[0-4])$' "$out"
	gw -k "$T/k2" -p "$P2" m1@127.0.0.1 true 2>/dev/null
	r1=$?
	gw -k "$T/k3" -p "$P2" m1@127.0.0.1 true 2>/dev/null
	check_eq "two refused keys" "255 255" "$r1 $?"
	check_eq "  k1 still works" ok3 "$(gw -p "$P2" m1@127.0.0.1 'echo ok3')"
	out=$(gw -k "$T/k2" -p "$P2" m1@127.0.0.1 true 2>&1)
	check_eq "a third refused key" 255 "$?"
	out=$(gw -p "$P2" m1@127.0.0.1 'echo ok4' 2>&1)
	rc=$?
	check_eq "  now k1 is refused too from 127.0.0.1" 255 "$rc"
	check_match "  (the connection is closed before the key exchange)" \
		'Connection (closed|reset)' "$out"
	check "  the gateway logs the block" grep -q '127.0.0.1: 3 refused keys' "$T/sshgw2.log"
	check_eq "  the main gateway still takes k1" ok5 "$(gw m1@127.0.0.1 'echo ok5')"
	stop_pid "$GW2"
	forget "$GW2"
else
	not_ok "the second gateway starts"
fi

# ---- a third gateway: unauthenticated connections per address, kex timeout ----
P3=$(free_port)
if start_gw "$P3" "$T/sshgw3.log" --max-unauth-per-addr 10 --kex-timeout 3 --login-grace 20; then
	GW3=$GW_PID
	# 50 silent connections from 127.0.0.2: how many the gateway keeps.
	python3 "$(dirname "$0")/silent_conns.py" "$P3" 127.0.0.2 50 1.5 5 >"$T/silent.out" &
	SILENT=$!
	BG+=("$SILENT")
	for _ in $(seq 100); do [ -s "$T/silent.out" ] && break; sleep 0.1; done
	check_eq "50 silent connections from 127.0.0.2 (--max-unauth-per-addr 10): 10 kept" 10 \
		"$(cat "$T/silent.out")"
	check_eq "  meanwhile a login from 127.0.0.1 works" ok6 "$(gw -p "$P3" m1@127.0.0.1 'echo ok6')"
	out=$(timeout -k 5 20 ssh "${OPTS[@]}" -i "$T/k1" -p "$P3" -o BindAddress=127.0.0.2 \
		m1@127.0.0.1 'echo ok7' 2>&1)
	check_match "  and one from 127.0.0.2 is refused while its 10 wait" 'Connection (closed|reset)' "$out"
	wait "$SILENT" 2>/dev/null
	forget "$SILENT"
	check_eq "  once they are gone, 127.0.0.2 logs in" ok8 "$(timeout -k 5 60 ssh "${OPTS[@]}" \
		-i "$T/k1" -p "$P3" -o BindAddress=127.0.0.2 m1@127.0.0.1 'echo ok8')"
	out=$(timeout -k 5 30 python3 "$T/raw.py" read "$P3" 15)
	check_match "a silent client is closed after the key exchange timeout (3 s, not the 20 s grace; got: $out)" \
		'^closed ([2-4]\.[0-9]|5\.[0-4])$' "$out"
	stop_pid "$GW3"
	forget "$GW3"
else
	not_ok "the third gateway starts"
fi

# ---- 100 concurrent sessions ----
mkdir -p "$T/par"
t0=$(date +%s.%N)
pids=()
for i in $(seq 100); do
	bg_gw "$T/par/$i.out" "$T/par/$i.err" m1@127.0.0.1 'sleep 1; echo ok'
	pids+=("$BG_PID")
done
for p in "${pids[@]}"; do wait "$p"; done
forget "${pids[@]}"
t1=$(date +%s.%N)
check_eq "100 concurrent 'ssh m1 sleep 1; echo ok': 100 ok" 100 "$(cat "$T"/par/*.out | grep -cx ok)"
diag "100 concurrent sessions took $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s"
errs=$(cat "$T"/par/*.err | sort | uniq -c | sort -rn | head -5)
[ -z "$errs" ] || { diag "their stderr:"; echo "$errs" | sed 's/^/#   /'; }

# ---- the log, the end ----
check_match "a session's log line with its byte counts (the 100 MiB one)" \
	'session root/m1 as default from 127\.0\.0\.1:[0-9]+: [0-9.]+ s, in 104857600 B, out 104857600 B' \
	"$(grep 'in 104857600 B' "$T/sshgw.log")"
check_match "USER+NAME sessions are logged as USER" 'session root/m1 as root from 127\.0\.0\.1:[0-9]+: ' \
	"$(grep 'as root from' "$T/sshgw.log")"
if alive "$GW1"; then
	ok "the gateway ran through all of it"
	kill -TERM "$GW1"
	wait "$GW1"
	check_eq "  and exits 0 on SIGTERM" 0 "$?"
	forget "$GW1"
else
	wait "$GW1"
	rc=$?
	forget "$GW1"
	not_ok "the gateway ran through all of it (it died, status $rc$( [ $rc -gt 128 ] && echo ": signal $(kill -l $((rc - 128)))"))"
fi
# (Both logs exist: each gateway was started; cat fails otherwise.)
crash='ERROR: (Address|Leak)Sanitizer|runtime error:|corrupted|double free|free\(\): '
check_absent "no crash or sanitizer report in the gateways' logs" \
	matching "$crash" cat "$T/sshgw.log" "$T/sshgw2.log" ||
	grep -h -E -B2 -A12 "$crash" "$T/sshgw.log" "$T/sshgw2.log" 2>/dev/null | head -40 | sed 's/^/# /'
if [ "$nfail" -gt 0 ]; then
	diag "gateway log tail:"
	tail -30 "$T/sshgw.log" | sed 's/^/# /'
fi
check_eq "rm m1" "deleted m1" "$(berth rm m1)"
finish
