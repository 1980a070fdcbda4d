#!/bin/bash
# Per-user quotas (berth.conf; root exempt): a user created by the test
# runs into max_machines, max_total_disk, max_running_vcpus and
# max_checkpoints, each refused as 403 quota_exceeded naming the quota, its
# limit and the use, leaving nothing behind; root still creates; berth
# quota shows the user theirs.  Images made from a machine are their
# owner's: another user neither lists nor uses one until root publishes it.
. "$(dirname "$0")/../lib.sh"

command -v setpriv >/dev/null || { skip "setpriv is not installed (util-linux)"; finish; }

# The test's user reaches the socket through $T.
chmod 711 "$T"
U=bt$$q
test_user "$U" || { not_ok "useradd $U"; finish; }
mkdir -p "$STATE"
cat >>"$STATE/berth.conf" <<EOF
max_machines = 2
max_total_disk = 600M
max_running_vcpus = 1
max_checkpoints = 1
EOF
start_hostd && build_tiny || { not_ok "hostd and image"; finish; }

# ub ARGS...: the berth CLI as $U.
ub() { as_user "$U" "$BIN/berth" --state "$STATE" "$@"; }
names() { ub ls --json | python3 -c 'import json,sys; print(" ".join(sorted(m["name"] for m in json.load(sys.stdin)["machines"])))'; }
vol_count() { find "$STATE/volumes" -type f 2>/dev/null | wc -l; }

check_eq "$U creates m1 (256 MiB disk)" stopped "$(ub create m1 --no-start --json | json state)"
out=$(ub create m2 --no-start --disk 512M 2>&1)
check_eq "m2 with a 512 MiB disk: refused" 1 "$?"
check_match "  naming max_total_disk, its limit and the use" \
	"quota max_total_disk: 600M at most, you have 256M, and this machine's disk is 512M" "$out"
