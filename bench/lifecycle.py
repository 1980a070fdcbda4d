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
import statistics

from berthbench import hostd, summary, timed

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=200)
    a = ap.parse_args()

    with hostd() as h:
        h.must("create", "bm", "--no-start")
        cold, suspend, resume, stop = [], [], [], []
        for _ in range(a.rounds):
            cold.append(timed(lambda: (h.must("start", "bm"), h.must("exec", "bm", "--", "true"))))
            suspend.append(timed(lambda: h.must("suspend", "bm")))
            resume.append(timed(lambda: (h.must("resume", "bm"), h.must("exec", "bm", "--", "true"))))
            stop.append(timed(lambda: h.must("stop", "bm")))
        print("cold boot -> exec ready   " + summary(cold))
        print("suspend (managed save)    " + summary(suspend))
        print("resume -> exec ready      " + summary(resume))
        print("stop (ACPI)               " + summary(stop))
        ratio = statistics.median(cold) / statistics.median(resume)
        print(f"ratio cold boot / resume: {ratio:.1f}x (goal >= 4x)")

        # hostd's own time per call: total minus libvirt and tools.
        h.must("start", "bm")
        light = {"GET /v1/machines/bm": ("GET", "/v1/machines/bm", None),
                 "GET /v1/machines": ("GET", "/v1/machines", None),
                 "GET /v1/info": ("GET", "/v1/info", None),
                 "POST start (running)": ("POST", "/v1/machines/bm/start", {})}
        over = {name: [] for name in light}
        for _ in range(a.calls):
            for name, (m, p, b) in light.items():
                _, total, ext = h.must_call(m, p, b)
                over[name].append(total - ext)
        heavy = {}
        for name, p in (("POST suspend", "suspend"), ("POST resume", "resume"),
                        ("POST stop", "stop"), ("POST start", "start")):
            _, total, ext = h.must_call("POST", f"/v1/machines/bm/{p}", {})
            heavy[name] = (total, ext)
        print(f"hostd overhead per call (total - libvirt/tools), over {a.calls} calls each:")
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
        h.must("rm", "bm")


if __name__ == "__main__":
    main()
