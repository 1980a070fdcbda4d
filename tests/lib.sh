# Sourced by tests/integration/t*.sh: a private state directory, a real
# berth-hostd on it, TAP helpers, and a cleanup that removes every domain,
# volume, file and process the test made, also when it fails.
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${BERTH_BIN:-$ROOT/bin}
# Short path: the hostd socket must fit a UNIX socket address.
T=$(mktemp -d /tmp/berth-t.XXXXXX)
# The gateways run as berth-sshgw and berth-desktop and reach STATE/hostd.sock through here.
chmod 711 "$T"
# Who made it: tests/sweep.sh removes what a killed test left behind.
echo $$ >"$T/.owner"
STATE=$T/state
HOSTD_PID=
n=0
nfail=0
VIRSH="virsh -q -c qemu:///system"

ok() { n=$((n + 1)); echo "ok $n - $*"; }
not_ok() { n=$((n + 1)); nfail=$((nfail + 1)); echo "not ok $n - $*"; }
skip() { n=$((n + 1)); echo "ok $n # SKIP $*"; }
diag() { echo "# $*"; }

# check DESC CMD...: passes when CMD exits 0.
check() {
	local desc=$1
	shift
	if "$@"; then ok "$desc"; else not_ok "$desc"; diag "command failed: $*"; fi
}
# check_eq DESC EXPECTED ACTUAL
check_eq() {
	if [ "$2" = "$3" ]; then ok "$1"; else not_ok "$1"; diag "expected '$2', got '$3'"; fi
}
# check_match DESC REGEX ACTUAL
check_match() {
	if [[ $3 =~ $2 ]]; then ok "$1"; else not_ok "$1"; diag "'$3' does not match /$2/"; fi
}

