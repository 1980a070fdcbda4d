#!/bin/bash
# Run a command as root inside a small TCG VM whose kernel has real dm-thin.
#
#   tests/guest/lvm-vm.sh [--disk-size SIZE] [--timeout SECONDS]
#                         [--memory SIZE] [--cpus N] [--rw-dir DIR]
#                         [--overlay DIR]... [--systemd] [--verbose]
#                         -- CMD [ARGS...]
#
# This is how berth's lvm-thin storage backend is tested for real on machines
# whose own kernel has no device-mapper (ENVIRONMENT.md, "LVM thin inside a
# TCG VM").  Exits with CMD's exit status; CMD's stdout and stderr appear on
# this script's stdout and stderr as they are written (the interleaving of
# the two is approximate).  CMD's stdin is /dev/null.
#
# The guest:
#  - Debian's kernel, the one images/recipes/tiny.sh uses (same cache,
#    images/recipes/kernel.sh), booted directly (its uncompressed vmlinux,
#    through QEMU's PVH entry point, when it can be had: about 3 s sooner);
#    always TCG (`-accel tcg`), -m 1024, one vCPU (two boot 2 s slower);
#    --memory SIZE (M or G, at least 256M) and --cpus N (1 to 8) change
#    those, e.g. for a libvirtd running its own (nested, TCG) guests.
#  - an initramfs of busybox-static and the modules of dm-thin, dm-snapshot,
#    nf_tables (hostd's network = user filter),
#    virtio, 9p and overlayfs, cached in $BERTH_CACHE/lvm-vm (default
#    /var/cache/berth/lvm-vm), keyed by the kernel version and a hash of
#    this script.
#  - the host's root, read-only over 9p, is the guest's root (chroot): CMD
#    and everything it runs are the host's binaries (lvm, thin_check,
#    qemu-img, the project's test programs), and it runs in the caller's
#    current directory (which must not be under /run, /proc, /sys or /dev).  Fresh /proc, /sys, /dev (devtmpfs, so /dev/vdb and
#    /dev/mapper/* appear), /dev/pts, /dev/shm; tmpfs on /run; /tmp is the
#    host's /tmp seen through an overlay on tmpfs: host files there can be
#    read, writes stay in the guest.  --overlay DIR (repeatable) does the
#    same for the host's directory DIR (its mode and owner kept): e.g.
#    /etc/libvirt, /var/lib/libvirt, /var/log/libvirt for a libvirtd in
#    the guest.  Nothing CMD writes reaches the host except its output, its
#    exit status and what it writes under DIR: --rw-dir DIR shares the
#    host's directory DIR, writable (files are created as root), at the
#    same path in the guest.
#  - --systemd: the guest boots systemd instead (ENVIRONMENT.md: the
#    host's root is a Debian 12 with systemd installed, only not as PID
#    1 in its container).  The root is then the host's, read-only over 9p,
#    under one writable tmpfs layer (overlayfs) for the whole tree, and
#    /init hands it over to /lib/systemd/systemd (switch_root) with the
#    kernel's modules at /lib/modules/VERSION (the host's /lib/modules has
#    not the guest kernel's).  systemd starts the target lvm-vm.target:
#    basic.target (journald, tmpfiles, sockets: what services need) and
#    lvm-vm-cmd.service, which runs CMD and powers the VM off; nothing
#    that the host enables for multi-user.target starts unless CMD starts
#    it.  So CMD can install and start units as on a real host, with
#    systemctl and journalctl.  /tmp is the root's (host files seen
#    through the layer).  --overlay is not needed (and refused) then.
#  - network: the loopback interface only (up, 127.0.0.1), so a QEMU in the
#    guest can forward ports on it; nothing leaves the VM.
#  - environment: PATH and every BERTH_* and LVM_* variable of the caller,
#    HOME=/root, plus
#      BERTH_LVM_DEVICE=/dev/vdb        the blank disk, for the PV
#      LVM_SYSTEM_DIR=/run/berth-lvm    an lvm.conf for a guest without udev
#                                       (lvm's backups/archives go there too)
#      LVM_SUPPRESS_FD_WARNINGS=1
#  - /dev/vdb: a sparse raw file of SIZE (default 2G; truncate(1) suffixes:
#    K, M, G, T = powers of 1024), blank at every run, cache=unsafe.  /dev/vda
#    is a 1 MiB read-only placeholder (zeros) that keeps the disk at vdb.
#  - LVM runs without udev: lvm creates /dev/VG/LV and /dev/mapper/VG-LV
#    itself (udev_rules=0); no dmeventd (monitoring=0), no lvmpolld.
#
# Exit status: CMD's; 124 when CMD has not finished after SECONDS (default
# 300, boot included: QEMU is killed); 125 when the VM could not be set up
# or never reported a status (the end of the serial console is shown); 2 for
# a usage error.  --verbose prints the timings on stderr.
#
# Needs (deploy/install-deps.sh run/test): qemu-system-x86, busybox-static,
# kmod, cpio, and for the commands people run inside: lvm2,
# thin-provisioning-tools, qemu-utils.  Everything temporary is in one
# mktemp directory, removed on exit, also after a failure, a timeout or a
# signal.  Sends no network traffic (unless the kernel must be downloaded
# first: see images/recipes/kernel.sh).
set -uo pipefail
umask 022

