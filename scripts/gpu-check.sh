#!/usr/bin/env bash
# Builds ember with the CUDA backend, runs the CUDA backend-ops tests and the GPU benchmarks
# (ember kernels, cuBLASLt and PyTorch baselines, copy bandwidth) in one go, and prints a
# short table last. Needs an NVIDIA GPU (sm_90a build by default), nvcc, CMake, ninja;
# PyTorch is optional (its baselines are skipped without it).
#
# usage: scripts/gpu-check.sh [--tests-only] [--bench-only] [--sanitize] [--profile] [--no-torch]
#                             [--model] [--no-kernels]
#   --sanitize: compute-sanitizer over the tests (tools in SANITIZERS, default memcheck racecheck;
#     SANITIZE_FILTER: a gtest filter instead of the default ones)
#   --profile: Nsight Compute on one launch of each attention kernel and a GEMV (ncu.log)
#   --model: the whole model on the GPU: test_cuda_model (fixtures vs transformers and the CPU
#     backend; 8B shapes on a 2-layer random checkpoint) and `ember bench speed --device cuda`
#     on a random-weight Llama-3-8B (tools/make_cuda_bench_weights.py, written to MODEL_DIR,
#     default /tmp/ember-llama3-8b) beside the PyTorch decode/prefill baselines
#     (bench/cuda/torch_llama.py; TORCH_ARGS, e.g. "--hf --hf-static --compile": transformers
#     generate eager and with its compiled static cache, and the torch.compile loop)
#   --no-kernels: skip the kernel benchmarks (bench_cuda_kernels, torch_baselines.py)
#   --profile-model: with --model, Nsight Compute durations of every kernel of one decode step
#     (ncu_step_summary.txt)
#   SPEED_EXTRA="name=VAR=value ..." more decode runs under environment variables (tuning, e.g.
#   "nofill=EMBER_CUDA_ATTN_FILL=0 gemv4=EMBER_CUDA_GEMV_VARIANT=4")
#   BUILD_DIR (default build-gpu), LOG_DIR (default $OUT or BUILD_DIR/logs), JOBS,
#   CUDA_ONLY=1 (skip the whole-project configure, build only core, quant and CUDA targets),
#   BIN_DIR (prebuilt ember, test_cuda_backend, test_cuda_model, bench_cuda_kernels: used
#   instead of building when they run here).
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build-gpu}
logs=${LOG_DIR:-${OUT:-$build/logs}}
jobs=${JOBS:-$(nproc)}
run_tests=1 run_bench=1 sanitize=0 profile=0 torch=1 model=0 kernels=1 profile_model=0
for arg in "$@"; do
  case $arg in
    --tests-only) run_bench=0 ;;
    --bench-only) run_tests=0 ;;
    --sanitize) sanitize=1 ;;
    --profile) profile=1 ;;
    --no-torch) torch=0 ;;
    --model) model=1 ;;
    --no-kernels) kernels=0 ;;
    --profile-model) profile_model=1 ;;
    *) echo "unknown option $arg" >&2; exit 2 ;;
  esac
done
mkdir -p "$logs"
status=0
summary=()
note() { summary+=("$1"); echo "== $1"; }

model_dir=${MODEL_DIR:-/tmp/ember-llama3-8b}
small_dir=${model_dir}-2layers
if (( model )); then
  # The 2-layer checkpoint (for the tests) now, the 32-layer one while the code builds and the
  # tests run (torch on the GPU draws the values).
  python3 "$root/tools/make_cuda_bench_weights.py" "$small_dir" --layers 2 >"$logs/weights_small.log" 2>&1 ||
    note "2-layer checkpoint failed (weights_small.log)"
  python3 "$root/tools/make_cuda_bench_weights.py" "$model_dir" >"$logs/weights.log" 2>&1 &
  weights_pid=$!
fi

