#!/usr/bin/env bash
# One device call on a lent machine with two or more GPUs: tensor parallel over NCCL against one
# GPU, same binaries, same run. Checks (test_cuda_model, the TensorParallel case on the fixtures
# and on a 2-layer Llama-3-8B-shaped checkpoint in bf16 / int4 / fp8), then measures batch-1
# decode (`ember bench speed -p 128 -n 256`) and offline throughput (N x IN/OUT tokens) of the
# random Llama-3-8B at --tensor-parallel-size 1 and 2, and the device-to-device copy bandwidth.
# Binaries built elsewhere: BIN_TAR (a .tar.xz of ember, test_cuda_model, bench_cuda_kernels);
# SETUP=1 unpacks the .deb files in DEB_DIR first (device-setup.sh). Results in LOG_DIR (default
# $OUT): one log per part and summary.txt.
#   TESTS=0 skips the tests; FORMATS (default "bf16 int4 fp8"): the speed runs, at each of
#   TP_SIZES, or SPEED_RUNS ("bf16:1 bf16:2 ...": format:ranks pairs) instead;
#   SPEED_RUNS=none skips them; THROUGHPUT (default "bf16"): weight formats of the throughput
#   runs, K/V cache TP_KV (default auto); TP_SIZES (default "1 2"); SERVE=1: `ember serve` at
#   each of TP_SIZES on the fixture llama3, checked over HTTP (serve_smoke.py).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
debs=${DEB_DIR:-$root/.devdeps}
source "$root/bench/cuda/device-setup.sh"
bin=/tmp/ember-bin
mkdir -p "$bin" && tar -xJf "$BIN_TAR" -C "$bin"
export NCCL_NVLS_ENABLE=0  # never NVLink multicast on shared hosts (KINDS.md of the lent machines)
if ldd "$bin/ember" | grep -q 'libnccl.*not found'; then  # e.g. only PyTorch's wheel has it
  nccl=$(find / -name 'libnccl.so.2*' -not -path '/proc/*' 2>/dev/null | head -1)
  [[ -n $nccl ]] && export LD_LIBRARY_PATH=$(dirname "$nccl"):$LD_LIBRARY_PATH
fi
logs=${LOG_DIR:-$OUT}
model=/tmp/ember-llama3-8b
mkdir -p "$logs"
summary=()
note() { summary+=("$1"); echo "== $1"; }
start=$(date +%s)
note "$(nvidia-smi --query-gpu=index,name,clocks.sm --format=csv,noheader 2>/dev/null | tr '\n' ';') $(ldd "$bin/ember" | grep nccl | tr -s ' ')"
nvidia-smi topo -m >"$logs/topo.txt" 2>&1
python3 "$root/tools/make_cuda_bench_weights.py" "$model-2layers" --layers 2 >/dev/null 2>&1
python3 "$root/tools/make_cuda_bench_weights.py" "$model" >/dev/null 2>&1 &
wpid=$!
if [[ ${TESTS:-1} != 0 ]]; then
  EMBER_FIXTURES_DIR=$root/tests/fixtures EMBER_CUDA_TEST_MODEL=$model-2layers timeout "${TEST_TIMEOUT:-300}" \
    "$bin/test_cuda_model" --gtest_filter="${TEST_FILTER:-*}" >"$logs/test_cuda_model.log" 2>&1
  note "test_cuda_model: rc=$? $(grep -c '^\[       OK \]' "$logs/test_cuda_model.log") ok, $(grep -c '^\[  FAILED  \] [A-Z]' "$logs/test_cuda_model.log") failed ($(( $(date +%s) - start )) s)"
  grep -E "tensor parallel 2 vs 1" "$logs/test_cuda_model.log"
  grep -A8 "Failure" "$logs/test_cuda_model.log" | head -30
fi
timeout 60 "$bin/bench_cuda_kernels" copy >"$logs/copy.log" 2>&1
note "copy: $(grep -iE 'GB/s' "$logs/copy.log" | tail -1 | tr -s ' ')"
wait "$wpid"
note "weights ready after $(( $(date +%s) - start )) s"
runs=${SPEED_RUNS:-}
if [[ -z $runs ]]; then
  for f in ${FORMATS-bf16 int4 fp8}; do for tp in ${TP_SIZES:-1 2}; do runs+=" $f:$tp"; done; done
fi
[[ $runs == none ]] && runs=""
for run in $runs; do
  f=${run%%:*} tp=${run#*:}
  : >"$logs/speed-run.log"
  timeout "${SPEED_TIMEOUT:-150}" stdbuf -oL "$bin/ember" bench speed -m "$model" --device cuda --weight-format "$f" --tensor-parallel-size "$tp" \
    -r 2 -p 128 -n 256 >"$logs/speed-run.log" 2>&1
  rc=$?
  cat "$logs/speed-run.log" >>"$logs/speed.log"
  note "bench speed -p 128 -n 256 --weight-format $f --tp $tp: rc=$rc $(grep -E 'pp128|tg256' "$logs/speed-run.log" | tr -s ' ' | tr '\n' ' ')"
done
rm -f "$logs/speed-run.log"
for f in ${THROUGHPUT-bf16}; do
  for tp in ${TP_SIZES:-1 2}; do
    timeout 200 stdbuf -oL "$bin/ember" bench throughput -m "$model" --device cuda --weight-format "$f" --tensor-parallel-size "$tp" \
      --kv-dtype "${TP_KV:-auto}" --num-requests "${TP_REQUESTS:-256}" --concurrency "${TP_REQUESTS:-256}" --input-len "${TP_IN:-1000}" \
      --output-len "${TP_OUT:-1000}" --max-num-seqs 256 --max-num-batched-tokens 8192 >>"$logs/throughput.log" 2>&1
    note "throughput ${TP_REQUESTS:-256} x ${TP_IN:-1000}/${TP_OUT:-1000} weights $f kv ${TP_KV:-auto} --tp $tp: rc=$? $(grep -E '^(output_tokens_per_s|mean_itl_ms|mean_ttft_ms) ' "$logs/throughput.log" | tail -3 | tr -s ' ' | tr '\n' ' ')"
  done
done
if [[ ${SERVE:-0} != 0 ]]; then  # the OpenAI-compatible server over HTTP, on the fixture llama3
  fx=/tmp/ember-tiny-chat  # its weights with the tiny chat tokenizer (as tests/python/conftest.py)
  mkdir -p "$fx"
  for f in config.json generation_config.json model.safetensors; do ln -sf "$root/tests/fixtures/models/llama3/hf/$f" "$fx/$f"; done
  cp "$root"/tests/server/fixtures/tiny_chat/tokenizer{,_config}.json "$fx/"
  for tp in ${TP_SIZES:-1 2}; do
    "$bin/ember" serve -m "$fx" --device cuda --tensor-parallel-size "$tp" --port 8199 >"$logs/serve-tp$tp.log" 2>&1 &
    spid=$!
    timeout 150 python3 "$root/bench/cuda/serve_smoke.py" 8199 "serve --tp $tp" "$spid" >"$logs/serve-smoke-tp$tp.log" 2>&1
    note "serve --device cuda --tp $tp over HTTP: rc=$? $(tr '\n' ';' <"$logs/serve-smoke-tp$tp.log")"
    kill "$spid"; wait "$spid" 2>/dev/null
  done
fi
echo "================ summary ($(( $(date +%s) - start )) s) ================"
printf '%s\n' "${summary[@]}" | tee "$logs/summary.txt"
