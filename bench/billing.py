#!/usr/bin/env python3
"""Billing and listing at scale: 10,000 machines in hostd's database.

- The machine list (GET /v1/machines, what `berth ls` and the dashboard
  call) and `berth ls` itself with N machines, against a baseline measured
  in the same run: GET /v1/info, an API round trip that reads no machine.
  Goal: the list call under 50 ms.
- GET /v1/usage (every machine's cost) with the same machines.
- hostd's memory per machine: its RSS (VmRSS) with one machine, then with
  N, after each was listed and the idle policy and storage sampler have
  been over them.  Goal: under 10 KiB per machine.
- Ledger writes per second: build/default/bench/ledger_bench (hostd's own
  database code against bare durable SQLite commits on the same disk).

The N machines are rows added to the running hostd's database (hostd's
reconciliation has run already, so it defines no domain for them), each
with a real qcow2 volume: a hard link to the one real machine's overlay,
so that listing them reads a real file's size and header.

Usage: bench/run billing [--machines N] [--calls N]
"""
import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import time
import uuid

from berthbench import ROOT, hostd, rss_kib, summary, timed


def hostd_pid(state):
    with open(os.path.join(state, "hostd.pid")) as f:
        return int(f.read())


def add_machines(state, n):
    db = sqlite3.connect(os.path.join(state, "berth.db"), timeout=30)
    seed = db.execute("SELECT id, image, volume, memory, disk FROM machines WHERE name='seed'"
                      ).fetchone()
    vols = os.path.join(state, "volumes")
    src = os.path.join(vols, seed[2] + ".qcow2")
    now = int(time.time())
    rows, ledger, samples = [], [], []
    for i in range(n):
        mid = str(uuid.uuid4())
        vol = "m-" + mid
        os.link(src, os.path.join(vols, vol + ".qcow2"))
        rows.append((mid, "root", f"b{i:05d}", seed[1], 1, seed[3], seed[4], "stopped", vol,
                     "52:54:00:%02x:%02x:%02x" % (i >> 16 & 255, i >> 8 & 255, i & 255),
                     0, now, now))
        ledger.append((mid, "root", f"b{i:05d}", "stopped", 1, seed[3], now))
        samples.append((mid, now, 1 << 20))
    with db:
        db.executemany("INSERT INTO machines(id, owner, name, image, vcpus, memory, disk, state,"
                       " volume, mac, ssh_port, created, state_since)"
                       " VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
        db.executemany("INSERT INTO ledger(machine_id, owner, name, state, vcpus, memory, start)"
                       " VALUES(?,?,?,?,?,?,?)", ledger)
        db.executemany("INSERT INTO storage_samples(machine_id, t, bytes) VALUES(?,?,?)",
                       samples)
    db.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--machines", type=int, default=10000)
    ap.add_argument("--calls", type=int, default=20)
    a = ap.parse_args()

    with hostd() as h:
        h.must("create", "seed", "--no-start")
        pid = hostd_pid(h.state)
        for _ in range(3):
            h.must_call("GET", "/v1/machines")
        time.sleep(2)
        rss1 = rss_kib(pid)
        add_machines(h.state, a.machines)
        print(f"# {a.machines} machines added")

        info = [timed(lambda: h.must_call("GET", "/v1/info")) for _ in range(a.calls)]
        lst, server = [], []
        for _ in range(a.calls):
            t = timed(lambda: server.append(h.must_call("GET", "/v1/machines")[1]))
            lst.append(t)
        body, _, _ = h.must_call("GET", "/v1/machines")
        got = len(body["machines"])
        if got != a.machines + 1:
            raise SystemExit(f"bench: the list has {got} machines, not {a.machines + 1}")
        # The call alone, as an HTTP client that does not decode it sees it.
        curl = []
        for _ in range(a.calls):
            out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{time_total}",
                                  "--unix-socket", h.sock, "http://berth/v1/machines"],
                                 capture_output=True, text=True, check=True).stdout
            curl.append(float(out) * 1000.0)
        ls = [timed(lambda: h.must("ls")) for _ in range(max(3, a.calls // 4))]
        usage = [timed(lambda: h.must_call("GET", "/v1/usage")) for _ in range(max(3, a.calls // 4))]
        print("GET /v1/info (baseline)       " + summary(info))
        print("GET /v1/machines              " + summary(lst))
        print("  of which hostd's own        " + summary(server))
        print("  curl, not decoding it       " + summary(curl))
        print("berth ls (whole command)      " + summary(ls))
        print("GET /v1/usage                 " + summary(usage))
        ml, mi, mc = statistics.median(lst), statistics.median(info), statistics.median(curl)
        print(f"list of {got} machines ({len(json.dumps(body)) / 1e6:.1f} MB): "
              f"{mc:.1f} ms by curl, {ml:.1f} ms decoded in Python (goal < 50 ms); "
              f"ratio list / info round trip: {ml / mi:.1f}x")

        # Let the idle policy and the storage sampler go over them too.
        time.sleep(3)
        for _ in range(3):
            h.must_call("GET", "/v1/machines")
        rss2 = rss_kib(pid)
        per = (rss2 - rss1) * 1024 / a.machines
        print(f"hostd RSS: {rss1} KiB with 1 machine, {rss2} KiB with {got}: "
              f"{per:.0f} bytes per machine (goal < 10 KiB)")

    lb = os.path.join(ROOT, "build", "default", "bench", "ledger_bench")
    d = subprocess.run(["mktemp", "-d", "/var/tmp/berth-ledger.XXXXXX"], capture_output=True,
                       text=True, check=True).stdout.strip()
    try:
        subprocess.run([lb, d, "3", "5", "100"], check=True)
    finally:
        subprocess.run(["rm", "-rf", d])


if __name__ == "__main__":
    main()
