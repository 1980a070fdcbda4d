#!/bin/bash
# Build a Debian 12 cloud image the way a cloud provider does, with no berth
# code inside: Debian's packages only (debootstrap), cloud-init configuring
# the machine from berth's NoCloud seed, GRUB in the disk's own MBR booting
# it by BIOS firmware.  It is what an owner's imported cloud image is, made
# here so the suite can boot one (t820): the development machines do not
# reach cloud.debian.org.
#
#   images/recipes/debian-cloud.sh OUTDIR
#
# Writes OUTDIR/root.raw.zst (the whole disk) and OUTDIR/image.json (boot
# "firmware", user "debian").  Run as root: hostd runs it for `berth image
# build debian-cloud`.  Needs the host packages debootstrap, e2fsprogs,
# fdisk (sfdisk), zstd and util-linux (unshare, mount, flock); the network,
# to reach Debian's mirror.
#
# Environment:
#   BERTH_CACHE            cache directory (default /var/cache/berth); this
#                          recipe keeps debian-cloud/debs/ there (every .deb
#                          debootstrap and apt fetched: apt's archive
#                          directory inside the build too) and the log of
#                          the last build, debian-cloud/build.log.  A
#                          second build downloads only what changed.
#   BERTH_CLOUD_SIZE       the disk's virtual size (default 2G); cloud-init
#                          grows the root partition and file system to a
#                          larger disk at first boot (growpart, resize2fs).
#   BERTH_DEBIAN_MIRROR    default http://deb.debian.org/debian
#   BERTH_DEBIAN_SECURITY  default http://deb.debian.org/debian-security
#
# The image:
#  - an MBR with one partition (the root, ext4, from 1 MiB to the end,
#    bootable) and GRUB's boot.img in the MBR and its core.img in the gap
#    before the partition (what grub-install does, done without a loop
#    device: grub-mkimage from the image's own grub-pc-bin, then dd);
#    GRUB's modules in /boot/grub/i386-pc, and a grub.cfg that boots
#    /vmlinuz and /initrd.img, the symlinks Debian's kernel packages keep
#    pointing at the newest kernel (so a kernel upgrade in the guest boots);
#  - Debian's linux-image-cloud-amd64 (the kernel without the hardware
#    drivers a VM has no use for), initramfs-tools with its defaults;
#  - cloud-init (Debian's package and configuration: it finds the seed by
#    its label cidata, ds-identify choosing NoCloud among all datasources)
#    and cloud-guest-utils (growpart); no default user in the image: the
#    seed's users: entry creates debian; network by cloud-init's fallback,
#    DHCP on the first NIC, written for ifupdown (isc-dhcp-client);
#  - openssh-server (no host keys in the image: cloud-init writes the
#    seed's), sudo, systemd, udev; root has no password and no keys;
#  - no recommends, no documentation (but the copyright files).
set -Eeuo pipefail
umask 022

