#!/bin/bash
# QEMU unprivileged: every machine's QEMU runs as a uid of its own
# (qemu_uid_base + its number), group kvm, with no capabilities, through
# start, checkpoint, suspend and wake, memory restore and fork; its disk is
# its uid's alone (0600), the layers under it root's and read-only, its
# seed its own, and it can read no other machine's disk.  hostd refuses to
# start on a libvirt whose qemu.conf says user = "root": a libvirtd of the
# test's own, in a mount namespace (tests/private-libvirtd.sh), configured
# so, and removed at the end.
. "$(dirname "$0")/../lib.sh"

PLV=$T/plv
plv_stop() { [ -e "$PLV/holder.pid" ] && bash "$ROOT/tests/private-libvirtd.sh" stop "$PLV"; return 0; }
trap 'plv_stop; cleanup' EXIT

BASE_UID=2013300000
mkdir -p "$STATE"
echo "qemu_uid_base = $BASE_UID" >"$STATE/berth.conf"
start_hostd && build_tiny || { not_ok "hostd and image"; finish; }
kvm_gid=$(getent group kvm | cut -d: -f3)

# qemu_index of machine NAME (the database's).
qemu_index() {
	python3 -c 'import sqlite3, sys
r = sqlite3.connect(sys.argv[1]).execute("SELECT qemu_index FROM machines WHERE name = ?", (sys.argv[2],)).fetchone()
print(r[0] if r else "")' "$STATE/berth.db" "$1"
}
# The pid of NAME's QEMU (libvirt's pid file), and fields of its status.
qemu_pid() { cat "/run/libvirt/qemu/$(dom_of "$1").pid" 2>/dev/null; }
status_of() { grep "^$2:" "/proc/$(qemu_pid "$1")/status" 2>/dev/null | cut -f2- | tr '\t' ' '; }
# owner:group mode of a file.
own() { stat -c '%u:%g %a' "$1" 2>/dev/null; }
# The file NAME's domain uses as its disk (the live definition).
disk_of() { $VIRSH dumpxml "$(dom_of "$1")" | sed -n "s|.*<source file='\\([^']*/volumes/[^']*\\)'.*|\\1|p" | head -n 1; }
# Run CMD as uid U, group kvm, no other group: what an escaped QEMU is.
as_qemu() { local u=$1; shift; setpriv --reuid="$u" --regid="$kvm_gid" --clear-groups -- "$@"; }

# check_qemu NAME WHEN: NAME's QEMU runs as its own uid, group kvm, no
# capabilities; prints nothing, sets QUID.
check_qemu() {
	local want=$((BASE_UID + $(qemu_index "$1")))
	QUID=$want
	check_eq "$2: $1's QEMU runs as uid $want (real, effective, saved, fs)" \
		"$want $want $want $want" "$(status_of "$1" Uid)"
	check_eq "$2: $1's QEMU runs as group kvm ($kvm_gid)" \
		"$kvm_gid $kvm_gid $kvm_gid $kvm_gid" "$(status_of "$1" Gid)"
	check_eq "$2: $1's QEMU has no supplementary group but kvm" "$kvm_gid" "$(status_of "$1" Groups | tr -d ' ')"
	check_eq "$2: $1's QEMU has no effective capabilities" 0000000000000000 "$(status_of "$1" CapEff)"
	check_eq "$2: $1's QEMU has no permitted capabilities" 0000000000000000 "$(status_of "$1" CapPrm)"
}

check_eq "create u1: running" running "$(berth create u1 --json | json state)"
check_eq "create u2: running" running "$(berth create u2 --json | json state)"
check_qemu u1 "boot"
u1=$QUID
check_qemu u2 "boot"
u2=$QUID
check "two machines, two uids ($u1, $u2)" test "$u1" != "$u2"
check "the uids are no user's" test -z "$(getent passwd "$u1" "$u2")"
check_eq "hostd logged the check of u1's QEMU (debug) or nothing against it" "" \
	"$(grep -E 'RUNS PRIVILEGED|qemu_privileged' "$T/hostd.log")"