# Checks of an absence (each returns 0 when it passed, 1 when not, so that
# details can follow a failure).  Each needs a positive control, or it passes
# when the thing that should look did not look: `check_eq DESC ""
# "$(cmd)"` passes when cmd fails, and `[ ! -e DIR/f ]` when DIR is not
# there.  (git's t/test-lib-functions.sh: test_path_is_missing,
# test_must_be_empty.)
#
# check_absent DESC CMD...: passes when CMD exits 0 and prints nothing on
# stdout.  Fails when CMD exits non-zero (it could not look: a missing
# directory for ls or find, a failed berth exec) or prints anything (shown
# in the diagnostics).  CMD's stderr is left alone.  A CMD that filters
# (grep) must exit 0 when nothing matches: see `matching`.
check_absent() {
	local desc=$1 out rc
	shift
	out=$("$@")
	rc=$?
	if [ "$rc" -ne 0 ]; then
		not_ok "$desc"
		diag "could not look: exit $rc from: $*"
	elif [ -n "$out" ]; then
		not_ok "$desc"
		diag "expected nothing from: $*; got:"
		printf '%s\n' "$out" | head -20 | sed 's/^/#   /'
	else
		ok "$desc"
		return 0
	fi
	return 1
}
# check_no_line DESC LINE CMD...: passes when CMD exits 0 and no line of
# its stdout is LINE (the whole line, as a fixed string).  Fails when LINE
# is empty (what to look for was never found out), when CMD exits non-zero,
# or when the line is there.
check_no_line() {
	local desc=$1 line=$2 out rc
	shift 2
	if [ -z "$line" ]; then
		not_ok "$desc"
		diag "nothing to look for (an empty name) in: $*"
		return 1
	fi
	out=$("$@")
	rc=$?
	if [ "$rc" -ne 0 ]; then
		not_ok "$desc"
		diag "could not look: exit $rc from: $*"
	elif printf '%s\n' "$out" | grep -qxF -- "$line"; then
		not_ok "$desc"
		diag "'$line' is still listed by: $*"
	else
		ok "$desc"
		return 0
	fi
	return 1
}
# check_missing DESC PATH...: passes when no PATH exists (not even as a
# dangling symbolic link) while the directory each would be in does.
# Fails when a PATH is empty, exists, or its parent directory is missing
# (then the test looks in the wrong place).
check_missing() {
	local desc=$1 p why=()
	shift
	[ $# -gt 0 ] || why+=("check_missing: no path given")
	for p in "$@"; do
		if [ -z "$p" ]; then
			why+=("an empty path (what to look for was never found out)")
		elif [ ! -d "$(dirname -- "$p")" ]; then
			why+=("$(dirname -- "$p") is not a directory: cannot tell whether $p is gone")
		elif [ -e "$p" ] || [ -L "$p" ]; then
			why+=("$p exists")
		fi
	done
	if [ ${#why[@]} -eq 0 ]; then
		ok "$desc"
		return 0
	fi
	not_ok "$desc"
	for p in "${why[@]}"; do diag "$p"; done
	return 1
}
# check_gone DESC PID: passes when process PID has ended (no such process,
# or a zombie not yet reaped).  Fails when PID is not a number (the pid was
# never found out) or the process lives.
check_gone() {
	local st
	if [[ ! $2 =~ ^[1-9][0-9]*$ ]]; then
		not_ok "$1"
		diag "no process id to look for: '$2'"
		return 1
	fi
	st=$(awk '{ print $3 }' "/proc/$2/stat" 2>/dev/null)
	if [ -z "$st" ] || [ "$st" = Z ]; then
		ok "$1"
		return 0
	fi
	not_ok "$1"
	diag "process $2 ($(cat "/proc/$2/comm" 2>/dev/null)) is still there, state $st"
	return 1
}
# matching ERE CMD...: the lines of CMD's stdout that match the extended
# regular expression ERE.  Exits 0 whether or not a line matched (unlike
# grep), and non-zero when CMD failed: for check_absent, e.g.
#   check_absent "no sanitizer report" matching 'ERROR: .*Sanitizer' cat "$log"
matching() {
	local re=$1 out rc
	shift
	out=$("$@")
	rc=$?
	[ "$rc" -eq 0 ] || return "$rc"
	printf '%s\n' "$out" | grep -E -- "$re"
	rc=$?
	[ "$rc" -le 1 ] || return "$rc" # a bad expression
	return 0
}

berth() { "$BIN/berth" --state "$STATE" "$@"; }
# jq-less JSON field access: json FIELD.PATH < JSON
json() {
	python3 -c 'import json,sys
v=json.load(sys.stdin)
for k in sys.argv[1].split("."):
    v = v[int(k)] if isinstance(v, list) else v.get(k) if isinstance(v, dict) else None
print("" if v is None else (json.dumps(v) if isinstance(v,(dict,list,bool)) else v))' "$1"
}

start_hostd() {
	mkdir -p "$STATE"
	grep -qs '^guest_network' "$STATE/berth.conf" ||
		echo "guest_network = $GUEST_NET" >>"$STATE/berth.conf"
	env "$@" "$BIN/berth-hostd" --state "$STATE" >> "$T/hostd.log" 2>&1 &
	HOSTD_PID=$!
	for _ in $(seq 200); do
		berth info >/dev/null 2>&1 && return 0
		kill -0 "$HOSTD_PID" 2>/dev/null || break
		sleep 0.1
	done
	diag "berth-hostd did not come up; log:"
	sed 's/^/# /' "$T/hostd.log" | tail -20
	return 1
}
kill_hostd() {
	[ -n "$HOSTD_PID" ] || return 0
	kill "-${1:-TERM}" "$HOSTD_PID" 2>/dev/null
	# A hostd that does not stop on TERM within 60 s is a failure, not a
	# hang until tests/run's timeout: its threads' stacks go to the log
	# (gdb), and it is killed.
	if [ "${1:-TERM}" != KILL ]; then
		local i
		for i in $(seq 600); do
			kill -0 "$HOSTD_PID" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$HOSTD_PID" 2>/dev/null; then
			not_ok "berth-hostd stops within 60 s of ${1:-TERM}"
			gdb -batch -p "$HOSTD_PID" -ex 'thread apply all bt' >"$T/hostd-stop.bt" 2>&1
			grep -E '^(Thread|#)' "$T/hostd-stop.bt" | head -150 | sed 's/^/# /'
			kill -KILL "$HOSTD_PID" 2>/dev/null
		fi
	fi
	wait "$HOSTD_PID" 2>/dev/null
	HOSTD_PID=
}

# tls_ca DOMAIN: a CA of the test's own ($T/tls/ca.pem) and a certificate
# for DOMAIN and *.DOMAIN it signed ($T/tls/cert.pem, key.pem), for one
# day.  Fails (openssl's last lines as diagnostics) when openssl does.
tls_ca() {
	mkdir -p "$T/tls"
	(
		cd "$T/tls" &&
		openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
			-subj "/CN=$(basename "$0" .sh) test CA" -addext basicConstraints=critical,CA:TRUE \
			-addext keyUsage=critical,keyCertSign -keyout ca.key -out ca.pem &&
		openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$1" \
			-keyout key.pem -out req.csr &&
		printf 'subjectAltName=DNS:%s,DNS:*.%s\nextendedKeyUsage=serverAuth\n' "$1" "$1" \
			>ext.cnf &&
		openssl x509 -req -in req.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 \
			-extfile ext.cnf -out cert.pem
	) >"$T/openssl.log" 2>&1 || { diag "$(tail -5 "$T/openssl.log")"; return 1; }
	chmod 600 "$T/tls/key.pem" "$T/tls/ca.key"
}

# free_port: a TCP port on 127.0.0.1 that nothing listens on now.
free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# free_ports N: the first of N consecutive ports that TCP and UDP, IPv4
# and IPv6, on every address, are all free on now (a canary on P+1 bound
# by something else would make every check of it vacuous).
free_ports() {
	python3 -c 'import socket, sys
n = int(sys.argv[1])
for _ in range(200):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close()
    if p + n > 65535:
        continue
    try:
        held = []
        for q in range(p, p + n):
            for fam, addr in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
                for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
                    x = socket.socket(fam, kind)
                    if fam == socket.AF_INET6:
                        x.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                    held.append(x)
                    x.bind((addr, q))
    except OSError:
        continue
    finally:
        for x in held:
            x.close()
    print(p)
    sys.exit(0)
sys.exit("free_ports: no " + str(n) + " free ports in a row")' "$1"
}

# gateway_up NAME: a user key $T/id (added with berth key add), berth-sshgw
# for $STATE on 127.0.0.1:$GWPORT (a free port, its log $T/sshgw.log,
# GW_PID its pid: cleanup ends it), and SSH, the OpenSSH
# command line that reaches it with that key.  Fails when the key is
# refused or the gateway does not say it listens within 10 s.
GW_PID=
gateway_up() {
	ssh-keygen -q -t ed25519 -N '' -f "$T/id" -C "$1" || return 1
	berth key add "$T/id.pub" >/dev/null || return 1
	GWPORT=$(free_port)
	"$BIN/berth-sshgw" --state "$STATE" --listen "127.0.0.1:$GWPORT" --log-level info \
		>>"$T/sshgw.log" 2>&1 &
	GW_PID=$!
	SSH=(ssh -i "$T/id" -p "$GWPORT" -o IdentitiesOnly=yes -o StrictHostKeyChecking=no
	     -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o ConnectTimeout=60
	     -o LogLevel=ERROR)
	for _ in $(seq 100); do
		grep -q "listening on 127.0.0.1:$GWPORT" "$T/sshgw.log" 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}

# A test "internet" (t8xx): network namespace $INET_NS, reached from the
# host through a veth ($INET_HERE on the host's side, $INET_THERE on its
# own), with each ADDR of `inet_up ADDR...` on its loopback and a /32 route
# to it from the host; nothing else is routed there, and no test traffic
# leaves this machine.  Tests that may run side by side take addresses of
# their own (the host has one route per address): set INET_HERE and
# INET_THERE before inet_up.  inet_down removes the namespace, its
# processes and the veth (cleanup calls it).
INET=198.51.100
INET_HERE=$INET.1
INET_THERE=$INET.2
INET_NS=bn$$
INET_VH=vh$$
inet_up() {
	local a vn=vn$$
	ip netns add "$INET_NS" || return 1
	ip link add "$INET_VH" type veth peer name "$vn" netns "$INET_NS" || return 1
	ip addr add "$INET_HERE" peer "$INET_THERE/32" dev "$INET_VH" || return 1
	ip link set "$INET_VH" up
	ip -n "$INET_NS" addr add "$INET_THERE" peer "$INET_HERE/32" dev "$vn"
	ip -n "$INET_NS" link set "$vn" up
	ip -n "$INET_NS" link set lo up
	for a in "$@"; do
		ip -n "$INET_NS" addr add "$a/32" dev lo
		ip route add "$a/32" via "$INET_THERE" dev "$INET_VH" || return 1
	done
	ip -n "$INET_NS" route add default via "$INET_HERE" dev "$vn"
}
inet_down() {
	ip netns pids "$INET_NS" 2>/dev/null | xargs -r kill 2>/dev/null
	ip link delete "$INET_VH" 2>/dev/null
	ip netns delete "$INET_NS" 2>/dev/null
	return 0
}
# The host's IPv4 addresses a guest must not reach, one a line: all but
# loopback's, those on taps (a test names its instance's gateway itself)
# and on other tests' veths (tests run side by side, and an address that
# goes while a test probes it would be routed elsewhere).
host_addresses() {
	ip -4 -o addr show | awk '$2 !~ /^(lo|bt|vh)/ { split($4, a, "/"); print a[1] }'
}
# host_tcp IP PORT: "open" when the host connects there within 2 s, else
# "closed" (the positive control of a guest's probe).
host_tcp() { python3 -c 'import socket,sys
s=socket.socket(); s.settimeout(2)
try: s.connect((sys.argv[1], int(sys.argv[2]))); print("open")
except Exception as e: print("closed")' "$@"; }

# Domains whose disks live under this test's directory; fails (and lists
# nothing) when libvirt cannot be asked.
test_domains() {
	local names d
	names=$($VIRSH list --all --name) || { echo "test_domains: virsh list failed" >&2; return 1; }
	for d in $names; do
		case $d in berth-*) ;; *) continue ;; esac
		$VIRSH dumpxml "$d" 2>/dev/null | grep -q "$T/" && echo "$d"
	done
	return 0
}
# The names of the caller's machines, one a line; fails when berth ls does.
machine_names() {
	local j
	j=$(berth ls --json) || return 1
	printf '%s' "$j" | python3 -c 'import json,sys
for m in json.load(sys.stdin)["machines"]: print(m["name"])'
}
dom_of() { berth show "$1" --json | json domain; }
dom_state() { $VIRSH domstate "$1" 2>/dev/null | head -1; }

# key_body KEY [USER]: the body of POST /v1/keys for KEY.pub, proved as
# berth key add does: a challenge hostd gives root (acting for USER),
# signed with KEY (SIGNER: another private key file; NS: another
# namespace).
key_body() {
	local key=$1 hdr=()
	[ $# -ge 2 ] && hdr=(-H "X-Berth-User: $2")
	curl -s --unix-socket "$STATE/hostd.sock" "${hdr[@]}" -H 'Content-Type: application/json' \
		--data-binary "{\"key\":\"$(awk '{print $1 " " $2}' "$key.pub")\"}" \
		http://berth/v1/keys/challenge | json challenge | tr -d '\n' > "$T/chal"
	rm -f "$T/chal.sig"
	ssh-keygen -Y sign -n "${NS:-berth-key-add@berth}" -f "${SIGNER:-$key}" "$T/chal" 2>/dev/null
	python3 -c 'import json,sys
sig = open(sys.argv[3]).read() if len(sys.argv) > 3 else "x"
print(json.dumps({"key": open(sys.argv[1]).read().strip(),
                  "challenge": open(sys.argv[2]).read(), "signature": sig}))' \
		"$key.pub" "$T/chal" $([ -s "$T/chal.sig" ] && echo "$T/chal.sig")
}

# test_user NAME: a local user of the test's own (no home, no login
# shell), which cleanup removes with its processes.
TEST_USERS=()
test_user() {
	useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin \
		--user-group "$1" || return 1
	TEST_USERS+=("$1")
	echo "$1" >>"$T/.users"
}

# as_user USER CMD...: CMD as USER (its group, no others).
as_user() {
	local u=$1
	shift
	setpriv --reuid="$u" --regid="$(id -g "$u")" --clear-groups "$@"
}

# agent_up: an ssh-agent of the test's own (SSH_AUTH_SOCK in $T), which
# cleanup ends.
agent_up() {
	local out
	out=$(ssh-agent -s -a "$T/agent.sock") || return 1
	SSH_AGENT_PID=$(printf '%s\n' "$out" | sed -n 's/^SSH_AGENT_PID=\([0-9]*\);.*/\1/p')
	export SSH_AUTH_SOCK=$T/agent.sock SSH_AGENT_PID
	PIDS+=("$SSH_AGENT_PID")
}

# Processes a script started in the background go in PIDS: cleanup ends
# them first, and removes the test internet (inet_up) last.
PIDS=()
cleanup() {
	local d p doms
	for p in "${PIDS[@]}" $WEB_PID $GW_PID; do kill "$p" 2>/dev/null; done
	for p in "${TEST_USERS[@]}"; do
		pkill -KILL -u "$p" 2>/dev/null
		userdel "$p" 2>/dev/null
		getent group "$p" >/dev/null && groupdel "$p" 2>/dev/null
	done
	kill_hostd KILL
	# Gateways `berth up` started (a test's own gateways are its to stop).
	p=$(cat "$STATE/sshgw.pid" 2>/dev/null)
	[ -n "$p" ] && [ "$(cat "/proc/$p/comm" 2>/dev/null)" = berth-sshgw ] && kill -KILL "$p"
	p=$(cat "$STATE/desktop.pid" 2>/dev/null)
	[ -n "$p" ] && [ "$(cat "/proc/$p/comm" 2>/dev/null)" = berth-desktop ] && kill -KILL "$p"
	p=$(cat "$STATE/web.pid" 2>/dev/null)
	[ -n "$p" ] && [ "$(cat "/proc/$p/comm" 2>/dev/null)" = berth-web ] && kill -KILL "$p"
	# libvirtd may be away for a moment (t260 restarts it, and other
	# suites share it): wait for it rather than leave domains behind.
	for _ in $(seq 30); do
		$VIRSH version >/dev/null 2>&1 && break
		sleep 1
	done
	doms=$(test_domains) || diag "cleanup: libvirt does not answer; domains of $T may be left"
	for d in $doms; do
		$VIRSH destroy "$d" >/dev/null 2>&1
		$VIRSH undefine --managed-save --nvram "$d" >/dev/null 2>&1 ||
			$VIRSH undefine --managed-save "$d" >/dev/null 2>&1
	done
	net_cleanup
	inet_down
	# A kept directory was cleaned up: nothing in it for tests/sweep.sh.
	if [ "${KEEP:-}" = 1 ]; then rm -f "$T/.owner"; diag "kept $T"; else rm -rf "$T"; fi
}

# The instance of this test's state directory ("" before hostd made it).
instance_id() {
	python3 -c 'import sqlite3, sys
try:
    r = sqlite3.connect(sys.argv[1]).execute("SELECT value FROM meta WHERE key = ?", ("instance",)).fetchone()
    print(r[0] if r else "")
except Exception:
    print("")' "$STATE/berth.db" 2>/dev/null
}
# What network = routed made for this test's hostd and a killed hostd
# leaves: its dnsmasq, its nftables table, its taps.
net_cleanup() {
	local inst l
	inst=$(instance_id)
	[ -n "$inst" ] || return 0
	pkill -f -- "--conf-file=$STATE/net/dnsmasq.conf" 2>/dev/null
	nft delete table inet "berth-$inst" 2>/dev/null
	for l in $(ip -o link show 2>/dev/null | awk -F': ' '{ print $2 }' | cut -d@ -f1); do
		case $l in "bt${inst:0:4}-"*) ip link delete "$l" 2>/dev/null ;; esac
	done
	return 0
}
# A guest network of its own for this test's hostd (tests run side by
# side): a /24 in 10.224.0.0/11 that no route of the host's covers.
pick_guest_net() {
	local a b
	for _ in $(seq 50); do
		a=$((224 + RANDOM % 32)) b=$((RANDOM % 256))
		ip route show | grep -q "^10\.$a\.$b\." && continue
		echo "10.$a.$b.0/24"
		return 0
	done
	echo "10.231.$((RANDOM % 256)).0/24"
}
GUEST_NET=$(pick_guest_net)
trap cleanup EXIT

# finish: end of a test script; exit status tells the runner.
finish() {
	# hostd exits cleanly so a sanitizer build reports leaks, then its
	# logs must hold no sanitizer report.
	kill_hostd TERM
	local reports
	web_down
	reports=$(grep -h -E 'ERROR: (Address|Leak)Sanitizer|runtime error:' \
		"$T/hostd.log" "$STATE/hostd.log" "$T/web.log" 2>/dev/null | head -5)
	if [ -n "$reports" ]; then
		not_ok "no sanitizer reports in hostd's and berth-web's logs"
		echo "$reports" | sed 's/^/# /'
	fi
	if [ "$nfail" -gt 0 ]; then
		diag "hostd log tail:"
		tail -30 "$T/hostd.log" | sed 's/^/# /'
	fi
	echo "1..$n"
	[ "$nfail" -eq 0 ]
	exit $?
}

# web_up [OPTION...]: berth-web for $STATE, started as root (it asks hostd
# for http_listen and the TLS files, then runs as berth-web), its log
# $T/web.log, WEB_PID its pid (cleanup ends it; not in PIDS, which
# scripts wait for).  Waits up to 10 s until
# it says it listens; fails (the log's tail as diagnostics) when not.
WEB_PID=
web_up() {
	local from
	from=$(cat "$T/web.log" 2>/dev/null | wc -l)
	"$BIN/berth-web" --state "$STATE" --log-level info "$@" >>"$T/web.log" 2>&1 &
	WEB_PID=$!
	for _ in $(seq 100); do
		tail -n "+$((from + 1))" "$T/web.log" | grep -q 'listening on' && return 0
		kill -0 "$WEB_PID" 2>/dev/null || break
		sleep 0.1
	done
	diag "berth-web did not come up; log:"
	tail -n "+$((from + 1))" "$T/web.log" | tail -20 | sed 's/^/# /'
	return 1
}
# web_down: stop web_up's berth-web (SIGTERM: it exits cleanly).
web_down() {
	[ -n "$WEB_PID" ] || return 0
	kill "$WEB_PID" 2>/dev/null
	wait "$WEB_PID" 2>/dev/null
	WEB_PID=
}

# bridge_start PORT [OPTION...]: berth-desktop for $STATE on
# 127.0.0.1:PORT as berth-desktop (its log $T/desktop.log), BR_PID its
# pid; waits up to 5 s until it says it listens (the caller checks that).
bridge_start() {
	local port=$1
	shift
	"$BIN/berth-desktop" --state "$STATE" --listen "127.0.0.1:$port" --user berth-desktop \
		"$@" >>"$T/desktop.log" 2>&1 &
	BR_PID=$!
	for _ in $(seq 50); do
		grep -q "listening on 127.0.0.1:$port" "$T/desktop.log" && break
		sleep 0.1
	done
}

# bridge_end PID: stop a test's berth-desktop (its log $T/desktop.log),
# failing on a sanitizer report in that log, and show the log's tail when
# a check failed.
bridge_end() {
	local reports
	kill "$1" 2>/dev/null
	wait "$1" 2>/dev/null
	reports=$(grep -h -E 'ERROR: AddressSanitizer|runtime error:' "$T/desktop.log" | head -5)
	if [ -n "$reports" ]; then
		not_ok "no sanitizer reports in the bridge's log"
		echo "$reports" | sed 's/^/# /'
	fi
	if [ "$nfail" -gt 0 ]; then
		diag "berth-desktop log tail:"
		[ -e "$T/desktop.log" ] || diag "(none)"
		tail -30 "$T/desktop.log" | sed 's/^/# /'
	fi
}

# Every test that boots needs the tiny image in its state directory.
build_tiny() {
	berth image build tiny >/dev/null 2>"$T/build.err" || { cat "$T/build.err"; return 1; }
}
