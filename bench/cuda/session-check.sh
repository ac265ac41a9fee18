#!/usr/bin/env bash
# One device call that checks a tree's CUDA work end to end on the lent H200 and measures it:
# every CUDA test binary (backend ops, GPU sampling, whole model on the fixtures and a 2-layer
# Llama-3-8B-shaped checkpoint), the decode-attention kernel bench (bf16 vs fp8 K/V), batch-1
# decode of the random 8B for each weight format, and offline throughput (256 x 1000/1000).
# Binaries built elsewhere: BIN_TAR (an .tar.xz of ember, test_cuda_backend, test_cuda_model,
# test_cuda_sampling, bench_cuda_kernels); SETUP=1 unpacks the .deb files in DEB_DIR first
# (see device-setup.sh). LOG_DIR (default $OUT) gets one log per part and summary.txt.
#   FORMATS (bf16 int4 fp8 int8), THROUGHPUT ("fp8:fp8_e4m3 auto:fp8_e4m3": weight format:kv;
#   set either to the empty string to skip that part), SKIP_TESTS=1 (no tests, no decode
#   kernel bench: a call that only measures),
#   SMALL_BATCH (weight formats of an 8 x 128/256 run at concurrency 8; default none),
#   MID_BATCH (weight formats of a 32 x 128/256 run at concurrency 32, where int4 / int8 decode
#   steps take the packed GEMM; default none), LARGE_BATCH (weight formats of 128 and 256 x
#   128/256 runs, where they take the wgmma GEMM; default none), PREFILL (weight formats of a
#   4096-token prefill, `bench speed -p 4096 -n 1`, with the prefill-attention kernel bench and
#   PyTorch's prefill / decode loop, bench/cuda/torch_llama.py, beside them; default none).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
debs=${DEB_DIR:-$root/.devdeps}
source "$root/bench/cuda/device-setup.sh"
bin=/tmp/ember-bin
mkdir -p "$bin" && tar -xJf "$BIN_TAR" -C "$bin"
logs=${LOG_DIR:-$OUT}
model=/tmp/ember-llama3-8b
mkdir -p "$logs"
summary=()
note() { summary+=("$1"); echo "== $1"; }
start=$(date +%s)
note "$(nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader 2>/dev/null)"
# (weights left by an earlier call on the same machine are reused)
[ -f "$model-2layers/config.json" ] || python3 "$root/tools/make_cuda_bench_weights.py" "$model-2layers" --layers 2 >/dev/null 2>&1
[ -f "$model/config.json" ] || python3 "$root/tools/make_cuda_bench_weights.py" "$model" >/dev/null 2>&1 &
wpid=$!
tests() {  # binary timeout
  EMBER_FIXTURES_DIR=$root/tests/fixtures EMBER_CUDA_TEST_MODEL=$model-2layers timeout "$2" "$bin/$1" >"$logs/$1.log" 2>&1
  note "$1: rc=$? $(grep -c '^\[       OK \]' "$logs/$1.log") ok, $(grep -c '^\[  FAILED  \] [A-Z]' "$logs/$1.log") failed ($(( $(date +%s) - start )) s)"
  grep -A6 "Failure" "$logs/$1.log" | head -24
}
if [[ ${SKIP_TESTS:-0} != 1 ]]; then
  tests test_cuda_backend 200
  tests test_cuda_sampling 150
  tests test_cuda_model 300
  timeout 120 "$bin/bench_cuda_kernels" decode >"$logs/kernels.log" 2>&1
  note "bench_cuda_kernels decode: rc=$?"
  grep -iE "decode-attn" "$logs/kernels.log" | head -20
fi
wait "$wpid"
note "weights ready after $(( $(date +%s) - start )) s"
for f in ${FORMATS-bf16 int4 fp8 int8}; do
  timeout 120 "$bin/ember" bench speed -m "$model" --device cuda --weight-format "$f" -r 2 -p 128 -n 256 >>"$logs/speed.log" 2>&1
  note "bench speed -p 128 -n 256 --weight-format $f: rc=$? $(grep -E 'tg256' "$logs/speed.log" | tail -1 | tr -s ' ')"
