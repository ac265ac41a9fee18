#!/usr/bin/env bash
# Serving benchmark: ember serve vs llama.cpp's llama-server on the same GGUF, the same prompts
# and the same client (bench_serving.py), one server at a time, same thread count.
#
#   bench/serving/compare.sh [MODEL.gguf]        # default: Gemma 3 270M Q4_K_M (get-models.sh)
#
# Environment: THREADS (2), SLOTS (max concurrent sequences, 16), EMBER_BIN (build/bin/ember),
# LLAMA_SERVER (from bench/peer/build-llamacpp.sh --print), OUT (results JSONL,
# $TMPDIR/ember-serving-<date>.jsonl), SCENARIOS ("latency batch8 rate4").
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
model=${1:-$("$root/scripts/get-models.sh" --only gemma3-270m-q4_k_m | cut -f2)}
threads=${THREADS:-2}
slots=${SLOTS:-16}
ember=${EMBER_BIN:-$root/build/bin/ember}
llama=${LLAMA_SERVER:-$("$root/bench/peer/build-llamacpp.sh" --print)/llama-server}
py=${PYTHON:-$root/.venv/bin/python}
out=${OUT:-${TMPDIR:-/tmp}/ember-serving-$(date +%Y%m%d-%H%M%S).jsonl}
scenarios=${SCENARIOS:-"latency batch8 rate4"}
port=$((20000 + RANDOM % 20000))

wait_healthy() {  # wait_healthy PID
  for _ in $(seq 600); do
    kill -0 "$1" 2>/dev/null || { echo "server died" >&2; return 1; }
    curl -sf "http://127.0.0.1:$port/health" >/dev/null && return 0
    sleep 0.2
  done
  return 1
}

bench() {  # bench LABEL
  local label=$1
  for s in $scenarios; do
    case $s in
      latency) args=(--num-prompts 8 --max-concurrency 1 --input-len 128 --output-len 64) ;;
      batch8) args=(--num-prompts 32 --max-concurrency 8 --input-len 128 --output-len 64) ;;
      rate4) args=(--num-prompts 48 --max-concurrency "$slots" --request-rate 4 --input-len 128 --output-len 64) ;;
      *) echo "unknown scenario $s" >&2; return 1 ;;
    esac
    # One warm-up request so both servers have touched their weights.
    "$py" "$here/bench_serving.py" --base-url "http://127.0.0.1:$port" --num-prompts 1 --output-len 8 >/dev/null
    "$py" "$here/bench_serving.py" --base-url "http://127.0.0.1:$port" --label "$label/$s" --json "$out" "${args[@]}"
  done
}

run_server() {  # run_server LABEL CMD...
  local label=$1
  shift
  "$@" >"$out.$label.log" 2>&1 &
  local pid=$!
  if wait_healthy "$pid"; then bench "$label"; fi
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

echo "model: $model; threads $threads; slots $slots; results: $out"
run_server ember "$ember" serve -m "$model" --port "$port" -t "$threads" --max-num-seqs "$slots" \
  --kv-cache-memory 512MiB --no-access-log
# llama-server: one slot per concurrent sequence, each with room for prompt + output.
run_server llama.cpp "$llama" -m "$model" --port "$port" -t "$threads" -tb "$threads" -np "$slots" \
  -c $((slots * 512)) --no-webui
"$py" - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"\n{'run':24s} {'req/s':>7s} {'tok/s':>7s} {'TTFT p50':>9s} {'TTFT p99':>9s} {'TPOT p50':>9s} "
      f"{'ITL p50':>8s} {'ITL p99':>8s} {'E2E p50':>8s} {'E2E p99':>8s} {'fail':>4s}")
for r in rows:
    print(f"{r['label']:24s} {r['request_throughput']:7.2f} {r['output_throughput']:7.1f} "
          f"{r['ttft_ms']['p50']:9.1f} {r['ttft_ms']['p99']:9.1f} {r['tpot_ms']['p50']:9.1f} "
          f"{r['itl_ms']['p50']:8.1f} {r['itl_ms']['p99']:8.1f} {r['e2e_ms']['p50']:8.0f} {r['e2e_ms']['p99']:8.0f} "
          f"{r['failed']:4d}")
PY
