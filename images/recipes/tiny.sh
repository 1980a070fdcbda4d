#!/bin/bash
# Build berth's "tiny" test guest image from Debian packages, without mounts.
#
#   images/recipes/tiny.sh OUTDIR
#
# Writes OUTDIR/vmlinuz, OUTDIR/initrd.img, OUTDIR/root.qcow2 and
# OUTDIR/image.json.  Run as root (the root filesystem's files must be owned
# by root).  Needs the host packages deploy/install-deps.sh installs for
# "run": busybox-static, dropbear-bin, openssh-sftp-server, rsync, kmod,
# cpio, e2fsprogs, qemu-utils (and xz-utils for BERTH_TINY_PVH=1).
#
# The kernel is Debian's: linux-image-amd64 is resolved to the real package
# (linux-image-VERSION), which is downloaded with `apt-get download` and
# unpacked with `dpkg-deb -x` (never installed), by images/recipes/kernel.sh.
# The .deb and the unpacked kernel + modules are kept in $BERTH_CACHE
# (default /var/cache/berth), so a rebuild takes about two seconds.
#
# The guest (what hostd relies on):
#  - root is /dev/vda, ext4, rw; PID 1 is busybox init (/etc/inittab,
#    /etc/rc); /proc, /sys, /dev (devtmpfs), /dev/pts, /tmp (tmpfs), /run.
#  - at every boot /etc/rc reads a cloud-init NoCloud seed (ISO 9660 volume
#    labelled "cidata" on a virtio disk, normally /dev/vdb): the hostname
#    from meta-data's local-hostname (or user-data's hostname), the keys of
#    user-data's ssh_authorized_keys into /root/.ssh/authorized_keys (the
#    file is replaced by the seed's keys).  /etc/berth-identity gives a
#    running machine (a live fork, a template's) its identity, handed by
#    hostd on stdin.
#  - eth0 via busybox udhcpc (boot waits at most ~5 s for a lease, then it
#    keeps trying in the background); dropbear on port 22 (under
#    /etc/dropbear-loop, which restarts it at once for a new host key),
#    keys only, with
#    OpenSSH's sftp-server (so scp and sftp work) and rsync (so `rsync -e
#    ssh` works); dropbear's client dbclient (it can use a forwarded agent).
#  - the ACPI power button (virDomainShutdown, QEMU system_powerdown) powers
#    off cleanly (busybox acpid); `poweroff` and `reboot` work.
#  - root shells on ttyS0 and tty1; boot messages on ttyS0.
#  - /usr/bin/clipagent: the guest side of the SPICE agent's clipboard on
#    the com.redhat.spice.0 virtio port (images/recipes/tiny/clipagent.c),
#    started by the desktop test, not at boot.
#  - /usr/bin/webserve: a small HTTP/1.1 and WebSocket server for the
#    previews' tests and benchmark (images/recipes/tiny/webserve.c), not
#    started at boot; busybox's httpd is there too.
set -Eeuo pipefail
umask 022

NAME=tiny
CMDLINE="console=tty1 console=ttyS0 root=/dev/vda rw quiet"
ROOT_SIZE=256M
# Modules the initramfs loads (with their dependencies, in this order).
# A name the kernel has built in is skipped.
MODULES="virtio_pci virtio_blk virtio_net ext4 crc32c_generic isofs af_packet
button evdev virtio_console"
# Loaded when this kernel has them, silently skipped otherwise.
OPTIONAL_MODULES="virtio_rng psmouse"

# BERTH_TINY_PVH=1: also write OUTDIR/vmlinux, the kernel uncompressed, and
# name it in image.json.  QEMU boots such an ELF through its PVH entry point
# and skips the real-mode setup and the in-guest decompression of vmlinuz:
# under TCG the guest answers ssh about 3 s sooner (4 s instead of 7 s);
# the price is a 65 MB file instead of 8 MB.
PVH=
case ${BERTH_TINY_PVH:-0} in
1 | yes | true) PVH=1 ;;
0 | no | false | "") ;;
*) echo "tiny: error: BERTH_TINY_PVH must be 0 or 1" >&2; exit 2 ;;
esac

# BERTH_TINY_FB=1 (images/recipes/tiny-fb.sh): a graphical framebuffer.  The
# initramfs also loads bochs (DRM driver of QEMU's std VGA, libvirt's
# <model type='vga'/>) and the kernel command line asks for 1280x800, so the
# guest has /dev/fb0 at 1280x800x32 and tty1 on fbcon.  For the desktop
# benchmark (bench/desktop.py --fb); the default image keeps the VGA text
# console that tests read.
FB=
case ${BERTH_TINY_FB:-0} in
1 | yes | true)
	FB=1
	NAME=tiny-fb
	MODULES="$MODULES bochs"
	CMDLINE="$CMDLINE video=1280x800 consoleblank=0"
	;;
0 | no | false | "") ;;
*) echo "tiny: error: BERTH_TINY_FB must be 0 or 1" >&2; exit 2 ;;
esac