PROG=lvm-vm
HERE=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
SELF=$HERE/$(basename -- "${BASH_SOURCE[0]}")
RECIPES=$HERE/../../images/recipes

usage() {
	cat >&2 <<EOF
usage: $0 [--disk-size SIZE] [--timeout SECONDS] [--memory SIZE] [--cpus N]
          [--rw-dir DIR] [--overlay DIR]... [--systemd] [--verbose] -- CMD [ARGS...]
Runs CMD as root in a TCG VM with real dm-thin, chrooted into the host's root
(read-only) in the current directory; /dev/vdb (\$BERTH_LVM_DEVICE) is a blank
disk of SIZE (default 2G); --memory (default 1024M) and --cpus (default 1)
size the VM; --rw-dir makes the host directory DIR writable in the VM;
--overlay makes DIR writable in the VM only (a tmpfs layer over the host's);
--systemd boots systemd on the host's root under a tmpfs layer, CMD a service.
Exits with CMD's status (124: timeout, default 300 s; 125: the VM failed).
EOF
	exit 2
}
say() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { # message, exit 125
	printf '%s: error: %s\n' "$PROG" "$*" >&2
	exit 125
}

# A comma in a QEMU option value is written twice.
q() { printf '%s' "${1//,/,,}"; }

DISK_SIZE=2G
TIMEOUT=300
VERBOSE=
RW_DIR=
MEMORY=1024M
CPUS=1
OVERLAYS=()
SYSTEMD=
while [ $# -gt 0 ]; do
	case $1 in
	--disk-size) [ $# -ge 2 ] || usage; DISK_SIZE=$2; shift 2 ;;
	--disk-size=*) DISK_SIZE=${1#*=}; shift ;;
	--timeout) [ $# -ge 2 ] || usage; TIMEOUT=$2; shift 2 ;;
	--timeout=*) TIMEOUT=${1#*=}; shift ;;
	--rw-dir) [ $# -ge 2 ] || usage; RW_DIR=$2; shift 2 ;;
	--rw-dir=*) RW_DIR=${1#*=}; shift ;;
	--memory) [ $# -ge 2 ] || usage; MEMORY=$2; shift 2 ;;
	--memory=*) MEMORY=${1#*=}; shift ;;
	--cpus) [ $# -ge 2 ] || usage; CPUS=$2; shift 2 ;;
	--cpus=*) CPUS=${1#*=}; shift ;;
	--overlay) [ $# -ge 2 ] || usage; OVERLAYS+=("$2"); shift 2 ;;
	--overlay=*) OVERLAYS+=("${1#*=}"); shift ;;
	--systemd) SYSTEMD=1; shift ;;
	-v | --verbose) VERBOSE=1; shift ;;
	-h | --help) usage ;;
	--) shift; break ;;
	*) say "unknown argument: $1"; usage ;;
	esac
