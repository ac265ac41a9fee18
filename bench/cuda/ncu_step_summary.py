#!/usr/bin/env python3
"""Summarizes `ncu --csv --metrics gpu__time_duration.sum` output of one decode step: time per
kernel (grouped by name and grid), count, and the total, largest first."""
import collections
import csv
import sys


def main(path):
    rows = []
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        v = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "ns")
        us = v / 1000.0 if unit == "nsecond" or unit == "ns" else (v if unit in ("usecond", "us") else v * 1000.0)
        name = r["Kernel Name"].split("(")[0][:60]
        rows.append((name, r.get("Grid Size", ""), us))
    groups = collections.OrderedDict()
    for name, grid, us in rows:
        g = groups.setdefault((name, grid), [0, 0.0])
        g[0] += 1
        g[1] += us
    total = sum(us for _, _, us in rows)
    print(f"{len(rows)} kernels, {total:.1f} us in total (isolated kernel times, no launch gaps)")
    for (name, grid), (n, us) in sorted(groups.items(), key=lambda kv: -kv[1][1])[:25]:
        print(f"{us:9.1f} us  {n:4d} x {us / n:7.2f} us  grid {grid:>14}  {name}")


if __name__ == "__main__":
    main(sys.argv[1])
