#!/bin/bash
# What hostd trusts on disk (docs/security.md): it refuses to start on a
# state directory under a directory others may write to, and on a
# berth.conf that is a symbolic link or someone else's, naming the path,
# its owner and mode and what to do.  A sound state directory starts (the
# positive control).
. "$(dirname "$0")/../lib.sh"

# refused DESC DIR REGEX: berth-hostd --state DIR exits non-zero within
# 20 s (before it serves anything) with an error matching REGEX.
refused() {
	local rc out
	timeout 20 "$BIN/berth-hostd" --state "$2" >"$T/refused.log" 2>&1
	rc=$?
	out=$(grep -m1 -i error "$T/refused.log")
	if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [[ $out =~ $3 ]]; then
		ok "$1"
	else
		not_ok "$1"
		diag "exit $rc; log:"
		sed 's/^/#   /' "$T/refused.log" | tail -5
	fi
	[ ! -e "$2/hostd.sock" ] || { not_ok "  no socket left in $2"; }
}

# A parent directory writable by its group.
mkdir -m 775 "$T/gw" && chmod 775 "$T/gw" && mkdir -m 711 "$T/gw/state"
echo "guest_network = $GUEST_NET" >"$T/gw/state/berth.conf"
refused "a state directory whose parent is group-writable is refused" "$T/gw/state" \
	"$T/gw is owned by uid 0, mode 0775.*chmod go-w $T/gw"

# berth.conf a symbolic link (to a sound file).
mkdir -m 711 "$T/ln" "$T/ln/state"
echo "guest_network = $GUEST_NET" >"$T/ln/real.conf"
ln -s "$T/ln/real.conf" "$T/ln/state/berth.conf"
refused "a berth.conf that is a symbolic link is refused" "$T/ln/state" \
	"$T/ln/state/berth.conf is a symbolic link"

# berth.conf owned by another user.
mkdir -m 711 "$T/own" "$T/own/state"
echo "guest_network = $GUEST_NET" >"$T/own/state/berth.conf"
chown nobody "$T/own/state/berth.conf"
refused "a berth.conf owned by another user is refused" "$T/own/state" \
	"berth.conf is owned by uid $(id -u nobody).*chown root"

# The same state directory once fixed, and this test's own: hostd serves.
chown root "$T/own/state/berth.conf"
check "a sound state directory (under sticky /tmp) starts" start_hostd
finish