say() { printf 'tiny: %s\n' "$*" >&2; }
die() {
	trap - ERR
	printf 'tiny: error: %s\n' "$*" >&2
	exit 1
}
on_error() { # STATUS LINE COMMAND
	trap - ERR
	printf 'tiny: error: command failed (exit %s) at line %s: %s\n' "$1" "$2" "$3" >&2
	exit "$1"
}
trap 'on_error $? $LINENO "$BASH_COMMAND"' ERR

if [ $# -ne 1 ] || [ -z "$1" ]; then
	echo "usage: $0 OUTDIR" >&2
	exit 2
fi
OUT=$1
CACHE=${BERTH_CACHE:-/var/cache/berth}

[ "$(id -u)" = 0 ] || die "must run as root (the root filesystem's files must belong to root)"
for tool in apt-get apt-cache dpkg-deb depmod modprobe cpio gzip mke2fs \
	qemu-img ldd flock cc; do
	command -v "$tool" >/dev/null 2>&1 ||
		die "$tool not found (run deploy/install-deps.sh run)"
done
BUSYBOX=/bin/busybox
[ -x $BUSYBOX ] || die "$BUSYBOX not found (install busybox-static)"
if ldd $BUSYBOX >/dev/null 2>&1; then
	die "$BUSYBOX is dynamically linked (install busybox-static)"
fi
DROPBEAR=/usr/sbin/dropbear
DROPBEARKEY=/usr/bin/dropbearkey
DBCLIENT=/usr/bin/dbclient
# The seed's host key is OpenSSH's format; dropbear reads its own.
DROPBEARCONVERT=/usr/lib/dropbear/dropbearconvert
if [ ! -x $DROPBEAR ] || [ ! -x $DROPBEARKEY ] || [ ! -x $DBCLIENT ] ||
	[ ! -x $DROPBEARCONVERT ]; then
	die "dropbear not found (install dropbear-bin)"
fi
# OpenSSH's scp speaks SFTP by default (and sftp always): dropbear runs
# /usr/lib/sftp-server for it.
SFTP_SERVER=/usr/lib/openssh/sftp-server
[ -x $SFTP_SERVER ] || die "$SFTP_SERVER not found (install openssh-sftp-server)"
# `rsync -e ssh` runs rsync on the far side too.
RSYNC=/usr/bin/rsync
[ -x $RSYNC ] || die "$RSYNC not found (install rsync)"

START=$(date +%s.%N)

# Everything temporary lives in $TMP or in the paths listed in $CLEAN; the
# EXIT trap removes them, also after a failure or a signal.
TMP=
CLEAN=()
cleanup() {
	local p
	for p in "${CLEAN[@]}"; do
		rm -rf -- "$p"
	done
	if [ -n "$TMP" ]; then
		rm -rf -- "$TMP"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP
TMP=$(mktemp -d "${TMPDIR:-/tmp}/berth-tiny.XXXXXX")

mkdir -p -- "$CACHE/debs" "$CACHE/kernel"
# One build at a time per cache.
exec 9>"$CACHE/.lock"
flock -w 900 9 || die "timed out waiting for the lock on $CACHE"

# ---------------------------------------------------------------- kernel ---

# shellcheck source=SCRIPTDIR/kernel.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/kernel.sh"
kinfo=$(berth_kernel -p tiny) || exit 1
KVER=${kinfo%% *}
KDIR=${kinfo#* }
MODDIR=$KDIR/lib/modules/$KVER

# --------------------------------------------------------------- initrd ---

say "building initrd for $KVER"
I=$TMP/initrd
mkdir -p "$I"/{bin,sbin,usr/bin,usr/sbin,dev,proc,sys,run,tmp,newroot,etc}
cp $BUSYBOX "$I/bin/busybox"
# Only the applets /init uses (busybox sh would find them anyway).  Never a
# link named busybox: a symlink loop makes the kernel fail to run /init
# with error -40.
for a in sh cat dd mount umount insmod findfs usleep setsid cttyhack \
	switch_root; do
	ln -s busybox "$I/bin/$a"
done
mknod -m 600 "$I/dev/console" c 5 1
mknod -m 666 "$I/dev/null" c 1 3

# Module load list: dependencies first, each module once.
modlist=$TMP/modules.list
: >"$modlist"
for m in $MODULES $OPTIONAL_MODULES; do
	if ! deps=$(modprobe -d "$KDIR" -S "$KVER" --show-depends "$m" 2>/dev/null); then
		case " $OPTIONAL_MODULES " in
		*" $m "*) continue ;;
		esac
		die "kernel $KVER has no module $m"
	fi
	printf '%s\n' "$deps" | while read -r kind path _; do
		[ "$kind" = insmod ] || continue
		rel=${path#"$MODDIR"/}
		[ "$rel" != "$path" ] || die "unexpected module path $path"
		grep -qxF -- "$rel" "$modlist" || printf '%s\n' "$rel" >>"$modlist"
	done
done
nmod=0
while read -r rel; do
	mkdir -p "$I/lib/modules/$KVER/${rel%/*}"
	case $rel in
	*.ko) cp "$MODDIR/$rel" "$I/lib/modules/$KVER/$rel" ;;
	*.ko.xz) xz -dc "$MODDIR/$rel" >"$I/lib/modules/$KVER/${rel%.xz}" ;;
	*.ko.zst) zstd -qdc "$MODDIR/$rel" >"$I/lib/modules/$KVER/${rel%.zst}" ;;
	*.ko.gz) gzip -dc "$MODDIR/$rel" >"$I/lib/modules/$KVER/${rel%.gz}" ;;
	*) die "unexpected module file $rel" ;;
	esac
	printf '%s\n' "/lib/modules/$KVER/${rel%.ko*}.ko" >>"$I/etc/modules"
	nmod=$((nmod + 1))
