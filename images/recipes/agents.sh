#!/bin/bash
# Build berth's "agents" image: Debian 12 from Debian's packages
# (debootstrap), with Claude Code, Codex and OpenCode from npm.
#
#   images/recipes/agents.sh OUTDIR
#
# About 3 minutes on 2 cores, cold or warm: most of it is dpkg, mke2fs and
# zstd; the caches save the ~1 GB of downloads (.debs and npm packages).
#
# Writes OUTDIR/vmlinuz, OUTDIR/initrd.img, OUTDIR/root.raw.zst and
# OUTDIR/image.json.  Run as root.  hostd runs it for `berth image build
# agents` (images/recipes/agents-desktop.sh runs it with
# BERTH_AGENTS_FLAVOUR=desktop).  Needs the host packages debootstrap,
# e2fsprogs, zstd and util-linux (unshare, mount); the network, to reach
# Debian's mirror and the npm registry.
#
# Environment:
#   BERTH_CACHE            cache directory (default /var/cache/berth); this
#                          recipe keeps agents/debs/ (every .deb debootstrap
#                          and apt fetched: also apt's archive directory
#                          inside the build) and agents/npm/ (npm's cache)
#                          there, and the log of the last build,
#                          agents/NAME-build.log.  A second build downloads
#                          only what changed.
#   BERTH_AGENTS_FLAVOUR   "" (default) or "desktop": adds Xfce, logged in
#                          automatically as agent on the VM's display
#                          (lightdm), and boots to graphical.target.
#   BERTH_AGENTS_RAW=1     write the root uncompressed, as a sparse
#                          OUTDIR/root.raw ("root":"root.raw" in image.json)
#                          instead of root.raw.zst, for a hostd that cannot
#                          read .zst roots.
#   BERTH_AGENTS_SIZE      the root's virtual size (default 16G); the root
#                          file system grows at boot to a larger disk
#                          (x-systemd.growfs), so `berth create --disk 64G`
#                          gives 64 GiB.
#   BERTH_AGENTS_NPM       the npm packages, as npm install arguments
#                          (default: the three below, latest versions).
#   BERTH_DEBIAN_MIRROR    default http://deb.debian.org/debian
#   BERTH_DEBIAN_SECURITY  default http://deb.debian.org/debian-security
#
# The image (what hostd relies on):
#  - the root file system is the whole disk /dev/vda (ext4, no partition
#    table), booted directly with the kernel and initrd kept beside it
#    (Debian's linux-image-amd64; initramfs-tools with MODULES=list: the
#    virtio drivers, ext4 and crc32c, checked to be there).  The kernel
#    package is held (apt-mark hold): hostd boots the kernel of the image,
#    so a newer one inside would only strand its modules;
#  - /usr/lib/berth/broker-env (images/recipes/agents/broker-env): the
#    credential broker's hook, which hostd runs after writing the machine's
#    NAME_BASE_URL variables: Claude Code and Codex use ANTHROPIC_BASE_URL
#    and OPENAI_BASE_URL (secrets named anthropic and openai), with
#    placeholder keys that the broker replaces by the secrets;
#  - systemd; at every boot berth-seed.service (images/recipes/agents/
#    berth-seed; 1-3 s under TCG, most of it ssh-keygen at the first
#    boot) reads the NoCloud seed (ISO 9660
#    labelled cidata, normally /dev/vdb): hostname, the seed's
#    ssh_authorized_keys into /home/agent/.ssh/authorized_keys (replacing
#    the old ones), SSH host keys made at first boot and again when the
#    seed's instance-id changes (a fork); then OpenSSH (keys only, Debian's
#    AcceptEnv LANG LC_*), systemd-networkd (DHCP on every en*/eth* NIC) and
#    systemd-resolved;
#  - the user agent (uid 1000, bash, groups sudo and docker, no password,
#    passwordless sudo); root has no keys;
#  - Debian's git, build-essential, python3 (pip, venv), Node.js 18 and
#    npm, docker.io (docker.socket: dockerd starts on first use, not at
#    boot), qemu-guest-agent, and the usual command-line tools;
#  - from npm, installed globally in /usr/local: @anthropic-ai/claude-code
#    (claude), @openai/codex (codex), opencode-ai (opencode), their latest
#    versions at build time.  Node 18 is not a limit: codex needs node >= 16;
#    claude (since 2.1.113) and opencode are native executables that the
#    npm packages' postinstall scripts (which run on Node 18) put in place,
#    and claude-code's package.json asks for node >= 22 only for that
#    script (npm warns, installs, and `claude --version` runs).
#    Both native executables are built for x86-64-v2 or later (SSE4.2,
#    POPCNT): on QEMU's default CPU model (qemu64, what a libvirt domain
#    without <cpu> gets) they die with SIGILL.  The machine's CPU model must
#    provide x86-64-v2: tested under TCG with <cpu mode='custom'
#    match='exact' check='none'><model fallback='forbid'>Nehalem</model>
#    </cpu> (and with QEMU's -cpu max).  opencode is its "baseline" build
#    (no AVX2 needed).
#  - boots quickly under TCG: no grub, no cloud-init, apt/man-db/e2scrub
#    timers off, systemd-networkd-wait-online off, fsck skipped (the root
#    is mounted rw by the initramfs; ext4's journal covers crashes).
set -Eeuo pipefail
umask 022

