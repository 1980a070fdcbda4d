#!/bin/bash
# The embedded default: `berth up --detach` starts hostd, the SSH
# gateway, the desktop bridge and berth-web, builds the tiny image, boots
# machine demo and prints how to reach it; `ssh demo@localhost` through the
# gateway works; `berth down` stops the machine, the daemons and hostd,
# and the disks stay.
. "$(dirname "$0")/../lib.sh"

PORT=$(free_port)
DPORT=$(free_port)
WPORT=$(free_port)
mkdir -p "$STATE"
echo "http_listen = 127.0.0.1:$WPORT" >"$STATE/berth.conf"
out=$("$BIN/berth" up --state "$STATE" --detach --ssh-port "$PORT" --desktop-port "$DPORT" 2>"$T/up.err")
rc=$?
check_eq "berth up --detach succeeds" 0 "$rc"
[ "$rc" -eq 0 ] || sed 's/^/# /' "$T/up.err"
check_match "it prints how to reach demo" "exec demo -- uname -a" "$out"
check_match "it names the hypervisor" "machines run under (kvm|tcg)" "$out"
check_match "it prints how to ssh in through the gateway" "ssh -p $PORT demo@localhost" "$out"
check_match "it prints the dashboard's URL" "Dashboard: http://127\.0\.0\.1:$WPORT/ " "$out"
WB_PID=$(cat "$STATE/web.pid" 2>/dev/null)
check_eq "berth-web runs" berth-web "$(cat "/proc/$WB_PID/comm" 2>/dev/null)"
check_eq "as berth-web, a third user" "$(id -u berth-web)" "$(awk '/^Uid:/ {print $2}' "/proc/$WB_PID/status" 2>/dev/null)"
check_eq "it serves the dashboard" 200 "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$WPORT/")"
GW_PID=$(cat "$STATE/sshgw.pid" 2>/dev/null)
check_eq "the gateway runs" berth-sshgw "$(cat "/proc/$GW_PID/comm" 2>/dev/null)"
check_eq "as berth-sshgw, not root" "$(id -u berth-sshgw)" "$(awk '/^Uid:/ {print $2}' "/proc/$GW_PID/status" 2>/dev/null)"
DT_PID=$(cat "$STATE/desktop.pid" 2>/dev/null)
check_eq "the desktop bridge runs" berth-desktop "$(cat "/proc/$DT_PID/comm" 2>/dev/null)"
check_eq "as berth-desktop, another user" "$(id -u berth-desktop)" "$(awk '/^Uid:/ {print $2}' "/proc/$DT_PID/status" 2>/dev/null)"
ssh-keygen -q -t ed25519 -N '' -f "$T/user"
berth key add "$T/user.pub" >/dev/null
check_eq "ssh demo@localhost through the gateway" demo \
	"$(ssh -F /dev/null -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR \
		-o BatchMode=yes -i "$T/user" -p "$PORT" demo@127.0.0.1 hostname)"
check_eq "demo answers" demo "$(berth exec demo -- hostname)"
check_eq "demo runs the tiny image" tiny "$(berth show demo --json | json image)"
HOSTD_PID=$(cat "$STATE/hostd.pid")
check_match "hostd runs" '^[0-9]+$' "$HOSTD_PID"
berth info > "$T/info"
check_match "berth info says KVM or TCG" 'hypervisor: (kvm|tcg)' "$(head -1 "$T/info")"
check_match "berth info names the storage backend" 'storage: +qcow2' "$(cat "$T/info")"
check_match "berth desktop's URL names --desktop-port" \
	"^http://127\.0\.0\.1:$DPORT/root/demo/#token=" "$(berth desktop demo)"

out=$("$BIN/berth" up --state "$STATE" --detach --ssh-port "$PORT" --desktop-port "$DPORT" 2>&1)
check_eq "a second up is harmless" 0 "$?"
check_eq "and keeps the same gateway" "$GW_PID" "$(cat "$STATE/sshgw.pid" 2>/dev/null)"
out=$("$BIN/berth" up --state "$STATE" --detach --ssh-port "$PORT" --desktop-port $((DPORT + 1)) 2>&1)
check_eq "up with another --desktop-port than the running hostd's is refused" 1 "$?"
check_match "  saying why" "desktop URLs point at http://127\.0\.0\.1:$DPORT but the desktop is on port $((DPORT + 1))" "$out"

# With BERTH_URL set (berth-web here, a token of root's), down would stop
# that host's machines and this host's daemons: refused.
RTOK=$(berth token create --name t250)
out=$(BERTH_URL="http://127.0.0.1:$WPORT" BERTH_TOKEN="$RTOK" "$BIN/berth" down --state "$STATE" 2>&1)
check_eq "berth down with BERTH_URL: refused (2)" 2 "$?"
check_match "  saying why" "berth down: starts and stops this host's berth; not with --url or BERTH_URL" "$out"
check_eq "  demo still runs" running "$(berth show demo --json | json state)"
check_eq "  and hostd" berth-hostd "$(cat "/proc/$HOSTD_PID/comm" 2>/dev/null)"
out=$(BERTH_URL="http://127.0.0.1:$WPORT" BERTH_TOKEN="$RTOK" "$BIN/berth" up --state "$STATE" --detach 2>&1)
check_eq "berth up with BERTH_URL: refused (2)" 2 "$?"

dom=$(dom_of demo)
out=$("$BIN/berth" down --state "$STATE" 2>&1)
check_eq "berth down succeeds" 0 "$?"
check_gone "hostd is gone" "$HOSTD_PID"
HOSTD_PID=
check_gone "the gateway is gone" "$GW_PID"
check_gone "the desktop bridge is gone" "$DT_PID"
check_gone "berth-web is gone" "$WB_PID"
check_eq "demo is shut off" "shut off" "$(dom_state "$dom")"
check_eq "its disk stays" 2 "$(ls "$STATE/volumes" | wc -l)"

# up again brings the same demo back.
"$BIN/berth" up --state "$STATE" --detach --ssh-port "$PORT" --desktop-port "$DPORT" >/dev/null 2>&1
HOSTD_PID=$(cat "$STATE/hostd.pid" 2>/dev/null)
check_eq "up again: demo answers" demo "$(berth exec demo -- hostname)"
# A marker an earlier up left, when it started a libvirtd long gone (this
# libvirtd is the suite's): down must leave this one alone, even with no
# domain of its own running.
lv=$(cat /run/libvirtd.pid 2>/dev/null)
check "libvirtd runs (the suite's)" kill -0 "${lv:-0}"
echo 1 >"$STATE/libvirtd.started-by-up"
out=$("$BIN/berth" down --state "$STATE" 2>&1)
HOSTD_PID=
check_match "down with a stale marker says it leaves libvirtd alone" \
	'leaving libvirtd running: berth up did not start this one' "$out"
check "and the suite's libvirtd runs on" kill -0 "${lv:-0}"
check_missing "the marker is gone" "$STATE/libvirtd.started-by-up"
finish
