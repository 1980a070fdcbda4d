#!/bin/bash
# tests/run: alone (its own QEMU VM, not the host's libvirtd; after the rest, which would slow its nested guests)
# Machines on lvm-thin for real: libvirtd and berth-hostd (storage =
# lvm-thin) inside the dm-thin TCG VM (tests/guest/lvm-vm.sh), driven by the
# berth CLI, with libvirt guests whose disks are thin LVs.  These machines'
# own kernel has no device-mapper, so this is the only place where hostd
# runs machines on lvm-thin.
#
# The guests are TCG inside TCG, where everything costs about a hundred
# times what it does under TCG: the tiny image boots in minutes (7 to 12
# with the host's load average at 5 to 10), an SSH handshake takes seconds
# (9 to 26 at 5 to 7), an lvm command several.  So tests/run runs this test alone,
# after the others; one machine ("a") boots once, while a stopped machine
# ("s") goes through checkpoint, restore, fork and delete; and the data
# checks are made on the disks themselves: a marker block written past the
# end of the image's filesystem (the disks are 320M, the filesystem 256M),
# by the guest through `berth exec` (dd, fsync) or, for stopped machines, by
# this script straight on the LV (O_DIRECT), and read back the same two
# ways.  Memory checkpoints and live forks need no boot: the restored guest
# answers at once.  The waits follow what the guests show (the console's
# "tiny: up", an SSH connection that is let take its time) and end at the
# deadline the host half sets (BERTH_T320_DEADLINE), a minute before
# lvm-vm.sh's timeout.  lvm is read once after each change (lvs_read).
#
# Two halves in this one file: on the host it builds the tiny image (the
# recipe is storage-neutral and takes ~30 s under TCG; hostd still imports
# it into a thin LV) and starts the VM with /etc/libvirt, /var/lib/libvirt,
# /var/log/libvirt and /var/cache/libvirt as tmpfs overlays (nothing reaches
# the host); in the VM (BERTH_T320_IN_VM=1) it makes the thin pool on
# /dev/vdb with deploy/lvm-thin-setup.sh, starts virtlogd, libvirtd and
# hostd, and runs the checks.  Timings of each step are printed as "#" lines.
# BERTH_T320_DEBUG=1: hostd logs at debug level, and its whole log is
# printed at the end ("# hostd: " lines).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

# ---------------------------------------------------------- on the host ---
if [ "${BERTH_T320_IN_VM:-}" != 1 ]; then
	cd "$ROOT" || exit 1
	W=$(mktemp -d /tmp/berth-t320.XXXXXX) || exit 1
	trap 'rm -rf -- "$W"' EXIT
	t0=$(date +%s)
	if ! BERTH_TINY_PVH=1 bash images/recipes/tiny.sh "$W/tiny" >"$W/tiny.log" 2>&1; then
		echo "not ok 1 - build the tiny image on the host"
		sed 's/^/# /' "$W/tiny.log" | tail -20
		echo "1..1"
		exit 1
	fi
	echo "# tiny image built on the host in $(($(date +%s) - t0)) s; load average $(cut -d' ' -f1-3 /proc/loadavg)"
	# The in-VM part ends its waits a minute before lvm-vm.sh would kill
	# the VM (tests/run allows 1200 s in all).
	timeout=1080
	BERTH_T320_IN_VM=1 BERTH_T320_TINY=$W/tiny BERTH_T320_DEADLINE=$(($(date +%s) + timeout - 60)) \
		bash tests/guest/lvm-vm.sh --timeout $timeout --memory 3G --cpus 2 \
		--overlay /etc/libvirt --overlay /var/lib/libvirt \
		--overlay /var/log/libvirt --overlay /var/cache/libvirt \
		-- bash tests/integration/t320-lvm-machines.sh
	rc=$?
	echo "# $(($(date +%s) - t0)) s in all (exit $rc); load average $(cut -d' ' -f1-3 /proc/loadavg)"
	exit $rc
