#!/bin/bash
# A machine's files through hostd (/v1/machines/NAME/files..., SFTP,
# hostd/files.c), for a user who is not root, on the socket and over HTTP
# with a token: 100 MiB up and down byte-exact, a file replaced, its mode,
# a directory as tar both ways,
# list, stat (a symbolic link not followed), mkdir (with parents), move,
# remove (a file, an empty directory, recursive), an upload cut off half
# way (nothing left behind, the old file kept), and every refusal with its
# message: no such machine, another user's, a path that does not exist, a
# directory read as a file, a move onto an existing file, a directory not
# empty, no path.
. "$(dirname "$0")/../lib.sh"

command -v setpriv >/dev/null || { skip "setpriv is not installed (util-linux)"; finish; }

chmod 711 "$T"
U=bt$$f
test_user "$U" || { not_ok "useradd $U"; finish; }
PORT=$(free_port)
mkdir -p "$STATE"
echo "http_listen = 127.0.0.1:$PORT" >>"$STATE/berth.conf"
start_hostd && build_tiny || { not_ok "hostd and image"; finish; }
web_up || not_ok "berth-web starts"

ub() { as_user "$U" "$BIN/berth" --state "$STATE" "$@"; }
# uc ARGS...: curl as $U on hostd's socket; F is m's files route.
uc() { as_user "$U" curl -sS --unix-socket "$STATE/hostd.sock" "$@"; }
F=http://berth/v1/machines/m/files
chmod 755 "$T"
mkdir -p "$T/u" && chown "$U" "$T/u"

check_eq "$U creates m" running "$(ub create m --json | json state)"

# 100 MiB up and down.
head -c $((100 << 20)) /dev/urandom >"$T/u/big"
sum=$(sha256sum <"$T/u/big" | cut -d' ' -f1)
t0=$(date +%s.%N)
out=$(uc -T "$T/u/big" "$F?path=/root/big")
t1=$(date +%s.%N)
check_match "PUT 100 MiB: 201 with its size" '"path":"/root/big","size":104857600' "$out"
check_eq "  in the machine, byte-exact" "$sum" "$(ub exec m -- sha256sum /root/big | cut -d' ' -f1)"
uc -o "$T/u/back" -D "$T/u/head" "$F?path=/root/big"
t2=$(date +%s.%N)
check_eq "GET 100 MiB back, byte-exact" "$sum" "$(sha256sum <"$T/u/back" | cut -d' ' -f1)"
check_match "  with X-Berth-File-Size" 'X-Berth-File-Size: 104857600' "$(cat "$T/u/head")"
diag "100 MiB up in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s, down in $(awk -v a="$t1" -v b="$t2" 'BEGIN { printf "%.1f", b - a }') s"
rm -f "$T/u/big" "$T/u/back"

# Replace a file; its mode.
printf 'one\n' | uc -T - "$F?path=/root/f&mode=600" >/dev/null
printf 'two\n' | uc -T - "$F?path=/root/f&mode=600" >/dev/null
check_eq "a second PUT replaces the file" two "$(uc "$F?path=/root/f")"
check_match "stat: a file, its size and mode" '"type":"file","size":4,"mode":"0600"' "$(uc "$F/stat?path=/root/f")"
ub exec m -- ln -s /root/f /root/link
check_match "stat of a symbolic link: not followed, its target" '"type":"symlink".*"target":"/root/f"' \
	"$(uc "$F/stat?path=/root/link")"

# mkdir, list, move, remove.
check_eq "mkdir with parents" '{"path":"/root/a/b/c"}' \
	"$(uc -d '{"path": "/root/a/b/c", "parents": true}' "$F/mkdir")"
check_match "mkdir of one that exists, without parents: 409" '"code":"exists"' \
	"$(uc -d '{"path": "/root/a"}' "$F/mkdir")"
check_eq "move a file" '{"from":"/root/f","to":"/root/a/b/g"}' \
	"$(uc -d '{"from": "/root/f", "to": "/root/a/b/g"}' "$F/move")"
