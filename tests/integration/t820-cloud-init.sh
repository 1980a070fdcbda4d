#!/bin/bash
# berth's seed against the real cloud-init: a Debian 12 cloud image made
# the way a provider makes one (images/recipes/debian-cloud.sh: Debian's
# packages, cloud-init, GRUB in the MBR, no berth code inside), booted by
# firmware.  The machine comes up as the seed says: the user debian with
# the keys and passwordless sudo (no "unable to resolve host" from sudo,
# even without DNS: /etc/hosts names the machine), its hostname, its
# address by DHCP on the first NIC, the root grown to the disk, the seed's
# SSH host key (pinned by hostd, confirmed, and what the guest presents),
# reached through the SSH gateway; a fork (a cold boot of a copy of its
# disk, a new instance for cloud-init) has a host key of its own,
# confirmed too.  Without manage_etc_hosts in the seed checks 9, 10, 27
# and 28 fail (measured).
#
# The image is built through hostd with the shared cache (hostd's
# cache_dir, /var/cache/berth by default): the .debs (215 of them, 100 MB)
# are downloaded once per machine, into debian-cloud/debs there.  Measured
# on 2 cores (2026-12-02), always with another suite running on the
# machine: the recipe with an empty cache 71 s (debootstrap 23 s, apt-get
# 37 s, mke2fs 4 s, zstd 7 s; the downloads took seconds on this network);
# `berth image build` with the cache 84-86 s, 109 s at a load average of 3;
# the machine answers SSH 53-70 s after its create (TCG), the fork 52-111 s
# after its start (beside web's checks); the whole test 210 s, 261 s at a
# load average of 3 (TESTS=t820-cloud-init tests/run).  Most of the build
# is dpkg, not downloads: the cache saves the network, not the unpacking.
. "$(dirname "$0")/../lib.sh"

missing=
for tool in debootstrap mke2fs sfdisk zstd unshare chroot ssh ssh-keygen ssh-keyscan; do
	command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
done
python3 -c 'import yaml' 2>/dev/null || missing="$missing python3-yaml"
[ -z "$missing" ] || { skip "not installed:$missing (deploy/install-deps.sh)"; finish; }
[ "$(id -u)" = 0 ] || { skip "the debian-cloud recipe and SSH to a guest's port 22 need root"; finish; }
unset SSH_AUTH_SOCK SSH_AGENT_PID

GW_PID='' FORK_PID=''
t820_cleanup() {
	[ -n "$GW_PID" ] && kill "$GW_PID" 2>/dev/null && wait "$GW_PID" 2>/dev/null
	[ -n "$FORK_PID" ] && kill "$FORK_PID" 2>/dev/null && wait "$FORK_PID" 2>/dev/null
	cleanup
}
trap t820_cleanup EXIT

# A Debian boot with cloud-init under TCG on a loaded machine.
mkdir -p "$STATE"
echo "boot_timeout = 600" >"$STATE/berth.conf"
start_hostd || { not_ok "hostd starts"; finish; }

t0=$(date +%s)
if berth image build debian-cloud >"$T/build.out" 2>"$T/build.err"; then
	ok "berth image build debian-cloud"
else
	not_ok "berth image build debian-cloud"
	sed 's/^/# /' "$T/build.err" | tail -20
	finish
fi
diag "image built in $(($(date +%s) - t0)) s"
grep -h '^debian-cloud: \[' /var/cache/berth/debian-cloud/build.log 2>/dev/null | sed 's/^/# /'
read -r boot user <<<"$(berth image ls --json | python3 -c 'import json, sys
for i in json.load(sys.stdin)["images"]:
    if i["name"] == "debian-cloud":
        print(i.get("boot"), i.get("user"))')"
check_eq "the image boots by firmware" firmware "$boot"
check_eq "its user is debian" debian "$user"

