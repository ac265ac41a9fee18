#!/usr/bin/env python3
"""Reads the CSV of the in-kernel timeline probe (src/backend/cuda/probe.cuh).

Build with -DEMBER_CUDA_PROBE=ON, then e.g.
  EMBER_PROBE_AT=120 EMBER_PROBE_OUT=p.csv ember bench speed -m M --device cuda -n 256 ...
records graph launches 120 and 121 (the GPU idle before 120). Prints
  1. per kernel kind, the median over its launches of when each probe point was first /
     median / last reached (us, from the previous launch's last end), and its advance (how far it
     moved the latest end: its share of the step's critical path);
  2. per kernel kind, each block's time between consecutive probe points (SM cycles, median and
     90th percentile over blocks).
Kinds: qMxK staged packed GEMV (M output rows, K inputs), bMxK BF16 GEMV (M: warp tasks),
attn 16-bit decode attention, norm RMSNorm. Points: 0 entry, 1 before the PDL wait, 2 after it,
3 x staged (attention: Q in shared memory; 1-2 the fused rope), 4 a tile's products done
(attention: a key tile's start), 5 after the reduction barrier (attention: warps merged), 6 a
tile's outputs stored, 7 exit.
"""
import csv
import statistics as st
import sys
from collections import defaultdict


def kind_name(r):
    kd, m, k = r["kind"], r["m"], r["k"]
    return {1: f"q{m}x{k}", 4: f"b{m}x{k}", 2: "attn", 5: "norm"}.get(kd, f"k{kd}")


def launches(rows):
    """Records grouped into kernel launches: a kind's records until a block entry (point 0) more
    than 12 us after the kind's last record, or any record more than 40 us after it (a kernel's
    blocks may wait longer than 12 us between their entry and their next point: the held o GEMV
    behind its start gate and PDL wait, ~17 us)."""
    out, open_by = [], {}
    for r in rows:
        n = kind_name(r)
        cur = open_by.get(n)
        gap = r["gt"] - cur["last"] if cur else 0
        if cur is None or (r["ev"] == 0 and gap > 12000) or gap > 40000:
            cur = {"name": n, "recs": [], "last": r["gt"]}
            out.append(cur)
            open_by[n] = cur
        cur["recs"].append(r)
        cur["last"] = r["gt"]
    for c in out:
        ends = [r["gt"] for r in c["recs"] if r["ev"] in (6, 7)]
        c["end"] = max(ends) if ends else c["last"]
    out.sort(key=lambda c: c["end"])
    return out


def timeline(rows):
    table = defaultdict(list)
    prev_end = None
    for c in launches(rows):
        if prev_end is not None:
            info = {"advance": (c["end"] - prev_end) / 1000.0}
            for e in range(8):
                v = sorted(r["gt"] for r in c["recs"] if r["ev"] == e)
                if v:
                    info[e] = tuple((x - prev_end) / 1000.0 for x in (v[0], v[len(v) // 2], v[-1]))
            table[c["name"]].append(info)
        prev_end = c["end"]
    print("median over launches (us from the previous launch's last end): advance | point first/median/last")
    for n, lst in table.items():
        if len(lst) < 3:
            continue
        parts = [f"adv {st.median(x['advance'] for x in lst):6.2f}"]
        for e in range(8):
            vals = [x[e] for x in lst if e in x]
            if vals:
                parts.append(f"p{e} " + "/".join(f"{st.median(v[i] for v in vals):6.2f}" for i in range(3)))
        print(f"{n:12s} x{len(lst):3d} " + " | ".join(parts))


def phases(rows):
    blocks = defaultdict(list)
    cur = {}
    for r in sorted(rows, key=lambda r: (r["sm"], r["clk"])):
        key = (kind_name(r), r["sm"], r["blk"])
        if r["ev"] == 0 or key not in cur:
            cur[key] = []
            blocks[key[0]].append(cur[key])
        cur[key].append(r)
    print("\nper block, SM cycles between consecutive points (median/p90, count)")
    for n, bl in blocks.items():
        ph = defaultdict(list)
        for b in bl:
            for a, z in zip(b, b[1:]):
                ph[(a["ev"], z["ev"])].append(z["clk"] - a["clk"])
        shown = [k for k in sorted(ph) if len(ph[k]) > len(bl) // 20]
        print(f"{n:12s} blocks {len(bl):6d}: " + "  ".join(
            f"{a}->{z}:{st.median(ph[(a, z)]):.0f}/{sorted(ph[(a, z)])[int(len(ph[(a, z)]) * 0.9)]:.0f}"
            f"(n{len(ph[(a, z)])})" for a, z in shown))


def main():
    rows = [{k: int(v) for k, v in r.items()} for r in csv.DictReader(open(sys.argv[1]))]
    rows.sort(key=lambda r: r["gt"])
    print(f"{len(rows)} records")
    timeline(rows)
    phases(rows)


if __name__ == "__main__":
    main()
