#!/usr/bin/env bash
# Builds ember with the CUDA backend, runs the CUDA backend-ops tests and the GPU benchmarks
# (ember kernels, cuBLASLt and PyTorch baselines, copy bandwidth) in one go, and prints a
# short table last. Needs an NVIDIA GPU (sm_90a build by default), nvcc, CMake, ninja;
# PyTorch is optional (its baselines are skipped without it).
#
# usage: scripts/gpu-check.sh [--tests-only] [--bench-only] [--sanitize] [--profile] [--no-torch]
#   --sanitize: compute-sanitizer over the tests (tools in SANITIZERS, default memcheck racecheck)
#   --profile: Nsight Compute on one launch of each attention kernel and a GEMV (ncu.log)
#   BUILD_DIR (default build-gpu), LOG_DIR (default $OUT or BUILD_DIR/logs), JOBS,
#   CUDA_ONLY=1 (skip the whole-project configure, build only core, quant and CUDA targets).
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build-gpu}
logs=${LOG_DIR:-${OUT:-$build/logs}}
jobs=${JOBS:-$(nproc)}
run_tests=1 run_bench=1 sanitize=0 profile=0 torch=1
for arg in "$@"; do
  case $arg in
    --tests-only) run_bench=0 ;;
    --bench-only) run_tests=0 ;;
    --sanitize) sanitize=1 ;;
    --profile) profile=1 ;;
    --no-torch) torch=0 ;;
    *) echo "unknown option $arg" >&2; exit 2 ;;
  esac
done
mkdir -p "$logs"
status=0
summary=()
note() { summary+=("$1"); echo "== $1"; }

echo "== configure + build ($build, -j$jobs)"
start=$(date +%s)
# The CUDA-only project: the modules the GPU targets need, for machines that lack a
# dependency of another module (e.g. PCRE2 for the tokenizer on the lent GPU machines).
cuda_only_project() {
  local dir=$build/cuda-only-src
  mkdir -p "$dir"
  cat >"$dir/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.25)
project(ember_cuda_check LANGUAGES CXX C)
set(CMAKE_CXX_STANDARD 20)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
set(CMAKE_CXX_EXTENSIONS OFF)
set(EMBER_CUDA ON)
set(EMBER_WARNINGS -Wall -Wextra -Wshadow=local -Wno-unused-parameter)
find_package(Threads REQUIRED)
find_package(fmt REQUIRED)
find_package(GTest REQUIRED)
include(GoogleTest)
enable_testing()
include_directories($root/src)
function(ember_library name)
  add_library(\${name} STATIC \${ARGN})
  target_compile_options(\${name} PRIVATE \$<\$<COMPILE_LANGUAGE:CXX>:\${EMBER_WARNINGS}>)
  target_include_directories(\${name} PUBLIC $root/src)
endfunction()
add_subdirectory($root/src/core src/core)
add_subdirectory($root/src/quant src/quant)
add_subdirectory($root/src/backend/cuda src/backend/cuda)
add_subdirectory($root/tests/cuda tests/cuda)
add_subdirectory($root/bench/cuda bench/cuda)
CMAKE
  cmake -S "$dir" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
}
if [[ -n ${CUDA_ONLY:-} ]] || ! cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
     -DEMBER_CUDA=ON -DEMBER_TESTS=ON -DEMBER_BENCH=ON >"$logs/configure.log" 2>&1; then
  grep -m3 -A3 "CMake Error" "$logs/configure.log" 2>/dev/null
  note "full configure failed (see configure.log); building the CUDA-only project"
  rm -rf "$build"
  mkdir -p "$build"
  if ! cuda_only_project >>"$logs/configure.log" 2>&1; then
    tail -30 "$logs/configure.log"; echo "configure failed"; exit 1
  fi
fi
if ! ninja -C "$build" -j"$jobs" test_cuda_backend bench_cuda_kernels >"$logs/build.log" 2>&1; then
  grep -E "error|Error" "$logs/build.log" | head -40; echo "build failed"; exit 1
fi
note "build ok in $(( $(date +%s) - start )) s"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw \
  --format=csv 2>/dev/null | tee "$logs/gpu.txt"

if (( run_tests )); then
  echo "== tests"
  "$build/tests/cuda/test_cuda_backend" 2>&1 | tee "$logs/test.log"
  rc=${PIPESTATUS[0]}
  passed=$(grep -c "^\[       OK \]" "$logs/test.log")
  failed=$(grep -c "^\[  FAILED  \]" "$logs/test.log")
  note "tests: rc=$rc, $passed passed, $failed failed lines"
  (( rc != 0 )) && status=1
fi

if (( run_bench )); then
  echo "== ember kernel benchmarks"
  "$build/bench/cuda/bench_cuda_kernels" 2>&1 | tee "$logs/bench.log"
  (( PIPESTATUS[0] != 0 )) && status=1
  if (( torch )) && python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
    echo "== PyTorch baselines"
    PYTHONUNBUFFERED=1 python3 "$root/bench/cuda/torch_baselines.py" 2>&1 | tee "$logs/torch.log"
  fi
fi

# Sanitizers last: they are slow, and the numbers above should come back even if they time out.
if (( run_tests && sanitize )) && command -v compute-sanitizer >/dev/null; then
  for tool in ${SANITIZERS:-memcheck racecheck}; do
    filter='*'
    [[ $tool == racecheck ]] && filter='CudaAttention.DecodeBatchSplitK:CudaAttention.MixedBatchF16Dim64'
    timeout "${SANITIZE_TIMEOUT:-100}" compute-sanitizer --tool "$tool" --error-exitcode 9 \
      "$build/tests/cuda/test_cuda_backend" --gtest_filter="$filter" >"$logs/sanitize_$tool.log" 2>&1
    rc=$?
    note "compute-sanitizer $tool ($filter): rc=$rc, $(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$logs/sanitize_$tool.log" || echo 'no summary (124 = timed out)')"
    (( rc != 0 )) && { status=1; grep -m 20 -E "=====" "$logs/sanitize_$tool.log"; }
  done
fi

if (( profile )) && command -v ncu >/dev/null; then
  timeout 200 ncu --clock-control none -k 'regex:paged_attn_mma|gemv_bf16' -c 3 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
    --section SchedulerStats --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
    "$build/bench/cuda/bench_cuda_kernels" profile >"$logs/ncu.log" 2>&1
  note "ncu: rc=$? ($(grep -c 'Section: ' "$logs/ncu.log") sections in ncu.log)"
fi

echo
echo "================ summary ================"
for line in "${summary[@]}"; do echo "$line"; done
cat "$logs"/bench.log "$logs"/torch.log 2>/dev/null | grep '^RESULT|' |
  awk -F'|' '{ printf "%-13s %-66s %10.1f %-8s %s\n", $2, substr($3, 1, 66), $4, $5, $6 }'
exit $status