done
for run in ${THROUGHPUT-fp8:fp8_e4m3 auto:fp8_e4m3}; do
  fmt=${run%%:*} kv=${run#*:}
  timeout 150 "$bin/ember" bench throughput -m "$model" --device cuda --weight-format "$fmt" --kv-dtype "$kv" \
    --num-requests 256 --concurrency 256 --input-len 1000 --output-len 1000 --max-num-seqs 256 \
    --max-num-batched-tokens 8192 >>"$logs/throughput.log" 2>&1
  note "throughput 256 x 1000/1000 weights $fmt kv $kv: rc=$? $(grep -E '^(output_tokens_per_s|mean_itl_ms|mean_ttft_ms) ' "$logs/throughput.log" | tail -3 | tr -s ' ' | tr '\n' ' ')"
done
for fmt in ${SMALL_BATCH:-}; do
  timeout 90 "$bin/ember" bench throughput -m "$model" --device cuda --weight-format "$fmt" --num-requests 8 \
    --concurrency 8 --input-len 128 --output-len 256 --max-num-seqs 8 >>"$logs/small-batch.log" 2>&1
  note "8 x 128/256 at concurrency 8, weights $fmt: rc=$? $(grep -E '^(output_tokens_per_s|mean_itl_ms) ' "$logs/small-batch.log" | tail -2 | tr -s ' ' | tr '\n' ' ')"
done
for fmt in ${MID_BATCH:-}; do
  timeout 90 "$bin/ember" bench throughput -m "$model" --device cuda --weight-format "$fmt" --num-requests 32 \
    --concurrency 32 --input-len 128 --output-len 256 --max-num-seqs 32 >>"$logs/mid-batch.log" 2>&1
  note "32 x 128/256 at concurrency 32, weights $fmt: rc=$? $(grep -E '^(output_tokens_per_s|mean_itl_ms) ' "$logs/mid-batch.log" | tail -2 | tr -s ' ' | tr '\n' ' ')"
done
for fmt in ${LARGE_BATCH:-}; do
  for c in 128 256; do
    timeout 90 "$bin/ember" bench throughput -m "$model" --device cuda --weight-format "$fmt" --num-requests $c \
      --concurrency $c --input-len 128 --output-len 256 --max-num-seqs $c >>"$logs/large-batch.log" 2>&1
    note "$c x 128/256 at concurrency $c, weights $fmt: rc=$? $(grep -E '^(output_tokens_per_s|mean_itl_ms) ' "$logs/large-batch.log" | tail -2 | tr -s ' ' | tr '\n' ' ')"
  done
done
if [[ -n ${PREFILL:-} ]]; then
  timeout 90 "$bin/bench_cuda_kernels" prefill >"$logs/prefill-kernels.log" 2>&1
  note "bench_cuda_kernels prefill: rc=$? $(grep -E 'bf16 causal 4096 h32/kv8 .*\(default\)' "$logs/prefill-kernels.log" | cut -d'|' -f4-5)"
  for fmt in $PREFILL; do
    timeout 90 "$bin/ember" bench speed -m "$model" --device cuda --weight-format "$fmt" -r 3 -p 4096 -n 1 \
      >>"$logs/prefill.log" 2>&1
    note "bench speed -p 4096 --weight-format $fmt: rc=$? $(grep -E '^pp4096' "$logs/prefill.log" | tail -1)"
  done
  PYTHONUNBUFFERED=1 timeout 150 python3 "$root/bench/cuda/torch_llama.py" >"$logs/torch_llama.log" 2>&1
  note "torch_llama.py: rc=$? $(grep -E 'RESULT\|(prefill|decode)' "$logs/torch_llama.log" | cut -d'|' -f3-5 | tr '\n' ' ')"
fi
echo "================ summary ($(( $(date +%s) - start )) s) ================"
printf '%s\n' "${summary[@]}" | tee "$logs/summary.txt"
