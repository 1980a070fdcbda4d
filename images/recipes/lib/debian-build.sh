# Sourced by the recipes that build a Debian root in a chroot (agents.sh,
# debian-cloud.sh): progress, errors and the build log; a private mount
# namespace; the work directory and its mounts, removed however the build
# ends; apt's configuration in the root (apt_configure, apt_build_end).
# Not a recipe itself (hostd runs images/recipes/NAME.sh).
#
# The recipe sets NAME (its name in messages) before sourcing this, and
# LOG (the build log) and KEEPLOG (where the log is kept after the build)
# once the work directory exists; it calls private_mounts "$@" and then
# work_begin OUTDIR.

T0=$(date +%s)
STEP=start
elapsed() { echo $(($(date +%s) - T0)); }
LOG=
KEEPLOG=
# Progress: to stderr and into the build log.
say() {
	local line
	line=$(printf '%s: [%4ss] %s' "$NAME" "$(elapsed)" "$*")
	printf '%s\n' "$line" >&2
	if [ -n "$LOG" ]; then printf '%s\n' "$line" >>"$LOG"; fi
}
step() { STEP=$1; say "$1…"; }
# The tail of the build log, then the error: hostd keeps the last 400
# bytes of a failed recipe's stderr, so the error line comes last.
die() {
	trap - ERR
	if [ -n "$LOG" ] && [ -s "$LOG" ]; then
		echo "---- last lines of $LOG:" >&2
		tail -n 15 "$LOG" >&2
		echo "----" >&2
	fi
	printf '%s: error: %s failed after %s s: %s (log %s)\n' "$NAME" "$STEP" \
		"$(elapsed)" "$*" "${KEEPLOG:-$LOG}" >&2
	exit 1
}
on_error() { # STATUS LINE COMMAND
	die "command failed (exit $1) at line $2: $3"
}
trap 'on_error $? $LINENO "$BASH_COMMAND"' ERR

# run CMD...: the command's output goes to the build log.
run() {
	local st cmd
	printf '+ %s\n' "$*" >>"$LOG"
	"$@" >>"$LOG" 2>&1 && return 0
	st=$?
	cmd=$*
	[ ${#cmd} -le 100 ] || cmd="${cmd:0:100}…"
	die "exit $st from: $cmd"
}

# Run the recipe again (once) in a private mount namespace: when the last
# process of the build ends, however it ends (hostd kills the whole
# process group with SIGKILL on its timeout), the kernel drops every mount
# of the build.  The EXIT trap unmounts them too.
private_mounts() {
	[ "${BERTH_RECIPE_NS:-}" = "$$" ] && return 0
	export BERTH_RECIPE_NS=$$
	exec unshare --mount --propagation private -- bash "$0" "$@"
}

# Whether anything is mounted at or below DIR (this namespace).
mounted_below() { # DIR
	awk -v d="$1" '$5 == d || index($5, d "/") == 1 { found = 1 } END { exit !found }' \
		/proc/self/mountinfo
}
unmount_all() {
	local i m
	for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do
		m=${MOUNTS[i]}
		if mountpoint -q -- "$m"; then
			umount -- "$m" 2>/dev/null || umount -l -- "$m" 2>/dev/null ||
				printf '%s: warning: cannot unmount %s\n' "$NAME" "$m" >&2
		fi
	done
	MOUNTS=()
	# What debootstrap or a package script may have left.
	if [ -d "$R" ] && mounted_below "$R"; then
		findmnt -rn -o TARGET | awk -v d="$R" 'index($0, d "/") == 1' | sort -r |
			while read -r m; do umount -l -- "$m" 2>/dev/null || :; done
	fi
}
work_end() {
	local st=$?
	trap - ERR
	unmount_all
	if [ -n "$LOG" ] && [ -f "$LOG" ] && [ -n "${KEEPLOG:-}" ]; then
		cp -f -- "$LOG" "$KEEPLOG" 2>/dev/null || :
	fi
	if [ -d "$WORK" ]; then
		# Never remove through a mount (the caches are bind-mounted).
		if mounted_below "$WORK"; then
			printf '%s: warning: something is still mounted under %s; not removing it\n' \
				"$NAME" "$WORK" >&2
		else
			rm -rf -- "$WORK"
		fi
	fi
	exit "$st"
}
# work_begin OUTDIR: OUT (absolute), the work directory WORK inside it
# (hostd's state directory, on disk: a root file system is too much for a
# /tmp in RAM) and the root R in it, removed at exit with every mount.
work_begin() {
	mkdir -p -- "$1" || die "cannot create $1"
	OUT=$(cd -- "$1" && pwd)
	WORK=$OUT/.$NAME-work.$$
	R=$WORK/root
	MOUNTS=()
	trap work_end EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM HUP
}

mount_in() { # TARGET MOUNT-ARGS...
	local target=$1
	shift
	mkdir -p -- "$target"
	run mount "$@" "$target"
	MOUNTS+=("$target")
}

# A command in the build's root, with a clean environment.
inchroot() {
	env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		HOME=/root LANG=C.UTF-8 LC_ALL=C.UTF-8 TERM=dumb \
		DEBIAN_FRONTEND=noninteractive DEBCONF_NONINTERACTIVE_SEEN=true \
		chroot "$R" "$@"
}

# apt_configure: the root $R's apt sources ($MIRROR, $SECURITY, $SUITE and
# its updates), no documentation but the copyright files (man pages stay),
# and for the build only (apt_build_end removes them) no fsync per file and
# no daemon started by a package script.
apt_configure() {
	cat >"$R/etc/apt/sources.list" <<EOF
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb $SECURITY $SUITE-security main
EOF
	cat >"$R/etc/dpkg/dpkg.cfg.d/berth-nodoc" <<'EOF'
# berth: no /usr/share/doc (but the copyright files) or info pages.
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/info/*
EOF
	echo force-unsafe-io >"$R/etc/dpkg/dpkg.cfg.d/berth-build-unsafe-io"
	printf '#!/bin/sh\nexit 101\n' >"$R/usr/sbin/policy-rc.d"
	chmod 755 "$R/usr/sbin/policy-rc.d"
}
apt_build_end() { rm -f "$R/etc/dpkg/dpkg.cfg.d/berth-build-unsafe-io" "$R/usr/sbin/policy-rc.d"; }
