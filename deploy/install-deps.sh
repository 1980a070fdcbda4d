#!/bin/sh
# Install the Debian packages berth needs to build, run and test, and (run,
# test) the system user the gateways run as.  Idempotent: when everything is
# present it only runs dpkg-query (well under a second).
# Usage: deploy/install-deps.sh [build|run|test]   (default: test)
set -eu

what=${1:-test}

# Build: compiler and the libraries hostd, the CLI and the gateways link
# against (libvncserver-dev: libvncclient and libvncserver for berth-desktop).
build="gcc make pkg-config libvirt-dev libsqlite3-dev libmicrohttpd-dev
libjansson-dev libssh-dev libcurl4-openssl-dev libzstd-dev libssl-dev
libnbd-dev libvncserver-dev libnftables-dev"
# Run: the hypervisor, libvirt, the tools hostd runs from argv (lvm2 and
# thin-provisioning-tools for the lvm-thin backend: lvm, thin_ls), and what
# the tiny image recipe (rsync and dbclient go into the guest too) and
# tests/guest/lvm-vm.sh take from Debian; debootstrap for the agents image
# recipe; zstd, xz and gzip for image catalogs and their benchmarks; nodejs
# for npm (below); for network = routed: nftables (libnftables), dnsmasq-base
# (the machines' DHCP and DNS), conntrack (a policy change cuts flows) and
# iproute2 (taps' addresses and routes).
run="nodejs qemu-system-x86 qemu-utils libvirt-daemon-system libvirt-clients
genisoimage busybox-static dropbear-bin openssh-sftp-server kmod cpio e2fsprogs
zstd xz-utils gzip ca-certificates lvm2 thin-provisioning-tools rsync debootstrap
nftables dnsmasq-base conntrack iproute2"
# Test: real clients the tests drive, and what tests/guest/bios-disk.sh makes
# a disk that boots by itself with (SYSLINUX, mtools, sfdisk); chromium,
# headless, for the browser tests.
test="openssh-client procps psmisc curl python3 python3-yaml libxml2-utils
syslinux syslinux-common mtools dosfstools fdisk chromium"

case $what in
build) want=$build ;;
run) want="$build $run" ;;
test) want="$build $run $test" ;;
*) echo "usage: $0 [build|run|test]" >&2; exit 2 ;;
esac

missing=
for p in $want; do
	st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
	case $st in
	*" installed") ;;
	*) missing="$missing $p" ;;
	esac
done

if [ -n "$missing" ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "install-deps: missing packages:$missing (run as root to install them)" >&2
		exit 1
	fi
	echo "install-deps: installing:$missing" >&2
	export DEBIAN_FRONTEND=noninteractive
	# Refresh the package lists when they are absent or older than a day.
	if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mtime -1 2>/dev/null | head -n 1)" ]; then
		apt-get update -q >&2
	fi
	# shellcheck disable=SC2086
	apt-get install -y -q --no-install-recommends $missing >&2
fi

# QEMU must be able to create sockets and files in berth's state directory,
# outside libvirt's own directories: run it as root (ENVIRONMENT.md).
if [ "$what" != build ] && [ -f /etc/libvirt/qemu.conf ]; then
	if ! grep -q '^user = "root"' /etc/libvirt/qemu.conf ||
	   ! grep -q '^group = "root"' /etc/libvirt/qemu.conf; then
		if [ "$(id -u)" = 0 ]; then
			printf '\n# added by berth deploy/install-deps.sh\nuser = "root"\ngroup = "root"\n' >> /etc/libvirt/qemu.conf
			echo "install-deps: set user/group root in /etc/libvirt/qemu.conf (restart libvirtd if it runs)" >&2
		fi
	fi
fi

# The gateways (berth-sshgw, berth-desktop) run as their own unprivileged
# user; hostd knows their requests by it (gateway_user, default berth-gw).
if [ "$what" != build ] && ! getent passwd berth-gw >/dev/null 2>&1; then
	if [ "$(id -u)" = 0 ]; then
		useradd --system --no-create-home --home-dir /nonexistent \
			--shell /usr/sbin/nologin berth-gw
		echo "install-deps: created the system user berth-gw (the gateways run as it)" >&2
	else
		echo "install-deps: no user berth-gw (run as root to create it)" >&2
	fi
fi
# dnsmasq, the machines' DHCP and DNS with network = routed, runs as its
# own unprivileged user, which alone (with root) reads STATE/net.
if [ "$what" != build ] && ! getent passwd berth-dns >/dev/null 2>&1; then
	if [ "$(id -u)" = 0 ]; then
		useradd --system --no-create-home --home-dir /nonexistent \
			--shell /usr/sbin/nologin --user-group berth-dns
		echo "install-deps: created the system user berth-dns (the machines' dnsmasq runs as it)" >&2
	else
		echo "install-deps: no user berth-dns (run as root to create it)" >&2
	fi
fi
# From npm, into build/node (not committed; web/package-lock.json pins
# them): noVNC, which berth-desktop serves to browsers (run), and
# playwright-core, which drives Debian's chromium in the browser tests
# (test).  Skipped when build/node already has exactly what the lock says.
if [ "$what" != build ]; then
	root=$(cd "$(dirname "$0")/.." && pwd)
	node_dir=$root/build/node
	if ! command -v npm >/dev/null 2>&1; then
		if [ "$(id -u)" != 0 ]; then
			echo "install-deps: npm is missing (run as root to install it)" >&2
			exit 1
		fi
		# Debian's nodejs comes without npm (NodeSource's has it).
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends npm >&2
	fi
	omit=
	[ "$what" = test ] || omit=--omit=dev
	stamp=$node_dir/.installed$omit
	if ! cmp -s "$root/web/package-lock.json" "$stamp" 2>/dev/null; then
		echo "install-deps: npm ci into $node_dir" >&2
		mkdir -p "$node_dir"
		cp "$root/web/package.json" "$root/web/package-lock.json" "$node_dir/"
		(cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error $omit >&2)
		cp "$root/web/package-lock.json" "$stamp"
	fi
fi
exit 0
