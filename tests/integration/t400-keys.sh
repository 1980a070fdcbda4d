#!/bin/bash
# Users' SSH keys and the gateways' side of hostd (no VM boots): berth key
# add/ls/rm, each key proved by a signature of its holder (a second local
# user cannot register the first's public key, and learns nothing about
# who has it), duplicates refused whoever registers them, a non-root local
# user on the socket acting as itself, the gateway user confined to the
# /v1/gateway routes, auth mapping a key to its owner, connect answering a
# missing machine and another owner's alike, sessions counted in the
# machine's JSON and dropped with it.
. "$(dirname "$0")/../lib.sh"

command -v ssh-keygen >/dev/null || { skip "ssh-keygen is not installed (openssh-client)"; finish; }
command -v setpriv >/dev/null || { skip "setpriv is not installed (util-linux)"; finish; }

# Other users reach the socket through $T, which mktemp made 0700.
chmod 711 "$T"
# The gateways' two users (deploy/install-deps.sh makes them).
GW=berth-sshgw
DT=berth-desktop
start_hostd && build_tiny || { not_ok "hostd and image"; finish; }

# call [-u USER] [-H HEADER] METHOD PATH [BODY]: prints the status; the
# answer is in $T/body.  (As another user curl cannot write into $T.)
call() {
	local pre=() hdr=() out
	[ "$1" = -u ] && { pre=(as_user "$2"); shift 2; }
	[ "$1" = -H ] && { hdr=(-H "$2"); shift 2; }
	local args=(-s -w '\n%{http_code}' --unix-socket "$STATE/hostd.sock" -X "$1" "${hdr[@]}")
	[ $# -ge 3 ] && args+=(-H 'Content-Type: application/json' --data-binary "$3")
	out=$("${pre[@]}" curl "${args[@]}" "http://berth$2")
	printf '%s\n' "$out" | sed '$d' > "$T/body"
	printf '%s\n' "$out" | tail -n 1
}
# expect DESC STATUS CODE [-u USER] [-H HEADER] METHOD PATH [BODY]
expect() {
	local desc=$1 status=$2 code=$3 got
	shift 3
	got=$(call "$@")
	check_eq "$desc" "$status $code" "$got $(json error.code < "$T/body")"
}
body() { json "$1" < "$T/body"; }
# len_of FIELD < JSON: the length of a list field.
len_of() { python3 -c 'import json,sys; print(len(json.load(sys.stdin)[sys.argv[1]]))' "$1"; }
fp_of() { ssh-keygen -lf "$1" | awk '{print $2}'; }
keyline() { awk '{print $1 " " $2}' "$1"; }

# --- the state directory is private, the socket open ---
check_eq "state directory is 0711" 711 "$(stat -c %a "$STATE")"
check_eq "socket is 0666" 666 "$(stat -c %a "$STATE/hostd.sock")"
# The desktop socket is open too: it answers root and the gateway user
# only, by SO_PEERCRED.
check_eq "desktop socket is 0666" 666 "$(stat -c %a "$STATE/desktop.sock")"
out=$(as_user nobody /usr/bin/python3 -c 'import socket,sys
s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
try:  # hostd may answer (and close) before it reads a byte
    s.sendall(b"{\"op\":\"redeem\",\"user\":\"root\",\"machine\":\"x\",\"token\":\"t\"}\n")
except BrokenPipeError:
    pass
print(s.recv(4096).decode())' "$STATE/desktop.sock" 2>&1)
check_match "  but refuses anyone else (nobody)" "only root and berth-desktop's user" "$out"
# Files may keep a mode of their own (a public key, a read-only base
# volume) inside directories no one else may enter.  Fails when find does.
# STATE/net and STATE/net/dhcp are open to their group, berth-dns (the
# machines' dnsmasq runs as it), and no one else.
private() {
	find "$STATE" -mindepth 1 -type d -perm /007 || return 1
	# dnsmasq's group reads STATE/net; QEMU's (kvm) may only traverse
	# the directories of machines, images and volumes (0710).
	find "$STATE" -mindepth 1 -type d -perm /070 ! \( -group berth-dns \
		\( -path "$STATE/net" -o -path "$STATE/net/dhcp" \) \) \
		! \( -group kvm -perm 0710 \( -path "$STATE/machines" -o -path "$STATE/machines/*" \
		-o -path "$STATE/images" -o -path "$STATE/images/*" -o -path "$STATE/volumes" \) \) ||
		return 1
	# The sockets are 0666 and answer by SO_PEERCRED: hostd.sock everyone,
	# desktop.sock, web.sock and webctl.sock their daemon's user and root
	# (t700, t610, t470 and t480 probe them as other users).
	find "$STATE" -mindepth 1 -maxdepth 1 ! -type d -perm /077 ! -name hostd.sock \
		! -name desktop.sock ! -name web.sock ! -name webctl.sock ! -name berth.conf
}
check_absent "what hostd made is private (umask 077)" private
# Refused for the right reason, not because the path is wrong.
check_match "  nobody cannot list the state directory" "^ls: .*: Permission denied$" \
	"$(as_user nobody ls "$STATE" 2>&1)"
check_match "  nor read the database" "^head: .*: Permission denied$" \
	"$(as_user nobody head -c1 "$STATE/berth.db" 2>&1)"
check "the database, the gateway key and the image are there" \
	test -s "$STATE/berth.db" -a -s "$STATE/keys/gateway" -a -d "$STATE/images/tiny"
check_match "hostd knows berth-desktop's user" "desktop_user $DT \\(uid $(id -u "$DT")\\)" \
	"$(cat "$T/hostd.log")"
check_match "hostd knows berth-sshgw's user" "sshgw_user $GW \\(uid $(id -u "$GW")\\)" \
	"$(cat "$T/hostd.log")"

# --- keys through the CLI ---
for k in k1:ed25519 k2:ecdsa k3:ed25519 k4:ed25519 k5:ed25519 k6:ed25519; do
	ssh-keygen -q -t "${k#*:}" -N '' -C "key ${k%%:*}" -f "$T/${k%%:*}"
done
ssh-keygen -q -t rsa -b 1024 -N '' -C short -f "$T/short"
# Keys read from stdin, or several in one file, are signed by the agent.
agent_up || { not_ok "ssh-agent"; finish; }
ssh-add -q "$T/k2" "$T/k3" "$T/k4" 2>/dev/null
out=$(berth key add "$T/k1.pub")
check_eq "key add: exit 0" 0 "$?"
check_eq "key add: says what it added" "added key 1: ssh-ed25519 $(fp_of "$T/k1.pub") key k1" "$out"
check_match "key ls: a table with the key" "^ID +TYPE +FINGERPRINT +COMMENT
1 +ssh-ed25519 +SHA256:[^ ]+ +key k1$" "$(berth key ls)"
berth key ls --json > "$T/ls.json"
check_eq "key ls --json: fingerprint as ssh-keygen -l" "$(fp_of "$T/k1.pub")" "$(json keys.0.fingerprint < "$T/ls.json")"
check_eq "key ls --json: type, comment, id" "ssh-ed25519 key k1 1" \
	"$(json keys.0.type < "$T/ls.json") $(json keys.0.comment < "$T/ls.json") $(json keys.0.id < "$T/ls.json")"
check_match "key ls --json: created" '^[0-9]{10}$' "$(json keys.0.created < "$T/ls.json")"

{
	echo "# my keys"
	echo
	cat "$T/k2.pub"
	cat "$T/short.pub"
	echo "   "
	cat "$T/k3.pub"
} > "$T/several"
berth key add "$T/several" > "$T/add.out" 2> "$T/add.err"
check_eq "several lines, one bad: exit 1" 1 "$?"
check_eq "  the good ones are added" 2 "$(grep -c '^added key' "$T/add.out")"
check_match "  the bad one is reported with its line" "several:4: the RSA key has 1024 bits" "$(cat "$T/add.err")"
check_eq "  key ls: three keys" 3 "$(berth key ls --json | len_of keys)"

berth key add - --json < "$T/k4.pub" > "$T/add.json"
check_eq "key add - (stdin) --json: added" "$(fp_of "$T/k4.pub")" "$(json added.0.fingerprint < "$T/add.json")"
check_eq "  nothing failed" "[]" "$(json failed < "$T/add.json")"
out=$(berth key add "$T/k1.pub" 2>&1)
check_eq "the same key again: exit 1" 1 "$?"
check_match "  you registered it already" "you registered key SHA256:[^ ]+ already \\(id 1\\)" "$out"
expect "the same key again: 409 key_exists" 409 key_exists POST /v1/keys "$(key_body "$T/k1")"
expect "root's key for alice (X-Berth-User), proved: 400 invalid_key" 400 invalid_key \
	-H "X-Berth-User: alice" POST /v1/keys "$(key_body "$T/k1" alice)"
taken_msg=$(body error.message)
check_match "  naming the key, not its owner" "^key SHA256:[^ ]+: the signature does not prove that you hold it" "$taken_msg"
expect "options before the key: 400 invalid_key" 400 invalid_key POST /v1/keys \
	"{\"key\":\"no-pty,command=\\\"true\\\" $(keyline "$T/k5.pub")\"}"
check_match "  saying why" "options" "$(body error.message)"
expect "an RSA key of 1024 bits: 400" 400 invalid_key POST /v1/keys "{\"key\":\"$(keyline "$T/short.pub")\"}"
expect "no key field: 400" 400 invalid_key POST /v1/keys '{}'
expect "an unknown field: 400" 400 unknown_field POST /v1/keys '{"key":"x","user":"bob"}'
expect "a key without a proof: 400 proof_required" 400 proof_required POST /v1/keys \
	"{\"key\":\"$(keyline "$T/k5.pub")\"}"
expect "a challenge for an RSA key of 1024 bits: 400, before any signing" 400 invalid_key \
	POST /v1/keys/challenge "{\"key\":\"$(keyline "$T/short.pub")\"}"
expect "alice adds her own key" 201 "" -H "X-Berth-User: alice" POST /v1/keys \
	"$(key_body "$T/k5" alice)"
alice_key=$(body id)
check_eq "  root does not see it" 4 "$(berth key ls --json | len_of keys)"
expect "  alice does" 200 "" -H "X-Berth-User: alice" GET /v1/keys
check_eq "  only hers" "1 $(fp_of "$T/k5.pub")" "$(len_of keys < "$T/body") $(body keys.0.fingerprint)"
expect "root deleting alice's key: 404" 404 not_found DELETE "/v1/keys/$alice_key"
missing_msg=$(body error.message)
expect "a missing key: 404" 404 not_found DELETE /v1/keys/9999
check_eq "  the same answer as another user's" "no key $alice_key/no key 9999" "$missing_msg/$(body error.message)"
expect "a key id that is not a number: 400" 400 invalid_id DELETE /v1/keys/abc
out=$(berth key rm 2)
check_eq "key rm: deleted" "deleted key 2" "$out"
check_eq "  key ls no longer has it" "1 3 4" "$(berth key ls --json | python3 -c 'import json,sys; print(*(k["id"] for k in json.load(sys.stdin)["keys"]))')"
berth key rm 2 2>/dev/null
check_eq "key rm of a deleted key: exit 1" 1 "$?"

# --- another local user, as itself ---
out=$(as_user nobody "$BIN/berth" --state "$STATE" key ls --json)
check_eq "nobody reaches the socket: no keys of its own" "[]" "$(echo "$out" | json keys)"
# nobody's own key files, which only nobody reads.
install -d -o nobody -m 700 "$T/nb"
install -o nobody -m 600 "$T/k6" "$T/k6.pub" "$T/nb/"
out=$(as_user nobody "$BIN/berth" --state "$STATE" key add "$T/nb/k6.pub")
check_match "nobody adds a key (signed with its file)" "^added key [0-9]+: ssh-ed25519 " "$out"
check_eq "  and lists it" "$(fp_of "$T/k6.pub")" \
	"$(as_user nobody "$BIN/berth" --state "$STATE" key ls --json | json keys.0.fingerprint)"
expect "  X-Berth-User from nobody is ignored: it acts as itself" 200 "" -u nobody \
	-H "X-Berth-User: root" GET /v1/keys
check_eq "  (its own key only)" "1 $(fp_of "$T/k6.pub")" "$(len_of keys < "$T/body") $(body keys.0.fingerprint)"
expect "  nobody lists its machines" 200 "" -u nobody GET /v1/machines
check_eq "  none" "[]" "$(body machines)"
expect "  root acting for nobody sees nobody's key" 200 "" -H "X-Berth-User: nobody" GET /v1/keys
check_eq "  the same" "$(fp_of "$T/k6.pub")" "$(body keys.0.fingerprint)"
expect "nobody may not use the gateway routes" 403 forbidden -u nobody POST /v1/gateway/auth \
	"{\"key\":\"$(keyline "$T/k1.pub")\"}"

# --- proof of possession: a second local user and the first's keys ---
M=bt$$m
test_user "$M" || { not_ok "useradd $M"; finish; }
ssh-keygen -q -t ed25519 -N '' -C mallory -f "$T/k7"
install -d -o "$M" -m 700 "$T/m"
install -o "$M" -m 600 "$T/k7" "$T/k7.pub" "$T/m/"
install -o "$M" -m 644 "$T/k1.pub" "$T/m/root.pub"	# public, as on github.com/USER.keys
out=$(as_user "$M" env -u SSH_AUTH_SOCK "$BIN/berth" --state "$STATE" key add "$T/m/root.pub" 2>&1)
check_eq "$M adds root's public key (no private key, no agent): exit 1" 1 "$?"
check_match "  the CLI cannot sign it" "could not sign with the key in your agent" "$out"
check_eq "  $M has no key" "[]" "$(as_user "$M" "$BIN/berth" --state "$STATE" key ls --json | json keys)"
hdr="X-Berth-User: $M"	# root acting for M: the same rules, and curl can write $T/body
expect "$M signs root's key's challenge with her own key: 400 invalid_key" 400 \
	invalid_key -H "$hdr" POST /v1/keys "$(SIGNER=$T/k7 key_body "$T/k1" "$M")"
forged_msg=$(body error.message)
check_eq "  the same answer as for a key someone else registered" "$taken_msg" "$forged_msg"
expect "$M holding a copy of root's private key, proved: refused" 400 invalid_key \
	-H "$hdr" POST /v1/keys "$(key_body "$T/k1" "$M")"
check_eq "  with that same answer: nothing says root has it" "$taken_msg" "$(body error.message)"
expect "a signature in another namespace (git's): refused" 400 invalid_key -H "$hdr" \
	POST /v1/keys "$(NS=git key_body "$T/k7" "$M")"
expect "a signature that is not one: refused" 400 invalid_key -H "$hdr" POST /v1/keys \
	"$(SIGNER=/nonexistent key_body "$T/k7" "$M")"
good=$(key_body "$T/k7" "$M")
call -H "X-Berth-User: alice" POST /v1/keys "$good" >/dev/null
check_eq "$M's challenge used by alice: 400 invalid_challenge" invalid_challenge "$(body error.code)"
good=$(key_body "$T/k7" "$M")
expect "a challenge for one key used for another: 400 invalid_challenge" 400 invalid_challenge \
	-H "$hdr" POST /v1/keys "$(python3 -c 'import json,sys; b=json.loads(sys.argv[1]); b["key"]=open(sys.argv[2]).read().strip(); print(json.dumps(b))' "$good" "$T/k6.pub")"
expect "  and it is spent by that try" 400 invalid_challenge -H "$hdr" POST /v1/keys "$good"
expect "$M adds her own key, proved" 201 "" -H "$hdr" POST /v1/keys "$(key_body "$T/k7" "$M")"
out=$(as_user "$M" env -u SSH_AUTH_SOCK "$BIN/berth" --state "$STATE" key ls --json | json keys.0.fingerprint)
check_eq "  she lists it" "$(fp_of "$T/k7.pub")" "$out"
expect "the gateway still maps root's key to root" 200 "" POST /v1/gateway/auth \
	"{\"key\":\"$(keyline "$T/k1.pub")\"}"
check_eq "  root" root "$(body user)"

# --- berth-desktop's user: no keys, no SSH credentials ---
expect "berth-desktop's user: gateway auth is 403" 403 forbidden -u "$DT" POST /v1/gateway/auth \
	"{\"key\":\"$(keyline "$T/k1.pub")\"}"
expect "berth-desktop's user: an SSH credential (gateway connect) is 403" 403 forbidden -u "$DT" \
	POST /v1/gateway/connect '{"user":"root","machine":"devbox"}'
check_match "  saying it may use only its own routes" "berth-desktop's user may use only its own" \
	"$(body error.message)"
expect "berth-desktop's user: the exec credential is 403" 403 forbidden -u "$DT" \
	POST /v1/machines/x/ssh '{}'
expect "berth-desktop's user: GET /v1/machines is 403" 403 forbidden -u "$DT" GET /v1/machines
expect "berth-desktop's user: the epoch is its too" 200 "" -u "$DT" GET /v1/gateway/epoch
out=$(as_user "$GW" /usr/bin/python3 -c 'import socket,sys
s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
try:
    s.sendall(b"{\"op\":\"redeem\",\"user\":\"root\",\"machine\":\"x\",\"token\":\"t\"}\n")
except BrokenPipeError:
    pass
print(s.recv(4096).decode())' "$STATE/desktop.sock" 2>&1)
check_match "the desktop socket refuses berth-sshgw's user" "only root and berth-desktop's user" "$out"

# --- the gateway user ---
expect "gateway user: GET /v1/machines is 403" 403 forbidden -u "$GW" GET /v1/machines
expect "gateway user: GET /v1/info is 403" 403 forbidden -u "$GW" GET /v1/info
expect "gateway user: POST /v1/keys is 403" 403 forbidden -u "$GW" POST /v1/keys \
	"{\"key\":\"$(keyline "$T/k5.pub")\"}"
expect "gateway user: the exec credential is 403" 403 forbidden -u "$GW" POST /v1/machines/x/ssh '{}'
expect "gateway auth: root's key" 200 "" -u "$GW" POST /v1/gateway/auth "{\"key\":\"$(keyline "$T/k1.pub")\"}"
check_eq "  maps to root, with id and fingerprint" "root 1 $(fp_of "$T/k1.pub")" \
	"$(body user) $(body key_id) $(body fingerprint)"
check_eq "  not signed: no first use recorded" false "$(body first_use)"
expect "gateway auth, signed: the key's first use" 200 "" -u "$GW" POST /v1/gateway/auth \
	"{\"key\":\"$(keyline "$T/k1.pub")\",\"signed\":true}"
check_eq "  first_use: true" true "$(body first_use)"
expect "gateway auth, signed, again" 200 "" -u "$GW" POST /v1/gateway/auth \
	"{\"key\":\"$(keyline "$T/k1.pub")\",\"signed\":true}"
check_eq "  first_use: false" false "$(body first_use)"
expect "gateway auth: nobody's key, comment and all" 200 "" -u "$GW" POST /v1/gateway/auth \
	"{\"key\":\"$(cat "$T/k6.pub")\"}"
check_eq "  maps to nobody" nobody "$(body user)"
expect "gateway auth: alice's key" 200 "" POST /v1/gateway/auth "{\"key\":\"$(keyline "$T/k5.pub")\"}"
check_eq "  (root may call it too) maps to alice" alice "$(body user)"
expect "gateway auth: a deleted key: 404 unknown_key" 404 unknown_key -u "$GW" POST /v1/gateway/auth \
	"{\"key\":\"$(keyline "$T/k2.pub")\"}"
unknown=$(cat "$T/body")
expect "gateway auth: a key no one may register: 404 unknown_key" 404 unknown_key -u "$GW" \
	POST /v1/gateway/auth "{\"key\":\"$(keyline "$T/short.pub")\"}"
check_eq "  the same answer, no details" "$unknown" "$(cat "$T/body")"
expect "gateway auth: garbage: 404 unknown_key too" 404 unknown_key -u "$GW" \
	POST /v1/gateway/auth '{"key":"ssh-ed25519 AAAA"}'

expect "connect: alice/devbox (no one has one)" 404 no_machine -u "$GW" POST /v1/gateway/connect \
	'{"user":"alice","machine":"devbox"}'
before=$(cat "$T/body")
check_eq "  'no machine devbox'" "no machine devbox" "$(body error.message)"
check_eq "a stopped machine of root's" stopped "$(berth create devbox --no-start --json | json state)"
check_absent "  its directory is private too" private
expect "connect: alice/devbox (root has one)" 404 no_machine -u "$GW" POST /v1/gateway/connect \
	'{"user":"alice","machine":"devbox"}'
check_eq "  the identical answer" "$before" "$(cat "$T/body")"
expect "connect: root/devbox, stopped, no wake: 409 not_running" 409 not_running -u "$GW" \
	POST /v1/gateway/connect '{"user":"root","machine":"devbox","wake":false}'
check_eq "  with its state" stopped "$(body state)"
expect "connect: an invalid machine name: 400" 400 invalid_name -u "$GW" POST /v1/gateway/connect \
	'{"user":"root","machine":"Dev_Box"}'
expect "connect: no user: 400" 400 invalid_user -u "$GW" POST /v1/gateway/connect '{"machine":"devbox"}'

# --- sessions ---
check_eq "a machine starts with no sessions" 0 "$(berth show devbox --json | json sessions)"
expect "session: ssh on root/devbox" 201 "" -u "$GW" POST /v1/gateway/sessions \
	'{"user":"root","machine":"devbox","kind":"ssh","from":"192.0.2.7"}'
s1=$(body session)
expect "session: berth-sshgw's user may not open a desktop one" 403 forbidden -u "$GW" \
	POST /v1/gateway/sessions '{"user":"root","machine":"devbox","kind":"desktop"}'
expect "session: nor berth-desktop's an ssh one" 403 forbidden -u "$DT" \
	POST /v1/gateway/sessions '{"user":"root","machine":"devbox","kind":"ssh"}'
expect "session: a desktop viewer too (berth-desktop's user)" 201 "" -u "$DT" POST /v1/gateway/sessions \
	'{"user":"root","machine":"devbox","kind":"desktop","from":"192.0.2.8"}'
s2=$(body session)
check_eq "  berth show: 2 sessions" 2 "$(berth show devbox --json | json sessions)"
check_eq "  berth ls --json: 2 sessions" 2 "$(berth ls --json | json machines.0.sessions)"
expect "session: another user's machine: 404 no_machine" 404 no_machine -u "$GW" \
	POST /v1/gateway/sessions '{"user":"alice","machine":"devbox","kind":"ssh"}'
check_eq "  the identical answer" "$before" "$(cat "$T/body")"
expect "session: an unknown kind: 400" 400 invalid_kind -u "$GW" POST /v1/gateway/sessions \
	'{"user":"root","machine":"devbox","kind":"telnet"}'
expect "session end, with byte counts" 200 "" -u "$GW" DELETE "/v1/gateway/sessions/$s1" \
	'{"bytes_in":1200,"bytes_out":34000}'
check_eq "  1 session left" 1 "$(berth show devbox --json | json sessions)"
check_match "  logged with its bytes" "session $s1: ssh on root/devbox closed after [0-9]+ s, 1200 bytes in, 34000 out" \
	"$(cat "$T/hostd.log")"
expect "session end again: 404" 404 not_found -u "$GW" DELETE "/v1/gateway/sessions/$s1"
expect "nobody may not end a session" 403 forbidden -u nobody DELETE "/v1/gateway/sessions/$s2"
expect "berth-sshgw's user may not end a desktop one" 404 not_found -u "$GW" \
	DELETE "/v1/gateway/sessions/$s2"
expect "  nor drop all desktop sessions" 403 forbidden -u "$GW" DELETE /v1/gateway/sessions \
	'{"kind":"desktop"}'
check_eq "  the viewer's session is still there" 1 "$(berth show devbox --json | json sessions)"
check_eq "rm the machine" "deleted devbox" "$(berth rm devbox)"
expect "its session went with it" 404 not_found -u "$DT" DELETE "/v1/gateway/sessions/$s2"
check_eq "a new devbox has no sessions" 0 "$(berth create devbox --no-start --json | json sessions)"
check_eq "rm it" "deleted devbox" "$(berth rm devbox)"
check "hostd is still serving" berth info

# One user for both gateways: hostd refuses to start.
mkdir -p "$T/s2"
printf 'sshgw_user = %s\ndesktop_user = %s\nguest_network = %s\n' "$GW" "$GW" "$GUEST_NET" \
	>"$T/s2/berth.conf"
out=$(timeout 30 "$BIN/berth-hostd" --state "$T/s2" 2>&1)
check_eq "sshgw_user = desktop_user: hostd does not start" 1 "$?"
check_match "  saying each gateway needs a user of its own" \
	"sshgw_user and desktop_user are the same user \\(uid $(id -u "$GW")\\)" "$out"
finish
