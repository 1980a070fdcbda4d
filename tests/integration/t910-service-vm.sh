#!/bin/bash
# tests/run: alongside (its own QEMU VM, not the host's libvirtd: runs beside the rest)
# berth installed as a service on a host that boots systemd: deploy/install.sh
# --disk on a bare host (no berth files, a blank disk), then the four units
# active and enabled, hostd answering, the gateways listening as their own
# users, a machine on lvm-thin running, a restart of the four units (new
# main processes) leaving that machine's QEMU and its dnsmasq running, and
# make uninstall stopping the units and removing the programs while the
# machine, its disk and the database stay.
#
# These machines do not run systemd as PID 1, so the host half starts
# tests/guest/lvm-vm.sh --systemd: a TCG VM whose root is this host's own
# Debian 12 (read-only over 9p under a tmpfs layer) booting systemd, with
# a blank /dev/vdb for the thin pool.  The VM half (BERTH_T910_IN_VM=1)
# runs there as a systemd service, as root; nothing it writes reaches the
# host, the VM is discarded at the end.  Its machine runs under TCG inside
# TCG, where a boot takes minutes: the checks read the domain's QEMU and
# dnsmasq processes, not the guest.
#
# What stays untested here: KVM (none on these machines), udev (this
# host's root has no udev, so lvm runs without it, as configured below;
# a real host has udev and lvm's defaults), a reboot of the host (the
# units' [Install] is checked by is-enabled only).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

# ---------------------------------------------------------- on the host ---
if [ "${BERTH_T910_IN_VM:-}" != 1 ]; then
	cd "$ROOT" || exit 1
	t0=$(date +%s)
	timeout=1080
	BERTH_T910_IN_VM=1 BERTH_T910_DEADLINE=$(($(date +%s) + timeout - 60)) \
		bash tests/guest/lvm-vm.sh --systemd --timeout $timeout --memory 3G --cpus 2 \
		-- bash tests/integration/t910-service-vm.sh
	rc=$?
	echo "# $(($(date +%s) - t0)) s in all (exit $rc); load average $(cut -d' ' -f1-3 /proc/loadavg)"
	exit $rc
fi

# ------------------------------------------------------------ in the VM ---
# This half deletes berth's files and installs over them: it refuses to run
# anywhere but in lvm-vm.sh --systemd's guest.
if [ "$(systemd-detect-virt 2>/dev/null)" != qemu ] ||
	[ "$(readlink /proc/1/exe)" != /usr/lib/systemd/systemd ] ||
	[ "$(findmnt -n -o FSTYPE /)" != overlay ] ||
	[ ! -f /run/berth-vm/cmd.sh ] || [ "${BERTH_LVM_DEVICE:-}" != /dev/vdb ]; then
	echo "not ok 1 - not in tests/guest/lvm-vm.sh --systemd's VM: refusing to install here"
	echo "1..1"
	exit 1
fi
. "$ROOT/tests/lib.sh"
BIN=/usr/local/bin
STATE=/var/lib/berth
UNITS="berth-hostd berth-sshgw berth-desktop berth-web"
DEADLINE=${BERTH_T910_DEADLINE:-0}
if [ "$DEADLINE" -lt "$(date +%s)" ] || [ "$DEADLINE" -gt $(($(date +%s) + 3600)) ]; then
	DEADLINE=$(($(date +%s) + 900))
fi
now() { date +%s.%N; }
secs() { awk -v s="$1" -v e="$(now)" 'BEGIN { printf "%.1f", e - s }'; }
T_ALL=$(now)
# What went wrong, when something did: the units' journals.
trap '[ "$nfail" -eq 0 ] || for u in libvirtd $UNITS; do
	journalctl -u "$u.service" -n 25 --no-pager 2>&1 | sed "s/^/# $u: /"; done' EXIT

