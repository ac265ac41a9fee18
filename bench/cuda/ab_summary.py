#!/usr/bin/env python3
"""Summarizes ab-speed.sh's summary.txt: for each weight format, each run spec's tok/s over the
rounds, their mean, and the mean's change against the format's first spec (the reference: put
the default or the peer first in RUNS). Runs that failed (rc != 0 or no tok/s) are counted.

usage: ab_summary.py summary.txt
"""
import collections
import re
import sys

LINE = re.compile(r"^(\S+) (\S+) round (\d+): rc=(\d+)\s*(?:tg\d+: ([0-9.]+) tok/s)?")


def summarize(lines):
    runs = collections.OrderedDict()  # (format, spec) -> [tok/s], failures
    for line in lines:
        m = LINE.match(line)
        if not m:
            continue
        fmt, spec, _, rc, tps = m.groups()
        entry = runs.setdefault((fmt, spec), {"tps": [], "failed": 0})
        if rc == "0" and tps:
            entry["tps"].append(float(tps))
        else:
            entry["failed"] += 1
    out = []
    first = {}
    for (fmt, spec), e in runs.items():
        mean = sum(e["tps"]) / len(e["tps"]) if e["tps"] else None
        ref = first.setdefault(fmt, mean)
        vals = " / ".join(f"{v:.2f}" for v in e["tps"]) or "-"
        delta = f"{(mean / ref - 1) * 100:+.2f}%" if mean and ref else "-"
        failed = f", {e['failed']} without a tok/s (rc or output)" if e["failed"] else ""
        mean_s = f"{mean:.2f}" if mean else "-"
        out.append(f"{fmt:5} {spec:60} {vals:30} mean {mean_s:>8} {delta:>8}{failed}")
    return out


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    with open(sys.argv[1], encoding="utf-8") as f:
        for row in summarize(f.read().splitlines()):
            print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
