#!/usr/bin/env python3
"""Summarizes a kernel timeline written by libember_cupti_trace.so (bench/cuda/cupti_trace.cpp).

Kernels launched by one cudaGraphLaunch share a correlation id; the most common group size with
at least --min-kernels kernels is taken as the decode step. For each kernel of that step
(median over the steps seen):
  dur      its own start-to-end time;
  gap      its start minus the previous kernel's end (negative: they overlapped);
  advance  how far it moved the step's latest end so far: the step time is the sum of these,
           so this is the kernel's share of the critical path.
Then the same by kernel name (summed over a step), and the idle time between steps (host work
and the graph launch). grid, regs and smem (static + dynamic) are as CUPTI reports them; one call
of session 19 read smem 1024 for a decode kernel launched with 100 KiB (unexplained), so check
that column against the launch before relying on it.

usage: cupti_trace_summary.py trace.csv [--min-kernels 20] [--detail 14]
"""
import argparse
import collections
import csv
import re
import statistics


def short_name(name):
    s = name[5:] if name.startswith("void ") else name
    s = s.replace("(anonymous namespace)::", "")
    s = re.sub(r"\([\w:]*QFormat\)", "q", s)  # (ember::cuda::QFormat)0 -> q0
    depth = 0
    for i, c in enumerate(s):  # cut the argument list (at template depth 0)
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c == "(" and depth == 0:
            s = s[:i]
            break
    base, _, targs = s.partition("<")
    base = base.split("::")[-1]
    if targs:
        targs = targs.rstrip(">")
        targs = ",".join(a.strip().split("::")[-1] for a in targs.split(";"))
        return f"{base}<{targs[:40]}>"
    return base


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--min-kernels", type=int, default=20)
    ap.add_argument("--detail", type=int, default=14, help="kernels of the step listed one by one")
    a = ap.parse_args()
    groups = collections.OrderedDict()
    with open(a.trace) as f:
        for r in csv.DictReader(f):
            k = (int(r["start_ns"]), int(r["end_ns"]), short_name(r["name"]), int(r["grid"]), int(r["regs"]),
                 int(r["smem"]))
            groups.setdefault(int(r["correlation"]), []).append(k)
    sizes = collections.Counter(len(g) for g in groups.values() if len(g) >= a.min_kernels)
    if not sizes:
        print(f"no launch with >= {a.min_kernels} kernels")
        return 1
    size = sizes.most_common(1)[0][0]
    steps = [sorted(g) for g in groups.values() if len(g) == size]
    steps.sort()
    print(f"{len(steps)} steps of {size} kernels (launch sizes seen: {dict(sizes)})")
    per_pos = [[] for _ in range(size)]
    step_us, between_us = [], []
    for si, st in enumerate(steps):
        t0 = st[0][0]
        latest = t0
        prev_end = t0
        for i, (s, e, name, grid, regs, smem) in enumerate(st):
            adv = max(0, e - latest)
            latest = max(latest, e)
            per_pos[i].append(((e - s) / 1e3, (s - prev_end) / 1e3, adv / 1e3, name, grid, regs, smem))
            prev_end = e
        step_us.append((latest - t0) / 1e3)
        if si + 1 < len(steps):
            between_us.append((steps[si + 1][0][0] - latest) / 1e3)
    med = statistics.median
    print(f"step: median {med(step_us):.1f} us (min {min(step_us):.1f}); between steps: median "
          f"{med(between_us) if between_us else 0:.1f} us")
    by_name = collections.OrderedDict()
    for pos in per_pos:
        name = pos[0][3]
        d = by_name.setdefault(name, [0, 0.0, 0.0, 0.0, pos[0][4], pos[0][5], pos[0][6]])
        d[0] += 1
        d[1] += med(p[0] for p in pos)
        d[2] += med(p[2] for p in pos)
        d[3] += med(p[1] for p in pos)
    print(f"\n{'kernel':44} {'n':>4} {'dur us':>9} {'advance':>9} {'gap sum':>9} {'grid':>6} {'regs':>4} {'smem':>7}")
    for name, (n, dur, adv, gap, grid, regs, smem) in sorted(by_name.items(), key=lambda kv: -kv[1][2]):
        print(f"{name:44} {n:4d} {dur:9.1f} {adv:9.1f} {gap:9.1f} {grid:6d} {regs:4d} {smem:7d}")
    print(f"\nfirst {a.detail} kernels of the step (median us): dur, gap to the previous end, advance")
    for i, pos in enumerate(per_pos[: a.detail]):
        print(f"{i:3d} {pos[0][3]:44} {med(p[0] for p in pos):7.2f} {med(p[1] for p in pos):7.2f} "
              f"{med(p[2] for p in pos):7.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
