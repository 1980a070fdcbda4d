"""Image import and export against the zstd tool on the same file, in the
same run.

  import    `berth image import NAME FILE.zst` (the whole upload, the
            decompression and the writes into a new base) against
            `zstd -dc FILE.zst > /dev/null` (decompression alone; goal:
            throughput >= 0.9 of it) and against `zstd -d FILE.zst -o
            DISK` (decompression into a sparse file: the same writes).
  export    `berth image export M FILE.zst` against
            `zstd -T0 --long=27 -3 -c DISK > FILE.zst` of the same raw disk.

The disk: DISK_MIB MiB, of which the first half holds real files (a tar of
/usr/lib and /usr/share, which compress like a system's disk) and the rest
zeros, as on a machine's disk.  Rounds alternate the two sides; the
import's ratio is given from the medians and, steadier on a shared
machine, as the median of each round's own ratio.
"""
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import berthbench  # noqa: E402

DISK_MIB = int(os.environ.get("DISK_MIB", "2048"))
ROUNDS = int(os.environ.get("ROUNDS", "5"))


def make_disk(path):
    with open(path, "wb") as f:
        tar = subprocess.Popen(["tar", "-c", "--ignore-failed-read", "-f", "-",
                                "/usr/lib", "/usr/share"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        want = DISK_MIB << 19  # half the disk
        got = 0
        while got < want:
            b = tar.stdout.read(min(1 << 20, want - got))
            if not b:
                break
            f.write(b)
            got += len(b)
        tar.kill()
        tar.wait()
        f.truncate(DISK_MIB << 20)
    return got


def run(cmd, **kw):
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, **kw)
    return time.monotonic() - t0


def main():
    with berthbench.hostd() as h:
        tmp = os.path.dirname(h.state)
        disk = os.path.join(tmp, "disk.raw")
        zst = os.path.join(tmp, "disk.raw.zst")
        data = make_disk(disk)
        run(["zstd", "-q", "-T0", "--long=27", disk, "-o", zst])
        zsize = os.path.getsize(zst)
        print(f"# disk {DISK_MIB} MiB ({data >> 20} MiB of files), {zst}: {zsize >> 20} MiB")

        ref, imp, tofile = [], [], []
        plain = os.path.join(tmp, "plain.raw")
        for i in range(ROUNDS):
            ref.append(run(["zstd", "-q", "-dc", "--long=27", zst], stdout=subprocess.DEVNULL))
            tofile.append(run(["zstd", "-q", "-f", "-d", "--long=27", zst, "-o", plain]))
            os.unlink(plain)
            imp.append(run([os.path.join(berthbench.BIN, "berth"), "--state", h.state,
                            "image", "import", f"b{i}", zst], stdout=subprocess.DEVNULL))
            h.must("image", "rm", f"b{i}")
        mib = DISK_MIB
        r, m = statistics.median(ref), statistics.median(imp)
        print(f"zstd -dc > /dev/null   median {r:6.2f} s  {mib / r:7.0f} MiB/s  "
              f"(min {min(ref):.2f}, max {max(ref):.2f})")
        print(f"berth image import     median {m:6.2f} s  {mib / m:7.0f} MiB/s  "
              f"(min {min(imp):.2f}, max {max(imp):.2f})")
        f = statistics.median(tofile)
        print(f"zstd -d -o FILE        median {f:6.2f} s  {mib / f:7.0f} MiB/s  "
              f"(min {min(tofile):.2f}, max {max(tofile):.2f})")
        print(f"import throughput / zstd -dc > /dev/null: {r / m:.2f} (goal >= 0.9)")
        print(f"import throughput / zstd -d into a file:  {f / m:.2f}")
        # Each import against the zstd run just before it: steadier than
        # the ratio of medians when other work comes and goes.
        paired = sorted(a / b for a, b in zip(ref, imp))
        print(f"per round, import / zstd -dc of the same round: median "
              f"{statistics.median(paired):.2f} (min {paired[0]:.2f}, max {paired[-1]:.2f})")

        # Export of a machine made from the image.
        h.must("image", "import", "src", zst)
        h.must("create", "m", "--image", "src", "--no-start")
        out = os.path.join(tmp, "out.zst")
        ref2 = os.path.join(tmp, "ref.zst")
        exp, cmp_ = [], []
        for _ in range(ROUNDS):
            cmp_.append(run(["zstd", "-q", "-f", "-T0", "--long=27", "-3", disk, "-o", ref2]))
            exp.append(run([os.path.join(berthbench.BIN, "berth"), "--state", h.state,
                            "image", "export", "m", out, "--force"], stdout=subprocess.DEVNULL))
        r, m = statistics.median(cmp_), statistics.median(exp)
        print(f"zstd -T0 --long=27 -3  median {r:6.2f} s  -> {os.path.getsize(ref2) >> 20} MiB")
        print(f"berth image export     median {m:6.2f} s  -> {os.path.getsize(out) >> 20} MiB")
        print(f"export time / zstd's: {m / r:.2f}")


if __name__ == "__main__":
    main()
