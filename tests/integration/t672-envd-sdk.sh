#!/bin/bash
# E2B's data plane (web/envd.c) driven end to end by the real e2b SDK (npm,
# 2.51.0, pinned in web/package.json) with its documented self-hosted
# settings (E2B_DOMAIN=DOMAIN:PORT, E2B_API_KEY; HTTPS with the test's own
# CA, DOMAIN's names resolved to loopback for the node process alone by
# tests/e2b/loopback.mjs): Sandbox.create (web/e2b.c), then
# commands.run with streamed stdout and its exit code, a non-zero exit as
# CommandExitError, a background command, commands.list, commands.connect
# to it (live output) and commands.kill (true, then false), files.write
# (one file, then two), files.read, files.list, files.exists, makeDir of an
# existing directory (false), a missing file (FileNotFoundError),
# files.watchDir, the sandbox's envVars, and isRunning (/health).  The SDK side is tests/envd_sdk.mjs.
. "$(dirname "$0")/../lib.sh"

SDK=$ROOT/build/node/node_modules/e2b/package.json
if ! command -v node >/dev/null || [ ! -f "$SDK" ] || ! command -v openssl >/dev/null; then
	skip "the E2B SDK: needs node, openssl and $SDK (sh deploy/install-deps.sh test)"
	finish
fi
[ -f "$ROOT/tests/e2b/loopback.mjs" ] || { skip "tests/e2b/loopback.mjs (the e2bapi branch)"; finish; }
check_eq "the SDK is the pinned 2.51.0" 2.51.0 "$(json version <"$SDK")"

DOMAIN=berth.test
tls_ca "$DOMAIN" || { not_ok "the test's CA and certificate"; finish; }

PORT=$(free_port)
mkdir -p "$STATE"
cat >>"$STATE/berth.conf" <<EOF
http_listen = 127.0.0.1:$PORT
preview_domain = $DOMAIN
tls_cert = $T/tls/cert.pem
tls_key = $T/tls/key.pem
EOF
start_hostd && build_tiny || { not_ok "hostd and image"; finish; }
web_up || { not_ok "berth-web starts"; finish; }

TOKEN=$(berth token create --name e2b 2>/dev/null)
KEY=e2b_${TOKEN#berth_}
node_sdk() {
	E2B_API_KEY=$KEY E2B_DOMAIN=$DOMAIN:$PORT E2B_TEST_DOMAIN=$DOMAIN \
		NODE_EXTRA_CA_CERTS=$T/tls/ca.pem node --import "$ROOT/tests/e2b/loopback.mjs" "$@"
}
out=$(node_sdk "$ROOT/tests/e2b/sdk.mjs" create tiny 600 '{}' '{"SBX_VAR":"from-create"}')
S=$(echo "$out" | json sandboxId 2>/dev/null)
check_match "Sandbox.create(tiny) ($out)" '^e2b-[0-9a-f]{8}-root$' "$S"

node_sdk "$ROOT/tests/envd_sdk.mjs" "$S" >"$T/sdk.out" 2>"$T/sdk.err"
sed 's/^/# /' "$T/sdk.out"
[ -s "$T/sdk.err" ] && sed 's/^/# stderr: /' "$T/sdk.err" | head -20
line() { sed -n "s/^$1 //p" "$T/sdk.out"; }
val() { line "$1" | sed -n 's/^ok //p' | python3 -c 'import json, sys
d = json.loads(sys.stdin.read() or "null")
for k in sys.argv[1].split("."):
    d = d[k] if isinstance(d, dict) else None
print(json.dumps(d))' "$2"; }

check_match "commands.run: ok" '^ok ' "$(line run)"
check_eq "  exit code 0" 0 "$(val run exitCode)"
check_eq "  its stdout" '"one\ntwo\n"' "$(val run stdout)"
check_eq "  its stderr" '"err\n"' "$(val run stderr)"
first=$(val run firstMs)
total=$(val run totalMs)
check "  stdout streamed: the first piece (${first} ms) before the end (${total} ms)" \
	awk -v a="$first" -v b="$total" 'BEGIN { exit !(a + 1500 < b) }'
check_eq "a non-zero exit: CommandExitError, its status as message" "ERR CommandExitError: exit status 3" "$(line exit3)"
check_eq "the sandbox's envVars (create) and the command's envs, cwd" '"from-create/mine\n"' "$(val envs stdout)"
check_match "files.watchDir: the write's create event" '"create:new.txt"' "$(val watch events)"
check_match "background + commands.connect: ok" '^ok ' "$(line background)"
check_eq "  listed by commands.list" true "$(val background listed)"
check_eq "  commands.connect sees its live output" true "$(val background live)"
check_eq "  commands.kill: true" true "$(val background killed)"
check_eq "  commands.kill again: false (not_found)" false "$(val background again)"
check_match "files: ok" '^ok ' "$(line files)"
check_eq "  files.write gives the path" '"/tmp/sdk/a.txt"' "$(val files wrote)"
check_eq "  files.read gives the bytes" '"hello from the sdk\n"' "$(val files text)"
check_eq "  files.list: the three files (two written at once)" '["a.txt:file:19", "b.txt:file:3", "c.txt:file:3"]' "$(val files list)"
check_eq "  files.exists of nothing: false" false "$(val files exists)"
check_eq "  files.makeDir of an existing directory: false" false "$(val files made)"
check_eq "  files.read of nothing: FileNotFoundError" '"FileNotFoundError"' "$(val files missing)"
check_eq "isRunning (GET /health): true" "ok true" "$(line running)"

berth delete "${S%-root}" >/dev/null 2>&1
finish