# until_deadline CMD...: CMD until it succeeds, every second, until DEADLINE.
until_deadline() {
	until "$@" >/dev/null 2>&1; do
		[ "$(date +%s)" -lt "$DEADLINE" ] || return 1
		sleep 1
	done
}
main_pid() { systemctl show -p MainPID --value "$1.service"; }
proc_user() { ps -o user= -p "$1" 2>/dev/null | tr -d ' '; }
alive() { [ -n "$1" ] && [ "$1" != 0 ] && kill -0 "$1" 2>/dev/null; }
# The first line an SSH server sends on 127.0.0.1:PORT.
banner() { timeout 20 bash -c 'exec 3<>/dev/tcp/127.0.0.1/$1 && head -n 1 <&3 | tr -d "\r"' _ "$1"; }
all_active() {
	local u
	for u in $UNITS; do systemctl is-active --quiet "$u.service" || return 1; done
}
units_state() {
	local u
	for u in $UNITS; do printf '%s=%s ' "$u" "$(systemctl is-active "$u.service")"; done
}

# ------------------------------------------------------- a bare host ---
# The host's root may hold an earlier install or a make run's state: none
# of it is this test's (in the VM's layer only).  Its libvirt definitions
# go too, as in t320: no domain or network of the host's starts here.
rm -rf /var/lib/berth /etc/berth /etc/default/berth /usr/local/lib/berth \
	/usr/local/share/berth /usr/local/share/doc/berth /var/log/berth-*.log