# The files, as hostd set them (libvirt relabels nothing).
id1=$(berth show u1 --json | json id)
id2=$(berth show u2 --json | json id)
d1=$(disk_of u1)
d2=$(disk_of u2)
base=$(qemu-img info -U --output=json "$d1" | json backing-filename)
check_match "u1's disk is an overlay of the image's base" "^$STATE/volumes/base-tiny\\." "$base"
check_eq "u1's disk is its uid's, 0600" "$u1:$kvm_gid 600" "$(own "$d1")"
check_eq "the image's base is root:kvm 0440" "0:$kvm_gid 440" "$(own "$base")"
check_eq "the pool directory is root:kvm 0710" "0:$kvm_gid 710" "$(own "$STATE/volumes")"
check_eq "STATE/machines is root:kvm 0710" "0:$kvm_gid 710" "$(own "$STATE/machines")"
check_eq "u1's directory is root:kvm 0710" "0:$kvm_gid 710" "$(own "$STATE/machines/$id1")"
check_eq "u1's seed (its host key) is its uid's, read-only" "$u1:$kvm_gid 400" \
	"$(own "$STATE/machines/$id1/seed.iso")"
check_eq "the seed's sources stay root's" "0:0 600" "$(own "$STATE/machines/$id1/user-data")"
check_eq "the agent's socket is root's (libvirtd made it)" 0 \
	"$(stat -c %u "$STATE/machines/$id1/agent.sock" 2>/dev/null)"
check "no screen socket file (VNC listens nowhere)" test ! -e "$STATE/machines/$id1/vnc.sock"
kernel=$(ls "$STATE"/images/tiny/vmlinuz* 2>/dev/null | head -n 1)
check_eq "the image's kernel is root:kvm 0440" "0:$kvm_gid 440" "$(own "$kernel")"
# What u1's QEMU could do if it escaped.
check "as u1's uid: its own disk opens" as_qemu "$u1" dd if="$d1" of=/dev/null bs=4k count=1 status=none
check "as u1's uid: u2's disk does not" eval "! as_qemu $u1 dd if=$d2 of=/dev/null bs=4k count=1 status=none 2>/dev/null"
check "as u1's uid: u2's seed does not" eval "! as_qemu $u1 cat $STATE/machines/$id2/seed.iso >/dev/null 2>&1"
check "as u1's uid: the base reads" as_qemu "$u1" dd if="$base" of=/dev/null bs=4k count=1 status=none
check "as u1's uid: the base is not writable" eval "! as_qemu $u1 sh -c ': >> $base' 2>/dev/null"
check "as u1's uid: the base's mode cannot change" eval "! as_qemu $u1 chmod 600 $base 2>/dev/null"
check "as u1's uid: STATE/machines cannot be listed" eval "! as_qemu $u1 ls $STATE/machines >/dev/null 2>&1"
check "as u1's uid: the pool cannot be listed" eval "! as_qemu $u1 ls $STATE/volumes >/dev/null 2>&1"
check "as u1's uid: nothing can be made in its directory" eval "! as_qemu $u1 touch $STATE/machines/$id1/x 2>/dev/null"
check "as u1's uid: the memory images' place is closed" eval "! as_qemu $u1 ls $STATE/machines/$id1 >/dev/null 2>&1"

# A live checkpoint: the running QEMU moves onto a new top it owns; the
# old one is frozen, root's.
berth exec u1 -- sh -c 'echo one > /root/f; sync'
check "checkpoint u1 k1 (running, with memory)" eval "berth checkpoint u1 k1 --memory >/dev/null"
d1b=$(disk_of u1)
check "u1 is on a new top" test "$d1b" != "$d1"
check_eq "the new top is u1's, 0600" "$u1:$kvm_gid 600" "$(own "$d1b")"
check_eq "the frozen one is root's, read-only" "0:$kvm_gid 440" "$(own "$d1")"
check "u1 writes on" eval "berth exec u1 -- sh -c 'echo two > /root/f; sync'"
check_qemu u1 "after the checkpoint"
check_eq "the memory image is root's alone" "0:0 600" \
	"$(own "$STATE/machines/$id1/ckpt-k1.mem")"

# Suspend (hostd's zstd image) and wake through the FIFO.
check_eq "suspend u1" suspended "$(berth suspend u1 --json | json state)"
check_eq "the suspended memory is root's alone" "0:0 600" "$(own "$STATE/machines/$id1/suspend.zst")"
out=$(berth resume u1 --json)
check_eq "resume u1 (wake from the FIFO)" running "$(echo "$out" | json state)"
diag "wake to SSH ready: $(echo "$out" | json ready_ms) ms"
check_qemu u1 "after the wake"
check_eq "u1 kept what it wrote" two "$(berth exec u1 -- cat /root/f)"

