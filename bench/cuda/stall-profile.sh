#!/usr/bin/env bash
# Where the warps of a batch-1 decode step's kernels stall (Nsight Compute's warp-state counters
# and PC sampling), kernel by kernel: the question it answers is what a GEMV's fixed cost at
# its start and end is made of (instruction fetch, "no_instruction", against memory and
# barriers). Run on the lent GPU after ab-speed.sh unpacked the binaries (BIN_DIR, default
# /tmp/ember-ab-bin) and wrote the random Llama-3-8B (MODEL, default /tmp/ember-llama3-8b).
#   FORMATS (default "int4"), BINARIES (names in BIN_DIR, default "ember"), NCU_COUNT (kernels
#   profiled, default 60: the first layers of the warm-up step of `bench speed -p 1 -n 1`,
#   eager), NCU_FILTER (ncu -k, e.g. "regex:qgemv_staged|attn|gemv_bf16"; default all).
# ncu replays each kernel alone, so what it shows is a kernel without its PDL neighbours.
# Writes LOG_DIR (default $OUT)/stalls-FORMAT-BINARY.csv and the summary stalls-FORMAT-BINARY.txt.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIN_DIR:-/tmp/ember-ab-bin}
model=${MODEL:-/tmp/ember-llama3-8b}
logs=${LOG_DIR:-$OUT}
# shellcheck disable=SC2034  # (read by device-setup.sh: with SETUP unset it only sets the loader path)
debs=${DEB_DIR:-$root/.devdeps}
source "$root/bench/cuda/device-setup.sh"
ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu /usr/local/cuda/nsight-compute*/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || true)
[ -n "$ncu_bin" ] || { echo "stall-profile: no ncu on this machine" | tee -a "$logs/summary.txt"; exit 1; }
filter=()
[ -n "${NCU_FILTER:-}" ] && filter=(-k "$NCU_FILTER")
for f in ${FORMATS:-int4}; do
  for b in ${BINARIES:-ember}; do
    out="$logs/stalls-$f-$b"
    timeout 300 "$ncu_bin" --clock-control none --cache-control none --section WarpStateStats \
      --section SourceCounters --metrics gpu__time_duration.sum,smsp__inst_executed.sum --page raw --csv \
      "${filter[@]}" --launch-count "${NCU_COUNT:-60}" \
      "$bin/$b" bench speed -m "$model" --device cuda --weight-format "$f" -p 1 -n 1 -r 1 >"$out.csv" 2>"$out.err"
    rc=$?
    python3 "$root/bench/cuda/stall_summary.py" "$out.csv" >"$out.txt" 2>&1
    echo "stall profile $f $b: rc=$rc, summary $(basename "$out").txt" | tee -a "$logs/summary.txt"
  done
done