done <"$modlist"

cat >"$I/init" <<'EOF'
#!/bin/sh
# berth tiny initramfs: load the modules, mount the root, switch to it.
export PATH=/sbin:/bin:/usr/sbin:/usr/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
exec </dev/console >/dev/console 2>&1
# Block on /dev/random in the background: this starts the kernel's entropy
# collection now, so that the random pool is ready (dropbear waits for it)
# about a second earlier than when the first reader comes along later.
dd if=/dev/random of=/dev/null bs=1 count=1 2>/dev/null &

rescue() {
	echo "tiny-init: $*"
	echo "tiny-init: starting a rescue shell"
	exec setsid cttyhack sh
}

root=/dev/vda fstype=ext4 flags= mode=rw init=/sbin/init
for arg in $(cat /proc/cmdline); do
	case $arg in
	root=*) root=${arg#root=} ;;
	rootfstype=*) fstype=${arg#rootfstype=} ;;
	rootflags=*) flags=,${arg#rootflags=} ;;
	ro) mode=ro ;;
	rw) mode=rw ;;
	init=*) init=${arg#init=} ;;
	rdshell) rescue "rdshell on the command line" ;;
	esac
done

# Failures are expected for some (crc32c-intel without SSE4.2 under TCG).
while read -r ko; do
	insmod "$ko" 2>/dev/null
done </etc/modules

i=0
while :; do
	case $root in
	LABEL=* | UUID=*) dev=$(findfs "$root" 2>/dev/null) ;;
	*) dev=$root ;;
	esac
	[ -n "$dev" ] && [ -b "$dev" ] && break
	i=$((i + 1))
	[ $i -le 300 ] || rescue "root device $root did not appear"
	usleep 50000
done

mount -t "$fstype" -o "$mode$flags" "$dev" /newroot ||
	rescue "cannot mount $dev ($fstype, $mode$flags) on /newroot"
[ -x "/newroot$init" ] || [ -L "/newroot$init" ] || rescue "no $init on $dev"
mount --move /dev /newroot/dev 2>/dev/null || umount /dev
umount /sys
umount /proc
exec switch_root /newroot "$init"
rescue "switch_root failed"
EOF
chmod 755 "$I/init"
(cd "$I" && find . -mindepth 1 | LC_ALL=C sort |
	cpio -o -H newc -R 0:0 --quiet) | gzip -n -6 >"$TMP/initrd.img"

# ----------------------------------------------------------- root files ---

say "building root filesystem"
R=$TMP/root
mkdir -p "$R"/{bin,sbin,usr/bin,usr/sbin,usr/lib,lib,lib64,dev,proc,sys,run,tmp,mnt,home,etc,var/log,var/lib}
mkdir -p "$R"/etc/{dropbear,udhcpc,acpi/PWRF}
mkdir -m 700 "$R/root"
chmod 1777 "$R/tmp"
ln -s /run "$R/var/run"
mknod -m 600 "$R/dev/console" c 5 1
mknod -m 666 "$R/dev/null" c 1 3
cp $BUSYBOX "$R/bin/busybox"
# One symlink per applet, where busybox --list-full puts it.
$BUSYBOX --list-full | while read -r a; do
	case $a in
	bin/busybox | linuxrc) continue ;;
	esac
	ln -s /bin/busybox "$R/$a"
done

# The clipboard's guest side (desktop tests): clipagent speaks the SPICE
# agent protocol on the com.redhat.spice.0 virtio port (virtio_console).
cc -static -O2 -Wall -o "$R/usr/bin/clipagent" \
	"$(dirname -- "${BASH_SOURCE[0]}")/tiny/clipagent.c" ||
	die "cannot build clipagent"
# What the guest reaches, for the network tests and benchmarks (TCP and
# UDP probes, a stream, throughput, round trips: busybox's nc has none).
cc -static -O2 -Wall -o "$R/usr/bin/netprobe" \
	"$(dirname -- "${BASH_SOURCE[0]}")/tiny/netprobe.c" ||
	die "cannot build netprobe"
