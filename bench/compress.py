"""How well an image compresses with zstd, gzip and xz, in the same run.

  bench/run compress [DISK]

DISK is a raw disk image; by default the agents image is exported from a
hostd that builds it (slow the first time: the recipe runs; its downloads
are cached in /var/cache/berth).  Each tool compresses the same file into a
temporary file, on every core where it can: zstd -T0 at its default level 3 and at 12 with --long=27, gzip -6
(one core: gzip has no threads), xz -T0 at presets 3 and 6.  (zstd -19
and xz -9 take tens of minutes on 2 cores for a 3 GiB image.)  Ratios are raw size /
compressed size and allocated (data) size / compressed size; times are
wall clock.
"""
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import berthbench  # noqa: E402

TOOLS = [
    ("zstd -T0 -3 --long=27", ["zstd", "-q", "-T0", "-3", "--long=27", "-c"]),
    ("zstd -T0 -12 --long=27", ["zstd", "-q", "-T0", "-12", "--long=27", "-c"]),
    ("gzip -6", ["gzip", "-6", "-c"]),
    ("xz -T0 -3", ["xz", "-T0", "-3", "-c"]),
    ("xz -T0 -6", ["xz", "-T0", "-6", "-c"]),
]


def measure(disk, out_dir):
    raw = os.path.getsize(disk)
    used = int(subprocess.run(["du", "-B1", disk], capture_output=True, text=True,
                              check=True).stdout.split()[0])
    print(f"# {disk}: {raw / 2**20:.0f} MiB disk, {used / 2**20:.0f} MiB allocated, "
          f"{os.cpu_count()} cores")
    print(f"{'tool':26s} {'size MiB':>9s} {'ratio':>7s} {'of data':>8s} {'time s':>8s} "
          f"{'MiB/s':>7s}")
    for name, argv in TOOLS:
        out = os.path.join(out_dir, "out")
        with open(disk, "rb") as src, open(out, "wb") as dst:
            t0 = time.monotonic()
            subprocess.run(argv, stdin=src, stdout=dst, check=True)
            secs = time.monotonic() - t0
        size = os.path.getsize(out)
        os.unlink(out)
        print(f"{name:26s} {size / 2**20:9.1f} {raw / size:7.1f} {used / size:8.2f} "
              f"{secs:8.1f} {raw / 2**20 / secs:7.0f}")


def main():
    if len(sys.argv) > 1:
        with tempfile.TemporaryDirectory(dir="/var/tmp") as d:
            measure(sys.argv[1], d)
        return
    with berthbench.hostd() as h:
        tmp = os.path.dirname(h.state)
        t0 = time.monotonic()
        h.must("image", "build", "agents")
        print(f"# agents image built in {time.monotonic() - t0:.0f} s")
        h.must("create", "m", "--image", "agents", "--no-start")
        zst = os.path.join(tmp, "agents.zst")
        h.must("image", "export", "m", zst)
        disk = os.path.join(tmp, "agents.raw")
        subprocess.run(["zstd", "-q", "-d", "--long=27", zst, "-o", disk], check=True)
        os.unlink(zst)
        measure(disk, tmp)


if __name__ == "__main__":
    main()
