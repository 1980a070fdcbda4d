# shellcheck shell=bash
# Debian's kernel for berth's test guests, fetched and unpacked on first use.
# Sourced (bash) by images/recipes/tiny.sh and tests/guest/lvm-vm.sh.
#
#   . images/recipes/kernel.sh
#   k=$(berth_kernel [-q] [-p PREFIX]) || exit 1
#   KVER=${k%% *} KDIR=${k#* }
#   vmlinux=$(berth_kernel_vmlinux [-p PREFIX] "$KDIR") || exit 1
#
# berth_kernel prints one line, "VERSION DIR": the kernel version (e.g.
# 6.1.0-57-amd64) and the unpacked tree, which holds
#   DIR/vmlinuz                  the kernel (bzImage)
#   DIR/config                   its configuration
#   DIR/lib/modules/VERSION/     its modules, depmod run (modprobe -d DIR -S VERSION)
#
# linux-image-amd64 is resolved to the real package (linux-image-VERSION),
# which is downloaded with `apt-get download` and unpacked with `dpkg-deb -x`
# (never installed), then `depmod -b`.  The .deb and the unpacked tree are
# kept in $BERTH_CACHE (default /var/cache/berth): debs/ and kernel/VERSION/.
# When apt has no candidate for linux-image-amd64 it runs `apt-get update`;
# when the package cannot be had (offline), the newest cached kernel is used
# with a warning.  After success, other kernels are dropped from the cache
# (about 0.5 GB each).  So a cached kernel costs one `apt-cache show` (about
# 0.2 s) and no network traffic.
#
# berth_kernel_vmlinux prints DIR/vmlinux, the uncompressed ELF kernel
# (QEMU boots it through its PVH entry point, skipping the real-mode setup
# and the in-guest decompression: about 3 s sooner under TCG), extracting it
# from DIR/vmlinuz on first use.  Fails when the kernel lacks CONFIG_PVH=y.
#
# Messages go to stderr, prefixed with PREFIX (default "kernel"); -q drops
# the chatter of the cached case (resolving, "using cached kernel").  Both
# functions run in a subshell: they change no option, trap or variable of
# the caller, and report failure by their exit status (after a message).
# Needs apt-get, apt-cache, dpkg-deb, depmod, flock (and xz or zstd or gzip
# for vmlinux).  Concurrent callers are serialized by $BERTH_CACHE/kernel.lock.