done
[ $# -ge 1 ] || usage
[[ $DISK_SIZE =~ ^[1-9][0-9]*[KMGT]?$ ]] ||
	{ say "bad --disk-size '$DISK_SIZE' (e.g. 512M, 2G)"; usage; }
[[ $TIMEOUT =~ ^[1-9][0-9]*$ ]] ||
	{ say "bad --timeout '$TIMEOUT' (whole seconds)"; usage; }
case $MEMORY in
[1-9]*M) MEM_MIB=${MEMORY%M} ;;
[1-9]*G) MEM_MIB=${MEMORY%G}; [[ $MEM_MIB =~ ^[0-9]+$ ]] && MEM_MIB=$((MEM_MIB * 1024)) ;;
*) MEM_MIB=x ;;
esac
if [[ ! $MEM_MIB =~ ^[0-9]+$ ]] || [ "$MEM_MIB" -lt 256 ] || [ "$MEM_MIB" -gt 65536 ]; then
	say "bad --memory '$MEMORY' (e.g. 1024M, 3G; 256M to 64G)"
	usage
fi
[[ $CPUS =~ ^[1-8]$ ]] || { say "bad --cpus '$CPUS' (1 to 8)"; usage; }
if [ -n "$RW_DIR" ]; then
	[ -d "$RW_DIR" ] || { say "--rw-dir $RW_DIR: no such directory"; usage; }
	RW_DIR=$(cd -- "$RW_DIR" && pwd -P) || die "cannot resolve $RW_DIR"
	case $RW_DIR in
	/ | /proc | /proc/* | /sys | /sys/* | /dev | /dev/* | /run | /run/*)
		say "--rw-dir cannot be $RW_DIR"; usage ;;
	*$'\n'*) say "--rw-dir: no newline in the path, please"; usage ;;
	esac
fi
if [ -n "$SYSTEMD" ] && [ ${#OVERLAYS[@]} -gt 0 ]; then
	say "--overlay goes without --systemd (the whole root is writable then)"
	usage
fi
# --overlay: "MODE UID GID PATH" lines for the guest's /init.
OVERLAY_LINES=
for d in "${OVERLAYS[@]}"; do
	[ -d "$d" ] || { say "--overlay $d: no such directory"; usage; }
	d=$(cd -- "$d" && pwd -P) || die "cannot resolve $d"
	case $d in
	/ | /proc | /proc/* | /sys | /sys/* | /dev | /dev/* | /run | /run/* | /tmp | /tmp/*)
		say "--overlay cannot be $d"; usage ;;
	*$'\n'*) say "--overlay: no newline in the path, please"; usage ;;
	esac
	if [ -n "$RW_DIR" ]; then
		case $d/ in "$RW_DIR"/*) say "--overlay $d is inside --rw-dir $RW_DIR"; usage ;; esac
		case $RW_DIR/ in "$d"/*) say "--rw-dir $RW_DIR is inside --overlay $d"; usage ;; esac
	fi
	OVERLAY_LINES+="$(stat -c '%a %u %g' -- "$d") $d"$'\n'
done

QEMU=qemu-system-x86_64
BUSYBOX=/bin/busybox
for tool in $QEMU modprobe cpio gzip sha256sum truncate tail; do
	command -v "$tool" >/dev/null 2>&1 ||
		die "$tool not found (run deploy/install-deps.sh test)"
done
[ -x $BUSYBOX ] || die "$BUSYBOX not found (install busybox-static)"
if ldd $BUSYBOX >/dev/null 2>&1; then
	die "$BUSYBOX is dynamically linked (install busybox-static)"
fi
CWD=$(pwd -P) || die "cannot resolve the current directory"
now() { date +%s.%N; }
elapsed() { awk -v s="$1" -v e="$(now)" 'BEGIN { printf "%.2f", e - s }'; }
T0=$(now)

# ------------------------------------------------------------- cleanup ---

T=
QPID=
TAILS=()
cleanup() {
	trap - EXIT INT TERM HUP
	if [ -n "$QPID" ]; then
		kill -KILL "$QPID" 2>/dev/null
		wait "$QPID" 2>/dev/null
	fi
	local p
	for p in "${TAILS[@]}"; do
		kill "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	[ -z "$T" ] || rm -rf -- "$T"
}
trap cleanup EXIT
trap 'say "interrupted"; exit 130' INT
trap 'say "terminated"; exit 143' TERM HUP
T=$(mktemp -d "${TMPDIR:-/tmp}/berth-lvm-vm.XXXXXX") || die "mktemp failed"

# -------------------------------------------------------------- kernel ---

# shellcheck source=SCRIPTDIR/../../images/recipes/kernel.sh
. "$RECIPES/kernel.sh" || die "cannot read $RECIPES/kernel.sh"
kinfo=$(berth_kernel -q -p $PROG) || exit 125
KVER=${kinfo%% *}
KDIR=${kinfo#* }
MODDIR=$KDIR/lib/modules/$KVER
# PVH boot of the uncompressed kernel; the bzImage when that is impossible.
if KERNEL=$(berth_kernel_vmlinux -p $PROG "$KDIR" 2>"$T/vmlinux.err"); then
	:
else
	[ -z "$VERBOSE" ] || cat "$T/vmlinux.err" >&2
	KERNEL=$KDIR/vmlinuz
fi

# ------------------------------------------------------------- initrd ---

# Loaded in this order, each with the dependencies modprobe lists first.
# crc32c_generic comes first: libcrc32c (dm-persistent-data) needs a crc32c
# and nothing would load one on demand (crc32c-intel may fail under TCG).
# nf_tables and the expressions of hostd's network = user filter (t320's
# hostd runs in the VM with it).
MODULES="crc32c_generic virtio_pci virtio_blk 9p 9pnet_virtio overlay dm_mod
dm_bufio dm_bio_prison dm_persistent_data dm_thin_pool dm_snapshot
nf_tables nft_ct nft_fib_inet nft_reject_inet"
OPTIONAL_MODULES="virtio_rng"
# Applets /init uses.  Never one named busybox: a symlink loop makes the
# kernel fail to run /init with error -40.
APPLETS="sh mount mkdir insmod chroot env cat mv ln sync poweroff sleep
usleep chmod chown ip cp grep rm switch_root"

build_initrd() { # OUT
	local I=$T/initrd m deps kind path rel n=0
	mkdir -p "$I"/{bin,dev,proc,sys,host,ovl,etc} || return 1
	cp $BUSYBOX "$I/bin/busybox" || return 1
	for m in $APPLETS; do ln -s busybox "$I/bin/$m" || return 1; done
	: >"$T/modules.list"
	for m in $MODULES $OPTIONAL_MODULES; do
		if ! deps=$(modprobe -d "$KDIR" -S "$KVER" --show-depends "$m" 2>/dev/null); then
			case " $OPTIONAL_MODULES " in *" $m "*) continue ;; esac
			say "kernel $KVER has no module $m"
			return 1
		fi
		while read -r kind path _; do
			[ "$kind" = insmod ] || continue # builtin
			rel=${path#"$MODDIR"/}
			[ "$rel" != "$path" ] || { say "unexpected module path $path"; return 1; }
			grep -qxF -- "$rel" "$T/modules.list" || printf '%s\n' "$rel" >>"$T/modules.list"
		done <<<"$deps"
	done
	mkdir -p "$I/lib/modules" || return 1
	while read -r rel; do
		m=${rel##*/}
		case $rel in
		*.ko) cp "$MODDIR/$rel" "$I/lib/modules/$m" ;;
		*.ko.xz) xz -dc "$MODDIR/$rel" >"$I/lib/modules/${m%.xz}" ;;
		*.ko.zst) zstd -qdc "$MODDIR/$rel" >"$I/lib/modules/${m%.zst}" ;;
		*.ko.gz) gzip -dc "$MODDIR/$rel" >"$I/lib/modules/${m%.gz}" ;;
		*) say "unexpected module file $rel"; false ;;
		esac || return 1
		printf '/lib/modules/%s.ko\n' "${m%.ko*}" >>"$I/etc/modules"
		n=$((n + 1))
	done <"$T/modules.list"
	write_init >"$I/init" && chmod 755 "$I/init" || return 1
	(cd "$I" && find . -mindepth 1 | LC_ALL=C sort |
		cpio -o -H newc -R 0:0 --quiet) | gzip -n -1 >"$1" || return 1
	[ -z "$VERBOSE" ] || say "built initramfs for $KVER ($n modules)"
}