# A web server for previews (t480, bench/preview.py): HTTP/1.1 with
# keep-alive, streamed bodies both ways, a WebSocket echo.
cc -static -O2 -Wall -pthread -o "$R/usr/bin/webserve" \
	"$(dirname -- "${BASH_SOURCE[0]}")/tiny/webserve.c" ||
	die "cannot build webserve"

# dropbear, dbclient, sftp-server, rsync and exactly the libraries ldd
# lists, plus the loader.
cp $DROPBEAR "$R/usr/sbin/dropbear"
cp $DROPBEARKEY "$R/usr/bin/dropbearkey"
cp $DBCLIENT "$R/usr/bin/dbclient"
cp $DROPBEARCONVERT "$R/usr/bin/dropbearconvert"
cp $SFTP_SERVER "$R/usr/lib/sftp-server"
cp $RSYNC "$R/usr/bin/rsync"
for lib in $( (ldd $DROPBEAR; ldd $DROPBEARKEY; ldd $DBCLIENT; ldd $DROPBEARCONVERT
	ldd $SFTP_SERVER; ldd $RSYNC) |
	awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | sort -u); do
	mkdir -p "$R${lib%/*}"
	[ -e "$R$lib" ] || cp -L "$lib" "$R$lib"
done
[ -n "$(ls "$R/lib64")" ] || die "ldd listed no loader for $DROPBEAR"

# tiny-fb: fbflip (tiny-fb/fbflip.c), which shows whole frames in turn by
# page flipping, for bench/desktop.py; static, so it needs no more libraries.
if [ -n "$FB" ]; then
	cc -static -O2 -Wall -o "$R/usr/bin/fbflip" \
		"$(dirname -- "${BASH_SOURCE[0]}")/tiny-fb/fbflip.c" ||
		die "cannot build fbflip (static linking needs libc6-dev)"
fi

cat >"$R/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
EOF
# A non-empty password field (dropbear rejects blank ones) that no password
# matches: root logs in with keys only.
cat >"$R/etc/shadow" <<'EOF'
root:*:19000:0:99999:7:::
nobody:*:19000:0:99999:7:::
EOF
chmod 600 "$R/etc/shadow"
cat >"$R/etc/group" <<'EOF'
root:x:0:
tty:x:5:
nogroup:x:65534:
EOF
printf '/bin/sh\n/bin/ash\n' >"$R/etc/shells"
echo "$NAME" >"$R/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\n' \
	"$NAME" >"$R/etc/hosts"
