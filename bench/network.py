#!/usr/bin/env python3
"""The network boundary's cost: a guest's TCP to a test host through berth's
filtering (network = routed, the machine's egress chain, conntrack zones)
against the same path with the filtering off (a table that only
masquerades), interleaved in one run; and the time from `berth set
--egress` to the rule holding (the API call: the rules are committed before
it answers) for policies of 1, 32 and 256 rules.

The test host is a network namespace of the benchmark's own (198.51.100.0/24,
/32 routes only), with a TCP sink and an echo server; nothing leaves the
machine.  The guest runs netprobe (the tiny image): `send` for throughput,
`rtt` for round trips.

Usage: bench/run network [--rounds N] [--mib M]
"""
import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import time

from berthbench import hostd

NS = f"bnb{os.getpid()}"
VH, VN = f"vbh{os.getpid()}", f"vbn{os.getpid()}"
PEER, SINK = "198.51.100.2", "198.51.100.10"

SERVER = r'''
import socketserver, threading
class Sink(socketserver.BaseRequestHandler):
    def handle(self):
        while self.request.recv(1 << 20): pass
class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        while True:
            d = self.request.recv(4096)
            if not d: return
            self.request.sendall(d)
class T(socketserver.ThreadingTCPServer):
    allow_reuse_address = True; daemon_threads = True
for port, h in ((5001, Sink), (5002, Echo)):
    threading.Thread(target=T(("0.0.0.0", port), h).serve_forever, daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
'''


def sh(*argv, check=True):
    return subprocess.run(argv, check=check, capture_output=True, text=True)


def netns_up():
    sh("ip", "netns", "add", NS)
    sh("ip", "link", "add", VH, "type", "veth", "peer", "name", VN, "netns", NS)
    sh("ip", "addr", "add", "198.51.100.1", "peer", PEER + "/32", "dev", VH)
    sh("ip", "link", "set", VH, "up")
    sh("ip", "-n", NS, "addr", "add", PEER, "peer", "198.51.100.1/32", "dev", VN)
    sh("ip", "-n", NS, "link", "set", VN, "up")
    sh("ip", "-n", NS, "link", "set", "lo", "up")
    sh("ip", "-n", NS, "addr", "add", SINK + "/32", "dev", "lo")
    sh("ip", "-n", NS, "route", "add", "default", "via", "198.51.100.1", "dev", VN)
    sh("ip", "route", "add", SINK + "/32", "via", PEER, "dev", VH)
    p = subprocess.Popen(["ip", "netns", "exec", NS, "python3", "-c", SERVER],
                         stdout=subprocess.PIPE, text=True)
    p.stdout.readline()
    return p


def netns_down(p):
    if p:
        p.kill()
    sh("ip", "link", "delete", VH, check=False)
    sh("ip", "netns", "delete", NS, check=False)


def table_of(h):
    inst = sqlite3.connect(os.path.join(h.state, "berth.db")).execute(
        "SELECT value FROM meta WHERE key = 'instance'").fetchone()[0]
    return f"berth-{inst}"


def unfiltered(table, net):
    """The same table name with only the masquerade: no filtering."""
    return (f"add table inet {table}\ndelete table inet {table}\n"
            f"table inet {table} {{\n\tchain nat {{\n"
            f"\t\ttype nat hook postrouting priority srcnat; policy accept;\n"
            f"\t\tip saddr {net} oifname != \"bt*\" masquerade\n\t}}\n}}\n")


def nft_load(text):
    subprocess.run(["nft", "-f", "-"], input=text, text=True, check=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--mib", type=int, default=256)
    a = ap.parse_args()
    srv = None
    try:
        srv = netns_up()
        with hostd("guest_network = 10.87.0.0/24\n") as h:
            h.must("create", "nb")
            table = table_of(h)
            saved = sh("nft", "list", "table", "inet", table).stdout
            saved = f"add table inet {table}\ndelete table inet {table}\n" + saved
            res = {"berth": {"mbit": [], "rtt": []}, "off": {"mbit": [], "rtt": []}}
            for r in range(a.rounds):
                for mode in ("berth", "off") if r % 2 == 0 else ("off", "berth"):
                    nft_load(saved if mode == "berth" else unfiltered(table, "10.87.0.0/24"))
                    out = h.must("exec", "nb", "--", "netprobe", "send", SINK, "5001",
                                 str(a.mib)).stdout
                    mbit = float(out.split(":")[-1].split()[0])
                    out = h.must("exec", "nb", "--", "netprobe", "rtt", SINK, "5002",
                                 "200").stdout
                    med = float(out.split("median")[1].split()[0])
                    res[mode]["mbit"].append(mbit)
                    res[mode]["rtt"].append(med)
                    print(f"round {r + 1} {mode:5s}: {mbit:8.1f} Mbit/s, rtt median {med:6.0f} us")
            nft_load(saved)
            b, o = res["berth"], res["off"]
            tput = statistics.median(b["mbit"]) / statistics.median(o["mbit"])
            rtt = statistics.median(o["rtt"]) / statistics.median(b["rtt"])
            print(f"throughput, filtered / unfiltered: {tput:.2f} (goal >= 0.95); medians "
                  f"{statistics.median(b['mbit']):.1f} / {statistics.median(o['mbit']):.1f} Mbit/s")
            print(f"round trip, unfiltered / filtered: {rtt:.2f} (goal >= 0.95); medians "
                  f"{statistics.median(b['rtt']):.0f} / {statistics.median(o['rtt']):.0f} us")
            # berth set --egress: the rules hold when the call returns.
            for n in (1, 32, 256):
                rules = ",".join(f"198.51.{100 + i // 250}.{i % 250}:{1000 + i}" for i in range(n))
                times = []
                for _ in range(5):
                    for pol in (rules, "open"):
                        _, total, ext = h.must_call("PATCH", "/v1/machines/nb", {"egress": pol})
                        if pol != "open":
                            times.append(total)
                print(f"berth set --egress with {n:3d} rules: median {statistics.median(times):6.1f} ms"
                      f" (max {max(times):.1f}; goal < 1000 ms)")
            h.must("rm", "nb")
    finally:
        netns_down(srv)


if __name__ == "__main__":
    main()
