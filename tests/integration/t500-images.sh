#!/bin/bash
# The image catalog: import of raw, qcow2 and their .zst (a stream of known
# size straight into the base, one of unknown size through a file), export
# of a machine or a checkpoint as zstd, byte-exact both ways; an exported
# disk imported --like the tiny image boots with its data; bad input gets a
# clear error and leaves no image, volume or file; progress on a terminal.
. "$(dirname "$0")/../lib.sh"

start_hostd && build_tiny || { not_ok "hostd and image"; finish; }
D=$T/files
mkdir -p "$D"
VOLS=$(berth info --json | json storage.location)

# A 64 MiB disk: random data in three places, zeros elsewhere.
head -c 64M /dev/zero >"$D/disk.raw"
for at in 0 17 63; do
	head -c 1M /dev/urandom | dd of="$D/disk.raw" bs=1M seek=$at conv=notrunc status=none
done
RAW_SHA=$(sha256sum <"$D/disk.raw" | cut -c1-64)
qemu-img convert -f raw -O qcow2 "$D/disk.raw" "$D/disk.qcow2"
zstd -q "$D/disk.raw" -o "$D/disk.raw.zst"
zstd -q "$D/disk.qcow2" -o "$D/disk.qcow2.zst"
# From a pipe: the frame does not say how big the disk is.
zstd -q -c <"$D/disk.raw" >"$D/piped.raw.zst"

sha() { sha256sum <"$1" | cut -c1-64; }
# procs ERE: the processes whose command line matches (pgrep -af); fails
# only when pgrep does (not when none matches).
procs() {
	pgrep -af "$1"
	[ $? -le 1 ]
}
vol_count() { find "$VOLS" -maxdepth 1 -name 'base-*' | wc -l; }
# What is left in STATE/tmp (made by the image build); fails without it.
tmp_files() { find "$STATE/tmp" -mindepth 1; }
image_names() { berth image ls --json | python3 -c 'import json,sys; print(" ".join(i["name"] for i in json.load(sys.stdin)["images"]))'; }

# ---- import, each kind, then export of a machine made from it -------------
for f in disk.raw disk.qcow2 disk.raw.zst disk.qcow2.zst piped.raw.zst; do
	name=i-$(echo "$f" | tr '.' '-')
	out=$(berth image import "$name" "$D/$f" --json 2>"$T/err")
	if [ "$(echo "$out" | json name)" != "$name" ]; then
		not_ok "import $f"; diag "$(cat "$T/err")"; continue
	fi
	ok "import $f"
	check_eq "$f: disk size" 67108864 "$(echo "$out" | json size)"
	check_eq "$f: sha256 of the file" "$(sha "$D/$f")" "$(echo "$out" | json sha256)"
	check_eq "$f: source" "$(echo "$f" | sed 's/^disk\.//; s/^piped\.//')" "$(echo "$out" | json source)"
	check_eq "$f: source size" "$(stat -c %s "$D/$f")" "$(echo "$out" | json source_size)"
	berth create "m-$name" --image "$name" --no-start >/dev/null
	if berth image export "m-$name" "$D/out-$name.zst" >/dev/null 2>"$T/err"; then
		check_eq "$f: export of a machine made from it is the same disk" "$RAW_SHA" \
			"$(zstd -dc "$D/out-$name.zst" | sha256sum | cut -c1-64)"
	else
		not_ok "$f: export"; diag "$(cat "$T/err")"
	fi
done
check_absent "no build files left" tmp_files

# The export is one checksummed frame that says its size: it streams back
# in without a temporary file.
check "zstd -t accepts the export" zstd -q -t "$D/out-i-disk-raw.zst"
check_match "the frame says the disk's size" "64.00 MiB|67108864" \
	"$(zstd -lv "$D/out-i-disk-raw.zst" 2>&1 | grep -i 'decompressed size')"
out=$(berth image import back "$D/out-i-disk-raw.zst" --json)
check_eq "an export imports again, byte-exact" "$RAW_SHA" \
	"$(berth create m-back --image back --no-start >/dev/null &&
	   berth image export m-back - --force 2>/dev/null | zstd -dc | sha256sum | cut -c1-64)"
