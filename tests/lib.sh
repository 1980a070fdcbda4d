# Sourced by tests/integration/t*.sh: a private state directory, a real
# berth-hostd on it, TAP helpers, and a cleanup that removes every domain,
# volume, file and process the test made, also when it fails.
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${BERTH_BIN:-$ROOT/bin}
# Short path: the hostd socket must fit a UNIX socket address.
T=$(mktemp -d /tmp/berth-t.XXXXXX)
# The gateways run as berth-gw and reach STATE/hostd.sock through here.
chmod 711 "$T"
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
	wait "$HOSTD_PID" 2>/dev/null
	HOSTD_PID=
}

# Domains whose disks live under this test's directory.
test_domains() {
	local d
	for d in $($VIRSH list --all --name 2>/dev/null); do
		case $d in berth-*) ;; *) continue ;; esac
		$VIRSH dumpxml "$d" 2>/dev/null | grep -q "$T/" && echo "$d"
	done
}
dom_of() { berth show "$1" --json | json domain; }
dom_state() { $VIRSH domstate "$1" 2>/dev/null | head -1; }

cleanup() {
	local d p
	kill_hostd KILL
	# Gateways `berth up` started (a test's own gateways are its to stop).
	p=$(cat "$STATE/sshgw.pid" 2>/dev/null)
	[ -n "$p" ] && [ "$(cat "/proc/$p/comm" 2>/dev/null)" = berth-sshgw ] && kill -KILL "$p"
	p=$(cat "$STATE/desktop.pid" 2>/dev/null)
	[ -n "$p" ] && [ "$(cat "/proc/$p/comm" 2>/dev/null)" = berth-desktop ] && kill -KILL "$p"
	for d in $(test_domains); do
		$VIRSH destroy "$d" >/dev/null 2>&1
		$VIRSH undefine --managed-save --nvram "$d" >/dev/null 2>&1 ||
			$VIRSH undefine --managed-save "$d" >/dev/null 2>&1
	done
	net_cleanup
	if [ "${KEEP:-}" = 1 ]; then diag "kept $T"; else rm -rf "$T"; fi
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
	reports=$(grep -h -E 'ERROR: (Address|Leak)Sanitizer|runtime error:' \
		"$T/hostd.log" "$STATE/hostd.log" 2>/dev/null | head -5)
	if [ -n "$reports" ]; then
		not_ok "no sanitizer reports in hostd's log"
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

# Every test that boots needs the tiny image in its state directory.
build_tiny() {
	berth image build tiny >/dev/null 2>"$T/build.err" || { cat "$T/build.err"; return 1; }
}
