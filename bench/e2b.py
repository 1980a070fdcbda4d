#!/usr/bin/env python3
"""The E2B SDK's way to a first command against berth's own, on one template,
measured in the same run (issue 18's benchmark):

  (a) the real e2b SDK (build/node, pinned in web/package.json) with its
      self-hosted settings against berth-web over HTTPS (a CA of the
      bench's own, names to loopback for node alone, as t660):
      Sandbox.create(TEMPLATE) then commands.run('echo hi'), timed inside
      node from before the create to the output (node's start is not
      counted);
  (b) `berth create M --template TEMPLATE` then `berth exec M -- echo hi`
      (root's CLI), timed around the two commands.

Alternated, ROUNDS each; medians and the ratio (a)/(b) (goal <= 1.2x).

Usage: bench/run e2b [--rounds N] [--memory 256M]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

from berthbench import ROOT, hostd, summary, timed, web

DOMAIN = "berth.test"


def tls(dirname):
    """A CA and a certificate for DOMAIN and *.DOMAIN in DIRNAME."""
    def run(*args):
        subprocess.run(args, cwd=dirname, check=True, capture_output=True)
    run("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
        "-nodes", "-days", "1", "-subj", "/CN=bench CA", "-addext",
        "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign",
        "-keyout", "ca.key", "-out", "ca.pem")
    run("openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-subj", "/CN=" + DOMAIN, "-keyout", "key.pem", "-out", "req.csr")
    with open(os.path.join(dirname, "ext.cnf"), "w") as f:
        f.write(f"subjectAltName=DNS:{DOMAIN},DNS:*.{DOMAIN}\nextendedKeyUsage=serverAuth\n")
    run("openssl", "x509", "-req", "-in", "req.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "1", "-extfile", "ext.cnf", "-out", "cert.pem")
    os.chmod(os.path.join(dirname, "key.pem"), 0o600)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--memory", default="256M")
    a = ap.parse_args()
    if not os.path.exists(os.path.join(ROOT, "build/node/node_modules/e2b/package.json")):
        sys.exit("bench: the e2b SDK is not in build/node (sh deploy/install-deps.sh test)")

    import tempfile
    tdir = tempfile.mkdtemp(prefix="berth-e2b.", dir="/tmp")
    os.chmod(tdir, 0o755)
    tls(tdir)
    conf = (f"preview_domain = {DOMAIN}\ntls_cert = {tdir}/cert.pem\n"
            f"tls_key = {tdir}/key.pem\nidle_timeout = never\n")
    try:
        with hostd(conf) as h, web(h) as port:
            token = h.must("token", "create", "--name", "bench").stdout.strip()
            env = dict(os.environ, E2B_API_KEY="e2b_" + token[len("berth_"):],
                       E2B_DOMAIN=f"{DOMAIN}:{port}", E2B_TEST_DOMAIN=DOMAIN,
                       NODE_EXTRA_CA_CERTS=os.path.join(tdir, "ca.pem"))
            build = timed(lambda: h.must("template", "create", "tb", "--image", "tiny",
                                         "--memory", a.memory))
            print(f"# template tb ({a.memory}) built in {build:.0f} ms")
            sdk, cli, sdk_create = [], [], []
            for i in range(a.rounds):
                r = subprocess.run(["node", "--import", os.path.join(ROOT, "tests/e2b/loopback.mjs"),
                                    os.path.join(ROOT, "bench/e2b_first.mjs"), "tb"],
                                   env=env, capture_output=True, text=True)
                if r.returncode != 0:
                    sys.exit(f"bench: the SDK failed: {r.stderr[-800:]}")
                got = json.loads(r.stdout.strip().splitlines()[-1])
                sdk.append(got["total_ms"])
                sdk_create.append(got["create_ms"])
                m = f"b{i}"
                cli.append(timed(lambda: (h.must("create", m, "--template", "tb"),
                                          h.must("exec", m, "--", "echo", "hi"))))
                h.must("rm", m)
            print("(a) SDK: Sandbox.create + commands.run   " + summary(sdk))
            print("    of which Sandbox.create              " + summary(sdk_create))
            print("(b) berth create --template + berth exec " + summary(cli))
            ratio = statistics.median(sdk) / statistics.median(cli)
            print(f"ratio SDK / berth: {ratio:.2f}x (goal <= 1.2x)")
            h.must("template", "rm", "tb")
    finally:
        subprocess.run(["rm", "-rf", tdir])


if __name__ == "__main__":
    main()
