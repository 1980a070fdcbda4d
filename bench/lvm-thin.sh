#!/bin/bash
# lvm-thin checkpoint and fork cost against disk size, measured inside the
# dm-thin TCG VM (tests/guest/lvm-vm.sh), interleaved: a thin snapshot
# (`lvm lvcreate -s -kn`, what the backend runs for a checkpoint, a fork
# and a restore; test_lvm asserts that command line) of a 1 GiB and of a
# 100 GiB thin LV, each with 64 MiB written.  Prints medians and the ratio
# (goal <= 1.1).  Absolute times are TCG's: native hardware is several
# times faster.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
rounds=${1:-8}
bash tests/guest/lvm-vm.sh --disk-size 4G --timeout 900 -- sh -c '
set -e
sh deploy/lvm-thin-setup.sh "$BERTH_LVM_DEVICE" b pool >/dev/null 2>&1
for s in 1 100; do
	lvm lvcreate -q -T b/pool -V ${s}G -n v$s >/dev/null 2>&1
	dd if=/dev/urandom of=/dev/b/v$s bs=1M count=64 oflag=direct 2>/dev/null
done
ms() { echo $(( $(date +%s%N) / 1000000 )); }
for i in $(seq '"$rounds"'); do
	for s in 1 100; do
		t0=$(ms); lvm lvcreate -q -s -kn -n c$s-$i b/v$s >/dev/null 2>&1; t1=$(ms)
		echo "snap $s $((t1 - t0))"
	done
done' | python3 -c '
import statistics, sys
t = {}
for line in sys.stdin:
    p = line.split()
    if len(p) == 3 and p[0] == "snap":
        t.setdefault(p[1], []).append(int(p[2]))
a, b = t["1"], t["100"]
m1, m100 = statistics.median(a), statistics.median(b)
print("thin snapshot (checkpoint, fork)   1 GiB: median %.0f ms, min %d ms (n=%d)" % (m1, min(a), len(a)))
print("thin snapshot (checkpoint, fork) 100 GiB: median %.0f ms, min %d ms (n=%d)" % (m100, min(b), len(b)))
print("ratio 100 GiB / 1 GiB: %.2f (goal <= 1.1)" % (m100 / m1))'
