#!/bin/bash
# `make verify-units`: systemd-analyze verify on every unit of
# deploy/systemd as `make install` writes it.
#   tests/verify-units.sh [ROOT]
# Without ROOT: installs into a scratch DESTDIR (the default PREFIX) and
# removes it afterwards; with ROOT: verifies what is installed there
# (tests/integration/t900-install.sh).  verify --root wants the whole unit
# tree under ROOT (sysinit.target and the rest: the host's
# /lib/systemd/system is copied in) and the binaries at their ExecStart
# paths.  It exits 0 on unknown keys and bad values, which it only
# prints, so any message counts as a failure.  No systemd needs to run.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
units=$(cd "$ROOT/deploy/systemd" && ls -- *.service)
if ! command -v systemd-analyze >/dev/null; then
	echo "verify-units: systemd-analyze is missing (Debian's systemd package)" >&2
	exit 1
fi
scratch=
if [ $# -ge 1 ]; then
	dest=$1
else
	scratch=$(mktemp -d /tmp/berth-units.XXXXXX)
	trap 'rm -rf "$scratch"' EXIT
	dest=$scratch/root
	if ! make -C "$ROOT" --no-print-directory install DESTDIR="$dest" >"$scratch/install.log" 2>&1; then
		echo "verify-units: make install DESTDIR=$dest failed:" >&2
		cat "$scratch/install.log" >&2
		exit 1
	fi
fi
if [ ! -e "$dest/lib/systemd/system/sysinit.target" ]; then
	mkdir -p "$dest/lib/systemd"
	cp -R /lib/systemd/system "$dest/lib/systemd/"
fi
# shellcheck disable=SC2086
out=$(cd "$dest" && systemd-analyze verify --root="$dest" $units 2>&1)
rc=$?
if [ "$rc" -ne 0 ] || [ -n "$out" ]; then
	echo "verify-units: systemd-analyze verify (exit $rc):" >&2
	printf '%s\n' "$out" >&2
	exit 1
fi
# shellcheck disable=SC2086
echo "verify-units: verified" $units