# Restore of the memory checkpoint: a new top, the QEMU as before.
check "restore u1 k1 (memory)" eval "berth restore u1 k1 >/dev/null"
check_qemu u1 "after the memory restore"
check_eq "u1 is back at k1" one "$(berth exec u1 -- cat /root/f)"
check_eq "the restored top is u1's, 0600" "$u1:$kvm_gid 600" "$(own "$(disk_of u1)")"

# A fork of k1: its own uid, its own top; the frozen layer it shares with
# u1 readable by both, writable by neither.
check_eq "fork u1 f1 --from k1: running" running "$(berth fork u1 f1 --from k1 --json | json state)"
check_qemu f1 "fork"
f1=$QUID
check "the fork's uid is another ($f1)" test "$f1" != "$u1" -a "$f1" != "$u2"
check_eq "the fork's top is its uid's" "$f1:$kvm_gid 600" "$(own "$(disk_of f1)")"
check "as u1's uid: the fork's disk does not open" eval "! as_qemu $u1 dd if=$(disk_of f1) of=/dev/null bs=4k count=1 status=none 2>/dev/null"
check "as the fork's uid: the shared frozen layer reads" as_qemu "$f1" dd if="$d1" of=/dev/null bs=4k count=1 status=none
check "as the fork's uid: it is not writable" eval "! as_qemu $f1 sh -c ': >> $d1' 2>/dev/null"
check "as the fork's uid: u1's disk does not open" eval "! as_qemu $f1 dd if=$(disk_of u1) of=/dev/null bs=4k count=1 status=none 2>/dev/null"

# A start after a cold stop, and a stop, leave the owners as they are.
berth stop u2 >/dev/null
check_eq "stopped u2's disk stays its uid's" "$u2:$kvm_gid 600" "$(own "$d2")"
berth start u2 >/dev/null
check_qemu u2 "after a stop and start"
for m in u1 u2 f1; do berth rm "$m" >/dev/null; done
kill_hostd TERM

# ---- hostd refuses a libvirt that runs QEMU as root --------------------
t=$(date +%s.%N)
if ! bash "$ROOT/tests/private-libvirtd.sh" start "$PLV" root root >"$T/plv.out" 2>&1; then
	not_ok "a private libvirtd with user = \"root\" starts"
	sed 's/^/# /' "$T/plv.out"
	finish
fi
diag "private libvirtd (user = \"root\") up in $(awk -v s="$t" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }') s"
check_match "its capabilities say QEMU runs as root" "<baselabel type='qemu'>\\+0:\\+0</baselabel>" \
	"$(bash "$ROOT/tests/private-libvirtd.sh" run "$PLV" virsh -c qemu:///system capabilities)"
S2=$T/state2
mkdir -p "$S2"
echo "network = user" >"$S2/berth.conf"
timeout 60 bash "$ROOT/tests/private-libvirtd.sh" run "$PLV" "$BIN/berth-hostd" --state "$S2" \
	>"$T/refused.log" 2>&1
rc=$?
check "hostd refuses to start: exit status $rc, not 0 (and not a timeout)" test "$rc" -ne 0 -a "$rc" -ne 124
check_match "its message names /etc/libvirt/qemu.conf and user = \"root\"" \
	'runs QEMU as root.*/etc/libvirt/qemu\.conf.*user = "root"' "$(cat "$T/refused.log")"
diag "$(grep -o 'error: .*' "$T/refused.log" | head -n 1 | cut -c1-200)"
check "no socket left behind" test ! -e "$S2/hostd.sock"
# The development override: it starts, and says so loudly.
echo "allow_root_qemu = yes" >>"$S2/berth.conf"
bash "$ROOT/tests/private-libvirtd.sh" run "$PLV" "$BIN/berth-hostd" --state "$S2" >"$T/allowed.log" 2>&1 &
p=$!
up=
for _ in $(seq 100); do
	"$BIN/berth" --state "$S2" info >/dev/null 2>&1 && { up=1; break; }
	kill -0 "$p" 2>/dev/null || break
	sleep 0.1
done
check "allow_root_qemu = yes: hostd starts" test -n "$up"
check_match "and logs that it is not safe" 'allow_root_qemu = yes: NOT SAFE FOR PRODUCTION' "$(cat "$T/allowed.log")"
kill -TERM "$p" 2>/dev/null
wait "$p" 2>/dev/null
lp=$(cat "$PLV/libvirtd.pid" 2>/dev/null)
hp=$(cat "$PLV/holder.pid" 2>/dev/null)
plv_stop
check "the private libvirtd and its namespace are gone" \
	test -n "$lp" -a -n "$hp" -a ! -e "/proc/$lp" -a ! -e "/proc/$hp"
finish
