#!/bin/bash
# Templates: `berth template create` boots the tiny image once, runs a
# setup command (a file written, a process left running), and keeps disk
# and memory; two machines made from it run at once with no boot, the
# setup's file and process there, and each has its own identity: hostname,
# SSH host key (pinned, presented, and accepted by the gateway),
# /etc/machine-id, RNG output (reseeded by the new VM generation id) and
# address.  Bad input (invalid or taken names, an unknown image, a setup
# that fails) leaves no template, machine, volume or domain; rm of a template
# that machines use keeps what they need; another user can neither see nor
# use a private template.
. "$(dirname "$0")/../lib.sh"

start_hostd && build_tiny || { not_ok "hostd and image"; finish; }
req() { curl -s -o "$T/body" -w '%{http_code}' --unix-socket "$STATE/hostd.sock" -X "$1" \
	-H 'Content-Type: application/json' "${@:4}" --data-binary "$3" "http://berth$2"
	echo " $(json error.code < "$T/body") $(json error.message < "$T/body")"; }
vols() { ls "$STATE/volumes" | sort | tr '\n' ' '; }
tpl_names() { berth template ls --json | python3 -c 'import json,sys
print(" ".join(t["name"] for t in json.load(sys.stdin)["templates"]))'; }

vols0=$(vols)
doms0=$(test_domains | wc -l)

# ---- bad input: nothing half-made ----
check_match "invalid template name" '^400 invalid_name .*Bad' \
	"$(req POST /v1/templates '{"name":"Bad","image":"tiny"}')"
check_match "unknown image" '^404 not_found no image nope' \
	"$(req POST /v1/templates '{"name":"t-bad","image":"nope"}')"
out=$(berth template create t-fail --image tiny --memory 256M --run 'echo partial-output; exit 7' 2>&1)
check_eq "a setup that fails: berth template create fails" 1 "$?"
check_match "  naming the status and the output's last line" \
	"setup_failed|the setup command exited with status 7: partial-output" "$out"
check_eq "  no template left" "" "$(tpl_names)"
check_eq "  no machine left (the build machine went)" "" "$(machine_names | tr '\n' ' ')"
check_eq "  no volume left" "$vols0" "$(vols)"
check_eq "  no domain left" "$doms0" "$(test_domains | wc -l)"
check "  no memory image left" test -z "$(ls "$STATE/templates" 2>/dev/null)"
berth template create t-slow --image tiny --memory 256M --timeout 8 --run 'echo started; sleep 600' \
	>"$T/slow.out" 2>&1 &
slow=$!
stages=
for _ in $(seq 600); do
	st=$(curl -s --unix-socket "$STATE/hostd.sock" http://berth/v1/templates/t-slow | json building.stage 2>/dev/null)
	case " $stages " in *" $st "*) ;; *) stages="$stages $st" ;; esac
	[ "$st" = setup ] && break
	sleep 0.1
done
check_match "while it is built, GET /v1/templates/t-slow tells its stage (boot, then setup)" \
	"boot setup" "$stages"
check_match "  a second create of that name is refused at once" '^409 exists template t-slow is being built' \
	"$(req POST /v1/templates '{"name":"t-slow","image":"tiny"}')"
wait "$slow"
check_eq "a setup that outlives --timeout 8: fails" 1 "$?"
out=$(cat "$T/slow.out")
check_match "  naming the timeout" "t-slow: the setup command did not end within 8 s" "$out"
check_eq "  and leaves no template, machine, volume or domain" "//$vols0/$doms0" \
	"$(tpl_names)/$(machine_names | tr '\n' ' ')/$(vols)/$(test_domains | wc -l)"

# ---- a template ----
setup='echo setup-ran; echo from-setup > /root/tpl-file
printf "#!/bin/sh\nwhile :; do sleep 1; done\n" > /root/tpl-daemon; chmod +x /root/tpl-daemon
setsid /root/tpl-daemon </dev/null >/dev/null 2>&1 & echo $! > /root/tpl-pid
echo "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFromTheSetupNotTheSeed setup" >> /root/.ssh/authorized_keys; sync'
t0=$(date +%s%N)
out=$(berth template create web --image tiny --memory 256M --run "$setup" 2>"$T/tc.err")
check_eq "template create streams back the setup's output" setup-ran "$out"
diag "template create took $(( ($(date +%s%N) - t0) / 1000000 )) ms"
j=$(berth template show web --json)
check_eq "template show: image, memory, setup" "tiny 268435456 True" \
	"$(echo "$j" | python3 -c 'import json,sys; t=json.load(sys.stdin); print(t["image"], t["memory"], t["setup"].startswith("echo setup-ran"))')"
