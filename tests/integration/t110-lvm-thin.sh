#!/bin/bash
# tests/run: alongside (its own QEMU VM, not the host's libvirtd: runs beside the rest)
# The lvm-thin backend for real: the backend-neutral storage suite
# (tests/unit/test_storage_suite) inside a TCG VM whose Debian kernel has
# dm-thin (tests/guest/lvm-vm.sh), on a blank 2 GiB disk.  These machines'
# own kernel has no device-mapper, so this is the only place lvm-thin runs.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
UNIT=${BERTH_UNIT:-$ROOT/build/default/tests}
cd "$ROOT"
BERTH_SUITE_BACKEND=lvm-thin bash tests/guest/lvm-vm.sh --timeout 600 -- "$UNIT/test_storage_suite"