echo "== configure + build ($build, -j$jobs)"
start=$(date +%s)
# A project of the given modules (under src/) plus the CUDA tests and benchmarks, for machines
# that lack a dependency of another module (e.g. cpp-httplib for the server, or PCRE2 for the
# tokenizer on the lent GPU machines).
sub_project() {
  local dir=$build/sub-src
  mkdir -p "$dir"
  {
    cat <<CMAKE
cmake_minimum_required(VERSION 3.25)
project(ember_cuda_check LANGUAGES CXX C)
set(CMAKE_CXX_STANDARD 20)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
set(CMAKE_CXX_EXTENSIONS OFF)
set(EMBER_CUDA ON)
set(EMBER_WARNINGS -Wall -Wextra -Wshadow=local -Wno-unused-parameter)
find_package(Threads REQUIRED)
find_package(fmt REQUIRED)
find_package(nlohmann_json QUIET)
find_package(CLI11 CONFIG QUIET)
find_package(GTest REQUIRED)
include(GoogleTest)
enable_testing()
include_directories($root/src)
function(ember_library name)
  add_library(\${name} STATIC \${ARGN})
  target_compile_options(\${name} PRIVATE \$<\$<COMPILE_LANGUAGE:CXX>:\${EMBER_WARNINGS}>)
  target_include_directories(\${name} PUBLIC $root/src)
endfunction()
CMAKE
    for m in "$@"; do echo "add_subdirectory($root/src/$m src/$m)"; done
    echo "add_subdirectory($root/tests/cuda tests/cuda)"
    echo "add_subdirectory($root/bench/cuda bench/cuda)"
  } >"$dir/CMakeLists.txt"
  cmake -S "$dir" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
}
targets="test_cuda_backend bench_cuda_kernels"
bin_ok=0
if [[ -n ${BIN_DIR:-} ]] && "$BIN_DIR/test_cuda_backend" --gtest_list_tests >/dev/null 2>&1 &&
   { (( ! model )) || { "$BIN_DIR/ember" --help >/dev/null 2>&1 && "$BIN_DIR/test_cuda_model" --gtest_list_tests >/dev/null 2>&1; }; }; then
  bin_ok=1
  note "using the prebuilt binaries in $BIN_DIR"
  test_bin=$BIN_DIR/test_cuda_backend model_test_bin=$BIN_DIR/test_cuda_model
  bench_bin=$BIN_DIR/bench_cuda_kernels ember_bin=$BIN_DIR/ember