: >"$R/etc/resolv.conf"
cat >"$R/etc/fstab" <<'EOF'
/dev/vda	/	ext4	rw	0	1
proc	/proc	proc	defaults	0	0
sysfs	/sys	sysfs	defaults	0	0
devpts	/dev/pts	devpts	gid=5,mode=620,ptmxmode=666	0	0
tmpfs	/tmp	tmpfs	mode=1777,nosuid,nodev	0	0
tmpfs	/run	tmpfs	mode=755,nosuid,nodev	0	0
EOF
cat >"$R/etc/os-release" <<EOF
PRETTY_NAME="berth tiny (busybox, dropbear, Debian kernel $KVER)"
NAME="berth tiny"
ID=berth-tiny
EOF
cat >"$R/etc/profile" <<'EOF'
export PATH=/sbin:/bin:/usr/sbin:/usr/bin
export HOME=${HOME:-/root}
[ -n "$TERM" ] && [ "$TERM" != dumb ] || export TERM=vt100
PS1='\u@\h:\w\$ '
# What berth writes there (the credential broker's NAME_BASE_URL).
for f in /etc/profile.d/*.sh; do [ -r "$f" ] && . "$f"; done
unset f
EOF

cat >"$R/etc/inittab" <<'EOF'
# berth tiny: busybox init
::sysinit:/etc/rc
::respawn:/sbin/acpid -f -c /etc/acpi -l /var/log/acpid.log
::respawn:/etc/dropbear-loop
ttyS0::respawn:-/bin/sh
tty1::respawn:-/bin/sh
::ctrlaltdel:/sbin/reboot
::shutdown:/etc/rc.shutdown
::restart:/sbin/init
EOF

# dropbear's listener.  busybox init waits a second after a child ends
# before it respawns it; berth-identity (and berth-seed --live) end the
# listener so that it reads a new host key, and the machine is not ready
# until it answers with it: this loop starts it again at once when they
# asked (a non-empty /run/dropbear.restart), else a second later, as init
# would.  The listener's parent is this loop, not init.
cat >"$R/etc/dropbear-loop" <<'EOF'
#!/bin/sh
while :; do
	/usr/sbin/dropbear -F -E -s -R -p 22 -W 262144 2>>/var/log/dropbear.log
	if [ -s /run/dropbear.restart ]; then : >/run/dropbear.restart; else sleep 1; fi
done
EOF
chmod 755 "$R/etc/dropbear-loop"

# The ACPI power button: busybox acpid maps KEY_POWER to the action
# PWRF/00000080 and runs that file from its config directory.
cat >"$R/etc/acpi/PWRF/00000080" <<'EOF'
#!/bin/sh
echo poweroff >/run/shutdown-request
exec /bin/busybox poweroff
EOF
chmod 755 "$R/etc/acpi/PWRF/00000080"

cat >"$R/etc/udhcpc/default.script" <<'EOF'
#!/bin/sh
# busybox udhcpc event script: address, default route, resolv.conf.
[ -n "$1" ] || exit 1
case $1 in
deconfig)
	ip -4 addr flush dev "$interface" 2>/dev/null
	ip link set "$interface" up
	;;
bound | renew)
	ifconfig "$interface" "$ip" netmask "${subnet:-255.255.255.0}" \
		${broadcast:+broadcast "$broadcast"} up
	if [ -n "$router" ]; then
		while ip route del default dev "$interface" 2>/dev/null; do :; done
		metric=0
		for r in $router; do
			ip route add default via "$r" dev "$interface" metric $metric
			metric=$((metric + 1))
		done
	fi
	{
		[ -n "$domain" ] && echo "search $domain"
		for s in $dns; do echo "nameserver $s"; done
	} >/etc/resolv.conf.new
	mv -f /etc/resolv.conf.new /etc/resolv.conf
	[ "$1" = bound ] && echo "udhcpc: $interface is $ip/${mask:-$subnet} via ${router:-none}"
	;;
leasefail | nak)
	;;
esac
exit 0
EOF
chmod 755 "$R/etc/udhcpc/default.script"

cat >"$R/etc/berth-seed" <<'EOF'
#!/bin/sh
# berth tiny: apply the cloud-init NoCloud seed hostd gives every machine:
# the hostname, root's authorized keys (replaced by the seed's) and the SSH
# host key (ssh_keys' ed25519_private, converted for dropbear).  Run by
# /etc/rc at every boot; `berth-seed --live` applies it to a running guest
# (a live fork, which runs with its source's memory) and restarts dropbear's
# listener so that it presents the new host key (sessions stay).
export PATH=/sbin:/bin:/usr/sbin:/usr/bin
umask 022

# ---- cloud-init NoCloud seed: ISO 9660 labelled cidata on a virtio disk.
mkdir -p -m 700 /etc/dropbear
iso_label() { # DEV: the ISO 9660 volume label, or fail
	[ "$(dd if="$1" bs=1 skip=32769 count=5 2>/dev/null)" = CD001 ] || return 1
	dd if="$1" bs=1 skip=32808 count=32 2>/dev/null | tr -d ' \0'
}
find_seed() {
	for l in cidata CIDATA; do
		d=$(findfs "LABEL=$l" 2>/dev/null) && [ -b "$d" ] && { echo "$d"; return 0; }
	done
	for d in /dev/vd[b-z] /dev/vda /dev/sr[0-9]; do
		[ -b "$d" ] || continue
		case $(iso_label "$d") in
		cidata | CIDATA) echo "$d"; return 0 ;;
		esac
	done
	return 1
}
# First "KEY: value" of a top-level key, without quotes, comment or CR.
yaml_value() { # FILE KEY
	[ -f "$1" ] || return 0
	sed -n -e 's/\r$//' -e "s/^$2:[[:space:]]*//p" "$1" | head -n 1 |
		sed -e 's/[[:space:]]#.*$//' -e 's/[[:space:]]*$//' \
			-e 's/^"\(.*\)"$/\1/' -e "s/^'\(.*\)'\$/\1/"
}
# The entries of ssh_authorized_keys (block or one-line flow list).
yaml_keys() { # FILE
	awk '
	function unq(v) {
		sub(/^[ \t]+/, "", v); sub(/[ \t]+$/, "", v)
		if (v ~ /^".*"$/ || v ~ /^\047.*\047$/) v = substr(v, 2, length(v) - 2)
		return v
	}
	{ sub(/\r$/, "") }
	/^[ \t]*ssh_authorized_keys:/ {
		match($0, /^[ \t]*/); ind = RLENGTH
		rest = $0; sub(/^[ \t]*ssh_authorized_keys:[ \t]*/, "", rest)
		if (rest ~ /^\[/) {
			sub(/^\[/, "", rest); sub(/\][ \t]*$/, "", rest)
			n = split(rest, a, ",")
			for (i = 1; i <= n; i++) { v = unq(a[i]); if (v != "") print v }
			next
		}
		inlist = 1; next
	}
	inlist && /^[ \t]*(#.*)?$/ { next }
	inlist && /^[ \t]*-([ \t]|$)/ {
		match($0, /^[ \t]*/)
		if (RLENGTH >= ind) {
			v = $0; sub(/^[ \t]*-[ \t]*/, "", v); v = unq(v)
			if (v != "") print v
			next
		}
	}
	{ inlist = 0 }
	' "$1"
}

# The block "ed25519_private: |" of ssh_keys: its indented lines, the
# indentation removed (cloud-init's ssh_keys, hostd/seed.c).
yaml_host_key() { # FILE
	awk '
	{ sub(/\r$/, "") }
	inkey && /^[ \t]*$/ { next }
	inkey {
		match($0, /^[ \t]*/)
		if (RLENGTH > ind) { print substr($0, RLENGTH + 1); next }
		inkey = 0
	}
	/^[ \t]*ed25519_private:[ \t]*\|[ \t]*$/ { match($0, /^[ \t]*/); ind = RLENGTH; inkey = 1 }
	' "$1"
}

seed=$(find_seed) || seed=
hostkey=
if [ -n "$seed" ]; then
	mkdir -p /run/seed
	if mount -t iso9660 -o ro "$seed" /run/seed 2>/dev/null; then
		name=$(yaml_value /run/seed/meta-data local-hostname)
		[ -n "$name" ] || name=$(yaml_value /run/seed/user-data hostname)
		case $name in
		"") ;;
		*[!A-Za-z0-9.-]* | -* | .*) echo "tiny: ignoring invalid hostname '$name' in the seed" ;;
		*) echo "$name" >/etc/hostname ;;
		esac
		mkdir -p -m 700 /root/.ssh
		chmod 700 /root/.ssh
		if [ -f /run/seed/user-data ]; then
			yaml_keys /run/seed/user-data >/root/.ssh/authorized_keys.new
		else
			: >/root/.ssh/authorized_keys.new
		fi
		chmod 600 /root/.ssh/authorized_keys.new
		mv -f /root/.ssh/authorized_keys.new /root/.ssh/authorized_keys
		echo "tiny: seed $seed: hostname '$(cat /etc/hostname)'," \
			"$(grep -c . /root/.ssh/authorized_keys) ssh key(s)"
		# The machine's own host key, which hostd pins.
		if [ -f /run/seed/user-data ]; then
			(umask 077 && yaml_host_key /run/seed/user-data >/run/seed-host-key)
			if grep -q 'BEGIN OPENSSH PRIVATE KEY' /run/seed-host-key &&
				dropbearconvert openssh dropbear /run/seed-host-key \
					/etc/dropbear/dropbear_ed25519_host_key.new >/dev/null 2>&1; then
				mv -f /etc/dropbear/dropbear_ed25519_host_key.new \
					/etc/dropbear/dropbear_ed25519_host_key
				hostkey=seed
			fi
			rm -f /run/seed-host-key /etc/dropbear/dropbear_ed25519_host_key.new
		fi
		umount /run/seed
	else
		echo "tiny: cannot mount the seed $seed"
	fi
