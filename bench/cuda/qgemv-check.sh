#!/usr/bin/env bash
# Packed int4 / fp8 GEMV on the lent H200 in one call (binaries built elsewhere, see
# docs/CUDA_NOTES.md "Running on the lent GPU"): test_cuda_backend (all, then CudaQuant.* again
# under each VARIANTS entry), CudaModel.Quantized*, `bench_cuda_kernels qgemv` (staged beside
# the direct kernel; again under each VARIANTS entry) and `ember bench speed -p 128 -n 256` for
# each of FORMATS, plain and under each VARIANTS entry.
#   BIN_TAR (default .devdeps/bin.tar.xz), DEB_DIR (default .devdeps; SETUP=1 unpacks its .debs),
#   LOG_DIR (default $OUT), FORMATS (default "int4 fp8"), VARIANTS (default
#   "EMBER_CUDA_QGEMV_PAIR=0"; e.g. EMBER_CUDA_QGEMV=direct for the first kernel). Run on the
#   device as `SETUP=1 bench/cuda/qgemv-check.sh` with .devdeps carried.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
debs=${DEB_DIR:-$root/.devdeps}
source "$root/bench/cuda/device-setup.sh"
bin=/tmp/qgemv-bin
mkdir -p "$bin" && tar -xJf "${BIN_TAR:-$debs/bin.tar.xz}" -C "$bin"
logs=${LOG_DIR:-${OUT:-/tmp/qgemv-logs}}
mkdir -p "$logs"
variants=${VARIANTS-EMBER_CUDA_QGEMV_PAIR=0}
python3 "$root/tools/make_cuda_bench_weights.py" /tmp/m2 --layers 2 >"$logs/w2.log" 2>&1
python3 "$root/tools/make_cuda_bench_weights.py" /tmp/m >"$logs/w.log" 2>&1 &
wpid=$!
count() { echo "rc=$2 ok=$(grep -c '^\[       OK \]' "$1") failed=$(grep -c '^\[  FAILED  \]' "$1") skipped=$(grep -c '^\[  SKIPPED \]' "$1")"; }
timeout 200 "$bin/test_cuda_backend" >"$logs/tb.log" 2>&1
echo "test_cuda_backend: $(count "$logs/tb.log" $?)"
grep -E "Failure|Expected|Which is|actual" "$logs/tb.log" | head -30
name() { echo "$1" | tr -c 'A-Za-z0-9._\n-' '_'; }  # file names the device tool returns
for v in $variants; do
  env "$v" timeout 100 "$bin/test_cuda_backend" --gtest_filter='CudaQuant.*' >"$logs/tb_$(name "$v").log" 2>&1
  echo "CudaQuant.* under $v: $(count "$logs/tb_$(name "$v").log" $?)"
done
EMBER_FIXTURES_DIR=$root/tests/fixtures EMBER_CUDA_TEST_MODEL=/tmp/m2 timeout 200 "$bin/test_cuda_model" \
  --gtest_filter='CudaModel.Quantized*' >"$logs/tm.log" 2>&1
echo "CudaModel.Quantized*: $(count "$logs/tm.log" $?)"
timeout 150 "$bin/bench_cuda_kernels" qgemv >"$logs/k.log" 2>&1
echo "bench_cuda_kernels qgemv: rc=$?"
cols="$logs/k.log"
for v in $variants; do
  env "$v" timeout 150 "$bin/bench_cuda_kernels" qgemv >"$logs/k_$(name "$v").log" 2>&1
  echo "bench_cuda_kernels qgemv under $v: rc=$?"
  cols="$cols $logs/k_$(name "$v").log"
done
wait "$wpid"
for f in ${FORMATS:-int4 fp8}; do
  for v in "" $variants; do
    env ${v:-A=1} timeout 150 "$bin/ember" bench speed -m /tmp/m --device cuda -r 3 -p 128 -n 256 --weight-format "$f" \
      >"$logs/s.log" 2>&1
    echo "speed $f ${v:-(default)}: rc=$? $(grep -E '^(pp|tg)[0-9]+:' "$logs/s.log" | tr '\n' ' ')"
  done
done
echo "== GB/s of packed bytes: name | default | each VARIANTS entry"
for c in $cols; do grep RESULT "$c" | grep -v qgemm | cut -d'|' -f3,4,6 >"$c.tsv"; done
paste -d'|' $(for c in $cols; do echo "$c.tsv"; done) | awk -F'|' '{ line = $1; for (i = 2; i <= NF; i += 3) line = line " | " $i; print line " | " $3 }'