else
  if [[ -n ${BIN_DIR:-} ]]; then
    note "prebuilt binaries in $BIN_DIR do not run here; building"
    ldd "$BIN_DIR"/* 2>&1 | grep -E "not found|^/" | sed 's/^/   /'
  fi
  (( model )) && targets="$targets test_cuda_model ember"
  full_modules="core quant loader backend tokenizer chat model kv sched sample spec runner engine cli"
  if [[ -n ${CUDA_ONLY:-} ]] || ! cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
       -DEMBER_CUDA=ON -DEMBER_TESTS=ON -DEMBER_BENCH=ON >"$logs/configure.log" 2>&1; then
    grep -m3 -A3 "CMake Error" "$logs/configure.log" 2>/dev/null
    rm -rf "$build"
    mkdir -p "$build"
    if (( model )) && [[ -z ${CUDA_ONLY:-} ]] && sub_project $full_modules >>"$logs/configure.log" 2>&1; then
      note "full configure failed (see configure.log); building every module but the server"
    else
      note "full configure failed (see configure.log); building the CUDA-only project"
      rm -rf "$build"
      mkdir -p "$build"
      targets="test_cuda_backend bench_cuda_kernels"
      model=0
      if ! sub_project core quant backend/cuda >>"$logs/configure.log" 2>&1; then
        tail -30 "$logs/configure.log"; echo "configure failed"; exit 1
      fi
    fi
  fi
  if ! ninja -C "$build" -j"$jobs" $targets >"$logs/build.log" 2>&1; then
    grep -E "error|Error" "$logs/build.log" | head -40; echo "build failed"; exit 1
  fi
  note "build ok in $(( $(date +%s) - start )) s"
  test_bin=$build/tests/cuda/test_cuda_backend model_test_bin=$build/tests/cuda/test_cuda_model
  bench_bin=$build/bench/cuda/bench_cuda_kernels ember_bin=$build/bin/ember
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw \
  --format=csv 2>/dev/null | tee "$logs/gpu.txt"

if (( run_tests )); then
  echo "== tests"
  "$test_bin" 2>&1 | tee "$logs/test.log"
  rc=${PIPESTATUS[0]}
  passed=$(grep -c "^\[       OK \]" "$logs/test.log")
  failed=$(grep -c "^\[  FAILED  \]" "$logs/test.log")
  note "backend-ops tests: rc=$rc, $passed passed, $failed failed lines"
  (( rc != 0 )) && status=1
  # The packed GEMVs again: the TMA ring everywhere it is built / nowhere (default: int4's gated o
  # GEMV where it does not run at one block an SM), the gated o GEMV at one block an SM / at its
  # own residency (default: not for int4 on an H100), and on twin 32-row tiles (opt-in).
  for setting in "EMBER_CUDA_QGEMV_TMA=15:CudaQuant.*" "EMBER_CUDA_QGEMV_TMA=0:CudaQuant.*" \
    "EMBER_CUDA_QGEMV_GATE_ONE=1:CudaQuant.Gemv*" "EMBER_CUDA_QGEMV_GATE_ONE=0:CudaQuant.Gemv*" \
    "EMBER_CUDA_QGEMV_GATE_ONE=1,EMBER_CUDA_QGEMV_GATE_TWIN=3:CudaQuant.GemvGate*"; do
    var=${setting%%:*}
    tag=${var//EMBER_CUDA_QGEMV_/} && tag=${tag//[^A-Za-z0-9]/_}
    IFS=, read -r -a vars <<<"$var"
    echo "== packed GEMV tests with $var"
    env "${vars[@]}" "$test_bin" --gtest_filter="${setting#*:}" >"$logs/test_$tag.log" 2>&1
    rc=$?
    note "GEMV tests, $var: rc=$rc, $(grep -c "^\[       OK \]" "$logs/test_$tag.log") passed, $(grep -c "^\[  FAILED  \]" "$logs/test_$tag.log") failed lines"
    (( rc != 0 )) && status=1
  done
  if (( model )); then
    echo "== whole-model tests"
    EMBER_FIXTURES_DIR=$root/tests/fixtures EMBER_CUDA_TEST_MODEL=$small_dir \
      "$model_test_bin" 2>&1 | tee "$logs/test_model.log"
    rc=${PIPESTATUS[0]}
    note "whole-model tests: rc=$rc, $(grep -c "^\[       OK \]" "$logs/test_model.log") passed, $(grep -c "^\[  FAILED  \]" "$logs/test_model.log") failed lines"
    grep -E "max rel error" "$logs/test_model.log" | sed 's/^/   /'
    (( rc != 0 )) && status=1
  fi
fi

if (( model && run_bench )); then
  echo "== whole-model benchmarks (random-weight Llama-3-8B, bf16)"
  wait "$weights_pid"
  note "weights: rc=$? ($(du -sh "$model_dir" 2>/dev/null | cut -f1))"
  speed() {  # name [VAR=value ...] -- ember bench speed args
    local name=$1 envs=()
    shift
    while [[ $# -gt 0 && $1 != -- ]]; do envs+=("$1"); shift; done
    shift
    env "${envs[@]}" "$ember_bin" bench speed -m "$model_dir" --device cuda -r 3 --json "$logs/speed_$name.json" "$@" \
      >"$logs/speed_$name.log" 2>&1 || { note "bench $name failed"; tail -5 "$logs/speed_$name.log"; status=1; return; }
    grep -E "^(pp|tg)[0-9]+:" "$logs/speed_$name.log" | while read -r what value unit; do
      echo "RESULT|ember|bench speed $name ${what%:}|$value|$unit|"; done >>"$logs/model_results.log"
  }
  speed decode -- -p 128 -n 256
  speed prefill4096 -- -p 4096 -n 1
  speed decode-nofuse EMBER_CUDA_FUSE=0 -- -p 128 -n 256
  speed decode-nographs EMBER_CUDA_GRAPHS=0 -- -p 128 -n 256
  for v in ${SPEED_EXTRA:-}; do  # tuning experiments: name=VAR=value
    speed "decode-${v%%=*}" "${v#*=}" -- -p 128 -n 256
  done
  if (( profile_model )) && command -v ncu >/dev/null; then
    # Kernel durations of one decode step (the warm-up step of `-p 1`: eager, fused, 1 token).
    timeout 120 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
      --launch-count "${NCU_KERNELS:-400}" "$ember_bin" bench speed -m "$model_dir" --device cuda -p 1 -n 1 -r 1 \
      >"$logs/ncu_step.csv" 2>"$logs/ncu_step.err"
    note "ncu decode step: rc=$?"
    python3 "$root/bench/cuda/ncu_step_summary.py" "$logs/ncu_step.csv" 2>&1 | tee "$logs/ncu_step_summary.txt"
  fi
  # Through the engine (scheduler, sampler, KV cache sized from --gpu-memory-utilization):
  # `ember run` with a 128-token prompt and 256 greedy tokens, and a small offline batch.
  if "$ember_bin" run -m "$model_dir" --device cuda --prompt-ids "$(seq -s, 1000 1127)" -n 256 --temp 0 \
       --ignore-eos --ids >"$logs/run.log" 2>&1; then
    note "ember run --device cuda: $(grep -E '^(prompt|decode):' "$logs/run.log" | tr '\n' ' ')"
    grep -E "KV cache:" "$logs/run.log" | sed 's/^/   /'
    grep -E '^decode:' "$logs/run.log" | awk '{print "RESULT|ember|run p128 + 256 (engine, greedy)|" $4 "|tok/s|"}' >>"$logs/model_results.log"
  else
    note "ember run --device cuda failed"; tail -5 "$logs/run.log"; status=1
  fi
  if "$ember_bin" bench throughput -m "$model_dir" --device cuda --num-requests 64 --concurrency 64 \
       --input-len 512 --output-len 256 --json "$logs/throughput.json" >"$logs/throughput.log" 2>&1; then
    note "ember bench throughput --device cuda (64 x 512/256):"
    grep -E "tok|ms" "$logs/throughput.log" | head -12 | sed 's/^/   /'
  else
    note "ember bench throughput --device cuda failed"; tail -5 "$logs/throughput.log"; status=1
  fi
  cat "$logs/model_results.log"
  if (( torch )) && python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
    echo "== PyTorch whole-model baselines"
    PYTHONUNBUFFERED=1 python3 "$root/bench/cuda/torch_llama.py" ${TORCH_ARGS:-} 2>&1 | tee "$logs/torch_model.log"
  fi
fi

if (( run_bench && kernels )); then
  echo "== ember kernel benchmarks"
  "$bench_bin" 2>&1 | tee "$logs/bench.log"
  (( PIPESTATUS[0] != 0 )) && status=1
  if (( torch )) && python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
    echo "== PyTorch baselines"
    PYTHONUNBUFFERED=1 python3 "$root/bench/cuda/torch_baselines.py" 2>&1 | tee "$logs/torch.log"
  fi
fi

# Sanitizers last: they are slow, and the numbers above should come back even if they time out.
if (( run_tests && sanitize )) && command -v compute-sanitizer >/dev/null; then
  for tool in ${SANITIZERS:-memcheck racecheck}; do
    filter=${SANITIZE_FILTER:-'*'}
    [[ $tool == racecheck && -z ${SANITIZE_FILTER:-} ]] && filter='CudaAttention.DecodeBatchSplitK:CudaAttention.MixedBatchF16Dim64'
    timeout "${SANITIZE_TIMEOUT:-100}" compute-sanitizer --tool "$tool" --error-exitcode 9 \
      "$test_bin" --gtest_filter="$filter" >"$logs/sanitize_$tool.log" 2>&1
    rc=$?
    note "compute-sanitizer $tool ($filter): rc=$rc, $(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$logs/sanitize_$tool.log" || echo 'no summary (124 = timed out)')"
    (( rc != 0 )) && { status=1; grep -m 20 -E "=====" "$logs/sanitize_$tool.log"; }
  done
fi

if (( profile )) && command -v ncu >/dev/null; then
  timeout 200 ncu --clock-control none -k 'regex:paged_attn_mma|gemv_bf16' -c 3 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
    --section SchedulerStats --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
    "$bench_bin" profile >"$logs/ncu.log" 2>&1
  note "ncu: rc=$? ($(grep -c 'Section: ' "$logs/ncu.log") sections in ncu.log)"
fi

echo
echo "================ summary ================"
for line in "${summary[@]}"; do echo "$line"; done
cat "$logs"/bench.log "$logs"/torch.log "$logs"/model_results.log "$logs"/torch_model.log 2>/dev/null | grep '^RESULT|' |
  awk -F'|' '{ printf "%-13s %-66s %10.1f %-8s %s\n", $2, substr($3, 1, 66), $4, $5, $6 }'
exit $status
