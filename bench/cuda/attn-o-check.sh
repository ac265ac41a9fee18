#!/usr/bin/env bash
# One device call for the batch-1 decode attention fused with the packed o projection
# (EMBER_CUDA_ATTN_O: =1 attn_o.cuh, docs/CUDA_NOTES.md "Session 59"; =2 the keys-split
# attn_o_split.cuh, "Session 60"): their kernel test and whole-model test, then the same-binary
# A/B of batch-1 decode (ab-speed.sh) int4 and fp8 with it off (the default), =2, =1 at 512-thread
# blocks, at 256, and for int4 on 64-row blocks of each size (fp8's runs ignore the rows: a
# same-setting control), and CUPTI traces of int4 and fp8 at =2 (each kernel's share of a step,
# to set beside session 57's table).
# First bench_cuda_kernels attn-o where the tar has it: each kernel alone at 128-2048 keys.
#
#   bench/cuda/pack-device.sh .devdeps/a ember test_cuda_backend test_cuda_model libember_cupti_trace.so \
#     bench_cuda_kernels
#   BIN_TAR=.devdeps/a/bins.tar.xz DEB_DIR=.devdeps/a/debs SETUP=1 bench/cuda/attn-o-check.sh
#
# ROUNDS (default 2), FORMATS (default "int4 fp8"), TRACES (default int4 and fp8 at =2; empty: none).
# LOG_DIR (default $OUT) gets the logs; the summaries print to stdout.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${LOG_DIR:-$OUT}
A=EMBER_CUDA_ATTN_O T=EMBER_CUDA_ATTN_O_THREADS R=EMBER_CUDA_ATTN_O_ROWS
if [[ -n ${BIN_TAR:-} ]] && tar -tJf "$BIN_TAR" | grep -qx bench_cuda_kernels; then
  # shellcheck disable=SC2034  # (read by device-setup.sh)
  debs=${DEB_DIR:-$root/.devdeps}
  source "$root/bench/cuda/device-setup.sh"
  mkdir -p "$out" /tmp/ember-attn-o && tar -xJf "$BIN_TAR" -C /tmp/ember-attn-o bench_cuda_kernels
  timeout 200 /tmp/ember-attn-o/bench_cuda_kernels attn-o >"$out/bench-attn-o.log" 2>&1
  echo "== bench_cuda_kernels attn-o: rc=$? (us a launch)"
  grep -E "^(RESULT|SKIP|device)" "$out/bench-attn-o.log" | cut -d'|' -f3-
fi
ROUNDS=${ROUNDS:-2} FORMATS="${FORMATS:-int4 fp8}" LOG_DIR=$out \
  TESTS="test_cuda_backend test_cuda_model" TEST_ENV="GTEST_FILTER=CudaQuant.AttnO*:CudaModel.AttnO*" \
  RUNS="ember ember:$A=2 ember:$A=1 ember:$A=1,$T=256 ember:$A=1,$R=64 ember:$A=1,$R=64,$T=256" \
  TRACES="${TRACES-int4:ember:$A=2 fp8:ember:$A=2}" \
  bash "$root/bench/cuda/ab-speed.sh"
for f in "$out"/trace-*.txt; do
  [[ -f $f ]] && { echo "== $f"; head -40 "$f"; }
done
grep -h -B3 -A12 "Failure" "$out"/test_cuda*.log 2>/dev/null | head -60
