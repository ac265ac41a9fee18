#!/usr/bin/env bash
# FP8 K/V cache and GPU sampling on the lent H200, in one call: the CUDA tests
# (test_cuda_backend, test_cuda_sampling, the fp8-KV and device-sampling whole-model tests on
# the fixtures and a 2-layer 8B-shaped checkpoint), then (unless TESTS_ONLY=1) batch-1 decode
# with a bf16 vs fp8 cache and offline throughput (256 concurrent, 1000 in) greedy vs
# temperature 0.8 / top-p 0.95 sampled on the GPU vs on the host, bf16 vs fp8 cache.
# Binaries built elsewhere: BIN_DIR holds ember, test_cuda_backend, test_cuda_sampling,
# test_cuda_model (or BIN_TAR, an .tar.xz of them); SETUP=1 unpacks the .deb files in DEB_DIR
# (default .gpu) first. LOG_DIR (default $OUT), MODEL_DIR (default /tmp/ember-llama3-8b),
# OUTPUT_LEN (1000), HOST_OUTPUT_LEN (200: host sampling is slow), RUNS (see below).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
debs=${DEB_DIR:-$root/.gpu}
source "$root/bench/cuda/device-setup.sh"
bin=${BIN_DIR:-/tmp/ember-bin}
if [[ -n ${BIN_TAR:-} ]]; then mkdir -p "$bin" && tar -xJf "$BIN_TAR" -C "$bin"; fi
logs=${LOG_DIR:-${OUT:-/tmp/fp8kv-logs}}
model=${MODEL_DIR:-/tmp/ember-llama3-8b}
mkdir -p "$logs"
summary=()
note() { summary+=("$1"); echo "== $1"; }
start=$(date +%s)
note "$(nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader 2>/dev/null)"
python3 "$root/tools/make_cuda_bench_weights.py" "$model-2layers" --layers 2 >"$logs/weights_small.log" 2>&1
if [[ -z ${TESTS_ONLY:-} ]]; then
  python3 "$root/tools/make_cuda_bench_weights.py" "$model" >"$logs/weights.log" 2>&1 &
  wpid=$!
fi
tests() {  # name binary filter timeout
  EMBER_FIXTURES_DIR=$root/tests/fixtures EMBER_CUDA_TEST_MODEL=$model-2layers timeout "$4" "$bin/$2" \
    --gtest_filter="$3" >"$logs/$1.log" 2>&1
  note "$1: rc=$? $(grep -c '^\[       OK \]' "$logs/$1.log") ok, $(grep -c '^\[  FAILED  \]' "$logs/$1.log") failed lines, $(grep -c '^\[  SKIPPED \]' "$logs/$1.log") skipped lines"
  grep -B2 -A8 "Failure" "$logs/$1.log" | head -40
}
if [[ -z ${SKIP_TESTS:-} ]]; then
  tests test_backend test_cuda_backend '*' 120
  tests test_sampling test_cuda_sampling '*' 180
  grep -E "chi2|sample_rows" "$logs/test_sampling.log"
  tests test_model test_cuda_model "${MODEL_TEST_FILTER:-CudaModel.Fp8Kv*:CudaModel.DeviceSampling*:CudaModel.DeviceArgmax*:CudaModel.LargeShapes*}" 300
  grep -E "fp8 vs CPU|device sampling vs" "$logs/test_model.log"
fi
[[ -n ${TESTS_ONLY:-} ]] && { echo "== summary ($(( $(date +%s) - start )) s)"; printf '%s\n' "${summary[@]}"; exit 0; }
wait "$wpid"
note "weights: rc=$? after $(( $(date +%s) - start )) s"
for kv in ${SPEED_KV:-bf16 fp8_e4m3}; do
  timeout 120 "$bin/ember" bench speed -m "$model" --device cuda --kv-dtype "$kv" -r 2 -p 128 -n 256 >"$logs/speed_$kv.log" 2>&1
  note "bench speed -p 128 -n 256 --kv-dtype $kv: rc=$? $(grep -E 'tg256|pp128' "$logs/speed_$kv.log" | tr -s ' ' | tr '\n' ' ')"
done
# name=kv=output_len=sampling[=VAR=value]; sampling: greedy or sampled (temperature 0.8, top-p 0.95)
for run in ${RUNS:-greedy-bf16=bf16=1000=greedy sampled-bf16=bf16=1000=sampled greedy-fp8kv=fp8_e4m3=1000=greedy sampled-fp8kv=fp8_e4m3=1000=sampled host-sampled-bf16=bf16=200=sampled=EMBER_GPU_SAMPLE_ROWS=0 gpu-sampled-bf16-200=bf16=200=sampled}; do
  IFS== read -r name kv olen mode var val <<<"$run"
  extra=(); [[ $mode == sampled ]] && extra=(--temperature 0.8 --top-p 0.95)
  t0=$(date +%s)
  if env ${var:+"$var=$val"} timeout "${THROUGHPUT_TIMEOUT:-150}" "$bin/ember" bench throughput -m "$model" --device cuda \
       --kv-dtype "$kv" --num-requests 256 --concurrency 256 --input-len 1000 --output-len "$olen" \
       --max-num-seqs 256 --max-num-batched-tokens 8192 "${extra[@]}" --json "$logs/throughput_$name.json" \
       >"$logs/throughput_$name.log" 2>&1; then
    note "throughput $name (kv $kv, out $olen, $mode ${var:+$var=$val}) in $(( $(date +%s) - t0 )) s: $(grep -E '^(output_tokens_per_s|mean_itl_ms|mean_ttft_ms) ' "$logs/throughput_$name.log" | tr -s ' ' | tr '\n' ' ')"
  else
    note "throughput $name failed or timed out: $(tail -2 "$logs/throughput_$name.log" | tr '\n' ' ')"
  fi
done
echo
echo "================ summary ($(( $(date +%s) - start )) s) ================"
printf '%s\n' "${summary[@]}"
