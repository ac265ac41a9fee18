#!/usr/bin/env python3
"""Summarizes stall-profile.sh's `ncu --page raw --csv` output: per kernel (name and grid), the
duration, the instructions issued, and the share of each warp stall reason, largest first,
averaged over the kernel's launches: from the warp-state counters
(smsp__average_warps_issue_stalled_*_per_issue_active: warps stalled for that reason per issued
instruction) and from PC sampling (smsp__pcsamp_warps_issue_stalled_*)."""
import collections
import csv
import re
import sys


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def main(path):
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]
    if not lines:
        print("no ncu rows in", path)
        return
    reader = csv.reader(lines)
    header = next(reader)
    col = {name: i for i, name in enumerate(header)}
    # (the raw page has one row a launch and a column a metric; a units row, whose ID is empty,
    # follows the header)
    rows = [r for r in reader if len(r) == len(header) and ("ID" not in col or number(r[col["ID"]]) is not None)]
    latency = [h for h in header if re.match(r"smsp__average_warps_issue_stalled_\w+_per_issue_active\.ratio$", h)]
    sampled = [h for h in header if re.match(r"smsp__pcsamp_warps_issue_stalled_\w+$", h) and "not_issued" not in h]
    groups = collections.OrderedDict()
    for r in rows:
        # "void unnamed>::qgemv_staged_kernel<0, 1, 1, 4, 0, 2, 1, 0>(args)": the name and its
        # template arguments (format, streams, units a wait, ring, cluster, staging, rope, prefetch)
        full = r[col["Kernel Name"]].replace("void ", "", 1)
        name = full[:full.find(">(") + 1] if ">(" in full else full.split("(")[0]
        name = name.replace("unnamed>::", "")
        key = (name, r[col["Grid Size"]] if "Grid Size" in col else "")
        groups.setdefault(key, []).append(r)
    print(f"{len(rows)} launches, {len(groups)} kernels (ncu alone: no PDL neighbours)")
    for (name, grid), rs in groups.items():
        def mean(metric):
            vals = [number(r[col[metric]]) for r in rs if metric in col]
            vals = [v for v in vals if v is not None]
            return sum(vals) / len(vals) if vals else 0.0
        dur = mean("gpu__time_duration.sum")
        inst = mean("smsp__inst_executed.sum")
        print(f"\n{name} grid {grid}: {len(rs)} launches, {dur / 1000.0:.2f} us, {inst:.0f} warp instructions")
        for label, metrics, prefix in (("warps stalled per issue, by reason", latency,
                                        "smsp__average_warps_issue_stalled_"),
                                       ("PC samples", sampled, "smsp__pcsamp_warps_issue_stalled_")):
            vals = [(m[len(prefix):].split(".")[0].replace("_per_issue_active", ""), mean(m)) for m in metrics]
            total = sum(v for _, v in vals)
            if total <= 0:
                continue
            top = sorted(vals, key=lambda kv: -kv[1])[:8]
            print(f"  {label} ({total:.1f} in all): " + ", ".join(f"{k} {100.0 * v / total:.0f}%" for k, v in top if v > 0))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "stalls.csv")
