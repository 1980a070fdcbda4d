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
        sizes = ("1G", "100G")
        res = {}
        for size in sizes:
            h.must("create", f"d{size.lower()}", "--disk", size, "--no-start")
        # Interleaved, so both sizes see the same pool and database state.
        for i in range(a.rounds):
            for size in sizes:
                name = f"d{size.lower()}"
                _, total, _ = h.must_call("POST", f"/v1/machines/{name}/checkpoints",
                                          {"name": f"s{i}"})
                res.setdefault(("stopped checkpoint", size), []).append(total)
            for size in sizes:
                name = f"d{size.lower()}"
                _, total, _ = h.must_call("POST", f"/v1/machines/{name}/fork",
                                          {"name": f"{name}-f{i}", "from": f"s{i}"})
                res.setdefault(("fork (defined, not booted)", size), []).append(total)
        for size in sizes:
            h.must("start", f"d{size.lower()}")
        for i in range(max(3, a.rounds // 2)):
            for size in sizes:
                name = f"d{size.lower()}"
                _, total, _ = h.must_call("POST", f"/v1/machines/{name}/checkpoints",
                                          {"name": f"r{i}"})
                res.setdefault(("running checkpoint", size), []).append(total)
        for size in sizes:
            h.must("stop", f"d{size.lower()}", "--timeout", "5")
        for kind in ("stopped checkpoint", "running checkpoint", "fork (defined, not booted)"):
            small, big = res[(kind, "1G")], res[(kind, "100G")]
            print(f"{kind:28s}   1 GiB: {summary(small)}")
            print(f"{kind:28s} 100 GiB: {summary(big)}")
            print(f"{kind:28s} ratio 100 GiB / 1 GiB: "
                  f"{statistics.median(big) / statistics.median(small):.2f} (goal <= 1.1)")
        # Live fork vs one managed save plus one restore of the same machine.
        h.must("start", "d1g")
        live, save_restore = [], []
        for i in range(3):
            _, total, _ = h.must_call("POST", "/v1/machines/d1g/fork", {"name": f"live{i}", "live": True})
            live.append(total)
            h.must_call("POST", f"/v1/machines/live{i}/stop", {"timeout": 1})
            _, t_save, _ = h.must_call("POST", "/v1/machines/d1g/suspend", {})
            _, t_restore, _ = h.must_call("POST", "/v1/machines/d1g/resume", {})
            save_restore.append(t_save + t_restore)
        print(f"live fork (API, fork running)       {summary(live)}")
        print(f"managed save + restore of the same  {summary(save_restore)}")
        print(f"ratio live fork / (save + restore): "
              f"{statistics.median(live) / statistics.median(save_restore):.2f} (goal <= 1)")
        fk = res[("fork (defined, not booted)", "1G")] + res[("fork (defined, not booted)", "100G")]
        print(f"fork API call -> machine defined: median {statistics.median(fk):.1f} ms, "
              f"max {max(fk):.1f} ms (goal < 100 ms)")


if __name__ == "__main__":
    main()