# The guest's /init (busybox sh).  The host leaves the command in the share
# (/run/berth-vm/cmd.sh in the guest) and finds the output (stdout, stderr)
# and the exit status (status) there; the serial console gets the rest.
write_init() {
	cat <<'EOF'
#!/bin/sh
# berth lvm-vm initramfs: mount the host's root over 9p, run the command
# the host left in the share inside it (chroot), report, power off.
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
exec </dev/null >/dev/console 2>&1
S=/host/run/berth-vm
fail() {
	echo "lvm-vm-init: $*"
	sync
	poweroff -f
	sleep 10
}
# Failures are expected for some (crc32c-intel without SSE4.2 under TCG).
while read -r ko; do
	insmod "$ko" 2>/dev/null
done </etc/modules

OPTS=trans=virtio,version=9p2000.L,msize=262144
i=0
until mount -t 9p -o "$OPTS,ro,cache=loose" hostroot /host 2>/dev/null; do
	i=$((i + 1))
	[ $i -le 100 ] || fail "cannot mount the host's root (9p hostroot)"
	usleep 50000
done
i=0
until [ -b /dev/vdb ]; do
	i=$((i + 1))
	[ $i -le 200 ] || fail "no /dev/vdb"
	usleep 50000
done
# --systemd: the host's root under a writable layer is the new root, and
# systemd its init.  /run (tmpfs, the share in it), the kernel's modules
# and the unit that runs the command are set here; systemd mounts /proc,
# /sys and /dev itself and leaves a /run that is already mounted.
if grep -q 'berth.init=systemd' /proc/cmdline; then
	R=/newroot
	mkdir -p $R /ovl &&
		mount -t tmpfs -o mode=755 tmpfs /ovl && mkdir -p /ovl/upper /ovl/work &&
		mount -t overlay -o lowerdir=/host,upperdir=/ovl/upper,workdir=/ovl/work overlay $R ||
		fail "cannot mount the root's writable layer"
	mount -t tmpfs -o mode=755,nosuid,nodev tmpfs $R/run || fail "cannot mount /run"
	mkdir -p $R/run/berth-vm && mount -t 9p -o "$OPTS" berthvm $R/run/berth-vm ||
		fail "cannot mount the share (9p berthvm)"
	S=$R/run/berth-vm
	read -r kver moddir <$S/modules || fail "no $S/modules"
	mkdir -p "$R/lib/modules/$kver" && mount -o bind "$R$moddir" "$R/lib/modules/$kver" ||
		fail "cannot bind the kernel's modules"
	if [ -s $S/rw-dir ]; then
		read -r d <$S/rw-dir
		mount -t 9p -o "$OPTS" berthrw "$R$d" || fail "cannot mount $d (9p berthrw)"
	fi
	# A container's marker (the host's root may be a container's, as on
	# these machines): systemd would then take its settings from its argv
	# rather than the kernel's command line, and run as in a container.
	rm -f $R/.dockerenv $R/run/.containerenv $R/.containerenv
	# Debian's tmpfiles.d/tmp.conf empties /tmp at boot ("D"): here that
	# would hide the host's /tmp (a command from a tree under /tmp).
	mkdir -p $R/etc/tmpfiles.d && echo 'd /tmp 1777 root root -' >$R/etc/tmpfiles.d/tmp.conf ||
		fail "cannot keep /tmp"
	cp $S/lvm-vm.target $S/lvm-vm-cmd.service $R/etc/systemd/system/ ||
		fail "cannot install the units"
	exec switch_root $R /lib/systemd/systemd
	fail "cannot start systemd"
fi
mount -t proc proc /host/proc || fail "cannot mount /host/proc"
mount -t sysfs sysfs /host/sys || fail "cannot mount /host/sys"
mount -t devtmpfs devtmpfs /host/dev || fail "cannot mount /host/dev"
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /host/dev/pts 2>/dev/null ||
	{ mkdir -p /host/dev/pts && mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /host/dev/pts; }
mkdir -p /host/dev/shm && mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /host/dev/shm
ln -sfn /proc/self/fd /host/dev/fd
ln -sfn /proc/self/fd/0 /host/dev/stdin
ln -sfn /proc/self/fd/1 /host/dev/stdout
ln -sfn /proc/self/fd/2 /host/dev/stderr
mount -t tmpfs -o mode=755,nosuid,nodev tmpfs /host/run || fail "cannot mount /host/run"
mkdir -p /host/run/lock /host/run/berth-vm
mount -t 9p -o "$OPTS" berthvm $S || fail "cannot mount the share (9p berthvm)"
# /tmp: the host's, read-only, under a writable tmpfs layer.
mount -t tmpfs -o mode=755 tmpfs /ovl && mkdir -p /ovl/upper /ovl/work &&
	chmod 1777 /ovl/upper &&
	mount -t overlay -o lowerdir=/host/tmp,upperdir=/ovl/upper,workdir=/ovl/work overlay /host/tmp ||
	mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /host/tmp ||
	fail "cannot mount /host/tmp"
# --rw-dir: a host directory, writable, at the same path.
if [ -s $S/rw-dir ]; then
	read -r d <$S/rw-dir
	mount -t 9p -o "$OPTS" berthrw "/host$d" || fail "cannot mount $d (9p berthrw)"
fi
# --overlay: host directories, read-only, under writable tmpfs layers
# ("MODE UID GID PATH" lines, parents first).
if [ -s $S/overlays ]; then
	mkdir -p /ovl2 && mount -t tmpfs -o mode=755 tmpfs /ovl2 || fail "cannot mount /ovl2"
	i=0
	while read -r mode uid gid d; do
		i=$((i + 1))
		mkdir -p /ovl2/$i/upper /ovl2/$i/work &&
			chown "$uid:$gid" /ovl2/$i/upper && chmod "$mode" /ovl2/$i/upper &&
			mount -t overlay -o "lowerdir=/host$d,upperdir=/ovl2/$i/upper,workdir=/ovl2/$i/work" \
				overlay "/host$d" || fail "cannot mount an overlay on $d"
	done <$S/overlays
fi
ip link set lo up || fail "cannot bring up lo"

env -i chroot /host /bin/bash /run/berth-vm/cmd.sh </dev/null >>$S/stdout 2>>$S/stderr
echo $? >$S/status.tmp && mv $S/status.tmp $S/status || fail "cannot write the status"
sync
poweroff -f
sleep 10
EOF
}

