#!/usr/bin/env python3
"""Wake from a zstd memory image vs from the raw one, in one run.

hostd keeps a suspended machine's memory zstd-compressed (suspend_compress =
true, the default) and wakes it through a FIFO that a thread fills while it
decompresses; with suspend_compress = false the memory is libvirt's raw
managed save.  One machine with enough memory for the image's size to matter
(1 GiB, part of it dirtied by the guest with data of mixed compressibility:
random bytes, base64 text, copies of a binary) is suspended and woken in
both modes, alternating round by round (hostd restarted with the other
setting; same machine, same memory).  Each mode wakes twice a round: with
the image in the page cache as the suspend left it (warm) and dropped from
it first (cold: a machine idle for long).

Measured: the suspend call, the wake call (the restore, as hostd's API
answers it) and the wake to `exec` ready (which also checks a value in the
guest's tmpfs survived).  The baseline is the raw wake of the same run:
ratio zstd / raw, goal <= 1.1x.

The machines this runs on may share their cores with other busy guests:
each wake is timed separately and the medians and minimums printed.

Usage: bench/run wake [--rounds N] [--memory SIZE] [--dirty MIB] [--cache warm|cold|both]
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from berthbench import BIN, VIRSH, Hostd, summary

MODES = ("raw", "zstd")
CACHES = ("warm", "cold")


class Bench:
    def __init__(self, tmp):
        self.tmp = tmp
        self.state = os.path.join(tmp, "state")
        self.log = open(os.path.join(tmp, "hostd.log"), "a")
        self.proc = None
        self.h = Hostd(self.state)

    def start(self, mode):
        """hostd with suspend_compress for MODE."""
        self.stop()
        os.makedirs(self.state, exist_ok=True)
        with open(os.path.join(self.state, "berth.conf"), "w") as f:
            f.write(f"suspend_compress = {'true' if mode == 'zstd' else 'false'}\n")
        self.proc = subprocess.Popen([os.path.join(BIN, "berth-hostd"), "--state", self.state],
                                     stdout=self.log, stderr=self.log)
        for _ in range(200):
            if self.h.berth("info").returncode == 0:
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        sys.exit(f"bench: berth-hostd did not start; see {self.log.name}")

    def stop(self):
        if self.proc:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait()
            self.proc = None

    def cleanup(self):
        self.stop()
        names = subprocess.run(VIRSH + ["list", "--all", "--name"], capture_output=True,
                               text=True).stdout.split()
        for d in names:
            xml = subprocess.run(VIRSH + ["dumpxml", d], capture_output=True, text=True).stdout
            if self.tmp + "/" in xml:
                subprocess.run(VIRSH + ["destroy", d], capture_output=True)
                subprocess.run(VIRSH + ["undefine", "--managed-save", d], capture_output=True)
        shutil.rmtree(self.tmp, ignore_errors=True)


def drop_cache(path):
    """Write PATH out and drop it from the page cache."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def mib(n):
    return n / (1 << 20)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--memory", default="1G")
    ap.add_argument("--dirty", type=int, default=384,
                    help="MiB the guest writes to its tmpfs, a third each of random "
                         "bytes, base64 text and copies of its busybox binary")
    ap.add_argument("--cache", choices=("warm", "cold", "both"), default="both")
    a = ap.parse_args()
    caches = CACHES if a.cache == "both" else (a.cache,)

    tmp = tempfile.mkdtemp(prefix="berth-b.", dir="/tmp")
    os.chmod(tmp, 0o711)
    b = Bench(tmp)
    try:
        b.start("zstd")
        h = b.h
        info = json.loads(h.must("info", "--json").stdout)
        print(f"# hypervisor {info['hypervisor']}, storage {info['storage']['backend']}, "
              f"{os.cpu_count()} cores; machine memory {a.memory}, {a.dirty} MiB dirtied")
        h.must("image", "build", "tiny")
        m = json.loads(h.must("create", "wk", "--memory", a.memory, "--json").stdout)
        third = max(a.dirty // 3, 1)
        token = os.urandom(8).hex()
        h.must("exec", "wk", "--", "sh", "-c",
               f"echo {token} > /dev/shm/token && "
               f"dd if=/dev/urandom of=/dev/shm/rand bs=1M count={third} 2>/dev/null && "
               f"base64 /dev/shm/rand | head -c {third << 20} > /tmp/text && "
               f"while [ $(($(wc -c < /tmp/bins 2>/dev/null || echo 0) >> 20)) -lt {third} ]; "
               f"do cat /bin/busybox >> /tmp/bins; done")
        images = {"zstd": os.path.join(b.state, "machines", m["id"], "suspend.zst"),
                  "raw": f"/var/lib/libvirt/qemu/save/{m['domain']}.save"}

        suspend = {mode: [] for mode in MODES}
        wake = {(mode, c): [] for mode in MODES for c in CACHES}
        ready = {(mode, c): [] for mode in MODES for c in CACHES}
        size = {mode: [] for mode in MODES}
        for r in range(a.rounds):
            for mode in (MODES if r % 2 == 0 else MODES[::-1]):
                b.start(mode)
                for c in caches:
                    out, total, _ = h.must_call("POST", "/v1/machines/wk/suspend", {})
                    suspend[mode].append(total)
                    size[mode].append(out.get("memory_bytes", 0))
                    if not os.path.exists(images[mode]):
                        sys.exit(f"bench: {mode}: no memory image at {images[mode]}")
                    if c == "cold":
                        drop_cache(images[mode])
                    t0 = time.monotonic()
                    out, total, _ = h.must_call("POST", "/v1/machines/wk/resume", {})
                    wake[mode, c].append(total)
                    got = h.must("exec", "wk", "--", "cat", "/dev/shm/token").stdout.strip()
                    ready[mode, c].append((time.monotonic() - t0) * 1000.0)
                    if got != token:
                        sys.exit(f"bench: {mode}: the guest's memory did not survive "
                                 f"(token {got!r})")
            print(f"# round {r + 1}/{a.rounds}: wake " + ", ".join(
                f"{mode} {c} {wake[mode, c][-1]:.0f} ms" for mode in MODES for c in caches),
                flush=True)

        raw_b, zst_b = statistics.median(size["raw"]), statistics.median(size["zstd"])
        print(f"memory image: raw {mib(raw_b):.1f} MiB, zstd {mib(zst_b):.1f} MiB "
              f"({zst_b / raw_b * 100:.0f}% of raw)")
        for mode in MODES:
            print(f"suspend {mode:4s}                 " + summary(suspend[mode]))
        # hostd logs each compression: "...; save N ms, compress N ms".
        with open(b.log.name) as f:
            comp = [float(x) for x in re.findall(r"suspended root/wk: memory .* compress (\d+) ms",
                                                 f.read())]
        if comp:
            print(f"  of which compress + fsync " + summary(comp))
        for c in caches:
            for mode in MODES:
                print(f"wake {mode:4s} ({c}), restore     " + summary(wake[mode, c]))
            for mode in MODES:
                print(f"wake {mode:4s} ({c}) -> exec     " + summary(ready[mode, c]))
        med = statistics.median
        print(f"ratio suspend zstd / raw: {med(suspend['zstd']) / med(suspend['raw']):.2f}x")
        for c in caches:
            # Also the median of each round's own ratio: both modes of a
            # round ran within a minute of each other, under the same load.
            paired = med([z / r for r, z in zip(wake['raw', c], wake['zstd', c])])
            print(f"ratio wake zstd / raw ({c}): restore "
                  f"{med(wake['zstd', c]) / med(wake['raw', c]):.2f}x (per round {paired:.2f}x), "
                  f"to exec ready {med(ready['zstd', c]) / med(ready['raw', c]):.2f}x "
                  f"(goal <= 1.1x)")
        h.must("rm", "wk")
    finally:
        b.cleanup()


if __name__ == "__main__":
    main()
