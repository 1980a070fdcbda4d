#!/usr/bin/env python3
"""The credential broker's cost: a guest's calls through it (plain HTTP to
berth-web on the gateway; berth-web asks hostd over webctl.sock, then
HTTPS to the upstream with the secret attached) against the same calls
made directly to the upstream (plain HTTP from the guest, the key in the
request), interleaved in one run, from the same client in the guest
(netprobe http, the tiny image):

  - first byte: a server-sent events answer's first event (the time from
    the connect to the answer's first body byte), and a small answer's
    head (a round trip);
  - throughput: 64 MiB with a Content-Length, and 64 MiB chunked.

The upstream is tests/integration/broker_upstream.py in a network
namespace of the benchmark's own (198.51.100.0/24, /32 routes only), with
a CA made here; the broker's leg to it is HTTPS (verified), the direct one
plain HTTP: the ratio includes the TLS the broker does on the host, which
a guest calling directly would do itself (under TCG, much slower).

Usage: bench/run broker [--rounds N] [--n N] [--mib M]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

from berthbench import ROOT, hostd, web

NS = f"bbr{os.getpid()}"
VH, VN = f"vbr{os.getpid()}", f"vbq{os.getpid()}"
HERE, PEER, UP = "198.51.100.201", "198.51.100.202", "198.51.100.210"
KEY = "sk-bench-" + os.urandom(8).hex()


def sh(*argv, check=True):
    return subprocess.run(argv, check=check, capture_output=True, text=True)


def certs(d):
    def ossl(*a):
        sh("openssl", *a)
    ossl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{d}/ca.key", "-out",
         f"{d}/ca.pem", "-days", "2", "-subj", "/CN=berth bench CA")
    ossl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{d}/up.key", "-out", f"{d}/up.csr",
         "-subj", f"/CN={UP}")
    with open(f"{d}/up.ext", "w") as f:
        f.write(f"subjectAltName=IP:{UP}\n")
    ossl("x509", "-req", "-in", f"{d}/up.csr", "-CA", f"{d}/ca.pem", "-CAkey", f"{d}/ca.key",
         "-CAcreateserial", "-out", f"{d}/up.pem", "-days", "2", "-extfile", f"{d}/up.ext")
    os.chmod(f"{d}/ca.pem", 0o644)


def netns_up(d):
    sh("ip", "netns", "add", NS)
    sh("ip", "link", "add", VH, "type", "veth", "peer", "name", VN, "netns", NS)
    sh("ip", "addr", "add", HERE, "peer", PEER + "/32", "dev", VH)
    sh("ip", "link", "set", VH, "up")
    sh("ip", "-n", NS, "addr", "add", PEER, "peer", HERE + "/32", "dev", VN)
    sh("ip", "-n", NS, "link", "set", VN, "up")
    sh("ip", "-n", NS, "link", "set", "lo", "up")
    sh("ip", "-n", NS, "addr", "add", UP + "/32", "dev", "lo")
    sh("ip", "-n", NS, "route", "add", "default", "via", HERE, "dev", VN)
    sh("ip", "route", "add", UP + "/32", "via", PEER, "dev", VH)
    p = subprocess.Popen(["ip", "netns", "exec", NS, "python3",
                          os.path.join(ROOT, "tests/integration/broker_upstream.py"),
                          "--listen", f"{UP}:8443", "--plain", f"{UP}:8080",
                          "--cert", f"{d}/up.pem", "--key", f"{d}/up.key",
                          "--header", "x-api-key", "--value", KEY],
                         stdout=subprocess.PIPE, text=True)
    if p.stdout.readline().strip() != "ready":
        sys.exit("bench: the upstream did not start")
    return p


def netns_down(p):
    if p:
        p.kill()
        p.wait()
    sh("ip", "link", "delete", VH, check=False)
    sh("ip", "netns", "delete", NS, check=False)


def probes(h, target, path, n, extra=""):
    """N netprobe http runs in the guest: [(status, head_us, body_us, mbit)]."""
    cmd = (f"for i in $(seq {n}); do netprobe http {target} '{path}' {extra}; done")
    out = h.must("exec", "bb", "--", "sh", "-c", cmd).stdout.split("\n")
    res = []
    for line in out:
        f = line.split()
        if len(f) >= 12 and f[0] == "status":
            res.append((int(f[1]), float(f[3]), float(f[5]), float(f[11])))
    if len(res) != n or any(r[0] != 200 for r in res):
        sys.exit(f"bench: {target} {path}: {out[:3]}")
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--n", type=int, default=10, help="first-byte probes per round and path")
    ap.add_argument("--mib", type=int, default=64)
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="berth-bb.", dir="/tmp")
    os.chmod(d, 0o711)
    srv = None
    try:
        certs(d)
        srv = netns_up(d)
        conf = (f"guest_network = 10.87.0.0/24\nbroker_ca_file = {d}/ca.pem\n")
        with hostd(conf) as h, web(h):
            h.must("create", "bb")
            h.must("secret", "add", "up", "--url", f"https://{UP}:8443/v1",
                   "--header", f"x-api-key: {KEY}")
            h.must("set", "bb", "--secret", "up")
            gw = "10.87.0.1"
            broker = f"{gw} 948"   # broker_port's default
            direct = f"{UP} 8080"
            hdr = f"'x-api-key: {KEY}'"
            nbytes = a.mib << 20
            res = {m: {"event": [], "head": [], "bytes": [], "stream": []}
                   for m in ("broker", "direct")}
            for r in range(a.rounds):
                for mode in ("broker", "direct") if r % 2 == 0 else ("direct", "broker"):
                    tgt, pre, ex = ((broker, "/up", "") if mode == "broker"
                                    else (direct, "/v1", hdr))
                    ev = probes(h, tgt, pre + "/sse?n=1&gap=0", a.n, ex)
                    res[mode]["event"] += [x[2] / 1000 for x in ev]
                    hd = probes(h, tgt, pre + "/echo", a.n, ex)
                    res[mode]["head"] += [x[1] / 1000 for x in hd]
                    res[mode]["bytes"] += [x[3] for x in probes(h, tgt, pre + f"/bytes?n={nbytes}",
                                                                  1, ex)]
                    res[mode]["stream"] += [x[3] for x in probes(h, tgt, pre +
                                                                   f"/stream?n={nbytes}", 1, ex)]
            log = h.must("--json", "secret", "log", "--limit", "10000").stdout
            calls = log.count('"status": 200')
            h.must("rm", "bb")
        med = {m: {k: statistics.median(v) for k, v in res[m].items()} for m in res}
        print(f"# {a.rounds} rounds, broker and direct interleaved; {a.n} first-byte probes "
              f"a round and path; {a.mib} MiB transfers; {calls} calls through the broker "
              f"logged")
        for k, what, unit in (("event", "first event of a stream (connect -> first byte)", "ms"),
                              ("head", "small answer's head (connect -> first byte)", "ms"),
                              ("bytes", f"{a.mib} MiB with Content-Length", "Mbit/s"),
                              ("stream", f"{a.mib} MiB chunked", "Mbit/s")):
            b, dr = med["broker"][k], med["direct"][k]
            print(f"{what:50s} broker {b:9.2f} {unit:6s} direct {dr:9.2f} {unit:6s} "
                  f"ratio {b / dr:5.2f}x")
    finally:
        netns_down(srv)
        subprocess.run(["rm", "-rf", d])


if __name__ == "__main__":
    main()
