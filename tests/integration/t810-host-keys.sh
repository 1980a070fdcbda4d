#!/bin/bash
# Pinned SSH host keys: each machine answers with the key its seed gave it
# (berth show says so, ssh-keyscan sees it), a fork and a live fork have
# keys of their own, and a machine whose key is changed inside the guest is
# refused by `berth exec` and by the SSH gateway with a message naming the
# mismatch, while another machine still works.
. "$(dirname "$0")/../lib.sh"

missing=
for tool in ssh ssh-keygen ssh-keyscan; do
	command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
done
[ -z "$missing" ] || { skip "not installed:$missing (openssh-client)"; finish; }
chmod 711 "$T"
unset SSH_AUTH_SOCK SSH_AGENT_PID
GW_PID=
t810_cleanup() {
	[ -n "$GW_PID" ] && kill "$GW_PID" 2>/dev/null && wait "$GW_PID" 2>/dev/null
	cleanup
}
trap t810_cleanup EXIT

start_hostd || { not_ok "hostd starts"; finish; }
build_tiny || { not_ok "tiny image"; finish; }

# The key the seed of machine $1 gives it ("ssh-ed25519 BASE64").
seed_key() {
	local id
	id=$(berth show "$1" --json | json id)
	python3 -c 'import sys, yaml
print(yaml.safe_load(open(sys.argv[1]))["ssh_keys"]["ed25519_public"])' \
		"$STATE/machines/$id/user-data"
}
# What the machine $1 presents on its SSH endpoint, "TYPE BASE64".
scanned_key() {
	local j
	j=$(berth show "$1" --json)
	ssh-keyscan -T 20 -t ed25519 -p "$(echo "$j" | json ssh.port)" "$(echo "$j" | json ssh.host)" \
		2>/dev/null | awk '{ print $2 " " $3 }'
}
pinned() { berth show "$1" --json | json host_key; }

berth create m >/dev/null || not_ok "create m"
check_eq "exec works" ok "$(berth exec m -- echo ok)"
check_eq "m's key is its seed's, confirmed" confirmed "$(berth show m --json | json host_key_state)"
k_seed=$(seed_key m)
check_match "the seed holds an ed25519 key" '^ssh-ed25519 AAAA' "$k_seed"
check_eq "the pinned key is the seed's" "$k_seed" "$(pinned m)"
check_eq "and the one the machine presents" "$k_seed" "$(scanned_key m)"

# A fork (of m as it is now, started) and a live fork get keys of their own.
berth fork m f >/dev/null || not_ok "fork f"
check_eq "the fork's exec works" ok "$(berth exec f -- echo ok)"
check_eq "the fork's key is confirmed" confirmed "$(berth show f --json | json host_key_state)"
k_f=$(pinned f)
check "the fork has a key of its own" test -n "$k_f" -a "$k_f" != "$k_seed"
check_eq "the fork presents it" "$k_f" "$(scanned_key f)"
berth rm f >/dev/null
berth fork m lf --live >/dev/null || not_ok "live fork lf"
check_eq "the live fork's exec works" ok "$(berth exec lf -- echo ok)"
k_lf=$(pinned lf)
check "the live fork has a key of its own" test -n "$k_lf" -a "$k_lf" != "$k_seed"
check_eq "and presents it, its source's memory notwithstanding" "$k_lf" "$(scanned_key lf)"
check_eq "its hostname is its own" lf "$(berth exec lf -- hostname)"
check_eq "the source still presents its key" "$k_seed" "$(scanned_key m)"

# The gateway, with a user key.
gateway_up t810 || not_ok "the gateway starts"
check_eq "through the gateway: m answers" ok "$("${SSH[@]}" m@127.0.0.1 echo ok 2>"$T/gw.err")"

# Inside m, someone replaces its host key and restarts its sshd.
berth exec m -- sh -c 'dropbearkey -t ed25519 -f /tmp/k >/dev/null 2>&1 &&
	mv -f /tmp/k /etc/dropbear/dropbear_ed25519_host_key &&
	for d in /proc/[0-9]*; do
		[ "$(cat $d/comm 2>/dev/null)" = dropbear ] || continue
		p=$(sed -n "s/^PPid:[[:space:]]*//p" $d/status)
		[ "$(cat /proc/$p/comm 2>/dev/null)" != dropbear ] && kill ${d#/proc/}
	done; true' >/dev/null 2>&1
for _ in $(seq 50); do
	k=$(scanned_key m)
	[ -n "$k" ] && [ "$k" != "$k_seed" ] && break
	sleep 0.5
done
check "m now presents another key" test -n "$k" -a "$k" != "$k_seed"
out=$(berth exec m -- echo ok 2>&1)
rc=$?
check "berth exec refuses it" test "$rc" -ne 0 -a "$out" != ok
check_match "naming the mismatch and both fingerprints" \
	'host key mismatch: the machine presented ssh-ed25519 SHA256:.*berth pinned ssh-ed25519 SHA256:' "$out"
out=$("${SSH[@]}" m@127.0.0.1 echo ok 2>&1)
rc=$?
check "the gateway refuses it" test "$rc" -ne 0 -a "$out" != ok
check_match "and says so on stderr" 'refusing to connect to m: host key mismatch' "$out"
check_eq "the pinned key did not change" "$k_seed" "$(pinned m)"
check_eq "another machine still works through the gateway" ok \
	"$("${SSH[@]}" lf@127.0.0.1 echo ok 2>/dev/null)"

berth rm lf >/dev/null
berth rm m >/dev/null
finish
