#!/usr/bin/env bash
# One device call for the batch-1 gated o GEMV (docs/CUDA_NOTES.md "Session 57", "Session 58"):
# the packed GEMV tests under its settings, then same-call A/B of batch-1 decode (ab-speed.sh) with
# it at one block an SM (EMBER_CUDA_QGEMV_GATE_ONE; the default except for int4 on an H100), at its own
# residency, on twin 32-row tiles (EMBER_CUDA_QGEMV_GATE_TWIN: 1 int4, 2 fp8), and int4 on the TMA
# ring at one block an SM; the TMA ring on q/k/v (mask 4) and on the GLU (mask 1, int4), measured
# on an H100 only (session 56); CUPTI traces of int4 with and without the twin tiles; bf16 and
# int8 once. BIN_TAR (pack-device.sh) holds ember, test_cuda_backend, libember_cupti_trace.so and
# optionally PEER, another build's ember run beside (e.g. qgemv_staged.cu before the twin tiles:
# `bench/cuda/peer-build.sh 4408f1c /tmp/peer qgemv_staged.cu`, its ember-peer in the tar).
#
#   bench/cuda/pack-device.sh .devdeps/g ember test_cuda_backend libember_cupti_trace.so [ember-peer]
#   BIN_TAR=.devdeps/g/bins.tar.xz DEB_DIR=.devdeps/g/debs SETUP=1 [PEER=ember-peer] bench/cuda/gate-check.sh
#
# LOG_DIR (default $OUT) gets the logs; the summaries print to stdout.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${LOG_DIR:-$OUT}
G=EMBER_CUDA_QGEMV_GATE_ONE T=EMBER_CUDA_QGEMV_GATE_TWIN M=EMBER_CUDA_QGEMV_TMA
peer=()
[[ -n ${PEER:-} ]] && peer=("$PEER")
export ROUNDS=${ROUNDS:-2}
# A TMA mask replaces the default one: on an H100 int4's default is 8 (its gated o GEMV), kept here.
h100=0
nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | grep -q H100 && h100=8
TESTS="test_cuda_backend" \
  TEST_ENV="GTEST_FILTER=CudaQuant.* GTEST_FILTER=CudaQuant.Gemv*,$G=1,$T=3 GTEST_FILTER=CudaQuant.Gemv*,$G=0 \
GTEST_FILTER=CudaQuant.GemvGate*,$G=1,$T=3,EMBER_CUDA_QGEMV_TMA=8" \
  RUNS="${peer[*]} ember ember:$G=0 ember:$G=1 ember:$G=1,$T=1 ember:$G=1,$M=8 ember:$M=$((h100 + 4)) ember:$M=$((h100 + 1))" FORMATS=int4 \
  TRACES="${TRACES-int4:ember int4:ember:$G=1,$T=1}" LOG_DIR=$out bash "$root/bench/cuda/ab-speed.sh"
RUNS="${peer[*]} ember ember:$G=0 ember:$G=1 ember:$G=1,$T=2 ember:$M=4" FORMATS=fp8 SETUP= LOG_DIR=$out/fp8 \
  bash "$root/bench/cuda/ab-speed.sh"
RUNS="ember" FORMATS="bf16 int8" ROUNDS=1 SETUP= LOG_DIR=$out/other bash "$root/bench/cuda/ab-speed.sh"
for f in "$out"/trace-*.txt; do
  [[ -f $f ]] && { echo "== $f"; head -40 "$f"; }
done
grep -h -A8 "Failure" "$out"/*.log 2>/dev/null | head -40