else
	echo "tiny: no cidata seed found"
fi

# ---- hostname
hostname -F /etc/hostname 2>/dev/null || hostname tiny
name=$(hostname)
printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\n' \
	"$name" >/etc/hosts

# ---- ssh host key: the seed's, else one made once (the others are made
# on demand by dropbear -R)
[ -n "$hostkey" ] && echo "tiny: the seed's ssh host key"
if [ ! -s /etc/dropbear/dropbear_ed25519_host_key ]; then
	dropbearkey -t ed25519 -f /etc/dropbear/dropbear_ed25519_host_key >/dev/null 2>&1 ||
		echo "tiny: dropbearkey failed"
fi

if [ "${1:-}" = --live ]; then
	sync
	# The listener (a dropbear whose parent is no dropbear: the session
	# that runs this is its child) is restarted by /etc/dropbear-loop with
	# the new key.  All of them are found first: once it is gone, the
	# session that runs this is init's child, and must not be killed.
	listeners=
	for d in /proc/[0-9]*; do
		read -r st 2>/dev/null <"$d/stat" || continue
		case $st in *" (dropbear) "*) ;; *) continue ;; esac
		set -- ${st##*) }
		read -r pst 2>/dev/null <"/proc/$2/stat" || pst=
		case $pst in *" (dropbear) "*) ;; *) listeners="$listeners ${d#/proc/}" ;; esac
	done
	echo 1 >/run/dropbear.restart
	[ -n "$listeners" ] && kill $listeners
	echo "tiny: seed applied live; dropbear restarted"
fi
exit 0
EOF
chmod 755 "$R/etc/berth-seed"

# berth-identity: the identity of a machine started from another's memory
# (a live fork, a machine from a template) in one SSH command, handed on
# stdin by hostd (docs/architecture.md, "Live identity"): lines "KEY VALUE"
# (hostname, random, machine-id, authorized-key; host-key: one line of the
# OpenSSH PEM each), then "end".  Under TCG each process costs 50-100 ms,
# so this uses the shell's builtins (read, echo, kill) and forks only for
# dropbearconvert and the renames; berth-seed --live re-reads the seed and
# took ~30 processes.  Exits 0 when all of it is applied.
cat >"$R/etc/berth-identity" <<'EOF'
#!/bin/sh
export PATH=/sbin:/bin:/usr/sbin:/usr/bin
umask 077
fail() { echo "berth-identity: $*" >&2; exit 1; }
name= rnd= mid= keys= pem=/run/berth-identity.pem end=
: >"$pem" || fail "cannot write $pem"
while read -r k v; do
	case $k in
	hostname) name=$v ;;
	random) rnd=$v ;;
	machine-id) mid=$v ;;
	authorized-key) keys="$keys$v