fi

# ------------------------------------------------------------ in the VM ---
# Refuse to run anywhere but in lvm-vm.sh's guest: libvirt's directories
# must be the guest's overlays and the root the host's, read-only.
for d in /etc/libvirt /var/lib/libvirt /var/log/libvirt /var/cache/libvirt; do
	if [ "$(findmnt -n -o FSTYPE --target "$d")" != overlay ]; then
		echo "not ok 1 - $d is not an overlay: not in tests/guest/lvm-vm.sh's VM"
		echo "1..1"
		exit 1
	fi
done
if [ "$(findmnt -n -o FSTYPE /)" != 9p ] || [ "${BERTH_LVM_DEVICE:-}" != /dev/vdb ]; then
	echo "not ok 1 - / is not 9p: not in tests/guest/lvm-vm.sh's VM"
	echo "1..1"
	exit 1
fi

. "$ROOT/tests/lib.sh"
VG=berth
POOL=pool
MARK=614400 # 512-byte sector at 300 MiB: past the image's 256M filesystem
DISK=320M
MEM=128M
# Every wait ends by DEADLINE (seconds since the epoch), the host's budget
# for this test less a margin, so that a guest too slow for it fails with
# its console shown, before lvm-vm.sh kills the VM.  Otherwise a wait lasts
# as long as the guest takes, and ends early when the guest shows it failed.
DEADLINE=${BERTH_T320_DEADLINE:-0}
if [ "$DEADLINE" -lt "$(date +%s)" ] || [ "$DEADLINE" -gt $(($(date +%s) + 3600)) ]; then
	DEADLINE=$(($(date +%s) + 600))
fi

stop_libvirtd() {
	local f
	for f in /run/libvirtd.pid /run/virtlogd.pid; do
		[ -s "$f" ] && kill "$(cat "$f")" 2>/dev/null
	done
	return 0
}
trap 'cleanup; stop_libvirtd' EXIT

now() { date +%s.%N; }
secs() { awk -v s="$1" -v e="$(now)" 'BEGIN { printf "%.1f", e - s }'; }
T_ALL=$(now)