# The key the seed of machine $1 gives it ("ssh-ed25519 BASE64").
seed_key() {
	python3 -c 'import sys, yaml
print(" ".join(yaml.safe_load(open(sys.argv[1]))["ssh_keys"]["ed25519_public"].split()[:2]))' \
		"$STATE/machines/$(berth show "$1" --json | json id)/user-data"
}
# What machine $1 presents on its SSH endpoint, "TYPE BASE64".
scanned_key() {
	local host
	host=$(berth show "$1" --json | json ssh.host)
	ssh-keyscan -T 20 -t ed25519 "$host" 2>/dev/null | awk '{ print $2 " " $3 }'
}
pinned() { berth show "$1" --json | json host_key | awk '{ print $1 " " $2 }'; }
# ex NAME CMD...: runs CMD in NAME, its stdout on stdout, stderr in $T/ex.err.
ex() {
	local m=$1
	shift
	timeout -k 5 300 "$BIN/berth" --state "$STATE" exec "$m" -- "$@" 2>"$T/ex.err"
}

# A disk larger than the image's 2 GiB: cloud-init grows the root to it.
t0=$(date +%s)
out=$(berth create web --image debian-cloud --disk 3G --json 2>"$T/create.err")
state=$(echo "$out" | json state)
check_eq "create web from debian-cloud: running" running "$state"
diag "boot to SSH under $(berth info --json | json hypervisor): $(($(date +%s) - t0)) s"
if [ "$state" != running ]; then
	sed 's/^/# /' "$T/create.err"
	tail -40 "$STATE"/machines/*/console.log 2>/dev/null | sed 's/^/# /'
	finish
fi

# The fork boots meanwhile: a copy of web's disk as it is now, started
# cold with a seed of its own (a new instance-id for cloud-init).
t_fork=$(date +%s)
berth fork web web2 --json >"$T/fork.out" 2>"$T/fork.err" &
FORK_PID=$!

check_eq "berth exec runs as debian" debian "$(ex web id -un)"
check_eq "the hostname is the machine's" web "$(ex web hostname)"
# hostd's own exec (POST .../exec, hostd/exec.c) against OpenSSH's sshd,
# logged in as debian: another user through sudo -n, and a signal.
xc() { python3 "$ROOT/tests/exec_client.py" --sock "$STATE/hostd.sock" "$@"; }
check_match "exec through hostd as user root: sudo -n -u root" '"stdout": "root\\n".*"exit": 0' \
	"$(xc stream /v1/machines/web/exec '{"argv": ["id", "-un"], "user": "root"}' | tr '\n' ' ')"
check_match "  a signal reaches the command through OpenSSH" '\{"exit": 143, "signal": "TERM"\}$' \
	"$(xc stream-then /v1/machines/web/exec '{"argv": ["sleep", "100"]}' sleep:1 signal:TERM | tail -n 1)"
out=$(ex web sudo -n true)
rc=$?
check_eq "sudo -n true works" 0 "$rc"
check_eq "and says nothing on stderr" "" "$(cat "$T/ex.err")"
# Under network = routed the host's dnsmasq names the machine in DNS (its
# DHCP hostname), so sudo resolves it without /etc/hosts; under network =
# user, or with another resolver, nothing does.  Without a DNS server
# (resolv.conf emptied, then dhclient's put back) sudo says "unable to
# resolve host web" unless /etc/hosts names it (manage_etc_hosts).
ex web sh -c 'sudo -n cp /etc/resolv.conf /run/t820-resolv.conf &&
	sudo -n sh -c ": >/etc/resolv.conf" && sudo -n true; rc=$?
	sudo -n cp /run/t820-resolv.conf /etc/resolv.conf; exit $rc' >/dev/null
check_eq "sudo without DNS: 0 and no 'unable to resolve host'" "0|" "$?|$(cat "$T/ex.err")"
check_match "/etc/hosts names the machine" $'(^|\n)127\.0\.1\.1[[:space:]].*[[:space:]]web($|\n)' \
	"$(ex web cat /etc/hosts)"
check_eq "the pinned key is confirmed" confirmed "$(berth show web --json | json host_key_state)"
k_seed=$(seed_key web)
check_match "the seed holds an ed25519 key" '^ssh-ed25519 AAAA' "$k_seed"
check_eq "the pinned key is the seed's" "$k_seed" "$(pinned web)"
check_eq "and the one the machine presents" "$k_seed" "$(scanned_key web)"
host=$(berth show web --json | json ssh.host)
check_match "its address (by DHCP on the first NIC) is the endpoint's" "inet $host/" \
	"$(ex web ip -4 -o addr show scope global)"
check_match "cloud-init's datasource is NoCloud" '^nocloud$' "$(ex web cloud-init query v1.platform)"
check_match "the root grew to the 3 GiB disk" '^(2\.[6-9]|3\.0)G?$' \
	"$(ex web df -h --output=size / | tail -n 1 | tr -d ' ')"
out=$(ex web cloud-init status --wait --long)
check_match "cloud-init finished without errors" $'status: done' "$out"
echo "$out" | sed 's/^/# /'
diag "$(ex web sh -c 'grep -c WARNING /var/log/cloud-init.log') warnings in cloud-init.log"
ex web sh -c 'grep WARNING /var/log/cloud-init.log' 2>/dev/null | head -5 | sed 's/^/# /'

# The gateway, with a user key.
gateway_up t820 || not_ok "the gateway starts"
check_eq "through the gateway: ssh web@host hostname" web \
	"$("${SSH[@]}" web@127.0.0.1 hostname 2>"$T/gw.err")"
check_eq "as debian" debian "$("${SSH[@]}" web@127.0.0.1 id -un 2>>"$T/gw.err")"
[ -s "$T/gw.err" ] && sed 's/^/# /' "$T/gw.err" "$T/sshgw.log" | tail -10

wait "$FORK_PID"
rc=$?
FORK_PID=
check_eq "fork web web2: running" "0 running" "$rc $(json state <"$T/fork.out" 2>/dev/null)"
diag "the fork's boot to SSH: $(($(date +%s) - t_fork)) s (beside web's checks)"
if [ "$rc" = 0 ]; then
	check_eq "the fork's hostname is its own" web2 "$(ex web2 hostname)"
	check_eq "the fork's key is confirmed" confirmed "$(berth show web2 --json | json host_key_state)"
	k_f=$(pinned web2)
	check "the fork has a key of its own" test -n "$k_f" -a "$k_f" != "$k_seed"
	check_eq "its seed's" "$(seed_key web2)" "$k_f"
	check_eq "and presents it" "$k_f" "$(scanned_key web2)"
	check_match "/etc/hosts names the fork" $'(^|\n)127\.0\.1\.1[[:space:]].*[[:space:]]web2($|\n)' \
		"$(ex web2 cat /etc/hosts)"
	ex web2 sh -c 'sudo -n cp /etc/resolv.conf /run/t820-resolv.conf &&
		sudo -n sh -c ": >/etc/resolv.conf" && sudo -n true; rc=$?
		sudo -n cp /run/t820-resolv.conf /etc/resolv.conf; exit $rc' >/dev/null
	check_eq "sudo in the fork without DNS, quietly" "0|" "$?|$(cat "$T/ex.err")"
	check_eq "through the gateway: ssh web2@host hostname" web2 \
		"$("${SSH[@]}" web2@127.0.0.1 hostname 2>/dev/null)"
	check_eq "the source still presents its key" "$k_seed" "$(scanned_key web)"
else
	sed 's/^/# /' "$T/fork.err"
fi

kill "$GW_PID" 2>/dev/null
wait "$GW_PID" 2>/dev/null
GW_PID=
berth rm web2 >/dev/null 2>&1
check_eq "rm web" "deleted web" "$(berth rm web)"
berth image rm debian-cloud >/dev/null
check_eq "image rm debian-cloud" 0 "$?"
finish