berth_kernel() (
	trap - ERR
	set +e -u
	local quiet='' prefix=kernel
	while [ $# -gt 0 ]; do
		case $1 in
		-q) quiet=1 ;;
		-p) prefix=$2; shift ;;
		*) printf 'berth_kernel: unknown argument %s\n' "$1" >&2; exit 2 ;;
		esac
		shift
	done
	local cache=${BERTH_CACHE:-/var/cache/berth}
	local -a clean=()
	say() { printf '%s: %s\n' "$prefix" "$*" >&2; }
	chat() { [ -n "$quiet" ] || say "$@"; }
	die() {
		printf '%s: error: %s\n' "$prefix" "$*" >&2
		exit 1
	}
	# Temporary directories are removed however this subshell ends.
	cleanup() {
		local p
		for p in "${clean[@]}"; do rm -rf -- "$p"; done
	}
	trap cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM HUP

	local tool
	for tool in apt-get apt-cache dpkg-deb depmod flock; do
		command -v "$tool" >/dev/null 2>&1 ||
			die "$tool not found (run deploy/install-deps.sh run)"
	done
	mkdir -p -- "$cache/debs" "$cache/kernel" || die "cannot create $cache"
	exec 8>"$cache/kernel.lock" || die "cannot open $cache/kernel.lock"
	flock -w 900 8 || die "timed out waiting for the lock on $cache/kernel.lock"

	# The real kernel package that apt's candidate of linux-image-amd64
	# depends on (what `apt-cache depends linux-image-amd64` shows;
	# `apt-cache show` of the candidate is one call instead of two).
	kernel_dependency() {
		apt-cache show --no-all-versions linux-image-amd64 2>/dev/null |
			awk '/^Depends:/ { sub(/^Depends:[ \t]*/, "")
				n = split($0, d, /[,|]/)
				for (i = 1; i <= n; i++) {
					sub(/^[ \t]+/, "", d[i]); sub(/[ \t(].*$/, "", d[i])
					if (d[i] ~ /^linux-image-[0-9]/) { print d[i]; exit }
				}
			}'
	}

	# Prints the real kernel package behind linux-image-amd64, or nothing.
	resolve_kernel_package() {
		local pkg
		pkg=$(kernel_dependency)
		if [ -z "$pkg" ]; then
			say "apt has no candidate for linux-image-amd64: running apt-get update"
			apt-get update -q >&2 || say "warning: apt-get update failed"
			pkg=$(kernel_dependency)
		fi
		printf '%s\n' "$pkg"
	}

	kernel_ready() { [ -f "$cache/kernel/$1/.complete" ] && [ -f "$cache/kernel/$1/config" ]; }

	# The newest complete unpacked kernel in the cache, or nothing.
	newest_cached_kernel() {
		local d
		for d in "$cache"/kernel/*/; do
			if kernel_ready "$(basename "$d")"; then basename "$d"; fi
		done | sort -V | tail -n 1
	}

	# Unpacks kernel $1 (package linux-image-$1) into $cache/kernel/$1,
	# downloading the .deb first unless it is cached.  Returns 1 (with a
	# message) when the package cannot be had; dies on other failures.
	prepare_kernel() { # VERSION
		local kver=$1 kpkg=linux-image-$1 deb dl f x
		deb=$(ls -t "$cache/debs/${kpkg}_"*_amd64.deb 2>/dev/null | head -n 1)
		if [ -z "$deb" ]; then
			say "downloading kernel $kver"
			dl=$(mktemp -d "$cache/debs/.download.XXXXXX") || die "mktemp failed in $cache/debs"
			clean+=("$dl")
			if ! (cd "$dl" && apt-get download -q -o APT::Sandbox::User=root "$kpkg" >&2); then
				say "apt-get download $kpkg failed"
				return 1
			fi
			for f in "$dl"/*.deb; do
				[ -f "$f" ] || die "apt-get download $kpkg produced no .deb"
				mv -f -- "$f" "$cache/debs/" || die "cannot move $f into $cache/debs"
				deb=$cache/debs/${f##*/}
			done
			rm -rf -- "$dl"
		else
			say "using cached ${deb##*/}"
		fi
		say "unpacking kernel $kver"
		x=$(mktemp -d "$cache/kernel/.unpack.XXXXXX") || die "mktemp failed in $cache/kernel"
		clean+=("$x")
		dpkg-deb -x "$deb" "$x/root" || die "dpkg-deb -x $deb failed"
		mkdir -p "$x/k/lib/modules" || die "mkdir failed in $x"
		if [ -d "$x/root/lib/modules/$kver" ]; then
			mv "$x/root/lib/modules/$kver" "$x/k/lib/modules/" || die "mv failed in $x"
		elif [ -d "$x/root/usr/lib/modules/$kver" ]; then
			mv "$x/root/usr/lib/modules/$kver" "$x/k/lib/modules/" || die "mv failed in $x"
		else
			die "${deb##*/} has no modules for $kver"
		fi
		[ -f "$x/root/boot/vmlinuz-$kver" ] || die "${deb##*/} has no /boot/vmlinuz-$kver"
		mv "$x/root/boot/vmlinuz-$kver" "$x/k/vmlinuz" || die "mv failed in $x"
		[ -f "$x/root/boot/config-$kver" ] || die "${deb##*/} has no /boot/config-$kver"
		mv "$x/root/boot/config-$kver" "$x/k/config" || die "mv failed in $x"
		depmod -b "$x/k" "$kver" || die "depmod failed"
		touch "$x/k/.complete" || die "cannot write in $x"
		rm -rf -- "$cache/kernel/$kver"
		mv "$x/k" "$cache/kernel/$kver" || die "cannot move the kernel into $cache/kernel/$kver"
		rm -rf -- "$x"
	}

	local kpkg kver old d f
	chat "resolving the kernel package"
	kpkg=$(resolve_kernel_package)
	kver=${kpkg#linux-image-}
	case $kver in
	*[!A-Za-z0-9.+~_-]*) die "unexpected kernel package name: $kpkg" ;;
	esac
	if [ -n "$kver" ] && kernel_ready "$kver"; then
		chat "using cached kernel $kver"
	elif [ -n "$kver" ] && prepare_kernel "$kver"; then
		:
	else
		# Offline, or the mirror is gone: an older cached kernel will do.
		old=$(newest_cached_kernel)
		[ -n "$old" ] ||
			die "cannot get ${kpkg:-the kernel behind linux-image-amd64} and no kernel is cached in $cache"
		say "warning: cannot get ${kpkg:-the kernel behind linux-image-amd64}; using the cached kernel $old"
		kver=$old
	fi

	# Drop other kernels from the cache (about 0.5 GB each).
	for d in "$cache"/kernel/*/; do
		if [ -d "$d" ] && [ "$(basename "$d")" != "$kver" ]; then
			rm -rf -- "$d"
		fi
	done
	for f in "$cache"/debs/linux-image-*.deb; do
		[ -f "$f" ] || continue
		case ${f##*/} in
		"linux-image-${kver}"_*) ;;
		*) rm -f -- "$f" ;;
		esac
	done

	printf '%s %s\n' "$kver" "$cache/kernel/$kver"
)