CACHE=${BERTH_CACHE:-/var/cache/berth}
INITRD=$T/initrd.img
key=$( { printf '%s\n' "$KVER"; cat -- "$SELF"; } | sha256sum | cut -c1-16)
cached=$CACHE/lvm-vm/initrd-$KVER-$key.img
if [ -f "$cached" ] && cp -- "$cached" "$INITRD" 2>/dev/null; then
	[ -z "$VERBOSE" ] || say "using cached initramfs $cached"
else
	build_initrd "$INITRD" || die "cannot build the initramfs"
	# Cache it (best effort); other versions go.
	if mkdir -p -- "$CACHE/lvm-vm" 2>/dev/null &&
		cp -- "$INITRD" "$cached.tmp.$$" 2>/dev/null &&
		mv -f -- "$cached.tmp.$$" "$cached"; then
		for f in "$CACHE"/lvm-vm/initrd-*.img; do
			[ "$f" = "$cached" ] || rm -f -- "$f"
		done
	else
		rm -f -- "$cached.tmp.$$"
	fi
fi

# -------------------------------------------------------------- share ---

SHARE=$T/share
mkdir -p "$SHARE" || die "cannot create $SHARE"
: >"$SHARE/stdout"
: >"$SHARE/stderr"
cat >"$SHARE/lvm.conf" <<'EOF'
# berth lvm-vm: LVM in a guest without udev, lvmetad, lvmpolld or dmeventd.
devices {
	obtain_device_list_from_udev = 0
	external_device_info_source = "none"
	use_devicesfile = 0
	global_filter = [ "a|^/dev/vd|", "r|.*|" ]
	filter = [ "a|^/dev/vd|", "r|.*|" ]
}
global {
	use_lvmpolld = 0
	event_activation = 0
}
activation {
	udev_sync = 0
	udev_rules = 0
	verify_udev_operations = 0
	monitoring = 0
}
backup {
	backup_dir = "/run/berth-lvm/backup"
	archive_dir = "/run/berth-lvm/archive"
}
EOF