# The units by name: lvm-vm.sh's own (lvm-vm-cmd.service runs this very
# script) are in /etc/systemd/system too.
rm -f /usr/local/bin/berth /usr/local/bin/berth-* \
	/etc/systemd/system/berth-{hostd,sshgw,desktop,web}.service \
	/etc/systemd/system/multi-user.target.wants/berth-{hostd,sshgw,desktop,web}.service \
	/etc/libvirt/qemu/*.xml /etc/libvirt/qemu/autostart/*.xml \
	/etc/libvirt/qemu/networks/autostart/*.xml /etc/libvirt/storage/autostart/*.xml
# lvm without udev (this root has none): lvm-vm.sh's lvm.conf for that,
# without its backup section, so that lvm's metadata backups go to
# /etc/lvm as on a real host (berth-hostd.service's ReadWritePaths).
unset LVM_SYSTEM_DIR
mkdir -p /etc/lvm
sed '/^backup {/,/^}/d' /run/berth-vm/lvm.conf >/etc/lvm/lvm.conf
check "a bare host: no berth program, unit or state" \
	eval '! ls /usr/local/bin/berth* /etc/systemd/system/berth-{hostd,sshgw,desktop,web}.service /var/lib/berth >/dev/null 2>&1'

# ------------------------------------------------------------ install ---
t=$(now)
sh "$ROOT/deploy/install.sh" --disk "$BERTH_LVM_DEVICE" >"$T/install.out" 2>"$T/install.err"
rc=$?
check_eq "deploy/install.sh --disk $BERTH_LVM_DEVICE succeeds" 0 "$rc" ||
	sed 's/^/# install: /' "$T/install.err" | tail -30
diag "install.sh took $(secs "$t") s"
check_match "install.sh says the services run and how to go on" \
	"berth-hostd, berth-sshgw \\(port 2222\\), berth-desktop and berth-web \\(127\\.0\\.0\\.1:8080\\) run" \
	"$(cat "$T/install.err")"
check_match "and prints the next steps" "ssh -p 2222 NAME@" "$(cat "$T/install.out")"
for u in $UNITS; do
	check_eq "$u.service is active" active "$(systemctl is-active "$u.service")"
	check_eq "$u.service is enabled" enabled "$(systemctl is-enabled "$u.service" 2>&1)"
done
check_eq "libvirtd.service is active" active "$(systemctl is-active libvirtd.service)"
info=$(berth info --json 2>&1)
check_eq "hostd answers on $STATE/hostd.sock, storage lvm-thin (install.sh --disk)" lvm-thin \
	"$(echo "$info" | json storage.backend 2>/dev/null || echo "$info")"
check_match "the thin pool berth/pool is made" "^t" "$(lvm lvs --noheadings -o lv_attr berth/pool 2>&1 | tr -d ' ')"
check_match "berth-sshgw listens on port 2222" "^SSH-2\\.0-" "$(banner 2222)"
check_eq "berth-desktop answers on 127.0.0.1:6080" 200 \
	"$(curl -s -o /dev/null -w '%{http_code}' --max-time 20 http://127.0.0.1:6080/)"
check_eq "berth-web serves the dashboard on 127.0.0.1:8080" 200 \
	"$(curl -s -o /dev/null -w '%{http_code}' --max-time 20 http://127.0.0.1:8080/)"
check_eq "  and the API (401 without a token)" 401 \
	"$(curl -s -o /dev/null -w '%{http_code}' --max-time 20 http://127.0.0.1:8080/v1/machines)"
hostd_pid=$(main_pid berth-hostd) sshgw_pid=$(main_pid berth-sshgw) desk_pid=$(main_pid berth-desktop)
web_pid=$(main_pid berth-web)
check_eq "berth-hostd runs as root" root "$(proc_user "$hostd_pid")"
check_eq "berth-sshgw runs as berth-sshgw" berth-sshgw "$(proc_user "$sshgw_pid")"
check_eq "berth-desktop runs as berth-desktop" berth-desktop "$(proc_user "$desk_pid")"
check_eq "berth-web runs as berth-web" berth-web "$(proc_user "$web_pid")"

# ----------------------------------------------------- a running machine ---
t=$(now)
check "berth image build tiny (the installed recipes, under the unit's sandbox)" build_tiny
diag "image built in $(secs "$t") s"
t=$(now)
check "berth create m1 on lvm-thin" eval 'berth create m1 --image tiny --memory 128M --no-wait >/dev/null 2>"$T/create.err"' ||
	sed 's/^/# /' "$T/create.err"
diag "machine created in $(secs "$t") s"
dom=$(dom_of m1 2>/dev/null)
qemu_pid=$(cat "/run/libvirt/qemu/$dom.pid" 2>/dev/null)
check "m1's QEMU runs" alive "$qemu_pid"
disk=$($VIRSH dumpxml "$dom" 2>/dev/null | sed -n "s|.*<source dev='\\(/dev/berth/[^']*\\)'.*|\\1|p" | head -n 1)
check_match "m1's disk is a thin LV in berth/pool" "^/dev/berth/" "$disk"
dns_pid=$(cat "$STATE/net/dnsmasq.pid" 2>/dev/null)
check "the machines' dnsmasq (network = routed) runs" alive "$dns_pid"

# ------------------------------------------------------------ restart ---
t=$(now)
# shellcheck disable=SC2086
check "systemctl restart the four units" systemctl restart $UNITS
until_deadline berth info
check "hostd answers again after its restart" berth info
diag "restart to hostd answering: $(secs "$t") s"
until_deadline all_active
check_eq "all four units active again" \
	"berth-hostd=active berth-sshgw=active berth-desktop=active berth-web=active " "$(units_state)"
for pair in "berth-hostd $hostd_pid" "berth-sshgw $sshgw_pid" "berth-desktop $desk_pid" \
	"berth-web $web_pid"; do
	set -- $pair
	p=$(main_pid "$1")
	if alive "$p" && [ "$p" != "$2" ] && ! alive "$2"; then
		ok "$1 restarted: a new main process ($2 -> $p)"
	else
		not_ok "$1 restarted: a new main process"
		diag "before $2, now $p"
	fi
done
check "m1's QEMU (pid $qemu_pid) still runs" alive "$qemu_pid"
check_eq "and is still m1's" "$qemu_pid" "$(cat "/run/libvirt/qemu/$dom.pid" 2>/dev/null)"
check "the machines' dnsmasq (pid $dns_pid) still runs (KillMode=process)" alive "$dns_pid"
check_eq "berth ls: m1 running" running "$(berth show m1 --json 2>/dev/null | json state)"
until_deadline banner 2222
check_match "berth-sshgw listens again" "^SSH-2\\.0-" "$(banner 2222)"

# ---------------------------------------------------------- uninstall ---
make -C "$ROOT" --no-print-directory uninstall >"$T/uninstall.out" 2>&1
rc=$?
check_eq "make uninstall succeeds" 0 "$rc" || sed 's/^/# /' "$T/uninstall.out" | tail -20
check_eq "the units are gone (inactive, no unit file)" \
	"berth-hostd=inactive berth-sshgw=inactive berth-desktop=inactive berth-web=inactive " \
	"$(units_state)"
check_absent "no unit files, no programs left" \
	find /etc/systemd/system /usr/local/bin -name 'berth*'
check "m1's QEMU still runs (uninstall leaves machines)" alive "$qemu_pid"
check "m1's disk stays" test -b "$disk"
check "the database stays" test -s "$STATE/berth.db"

diag "$(secs "$T_ALL") s in the VM"
finish