# The LV a domain's disk is (its first block device).
lv_of_dom() {
	$VIRSH dumpxml "$1" 2>/dev/null |
		sed -n "s|.*<source dev='\\(/dev/$VG/[^']*\\)'.*|\\1|p" | head -n 1
}
lv_of() { lv_of_dom "$(dom_of "$1")"; } # (berth show costs seconds here)
# The VG's LVs as lvm sees them, read into LVS by lvs_read: one line
# "NAME|POOL|ORIGIN|ATTR|BYTES" each.  One lvm run takes seconds here (more
# while a guest boots), so the checks read this table, read again after
# each change, instead of running lvm for each field.  lvs_read fails, and
# leaves LVS empty, when lvm fails.
LVS=
lvs_read() {
	LVS=$(lvm lvs -a --noheadings --nosuffix --units b --separator '|' \
		-o lv_name,pool_lv,origin,lv_attr,lv_size "$VG" | sed 's/^ *//') && [ -n "$LVS" ] &&
		return 0
	LVS=
	diag "lvm lvs $VG failed"
	return 1
}
# lv FIELD LV: the field (name, pool, origin, attr, bytes) of LV (a name or
# /dev/VG/NAME) in LVS; nothing when LVS has no such LV.
lv() {
	awk -F'|' -v f="$1" -v n="${2##*/}" '
		BEGIN { split("name pool origin attr bytes", k, " "); for (i in k) c[k[i]] = i }
		$1 == n { print $c[f] }' <<<"$LVS"
}
# The pool's thin LVs in LVS, one a line, sorted.
lvs_thin() { awk -F'|' -v p="$POOL" '$2 == p { print $1 }' <<<"$LVS" | sort; }
# lvs_left DEV...: those of the LVs DEV (/dev/VG/NAME) that are still there,
# as a device node or in LVS.  Fails when LVS was not read (lvm failed) or a
# DEV is empty (never found out): for check_absent.
lvs_left() {
	local d
	[ -n "$LVS" ] || { echo "lvs_left: no lvs table (lvm failed)" >&2; return 1; }
	for d; do
		[ -n "$d" ] || { echo "lvs_left: an LV that was never found out" >&2; return 1; }
		if [ -e "$d" ] || [ -n "$(lv name "$d")" ]; then echo "$d"; fi
	done
	return 0
}
# The marker block of an LV (DEV) or a running machine's disk, read from the
# device (O_DIRECT: never an earlier read's page cache).
mark_get() { dd if="$1" bs=512 skip=$MARK count=1 iflag=direct 2>/dev/null | tr -d '\0\n'; }
mark_put() { printf '%s\n' "$2" | dd of="$1" bs=512 seek=$MARK count=1 conv=sync,fsync oflag=direct 2>/dev/null; }
# bexec NAME CMD...: berth exec NAME -- CMD, given 90 s for the connection,
# handshake, authentication and channel (--connect-timeout; 15 s by
# default, and a handshake with a warm guest here took 9 to 26 s under
# load, the first one after a boot in CI's slowest run more than 15 s three
# times over), tried again (3 tries at most, until DEADLINE) when it gave up
# before the command started.  Each such timeout is shown; the command's
# own failure is returned at once.
bexec() {
	local name=$1 try out rc
	shift
	for try in 1 2 3; do
		out=$("$BIN/berth" --state "$STATE" exec "$name" --connect-timeout 90 -- "$@" 2>"$T/bexec.err")
		rc=$?
		[ "$rc" -eq 255 ] && [ "$try" -lt 3 ] && [ "$(date +%s)" -lt "$DEADLINE" ] &&
			grep -qE 'connection timed out|handshake timed out|authentication timed out|timed out opening the channel' "$T/bexec.err" ||
			break
		diag "berth exec $name, try $try: $(cat "$T/bexec.err")"
	done
	cat "$T/bexec.err" >&2
	[ -z "$out" ] || printf '%s\n' "$out"
	return "$rc"
}
# In the guest, one `berth exec` each (an SSH handshake costs seconds here):
# vm_put NAME MARKER VALUE writes the marker block (fsync) and VALUE into
# /tmp/value (tmpfs: memory); vm_state NAME [MARKER] prints "MARKER VALUE
# HOSTNAME" as the guest sees them, then writes MARKER if given.
vm_put() {
	bexec "$1" sh -c "echo $2 | dd of=/dev/vda bs=512 seek=$MARK count=1 conv=sync,fsync 2>/dev/null && echo $3 > /tmp/value"
}
vm_state() {
	bexec "$1" sh -c "echo \$(dd if=/dev/vda bs=512 skip=$MARK count=1 iflag=direct 2>/dev/null | tr -d '\\0') \$(cat /tmp/value 2>/dev/null || echo -) \$(hostname)${2:+; echo $2 | dd of=/dev/vda bs=512 seek=$MARK count=1 conv=sync,fsync 2>/dev/null}"
}
# The memory images (*.mem) in a directory, one a line; fails when the
# directory is not there (for check_absent).
mem_files() {
	local f
	case $1 in */ | "") echo "mem_files: no directory named" >&2; return 1 ;; esac
	[ -d "$1" ] || { echo "mem_files: no directory $1" >&2; return 1; }
	for f in "$1"/*.mem; do [ -e "$f" ] && echo "${f##*/}"; done
	return 0
}
# dom_runs DOM: its QEMU runs (libvirt's pid file; no virsh, which costs a
# second or two here on each call).
dom_runs() {
	local pid
	pid=$(cat "/run/libvirt/qemu/$1.pid" 2>/dev/null) || { [ "$(dom_state "$1")" = running ]; return; }
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}
# wait_up ID DOM: until machine ID's console says "tiny: up", the last line
# of the tiny image's /etc/rc (hostname, keys, network set; init starts
# dropbear next).  Ends at once, failing, when the console shows a kernel
# panic or the initramfs's rescue shell or the domain stops; else at
# DEADLINE.  hostd's own wait (create, start, restore, fork without
# --no-wait) is not used, so that each step's time shows.
wait_up() {
	local log=$STATE/machines/$1/console.log
	while [ "$(date +%s)" -lt "$DEADLINE" ]; do
		grep -aq 'tiny: up' "$log" 2>/dev/null && return 0
		if grep -aqE 'Kernel panic|tiny-init: ' "$log" 2>/dev/null; then
			diag "the guest did not boot"
			return 1
		fi
		dom_runs "$2" || { diag "domain $2 is $(dom_state "$2")"; return 1; }
		sleep 2
	done
	diag "no 'tiny: up' on the console by the deadline"
	return 1
}
# ssh_ready NAME: until OpenSSH's ssh (the gateway key, as hostd uses it)
# runs `true` in NAME, however long the handshake takes.  `berth exec`
# allows 15 s for it, and a guest's first handshake here (dropbear's
# crypto in code that QEMU in the VM has not translated yet) can take
# longer under load: each such try restarts the work and they pile up in
# the guest.  One patient connection makes the next ones fast.  A try that
# fails at once (dropbear not listening yet) is repeated after 2 s, until
# DEADLINE.
ssh_ready() {
	local port left t0
	port=$(berth show "$1" --json | json ssh.port)
	[ -n "$port" ] || { diag "no SSH port for $1"; return 1; }
	t0=$(now)
	while left=$((DEADLINE - $(date +%s))) && [ "$left" -gt 0 ]; do
		if timeout "$left" ssh -F /dev/null -i "$STATE/keys/gateway" -o IdentitiesOnly=yes -o BatchMode=yes \
			-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR \
			-o ConnectTimeout="$left" -p "$port" root@127.0.0.1 true </dev/null 2>"$T/ssh.err"; then
			diag "$1 answers ssh ($(secs "$t0") s)"
			return 0
		fi
		sleep 2
	done
	diag "$1 did not answer ssh by the deadline: $(tail -n 1 "$T/ssh.err")"
	return 1
}
# console_tail ID: the end of machine ID's console, as diagnostics.
console_tail() { tail -n 20 "$STATE/machines/$1/console.log" 2>/dev/null | sed 's/^/# console: /'; }
# "NAME STATE" or "MEMORY" of a JSON answer, or what berth said instead.
field_or_said() { echo "$1" | json "$2" 2>/dev/null || echo "berth said: $1"; }