# The command: bash in the chroot, with only the variables that matter.
{
	echo '# written by tests/guest/lvm-vm.sh on the host'
	while IFS= read -r name; do
		case $name in
		PATH | BERTH_* | LVM_*) ;;
		*) continue ;;
		esac
		case $name in
		LVM_SYSTEM_DIR | BERTH_LVM_DEVICE | LVM_SUPPRESS_FD_WARNINGS) continue ;;
		esac
		[[ $name =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || continue
		printf 'export %s=%q\n' "$name" "${!name}"
	done < <(compgen -e)
	echo 'export HOME=/root'
	echo 'export BERTH_LVM_DEVICE=/dev/vdb'
	echo 'export LVM_SYSTEM_DIR=/run/berth-lvm'
	echo 'export LVM_SUPPRESS_FD_WARNINGS=1'
	echo 'mkdir -p /run/berth-lvm/backup /run/berth-lvm/archive &&'
	echo '	cp /run/berth-vm/lvm.conf /run/berth-lvm/lvm.conf || exit 125'
	echo 'read -r up _ </proc/uptime && echo "$up" >/run/berth-vm/started'
	printf 'dir=%q\n' "$CWD"
	echo 'cd -- "$dir" || { echo "lvm-vm: cannot enter $dir in the VM" >&2; exit 125; }'
	echo 'unset dir up'

	printf 'exec'
	printf ' %q' "$@"
	printf '\n'
} >"$SHARE/cmd.sh" || die "cannot write $SHARE/cmd.sh"

[ -z "$OVERLAY_LINES" ] ||
	printf '%s' "$OVERLAY_LINES" | LC_ALL=C sort -k4 >"$SHARE/overlays" ||
	die "cannot write $SHARE/overlays"
# --systemd: what /init and systemd need (see write_init).
if [ -n "$SYSTEMD" ]; then
	printf '%s %s\n' "$KVER" "$MODDIR" >"$SHARE/modules" || die "cannot write $SHARE/modules"
	cat >"$SHARE/lvm-vm.target" <<'EOF2' || die "cannot write the target"
# written by tests/guest/lvm-vm.sh --systemd: the VM's default target
[Unit]
Description=berth lvm-vm: basic system and the host's command
Requires=basic.target
After=basic.target
Wants=lvm-vm-cmd.service
AllowIsolate=yes
EOF2
	cat >"$SHARE/lvm-vm-cmd.service" <<'EOF2' || die "cannot write the unit"
# written by tests/guest/lvm-vm.sh --systemd: runs the host's command,
# reports its status in the share and powers the VM off.
[Unit]
Description=berth lvm-vm: the host's command
After=basic.target

[Service]
Type=oneshot
TimeoutStartSec=infinity
StandardInput=null
StandardOutput=journal+console
ExecStart=/bin/sh /run/berth-vm/run.sh
# When run.sh did not get to report (the unit failed or was killed): the
# journal of this boot goes to the share, and the VM off.
ExecStopPost=/bin/sh /run/berth-vm/after.sh
EOF2
	cat >"$SHARE/after.sh" <<'EOF2' || die "cannot write after.sh"
# written by tests/guest/lvm-vm.sh --systemd
S=/run/berth-vm
[ -e $S/status ] && exit 0
journalctl -b --no-pager >$S/journal 2>&1
echo "lvm-vm: lvm-vm-cmd.service ended ($SERVICE_RESULT, $EXIT_CODE $EXIT_STATUS) before the command reported; the VM's journal is in the share" >>$S/stderr
sync
systemctl poweroff --force --force
EOF2
	cat >"$SHARE/run.sh" <<'EOF2' || die "cannot write run.sh"
# written by tests/guest/lvm-vm.sh --systemd
S=/run/berth-vm
env -i /bin/bash $S/cmd.sh </dev/null >>$S/stdout 2>>$S/stderr
echo $? >$S/status.tmp && mv $S/status.tmp $S/status
sync
systemctl poweroff --force --force
EOF2
fi
RW_ARGS=()
if [ -n "$RW_DIR" ]; then
	printf '%s\n' "$RW_DIR" >"$SHARE/rw-dir"
	RW_ARGS=(-virtfs "local,path=$(q "$RW_DIR"),mount_tag=berthrw,security_model=none,id=fs2")
fi
truncate -s "$DISK_SIZE" "$T/disk.raw" || die "cannot create the $DISK_SIZE disk"

# --------------------------------------------------------------- boot ---

SETUP=$(elapsed "$T0")
SERIAL=$T/serial.log
CMDLINE="console=ttyS0 quiet panic=-1 mitigations=off"
[ -z "$SYSTEMD" ] || CMDLINE+=" berth.init=systemd systemd.unit=lvm-vm.target systemd.show_status=error systemd.journald.forward_to_console=1"
QSTART=$(now)
$QEMU -name berth-lvm-vm -accel tcg -machine pc -m "$MEM_MIB" -smp "$CPUS" \
	-nodefaults -no-user-config -display none -no-reboot \
	-chardev "file,id=ser0,path=$(q "$SERIAL")" -serial chardev:ser0 \
	-kernel "$KERNEL" -initrd "$INITRD" -append "$CMDLINE" \
	-virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap,id=fs0 \
	-virtfs "local,path=$(q "$SHARE"),mount_tag=berthvm,security_model=none,id=fs1" \
	"${RW_ARGS[@]}" \
	-object rng-random,id=rng0,filename=/dev/urandom \
	-device virtio-rng-pci,rng=rng0 \
	-blockdev driver=null-co,node-name=vda0,size=1048576,read-zeroes=on,read-only=on \
	-device virtio-blk-pci,drive=vda0,addr=0x8 \
	-drive "file=$(q "$T/disk.raw"),format=raw,if=none,id=vdb0,cache=unsafe" \
	-device virtio-blk-pci,drive=vdb0,addr=0x9 \
	</dev/null >"$T/qemu.log" 2>&1 &
QPID=$!

# CMD's output, as it comes.
tail -c +1 -s 0.1 --pid=$QPID -f "$SHARE/stdout" &
TAILS+=($!)
tail -c +1 -s 0.1 --pid=$QPID -f "$SHARE/stderr" >&2 &
TAILS+=($!)

deadline=$(awk -v s="$QSTART" -v t="$TIMEOUT" 'BEGIN { printf "%.0f", s + t }')
STARTED=
while kill -0 $QPID 2>/dev/null; do
	if [ -z "$STARTED" ] && [ -s "$SHARE/started" ]; then
		STARTED=$(elapsed "$QSTART")
	fi
	if [ "$(date +%s)" -ge "$deadline" ]; then
		kill -KILL $QPID 2>/dev/null
		wait $QPID 2>/dev/null
		QPID=
		for p in "${TAILS[@]}"; do wait "$p" 2>/dev/null; done
		TAILS=()
		if [ -n "$STARTED" ]; then
			say "timed out after $TIMEOUT s: killed the VM (the command had started $STARTED s after QEMU)"
		else
			say "timed out after $TIMEOUT s: killed the VM (the command never started); last lines of its console:"
			tail -n "${LVM_VM_CONSOLE_LINES:-30}" "$SERIAL" >&2
		fi
		exit 124
	fi
	sleep 0.1
done
wait $QPID
qrc=$?
QPID=
for p in "${TAILS[@]}"; do wait "$p" 2>/dev/null; done
TAILS=()

status=$(cat "$SHARE/status" 2>/dev/null)
# A Ctrl-C reaches QEMU too (same process group): it stops at once.
sig=$(sed -n 's/.*terminating on signal \([0-9][0-9]*\).*/\1/p' "$T/qemu.log" | head -n 1)
if [[ ! $status =~ ^[0-9]+$ ]] && [ -n "$sig" ]; then
	say "QEMU was stopped by signal $sig"
	exit $((128 + sig))
fi
if [[ ! $status =~ ^[0-9]+$ ]]; then
	say "the VM never reported a status (QEMU exited with $qrc); last lines of its console:"
	tail -n "${LVM_VM_CONSOLE_LINES:-30}" "$SERIAL" >&2
	if [ -s "$SHARE/journal" ]; then
		say "the end of the VM's journal (--systemd):"
		tail -n "${LVM_VM_CONSOLE_LINES:-30}" "$SHARE/journal" >&2
	fi
	if [ -s "$T/qemu.log" ]; then
		say "QEMU said:"
		tail -n 10 "$T/qemu.log" >&2
	fi
	exit 125
fi
if [ -n "$VERBOSE" ]; then
	[ -n "$STARTED" ] || STARTED=$(elapsed "$QSTART")
	say "kernel $KVER ($(basename -- "$KERNEL")); setup ${SETUP} s;" \
		"QEMU start -> command ${STARTED} s (guest uptime $(cat "$SHARE/started" 2>/dev/null) s);" \
		"total $(elapsed "$T0") s; status $status"
fi
exit "$status"