" ;;
	host-key) echo "$v" >>"$pem" ;;
	end) end=1; break ;;
	*) fail "unknown input '$k'" ;;
	esac
done
[ -n "$end" ] || fail "input ends early"
case $name in
"" | *[!A-Za-z0-9.-]* | -* | .*) fail "invalid hostname '$name'" ;;
esac
case $rnd in "" | *[!0-9a-f]*) fail "invalid random" ;; esac
case $mid in *[!0-9a-f]*) fail "invalid machine-id" ;; esac
[ -z "$mid" ] || [ ${#mid} = 32 ] || fail "invalid machine-id"
# The host's randomness first: the restarted dropbear seeds from it.
echo "$rnd" >/dev/urandom
k=/etc/dropbear/dropbear_ed25519_host_key
[ -e "$k.new" ] && rm -f "$k.new"
dropbearconvert openssh dropbear "$pem" "$k.new" >/dev/null 2>&1 && [ -s "$k.new" ] ||
	{ : >"$pem"; fail "cannot convert the host key"; }
: >"$pem"
mv -f "$k.new" "$k" || fail "cannot install the host key"
# The listener (a dropbear whose parent is no dropbear) is restarted at
# once by /etc/dropbear-loop with the new key; sessions (its children, this
# one too) stay.
listeners=
for d in /proc/[0-9]*; do
	read -r st 2>/dev/null <"$d/stat" || continue
	case $st in *" (dropbear) "*) ;; *) continue ;; esac
	set -- ${st##*) }
	read -r pst 2>/dev/null <"/proc/$2/stat" || pst=
	case $pst in *" (dropbear) "*) ;; *) listeners="$listeners ${d#/proc/}" ;; esac
done
echo 1 >/run/dropbear.restart
[ -n "$listeners" ] && kill $listeners
# The rest while it restarts.
echo "$name" >/proc/sys/kernel/hostname
umask 022
echo "$name" >/etc/hostname.new &&
	printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\n' \
		"$name" >/etc/hosts.new || fail "cannot write /etc/hostname"
if [ -n "$mid" ]; then
	echo "$mid" >/etc/machine-id.new || fail "cannot write /etc/machine-id"
	mv -f /etc/machine-id.new /etc/machine-id
fi
mv -f /etc/hostname.new /etc/hostname
mv -f /etc/hosts.new /etc/hosts
umask 077
[ -d /root/.ssh ] || mkdir -p -m 700 /root/.ssh
printf '%s' "$keys" >/root/.ssh/authorized_keys.new &&
	mv -f /root/.ssh/authorized_keys.new /root/.ssh/authorized_keys ||
	fail "cannot write root's authorized keys"
sync
[ -n "$listeners" ] || fail "no dropbear listener to restart"
exit 0
EOF
chmod 755 "$R/etc/berth-identity"

cat >"$R/etc/rc" <<'EOF'
#!/bin/sh
# berth tiny: system initialisation (busybox init sysinit).
export PATH=/sbin:/bin:/usr/sbin:/usr/bin
umask 022

mounted() { grep -q "^[^ ]* $1 " /proc/mounts; }
mount -t proc proc /proc 2>/dev/null
mounted /sys || mount -t sysfs sysfs /sys
mounted /dev || mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mounted /dev/pts || mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts
mounted /dev/shm || mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm
mounted /tmp || mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /tmp
mounted /run || mount -t tmpfs -o mode=755,nosuid,nodev tmpfs /run
ln -sfn /proc/self/fd /dev/fd
ln -sfn /proc/self/fd/0 /dev/stdin
ln -sfn /proc/self/fd/1 /dev/stdout
ln -sfn /proc/self/fd/2 /dev/stderr
mount -o remount,rw / 2>/dev/null

for f in /var/log/dropbear.log /var/log/acpid.log; do
	[ -f "$f" ] && [ "$(wc -c <"$f")" -gt 1048576 ] && mv -f "$f" "$f.old"
done

# ---- the seed (hostname, keys, host key) and the hostname: /etc/berth-seed
/etc/berth-seed
name=$(hostname)

# ---- network: waits at most ~5 s for a lease, then keeps trying in the
# background.
ip link set lo up
if [ -e /sys/class/net/eth0 ]; then
	ip link set eth0 up
	udhcpc -i eth0 -s /etc/udhcpc/default.script -p /run/udhcpc.eth0.pid \
		-b -t 5 -T 1 -A 5 -x "hostname:$name" 2>&1 |
		grep -v -e '^udhcpc: started' -e '^udhcpc: broadcasting' -e '^udhcpc: sending'