check "  its memory image is kept" test "$(echo "$j" | json memory_size)" -gt 0
check_eq "the build machine is gone from the owner's list" "" "$(machine_names | tr '\n' ' ')"
check_match "a name taken" '^409 exists template web exists' \
	"$(req POST /v1/templates '{"name":"web","image":"tiny"}')"
check_match "a machine from an unknown template" '^404 no_template no template nope' \
	"$(req POST /v1/machines '{"name":"x","template":"nope"}')"
check_match "template with image" '^400 invalid_template' \
	"$(req POST /v1/machines '{"name":"x","template":"web","image":"tiny"}')"
check_match "GET of an unknown template" '^404 no_template' "$(req GET /v1/templates/nope '')"

# ---- two machines from it ----
for m in t1 t2; do
	t0=$(date +%s%N)
	j=$(berth create "$m" --template web --json)
	ms=$(( ($(date +%s%N) - t0) / 1000000 ))
	check_eq "$m from the template: running" running "$(echo "$j" | json state)"
	t1=$(date +%s%N)
	out=$(berth exec "$m" -- cut -d. -f1 /proc/uptime)
	since=$(( ($(date +%s%N) - t0) / 1000000000 ))
	diag "$m: create took $ms ms, then the first exec $(( ($(date +%s%N) - t1) / 1000000 )) ms"
	check "$m answers, its uptime the template's (no boot: $out s > the $since s since its create)" \
		test -n "$out" -a "${out:-0}" -gt "$since"
done
check_match "t1 was never booted: its console log is not a boot's" "^0$" \
	"$(grep -c 'Linux version' "$STATE/machines/$(berth show t1 --json | json id)/console.log" 2>/dev/null)"
check_eq "t1 has the setup's file" from-setup "$(berth exec t1 -- cat /root/tpl-file)"
check_eq "t2 has the setup's file" from-setup "$(berth exec t2 -- cat /root/tpl-file)"
for m in t1 t2; do
	check_match "$m runs the process the setup started" "tpl-daemon" \
		"$(berth exec "$m" -- sh -c 'tr "\0" " " < /proc/$(cat /root/tpl-pid)/cmdline')"
done
check_eq "hostnames are their own" "t1 t2" "$(berth exec t1 -- hostname) $(berth exec t2 -- hostname)"
# The tiny image has berth-identity: one SSH command re-keys it (hostd
# hands it the key, name, machine id and randomness on stdin), not
# berth-seed --live re-reading the seed.
for m in t1 t2; do
	check_match "$m re-keyed by berth-identity in one command (status 0)" \
		"$m presents its own host key: berth-identity took [0-9]+ ms \\(status 0\\)" \
		"$(grep -E "$m presents its own host key" "$T/hostd.log")"
done
check_eq "  its /etc/hostname and /etc/hosts name it" "t1 1" \
	"$(berth exec t1 -- cat /etc/hostname) $(berth exec t1 -- grep -c '	t1$' /etc/hosts)"
check_eq "  root's authorized keys are the seed's again (the setup's extra one is gone)" "0 1" \
	"$(berth exec t1 -- grep -c FromTheSetup /root/.ssh/authorized_keys) $(berth exec t1 -- grep -c . /root/.ssh/authorized_keys)"
check_eq "  the private key it was handed is not left in the guest" "0" \
	"$(berth exec t1 -- sh -c 'cat /run/berth-identity.pem /etc/dropbear/*.new 2>/dev/null | wc -c')"

scanned_key() {
	local j
	j=$(berth show "$1" --json)
	ssh-keyscan -T 20 -t ed25519 -p "$(echo "$j" | json ssh.port)" "$(echo "$j" | json ssh.host)" \
		2>/dev/null | awk '{ print $2 " " $3 }'
}
k1=$(berth show t1 --json | json host_key)
k2=$(berth show t2 --json | json host_key)
check "host keys: t1 and t2 have different ones pinned" test -n "$k1" -a -n "$k2" -a "$k1" != "$k2"
check_eq "  t1 presents its own" "$k1" "$(scanned_key t1)"
check_eq "  t2 presents its own" "$k2" "$(scanned_key t2)"
check_eq "  both confirmed" "confirmed confirmed" \
	"$(berth show t1 --json | json host_key_state) $(berth show t2 --json | json host_key_state)"
gateway_up t340 || not_ok "the gateway starts"
check_eq "  the gateway (which pins them) reaches both" "t1 t2" \
	"$("${SSH[@]}" t1@127.0.0.1 hostname 2>/dev/null) $("${SSH[@]}" t2@127.0.0.1 hostname 2>/dev/null)"
