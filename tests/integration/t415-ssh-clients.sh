#!/bin/bash
# The SSH gateway's algorithms (sshgw/algos.c) against the clients people
# use: through berth-sshgw, OpenSSH's ssh (with and without -C), PuTTY's
# plink and pscp, paramiko and asyncssh each reach a real machine; ssh-audit
# finds nothing to fail or warn about; a client offering only a NIST curve
# for the key exchange, or only MACs that are not encrypt-then-MAC, is
# refused at the key exchange.
. "$(dirname "$0")/../lib.sh"

# Debian's python3, whose paramiko and asyncssh deploy/install-deps.sh
# installs (another python3 may come first in PATH).
PY=/usr/bin/python3
missing=
for tool in ssh ssh-keygen plink pscp puttygen ssh-audit; do
	command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
done
for mod in paramiko asyncssh; do
	"$PY" -W ignore -c "import $mod" 2>/dev/null || missing="$missing python3-$mod"
done
[ -z "$missing" ] || {
	skip "not installed:$missing (deploy/install-deps.sh test: openssh-client, putty-tools, ssh-audit, python3-paramiko, python3-asyncssh)"
	finish
}
chmod 711 "$T"
unset SSH_AUTH_SOCK SSH_AGENT_PID
# PuTTY's tools keep a random seed (and would keep host keys) in
# ~/.putty (the passwd entry's home, whatever HOME says): in $T instead.
export PUTTYDIR=$T/putty
mkdir -p "$PUTTYDIR"
GW_PID=
t415_cleanup() {
	[ -n "$GW_PID" ] && kill "$GW_PID" 2>/dev/null && wait "$GW_PID" 2>/dev/null
	cleanup
}
trap t415_cleanup EXIT
# A client may hang only this long.
TMO=120
tmo() { timeout -k 5 "$TMO" "$@"; }

start_hostd && build_tiny || { not_ok "hostd and image"; finish; }
check_eq "create m: running" running "$(berth create m --json | json state)"
gateway_up t415 || { not_ok "the gateway starts"; finish; }
HOSTKEY=$STATE/sshgw/ssh_host_ed25519_key.pub
FP=$(ssh-keygen -l -E sha256 -f "$HOSTKEY" | awk '{ print $2 }')
check_match "the gateway's host key fingerprint" '^SHA256:' "$FP"
echo "[127.0.0.1]:$GWPORT $(cut -d' ' -f1,2 "$HOSTKEY")" >"$T/known_hosts"

# ---- OpenSSH ----
check_eq "ssh: a command in the machine" "ok m" "$(tmo "${SSH[@]}" m@127.0.0.1 'echo ok $(hostname)')"
check_eq "ssh -C (asks for compression): still works" ok \
	"$(tmo "${SSH[@]}" -C m@127.0.0.1 echo ok)"

# ---- PuTTY: plink and pscp, with the key converted to .ppk ----
puttygen "$T/id" -O private -o "$T/id.ppk" </dev/null >"$T/puttygen.out" 2>&1
check "puttygen converts the OpenSSH key to .ppk" test -s "$T/id.ppk"
[ -s "$T/id.ppk" ] || sed 's/^/# /' "$T/puttygen.out"
PUTTY=(-batch -P "$GWPORT" -i "$T/id.ppk" -hostkey "$FP")
out=$(tmo plink -ssh "${PUTTY[@]}" m@127.0.0.1 'echo plink; exit 3' </dev/null 2>"$T/plink.err")
rc=$?
check_eq "plink -batch: a command, its output and exit status 3" "3 plink" "$rc $out"
[ "$rc" = 3 ] || sed 's/^/# /' "$T/plink.err"
head -c 300K /dev/urandom >"$T/f.in"
tmo pscp "${PUTTY[@]}" "$T/f.in" m@127.0.0.1:/tmp/f >/dev/null 2>"$T/pscp.err"
check_eq "pscp into the machine: exit 0" 0 "$?"
check_eq "  the machine has the same bytes" "$(sha256sum <"$T/f.in" | cut -d' ' -f1)" \
	"$(tmo "${SSH[@]}" m@127.0.0.1 'sha256sum /tmp/f' | cut -d' ' -f1)"
tmo pscp "${PUTTY[@]}" m@127.0.0.1:/tmp/f "$T/f.out" >/dev/null 2>>"$T/pscp.err"
check_eq "pscp out of the machine: exit 0" 0 "$?"
check "  the same bytes (cmp)" cmp -s "$T/f.in" "$T/f.out"
[ -s "$T/pscp.err" ] && sed 's/^/# pscp: /' "$T/pscp.err"

# ---- paramiko (2.12: AES-CTR is its only cipher the gateway offers) ----
cat >"$T/para.py" <<'EOF'
import sys, paramiko
port, key, known = int(sys.argv[1]), sys.argv[2], sys.argv[3]
c = paramiko.SSHClient()
c.load_host_keys(known)
c.set_missing_host_key_policy(paramiko.RejectPolicy())
c.connect("127.0.0.1", port=port, username="m", key_filename=key, look_for_keys=False,
          allow_agent=False, timeout=60, banner_timeout=60, auth_timeout=60)
