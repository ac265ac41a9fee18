#!/usr/bin/env bash
# The stream-K gate/up + GLU (EMBER_CUDA_QGEMV_SK=1, docs/CUDA_NOTES.md "Session 51") on the lent
# GPU in one call: its test and the CUDA model tests with it on, batch-1 int4 / fp8 against it off
# (ab-speed.sh, same binary, alternated), then the GLU alone at 896 tiles (Llama-3-8B, uneven
# over the one-wave grid) and 792 (even on 132 SMs: the plain kernel runs both times) with and
# without it. Binaries built here (build-cuda) and packed with
#   bench/cuda/pack-device.sh .devdeps ember test_cuda_backend test_cuda_model bench_cuda_kernels
# then on the device (run's carry: [".devdeps"]):
#   BIN_TAR=.devdeps/bins.tar.xz SETUP=1 DEB_DIR=.devdeps/debs bench/cuda/streamk-check.sh
# RUNS / ROUNDS as ab-speed.sh's (default: ember against ember:EMBER_CUDA_QGEMV_SK=1, 2 rounds).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export LOG_DIR=${LOG_DIR:-/tmp/streamk-logs}
mkdir -p "$LOG_DIR"
TESTS="test_cuda_backend test_cuda_model" \
  TEST_ENV="EMBER_CUDA_QGEMV_SK=1,GTEST_FILTER=CudaQuant.GemvGlu*:CudaQuant.GemvKernels*:CudaModel.*" \
  RUNS=${RUNS:-"ember ember:EMBER_CUDA_QGEMV_SK=1"} FORMATS="int4 fp8" ROUNDS=${ROUNDS:-2} \
  "$root/bench/cuda/ab-speed.sh"
grep -h "Failure\|FAILED  \]" "$LOG_DIR"/test_cuda_*.log | head -20
bin=/tmp/ember-ab-bin  # (where ab-speed.sh unpacked BIN_TAR)
for f in int4 fp8; do
  for sk in 0 1; do
    EMBER_BENCH_QGEMV_SK=$sk timeout 60 "$bin/bench_cuda_kernels" qgemv-sweep "$f" 4096 1 glu 14336 12672 2>&1 |
      grep sweep | sed "s/^/EMBER_BENCH_QGEMV_SK=$sk /"
  done
done
[ -n "${OUT:-}" ] && cp "$LOG_DIR/summary.txt" "$OUT/" 2>/dev/null
exit 0