# ---------------------------------------------- libvirtd, pool, hostd ---
t=$(now)
# The host's libvirt configuration, in the guest's overlay only: no domain,
# network or pool of the host's may start here, QEMU runs without a mount
# namespace (libvirt's /dev for QEMU does not work in this chroot: "Could
# not open '/dev/urandom'"), and libvirt's default user is not root
# whatever the host's qemu.conf says (hostd refuses that).
rm -f /etc/libvirt/qemu/*.xml /etc/libvirt/qemu/autostart/*.xml \
	/etc/libvirt/qemu/networks/autostart/*.xml /etc/libvirt/storage/autostart/*.xml
sed -i -e '/^[[:space:]]*user[[:space:]]*=/d' -e '/^[[:space:]]*group[[:space:]]*=/d' \
	/etc/libvirt/qemu.conf
printf '\n# t320-lvm-machines (in the VM only)\nnamespaces = [ ]\nuser = "libvirt-qemu"\ngroup = "kvm"\n' \
	>>/etc/libvirt/qemu.conf
if ! virtlogd -d || ! libvirtd -d; then
	not_ok "start virtlogd and libvirtd"
	finish
fi
# libvirtd probes QEMU while the pool is made (its answer is awaited below).
mkdir -p "$STATE" "$T/recipes"
setup=$(sh "$ROOT/deploy/lvm-thin-setup.sh" "$BERTH_LVM_DEVICE" "$VG" "$POOL" 2>"$T/setup.err")
lvs_read
check "deploy/lvm-thin-setup.sh makes a thin pool" test "$(lv attr "$POOL" | cut -c1)" = t
# Its stdout is exactly the berth.conf lines (lvm's own chatter goes to
# stderr).
check_eq "and prints the berth.conf lines, nothing else" \
	"storage = lvm-thin|storage_location = $VG/$POOL" "$(printf '%s\n' "$setup" | paste -sd '|')"
diag "thin pool made $(secs "$t") s after libvirtd started"
# libvirtd answers once it has probed QEMU (half a minute here): as long as
# it runs, until the deadline.
until $VIRSH version >/dev/null 2>&1; do
	p=$(cat /run/libvirtd.pid 2>/dev/null)
	if [ -n "$p" ] && ! kill -0 "$p" 2>/dev/null; then
		diag "libvirtd exited"
		break
	fi
	[ "$(date +%s)" -lt "$DEADLINE" ] || break
	sleep 1
done
check "libvirtd answers in the VM" eval "$VIRSH version >/dev/null"
diag "libvirtd up in $(secs "$t") s"
{
	printf '%s\n' "$setup"
	echo "boot_timeout = 300"
	# QEMU's own network stack: this test is about storage, and the
	# routed network (taps, nft, dnsmasq) has its tests on the host.
	echo "network = user"
	[ "${BERTH_T320_DEBUG:-}" != 1 ] || echo "log_level = debug"
	echo "recipes_dir = $T/recipes"
} >"$STATE/berth.conf"
# The tiny image the host built: the recipe only copies it.
printf '#!/bin/bash\n# t320: the tiny image built on the host.\ncp -- %q/* "$1"/\n' \
	"$BERTH_T320_TINY" >"$T/recipes/tiny.sh"

t=$(now)
start_hostd || { not_ok "hostd starts on lvm-thin"; finish; }
diag "hostd up in $(secs "$t") s"
check_match "berth info: tcg, lvm-thin at $VG/$POOL" "hypervisor: +tcg.*storage: +lvm-thin at $VG/$POOL " "$(berth info)"
t=$(now)
build_tiny || { not_ok "image tiny"; finish; }
diag "image imported in $(secs "$t") s"
lvs_read
check_eq "the image's base is a thin LV of the pool" "$POOL" "$(lv pool base-tiny)"

# ------------------------------------------- a boots in the background ---
t_boot=$(now)
check_eq "create a --no-wait: running" running \
	"$(berth create a --memory $MEM --disk $DISK --no-wait --json | json state)"
diag "create a (without the boot) took $(secs "$t_boot") s"
A_ID=$(berth show a --json | json id)
A_DOM=$(dom_of a)

# ------------------------- meanwhile: a stopped machine, s, on the LVs ---
t=$(now)
check_eq "create s --no-start" stopped "$(berth create s --memory $MEM --disk $DISK --no-start --json | json state)"
diag "create --no-start took $(secs "$t") s"
S_DOM=$(dom_of s)
S_LV=$(lv_of_dom "$S_DOM")
check_match "s's domain has a block disk on a thin LV" "^/dev/$VG/m-" "$S_LV"
check_match "virsh dumpxml: <disk type='block'>, raw, cache none" \
	"<disk type='block' device='disk'>[^<]*<driver name='qemu' type='raw' cache='none' io='native'" \
	"$($VIRSH dumpxml "$S_DOM" | tr -d '\n')"
lvs_read
check_eq "s's LV is a thin snapshot of the image's base" "$POOL base-tiny" \
	"$(lv pool "$S_LV") $(lv origin "$S_LV")"
check_eq "s's disk is $DISK" $((320 << 20)) "$(lv bytes "$S_LV")"
mark_put "$S_LV" s-one

before=$(lvs_thin)
t=$(now)
check_eq "checkpoint k1 of the stopped s" k1 "$(berth checkpoint s k1 --json | json name)"
diag "checkpoint of a stopped machine took $(secs "$t") s"
lvs_read
K1_LV=/dev/$VG/$(comm -13 <(echo "$before") <(lvs_thin))
check_eq "k1 is one new thin snapshot of s's LV" "${S_LV##*/}" "$(lv origin "$K1_LV")"
check_eq "s stays stopped" stopped "$(berth show s --json | json state)"
check_eq "s stays on its LV" "$S_LV" "$(lv_of_dom "$S_DOM")"
check_eq "k1 holds s's data" s-one "$(mark_get "$K1_LV")"
mark_put "$S_LV" s-two

