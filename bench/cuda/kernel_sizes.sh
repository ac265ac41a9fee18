#!/usr/bin/env bash
# Prints the SASS code size of every kernel in the listed CUDA sources of src/backend/cuda, as
# this tree's CUDA build compiles them (sm_90a), largest first. Worth a look before and after a
# kernel change: the batch-1 packed GEMV ran its old path 4.6% slower once 13 KB of code it never
# ran sat in the same kernel (docs/CUDA_NOTES.md, "Session 28"; the cause is open).
#
#   bench/cuda/kernel_sizes.sh qgemv_staged.cu attention.cu
#
# Needs a configured CUDA tree in BUILD (default build-cuda) with
# -DCMAKE_EXPORT_COMPILE_COMMANDS=ON; runs on a machine without a GPU.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 FILE.cu [FILE.cu ...]" >&2; exit 2; }
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${BUILD:-$root/build-cuda}" && pwd)
[ -f "$build/compile_commands.json" ] || { echo "no $build/compile_commands.json (configure with -DCMAKE_EXPORT_COMPILE_COMMANDS=ON)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for f in "$@"; do
  cmd=$(python3 - "$build/compile_commands.json" "$root/src/backend/cuda/$f" "$work/${f%.cu}.cubin" <<'PY'
import json, re, shlex, sys
db, src, out = sys.argv[1:]
entry = next(e for e in json.load(open(db)) if e["file"] == src)
args = shlex.split(entry["command"])
keep, skip = [], 0
for a in args:
    if skip:
        skip -= 1
        continue
    if a in ("-o", "-MT", "-MF"):
        skip = 1
        continue
    if a in ("-c", "-MD") or a.startswith("--generate-code"):
        continue
    keep.append(a)
keep[-1:] = ["-arch=sm_90a", "-cubin", "-o", out, keep[-1]]
print(shlex.join(keep))
PY
)
  (cd "$build" && eval "$cmd")
done
python3 - "$work" <<'PY'
import glob, re, subprocess, sys
rows = []
for cubin in glob.glob(f"{sys.argv[1]}/*.cubin"):
    out = subprocess.run(["readelf", "-SW", cubin], capture_output=True, text=True).stdout
    for line in out.splitlines():
        m = re.search(r"\] \.text\.(\S+)\s+PROGBITS\s+\w+\s+\w+\s+(\w+)", line)
        if m:
            name = subprocess.run(["c++filt", m.group(1)], capture_output=True, text=True).stdout.strip()
            rows.append((int(m.group(2), 16), cubin.split("/")[-1], name))
for size, f, name in sorted(rows, reverse=True):
    print(f"{size:8d}  {f:24s} {name[:200]}")
PY
