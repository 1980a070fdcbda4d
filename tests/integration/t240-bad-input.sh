#!/bin/bash
# Bad input: each request gets a 4xx JSON error naming the problem, and
# nothing is created (no row, volume, domain or file).
. "$(dirname "$0")/../lib.sh"

start_hostd && build_tiny || { not_ok "hostd and image"; finish; }

# req METHOD PATH [BODY]: prints "STATUS CODE MESSAGE".
req() {
	local args=(-s -o "$T/body" -w '%{http_code}' --unix-socket "$STATE/hostd.sock" -X "$1")
	[ $# -ge 3 ] && args+=(-H 'Content-Type: application/json' --data-binary "$3")
	local status
	status=$(curl "${args[@]}" "http://berth$2")
	echo "$status $(json error.code < "$T/body" 2>/dev/null) $(json error.message < "$T/body" 2>/dev/null)"
}
# expect DESC METHOD PATH BODY STATUS CODE MESSAGE-REGEX
expect() {
	local got
	got=$(req "$2" "$3" "$4")
	check_match "$1" "^$5 $6 .*$7" "$got"
}

check_eq "a machine to collide with" stopped "$(berth create taken --no-start --json | json state)"
before_vols=$(ls "$STATE/volumes" | sort)
check_eq "  its volume and the image's are there to compare with" 2 "$(printf '%s\n' "$before_vols" | grep -c .)"

expect "invalid name (uppercase)" POST /v1/machines '{"name":"Bad_Name"}' 400 invalid_name "Bad_Name"
expect "invalid name (leading dash)" POST /v1/machines '{"name":"-x"}' 400 invalid_name "'-x'"
expect "invalid name (64 characters)" POST /v1/machines "{\"name\":\"$(printf 'a%.0s' $(seq 64))\"}" 400 invalid_name "aaaa"
expect "missing name" POST /v1/machines '{}' 400 invalid_name "required"
expect "duplicate name" POST /v1/machines '{"name":"taken"}' 409 exists "machine taken exists"
expect "unknown image" POST /v1/machines '{"name":"x1","image":"nope"}' 404 not_found "no image nope"
expect "memory too small" POST /v1/machines '{"name":"x2","memory":"1M"}' 400 invalid_memory "out of range"
expect "memory too large" POST /v1/machines '{"name":"x3","memory":"900T"}' 400 invalid_memory "out of range"
expect "memory malformed" POST /v1/machines '{"name":"x4","memory":"lots"}' 400 invalid_memory "size"
expect "vcpus zero" POST /v1/machines '{"name":"x5","vcpus":0}' 400 invalid_vcpus "vcpus"
expect "vcpus too many" POST /v1/machines '{"name":"x6","vcpus":100000}' 400 invalid_vcpus "vcpus"
expect "disk smaller than the image" POST /v1/machines '{"name":"x7","disk":"1M"}' 400 invalid_disk "out of range"
expect "disk not in whole sectors" POST /v1/machines '{"name":"x11","disk":1000000001}' 400 invalid_disk "multiple of 512"
expect "disk too large" POST /v1/machines '{"name":"x8","disk":"900P"}' 400 invalid_disk "size"
expect "unknown field" POST /v1/machines '{"name":"x9","colour":"red"}' 400 unknown_field "colour"
expect "malformed JSON body" POST /v1/machines '{"name": "x10",' 400 invalid_json "malformed JSON"
expect "JSON that is not an object" POST /v1/machines '[1,2]' 400 invalid_json "object"
head -c 1048576 /dev/zero | tr '\0' 'a' > "$T/big"
got=$(curl -s -o "$T/body" -w '%{http_code}' --unix-socket "$STATE/hostd.sock" -X POST \
	-H 'Content-Type: application/json' --data-binary @"$T/big" http://berth/v1/machines)
check_eq "oversized body: 413" 413 "$got"
check_eq "oversized body: named" body_too_large "$(json error.code < "$T/body")"
for op in start stop suspend resume restart; do
	expect "$op of a missing machine" POST /v1/machines/ghost/$op '' 404 not_found "no machine ghost"
done
expect "show of a missing machine" GET /v1/machines/ghost '' 404 not_found "no machine ghost"
expect "delete of a missing machine" DELETE /v1/machines/ghost '' 404 not_found "no machine ghost"
expect "exec credential of a missing machine" POST /v1/machines/ghost/ssh '{}' 404 not_found "no machine ghost"
expect "unknown action" POST /v1/machines/taken/fly '' 404 not_found "no action 'fly'"
expect "unknown route" GET /v1/nothing '' 404 not_found "no route"
expect "a name that is not UTF-8" GET /v1/machines/%ff '' 400 invalid_name "invalid machine name '?'"
long=$(python3 -c 'print("\u00e9" * 700)')
expect "a long non-ASCII name (message cut mid-character)" POST /v1/machines "{\"name\":\"$long\"}" 400 invalid_name "invalid machine name"
expect "bad timeout" POST /v1/machines/taken/stop '{"timeout":-1}' 400 invalid_timeout "timeout"
expect "unknown image recipe" POST /v1/images '{"recipe":"nope"}' 404 not_found "no image recipe 'nope'"
expect "image name taken" POST /v1/images '{"recipe":"tiny"}' 409 exists "image tiny exists"
expect "image in use" DELETE /v1/images/tiny '' 409 in_use "used by 1 machine"

# The CLI reports the same errors and fails.
out=$(berth create Bad 2>&1)
check_eq "CLI: invalid name fails" 1 "$?"
check_match "CLI: and says why" "invalid machine name 'Bad'" "$out"
out=$(berth exec ghost -- true 2>&1)
check_eq "CLI: exec on a missing machine exits 255" 255 "$?"
check_match "CLI: and names it" "no machine ghost" "$out"

# Two builds of one image name at once: the second is refused at once,
# without running the recipe; the first builds it.
berth image build tiny --name twin >"$T/twin1.out" 2>&1 &
b1=$!
for _ in $(seq 50); do grep -q "building image twin" "$T/hostd.log" && break; sleep 0.1; done
out=$(berth image build tiny --name twin 2>&1)
check_eq "a second build of a name being built fails" 1 "$?"
check_match "and says so" "image twin is being built already" "$out"
wait "$b1"
check_eq "the first one builds it" 0 "$?"
check_eq "the recipe ran once" 1 "$(grep -c "building image twin" "$T/hostd.log")"
berth image rm twin >/dev/null

check_eq "nothing was created: machines" taken "$(machine_names)"
check_eq "nothing was created: volumes" "$before_vols" "$(ls "$STATE/volumes" | sort)"
check_eq "nothing was created: domains (taken's only)" "$(dom_of taken)" "$(test_domains)"
check_eq "nothing was created: machine directories" 1 "$(ls "$STATE/machines" | wc -l)"
check "hostd is still serving" berth info
check_eq "rm" "deleted taken" "$(berth rm taken)"
finish
