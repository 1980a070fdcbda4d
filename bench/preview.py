#!/usr/bin/env python3
"""Previews (berth-web to a machine's port) against the ways to the same
port without them, measured in the same run on one machine (the tiny
image's webserve on port 8080, TCG):

  - `ssh -L` through berth-sshgw (`ssh -L P:127.0.0.1:8080 NAME@host`: the
    gateway, then the machine's dropbear opens the port inside it);
  - `ssh -L` straight to the machine's dropbear with the gateway key (one
    SSH hop, root's way);
  - direct: root's own TCP connection to the guest's address (no berth at
    all: the floor).

Measured: throughput of one GET of --mib MiB (goal: preview >= 0.9x ssh -L);
the time of a small GET on a kept connection, median and 99th percentile
(goal: < 1 ms added); a new connection per GET (preview: hostd's connect,
the cookie checked, on each); and --conns concurrent keep-alive
connections (1,000), each making --rounds requests, all open at once.

Usage: bench/run preview [--mib N] [--n N] [--conns N] [--rounds N]
"""
import argparse
import asyncio
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import time

from berthbench import BIN, SSH, free_port, hostd, rss_kib, sshgw, user_key, web

PORT = 8080


def wait_port(port, t=20):
    for _ in range(int(t * 20)):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    sys.exit(f"bench: nothing on 127.0.0.1:{port}")


def throughput(addr, host, mib):
    """MB/s of one GET of MIB MiB (curl, to /dev/null)."""
    url = f"http://{addr}/bytes?n={mib << 20}"
    r = subprocess.run(["curl", "-sS", "--fail", "-o", "/dev/null", "-w", "%{speed_download}",
                        "-H", f"Host: {host}", url], capture_output=True, text=True, check=True)
    return float(r.stdout) / 1e6


def latencies(addr, host, n, cookie=None, fresh=False):
    """Milliseconds of N small GETs, on one kept connection (or a new one
    each when FRESH)."""
    h, p = addr.split(":")
    hdrs = {"Host": host}
    if cookie:
        hdrs["Cookie"] = cookie
    c = http.client.HTTPConnection(h, int(p), timeout=60)
    xs = []
    for i in range(n + 20):
        if fresh:
            c.close()
            c = http.client.HTTPConnection(h, int(p), timeout=60)
        t0 = time.perf_counter()
        c.request("GET", "/", headers=hdrs)
        r = c.getresponse()
        body = r.read()
        if r.status != 200 or b"hello from" not in body:
            sys.exit(f"bench: GET / via {addr} answered {r.status}: {body[:200]!r}")
        if i >= 20:  # warm-up
            xs.append((time.perf_counter() - t0) * 1000.0)
    c.close()
    return xs


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def lat_line(name, xs):
    return (f"{name:34s} median {statistics.median(xs):6.3f} ms  p99 {pct(xs, 0.99):6.3f}  "
            f"(n={len(xs)})")


async def one_conn(i, addr, port, host, rounds, opened, go, lat, src):
    """A keep-alive connection to ADDR:PORT from SRC (None: any) making
    ROUNDS GETs: one, then (once every connection is open: GO) the rest."""
    r, w = await asyncio.open_connection(addr, port, local_addr=(src, 0) if src else None)
    req = f"GET / HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()

    async def get():
        t0 = time.perf_counter()
        w.write(req)
        head = await r.readuntil(b"\r\n\r\n")
        n = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                n = int(line.split(b":")[1])
        body = await r.readexactly(n)
        if not head.startswith(b"HTTP/1.1 200") or b"hello from" not in body:
            raise RuntimeError(head[:100])
        lat.append((time.perf_counter() - t0) * 1000.0)

    await get()
    opened.append(i)
    await go.wait()
    for _ in range(rounds - 1):
        await get()
    w.close()


async def many(addr, port, host, conns, rounds, web_pid):
    """CONNS connections to ADDR:PORT held open together: (seconds to open
    them all, seconds for the rest of the rounds, latencies, berth-web's
    peak RSS KiB and threads; 0 without WEB_PID)."""
    opened, lat = [], []
    go = asyncio.Event()
    # berth-web is given 256 connections per client address (--max-per-addr):
    # the clients come from four loopback addresses, as many clients would.
    srcs = ["127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4"] if web_pid else [None]
    t0 = time.monotonic()
    tasks = []
    for i in range(conns):
        tasks.append(asyncio.create_task(one_conn(i, addr, port, host, rounds, opened, go, lat,
                                                  srcs[i % len(srcs)])))
        if i % 50 == 49:
            await asyncio.sleep(0.05)
    while len(opened) < conns:
        for t in tasks:
            if t.done() and t.exception():
                raise t.exception()
        await asyncio.sleep(0.05)
    t_open = time.monotonic() - t0
    rss = threads = 0
    if web_pid:
        rss = rss_kib(web_pid)
        with open(f"/proc/{web_pid}/status") as f:
            threads = int([l for l in f if l.startswith("Threads:")][0].split()[1])
    t1 = time.monotonic()
    go.set()
    await asyncio.gather(*tasks)
    return t_open, time.monotonic() - t1, lat, rss, threads


