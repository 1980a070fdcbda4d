#!/bin/sh
# Take a bare Debian 12 host to `ssh -p PORT NAME@host`, from a clone of
# this repository, as root:
#   deploy/install.sh [--ssh-port PORT] [--disk DEVICE [--force]] [--prefix DIR]
# 1. deploy/install-deps.sh run: Debian's packages, noVNC, the users
#    berth-sshgw, berth-desktop, berth-web and berth-dns, QEMU unprivileged in
#    /etc/libvirt/qemu.conf;
# 2. make, make install (PREFIX, default /usr/local);
# 3. /etc/berth/berth.conf (make install's, when there is none) and
#    /etc/default/berth (the gateways' addresses), each written only when
#    missing;
# 4. with --disk DEVICE: deploy/lvm-thin-setup.sh DEVICE (a volume group
#    "berth" with a thin pool "pool"; --force for a device that holds
#    data) and storage = lvm-thin in berth.conf, unless the pool exists;
# 5. when systemd is PID 1: libvirtd, then the units berth-hostd,
#    berth-sshgw, berth-desktop and berth-web enabled and started (restarted when
#    their binary changed); otherwise how to start them by hand;
# 6. the next steps.
# Idempotent: run it again after a `git pull` to update.  Arguments are
# only ever passed as arguments (never to a shell).
set -eu

usage() {
	echo "usage: $0 [--ssh-port PORT] [--disk DEVICE [--force]] [--prefix DIR]" >&2
	exit 2
}

port=
disk=
force=
prefix=/usr/local
while [ $# -gt 0 ]; do
	case $1 in
	--ssh-port) [ $# -ge 2 ] || usage; port=$2; shift 2 ;;
	--disk) [ $# -ge 2 ] || usage; disk=$2; shift 2 ;;
	--force) force=--force; shift ;;
	--prefix) [ $# -ge 2 ] || usage; prefix=$2; shift 2 ;;
	-h|--help) usage ;;
	*) echo "install: unknown argument '$1'" >&2; usage ;;
	esac
done
case $port in
'') ;;
*[!0-9]*) echo "install: --ssh-port '$port' is not a number from 1 to 65535" >&2; exit 2 ;;
*) if [ "$port" -lt 1 ] || [ "$port" -gt 65535 ]; then
	echo "install: --ssh-port '$port' is not a number from 1 to 65535" >&2; exit 2
   fi ;;