NAME=debian-cloud
SUITE=bookworm
MIRROR=${BERTH_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY=${BERTH_DEBIAN_SECURITY:-http://deb.debian.org/debian-security}
SIZE=${BERTH_CLOUD_SIZE:-2G}
USER_NAME=debian
# The kernel's command line (Debian's cloud images use the same consoles).
CMDLINE="ro console=tty0 console=ttyS0,115200"

# Installed with apt (no recommends) on top of debootstrap's minbase.
PACKAGES=(
	# init, devices, modules
	systemd systemd-sysv udev kmod
	# the kernel and its initramfs
	linux-image-cloud-amd64 initramfs-tools zstd
	# the boot loader (grub-mkimage and the i386-pc modules)
	grub-pc-bin
	# cloud-init and what its modules use here: growpart, ifupdown for
	# its network configuration (isc-dhcp-client is its dependency)
	cloud-init cloud-guest-utils ifupdown iproute2 netbase
	# how the owner and hostd reach it
	openssh-server sudo
)

. "$(dirname -- "${BASH_SOURCE[0]}")/lib/debian-build.sh"

if [ $# -ne 1 ] || [ -z "$1" ]; then
	echo "usage: $0 OUTDIR" >&2
	exit 2
fi
OUT=$1
CACHE=${BERTH_CACHE:-/var/cache/berth}

[ "$(id -u)" = 0 ] || die "must run as root (debootstrap, chroot)"
for tool in debootstrap chroot mke2fs sfdisk zstd unshare mount umount flock \
	awk findmnt truncate; do
	command -v "$tool" >/dev/null 2>&1 ||
		die "$tool not found (install debootstrap, e2fsprogs, fdisk, zstd, util-linux)"
done

# Mounts in a namespace of the build's own, the work directory in OUTDIR
# (lib/debian-build.sh).
private_mounts "$@"
work_begin "$OUT"
APT=(apt-get -q -y -o APT::Install-Recommends=false -o Dpkg::Use-Pty=0
	-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)

DEBS=$CACHE/$NAME/debs
mkdir -p -- "$DEBS/partial" "$WORK"
LOG=$WORK/build.log
KEEPLOG=$CACHE/$NAME/build.log
: >"$LOG"
# One build at a time per cache (they share the .debs).
exec 9>"$CACHE/$NAME/.lock"
if ! flock -n 9; then
	say "waiting for another $NAME build (lock $CACHE/$NAME/.lock)"
	flock -w 1500 9 || die "timed out waiting for the lock on $CACHE/$NAME"
fi

# ----------------------------------------------------------- debootstrap ---

step "debootstrap $SUITE (minbase)"
run debootstrap --variant=minbase --arch=amd64 --cache-dir="$DEBS" "$SUITE" "$R" "$MIRROR"

# --------------------------------------------------------- apt packages ---

step "configuring apt"
apt_configure
echo localhost >"$R/etc/hostname"
rm -f "$R/etc/resolv.conf"
cp -L /etc/resolv.conf "$R/etc/resolv.conf"

mount_in "$R/proc" -t proc proc
mount_in "$R/sys" -t sysfs -o ro sysfs
mount_in "$R/dev/pts" -t devpts -o newinstance,ptmxmode=0666,mode=620,gid=5 devpts
mount_in "$R/var/cache/apt/archives" --bind "$DEBS"

step "apt-get update"
run inchroot "${APT[@]}" update
step "apt-get dist-upgrade (security updates of the base)"
run inchroot "${APT[@]}" dist-upgrade
step "apt-get install (${#PACKAGES[@]} packages and their dependencies)"
run inchroot "${APT[@]}" install "${PACKAGES[@]}"
# shellcheck disable=SC2016 # a dpkg-query format
say "$(inchroot dpkg-query -W -f '${binary:Package}\n' | wc -l) packages installed"

# ---------------------------------------------------------- system setup ---

step "configuring the system"
KVER=$(inchroot linux-version list | sort -V | tail -n 1)
[ -n "$KVER" ] || die "no kernel installed"
[ -e "$R/vmlinuz" ] && [ -e "$R/initrd.img" ] ||
	die "no /vmlinuz or /initrd.img symlink (kernel $KVER)"
ROOT_UUID=$(cat /proc/sys/kernel/random/uuid)
cat >"$R/etc/fstab" <<EOF
UUID=$ROOT_UUID	/	ext4	defaults,errors=remount-ro	0	1
EOF
# The network: cloud-init writes /etc/network/interfaces.d/50-cloud-init.
cat >"$R/etc/network/interfaces" <<'EOF'
# The loopback; cloud-init configures the rest.
auto lo
iface lo inet loopback

source /etc/network/interfaces.d/*
EOF
echo 'LANG=C.UTF-8' >"$R/etc/default/locale"
run inchroot usermod -p '*' root

# GRUB: modules where core.img looks for them, and a configuration.
mkdir -p "$R/boot/grub/i386-pc"
cp "$R"/usr/lib/grub/i386-pc/*.mod "$R"/usr/lib/grub/i386-pc/*.lst "$R/boot/grub/i386-pc/"
cat >"$R/boot/grub/grub.cfg" <<EOF
# Written by the image's build (no update-grub: the boot loader was put in
# place without a block device).  /vmlinuz and /initrd.img are the symlinks
# Debian's kernel packages keep pointing at the newest kernel.
set default=0
set timeout=0
insmod part_msdos
insmod ext2
search --no-floppy --fs-uuid --set=root $ROOT_UUID
menuentry 'Debian GNU/Linux' {
	linux /vmlinuz root=UUID=$ROOT_UUID $CMDLINE
	initrd /initrd.img
}
EOF
run inchroot grub-mkimage -O i386-pc -o /tmp/core.img -p "(hd0,msdos1)/boot/grub" \
	biosdisk part_msdos ext2
mv "$R/tmp/core.img" "$WORK/core.img"
cp "$R/usr/lib/grub/i386-pc/boot.img" "$WORK/boot.img"

# --------------------------------------------------------------- cleanup ---

step "cleaning up"
apt_build_end
# Not `apt-get clean`: the archives are the cache, bind-mounted.  Only the
# .debs the mirror no longer has leave it.
run inchroot "${APT[@]}" autoclean
unmount_all
rm -rf "$R"/var/lib/apt/lists/* "$R"/var/cache/apt/*.bin "$R"/root/.cache "$R"/tmp/* \
	"$R"/var/tmp/* "$R"/var/cache/debconf/*-old "$R"/var/lib/dpkg/*-old \
	"$R"/var/log/apt/* "$R"/var/log/journal/*
find "$R/var/log" -type f \( -name '*.log' -o -name btmp -o -name wtmp -o -name lastlog \) \
	-exec truncate -s 0 {} +
# Made per machine: host keys (cloud-init writes the seed's), machine-id
# (systemd, at the first boot).
rm -f "$R"/etc/ssh/ssh_host_*
: >"$R/etc/machine-id"
rm -f "$R/var/lib/dbus/machine-id"
# The build host's resolver is no business of the image's: dhclient
# writes the machine's.
rm -f "$R/etc/resolv.conf"
: >"$R/etc/resolv.conf"
mounted_below "$R" && die "something is still mounted under $R"

# ------------------------------------------------------------------ disk ---

step "disk ($SIZE): MBR, ext4 root, GRUB"
used=$(du -sxm "$R" | cut -f1)
DISK=$WORK/root.raw
rm -f "$DISK"
run truncate -s "$SIZE" "$DISK"
bytes=$(stat -c %s "$DISK")
[ "$bytes" -ge $((512 << 20)) ] || die "BERTH_CLOUD_SIZE $SIZE is under 512 MiB"
echo 'label: dos
start=2048, type=83, bootable' | run sfdisk -q "$DISK"
# The file system straight into the partition (no loop device, no mount).
fs_kib=$(((bytes - (1 << 20)) / 1024))
run mke2fs -q -F -t ext4 -L debian-root -U "$ROOT_UUID" -m 1 -E offset=1048576 \
	-d "$R" "$DISK" "${fs_kib}k"
# GRUB: boot.img's code in the MBR (before the partition table), core.img
# from sector 1 (boot.img loads it from there, its first sector the rest).
core_sectors=$((($(stat -c %s "$WORK/core.img") + 511) / 512))
[ "$core_sectors" -lt 2047 ] || die "core.img has $core_sectors sectors; the gap has 2047"
run dd if="$WORK/boot.img" of="$DISK" bs=440 count=1 conv=notrunc status=none
run dd if="$WORK/core.img" of="$DISK" bs=512 seek=1 conv=notrunc status=none
rm -rf "$R"

step "zstd"
# From a file, not a pipe, so the frame header holds the content size.
run zstd -T0 --long=27 -q -f "$DISK" -o "$WORK/root.raw.zst"
rm -f "$DISK"
printf '{"name":"%s","format":"raw","boot":"firmware","user":"%s","root":"root.raw.zst","kernel_version":"%s"}\n' \
	"$NAME" "$USER_NAME" "$KVER" >"$WORK/image.json"

# ---------------------------------------------------------------- output ---

for f in root.raw.zst image.json; do
	chmod 644 "$WORK/$f"
	mv -f "$WORK/$f" "$OUT/$f"
done
STEP=finished
say "wrote $OUT: root.raw.zst ($(du -m "$OUT/root.raw.zst" | cut -f1) MiB; $used MiB of files on a $SIZE disk), image.json; kernel $KVER; $(elapsed) s"