t = c.get_transport()
_, out, _ = c.exec_command("echo para; exit 5")
text = out.read().decode().strip()
print(out.channel.recv_exit_status(), text)
print(t.local_cipher, t.local_mac, file=sys.stderr)
c.close()
EOF
out=$(tmo "$PY" -W ignore "$T/para.py" "$GWPORT" "$T/id" "$T/known_hosts" 2>"$T/para.err")
check_eq "paramiko: a command, its output and exit status 5" "5 para" "$out"
check_match "  over AES-CTR with an encrypt-then-MAC MAC" '^aes[0-9]+-ctr hmac-sha2-(256|512)-etm@openssh.com$' \
	"$(tail -1 "$T/para.err")"
[ "$out" = "5 para" ] || sed 's/^/# /' "$T/para.err"

# ---- asyncssh ----
cat >"$T/async.py" <<'EOF'
import asyncio, sys, asyncssh
port, key, known = int(sys.argv[1]), sys.argv[2], sys.argv[3]
async def main():
    async with asyncssh.connect("127.0.0.1", port, username="m", client_keys=[key],
                                known_hosts=known, agent_path=None,
                                login_timeout=60) as conn:
        r = await conn.run("echo async; exit 4", check=False)
        print(r.exit_status, r.stdout.strip())
asyncio.run(main())
EOF
out=$(tmo "$PY" -W ignore "$T/async.py" "$GWPORT" "$T/id" "$T/known_hosts" 2>"$T/async.err")
check_eq "asyncssh: a command, its output and exit status 4" "4 async" "$out"
[ "$out" = "4 async" ] || sed 's/^/# /' "$T/async.err"

# ---- what the gateway offers: ssh-audit ----
tmo ssh-audit -n -p "$GWPORT" 127.0.0.1 >"$T/audit.out" 2>&1
rc=$?
check_match "ssh-audit reached the gateway" '\(gen\) banner: SSH-2.0-libssh' "$(cat "$T/audit.out")"
grep -q '^(gen) banner' "$T/audit.out" ||
	{ diag "ssh-audit: exit $rc"; tail -5 "$T/audit.out" | sed 's/^/# /'; }
check_match "  and read its key exchange algorithms" '\(kex\) curve25519-sha256 ' "$(cat "$T/audit.out")"
# ssh-audit 2.5 warns of what it does not know (kex-strict-s-v00, the
# Terrapin mitigation, is newer than it); that is no finding.
check_absent "ssh-audit: no [fail] or [warn] line" \
	matching '\[(fail|warn)\]' grep -v -- '\[warn\] unknown algorithm$' "$T/audit.out"
check_eq "ssh-audit: compression disabled" "(gen) compression: disabled" \
	"$(grep '^(gen) compression' "$T/audit.out")"
# Its CVE lines carry no marker; 2.5 compares versions as strings
# ("0.10.6" < "0.7.2"), so libssh 0.10.6 gets 0.7.2's CVE-2016-0739.
matching '^\(cve\)' cat "$T/audit.out" | sed 's/^/# ssh-audit said (not counted): /'

# ---- what it refuses: a client with only a NIST curve, only MACs without ETM ----
# ssh says why at LogLevel INFO (SSH has ERROR); the gateway's key is known.
SSHI=(ssh -F /dev/null -i "$T/id" -p "$GWPORT" -o IdentitiesOnly=yes -o BatchMode=yes
      -o UserKnownHostsFile="$T/known_hosts" -o StrictHostKeyChecking=yes -o ConnectTimeout=60)
out=$(tmo "${SSHI[@]}" -o KexAlgorithms=ecdh-sha2-nistp256 m@127.0.0.1 echo ok 2>&1)
rc=$?
check "ssh offering only ecdh-sha2-nistp256 is refused" test "$rc" -ne 0 -a "$out" != ok
check_match "  at the key exchange" 'no matching key exchange method found' "$out"
check_eq "  (the same with curve25519-sha256 works)" ok \
	"$(tmo "${SSH[@]}" -o KexAlgorithms=curve25519-sha256 m@127.0.0.1 echo ok)"
# An AEAD cipher (ChaCha20-Poly1305, AES-GCM) needs no MAC: only with CTR
# does the MAC list count.
out=$(tmo "${SSHI[@]}" -o Ciphers=aes128-ctr -o MACs=hmac-sha1,hmac-sha2-256,hmac-sha2-512 \
	m@127.0.0.1 echo ok 2>&1)
rc=$?
check "ssh offering only hmac-sha1, hmac-sha2-256 and hmac-sha2-512 is refused" \
	test "$rc" -ne 0 -a "$out" != ok
check_match "  at the key exchange" 'no matching MAC found' "$out"
check_eq "  (the same with hmac-sha2-256-etm works)" ok \
	"$(tmo "${SSH[@]}" -o Ciphers=aes128-ctr -o MACs=hmac-sha2-256-etm@openssh.com m@127.0.0.1 echo ok)"

berth rm m >/dev/null || not_ok "rm m"
finish
