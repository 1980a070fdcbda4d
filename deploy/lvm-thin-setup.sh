#!/bin/sh
# Make an LVM volume group and thin pool for berth's lvm-thin backend on a
# whole, empty block device:
#   deploy/lvm-thin-setup.sh DEVICE [VG [POOL]] [--force]
# VG defaults to "berth", POOL to "pool".  The pool takes 90% of the VG (the
# rest leaves room to grow its metadata and for LVM's spare metadata LV);
# its metadata is 1/1000 of the device, at least 64 MiB and at most 15 GiB
# (thin pool metadata cannot exceed ~16 GiB), enough for many snapshots.
# Then set in STATE/berth.conf:  storage = lvm-thin, storage_location = VG/POOL
# A device with a partition table or a filesystem is refused without --force.
set -eu

force=
args=
for a in "$@"; do
	case $a in
	--force) force=1 ;;
	-*) echo "usage: $0 DEVICE [VG [POOL]] [--force]" >&2; exit 2 ;;
	*) args="$args $a" ;;
	esac
done
# shellcheck disable=SC2086
set -- $args
[ $# -ge 1 ] && [ $# -le 3 ] || { echo "usage: $0 DEVICE [VG [POOL]] [--force]" >&2; exit 2; }
dev=$1
vg=${2:-berth}
pool=${3:-pool}

[ -b "$dev" ] || { echo "lvm-thin-setup: $dev is not a block device" >&2; exit 1; }
if [ -z "$force" ] && [ -n "$(wipefs -n "$dev" 2>/dev/null | tail -n +2)" ]; then
	echo "lvm-thin-setup: $dev holds data (wipefs -n $dev); refusing without --force" >&2
	exit 1
fi
size=$(blockdev --getsize64 "$dev")
mib=$((1024 * 1024))
meta=$((size / 1000 / mib))
[ "$meta" -ge 64 ] || meta=64
[ "$meta" -le 15360 ] || meta=15360

# lvm says what it did on stdout even with -q: stdout is for berth.conf.
lvm pvcreate -q ${force:+-ff -y} "$dev" >&2
lvm vgcreate -q "$vg" "$dev" >&2
lvm lvcreate -q -T "$vg/$pool" -l 90%VG --poolmetadatasize "${meta}m" >&2
echo "lvm-thin-setup: thin pool $vg/$pool on $dev (metadata ${meta} MiB)" >&2
echo "storage = lvm-thin"
echo "storage_location = $vg/$pool"
