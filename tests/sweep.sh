#!/bin/bash
# What integration tests killed outright (SIGKILL: their cleanup never ran)
# left behind, removed before a run: tests/run calls this.  A test's
# directory, /tmp/berth-t.*, names the script that made it in .owner
# (tests/lib.sh); when that process is gone, this removes the domains
# whose disks are under the directory, its hostd's dnsmasq, nftables table
# and taps, the test's users, its test internet (namespace bnPID, veth
# vhPID) and the directory.  A directory without .owner, or whose owner
# still runs (a test of another run beside this one), is left alone.
# A stale test internet is why this exists: its /32 routes stay, and the
# next test to route the same address fails at its first step.
set -u
VIRSH="virsh -q -c qemu:///system"

alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }

instance_of() {
	python3 -c 'import sqlite3, sys
try:
    r = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro", uri=True).execute(
        "SELECT value FROM meta WHERE key = ?", ("instance",)).fetchone()
    print(r[0] if r else "")
except Exception:
    print("")' "$1" 2>/dev/null
}

swept=0
for t in /tmp/berth-t.*; do
	[ -f "$t/.owner" ] || continue
	pid=$(cat "$t/.owner")
	case $pid in '' | *[!0-9]*) continue ;; esac
	alive "$pid" && continue
	echo "# sweep: $t (its test, pid $pid, was killed)"
	for d in $($VIRSH list --all --name 2>/dev/null); do
		case $d in berth-*) ;; *) continue ;; esac
		$VIRSH dumpxml "$d" 2>/dev/null | grep -q "$t/" || continue
		$VIRSH destroy "$d" >/dev/null 2>&1
		$VIRSH undefine --managed-save --nvram "$d" >/dev/null 2>&1 ||
			$VIRSH undefine --managed-save "$d" >/dev/null 2>&1
	done
	# Its processes: hostd and the gateways it started, dnsmasq, agents.
	for p in /proc/[0-9]*; do
		case $(tr '\0' ' ' <"$p/cmdline" 2>/dev/null) in
		*"$t/"*) kill -KILL "${p#/proc/}" 2>/dev/null ;;
		esac
	done
	inst=$(instance_of "$t/state/berth.db")
	if [ -n "$inst" ]; then
		nft delete table inet "berth-$inst" 2>/dev/null
		for l in $(ip -o link show 2>/dev/null | awk -F': ' '{ print $2 }' | cut -d@ -f1); do
			case $l in "bt${inst:0:4}-"*) ip link delete "$l" 2>/dev/null ;; esac
		done
	fi
	if [ -f "$t/.users" ]; then
		while read -r u; do
			[ -n "$u" ] || continue
			pkill -KILL -u "$u" 2>/dev/null
			userdel "$u" 2>/dev/null
			getent group "$u" >/dev/null && groupdel "$u" 2>/dev/null
		done <"$t/.users"
	fi
	ip netns pids "bn$pid" 2>/dev/null | xargs -r kill -KILL 2>/dev/null
	ip netns delete "bn$pid" 2>/dev/null
	ip link delete "vh$pid" 2>/dev/null
	rm -rf "$t"
	swept=$((swept + 1))
done
# A domain whose disks were under a test directory that is gone.
for d in $($VIRSH list --all --name 2>/dev/null); do
	case $d in berth-*) ;; *) continue ;; esac
	t=$($VIRSH dumpxml "$d" 2>/dev/null | grep -o "/tmp/berth-t\.[A-Za-z0-9]*/" | head -1)
	[ -n "$t" ] && [ ! -e "$t" ] || continue
	echo "# sweep: domain $d (its test directory, $t, is gone)"
	$VIRSH destroy "$d" >/dev/null 2>&1
	$VIRSH undefine --managed-save --nvram "$d" >/dev/null 2>&1 ||
		$VIRSH undefine --managed-save "$d" >/dev/null 2>&1
	swept=$((swept + 1))
done
# A process of a test whose directory is gone (a gateway its script did
# not end: t340's, until 2026-12-03, outlived its test).
for p in /proc/[0-9]*; do
	t=$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -o "/tmp/berth-t\.[A-Za-z0-9]*/" | head -1)
	[ -n "$t" ] && [ ! -e "$t" ] || continue
	echo "# sweep: process ${p#/proc/} ($(cat "$p/comm" 2>/dev/null)): its test directory, $t, is gone"
	kill -KILL "${p#/proc/}" 2>/dev/null
	swept=$((swept + 1))
done
# A test internet whose test is gone, with no directory left to name it.
for ns in $(ip netns list 2>/dev/null | awk '{ print $1 }'); do
	case $ns in bn[0-9]*) ;; *) continue ;; esac
	pid=${ns#bn}
	case $pid in *[!0-9]*) continue ;; esac
	alive "$pid" && continue
	echo "# sweep: network namespace $ns (its test, pid $pid, was killed)"
	ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null
	ip netns delete "$ns" 2>/dev/null
	ip link delete "vh$pid" 2>/dev/null
	swept=$((swept + 1))
done
[ "$swept" -eq 0 ] || echo "# sweep: $swept leftovers of killed tests removed"
exit 0
