#!/usr/bin/env python3
"""Templates: time from the API call to the first command's output for a
machine made from a template, against a cold boot and a resume of the same
image, at two memory sizes, in one run.

For each memory size a template of the tiny image is made (`berth template
create`), then each round times, with the CLI from start to the first
output of `berth exec M -- echo`:
  (a) `berth create M --template T` (a live fork of the template's saved
      disk and memory, re-keyed) + the first exec;
  (b) `berth create C --image tiny --memory SIZE` (create, start, boot until
      SSH answers) + the first exec: the cold boot;
  (c) `berth resume C` of C suspended + the first exec.
Goal: (a) at least 5x faster than (b), within 1.5x of (c).  hostd's log
says where (a)'s time goes (the restore, berth-seed --live, the machine id).

Usage: bench/run template_bench [--rounds N] [--sizes 256M,1G]
"""
import argparse
import statistics

from berthbench import hostd, summary, timed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", default="256M,1G")
    a = ap.parse_args()

    with hostd("max_memory = 2G\n") as h:
        for size in a.sizes.split(","):
            tpl = "tb-" + size.lower()
            build = timed(lambda: h.must("template", "create", tpl, "--image", "tiny",
                                         "--memory", size))
            print(f"== memory {size}: template build {build:.0f} ms")
            fromt, cold, resume = [], [], []
            for i in range(a.rounds):
                m, c = f"f{i}", f"c{i}"
                fromt.append(timed(lambda: (h.must("create", m, "--template", tpl),
                                            h.must("exec", m, "--", "echo", "hi"))))
                cold.append(timed(lambda: (h.must("create", c, "--image", "tiny",
                                                  "--memory", size),
                                           h.must("exec", c, "--", "echo", "hi"))))
                h.must("suspend", c)
                resume.append(timed(lambda: (h.must("resume", c),
                                             h.must("exec", c, "--", "echo", "hi"))))
                h.must("rm", m)
                h.must("rm", c)
            print("(a) create from template -> first output  " + summary(fromt))
            print("(b) cold boot (create+start) -> output    " + summary(cold))
            print("(c) resume -> first output                " + summary(resume))
            ra = statistics.median(cold) / statistics.median(fromt)
            rc = statistics.median(fromt) / statistics.median(resume)
            print(f"ratio cold / template: {ra:.1f}x (goal >= 5x); "
                  f"template / resume: {rc:.2f}x (goal <= 1.5x)")
            h.must("template", "rm", tpl)


if __name__ == "__main__":
    main()
