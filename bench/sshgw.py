#!/usr/bin/env python3
"""SSH gateway benchmark: berth-sshgw against direct ssh to the same
endpoint (the machine's own sshd, reached on its loopback forward with the
gateway key), measured in the same run with OpenSSH's client:

  - time to first byte of `ssh NAME@host true` (goal: <= 1.2x direct);
  - bulk throughput, stdin to the machine and back out (goal: >= 0.9 of
    direct); under TCG the guest's sshd is the bottleneck of both;
  - added round-trip time of a one-byte interactive exchange (goal: < 0.5 ms);
  - memory per idle session: the gateway's RSS growth over N idle sessions
    (goal: < 200 KiB);
  - many idle sessions held at once (goal: 1,000), each an exec channel
    (`cat`) waiting for input.

Usage: bench/run sshgw [--ttfb N] [--mib N] [--rtts N] [--idle N] [--hold N]
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

from berthbench import SSH, hostd, rss_kib, sshgw, summary, user_key



def run_timed(cmd, stdin=None):
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, stdin=stdin, stdout=subprocess.DEVNULL)
    return (time.monotonic() - t0) * 1000.0


def rtt(cmd, n):
    """Median round trip of one byte through `cmd` running `cat` (ms)."""
    p = subprocess.Popen(cmd + ["cat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         bufsize=0)
    xs = []
    for i in range(n + 10):
        t0 = time.monotonic()
        p.stdin.write(b"x")
        if p.stdout.read(1) != b"x":
            sys.exit("bench: echo through cat failed")
        if i >= 10:  # warm-up
            xs.append((time.monotonic() - t0) * 1000.0)
    p.stdin.close()
    p.wait()
    return statistics.median(xs)


def hold(cmd, n, batch=4):
    """Open N sessions running `echo up; cat`; returns them once all said up."""
    procs = []
    for i in range(0, n, batch):
        group = [subprocess.Popen(cmd + ["echo up; exec cat"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for _ in range(min(batch, n - i))]
        for p in group:
            if p.stdout.readline() != b"up\n":
                p.kill()
                sys.exit(f"bench: session {len(procs)} did not come up: "
                         f"{p.stderr.read().decode(errors='replace').strip()}")
            procs.append(p)
    return procs


def release(procs):
    for p in procs:
        p.stdin.close()
    for p in procs:
        p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ttfb", type=int, default=10)
    ap.add_argument("--mib", type=int, default=32)
    ap.add_argument("--rtts", type=int, default=200)
    ap.add_argument("--idle", type=int, default=200)
    ap.add_argument("--hold", type=int, default=1000)
    a = ap.parse_args()

    with hostd() as h:
        tmp = os.path.dirname(h.state)
        key = user_key(h)
        # Memory for --hold sessions' sshd processes in the guest.
        h.must("create", "bench", "--memory", "4G", "--cpus", "2")
        import json
        ep = json.loads(h.must("show", "bench", "--json").stdout)["ssh"]
        try:
            with sshgw(h) as (gw, port):
                via = SSH + ["-i", key, "-p", str(port), "bench@127.0.0.1"]
                direct = SSH + ["-i", os.path.join(h.state, "keys", "gateway"), "-p",
                                str(ep["port"]), f"root@{ep['host']}"]
                print(f"# endpoint: the machine's dropbear at {ep['host']}:{ep['port']} (TCG guest)")

                first = run_timed(via + ["true"])
                g, d = [], []
                for _ in range(a.ttfb):
                    g.append(run_timed(via + ["true"]))
                    d.append(run_timed(direct + ["true"]))
                print(f"ssh NAME@host true, first (new session to the machine): {first:.1f} ms")
                print("ssh NAME@host true, gateway  " + summary(g))
                print("ssh true, direct             " + summary(d))
                print(f"ratio gateway/direct: {statistics.median(g) / statistics.median(d):.2f}"
                      " (goal <= 1.2)")

                data = os.path.join(tmp, "data")
                with open(data, "wb") as f:
                    f.write(os.urandom(a.mib << 20))
                up_g, up_d = [], []
                for _ in range(3):
                    with open(data, "rb") as f:
                        up_g.append(run_timed(via + ["cat >/dev/null"], stdin=f))
                    with open(data, "rb") as f:
                        up_d.append(run_timed(direct + ["cat >/dev/null"], stdin=f))
                mbps = lambda ms: a.mib / (ms / 1000.0)
                print(f"upload {a.mib} MiB: gateway {mbps(statistics.median(up_g)):.1f} MiB/s, "
                      f"direct {mbps(statistics.median(up_d)):.1f} MiB/s, ratio "
                      f"{statistics.median(up_d) / statistics.median(up_g):.2f} (goal >= 0.9)")
                dn_g, dn_d = [], []
                cmd = f"head -c {a.mib << 20} /dev/zero"
                for _ in range(3):
                    dn_g.append(run_timed(via + [cmd]))
                    dn_d.append(run_timed(direct + [cmd]))
                print(f"download {a.mib} MiB: gateway {mbps(statistics.median(dn_g)):.1f} MiB/s, "
                      f"direct {mbps(statistics.median(dn_d)):.1f} MiB/s, ratio "
                      f"{statistics.median(dn_d) / statistics.median(dn_g):.2f} (goal >= 0.9)")

                rg = rtt(via, a.rtts)
                rd = rtt(direct, a.rtts)
                print(f"one-byte round trip over {a.rtts}: gateway {rg:.3f} ms, direct {rd:.3f} ms,"
                      f" added {rg - rd:.3f} ms (goal < 0.5 ms)")

                # Memory: settle, then grow by --idle sessions.
                time.sleep(1)
                base = rss_kib(gw.pid)
                procs = hold(via, a.idle)
                time.sleep(1)
                grown = rss_kib(gw.pid)
                print(f"gateway RSS: {base} KiB idle, {grown} KiB with {a.idle} idle sessions: "
                      f"{(grown - base) / a.idle:.1f} KiB per session (goal < 200 KiB)")
                release(procs)

                t0 = time.monotonic()
                procs = hold(via, a.hold)
                took = time.monotonic() - t0
                live = json.loads(h.must("show", "bench", "--json").stdout).get("sessions")
                rss = rss_kib(gw.pid)
                print(f"{a.hold} idle sessions held (opened in {took:.1f} s); hostd counts {live};"
                      f" gateway RSS {rss} KiB ({(rss - base) / a.hold:.1f} KiB per session)")
                release(procs)
        finally:
            h.berth("rm", "bench")


if __name__ == "__main__":
    main()