t=$(now)
check_eq "restore s k1: stays stopped" stopped "$(berth restore s k1 --json | json state)"
diag "restore of a stopped machine took $(secs "$t") s"
S_LV2=$(lv_of_dom "$S_DOM")
check "s is on a new LV" test -n "$S_LV2" -a "$S_LV2" != "$S_LV" -a "$S_LV2" != "$K1_LV"
check_eq "s has k1's data again" s-one "$(mark_get "$S_LV2")"
lvs_read
check_absent "the LV s had before is gone" lvs_left "$S_LV"
check_eq "k1 is unchanged" s-one "$(mark_get "$K1_LV")"

before=$(lvs_thin)
t=$(now)
check_eq "fork s s2 --from k1 --no-start" stopped "$(berth fork s s2 --from k1 --no-start --json | json state)"
diag "fork from a checkpoint took $(secs "$t") s"
S2_LV=$(lv_of s2)
check "s2 has its own LV" test -n "$S2_LV" -a "$S2_LV" != "$S_LV2" -a "$S2_LV" != "$K1_LV"
check_eq "s2 has k1's data" s-one "$(mark_get "$S2_LV")"
mark_put "$S_LV2" s-three
check_eq "fork s s3 (as it is now) --no-start" stopped "$(berth fork s s3 --no-start --json | json state)"
S3_LV=$(lv_of s3)
check_eq "s3 has s's data of now" s-three "$(mark_get "$S3_LV")"
# Read once for both forks: the LVs there are now beyond those before them
# must be s2's and s3's, no temporary snapshot.
lvs_read
check_eq "the fork left one new LV (s3's), no temporary snapshot" "${S3_LV##*/}" \
	"$(comm -13 <(echo "$before") <(lvs_thin) | grep -vxF -- "${S2_LV##*/}" | paste -sd ' ')"
mark_put "$S3_LV" s3-own
check_eq "a write to s3 stays in s3" "s-three s-one" "$(mark_get "$S_LV2") $(mark_get "$S2_LV")"

t=$(now)
check_eq "rm s while s2, s3 and k1 came from it" "deleted s" "$(berth rm s)"
diag "rm took $(secs "$t") s"
check_eq "s2 and s3 keep their data" "s-one s3-own" "$(mark_get "$S2_LV") $(mark_get "$S3_LV")"
berth rm s2 >/dev/null
berth rm s3 >/dev/null
lvs_read
check_absent "s's LV and k1's are gone" lvs_left "$S_LV2" "$K1_LV"
check_eq "only the image's LV is left (and a's)" "base-tiny" "$(lvs_thin | grep -v "^m-$A_ID" | paste -sd ' ')"

# ------------------------------------------------------ a, running ---
# Up when its console says so, then one patient ssh; then berth exec.
if ! wait_up "$A_ID" "$A_DOM" || ! ssh_ready a; then
	not_ok "a boots: berth exec works"
	console_tail "$A_ID"
	finish
fi
diag "create a -> up and answering ssh: $(secs "$t_boot") s (TCG in TCG)"
# One berth exec for two checks (each handshake costs seconds).
t=$(now)
out=$(bexec a sh -c "cat /sys/block/vda/size; echo one | dd of=/dev/vda bs=512 seek=$MARK count=1 conv=sync,fsync 2>/dev/null")
check_eq "a boots: berth exec works" 0 "$?"
diag "berth exec took $(secs "$t") s"
A_LV=$(lv_of_dom "$A_DOM")
check_match "a runs on a thin LV" "^/dev/$VG/m-$A_ID" "$A_LV"
# QEMU runs unprivileged here too: the LV's device node is its uid's alone.
qemu_uid_of() { awk '/^Uid:/ { print $2 }' "/proc/$(cat "/run/libvirt/qemu/$1.pid" 2>/dev/null)/status" 2>/dev/null; }
qemu_caps_of() { awk '/^CapEff:/ { print $2 }' "/proc/$(cat "/run/libvirt/qemu/$1.pid" 2>/dev/null)/status" 2>/dev/null; }
A_UID=$(qemu_uid_of "$A_DOM")
check "a's QEMU runs as a uid of its own ($A_UID), no capabilities" \
	test -n "$A_UID" -a "$A_UID" != 0 -a "$(qemu_caps_of "$A_DOM")" = 0000000000000000
check_eq "a's LV device node is that uid's, 0600" "$A_UID 600" "$(stat -L -c '%u %a' "$A_LV")"
check_eq "the guest sees a $DISK disk and writes to it" $((320 << 20)) "$(echo "$out" | awk '{ print $1 * 512 }')"
check_eq "the guest's write is on its LV" one "$(mark_get "$A_LV")"
before=$(lvs_thin)
t=$(now)
out=$(berth checkpoint a c1 --json)
check_eq "checkpoint c1 of the running a" c1 "$(echo "$out" | json name)"
diag "checkpoint of a running machine took $(secs "$t") s (API: $(echo "$out" | json took_ms) ms)"
lvs_read
C1_LV=/dev/$VG/$(comm -13 <(echo "$before") <(lvs_thin))
check_eq "c1 is a thin snapshot of a's LV" "${A_LV##*/}" "$(lv origin "$C1_LV")"
check_eq "a runs on, on the same LV" "running $A_LV" "$(dom_state "$A_DOM") $(lv_of_dom "$A_DOM")"
check_eq "c1 holds what the guest wrote" one "$(mark_get "$C1_LV")"

vm_put a two mem-two
t=$(now)
out=$(berth checkpoint a m1 --memory --json 2>&1)
took=$(secs "$t")
check_eq "checkpoint m1 --memory of the running a" true "$(field_or_said "$out" memory)"
diag "memory checkpoint took $took s"
check_eq "m1's memory image is in the machine's directory" ckpt-m1.mem "$(mem_files "$STATE/machines/$A_ID")"
check_eq "a runs on after it" running "$(dom_state "$A_DOM")"
vm_put a three mem-three

t=$(now)
out=$(berth restore a m1 --no-wait --json 2>&1)
took=$(secs "$t")
check_eq "restore a m1: running" running "$(field_or_said "$out" state)"
# What shows the memory came back is the tmpfs marker (a boot loses it).
ssh_ready a
check_eq "at once, disk and memory are m1's (marker, tmpfs, hostname)" "two mem-two a" "$(vm_state a)"
diag "restore of a memory checkpoint took $took s; berth exec worked $(secs "$t") s after it began"
A_LV2=$(lv_of_dom "$A_DOM")
check "a is on a new LV" test -n "$A_LV2" -a "$A_LV2" != "$A_LV"
lvs_read
check_absent "  the old one is gone" lvs_left "$A_LV"
check_eq "a's new LV is its QEMU's uid's, 0600" "$A_UID 600" "$(stat -L -c '%u %a' "$A_LV2")"
check_eq "the memory image stays for the next restore" ckpt-m1.mem "$(mem_files "$STATE/machines/$A_ID")"

t=$(now)
out=$(berth fork a b --live --no-wait --json 2>&1)
took=$(secs "$t")
check_eq "fork a b --live: running" running "$(field_or_said "$out" state)"
ssh_ready b
st=$(vm_state b b-own)
check_eq "at once, b has a's disk and memory" "two mem-two" "${st% *}"
diag "live fork took $took s; berth exec worked in b $(secs "$t") s after it began"
grep -a "live fork b " "$T/hostd.log" | sed 's/^/# hostd: /'
B_DOM=$(dom_of b 2>/dev/null)
B_LV=$(lv_of_dom "$B_DOM")
check "b runs on its own thin LV" test -n "$B_LV" -a "$B_LV" != "$A_LV2" -a "$(dom_state "$B_DOM")" = running
B_UID=$(qemu_uid_of "$B_DOM")
check "b's QEMU has a uid of its own ($B_UID, not a's $A_UID)" test -n "$B_UID" -a "$B_UID" != 0 -a "$B_UID" != "$A_UID"
check_eq "b's LV is b's QEMU's uid's, 0600" "$B_UID 600" "$(stat -L -c '%u %a' "$B_LV")"
check_eq "a runs on" running "$(dom_state "$A_DOM")"
# hostd renames the running fork over SSH (its seed names it at every
# boot); a timeout there is a failure, as any other.
if [ "${st##* }" = b ]; then
	ok "b is called b"
else
	not_ok "b is called b"
	diag "b's hostname is '${st##* }' (hostd's lines on the live fork are above)"
fi
check_absent "no memory image left in STATE/tmp" mem_files "$STATE/tmp"
check_eq "b's write stays in b" "two b-own" "$(mark_get "$A_LV2") $(mark_get "$B_LV")"

t=$(now)
check_eq "fork a f --from c1 --no-start" stopped "$(berth fork a f --from c1 --no-start --json | json state)"
diag "fork from a checkpoint took $(secs "$t") s"
F_LV=$(lv_of f)
check_eq "f's own LV has c1's data" one "$([ "$F_LV" != "$C1_LV" ] && mark_get "$F_LV")"
berth rm f >/dev/null

t=$(now)
check_eq "restore a c1 (disk only; a reboots)" running "$(berth restore a c1 --no-wait --json | json state)"
diag "restore of a running machine (without the boot) took $(secs "$t") s"
A_LV3=$(lv_of_dom "$A_DOM")
check_eq "a's domain runs on a new LV holding c1's data" "running one" \
	"$(dom_state "$A_DOM") $([ "$A_LV3" != "$A_LV2" ] && mark_get "$A_LV3")"
check_eq "c1 stays" one "$(mark_get "$C1_LV")"

check_eq "checkpoint rm a m1" "deleted checkpoint m1 of a" "$(berth checkpoint rm a m1)"
check_absent "its memory image is removed" mem_files "$STATE/machines/$A_ID"
t=$(now)
check_eq "rm a while b (a live fork) and c1 came from it" "deleted a" "$(berth rm a)"
diag "rm of a running machine took $(secs "$t") s"
check_no_line "a's domain is gone" "$A_DOM" $VIRSH list --all --name
st=$(vm_state b)
check_eq "b runs on, with its data" "b-own mem-two" "${st% *}"
berth rm b >/dev/null
lvs_read
check_absent "a's LVs are gone" lvs_left "$A_LV3" "$C1_LV"
check_eq "with every machine gone only the image's LV remains" base-tiny "$(lvs_thin | paste -sd ' ')"
check_absent "and no domain" matching '^berth-' $VIRSH list --all --name
diag "in the VM: $(secs "$T_ALL") s"
[ "${BERTH_T320_DEBUG:-}" != 1 ] || sed 's/^/# hostd: /' "$T/hostd.log"
finish