check_eq "m2 with the image's 256 MiB: created" stopped "$(ub create m2 --no-start --json | json state)"
vols=$(vol_count)
doms=$(test_domains | wc -l)
out=$(ub create m3 --no-start 2>&1)
check_eq "a third machine over max_machines = 2: refused" 1 "$?"
check_match "  naming the quota, its limit and the use" "quota max_machines: 2 machines at most, you have 2" "$out"
check_eq "  nothing of m3 is left: machines" "m1 m2" "$(names)"
check_eq "  volumes" "$vols" "$(vol_count)"
check_eq "  domains" "$doms" "$(test_domains | wc -l)"
code=$(curl -s --unix-socket "$STATE/hostd.sock" -H "X-Berth-User: $U" -H 'Content-Type: application/json' \
	--data-binary '{"name":"m3","start":false}' http://berth/v1/machines | json error.code)
check_eq "  the API's answer: 403 quota_exceeded (root acting for $U: $U's quota)" quota_exceeded "$code"
berth create r1 --cpus 2 --no-start >/dev/null
for r in r2 r3; do berth create "$r" --no-start >/dev/null; done
check_eq "root (exempt) creates three all the same" 3 "$(berth ls --json | python3 -c 'import json,sys; print(sum(m["owner"] == "root" for m in json.load(sys.stdin)["machines"]))')"

check_eq "$U starts m1 (1 vCPU)" running "$(ub start m1 --json | json state)"
out=$(ub start m2 2>&1)
check_eq "m2 as well, over max_running_vcpus = 1: refused" 1 "$?"
check_match "  naming the quota" "quota max_running_vcpus: 1 vCPUs running at most, you have 1" "$out"
check_eq "  m2 stays stopped" stopped "$(ub show m2 --json | json state)"
check_eq "root's machines do not count: r1 starts" running "$(berth start r1 --no-wait --json | json state)"
# Refusals are events of the user refused (GET /v1/events), theirs alone.
uev=$(ub events --json | python3 -c 'import json, sys
for e in json.load(sys.stdin)["events"]:
    if e["kind"] == "quota_refused": print(e["machine"] + "|" + e["cause"])')
check_match "events: m2's start refused, the quota named" \
	"^m2\|quota max_running_vcpus: 1 vCPUs running at most, you have 1.*; POST /v1/machines/m2/start by $U$" \
	"$(printf '%s\n' "$uev" | grep '^m2|')"
check_match "  and a create (no machine yet): max_machines" "^\|quota max_machines: 2 machines at most" \
	"$(printf '%s\n' "$uev" | grep max_machines | head -1)"
check_eq "  $U sees none of root's events" "" \
	"$(ub events --json | python3 -c 'import json, sys
print(" ".join(e["machine"] for e in json.load(sys.stdin)["events"] if e["owner"] != sys.argv[1]))' "$U")"
out=$(ub events --all 2>&1)
check_match "  --all is root's: refused to $U" "only root may see every user's events" "$out"
check_match "  root's --all shows $U's, with the owner" "$U +m1 +started" "$(berth events --all)"
dom=$(dom_of r1)
check_match "r1 (2 vCPUs) weighs 2048 against other machines' CPU" "cpu_shares +: 2048" \
	"$($VIRSH schedinfo "$dom" 2>&1)"
# I/O and memory, read back from r1's cgroups by libvirt (these machines'
# cgroup v1 has blkio with BFQ's weights and a memory controller).
check_match "  and 200 for its I/O (100 per vCPU)" "weight +: 200" "$($VIRSH blkiotune "$dom" 2>&1)"
mem=$(berth show r1 --json | json memory)
extra=$((mem / 4 > 256 << 20 ? mem / 4 : 256 << 20))
check_match "  its memory's soft limit: its memory and a quarter, 256 MiB at least ($(( (mem + extra) >> 10 )) KiB)" \
	"soft_limit +: $(( (mem + extra) >> 10 ))\b" "$($VIRSH memtune "$dom" 2>&1)"
ub quota --json >"$T/q.json"
check_eq "berth quota --json: machines 2 of 2" "2 2" "$(json quotas.max_machines.used <"$T/q.json") $(json quotas.max_machines.limit <"$T/q.json")"
check_eq "  vCPUs running 1 of 1" "1 1" "$(json quotas.max_running_vcpus.used <"$T/q.json") $(json quotas.max_running_vcpus.limit <"$T/q.json")"
check_eq "  disk 512 MiB" $((512 << 20)) "$(json quotas.max_total_disk.used <"$T/q.json")"
check_eq "  not exempt" false "$(json exempt <"$T/q.json")"
check_match "berth quota: a table" "max_machines +2 +2" "$(ub quota)"
check_eq "root is exempt" true "$(berth quota --json | json exempt)"

check_eq "a checkpoint of m1" c1 "$(ub checkpoint m1 c1 --json | json name)"
out=$(ub checkpoint m1 c2 2>&1)
check_eq "a second, over max_checkpoints = 1: refused" 1 "$?"
check_match "  naming the quota" "quota max_checkpoints: 1 checkpoints per machine at most, you have 1" "$out"
check_eq "  m1 has one checkpoint" c1 "$(ub checkpoints m1 --json | python3 -c 'import json,sys; print(" ".join(c["name"] for c in json.load(sys.stdin)["checkpoints"]))')"
check_eq "  and runs" running "$(ub show m1 --json | json state)"

# ---- images made from machines ----
check_match "$U saves an image of m1" "^image u-img made from m1 \\(private" "$(ub image save m1 u-img)"
ub image ls --json >"$T/imgs.json"
check_eq "  she lists it, hers and private" "$U false machine" "$(python3 -c 'import json,sys
i = [i for i in json.load(open(sys.argv[1]))["images"] if i["name"] == "u-img"][0]
print(i["owner"], str(i["public"]).lower(), i["source"])' "$T/imgs.json")"
A=(-H "X-Berth-User: alice" -H 'Content-Type: application/json')
api() { curl -s --unix-socket "$STATE/hostd.sock" "${A[@]}" -X "$1" ${3:+--data-binary "$3"} "http://berth$2"; }
check_eq "another user (alice) does not list it" "tiny" \
	"$(api GET /v1/images | python3 -c 'import json,sys; print(" ".join(i["name"] for i in json.load(sys.stdin)["images"]))')"
check_eq "  nor sees it: the answer of a missing image" "no image u-img/no image nope" \
	"$(api GET /v1/images/u-img | json error.message)/$(api GET /v1/images/nope | json error.message)"
check_eq "  nor creates from it: 404" "not_found no image u-img" \
	"$(api POST /v1/machines '{"name":"a1","image":"u-img","start":false}' | python3 -c 'import json,sys; e=json.load(sys.stdin)["error"]; print(e["code"], e["message"])')"
check_match "$U may not publish it" "only root may publish images" "$(ub image publish u-img 2>&1)"
check_match "nor delete root's tiny" "image tiny is root's: only root may delete it" "$(ub image rm tiny 2>&1)"
check_match "root sees it" "u-img" "$(berth image ls)"
check_eq "root publishes it" "image u-img is public" "$(berth image publish u-img)"
check_eq "  now alice creates from it" stopped "$(api POST /v1/machines '{"name":"a1","image":"u-img","start":false}' | json state)"
check_eq "  and removes that machine" a1 "$(api DELETE /v1/machines/a1 | json deleted)"
check_eq "$U deletes her image" "deleted image u-img" "$(ub image rm u-img)"
check_eq "  m1 runs on" running "$(ub show m1 --json | json state)"
# What an image holds: root's r1 with a file written, saved, and a new machine.
# r1 was started with --no-wait: a start of the running machine waits
# until its SSH answers.
check_eq "r1 answers" running "$(berth start r1 --json | json state)"
check_eq "root writes a file in r1" written "$(berth exec r1 -- sh -c 'echo marked > /root/mark; sync; echo written')"
check_match "root saves r1 (running) as r-img" "^image r-img made from r1" "$(berth image save r1 r-img)"
check_eq "a machine from r-img" running "$(berth create r4 --image r-img --json | json state)"
check_eq "  has r1's file" marked "$(berth exec r4 -- cat /root/mark)"
check_eq "  r1 goes on" marked "$(berth exec r1 -- cat /root/mark)"
out=$(berth image rm r-img 2>&1)
check_match "r-img cannot go while r4 uses it" "used by 1 machine" "$out"
berth rm r4 >/dev/null
check_eq "then it can" "deleted image r-img" "$(berth image rm r-img)"
check_eq "  and r1 still runs on its disk" marked "$(berth exec r1 -- cat /root/mark)"

ub stop m1 >/dev/null
check_eq "once m1 stops, m2 starts" running "$(ub start m2 --no-wait --json | json state)"
for m in m1 m2; do ub rm "$m" >/dev/null; done
for r in r1 r2 r3; do berth rm "$r" >/dev/null; done
check_eq "all removed" "" "$(names)"
finish
