#!/bin/bash
# The agents image (images/recipes/agents.sh, issue 5): `berth image build
# agents` through hostd, into this test's state but with the shared cache
# (hostd's cache_dir, /var/cache/berth by default: the .debs and npm's
# cache), so only the first run on a machine downloads everything.  A
# machine from it boots under TCG, and `berth exec` runs as agent: claude,
# codex, opencode and docker --version, sudo -n true, id -un, hostname,
# git/python3/gcc/node.
#
# Slow: the build takes about 3 minutes on 2 cores, cold or warm (dpkg,
# mke2fs and zstd; an empty cache adds ~1 GB of downloads, which took
# seconds here), the boot to SSH under TCG 20-30 s, the whole test about
# 4-5 minutes.  TESTS=t520-agents-image tests/run runs it alone.
#
# claude and opencode are native executables built for x86-64-v2 (SSE4.2,
# POPCNT): on a domain without a <cpu> model (QEMU's qemu64) they die with
# SIGILL, and their checks fail saying so.
. "$(dirname "$0")/../lib.sh"

missing=
for tool in debootstrap mke2fs zstd unshare chroot; do
	command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
done
[ -z "$missing" ] || { skip "not installed:$missing (deploy/install-deps.sh)"; finish; }
[ "$(id -u)" = 0 ] || { skip "the agents recipe runs as root"; finish; }

# A Debian boot under TCG, then hostd's wait for the SSH banner.
mkdir -p "$STATE"
echo "boot_timeout = 600" >"$STATE/berth.conf"
start_hostd || { not_ok "hostd starts"; finish; }
ok "hostd starts"

t0=$(date +%s)
if berth image build agents >"$T/build.out" 2>"$T/build.err"; then
	ok "berth image build agents"
else
	not_ok "berth image build agents"
	sed 's/^/# /' "$T/build.err" | tail -20
	grep -h 'agents:' "$T/hostd.log" "$STATE/hostd.log" 2>/dev/null | tail -5 | sed 's/^/# /'
	finish