esac
case $prefix in
/*) ;;
*) echo "install: --prefix '$prefix' is not an absolute path" >&2; exit 2 ;;
esac
[ -z "$force" ] || [ -n "$disk" ] || { echo "install: --force goes with --disk" >&2; exit 2; }
if [ "$(id -u)" != 0 ]; then
	echo "install: run as root (it installs packages, users and services)" >&2
	exit 1
fi
if [ -n "$disk" ] && [ ! -b "$disk" ]; then
	echo "install: --disk '$disk' is not a block device" >&2
	exit 1
fi
if ! grep -qs '^VERSION_ID="12"' /etc/os-release || ! grep -qs '^ID=debian' /etc/os-release; then
	echo "install: this is not Debian 12; going on, but only Debian 12 is tested" >&2
fi

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
say() { echo "install: $*" >&2; }
# await UNIT TRIES WHAT CMD...: CMD until it succeeds, every 0.5 s; after
# TRIES, or when UNIT is no longer active, say UNIT does not WHAT, show its
# log and exit.
await() {
	aw_unit=$1 aw_tries=$2 aw_what=$3 aw_i=0
	shift 3
	until "$@" >/dev/null 2>&1; do
		aw_i=$((aw_i + 1))
		if [ "$aw_i" -ge "$aw_tries" ] || ! systemctl is-active --quiet "$aw_unit.service"; then
			say "$aw_unit does not $aw_what; its log:"
			journalctl -u "$aw_unit.service" -n 30 --no-pager >&2 || true
			exit 1
		fi
		sleep 0.5
	done
}
listening() { ss -Hltn "sport = :$1" | grep -q .; }
conf=/etc/berth/berth.conf
defaults=/etc/default/berth
state=/var/lib/berth
units="berth-hostd berth-sshgw berth-desktop berth-web"
systemd=
[ -d /run/systemd/system ] && systemd=1

# 1. Packages, noVNC, users, qemu.conf.
# cat: a missing file is no error here.
# shellcheck disable=SC2002
qemu_before=$(cat /etc/libvirt/qemu.conf 2>/dev/null | cksum)
sh deploy/install-deps.sh run
# shellcheck disable=SC2002
qemu_after=$(cat /etc/libvirt/qemu.conf 2>/dev/null | cksum)

# 2. Build and install; note which binaries changed (their units restart).
sums() {
	for b in berth-hostd berth-sshgw berth-desktop berth-web; do
		echo "$b $(cksum 2>/dev/null <"$prefix/bin/$b" || echo none)"
	done
}
changed() { [ "$(echo "$before" | grep "^$1 ")" != "$(echo "$after" | grep "^$1 ")" ]; }
before=$(sums)
say "building"
make -j"$(nproc)" progs
make install PREFIX="$prefix"
after=$(sums)

# 3. The gateways' addresses.
if [ ! -e "$defaults" ]; then
	mkdir -p "$(dirname "$defaults")"
	cat >"$defaults" <<EOF
# Where berth's gateways listen (read by berth-sshgw.service and
# berth-desktop.service; restart them after a change).
# BERTH_DESKTOP_LISTEN must agree with desktop_url in $conf.
BERTH_SSHGW_LISTEN=0.0.0.0:${port:-2222}
BERTH_DESKTOP_LISTEN=127.0.0.1:6080
EOF
	say "wrote $defaults"
fi
gw_listen=$(sed -n 's/^BERTH_SSHGW_LISTEN=//p' "$defaults" | tail -n 1)
gw_port=${gw_listen##*:}
[ -n "$gw_port" ] || gw_port=2222
if [ -n "$port" ] && [ "$port" != "$gw_port" ]; then
	say "$defaults says BERTH_SSHGW_LISTEN=$gw_listen; kept (edit it for port $port)"
fi
desk_listen=$(sed -n 's/^BERTH_DESKTOP_LISTEN=//p' "$defaults" | tail -n 1)
[ -n "$desk_listen" ] || desk_listen=127.0.0.1:6080
[ -e "$conf" ] || { say "make install did not make $conf"; exit 1; }

# 4. lvm-thin on DEVICE.
active() { grep -E "^[[:space:]]*$1[[:space:]]*=" "$conf" | tail -n 1 | sed -E 's/^[^=]*=[[:space:]]*//; s/[[:space:]]*(#.*)?$//'; }
if [ -n "$disk" ]; then
	if lvm lvs berth/pool >/dev/null 2>&1; then
		say "thin pool berth/pool exists: $disk left alone"
	else
		# Its stdout is the two lines for berth.conf, written below.
		sh deploy/lvm-thin-setup.sh "$disk" $force >/dev/null
	fi
	storage=$(active storage)
	if [ "$storage" = lvm-thin ]; then
		say "$conf: storage = lvm-thin already"
	elif [ -n "$storage" ]; then
		say "$conf says storage = $storage: not changed (its machines stay there)"
	elif [ -n "$(ls -A "$state/volumes" 2>/dev/null)" ]; then
		say "$state/volumes holds qcow2 volumes: storage not changed (set storage = lvm-thin and storage_location = berth/pool in $conf once they are gone)"
	else
		printf '\n# added by deploy/install.sh --disk\nstorage = lvm-thin\nstorage_location = berth/pool\n' >>"$conf"
		say "$conf: storage = lvm-thin, storage_location = berth/pool"
	fi
fi

# 5. Services.
if [ -n "$systemd" ]; then
	systemctl daemon-reload
	systemctl enable --now libvirtd.service
	if [ "$qemu_before" != "$qemu_after" ]; then
		say "restarting libvirtd (qemu.conf changed)"
		systemctl restart libvirtd.service
	fi
	for u in $units; do
		systemctl enable "$u.service"
		if systemctl is-active --quiet "$u.service" && changed "$u"; then
			say "restarting $u (a new binary)"
			systemctl restart "$u.service"
		else
			systemctl start "$u.service"
		fi
	done
	await berth-hostd 60 answer "$prefix/bin/berth" --state "$state" info
	# The gateway binds after it has its host key: a port taken (the
	# host's own sshd on 22) shows here, not at its start.
	await berth-sshgw 20 "listen on port $gw_port" listening "$gw_port"
	# berth-web's address is berth.conf's http_listen ("" = off).
	web_listen=$(active http_listen)
	grep -Eq '^[[:space:]]*http_listen[[:space:]]*=' "$conf" || web_listen=127.0.0.1:8080
	if [ -n "$web_listen" ]; then
		await berth-web 60 "listen on $web_listen" listening "${web_listen##*:}"
		say "berth-hostd, berth-sshgw (port $gw_port), berth-desktop and berth-web ($web_listen) run (systemctl status berth-hostd)"
	else
		say "berth-hostd, berth-sshgw (port $gw_port) and berth-desktop run; no berth-web (http_listen is empty in $conf)"
	fi
else
	cat >&2 <<EOF
install: systemd is not PID 1 here: the units are in /etc/systemd/system
  but nothing starts them.  By hand, as root:
    pidof libvirtd >/dev/null || { virtlogd -d; libvirtd -d; }
    $prefix/bin/berth-hostd --state $state --config $conf >>/var/log/berth-hostd.log 2>&1 &
    $prefix/bin/berth-sshgw --state $state --listen $gw_listen --user berth-sshgw >>/var/log/berth-sshgw.log 2>&1 &
    $prefix/bin/berth-desktop --state $state --listen $desk_listen --user berth-desktop >>/var/log/berth-desktop.log 2>&1 &
    $prefix/bin/berth-web --state $state --user berth-web >>/var/log/berth-web.log 2>&1 &
EOF
fi

# 6. Next steps.
host=$(hostname -f 2>/dev/null || hostname)
cat <<EOF

berth is installed: $prefix/bin/berth, state $state, configuration $conf.
Next:
  berth image build tiny                     # as root: a small test image (or debian-cloud, agents)
  berth key add ~/.ssh/id_ed25519.pub        # as each user, once: the key they ssh with
  berth create NAME --image tiny             # as that user
  ssh -p $gw_port NAME@$host
Dashboard: http://127.0.0.1:8080/ (berth token create; http_listen in $conf).
EOF