FLAVOUR=${BERTH_AGENTS_FLAVOUR:-}
case $FLAVOUR in
"") NAME=agents ;;
desktop) NAME=agents-desktop ;;
*) echo "agents: error: BERTH_AGENTS_FLAVOUR must be empty or 'desktop'" >&2; exit 2 ;;
esac
RAW=
case ${BERTH_AGENTS_RAW:-0} in
1 | yes | true) RAW=1 ;;
0 | no | false | "") ;;
*) echo "$NAME: error: BERTH_AGENTS_RAW must be 0 or 1" >&2; exit 2 ;;
esac

SUITE=bookworm
MIRROR=${BERTH_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY=${BERTH_DEBIAN_SECURITY:-http://deb.debian.org/debian-security}
SIZE=${BERTH_AGENTS_SIZE:-16G}
USER_NAME=agent
USER_UID=1000
CMDLINE="root=/dev/vda rw rootfstype=ext4 fsck.mode=skip console=tty1 console=ttyS0 quiet"
NPM_PACKAGES=${BERTH_AGENTS_NPM:-@anthropic-ai/claude-code@latest @openai/codex@latest opencode-ai@latest}
# The commands each npm package must provide (checked in the build).
NPM_COMMANDS="claude codex opencode"

# Installed with apt (no recommends) on top of debootstrap's minbase.
PACKAGES=(
	# system
	systemd systemd-sysv udev dbus libpam-systemd systemd-resolved
	systemd-timesyncd kmod e2fsprogs procps psmisc iproute2 iputils-ping
	netcat-openbsd ca-certificates locales tzdata sudo less man-db
	bash-completion
	# kernel for direct boot
	linux-image-amd64 initramfs-tools zstd
	# what hostd and the owner reach it with
	openssh-server openssh-client qemu-guest-agent
	# development
	git build-essential pkg-config python3 python3-pip python3-venv
	python3-dev nodejs npm docker.io curl wget gnupg jq ripgrep unzip zip
	xz-utils bzip2 rsync tmux vim-tiny nano file patch lsof htop
)
DESKTOP_PACKAGES=(
	xserver-xorg-core xserver-xorg-input-libinput lightdm
	lightdm-gtk-greeter xfce4 xfce4-terminal dbus-user-session dbus-x11
	fonts-dejavu-core adwaita-icon-theme x11-xserver-utils
	spice-vdagent xclip
)
# Timers and services that only slow a TCG boot or do nothing in a VM
# booted by hostd (dockerd and containerd start when docker.socket is
# first used).
DISABLE_UNITS=(
	apt-daily.timer apt-daily-upgrade.timer man-db.timer e2scrub_all.timer
	e2scrub_reap.service systemd-networkd-wait-online.service
	docker.service containerd.service
)
MASK_UNITS=(systemd-firstboot.service)

. "$(dirname -- "${BASH_SOURCE[0]}")/lib/debian-build.sh"

if [ $# -ne 1 ] || [ -z "$1" ]; then
	echo "usage: $0 OUTDIR" >&2
	exit 2
fi
OUT=$1
CACHE=${BERTH_CACHE:-/var/cache/berth}
HERE=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
FILES=$HERE/agents

[ "$(id -u)" = 0 ] || die "must run as root (debootstrap, chroot)"
for tool in debootstrap chroot mke2fs zstd unshare mount umount flock awk \
	findmnt; do
	command -v "$tool" >/dev/null 2>&1 ||
		die "$tool not found (install debootstrap, e2fsprogs, zstd, util-linux)"
done
for f in berth-seed berth-seed.service 20-berth.network sshd-berth.conf \
	lightdm-berth.conf broker-env; do
	[ -f "$FILES/$f" ] || die "missing $FILES/$f"
done

# Mounts in a namespace of the build's own, the work directory in OUTDIR
# (lib/debian-build.sh).
private_mounts "$@"
work_begin "$OUT"
APT=(apt-get -q -y -o APT::Install-Recommends=false -o Dpkg::Use-Pty=0
	-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)

mkdir -p -- "$CACHE/agents/debs/partial" "$CACHE/agents/npm" "$WORK"
LOG=$WORK/build.log
KEEPLOG=$CACHE/agents/$NAME-build.log
: >"$LOG"
# One agents build at a time per cache (they share the .deb and npm caches).
exec 9>"$CACHE/agents/.lock"
if ! flock -n 9; then
	say "waiting for another agents build (lock $CACHE/agents/.lock)"
	flock -w 1500 9 || die "timed out waiting for the lock on $CACHE/agents"
fi

# ----------------------------------------------------------- debootstrap ---

step "debootstrap $SUITE (minbase)"
run debootstrap --variant=minbase --arch=amd64 --cache-dir="$CACHE/agents/debs" \
	"$SUITE" "$R" "$MIRROR"

# --------------------------------------------------------- apt packages ---

step "configuring apt"
apt_configure
mkdir -p "$R/etc/initramfs-tools/conf.d"
# The initrd must boot any of hostd's machines, not the one that built it:
# MODULES=list with the virtio drivers and ext4, rather than "most" (a
# 30 MB initrd that takes 3 s more to unpack and probe under TCG).
cat >"$R/etc/initramfs-tools/conf.d/berth.conf" <<'EOF'
# berth: hostd's machines have virtio disks and NICs and an ext4 root
# (the modules are listed in /etc/initramfs-tools/modules).
MODULES=list
COMPRESS=zstd
RESUME=none
EOF
cat >>"$R/etc/initramfs-tools/modules" <<'EOF'
# berth: the root of hostd's machines (virtio disk, ext4)
virtio_pci
virtio_blk
virtio_scsi
sd_mod
virtio_net
virtio_rng
ext4
crc32c_generic
crc32c_intel
EOF
echo "$NAME" >"$R/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n' \
	"$NAME" >"$R/etc/hosts"
rm -f "$R/etc/resolv.conf"
cp -L /etc/resolv.conf "$R/etc/resolv.conf"
cat >"$R/tmp/debconf" <<'EOF'
locales locales/locales_to_be_generated multiselect en_US.UTF-8 UTF-8
locales locales/default_environment_locale select C.UTF-8
man-db man-db/auto-update boolean false
EOF

mount_in "$R/proc" -t proc proc
mount_in "$R/sys" -t sysfs -o ro sysfs
mount_in "$R/dev/pts" -t devpts -o newinstance,ptmxmode=0666,mode=620,gid=5 devpts
mount_in "$R/var/cache/apt/archives" --bind "$CACHE/agents/debs"
mount_in "$R/var/cache/berth-npm" --bind "$CACHE/agents/npm"

run inchroot debconf-set-selections /tmp/debconf
rm -f "$R/tmp/debconf"
step "apt-get update"
run inchroot "${APT[@]}" update
step "apt-get dist-upgrade (security updates of the base)"
run inchroot "${APT[@]}" dist-upgrade
pkgs=("${PACKAGES[@]}")
[ "$FLAVOUR" = desktop ] && pkgs+=("${DESKTOP_PACKAGES[@]}")
step "apt-get install (${#pkgs[@]} packages and their dependencies)"
run inchroot "${APT[@]}" install "${pkgs[@]}"
# shellcheck disable=SC2016 # a dpkg-query format
say "$(inchroot dpkg-query -W -f '${binary:Package}\n' | wc -l) packages installed"
# systemd-resolved made /etc/resolv.conf its stub's (nothing answers there
# in the build): the host's again until the end.
rm -f "$R/etc/resolv.conf"
cp -L /etc/resolv.conf "$R/etc/resolv.conf"

# ---------------------------------------------------------- system setup ---

step "configuring the system"
KVER=$(inchroot linux-version list | sort -V | tail -n 1)
[ -n "$KVER" ] || die "no kernel installed"
run inchroot apt-mark hold linux-image-amd64 "linux-image-$KVER"
[ -f "$R/boot/vmlinuz-$KVER" ] || die "no /boot/vmlinuz-$KVER"
[ -f "$R/boot/initrd.img-$KVER" ] || die "no /boot/initrd.img-$KVER"
# The initrd must hold what it takes to find the root.
mods=$(inchroot lsinitramfs "/boot/initrd.img-$KVER" | grep -E '/(virtio_pci|virtio_blk|virtio_net|ext4)\.ko' |
	sed -e 's|.*/||' -e 's|\.ko.*||' | sort -u | tr '\n' ' ')
for m in virtio_pci virtio_blk virtio_net ext4; do
	case " $mods " in
	*" $m "*) ;;
	*)
		# Built into the kernel is as good.
		grep -q "/$m.ko" "$R/lib/modules/$KVER/modules.builtin" 2>/dev/null ||
			die "the initrd of $KVER has no $m"
		;;
	esac
done

cat >"$R/etc/fstab" <<'EOF'
# berth: the whole disk is the root; it grows to the disk's size at boot.
/dev/vda	/	ext4	defaults,errors=remount-ro,x-systemd.growfs	0	0
EOF
run inchroot useradd --create-home --shell /bin/bash --uid "$USER_UID" --user-group \
	--groups sudo,docker --comment "berth agent" "$USER_NAME"
# '*': no password matches, and (unlike '!') sshd does not see a locked account.
run inchroot usermod -p '*' "$USER_NAME"
run inchroot usermod -p '*' root
printf '%s ALL=(ALL:ALL) NOPASSWD: ALL\n' "$USER_NAME" >"$R/etc/sudoers.d/90-berth-$USER_NAME"
chmod 440 "$R/etc/sudoers.d/90-berth-$USER_NAME"
run inchroot visudo -cq -f "/etc/sudoers.d/90-berth-$USER_NAME"

mkdir -p "$R/usr/lib/berth" "$R/etc/berth"
install -m 755 "$FILES/berth-seed" "$R/usr/lib/berth/berth-seed"
# The credential broker's hook: Claude Code's and Codex's settings for the
# NAME_BASE_URL variables hostd writes (images/recipes/agents/broker-env).
install -m 755 "$FILES/broker-env" "$R/usr/lib/berth/broker-env"
printf '# berth-seed: the user who gets the seed'"'"'s SSH keys\nBERTH_USER=%s\n' \
	"$USER_NAME" >"$R/etc/berth/seed.conf"
install -m 644 "$FILES/berth-seed.service" "$R/etc/systemd/system/berth-seed.service"
install -m 644 "$FILES/20-berth.network" "$R/etc/systemd/network/20-berth.network"
install -m 644 "$FILES/sshd-berth.conf" "$R/etc/ssh/sshd_config.d/berth.conf"
echo 'LANG=C.UTF-8' >"$R/etc/default/locale"

run inchroot systemctl enable berth-seed.service systemd-networkd.service \
	systemd-resolved.service ssh.service docker.socket
for u in "${DISABLE_UNITS[@]}"; do
	if [ -n "$(inchroot systemctl list-unit-files --no-legend "$u" 2>/dev/null)" ]; then
		run inchroot systemctl disable "$u"
	fi
done
run inchroot systemctl mask "${MASK_UNITS[@]}"
if [ "$FLAVOUR" = desktop ]; then
	mkdir -p "$R/etc/lightdm/lightdm.conf.d"
	install -m 644 "$FILES/lightdm-berth.conf" "$R/etc/lightdm/lightdm.conf.d/50-berth.conf"
	run inchroot systemctl enable lightdm.service
	run inchroot systemctl set-default graphical.target
else
	run inchroot systemctl set-default multi-user.target
fi

# ------------------------------------------------------------------- npm ---

step "npm install -g $NPM_PACKAGES"
npm_args=(--global --prefix /usr/local --cache /var/cache/berth-npm --no-audit
	--no-fund --no-update-notifier --loglevel=warn)
[ -n "${BERTH_NPM_REGISTRY:-}" ] && npm_args+=(--registry "$BERTH_NPM_REGISTRY")
# npm trusts what the build host trusts (a host behind a TLS-inspecting
# proxy has its CA there), for this install only: the image keeps Debian's
# CA list.
npm_env=()
if [ -s /etc/ssl/certs/ca-certificates.crt ]; then
	cp /etc/ssl/certs/ca-certificates.crt "$R/tmp/berth-host-ca.crt"
	npm_env=(NODE_EXTRA_CA_CERTS=/tmp/berth-host-ca.crt)
fi
# shellcheck disable=SC2086 # a list of package specs
run inchroot env "${npm_env[@]}" npm install "${npm_args[@]}" $NPM_PACKAGES
rm -f "$R/tmp/berth-host-ca.crt"

# opencode's postinstall picked the build for this (the build host's) CPU;
# the guest's may lack AVX2: use the baseline build.
NM=$R/usr/local/lib/node_modules
oc=$NM/opencode-ai
ocb=$(find "$oc" "$NM" -maxdepth 3 -path '*/opencode-linux-x64-baseline/bin/opencode' -type f 2>/dev/null | head -n 1)
if [ -d "$oc" ] && [ -n "$ocb" ]; then
	target=$oc/bin/opencode.exe
	[ -e "$target" ] || target=$oc/bin/opencode
	# A copy, not a link: the platform packages go next.
	run cp -f --remove-destination "$ocb" "$target"
fi
# Platform packages that are not this platform's (npm 9 ignores the "libc"
# field, so the musl builds are installed too), and opencode's builds now
# that one is in place: several hundred MB.
find "$NM" -maxdepth 4 -type d \( -name 'claude-code-linux-*-musl' \
	-o -name 'opencode-linux-x64*' -o -name 'opencode-linux-*-musl' \) \
	-path '*/node_modules/*' -prune -exec rm -rf {} + 2>>"$LOG" || :
# Fails loudly here rather than in the first machine.
npm_versions=
for c in $NPM_COMMANDS; do
	v=$(inchroot env HOME=/tmp/berth-version-home "$c" --version 2>>"$LOG" | tail -n 1) ||
		die "$c --version failed"
	[ -n "$v" ] || die "$c --version printed nothing"
	npm_versions+="$c $v; "
done
rm -rf "$R/tmp/berth-version-home"
say "npm: ${npm_versions%; }; node $(inchroot node --version)"

# --------------------------------------------------------------- cleanup ---

step "cleaning up"
apt_build_end
echo 'man-db man-db/auto-update boolean true' | inchroot debconf-set-selections
run inchroot mandb -q
# Not `apt-get clean`: the archives are the cache, bind-mounted.  Only the
# .debs that the mirror no longer has (superseded versions) leave it.
run inchroot "${APT[@]}" autoclean
unmount_all
# npm's cache keeps every version it ever fetched: past 3 GB it starts over.
if [ "$(du -sm "$CACHE/agents/npm" | cut -f1)" -gt 3072 ]; then
	say "npm's cache is over 3 GB: emptying it"
	rm -rf "${CACHE:?}/agents/npm" && mkdir -p "$CACHE/agents/npm"
fi
rm -rf "$R/var/cache/berth-npm" "$R"/var/lib/apt/lists/* "$R"/var/cache/apt/*.bin \
	"$R"/root/.npm \
	"$R"/root/.cache "$R"/tmp/* "$R"/var/tmp/* "$R"/var/cache/debconf/*-old \
	"$R"/var/lib/dpkg/*-old "$R"/var/log/apt/* "$R"/var/log/journal/*
find "$R/var/log" -type f \( -name '*.log' -o -name btmp -o -name wtmp -o -name lastlog \) \
	-exec truncate -s 0 {} +
# Made per machine at its first boot: host keys (berth-seed), machine-id
# (systemd).
rm -f "$R"/etc/ssh/ssh_host_*
: >"$R/etc/machine-id"
rm -f "$R/var/lib/dbus/machine-id"
ln -sfn /etc/machine-id "$R/var/lib/dbus/machine-id"
ln -sfn ../run/systemd/resolve/stub-resolv.conf "$R/etc/resolv.conf"
mounted_below "$R" && die "something is still mounted under $R"

# ------------------------------------------------------------ root image ---

step "mke2fs -d ($SIZE)"
used=$(du -sxm "$R" | cut -f1)
run mke2fs -q -F -t ext4 -L "$NAME" -m 1 -d "$R" "$WORK/root.raw" "$SIZE"
cp "$R/boot/vmlinuz-$KVER" "$WORK/vmlinuz"
cp "$R/boot/initrd.img-$KVER" "$WORK/initrd.img"
rm -rf "$R"
ROOT_FILE=root.raw.zst
if [ "$RAW" = 1 ]; then
	ROOT_FILE=root.raw
else
	step "zstd"
	# From a file, not a pipe, so the frame header holds the content size.
	run zstd -T0 --long=27 -q -f "$WORK/root.raw" -o "$WORK/root.raw.zst"
	rm -f "$WORK/root.raw"
fi
printf '{"name":"%s","format":"raw","boot":"direct","kernel":"vmlinuz","initrd":"initrd.img","cmdline":"%s","user":"%s","root":"%s","kernel_version":"%s"}\n' \
	"$NAME" "$CMDLINE" "$USER_NAME" "$ROOT_FILE" "$KVER" >"$WORK/image.json"

# ---------------------------------------------------------------- output ---

# Renamed into place (same file system), so a reader never sees half a file.
for f in vmlinuz initrd.img "$ROOT_FILE" image.json; do
	chmod 644 "$WORK/$f"
	mv -f "$WORK/$f" "$OUT/$f"
done
if [ "$RAW" = 1 ]; then rm -f "$OUT/root.raw.zst"; else rm -f "$OUT/root.raw"; fi

STEP=finished
say "wrote $OUT: vmlinuz, initrd.img ($(du -k "$OUT/initrd.img" | cut -f1) KiB), $ROOT_FILE ($(du -m "$OUT/$ROOT_FILE" | cut -f1) MiB allocated; $used MiB of files in a $SIZE file system), image.json; kernel $KVER; ${npm_versions%; }; $(elapsed) s"