fi
diag "image built in $(($(date +%s) - t0)) s"
# The recipe's steps and their times (hostd's default cache_dir).
grep -h '^agents: \[' /var/cache/berth/agents/agents-build.log 2>/dev/null | sed 's/^/# /'
img=$(berth image ls --json | python3 -c 'import json,sys
for i in json.load(sys.stdin)["images"]:
    if i["name"] == "agents":
        print(i.get("user"), i.get("size"), i.get("allocated"), i.get("source_size"))')
read -r user size alloc src <<<"$img"
check_eq "the image's user is agent" agent "$user"
diag "image: $size bytes virtual, $alloc allocated, $src compressed"

# 2 vCPUs (MTTCG), memory for claude's runtime, a disk larger than the
# image's 16 GiB (the root file system grows to it at boot).
t0=$(date +%s)
out=$(berth create devbox --image agents --cpus 2 --memory 2G --disk 20G --json 2>"$T/create.err")
check_eq "create devbox from agents: running" running "$(echo "$out" | json state)"
diag "boot to SSH under $(berth info --json | json hypervisor): $(($(date +%s) - t0)) s"
if [ "$(echo "$out" | json state)" != running ]; then
	sed 's/^/# /' "$T/create.err"
	for log in "$STATE"/machines/*/console.log; do
		[ -f "$log" ] && tail -30 "$log" | sed 's/^/# /'
	done
	finish
fi

# ex DESC EXPECTED-REGEX CMD...: runs CMD in devbox (at most 300 s: a cold
# start of a 200 MB executable under TCG takes a while) and checks its
# exit status is 0 and its output matches.
ex() {
	local desc=$1 re=$2 out rc s
	shift 2
	s=$(date +%s)
	out=$(timeout -k 5 300 "$BIN/berth" --state "$STATE" exec devbox -- "$@" 2>"$T/ex.err")
	rc=$?
	if [ $rc -eq 0 ] && [[ $out =~ $re ]]; then
		ok "$desc"
		diag "$*: $(printf '%s' "$out" | tail -n 1) ($(($(date +%s) - s)) s)"
	else
		not_ok "$desc"
		diag "$*: exit $rc, output '$out'"
		sed 's/^/# /' "$T/ex.err" | tail -5
		# 128 + SIGILL
		[ $rc -eq 132 ] && diag "illegal instruction: claude and opencode need an" \
			"x86-64-v2 CPU (SSE4.2, POPCNT); QEMU's default model (qemu64) is not"
	fi
}
ex "exec runs as agent" '^agent$' id -un
ex "the hostname is the machine's name" '^devbox$' hostname
ex "claude --version" '[0-9]+\.[0-9]+\.[0-9]+ \(Claude Code\)' claude --version
ex "codex --version" '^codex-cli [0-9]+\.[0-9]+' codex --version
ex "opencode --version" '^[0-9]+\.[0-9]+\.[0-9]+' opencode --version
ex "docker --version" '^Docker version [0-9]' docker --version
ex "sudo -n true" '^$' sudo -n true
ex "git, python3, gcc and node are there" 'git version .*Python 3\..*gcc.*v[0-9]+\.' \
	bash -c 'git --version && python3 --version && gcc --version | head -n 1 && node --version'
ex "agent is in the sudo and docker groups" '^2$' \
	bash -c 'id -Gn | tr " " "\n" | grep -cxE "sudo|docker"'
ex "the keys went to agent, not root" '^ok$' \
	sudo -n sh -c 'test -s /home/agent/.ssh/authorized_keys && ! test -s /root/.ssh/authorized_keys && echo ok'
ex "no unit failed" '^0$' bash -o pipefail -c 'systemctl list-units --failed --no-legend | wc -l'
ex "the root file system grew to the 20 GiB disk" '^(19|20)$' \
	bash -c 'df -BG --output=size / | tail -n 1 | tr -dc 0-9'
if [ "${KEEP:-}" = 1 ]; then
	berth exec devbox -- systemd-analyze 2>/dev/null | sed 's/^/# /'
	berth exec devbox -- systemd-analyze blame 2>/dev/null | head -n 15 | sed 's/^/# /'
fi

# The SSH gateway (issue 4) into a machine whose sshd is OpenSSH (the tiny
# image's dropbear ignores env requests): LANG and LC_* pass through.
GW=
trap '[ -n "$GW" ] && kill "$GW" 2>/dev/null; cleanup' EXIT
ssh-keygen -q -t ed25519 -N '' -C t520 -f "$T/k"
berth key add "$T/k.pub" >/dev/null
P=$(free_port)
"$BIN/berth-sshgw" --state "$STATE" --listen "127.0.0.1:$P" --log-level info >"$T/sshgw.log" 2>&1 &
GW=$!
for _ in $(seq 100); do grep -q "listening on" "$T/sshgw.log" && break; sleep 0.1; done
GOPTS=(-F /dev/null -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR
	-o BatchMode=yes -o IdentitiesOnly=yes -o ConnectTimeout=30 -i "$T/k" -p "$P")
out=$(LANG=C.UTF-8 LC_MESSAGES=POSIX LC_TIME=C timeout -k 5 180 ssh "${GOPTS[@]}" \
	-o "SendEnv=LANG LC_*" devbox@127.0.0.1 'echo "$(id -un)|$LANG|$LC_MESSAGES|$LC_TIME"' 2>"$T/ssh.err")
check_eq "ssh devbox@host through the gateway: agent, with LANG and LC_* passed on" \
	"agent|C.UTF-8|POSIX|C" "$out"
[ "$out" = "agent|C.UTF-8|POSIX|C" ] || sed 's/^/# /' "$T/ssh.err" "$T/sshgw.log" | tail -10
out=$(LC_MESSAGES=POSIX timeout -k 5 180 ssh "${GOPTS[@]}" devbox@127.0.0.1 'echo "[$LC_MESSAGES]"' 2>/dev/null)
check_eq "and without SendEnv, none" "[]" "$out"
kill "$GW" 2>/dev/null
wait "$GW" 2>/dev/null
GW=

check_eq "rm devbox" "deleted devbox" "$(berth rm devbox)"
berth image rm agents >/dev/null
check_eq "image rm agents" 0 "$?"
finish
