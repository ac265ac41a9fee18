#!/usr/bin/env bash
# Same-call A/B of batch-1 decode on the lent GPU: several binaries (and environment settings
# of them) alternated run by run, so that the clock, the machine and the weights are the same for
# every side. Small differences need this: a build whose only change is a kernel that never runs
# can move batch-1 tok/s by 1-2% (docs/CUDA_NOTES.md "Session 30"), so compare within one call,
# and across two builds before trusting a gain of that size.
#
#   BIN_TAR=bins.tar.xz SETUP=1 DEB_DIR=debs RUNS="ember ember-peer ember:EMBER_CUDA_QGEMV_R4B=0" \
#     FORMATS="int4 fp8" ROUNDS=2 bench/cuda/ab-speed.sh
#
# BIN_TAR: an .tar.xz of the binaries RUNS names (built elsewhere, e.g. this tree's `ember` and a
# peer built from HEAD in a git worktree, or with peer-build.sh). RUNS: NAME[:VAR=VALUE[,VAR=VALUE]]
# each. FORMATS (default int4), ROUNDS (default 2), SPEED_ARGS (default "-r 2 -p 128 -n 256").
# TESTS: test binaries in the tar run first (each with TEST_ENV, settings separated by spaces, one
# run per setting, each NAME=VALUE[,NAME=VALUE]; default one plain run). Logs and summary.txt go to LOG_DIR
# (default $OUT). The weights are tools/make_cuda_bench_weights.py's random Llama-3-8B.
# TRACES: FORMAT:NAME[:VAR=VALUE[,...]] each, run after the speed rounds under CUPTI (the tar's
# libember_cupti_trace.so, bench/cuda/cupti_trace.cpp) and summarized per kernel by
# cupti_trace_summary.py into trace-*.txt (each kernel's share of a decode step's critical path).
# PROBES: FORMAT:NAME[:VAR=VALUE[,...]] each, NAME a -DEMBER_CUDA_PROBE=ON build in the tar, run
# last with the in-kernel probe recording graph launches 120 and 121 (EMBER_PROBE_AT) and
# summarized by probe_summary.py into probe-*.txt (when each kernel's blocks enter, pass their PDL
# wait, stage x, ... relative to the previous kernel's last store). The probe's records slow the
# run (H100, session 46: bf16 184 -> 129 tok/s, int4 512 -> 224): compare probed runs only.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck disable=SC2034  # (read by device-setup.sh)
debs=${DEB_DIR:-$root/.devdeps}
source "$root/bench/cuda/device-setup.sh"
bin=/tmp/ember-ab-bin
mkdir -p "$bin" && tar -xJf "$BIN_TAR" -C "$bin"
logs=${LOG_DIR:-$OUT}
mkdir -p "$logs"
model=/tmp/ember-llama3-8b
start=$(date +%s)
note() { echo "$*" | tee -a "$logs/summary.txt"; }
# A log file's name for a run spec: "=" becomes "-" and anything else but [A-Za-z0-9_-] "_" (the
# device tool drops files whose names hold "=").
file_tag() {
  local s=${1//=/-}
  echo "${s//[^A-Za-z0-9_-]/_}"
}
note "$(nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem --format=csv,noheader 2>/dev/null)"
[ -f "$model-2layers/config.json" ] || python3 "$root/tools/make_cuda_bench_weights.py" "$model-2layers" --layers 2 >/dev/null 2>&1
wpid=
if [ ! -f "$model/config.json" ]; then
  python3 "$root/tools/make_cuda_bench_weights.py" "$model" >/dev/null 2>&1 &
  wpid=$!
fi
for t in ${TESTS:-}; do
  for te in ${TEST_ENV:-EMBER_AB_PLAIN=1}; do
    log="$logs/$t-$(file_tag "$te").log"
    IFS=, read -r -a tenv <<<"$te"
    env "${tenv[@]}" EMBER_FIXTURES_DIR="$root/tests/fixtures" EMBER_CUDA_TEST_MODEL="$model-2layers" timeout 300 "$bin/$t" >"$log" 2>&1
    note "$t $te: rc=$? $(grep -c '^\[       OK \]' "$log") ok, $(grep -c '^\[  FAILED  \] [A-Z]' "$log") failed ($(( $(date +%s) - start )) s)"
  done
done
[ -n "$wpid" ] && wait "$wpid"
for r in $(seq 1 "${ROUNDS:-2}"); do
  for f in ${FORMATS:-int4}; do
    for spec in ${RUNS:-ember}; do
      name=${spec%%:*}
      envs=()
      [[ $spec == *:* ]] && IFS=, read -r -a envs <<<"${spec#*:}"
      log="$logs/speed-$f-$(file_tag "$spec")-$r.log"
      # shellcheck disable=SC2086
      env "${envs[@]}" timeout 200 "$bin/$name" bench speed -m "$model" --device cuda --weight-format "$f" \
        ${SPEED_ARGS:--r 2 -p 128 -n 256} >"$log" 2>&1
      note "$f $spec round $r: rc=$? $(grep -E 'tg[0-9]+' "$log" | tail -1 | tr -s ' ') ($(( $(date +%s) - start )) s)"
    done
  done
done
# Each spec's rounds, mean and change against the format's first spec.
echo "== tok/s by run (ab_summary.py)"
python3 "$root/bench/cuda/ab_summary.py" "$logs/summary.txt" | tee "$logs/ab-table.txt"
# FORMAT:NAME[:VAR=VALUE[,...]] -> f, name, envs, tag (a TRACES / PROBES entry).
parse_spec() {
  local rest=${1#*:}
  f=${1%%:*} name=${rest%%:*} tag=$(file_tag "$1")
  envs=()
  [[ $rest == *:* ]] && IFS=, read -r -a envs <<<"${rest#*:}"
  return 0
}
for spec in ${TRACES:-}; do
  parse_spec "$spec"
  [ -f "$bin/libember_cupti_trace.so" ] || { note "trace $spec: no libember_cupti_trace.so in the tar"; break; }
  env "${envs[@]}" CUDA_INJECTION64_PATH="$bin/libember_cupti_trace.so" EMBER_TRACE_OUT="$logs/trace-$tag.csv" \
    EMBER_TRACE_SKIP=2000 timeout 200 "$bin/$name" bench speed -m "$model" --device cuda --weight-format "$f" \
    -r 1 -p 128 -n 256 >"$logs/trace-$tag.log" 2>&1
  rc=$?
  python3 "$root/bench/cuda/cupti_trace_summary.py" "$logs/trace-$tag.csv" >"$logs/trace-$tag.txt" 2>&1
  note "trace $spec: rc=$rc, summary trace-$tag.txt ($(( $(date +%s) - start )) s)"
done
for spec in ${PROBES:-}; do
  parse_spec "$spec"
  env "${envs[@]}" EMBER_PROBE_AT=120 EMBER_PROBE_OUT="$logs/probe-$tag.csv" timeout 200 "$bin/$name" bench speed \
    -m "$model" --device cuda --weight-format "$f" -r 1 -p 128 -n 256 >"$logs/probe-$tag.log" 2>&1
  rc=$?
  python3 "$root/bench/cuda/probe_summary.py" "$logs/probe-$tag.csv" >"$logs/probe-$tag.txt" 2>&1
  note "probe $spec: rc=$rc, summary probe-$tag.txt ($(( $(date +%s) - start )) s)"
done
