#!/bin/bash
# Make a disk that boots by itself, like a cloud image: an MBR, a FAT
# partition with SYSLINUX, a kernel and an initrd, and the root filesystem
# in a second partition.  No mounts: mtools writes the FAT, syslinux
# installs itself into the image file.  For tests of firmware boot.
#
#   tests/guest/bios-disk.sh KERNEL INITRD ROOT OUT
#
# ROOT is a disk image (any format qemu-img reads) holding a whole-disk
# filesystem; OUT is written raw.  The kernel boots with root=/dev/vda2.
set -Eeuo pipefail
if [ $# -ne 4 ]; then
	echo "usage: $0 KERNEL INITRD ROOT OUT" >&2
	exit 2
fi
kernel=$1 initrd=$2 root=$3 out=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

qemu-img convert -O raw "$root" "$work/root.raw"
root_mib=$(( ($(stat -c %s "$work/root.raw") + 1048575) / 1048576 ))
boot_mib=32
rm -f "$out"
truncate -s $(( (1 + boot_mib + root_mib) * 1048576 )) "$out"
printf 'label: dos\nstart=2048, size=%d, type=6, bootable\nstart=%d, type=83\n' \
	$(( boot_mib * 2048 )) $(( (1 + boot_mib) * 2048 )) | sfdisk -q "$out"
mkfs.vfat -F 16 -n BOOT --offset 2048 "$out" $(( boot_mib * 1024 )) >/dev/null 2>&1
cat >"$work/syslinux.cfg" <<'EOF'
DEFAULT berth
TIMEOUT 0
LABEL berth
  LINUX vmlinuz
  INITRD initrd.img
  APPEND console=ttyS0 root=/dev/vda2 rw quiet
EOF
cp "$kernel" "$work/vmlinuz"
cp "$initrd" "$work/initrd.img"
MTOOLS_SKIP_CHECK=1 mcopy -i "$out@@1M" "$work/vmlinuz" "$work/initrd.img" \
	"$work/syslinux.cfg" ::/
syslinux --offset 1048576 --install "$out"
dd if=/usr/lib/syslinux/mbr/mbr.bin of="$out" bs=440 count=1 conv=notrunc status=none
dd if="$work/root.raw" of="$out" bs=1M seek=$(( 1 + boot_mib )) conv=notrunc,sparse status=none
