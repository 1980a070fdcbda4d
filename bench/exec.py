#!/usr/bin/env python3
"""Commands through hostd's HTTP route against the ways berth already had,
measured in the same run on one machine (the tiny image's dropbear, TCG):

  - `exec true` end to end: POST /v1/machines/NAME/exec over HTTP through
    berth-web with a token (a client in this process, a new connection
    per command; and a curl process per command), the same on hostd's
    UNIX socket, root's `berth exec` (the CLI's own SSH) and `ssh
    NAME@host true` through berth-sshgw (goal: HTTP through berth-web
    <= 1.1x the faster of the last two);
  - time to the first output byte of `echo x`: the HTTP stream's first
    stdout line through berth-web against `berth exec`'s first byte on its
    stdout.

hostd and the gateway keep their SSH sessions to the machine for the next
command (60 s); root's `berth exec` makes a new one each time, and the
gateway's client makes a new one to the gateway: those handshakes are
most of their numbers.

Usage: bench/run exec [--n N]
"""
import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import time

from berthbench import BIN, SSH, UnixHTTP, hostd, sshgw, summary, user_key, web


def http_exec(connect, argv, token=None):
    """(ms to the first stdout line or None, ms to the last line): ARGV run
    over a new connection CONNECT() makes, with TOKEN when not None."""
    t0 = time.monotonic()
    c = connect()
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = "Bearer " + token
    c.request("POST", "/v1/machines/bench/exec", body=json.dumps({"argv": argv}),
              headers=headers)
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
        token = json.loads(h.must("token", "create", "--json").stdout)["token"]
        try:
            with sshgw(h) as (_, port), web(h) as wport:
                def tcp():
                    return http.client.HTTPConnection("127.0.0.1", wport)

                def unix():
                    return UnixHTTP(h.sock)
                berth = [os.path.join(BIN, "berth"), "--state", h.state, "exec", "bench", "--"]
                via = SSH + ["-i", key, "-p", str(port), "bench@127.0.0.1"]
                curl = ["curl", "-sS", "--fail", "-N", "-H", "Authorization: Bearer " + token,
                        "-H", "Content-Type: application/json", "-d", '{"argv": ["true"]}',
                        f"http://127.0.0.1:{wport}/v1/machines/bench/exec"]
                # Warm every path once (the guest's first handshake is slower).
                http_exec(tcp, ["true"], token)
                proc_ms(berth + ["true"])
                proc_ms(via + ["true"])
                ht, hc, be, gw_ms = [], [], [], []
                for _ in range(a.n):
                    ht.append(http_exec(tcp, ["true"], token)[1])
                    hc.append(proc_ms(curl))
                    be.append(proc_ms(berth + ["true"]))
                    gw_ms.append(proc_ms(via + ["true"]))
                print("# one machine, the tiny image's dropbear under TCG")
                print("exec true, HTTP via berth-web       " + summary(ht))
                print("exec true, HTTP via berth-web, curl " + summary(hc))
                print("exec true, berth exec (root, SSH)    " + summary(be))
                print("exec true, ssh NAME@host (gateway)   " + summary(gw_ms))
                best = min(statistics.median(be), statistics.median(gw_ms))
                print(f"ratio HTTP/faster of the two: in-process {statistics.median(ht) / best:.2f}, "
                      f"curl {statistics.median(hc) / best:.2f} (goal <= 1.1)")
                # berth-web's hop: the same command through it and on hostd's
                # socket, alternately, each after the same pause (a command
                # run right after another takes longer: its kept session is
                # still being given back).
                hw, hu = [], []
                for _ in range(a.n):
                    time.sleep(0.3)
                    hw.append(http_exec(tcp, ["true"], token)[1])
                    time.sleep(0.3)
                    hu.append(http_exec(unix, ["true"])[1])
                print("exec true, HTTP via berth-web       " + summary(hw) + " (paced)")
                print("exec true, hostd's UNIX socket      " + summary(hu) + " (paced)")
                print(f"berth-web's hop: {statistics.median(hw) - statistics.median(hu):+.2f} ms "
                      f"(via berth-web less hostd's socket)")
                hf, bf = [], []
                for _ in range(a.n):
                    hf.append(http_exec(tcp, ["echo", "x"], token)[0])
                    bf.append(first_byte_ms(berth + ["echo", "x"]))
                print("first output byte, HTTP stream       " + summary(hf))
                print("first output byte, berth exec        " + summary(bf))
                print(f"ratio HTTP/berth exec: {statistics.median(hf) / statistics.median(bf):.2f}")
        finally:
            h.berth("rm", "bench")


if __name__ == "__main__":
    main()
