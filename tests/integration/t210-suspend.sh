#!/bin/bash
# Suspend keeps memory: a value in the guest's tmpfs and a process survive
# suspend and resume, the uptime continues.  hostd keeps the memory itself,
# zstd-compressed (suspend_compress, the default): no raw image is left,
# the .zst is a valid zstd frame, and libvirt holds no managed save.  Stop
# and delete remove the image; a hostd killed at any step of a suspend or a
# wake loses nothing.  With suspend_compress = false it is libvirt's managed
# save, as before.
. "$(dirname "$0")/../lib.sh"

start_hostd && build_tiny || { not_ok "hostd and image"; finish; }
check_eq "create m1: running" running "$(berth create m1 --json | json state)"
token=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
berth exec m1 -- sh -c "echo $token > /tmp/value"
pid=$(berth exec m1 -- sh -c 'sleep 100000 </dev/null >/dev/null 2>&1 & echo $!')
up1=$(berth exec m1 -- cut -d' ' -f1 /proc/uptime)
dir=$STATE/machines/$(berth show m1 --json | json id)

# memory_intact DESC: the tmpfs value and the process are still there.
memory_intact() {
	check_eq "$1: the tmpfs value survived" "$token" "$(berth exec m1 -- cat /tmp/value)"
	check_eq "$1: the process survived" yes "$(berth exec m1 -- sh -c "kill -0 $pid && echo yes")"
}
# images: the memory image files in m1's directory ("suspend.zst "); fails
# when the directory is not there.
images() {
	case $dir in */) echo "images: m1 has no id" >&2; return 1 ;; esac
	[ -d "$dir" ] || { echo "images: no directory $dir" >&2; return 1; }
	(cd "$dir" && ls -d suspend.* wake.* woken 2>/dev/null | tr '\n' ' ')
	return 0
}
wait_crash() {
	for _ in $(seq 300); do [ -e "$STATE/crash-point" ] && break; sleep 0.1; done
	check_eq "hostd reached $1" "$1" "$(cat "$STATE/crash-point" 2>/dev/null)"
}

out=$(berth suspend m1 --json)
check_eq "suspend: suspended" suspended "$(echo "$out" | json state)"
dom=$(dom_of m1)
check_eq "libvirt: shut off" "shut off" "$(dom_state "$dom")"
check_match "libvirt holds no managed save image" 'Managed save: +no' "$($VIRSH dominfo "$dom" | grep 'Managed save')"
check_eq "the memory is stored zstd-compressed, no raw image left" "suspend.zst " "$(images)"
check "the image is a valid zstd frame (zstd -t)" zstd -q -t "$dir/suspend.zst"
check_eq "memory_bytes is the compressed image's size" "$(stat -c %s "$dir/suspend.zst")" \
	"$(echo "$out" | json memory_bytes)"
check_match "one log line says sizes and time" 'suspended root/m1: memory [0-9.]+ MiB raw, [0-9.]+ MiB zstd \([0-9]+%, level -?[0-9]+\); save [0-9]+ ms, compress [0-9]+ ms' \
	"$(grep 'suspended root/m1: memory' "$T/hostd.log" | tail -1)"
diag "$(grep -o 'suspended root/m1: memory.*' "$T/hostd.log" | tail -1)"
berth exec m1 --no-wake -- true 2>/dev/null
check_eq "exec --no-wake on a suspended machine is refused" 255 "$?"
out=$(berth resume m1 --json)
check_eq "resume: running" running "$(echo "$out" | json state)"
diag "resume to SSH ready: $(echo "$out" | json ready_ms) ms"
memory_intact "wake from zstd"
up2=$(berth exec m1 -- cut -d' ' -f1 /proc/uptime)
check "uptime continued ($up1 -> $up2)" python3 -c "import sys; sys.exit(0 if float('$up2') >= float('$up1') else 1)"
check_absent "the image is gone once awake" images
check_absent "and the FIFO too" matching fifo ls -A "$dir"

# exec wakes a suspended machine.
berth suspend m1 >/dev/null
out=$(berth exec m1 -- cat /tmp/value 2>"$T/wake.err")
check_eq "exec wakes a suspended machine, memory intact" "$token" "$out"
check_match "and says so on stderr" '^woke m1: ready in' "$(cat "$T/wake.err")"

# (network = user's case of another program taking the machine's loopback
# port while it sleeps is t805-user-network's: with network = routed, the
# default, a machine's SSH is port 22 of its own address.)

# hostd SIGKILLed right after a suspend: still suspended after a restart.
berth suspend m1 >/dev/null
kill_hostd KILL
start_hostd || not_ok "hostd restarts"
check_eq "SIGKILL right after suspend: still suspended" suspended "$(berth show m1 --json | json state)"
check_eq "  and it wakes" running "$(berth resume m1 --json | json state)"
memory_intact "after SIGKILL of hostd"