check_eq "an export is compressed" 1 "$(( $(stat -c %s "$D/out-i-disk-raw.zst") < 4 * 1048576 ))"

# --sha256 checks the download.
out=$(berth image import sum "$D/disk.raw.zst" --sha256 "$(sha "$D/disk.raw.zst")" --json)
check_eq "--sha256 that matches" sum "$(echo "$out" | json name)"

# ---- bad input: a clear error, nothing registered, nothing left ------------
before_imgs=$(image_names)
before_vols=$(vol_count)
refuse() { # DESC REGEX berth-args...
	local desc=$1 re=$2
	shift 2
	local msg rc
	msg=$(berth "$@" 2>&1 >/dev/null)
	rc=$?
	if [ $rc -ne 0 ] && [[ $msg =~ $re ]]; then ok "$desc"; else
		not_ok "$desc"; diag "exit $rc: $msg"; fi
}
head -c $(( $(stat -c %s "$D/disk.raw.zst") / 2 )) "$D/disk.raw.zst" >"$D/trunc.raw.zst"
refuse "a truncated .zst" "truncated" image import bad "$D/trunc.raw.zst"
cp "$D/disk.raw.zst" "$D/corrupt.raw.zst"
printf 'garbage!garbage!' | dd of="$D/corrupt.raw.zst" bs=1 seek=300000 conv=notrunc status=none
refuse "a corrupt .zst" "not a valid zstd stream|corrupt" image import bad "$D/corrupt.raw.zst"
head -c $(( $(stat -c %s "$D/piped.raw.zst") / 2 )) "$D/piped.raw.zst" >"$D/trunc-piped.raw.zst"
refuse "a truncated .zst of unknown size" "truncated" image import bad "$D/trunc-piped.raw.zst"
head -c 1000000 "$D/disk.qcow2" >"$D/trunc.qcow2"
refuse "a truncated qcow2" "trunc|qemu-img|corrupt|invalid" image import bad "$D/trunc.qcow2"
refuse "a wrong sha256" "has sha256 [0-9a-f]{64}, not the expected" \
	image import bad "$D/disk.raw" --sha256 "$(printf '0%.0s' $(seq 64))"
refuse "a malformed sha256" "not a sha256" image import bad "$D/disk.raw" --sha256 abc
refuse "a user that is not a login name (not UTF-8)" "invalid user name" \
	image import bad "$D/disk.raw" --user $'\xff\xfe'
refuse "a user with a quote" "invalid user name" image import bad "$D/disk.raw" --user "a'b"
gzip -c "$D/disk.raw" >"$D/disk.raw.gz"
refuse "a gzip file" "is a gzip file; berth imports raw and qcow2" image import bad "$D/disk.raw.gz"
printf 'not a disk image at all\n' >"$D/notes.txt"
refuse "a file that is no disk" "not a disk image" image import bad "$D/notes.txt"
: >"$D/empty"
refuse "an empty file" "is empty" image import bad "$D/empty"
refuse "--format qcow2 of a raw file" "not qcow2" image import bad "$D/disk.raw" --format qcow2
qemu-img create -q -f qcow2 -b "$D/disk.raw" -F raw "$D/overlay.qcow2"
refuse "a qcow2 with a backing file" "backing file" image import bad "$D/overlay.qcow2"
refuse "a name taken" "image i-disk-raw exists" image import i-disk-raw "$D/disk.raw"
refuse "an invalid name" "invalid image name" image import Bad_Name "$D/disk.raw"
refuse "a missing file" "cannot open" image import bad "$D/nope.raw"
refuse "an unknown --like" "no image nope" image import bad "$D/disk.raw" --like nope
# nobody stands in for any local user: the socket is open to all.
msg=$(setpriv --reuid=nobody --regid=nogroup --clear-groups \
	"$BIN/berth" --state "$STATE" image import bad "$D/disk.raw" 2>&1)
