#!/usr/bin/env python3
"""Checkpoints and forks (issue 3), qcow2 backend.

Baselines in the same run: a checkpoint and a fork of a machine with a
100 GiB disk against the same on a 1 GiB disk (goal: ratio within 1.1,
O(1) in the disk size), for a stopped and for a running machine; and the
fork API call until the new machine is defined (boot excluded; goal under
100 ms), with the part spent in tools and libvirt from Server-Timing.

Usage: bench/run storage [--rounds N]
"""
import argparse
import statistics

from berthbench import hostd, summary


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    a = ap.parse_args()
    with hostd() as h:
        res = {}
        for size in ("1G", "100G"):
            name = f"d{size.lower()}"
            h.must("create", name, "--disk", size, "--no-start")
            ck, fk = [], []
            for i in range(a.rounds):
                body, total, _ = h.must_call("POST", f"/v1/machines/{name}/checkpoints",
                                             {"name": f"s{i}"})
                ck.append(total)
                body, total, _ = h.must_call("POST", f"/v1/machines/{name}/fork",
                                             {"name": f"{name}-f{i}", "from": f"s{i}"})
                fk.append(total)
            res[("stopped checkpoint", size)] = ck
            res[("fork (defined, not booted)", size)] = fk
            h.must("start", name)
            lk = []
            for i in range(max(3, a.rounds // 2)):
                body, total, _ = h.must_call("POST", f"/v1/machines/{name}/checkpoints",
                                             {"name": f"r{i}"})
                lk.append(total)
            res[("running checkpoint", size)] = lk
            h.must("stop", name, "--timeout", "5")
        for kind in ("stopped checkpoint", "running checkpoint", "fork (defined, not booted)"):
            small, big = res[(kind, "1G")], res[(kind, "100G")]
            print(f"{kind:28s}   1 GiB: {summary(small)}")
            print(f"{kind:28s} 100 GiB: {summary(big)}")
            print(f"{kind:28s} ratio 100 GiB / 1 GiB: "
                  f"{statistics.median(big) / statistics.median(small):.2f} (goal <= 1.1)")
        fk = res[("fork (defined, not booted)", "1G")] + res[("fork (defined, not booted)", "100G")]
        print(f"fork API call -> machine defined: median {statistics.median(fk):.1f} ms, "
              f"max {max(fk):.1f} ms (goal < 100 ms)")


if __name__ == "__main__":
    main()