names=$(uc "$F/list?path=/root/a/b" | python3 -c 'import json,sys; print(" ".join(sorted(e["name"] + ":" + e["type"] for e in json.load(sys.stdin)["entries"])))')
check_eq "list: its entries and their types" "c:directory g:file" "$names"
check_match "remove a directory that is not empty: 409" '"code":"not_empty"' \
	"$(uc -X DELETE "$F?path=/root/a")"
check_eq "remove a file" '{"deleted":"/root/link","entries":1}' "$(uc -X DELETE "$F?path=/root/link")"
check_eq "remove recursively" '{"deleted":"/root/a","entries":4}' \
	"$(uc -X DELETE "$F?path=/root/a&recursive=1")"
check_match "  it is gone" '"code":"no_such_file"' "$(uc "$F/stat?path=/root/a")"

# An upload cut off half way: nothing left behind, the old file kept.
printf 'old\n' | uc -T - "$F?path=/root/keep" >/dev/null
temps() { uc "$F/list?path=/root" | python3 -c 'import json,sys; print(" ".join(sorted(e["name"] for e in json.load(sys.stdin)["entries"] if ".berth-" in e["name"])))'; }
as_user "$U" /usr/bin/python3 - "$STATE/hostd.sock" <<'PY' &
import socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b"PUT /v1/machines/m/files?path=/root/keep HTTP/1.1\r\nHost: b\r\n"
          b"Content-Length: 10000000\r\n\r\n" + b"x" * 100000)
time.sleep(4)
s.close()
PY
cut_pid=$!
sleep 2
check_match "an upload half way is written to a temporary file beside it" '^\.keep\.berth-[0-9a-f]{12}$' "$(temps)"
wait "$cut_pid"
left=
for _ in $(seq 20); do
	left=$(temps)
	[ -z "$left" ] && break
	sleep 0.5
done
check_eq "  cut off, it leaves no temporary file" "" "$left"
check_eq "  and the file it was replacing is as it was" old "$(uc "$F?path=/root/keep")"

# berth cp, as $U: in and out, its mode kept, into a directory, to stdout.
head -c 200000 /dev/urandom >"$T/u/c.bin"
chmod 640 "$T/u/c.bin"
chown "$U" "$T/u/c.bin"
check "berth cp FILE m:PATH" ub cp "$T/u/c.bin" m:/root/c.bin
check_eq "  the file's mode kept" "-rw-r-----" "$(ub exec m -- ls -l /root/c.bin | cut -c1-10)"
check "berth cp m:PATH FILE" ub cp m:/root/c.bin "$T/u/c2.bin"
check "  byte-exact" cmp "$T/u/c.bin" "$T/u/c2.bin"
mkdir -p "$T/u/into" && chown "$U" "$T/u/into"
check "berth cp m:PATH DIR: the file's name in it" ub cp m:/root/c.bin "$T/u/into"
check "  byte-exact" cmp "$T/u/c.bin" "$T/u/into/c.bin"
check_eq "berth cp m:PATH -: to stdout" 200000 "$(ub cp m:/root/c.bin - | wc -c)"
out=$(ub cp m:/nope "$T/u/nope" 2>&1)
check_eq "berth cp of no such file: 1" "1|berth cp: machine m: /nope: no such file or directory" "$?|$out"
check_absent "  nothing left behind (no part file)" find "$T/u" -name 'nope*'
out=$(ub cp "$T/u/c.bin" "$T/u/c3.bin" 2>&1)
check_match "berth cp with no machine side: 2, saying so" "one side must be MACHINE:PATH" "$out"

# A directory as tar, both ways.
mkdir -p "$T/u/tree/sub dir/deep"
head -c 300000 /dev/urandom >"$T/u/tree/sub dir/deep/bin"
echo hello >"$T/u/tree/a.txt"
ln -s a.txt "$T/u/tree/link"
tar -C "$T/u/tree" -cf "$T/u/tree.tar" .
check_eq "PUT a tar: unpacked into a directory made for it" '{"path":"/root/tree/new"}' \
	"$(uc -T "$T/u/tree.tar" "$F/tar?path=/root/tree/new")"
check_eq "  a file of it, byte-exact" "$(sha256sum <"$T/u/tree/sub dir/deep/bin" | cut -d' ' -f1)" \
	"$(ub exec m -- sha256sum '/root/tree/new/sub dir/deep/bin' | cut -d' ' -f1)"
