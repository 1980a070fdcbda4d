"""What the dashboard costs hostd.

1. The same call, GET /v1/info, over the UNIX socket (the CLI's way) and
   through berth-web with a bearer token (the dashboard's way): the ratio
   is what the token check, TCP and berth-web's hop to hostd add.  A new
   connection per call for both.
2. One dashboard refresh, GET /v1/machines + GET /v1/usage over HTTP, as the
   number of machines grows (stopped machines inserted straight into
   SQLite with a ledger row and a storage sample each), against the refresh
   with no machine, measured in the same run.

Prints medians of the client's round trip and of hostd's own time
(Server-Timing total).  Usage: python3 bench/dashboard.py [N ...]
(default 0 100 1000 10000)."""
import contextlib
import http.client
import json
import os
import sqlite3
import statistics
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from berthbench import hostd, web  # noqa: E402

REPS = 30



@contextlib.contextmanager
def hostd_http():
    """A hostd with berth-web on a free port (h.port), no image."""
    with hostd(conf="log_level = warn\n", tiny=False) as h, web(h) as port:
        h.port = port
        yield h


def http_call(port, token, path):
    """(client ms, hostd ms) of one GET over a new TCP connection."""
    t0 = time.monotonic()
    c = http.client.HTTPConnection("127.0.0.1", port)
    c.request("GET", path, headers={"Authorization": "Bearer " + token})
    r = c.getresponse()
    body = r.read()
    ms = (time.monotonic() - t0) * 1000.0
    if r.status != 200:
        sys.exit(f"bench: GET {path}: {r.status} {body[:200]!r}")
    timing = dict(p.strip().split(";dur=") for p in r.getheader("Server-Timing").split(","))
    c.close()
    return ms, float(timing["total"])


def unix_call(h, path):
    t0 = time.monotonic()
    st, _, total, _ = h.call("GET", path)
    ms = (time.monotonic() - t0) * 1000.0
    if st != 200:
        sys.exit(f"bench: GET {path}: {st}")
    return ms, total


def med(samples):
    return (statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples))


def add_machines(state, start, n):
    """Insert machines START..START+N-1 (stopped, one ledger row and one
    storage sample each) as hostd's schema has them."""
    db = sqlite3.connect(os.path.join(state, "berth.db"), timeout=30)
    now = int(time.time())
    rows, ledger, samples = [], [], []
    for i in range(start, start + n):
        mid = str(uuid.uuid4())
        name = f"m{i}"
        rows.append((mid, "root", name, "tiny", 1, 512 << 20, 256 << 20, "stopped",
                     "vol-" + name, "52:54:00:%02x:%02x:%02x" % (i >> 16 & 255, i >> 8 & 255, i & 255),
                     0, now - 3600, now - 3600))
        ledger.append((mid, "root", name, "stopped", 1, 512 << 20, now - 3600))
        samples.append((mid, now - 3600, 1 << 20))
    with db:
        db.executemany("INSERT INTO machines(id, owner, name, image, vcpus, memory, disk, state,"
                       " volume, mac, ssh_port, created, state_since)"
                       " VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
        db.executemany("INSERT INTO ledger(machine_id, owner, name, state, vcpus, memory, start,"
                       " end) VALUES(?,?,?,?,?,?,?,NULL)", ledger)
        db.executemany("INSERT INTO storage_samples(machine_id, t, bytes) VALUES(?,?,?)", samples)
    db.close()


def main():
    counts = [int(a) for a in sys.argv[1:]] or [0, 100, 1000, 10000]
    with hostd_http() as h:
        token = json.loads(h.must("token", "create", "--json").stdout)["token"]
        print(f"# {os.cpu_count()} cores, {REPS} calls each, a new connection per call")
        unix = med([unix_call(h, "/v1/info") for _ in range(REPS)])
        web = med([http_call(h.port, token, "/v1/info") for _ in range(REPS)])
        print(f"GET /v1/info  UNIX socket        {unix[0]:7.2f} ms (hostd {unix[1]:.3f} ms)")
        print(f"GET /v1/info  HTTP + token       {web[0]:7.2f} ms (hostd {web[1]:.3f} ms)"
              f"  ratio {web[0] / unix[0]:.2f}x (hostd {web[1] / unix[1]:.2f}x)")
        have, base = 0, None
        for n in sorted(counts):
            add_machines(h.state, have, n - have)
            have = n
            reps = REPS if n <= 1000 else 5
            ml = med([http_call(h.port, token, "/v1/machines") for _ in range(reps)])
            us = med([http_call(h.port, token, "/v1/usage") for _ in range(reps)])
            total = ml[0] + us[0]
            if base is None:
                base = total
            print(f"{n:6d} machines: list {ml[0]:8.1f} ms (hostd {ml[1]:8.1f}), usage "
                  f"{us[0]:8.1f} ms (hostd {us[1]:8.1f}); refresh {total:8.1f} ms, "
                  f"{total / base:7.1f}x the empty refresh")


if __name__ == "__main__":
    main()