berth_kernel_vmlinux() (
	trap - ERR
	set +e -u
	local prefix=kernel
	while [ $# -gt 1 ]; do
		case $1 in
		-p) prefix=$2; shift ;;
		*) printf 'berth_kernel_vmlinux: unknown argument %s\n' "$1" >&2; exit 2 ;;
		esac
		shift
	done
	local kdir=${1:?usage: berth_kernel_vmlinux [-p PREFIX] KDIR}
	local tmp=
	say() { printf '%s: %s\n' "$prefix" "$*" >&2; }
	die() {
		printf '%s: error: %s\n' "$prefix" "$*" >&2
		exit 1
	}
	trap '[ -z "$tmp" ] || rm -f -- "$tmp"' EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM HUP

	# Writes the ELF kernel inside a bzImage (as the kernel's
	# scripts/extract-vmlinux does): decompress from each xz, zstd or gzip
	# magic until an ELF file comes out.
	extract_vmlinux() { # BZIMAGE OUT
		local magic pat dec off
		for magic in xz zstd gzip; do
			case $magic in
			xz) pat='\xfd7zXZ\x00' dec="xz -dc --single-stream" ;;
			zstd) pat='\x28\xb5\x2f\xfd' dec="zstd -dcq" ;;
			gzip) pat='\x1f\x8b\x08' dec="gzip -dcq" ;;
			esac
			command -v "${dec%% *}" >/dev/null 2>&1 || continue
			for off in $(LC_ALL=C grep -obUaP "$pat" "$1" | cut -d: -f1 | head -n 8); do
				tail -c "+$((off + 1))" "$1" | $dec >"$2" 2>/dev/null
				if [ "$(head -c 4 "$2" | od -An -c | tr -d ' ')" = '177ELF' ]; then
					return 0
				fi
			done
		done
		return 1
	}

	if [ ! -f "$kdir/vmlinux" ]; then
		say "extracting the uncompressed kernel (PVH boot)"
		grep -q '^CONFIG_PVH=y' "$kdir/config" 2>/dev/null ||
			die "the kernel in $kdir is not built with CONFIG_PVH=y: cannot boot it as vmlinux"
		tmp=$(mktemp "$kdir/.vmlinux.XXXXXX") || die "mktemp failed in $kdir"
		extract_vmlinux "$kdir/vmlinuz" "$tmp" ||
			die "cannot extract vmlinux from $kdir/vmlinuz"
		chmod 644 "$tmp" && mv -f -- "$tmp" "$kdir/vmlinux" ||
			die "cannot write $kdir/vmlinux"
		tmp=
	fi
	printf '%s\n' "$kdir/vmlinux"
)