def web_pid(port):
    out = subprocess.run(["ss", "-Htlnp", f"sport = :{port}"], capture_output=True,
                         text=True).stdout
    return int(out.split("pid=")[1].split(",")[0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--conns", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--parts", default="throughput,latency,fresh,many",
                    help="which measures, comma-separated")
    a = ap.parse_args()
    parts = a.parts.split(",")

    with hostd("idle_timeout = never\n") as h:
        key = user_key(h)
        h.must("create", "bench", "--memory", "1G")
        h.must("exec", "bench", "--", "sh", "-c", f"(webserve {PORT} >/dev/null 2>&1 &)")
        m = json.loads(h.must("show", "bench", "--json").stdout)
        guest = m["ssh"]["host"]
        h.must("preview", "bench", str(PORT), "--public")
        procs = []
        try:
            # 1,000 connections from four loopback addresses: 256 each
            # (berth-web's default share is 64 an address).
            with sshgw(h) as (_, gwport), web(h, "--max-per-addr", "256") as wport:
                wpid = web_pid(wport)
                host = f"{PORT}-bench-root.localhost:{wport}"
                lgw, ldir = free_port(), free_port()
                procs.append(subprocess.Popen(
                    SSH + ["-i", key, "-p", str(gwport), "-N", "-L",
                           f"127.0.0.1:{lgw}:127.0.0.1:{PORT}", "bench@127.0.0.1"]))
                procs.append(subprocess.Popen(
                    SSH + ["-i", os.path.join(h.state, "keys", "gateway"), "-N", "-L",
                           f"127.0.0.1:{ldir}:127.0.0.1:{PORT}", f"root@{guest}"]))
                wait_port(lgw)
                wait_port(ldir)
                paths = [("preview (berth-web)", f"127.0.0.1:{wport}", host),
                         ("ssh -L via berth-sshgw", f"127.0.0.1:{lgw}", "x"),
                         ("ssh -L to the machine", f"127.0.0.1:{ldir}", "x"),
                         ("direct to the guest (root)", f"{guest}:{PORT}", "x")]
                print(f"# one machine (tiny, TCG, 1 vCPU), webserve on port {PORT}; "
                      f"{os.cpu_count()} host cores")
                tp = {}
                for name, addr, hh in paths if "throughput" in parts else []:
                    throughput(addr, hh, 16)  # warm
                    tp[name] = statistics.median(throughput(addr, hh, a.mib)
                                                 for _ in range(a.runs))
                    print(f"{name:34s} {tp[name]:8.1f} MB/s  (GET of {a.mib} MiB, median "
                          f"of {a.runs})")
                if tp:
                    base = tp["ssh -L via berth-sshgw"]
                    print(f"ratio preview / ssh -L via the gateway: "
                          f"{tp['preview (berth-web)'] / base:.2f}; / ssh -L to the machine: "
                          f"{tp['preview (berth-web)'] / tp['ssh -L to the machine']:.2f} "
                          f"(goal >= 0.9); / direct: "
                          f"{tp['preview (berth-web)'] / tp['direct to the guest (root)']:.2f}")
                lat = {}
                for name, addr, hh in paths if "latency" in parts else []:
                    lat[name] = latencies(addr, hh, a.n)
                    print(lat_line(name + ", kept", lat[name]))
                if lat:
                    pm = statistics.median(lat["preview (berth-web)"])
                    for other in ("ssh -L via berth-sshgw", "ssh -L to the machine",
                                  "direct to the guest (root)"):
                        print(f"added per request, preview less {other}: "
                              f"{pm - statistics.median(lat[other]):+.3f} ms (goal < 1)")
                if "fresh" in parts:
                    # A new connection per request: the preview's asks hostd each time.
                    h.must("preview", "bench", str(PORT))
                    link = h.must("preview", "bench", str(PORT)).stdout.strip()
                    r = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-D", "-", "-H",
                                        f"Host: {host}", link.replace(
                                            link.split("/")[2], f"127.0.0.1:{wport}")],
                                       capture_output=True, text=True)
                    cookie = [l.split(":", 1)[1].split(";")[0].strip() for l in r.stdout.splitlines()
                              if l.lower().startswith("set-cookie:")][0]
                    fresh_p = latencies(f"127.0.0.1:{wport}", host, a.n // 5, cookie, fresh=True)
                    kept_p = latencies(f"127.0.0.1:{wport}", host, a.n, cookie)
                    fresh_d = latencies(f"{guest}:{PORT}", "x", a.n // 5, fresh=True)
                    print(lat_line("private preview, kept", kept_p))
                    print(lat_line("private preview, new connection", fresh_p))
                    print(lat_line("direct, new connection", fresh_d))
                    print(f"a new connection through hostd (connect, cookie checked, descriptor "
                          f"passed) costs {statistics.median(fresh_p) - statistics.median(fresh_d):+.3f} "
                          f"ms over a direct one")
                if "many" in parts:
                    h.must("preview", "bench", str(PORT), "--public")
                    rss0 = rss_kib(wpid)
                    for name, addr, port, pid in (("preview", "127.0.0.1", wport, wpid),
                                                  ("direct", guest, PORT, 0)):
                        t_open, t_rest, ls, r, t = asyncio.run(
                            many(addr, port, host, a.conns, a.rounds, pid))
                        if pid:
                            rss, threads = r, t
                        print(f"{name}: {a.conns} keep-alive connections at once, all open and "
                              f"answered in {t_open:.1f} s; then {a.conns * (a.rounds - 1)} more "
                              f"requests in {t_rest:.2f} s ({a.conns * (a.rounds - 1) / t_rest:.0f}/s);"
                              f" per request median {statistics.median(ls):.1f} ms, p99 "
                              f"{pct(ls, 0.99):.1f} ms")
                    print(f"berth-web with them open: {threads} threads, RSS {rss / 1024:.0f} MiB "
                          f"({(rss - rss0) / a.conns:.0f} KiB a connection)")
        finally:
            for p in procs:
                p.terminate()
                p.wait()
            h.berth("rm", "bench")


if __name__ == "__main__":
    main()