check_match "only root imports" "only root" "$msg"
check_eq "no image registered by the failures" "$before_imgs" "$(image_names)"
check_eq "no volume left by the failures" "$before_vols" "$(vol_count)"
check_absent "no temporary file left" tmp_files
check_absent "no qemu-nbd left" procs "qemu-nbd.*$T"
refuse "rm of an image a machine uses" "is used by 1 machine" image rm i-disk-raw

# ---- a real disk: checkpoint of a running machine, exported, booted --------
berth create t >/dev/null
berth exec t -- sh -c 'echo exported-data > /root/marker; sync'
refuse "export of a running machine" "is running.*checkpoint" image export t "$D/t.zst"
berth checkpoint t c1 >/dev/null
check "export t@c1 while t runs" berth image export t@c1 "$D/t.zst"
check_eq "t kept running" running "$(berth show t --json | json state)"
refuse "export of an unknown checkpoint" "no checkpoint" image export t@nope "$D/x.zst"
refuse "export over an existing file" "exists" image export t@c1 "$D/t.zst"
out=$(berth image import tiny2 "$D/t.zst" --like tiny --json)
check_eq "imported --like tiny: direct boot" direct "$(echo "$out" | json boot)"
check_eq "a machine of the exported disk runs" running "$(berth create u --image tiny2 --json | json state)"
check_eq "with the data of the checkpoint" exported-data "$(berth exec u -- cat /root/marker)"

# ---- a disk that boots by itself (a cloud image's way): firmware boot -----
check "make a disk with its own boot loader" bash "$ROOT/tests/guest/bios-disk.sh" \
	"$STATE/images/tiny/vmlinuz" "$STATE/images/tiny/initrd.img" "$VOLS/base-tiny.qcow2" \
	"$D/bios.raw"
zstd -q "$D/bios.raw" -o "$D/bios.raw.zst"
out=$(berth image import bios "$D/bios.raw.zst" --json)
check_eq "an image without --like boots by firmware" firmware "$(echo "$out" | json boot)"
check_eq "a machine of it runs (BIOS, then its own boot loader)" running \
	"$(berth create fw --image bios --json | json state)"
check_eq "the seed named it" fw "$(berth exec fw -- hostname)"
check_match "its root is the disk's second partition" "^/dev/vda2 / " \
	"$(berth exec fw -- grep ' / ' /proc/mounts)"
check_absent "its domain has no kernel of its own" matching '<kernel>' $VIRSH dumpxml "$(dom_of fw)"
berth rm fw >/dev/null

# ---- progress: on a terminal, and not with --json or without one ----------
script -qec "$BIN/berth --state $STATE image import prog $D/disk.raw.zst" /dev/null >"$T/tty.out" 2>&1
check_match "a progress bar on a terminal" "importing \[[#-]+\] +[0-9]+%" "$(tr '\r' '\n' <"$T/tty.out")"
# import_on_tty ARGS...: what `berth image import ARGS` shows of its progress
# on a terminal (script(1)); fails when the import does.
import_on_tty() {
	script -qec "$BIN/berth --state $STATE image import $*" /dev/null >"$T/tty.out" 2>&1 || return 1
	grep -a 'importing \[' "$T/tty.out"
	return 0
}
check_absent "no progress with --json" import_on_tty prog2 "$D/disk.raw.zst" --json
# Its stderr is what would show the progress; sh fails when berth does.
check_absent "no progress without a terminal" \
	sh -c '"$@" 2>&1 >/dev/null' sh "$BIN/berth" --state "$STATE" image import prog3 "$D/disk.raw.zst"
script -qec "$BIN/berth --state $STATE image export m-i-disk-raw $D/tty.zst" /dev/null >"$T/tty.out" 2>&1
check_match "export shows its progress on a terminal" "exporting .*(written|%)" "$(tr '\r' '\n' <"$T/tty.out")"
check_eq "and its file is whole" "$RAW_SHA" "$(zstd -dc "$D/tty.zst" | sha256sum | cut -c1-64)"

finish
