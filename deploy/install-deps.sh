#!/bin/sh
# Install the Debian packages berth needs to build, run and test, and (run,
# test) the system users the gateways run as.  Idempotent: when everything is
# present it only runs dpkg-query (well under a second).
# Usage: deploy/install-deps.sh [build|run|test]   (default: test)
set -eu

what=${1:-test}

# Build: compiler and the libraries hostd, the CLI and the gateways link
# against (libvncserver-dev: libvncclient and libvncserver for berth-desktop;
# zlib1g-dev: berth-web inflates E2B uploads sent gzipped).
build="gcc make pkg-config libvirt-dev libsqlite3-dev libmicrohttpd-dev
libjansson-dev libssh-dev libcurl4-openssl-dev libzstd-dev libssl-dev
libnbd-dev libvncserver-dev libnftables-dev zlib1g-dev"
# Run: the hypervisor, libvirt, the tools hostd runs from argv (lvm2 and
# thin-provisioning-tools for the lvm-thin backend: lvm, thin_ls), and what
# the tiny image recipe (rsync and dbclient go into the guest too) and
# tests/guest/lvm-vm.sh take from Debian; debootstrap for the agents and
# debian-cloud image recipes (and fdisk's sfdisk for the latter's MBR);
# zstd, xz and gzip for image catalogs and their benchmarks; nodejs for npm
# (below); for network = routed: nftables (libnftables), dnsmasq-base (the
# machines' DHCP and DNS), conntrack (a policy change cuts flows) and
# iproute2 (taps' addresses and routes); openssh-client for ssh-keygen, with
# which hostd checks that whoever adds a key holds it.
run="openssh-client nodejs qemu-system-x86 qemu-utils libvirt-daemon-system libvirt-clients
genisoimage busybox-static dropbear-bin openssh-sftp-server kmod cpio e2fsprogs
zstd xz-utils gzip ca-certificates lvm2 thin-provisioning-tools rsync debootstrap
fdisk nftables dnsmasq-base conntrack iproute2"
# Test: real clients the tests drive (python3-yaml: t820 reads the seed's
# user-data; PuTTY's plink and pscp, paramiko and asyncssh through the
# gateway, and ssh-audit against it), and what tests/guest/bios-disk.sh
# makes a disk that boots by itself with (SYSLINUX, mtools; sfdisk is in
# run); chromium, headless, for the browser tests; clang and its runtime
# (libFuzzer) for the fuzz harnesses in tests/fuzz; gdb for the stacks of a
# berth-hostd that does not stop (tests/lib.sh kill_hostd).
test="openssh-client procps psmisc curl python3 python3-yaml libxml2-utils
syslinux syslinux-common mtools dosfstools chromium putty-tools python3-paramiko
python3-asyncssh ssh-audit clang libclang-rt-14-dev gdb"

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

# QEMU runs unprivileged (docs/architecture.md, "QEMU unprivileged"): hostd
# gives each machine's QEMU a uid of its own, but libvirt's default user in
# qemu.conf (its capability probes and any other domain run as it) must not
# be root either, or hostd refuses to start.  Lines an earlier berth added
# (user = "root", group = "root") go; any other user = "root" or group =
# "root" is commented out; then user = "libvirt-qemu", group = "kvm" unless
# the file names another unprivileged user.  libvirtd reads qemu.conf at its
# start only: restart it after a change.  BERTH_QEMU_CONF and BERTH_KVM_DEV
# name other files (tests of this script).
conf=${BERTH_QEMU_CONF:-/etc/libvirt/qemu.conf}
kvm=${BERTH_KVM_DEV:-/dev/kvm}
active() { grep -E "^[[:space:]]*$1[[:space:]]*=" "$conf" | tail -n 1 | sed -E 's/^[^=]*=[[:space:]]*"?([^"]*)"?.*/\1/'; }
if [ "$what" != build ] && [ -f "$conf" ]; then
	if [ "$(active user)" != libvirt-qemu ] || [ "$(active group)" != kvm ]; then
		if [ "$(id -u)" = 0 ]; then
			tmp=$(mktemp "$conf.berth.XXXXXX")
			awk '
				/^# added by berth deploy\/install-deps\.sh$/ { berth = 1; next }
				berth && /^(user|group) = "root"$/ { next }
				{ berth = 0 }
				/^[[:space:]]*(user|group)[[:space:]]*=[[:space:]]*"(root|0|\+0)"/ {
					print "# disabled by berth deploy/install-deps.sh (QEMU must not run as root): " $0
					next
				}
				{ print }' "$conf" >"$tmp"
			add=
			grep -qE '^[[:space:]]*user[[:space:]]*=' "$tmp" || add='user = "libvirt-qemu"\n'
			grep -qE '^[[:space:]]*group[[:space:]]*=' "$tmp" || add="$add"'group = "kvm"\n'
			if [ -n "$add" ]; then
				[ -z "$(tail -n 1 "$tmp")" ] || echo >>"$tmp"
				printf "# added by berth deploy/install-deps.sh: QEMU runs unprivileged\\n$add" >>"$tmp"
			fi
			if cmp -s "$conf" "$tmp"; then
				rm -f "$tmp"
			else
				chmod --reference="$conf" "$tmp" 2>/dev/null || chmod 600 "$tmp"
				mv "$tmp" "$conf"
				echo "install-deps: $conf: QEMU runs as user $(active user), group $(active group) (restart libvirtd if it runs)" >&2
			fi
		else
			echo "install-deps: $conf does not say user = \"libvirt-qemu\", group = \"kvm\" (run as root to set it)" >&2
		fi
	fi
fi
# /dev/kvm root:kvm 0660, as udev makes it: an unprivileged QEMU (group kvm)
# opens it, and libvirt, which checks that its default user can, otherwise
# re-probes QEMU at every start (seconds each).  Without udev (these
# machines) the mode does not survive a reboot: run this again.
if [ "$what" != build ] && [ -c "$kvm" ] && [ "$(stat -c '%G %a' "$kvm")" != "kvm 660" ]; then
	if [ "$(id -u)" = 0 ]; then
		chgrp kvm "$kvm" && chmod 0660 "$kvm"
		echo "install-deps: $kvm is now root:kvm 0660" >&2
	else
		echo "install-deps: $kvm is not root:kvm 0660 (run as root to set it)" >&2
	fi
fi

# The network daemons run as unprivileged users of their own, three of
# them: hostd knows each one's requests by its uid (sshgw_user,
# desktop_user, web_user) and answers each only its own routes or socket,
# so berth-desktop's user cannot get an SSH credential, and berth-web's
# acts only with the tokens its clients send.
for u in berth-sshgw berth-desktop berth-web; do
	if [ "$what" != build ] && ! getent passwd "$u" >/dev/null 2>&1; then
		if [ "$(id -u)" = 0 ]; then
			useradd --system --no-create-home --home-dir /nonexistent \
				--shell /usr/sbin/nologin --user-group "$u"
			echo "install-deps: created the system user $u (${u#berth-} runs as it)" >&2
		else
			echo "install-deps: no user $u (run as root to create it)" >&2
		fi
	fi
done
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