else
	echo "tiny: no eth0"
fi
# The seed's keys, the hostname and the host key survive a crash from now on.
sync
echo "tiny: up"
exit 0
EOF
chmod 755 "$R/etc/rc"

cat >"$R/etc/rc.shutdown" <<'EOF'
#!/bin/sh
# berth tiny: run by busybox init before it powers off, reboots or halts.
export PATH=/sbin:/bin:/usr/sbin:/usr/bin
trap '' TERM HUP
others() { # the other user-space processes: not init, not this script,
	# not kernel threads, not zombies (an exiting process loses its exe link
	# before it closes its files, so the state is what counts)
	read -r self _ </proc/self/stat # the subshell running this function
	for d in /proc/[0-9]*; do
		p=${d#/proc/}
		case $p in 1 | 2 | $$ | $self) continue ;; esac
		read -r st 2>/dev/null <"$d/stat" || continue
		set -- ${st##*) }
		case $1 in Z | X) continue ;; esac
		[ "$2" = 2 ] && continue
		echo "$p"
	done
}
# kill(-1) would hit this script too when kill is not a shell builtin.
echo "tiny: stopping processes"
pids=$(others)
[ -n "$pids" ] && kill -TERM $pids 2>/dev/null
[ -n "$pids" ] && kill -HUP $pids 2>/dev/null
i=0
while [ $i -lt 20 ] && [ -n "$(others)" ]; do
	usleep 50000
	i=$((i + 1))
done
pids=$(others)
[ -n "$pids" ] && kill -KILL $pids 2>/dev/null
i=0
while [ $i -lt 20 ] && [ -n "$(others)" ]; do
	usleep 50000
	i=$((i + 1))
done
sync
i=0
until mount -o remount,ro / 2>/dev/null; do
	i=$((i + 1))
	[ $i -lt 20 ] || { echo "tiny: cannot remount / read-only"; break; }
	usleep 50000
done
sync
# A known request (the ACPI power button's handler leaves one) is carried
# out at once: busybox init would add two one-second pauses.  (A `poweroff`
# typed in busybox sh runs the applet directly, so no wrapper could note it.)
req=$(cat /run/shutdown-request 2>/dev/null)
case $req in
poweroff | reboot | halt)
	echo "tiny: $req"
	exec /bin/busybox "$req" -f
	;;
esac
EOF
chmod 755 "$R/etc/rc.shutdown"

# ------------------------------------------------------------ root image ---

mke2fs -q -F -t ext4 -L tiny-root -m 0 -E root_owner=0:0 -d "$R" \
	"$TMP/root.ext4" "$ROOT_SIZE" >/dev/null || die "mke2fs failed"
qemu-img convert -q -f raw -O qcow2 "$TMP/root.ext4" "$TMP/root.qcow2" ||
	die "qemu-img convert failed"
rm -f "$TMP/root.ext4"

cp "$KDIR/vmlinuz" "$TMP/vmlinuz"
OUTPUTS="vmlinuz initrd.img root.qcow2 image.json"
KERNEL_FILE=vmlinuz
if [ "$PVH" = 1 ]; then
	vmlinux=$(berth_kernel_vmlinux -p tiny "$KDIR") || exit 1
	cp "$vmlinux" "$TMP/vmlinux"
	OUTPUTS="vmlinux $OUTPUTS"
	KERNEL_FILE=vmlinux
fi
printf '{"name":"%s","format":"qcow2","boot":"direct","kernel":"%s","initrd":"initrd.img","cmdline":"%s","user":"root","kernel_version":"%s"}\n' \
	"$NAME" "$KERNEL_FILE" "$CMDLINE" "$KVER" >"$TMP/image.json"

# ---------------------------------------------------------------- output ---

# Each output is copied next to its final name and renamed over it, so a
# reader never sees a half-written file (and a running VM keeps its inode).
mkdir -p -- "$OUT" || die "cannot create $OUT"
OUT=$(cd -- "$OUT" && pwd)
for f in $OUTPUTS; do
	tmpf=$OUT/.$f.tiny-tmp.$$
	CLEAN+=("$tmpf")
	cp "$TMP/$f" "$tmpf"
	chmod 644 "$tmpf"
	mv -f "$tmpf" "$OUT/$f"
done
if [ "$PVH" != 1 ]; then
	rm -f "$OUT/vmlinux" # from an earlier BERTH_TINY_PVH=1 build
fi

END=$(date +%s.%N)
say "wrote $OUT: ${FB:+1280x800 framebuffer (bochs), }${PVH:+vmlinux (PVH), }vmlinuz, initrd.img ($nmod modules, $(du -k "$OUT/initrd.img" | cut -f1) KiB), root.qcow2 ($(du -k "$OUT/root.qcow2" | cut -f1) KiB), image.json; kernel $KVER; $(awk -v s="$START" -v e="$END" 'BEGIN { printf "%.1f", e - s }') s"
