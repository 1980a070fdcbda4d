#!/usr/bin/env python3
"""Commands through hostd's HTTP route against the ways berth already had,
measured in the same run on one machine (the tiny image's dropbear, TCG):

  - `exec true` end to end: POST /v1/machines/NAME/exec (as a client in
    this process, and as a curl process per command), root's `berth exec`
    (the CLI's own SSH) and `ssh NAME@host true` through berth-sshgw
    (goal: HTTP <= 1.1x the faster of the last two);
  - time to the first output byte of `echo x`: the HTTP stream's first
    stdout line against `berth exec`'s first byte on its stdout.

hostd and the gateway keep their SSH sessions to the machine for the next
command (60 s); root's `berth exec` makes a new one each time, and the
gateway's client makes a new one to the gateway: those handshakes are
most of their numbers.

Usage: bench/run exec [--n N]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from berthbench import BIN, SSH, UnixHTTP, hostd, sshgw, summary, user_key


def http_exec(sock, argv):
    """(ms to the first stdout line or None, ms to the last line, the last line)."""
    t0 = time.monotonic()
    c = UnixHTTP(sock)
    c.request("POST", "/v1/machines/bench/exec", body=json.dumps({"argv": argv}),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        sys.exit(f"bench: exec answered {r.status}: {r.read()!r}")
    first = None
    last = None
    for raw in r:
        j = json.loads(raw)
        if "stdout" in j and first is None:
            first = (time.monotonic() - t0) * 1000.0
        last = j
    c.close()
    if last is None or last.get("exit") != 0:
        sys.exit(f"bench: exec ended with {last}")
    return first, (time.monotonic() - t0) * 1000.0


def proc_ms(cmd):
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    return (time.monotonic() - t0) * 1000.0


def first_byte_ms(cmd):
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    p.stdout.read(1)
    ms = (time.monotonic() - t0) * 1000.0
    p.stdout.read()
    p.wait()
    return ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=15)
    a = ap.parse_args()

    with hostd() as h:
        key = user_key(h)
        h.must("create", "bench")
        try:
            with sshgw(h) as (_, port):
                berth = [os.path.join(BIN, "berth"), "--state", h.state, "exec", "bench", "--"]
                via = SSH + ["-i", key, "-p", str(port), "bench@127.0.0.1"]
                curl = ["curl", "-sS", "--fail", "-N", "--unix-socket", h.sock, "-H",
                        "Content-Type: application/json", "-d", '{"argv": ["true"]}',
                        "http://berth/v1/machines/bench/exec"]
                # Warm every path once (the guest's first handshake is slower).
                http_exec(h.sock, ["true"])
                proc_ms(berth + ["true"])
                proc_ms(via + ["true"])
                ht, hc, be, gw_ms = [], [], [], []
                for _ in range(a.n):
                    ht.append(http_exec(h.sock, ["true"])[1])
                    hc.append(proc_ms(curl))
                    be.append(proc_ms(berth + ["true"]))
                    gw_ms.append(proc_ms(via + ["true"]))
                print("# one machine, the tiny image's dropbear under TCG")
                print("exec true, HTTP (in-process client)  " + summary(ht))
                print("exec true, HTTP (curl per command)   " + summary(hc))
                print("exec true, berth exec (root, SSH)    " + summary(be))
                print("exec true, ssh NAME@host (gateway)   " + summary(gw_ms))
                best = min(statistics.median(be), statistics.median(gw_ms))
                print(f"ratio HTTP/faster of the two: in-process {statistics.median(ht) / best:.2f}, "
                      f"curl {statistics.median(hc) / best:.2f} (goal <= 1.1)")
                hf, bf = [], []
                for _ in range(a.n):
                    hf.append(http_exec(h.sock, ["echo", "x"])[0])
                    bf.append(first_byte_ms(berth + ["echo", "x"]))
                print("first output byte, HTTP stream       " + summary(hf))
                print("first output byte, berth exec        " + summary(bf))
                print(f"ratio HTTP/berth exec: {statistics.median(hf) / statistics.median(bf):.2f}")
        finally:
            h.berth("rm", "bench")


if __name__ == "__main__":
    main()
