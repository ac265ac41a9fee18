#!/usr/bin/env bash
# Weight-only int4 / fp8 on the GPU in one go (prebuilt binaries, see docs/CUDA_NOTES.md
# "Running on the lent GPU"): the backend-ops tests (CudaQuant.* first), the whole-model tests
# (fixtures and a 2-layer Llama-3-8B-shaped checkpoint, int4/fp8 vs bf16), the packed GEMV
# kernels next to the copy bandwidth and the BF16 GEMV, and batch-1 decode of the random-weight
# Llama-3-8B in bf16, int4 and fp8 (`ember bench speed -p 128 -n 256`) in the same run.
#   BIN_DIR (default .devdeps/bin), LOG_DIR (default $OUT), MODEL_DIR (default /tmp/ember-llama3-8b),
#   FORMATS (default "auto int4 fp8"), SKIP_TESTS=1, SKIP_KERNELS=1, MODEL_TEST_FILTER (gtest filter),
#   EXTRA_SPEED="name=fmt=VAR=value ...", EXTRA_KERNELS="VAR=value ..." (packed GEMVs again under each),
#   THROUGHPUT="auto fp8" (`ember bench throughput`, 256 concurrent 1000/1000, per format).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIN_DIR:-$root/.devdeps/bin}
logs=${LOG_DIR:-${OUT:-/tmp/quant-logs}}
model=${MODEL_DIR:-/tmp/ember-llama3-8b}
mkdir -p "$logs"
summary=()
note() { summary+=("$1"); echo "== $1"; }
start=$(date +%s)
python3 "$root/tools/make_cuda_bench_weights.py" "$model-2layers" --layers 2 >"$logs/weights_small.log" 2>&1 ||
  note "2-layer checkpoint failed"
python3 "$root/tools/make_cuda_bench_weights.py" "$model" >"$logs/weights.log" 2>&1 &
wpid=$!
if [[ -z ${SKIP_TESTS:-} ]]; then
  timeout 300 "$bin/test_cuda_backend" --gtest_filter='CudaQuant.*' >"$logs/test_quant.log" 2>&1
  note "CudaQuant tests: rc=$? $(grep -c '^\[       OK \]' "$logs/test_quant.log") ok, $(grep -c '^\[  FAILED  \]' "$logs/test_quant.log") failed lines"
  grep -B2 -A6 "Failure" "$logs/test_quant.log" | head -60
  timeout 300 "$bin/test_cuda_backend" --gtest_filter='-CudaQuant.*' >"$logs/test_backend.log" 2>&1
  note "other backend tests: rc=$? $(grep -c '^\[       OK \]' "$logs/test_backend.log") ok, $(grep -c '^\[  FAILED  \]' "$logs/test_backend.log") failed lines"
  grep -B2 -A6 "Failure" "$logs/test_backend.log" | head -30
  EMBER_FIXTURES_DIR=$root/tests/fixtures EMBER_CUDA_TEST_MODEL=$model-2layers \
    timeout 400 "$bin/test_cuda_model" --gtest_filter="${MODEL_TEST_FILTER:-*}" >"$logs/test_model.log" 2>&1
  note "whole-model tests: rc=$? $(grep -c '^\[       OK \]' "$logs/test_model.log") ok, $(grep -c '^\[  FAILED  \]' "$logs/test_model.log") failed lines"
  grep -E "rel error|Failure|Expected|Which is|actual" "$logs/test_model.log" | grep -v "^\[" | head -60
fi
if [[ -z ${SKIP_KERNELS:-} ]]; then
  timeout 240 "$bin/bench_cuda_kernels" gemv >"$logs/bench_gemv.log" 2>&1
  note "bench_cuda_kernels gemv: rc=$?"
  for v in ${EXTRA_KERNELS:-}; do  # VAR=value: the packed GEMVs again under it
    env "$v" timeout 120 "$bin/bench_cuda_kernels" qgemv 2>&1 | grep '^RESULT|qgemv' | sed "s/|ember /|$v /" >>"$logs/bench_gemv.log"
  done
fi
wait "$wpid"
note "weights: rc=$? ($(du -sh "$model" 2>/dev/null | cut -f1)) after $(( $(date +%s) - start )) s"
speed() {  # name format [VAR=value ...]
  local name=$1 fmt=$2
  shift 2
  env "$@" timeout 200 "$bin/ember" bench speed -m "$model" --device cuda -r 3 -p 128 -n 256 --weight-format "$fmt" \
    >"$logs/speed_$name.log" 2>&1 || { note "speed $name failed"; tail -5 "$logs/speed_$name.log"; return; }
  note "speed $name: $(grep -E '^(pp|tg)[0-9]+:' "$logs/speed_$name.log" | tr '\n' ' ')"
}
for f in ${FORMATS:-auto int4 fp8}; do speed "$f" "$f"; done
for v in ${EXTRA_SPEED:-}; do  # name=format=VAR=value
  n=${v%%=*}; r=${v#*=}; speed "$n" "${r%%=*}" "${r#*=}"
done
for f in ${THROUGHPUT:-}; do  # offline batch: 256 requests in flight, 1000 in / 1000 out
  if timeout "${THROUGHPUT_TIMEOUT:-240}" "$bin/ember" bench throughput -m "$model" --device cuda --weight-format "$f" \
       --num-requests 256 --concurrency 256 --input-len 1000 --output-len 1000 --max-num-seqs 256 \
       --max-num-batched-tokens 8192 --json "$logs/throughput_$f.json" >"$logs/throughput_$f.log" 2>&1; then
    note "throughput $f (256 x 1000/1000): $(grep -iE 'output|tok/s' "$logs/throughput_$f.log" | head -4 | tr '\n' ' ')"
  else
    note "throughput $f failed or timed out: $(tail -2 "$logs/throughput_$f.log" | tr '\n' ' ')"
  fi
done
echo
echo "================ summary ($(( $(date +%s) - start )) s) ================"
for line in "${summary[@]}"; do echo "$line"; done
grep -h '^RESULT|' "$logs"/bench_gemv.log 2>/dev/null | grep -E "ceiling|qgemv|qgemm|backend pick|cublasLt" |
  awk -F'|' '{ printf "%-7s %-62s %9.1f %-8s %s\n", $2, substr($3, 1, 62), $4, $5, $6 }'