mkdir -p "$T/u/back"
uc "$F/tar?path=/root/tree/new" -o "$T/u/back.tar"
tar -C "$T/u/back" -xf "$T/u/back.tar"
check_absent "GET it back as tar: the same tree (files, directories, the link)" diff -r --no-dereference "$T/u/tree" "$T/u/back"
check_match "a tar of a file: 409" '"code":"not_a_directory"' "$(uc "$F/tar?path=/root/keep")"
check_match "PUT of what is not a tar: 422 with tar's word" '"code":"tar_failed","message":"machine m: tar -x exited with [0-9]+: .+"' \
	"$(printf 'not a tar at all' | uc -T - "$F/tar?path=/root/tree/bad")"

# Refusals.
check_match "a path that does not exist: 404 naming it" \
	'"code":"no_such_file","message":"machine m: /nope: no such file or directory"' "$(uc "$F?path=/nope")"
check_match "a directory read as a file: 409" '"code":"is_a_directory"' "$(uc "$F?path=/root")"
check_match "no path: 400" '"code":"invalid_path"' "$(uc "$F/stat")"
printf 'x' | uc -T - "$F?path=/root/x1" >/dev/null
printf 'y' | uc -T - "$F?path=/root/x2" >/dev/null
check_match "a move onto an existing file: 409" '"code":"exists"' \
	"$(uc -d '{"from": "/root/x1", "to": "/root/x2"}' "$F/move")"
check_match "a bad mode: 400" '"code":"invalid_mode"' "$(printf x | uc -T - "$F?path=/root/x3&mode=999")"
check_match "no such machine: 404" '"message":"no machine nosuch"' \
	"$(uc http://berth/v1/machines/nosuch/files/stat?path=/)"
berth create r --no-start >/dev/null
check_match "root's machine, as $U: 404, as for none" '"message":"no machine r"' \
	"$(uc http://berth/v1/machines/r/files/stat?path=/)"
check_absent "  and r was not started" matching running berth show r --json
berth rm r >/dev/null

# Over HTTP with the user's token.
TOK=$(ub token create --name files 2>/dev/null)
check_eq "over HTTP with $U's token" old \
	"$(curl -sS -H "Authorization: Bearer $TOK" "http://127.0.0.1:$PORT/v1/machines/m/files?path=/root/keep")"
check_match "  and without it: 401" '^401$' \
	"$(curl -sS -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/v1/machines/m/files?path=/root/keep")"
# berth cp with the same token through berth-web, as another user.
echo "$TOK" >"$T/tok" && chmod 644 "$T/tok"
nb() { setpriv --reuid=nobody --regid=nogroup --clear-groups "$BIN/berth" \
	--url "http://127.0.0.1:$PORT" --token-file "$T/tok" "$@"; }
head -c 300000 /dev/urandom >"$T/r1" && chmod 644 "$T/r1"
nb cp "$T/r1" m:/root/r1 2>"$T/cp.err"
check_eq "berth cp in with --url and $U's token file, as nobody" 0 "$?" || diag "$(cat "$T/cp.err")"
check_eq "  and out again, byte-exact" "$(sha256sum <"$T/r1")" "$(nb cp m:/root/r1 - | sha256sum)"
# (0.0.0.0 is this machine, and no loopback name: a token sent there in
# clear is warned of; port 1 refuses)
out=$("$BIN/berth" --url http://0.0.0.0:1 --token-file "$T/tok" ls 2>&1)
check_match "plain HTTP to an address that is not loopback: a warning" \
	"warning: http://0.0.0.0:1 is plain HTTP: the API token crosses the network in clear" "$out"
out=$(nb ls 2>&1 >/dev/null)
check_eq "  none to 127.0.0.1 (ls answers, stderr empty)" "0|" "$?|$out"

# A suspended machine wakes for a file.
ub suspend m >/dev/null
check_eq "a file of a suspended machine: it wakes" old "$(uc "$F?path=/root/keep")"
check_eq "  and runs" running "$(ub show m --json | json state)"
ub rm m >/dev/null
finish