# SIGKILL at each step of a suspend and of a wake.
kill_hostd TERM
for point in suspend-after-save suspend-after-compress wake-after-rename wake-before-unpause; do
	rm -f "$STATE/crash-point"
	case $point in
	wake-*)
		start_hostd || not_ok "hostd starts"
		berth suspend m1 >/dev/null
		kill_hostd TERM
		start_hostd BERTH_TEST_CRASH_AT=$point || not_ok "hostd starts ($point)"
		berth resume m1 >/dev/null 2>&1 & ;;
	*)
		start_hostd BERTH_TEST_CRASH_AT=$point || not_ok "hostd starts ($point)"
		berth suspend m1 >/dev/null 2>&1 & ;;
	esac
	client=$!
	wait_crash "$point"
	[ "$point" = suspend-after-save ] && : > "$dir/suspend.zst.part"  # as if cut mid-compress
	diag "$point: left $(images)"
	kill_hostd KILL
	wait "$client" 2>/dev/null
	start_hostd || not_ok "hostd restarts after $point"
	case $point in
	wake-before-unpause)
		check_eq "$point: running after the restart" running "$(berth show m1 --json | json state)" ;;
	*)
		check_eq "$point: suspended after the restart" suspended "$(berth show m1 --json | json state)"
		check_eq "$point: only the compressed image is left" "suspend.zst " "$(images)"
		check "$point: it is a valid zstd frame" zstd -q -t "$dir/suspend.zst"
		check_eq "$point: resume" running "$(berth resume m1 --json | json state)" ;;
	esac
	memory_intact "$point"
	check_absent "$point: no image left" images
	kill_hostd TERM
done
start_hostd || not_ok "hostd starts"

# SIGKILL while the compressed image streams into libvirt: the restore
# fails (or completes); nothing is lost either way.
berth suspend m1 >/dev/null
berth resume m1 >/dev/null 2>&1 &
client=$!
sleep 0.4
kill_hostd KILL
wait "$client" 2>/dev/null
start_hostd || not_ok "hostd restarts"
# libvirt ends the restore it was in (its stream gone) on its own time.
for _ in $(seq 100); do
	case $($VIRSH domstate --reason "$dom") in *"starting up"*) sleep 0.1 ;; *) break ;; esac
done
st=$(berth show m1 --json | json state)
diag "SIGKILL mid-wake: $st after the restart"
check_match "SIGKILL mid-wake: suspended or running" '^(suspended|running)$' "$st"
check_eq "  resume" running "$(berth resume m1 --json | json state)"
memory_intact "SIGKILL mid-wake"

# Stopping a suspended machine discards its memory image.
berth suspend m1 >/dev/null
check_eq "stop of a suspended machine: stopped" stopped "$(berth stop m1 --json | json state)"
check_absent "  its memory image is removed" images
check_eq "  start: running" running "$(berth start m1 --json | json state)"
# find fails when the exec does: the guest must answer, with no value.
check_absent "  it booted afresh: the tmpfs value is gone" berth exec m1 -- find /tmp -maxdepth 1 -name value

# suspend_compress = false: libvirt's managed save, raw.
kill_hostd TERM
echo "suspend_compress = false" > "$STATE/berth.conf"
start_hostd || not_ok "hostd starts with suspend_compress = false"
berth exec m1 -- sh -c "echo $token > /tmp/value"
out=$(berth suspend m1 --json)
check_eq "raw: suspended" suspended "$(echo "$out" | json state)"
check_match "raw: libvirt holds a managed save image" 'Managed save: +yes' "$($VIRSH dominfo "$dom" | grep 'Managed save')"
check_absent "raw: no image of hostd's" images
check "raw: memory_bytes is given" test "$(echo "$out" | json memory_bytes)" -gt 0
check_eq "raw: resume" running "$(berth resume m1 --json | json state)"
check_eq "raw: the tmpfs value survived" "$token" "$(berth exec m1 -- cat /tmp/value)"
berth suspend m1 >/dev/null
kill_hostd TERM
rm "$STATE/berth.conf"
start_hostd || not_ok "hostd starts with suspend_compress = true"
check_eq "a managed save from before still counts as suspended" suspended "$(berth show m1 --json | json state)"
check_eq "  and wakes" "$token" "$(berth exec m1 -- cat /tmp/value 2>/dev/null)"

# Deleting a suspended machine removes its image (and its directory).
berth suspend m1 >/dev/null
check_eq "suspended again" "suspend.zst " "$(images)"
berth stop m1 >/dev/null
berth resume m1 >/dev/null 2>&1
check_eq "resume of a stopped machine is refused" 1 "$?"
berth suspend m1 >/dev/null 2>&1
check_eq "suspend of a stopped machine is refused" 1 "$?"
berth start m1 >/dev/null
berth suspend m1 >/dev/null
check_eq "rm of a suspended machine" "deleted m1" "$(berth rm m1)"
check_missing "its directory and memory image are gone" "$dir"
check_absent "no domain left" test_domains
finish
