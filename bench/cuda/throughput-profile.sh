#!/usr/bin/env bash
# Offline throughput at 256 concurrent requests (1000 in / 1000 out, Llama-3-8B shapes, random
# weights) with the per-step time breakdown (EMBER_STEP_PROFILE=1: schedule, forward enqueue,
# GPU wait, logits download or device argmax, sampling, update; decode and prefill steps
# apart), plus the GPU sampling tests, in one call. Prebuilt binaries as in docs/CUDA_NOTES.md
# "Running on the lent GPU"; SETUP=1 unpacks .devdeps first.
#   BIN_DIR (default .devdeps/bin), LOG_DIR (default $OUT), MODEL_DIR (default /tmp/ember-llama3-8b),
#   RUNS="name=format[:kv-dtype][=VAR=value] ..." (default: bf16 with the host sampler, then bf16
#   and fp8 with device argmax), NUM_REQUESTS (256), OUTPUT_LEN (1000), SKIP_TESTS=1,
#   BIN_TAR (an .tar.xz of the binaries, unpacked into BIN_DIR),
#   NCU_RUN="format[:kv-dtype]": afterwards, Nsight Compute times every kernel of a few decode
#   steps (NCU_SKIP launches skipped first; a list gives one profile each) and
#   ncu_step_summary.py prints them by kernel.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
if [[ -n ${SETUP:-} ]]; then
  for f in "$root"/.devdeps/*.deb; do case $f in *icu-dev*|*brotli*|*libssl*) ;; *) dpkg -x "$f" / ;; esac; done
  pkg-config --exists icu-uc 2>/dev/null || dpkg -x "$root"/.devdeps/libicu-dev_*.deb /
  ldconfig -p | grep -q libbrotlienc.so.1 || dpkg -x "$root"/.devdeps/libbrotli1_*.deb /
  ldconfig -p | grep -q libssl.so.3 || dpkg -x "$root"/.devdeps/libssl3_*.deb /
  ldconfig
  export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  [[ -f $root/.devdeps/bin.tar.xz ]] && mkdir -p "$root/.devdeps/bin" && tar -xJf "$root/.devdeps/bin.tar.xz" -C "$root/.devdeps/bin"
fi
bin=${BIN_DIR:-$root/.devdeps/bin}
if [[ -n ${BIN_TAR:-} ]]; then mkdir -p "$bin" && tar -xJf "$BIN_TAR" -C "$bin"; fi
logs=${LOG_DIR:-${OUT:-/tmp/throughput-logs}}
model=${MODEL_DIR:-/tmp/ember-llama3-8b}
mkdir -p "$logs"
summary=()
note() { summary+=("$1"); echo "== $1"; }
start=$(date +%s)
note "profilers: nsys=$(command -v nsys || echo none) ncu=$(command -v ncu || echo none); $(nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader 2>/dev/null)"
python3 "$root/tools/make_cuda_bench_weights.py" "$model-2layers" --layers 2 >"$logs/weights_small.log" 2>&1
python3 "$root/tools/make_cuda_bench_weights.py" "$model" >"$logs/weights.log" 2>&1 &
wpid=$!
if [[ -z ${SKIP_TESTS:-} ]]; then
  timeout 120 "$bin/test_cuda_backend" --gtest_filter='CudaSample.*' >"$logs/test_sample.log" 2>&1
  note "CudaSample tests: rc=$? $(grep -c '^\[       OK \]' "$logs/test_sample.log") ok, $(grep -c '^\[  FAILED  \]' "$logs/test_sample.log") failed lines"
  grep -B2 -A6 "Failure" "$logs/test_sample.log" | head -30
  EMBER_FIXTURES_DIR=$root/tests/fixtures EMBER_CUDA_TEST_MODEL=$model-2layers timeout 200 "$bin/test_cuda_model" \
    --gtest_filter="${MODEL_TEST_FILTER:-CudaModel.DeviceArgmax*}" >"$logs/test_model.log" 2>&1
  note "whole-model tests: rc=$? $(grep -c '^\[       OK \]' "$logs/test_model.log") ok, $(grep -c '^\[  FAILED  \]' "$logs/test_model.log") failed lines"
  grep -B2 -A8 "Failure" "$logs/test_model.log" | head -40
fi
wait "$wpid"
note "weights: rc=$? ($(du -sh "$model" 2>/dev/null | cut -f1)) after $(( $(date +%s) - start )) s"
for run in ${RUNS:-bf16-host=auto=EMBER_GPU_SAMPLE=0 bf16=auto fp8=fp8}; do
  name=${run%%=*}; rest=${run#*=}; fmt=${rest%%=*}; var=
  [[ $rest == *=* ]] && var=${rest#*=}
  kv=auto; [[ $fmt == *:* ]] && { kv=${fmt#*:}; fmt=${fmt%%:*}; }
  t0=$(date +%s)
  if env ${var:+"$var"} EMBER_STEP_PROFILE=1 timeout "${THROUGHPUT_TIMEOUT:-240}" "$bin/ember" bench throughput \
       -m "$model" --device cuda --weight-format "$fmt" --kv-dtype "$kv" --num-requests "${NUM_REQUESTS:-256}" --concurrency 256 \
       --input-len 1000 --output-len "${OUTPUT_LEN:-1000}" --max-num-seqs 256 --max-num-batched-tokens 8192 \
       --json "$logs/throughput_$name.json" >"$logs/throughput_$name.log" 2>&1; then
    note "throughput $name ($fmt, kv $kv ${var}) in $(( $(date +%s) - t0 )) s: $(grep -E '^(output_tokens_per_s|mean_itl_ms|mean_ttft_ms) ' "$logs/throughput_$name.log" | tr -s ' ' | tr '\n' ' ')"
  else
    note "throughput $name failed or timed out: $(tail -2 "$logs/throughput_$name.log" | tr '\n' ' ')"
  fi
  sed -n '/^step profile/,$p' "$logs/throughput_$name.log"
done
if [[ -n ${NCU_RUN:-} ]]; then
  fmt=${NCU_RUN%%:*}; kv=auto; [[ $NCU_RUN == *:* ]] && kv=${NCU_RUN#*:}
  for skip in ${NCU_SKIP:-40000}; do  # several: one profile each (e.g. a prefill step and a decode step)
    t0=$(date +%s)
    timeout "${NCU_TIMEOUT:-200}" ncu --clock-control none --csv --metrics gpu__time_duration.sum \
      --launch-skip "$skip" --launch-count "${NCU_COUNT:-800}" \
      "$bin/ember" bench throughput -m "$model" --device cuda --weight-format "$fmt" --kv-dtype "$kv" \
      --num-requests 256 --concurrency 256 --input-len 1000 --output-len 400 --max-num-seqs 256 \
      --max-num-batched-tokens 8192 >"$logs/ncu_${fmt}_$skip.csv" 2>"$logs/ncu_${fmt}_$skip.err"
    note "ncu $NCU_RUN after $skip launches: rc=$? in $(( $(date +%s) - t0 )) s"
    python3 "$root/bench/cuda/ncu_step_summary.py" "$logs/ncu_${fmt}_$skip.csv" | tee "$logs/ncu_${fmt}_$skip.summary"
  done
fi
echo
echo "================ summary ($(( $(date +%s) - start )) s) ================"
for line in "${summary[@]}"; do echo "$line"; done