id1=$(berth exec t1 -- cat /etc/machine-id)
id2=$(berth exec t2 -- cat /etc/machine-id)
check_match "/etc/machine-id: t1's is 32 hex digits" '^[0-9a-f]{32}$' "$id1"
check "  t2's differs" test -n "$id2" -a "$id1" != "$id2"
r1=$(berth exec t1 -- sh -c 'head -c 32 /dev/urandom | od -An -tx1 | tr -d " \n"')
r2=$(berth exec t2 -- sh -c 'head -c 32 /dev/urandom | od -An -tx1 | tr -d " \n"')
check "random bytes differ" test -n "$r1" -a "$r1" != "$r2"
# The random bytes differ even without the VM generation id (checked by
# hand: a template made seconds after its boot is on the kernel's early,
# short reseed interval); what fails without it is the kernel's log line.
for m in t1 t2; do
	check_match "$m's kernel reseeded its RNG at the restore (new VM generation id)" \
		"crng reseeded due to virtual machine fork" "$(berth exec "$m" -- dmesg)"
done
a1=$(berth show t1 --json | json ssh.host)
a2=$(berth show t2 --json | json ssh.host)
check "addresses: t1 and t2 are reached at their own" test -n "$a1" -a "$a1" != "$a2"
check "  and have their own MACs" test "$(berth show t1 --json | json mac)" != "$(berth show t2 --json | json mac)"
check_match "events: t1 forked from template web" "from template web" \
	"$(berth events t1 --json | json events.0.cause)"

# ---- an image built before berth-identity: the old path ----
# (the setup removes it from the template: hostd's command exits 5, then
# berth-seed --live re-keys and a second command gives the machine id)
berth template create old --image tiny --memory 256M \
	--run 'rm -f /etc/berth-identity; sync' >/dev/null 2>"$T/old.err" || diag "$(cat "$T/old.err")"
check_eq "a template without berth-identity: t3 from it runs" running \
	"$(berth create t3 --template old --json | json state)"
check_match "  re-keyed by berth-seed --live (the fallback)" \
	"t3 presents its own host key: berth-seed --live took" \
	"$(grep -E "t3 presents its own host key" "$T/hostd.log")"
check_eq "  presents its own pinned key" "$(berth show t3 --json | json host_key)" "$(scanned_key t3)"
check_eq "  is called t3" t3 "$(berth exec t3 -- hostname)"
id3=$(berth exec t3 -- cat /etc/machine-id)
check "  has a machine id of its own" test -n "$id3" -a "$id3" != "$id1" -a "${#id3}" = 32
berth rm t3 >/dev/null
berth template rm old >/dev/null

# ---- another user ----
A=(-H "X-Berth-User: alice")
check_eq "alice does not list root's private template" "0" \
	"$(curl -s --unix-socket "$STATE/hostd.sock" "${A[@]}" http://berth/v1/templates | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["templates"]))')"
check_match "  nor sees it" '^404 no_template no template web' "$(req GET /v1/templates/web '' "${A[@]}")"
check_match "  nor makes a machine from it" '^404 no_template no template web' \
	"$(req POST /v1/machines '{"name":"a1","template":"web"}' "${A[@]}")"
check_match "  nor deletes it" '^404 no_template' "$(req DELETE /v1/templates/web '' "${A[@]}")"
check_match "  nor makes a public one" '^403 forbidden only root' \
	"$(req POST /v1/templates '{"name":"pub","image":"tiny","public":true}' "${A[@]}")"

# ---- rm while machines use it ----
check_eq "rm the template while t1 and t2 use it" "deleted template web" "$(berth template rm web)"
check_eq "  it is gone" "" "$(tpl_names)"
check "  its memory image too" test ! -e "$STATE/templates/web.mem"
check_match "  a machine from it now: 404" '^404 no_template' \
	"$(req POST /v1/machines '{"name":"t3","template":"web"}')"
berth restart t1 >/dev/null
check_eq "  t1 reboots on the disk it is layered on" from-setup "$(berth exec t1 -- cat /root/tpl-file)"
check_eq "  and keeps its own name after a cold boot" t1 "$(berth exec t1 -- hostname)"
check_eq "  t2 runs on" from-setup "$(berth exec t2 -- cat /root/tpl-file)"
berth rm t1 >/dev/null
berth rm t2 >/dev/null
check_eq "with every machine gone only the image's volume remains" "$vols0" "$(vols)"
finish
