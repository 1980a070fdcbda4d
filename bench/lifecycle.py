#!/usr/bin/env python3
"""Machine lifecycle benchmark: cold boot to `exec` ready, suspend, resume to
`exec` ready, and hostd's own overhead per API call, in one run.

The baseline is measured in the same run: resume is reported as a ratio of
the cold boot (goal: resume at least 4x faster), and hostd's overhead is the
total time of a call minus the part spent in libvirt and external tools,
which hostd reports in its Server-Timing header (goal: under 20 ms).

Usage: bench/run [--rounds N] [--calls N]
"""
import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("BERTH_BIN", os.path.join(ROOT, "bin"))


class UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("berth")
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)


def call(sock, method, path, body=None):
    """One API call: (status, json, total_ms, ext_ms)."""
    c = UnixHTTP(sock)
    data = json.dumps(body).encode() if body is not None else None
    c.request(method, path, body=data, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    payload = json.loads(r.read() or b"null")
    timing = dict(p.strip().split(";dur=") for p in r.getheader("Server-Timing").split(","))
    c.close()
    return r.status, payload, float(timing["total"]), float(timing["ext"])


def berth(state, *args, stdin=None):
    return subprocess.run([os.path.join(BIN, "berth"), "--state", state, *args],
                          stdin=stdin, capture_output=True, text=True)


def timed(fn):
    t0 = time.monotonic()
    fn()
    return (time.monotonic() - t0) * 1000.0


def must(res):
    if res.returncode != 0:
        sys.exit(f"bench: command failed: {res.args}: {res.stderr}")
    return res


def summary(xs):
    xs = sorted(xs)
    return (f"median {statistics.median(xs):8.1f} ms  min {xs[0]:8.1f}  max {xs[-1]:8.1f}  (n={len(xs)})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=200)
    a = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="berth-b.", dir="/tmp")
    state = os.path.join(tmp, "state")
    sock = os.path.join(state, "hostd.sock")
    log = open(os.path.join(tmp, "hostd.log"), "w")
    hostd = subprocess.Popen([os.path.join(BIN, "berth-hostd"), "--state", state],
                             stdout=log, stderr=log)
    try:
        for _ in range(200):
            if berth(state, "info").returncode == 0:
                break
            time.sleep(0.1)
        info = json.loads(must(berth(state, "info", "--json")).stdout)
        print(f"# hypervisor {info['hypervisor']} {info.get('hypervisor_note','')}, "
              f"storage {info['storage']['backend']}, network {info['network']}, {os.cpu_count()} cores")
        must(berth(state, "image", "build", "tiny"))
        must(berth(state, "create", "bm", "--no-start"))

        cold, suspend, resume, stop = [], [], [], []
        for _ in range(a.rounds):
            cold.append(timed(lambda: (must(berth(state, "start", "bm")),
                                       must(berth(state, "exec", "bm", "--", "true")))))
            suspend.append(timed(lambda: must(berth(state, "suspend", "bm"))))
            resume.append(timed(lambda: (must(berth(state, "resume", "bm")),
                                         must(berth(state, "exec", "bm", "--", "true")))))
            stop.append(timed(lambda: must(berth(state, "stop", "bm"))))
        print("cold boot -> exec ready   " + summary(cold))
        print("suspend (managed save)    " + summary(suspend))
        print("resume -> exec ready      " + summary(resume))
        print("stop (ACPI)               " + summary(stop))
        ratio = statistics.median(cold) / statistics.median(resume)
        print(f"ratio cold boot / resume: {ratio:.1f}x (goal >= 4x)")

        # hostd's own time per call: total minus libvirt and tools.
        must(berth(state, "start", "bm"))
        over = {"GET /v1/machines/bm": [], "GET /v1/machines": [], "GET /v1/info": [],
                "POST start (running)": []}
        for _ in range(a.calls):
            for name, (m, p, b) in {"GET /v1/machines/bm": ("GET", "/v1/machines/bm", None),
                                    "GET /v1/machines": ("GET", "/v1/machines", None),
                                    "GET /v1/info": ("GET", "/v1/info", None),
                                    "POST start (running)": ("POST", "/v1/machines/bm/start", {})}.items():
                st, _, total, ext = call(sock, m, p, b)
                assert st == 200, (name, st)
                over[name].append(total - ext)
        heavy = {}
        for name, (m, p) in {"POST suspend": ("POST", "/v1/machines/bm/suspend"),
                             "POST resume": ("POST", "/v1/machines/bm/resume"),
                             "POST stop": ("POST", "/v1/machines/bm/stop"),
                             "POST start": ("POST", "/v1/machines/bm/start")}.items():
            st, _, total, ext = call(sock, m, p, {})
            assert st == 200, (name, st)
            heavy[name] = (total, ext)
        print("hostd overhead per call (total - libvirt/tools), over "
              f"{a.calls} calls each:")
        worst = 0.0
        for name, xs in over.items():
            xs.sort()
            p95 = xs[int(len(xs) * 0.95) - 1]
            worst = max(worst, p95)
            print(f"  {name:24s} median {statistics.median(xs):7.3f} ms  p95 {p95:7.3f} ms")
        for name, (total, ext) in heavy.items():
            worst = max(worst, total - ext)
            print(f"  {name:24s} total {total:9.1f} ms  in libvirt/tools {ext:9.1f} ms  "
                  f"hostd {total - ext:7.3f} ms ({(total - ext) / total * 100:.2f}% of the call)")
        print(f"worst hostd overhead: {worst:.3f} ms (goal < 20 ms)")
        must(berth(state, "rm", "bm"))
    finally:
        hostd.send_signal(signal.SIGTERM)
        hostd.wait()
        out = subprocess.run(["virsh", "-q", "-c", "qemu:///system", "list", "--all", "--name"],
                             capture_output=True, text=True).stdout.split()
        for d in out:
            x = subprocess.run(["virsh", "-q", "-c", "qemu:///system", "dumpxml", d],
                               capture_output=True, text=True).stdout
            if tmp + "/" in x:
                subprocess.run(["virsh", "-q", "-c", "qemu:///system", "destroy", d], capture_output=True)
                subprocess.run(["virsh", "-q", "-c", "qemu:///system", "undefine", "--managed-save", d],
                               capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
