#!/usr/bin/env bash
# FP8 decode attention on the lent H200, in one call: the attention tests
# (test_cuda_backend --gtest_filter='CudaAttention.*'), the decode-attention kernel benchmark
# (`bench_cuda_kernels decode`: bf16, fp8_e4m3 and fp8_e5m2 caches, b32/b64 x 4096 keys and
# b256 x 1024 keys) of each bench binary given (bench_cuda_kernels, and bench_cuda_kernels.*
# beside it, e.g. .before: the same benchmark over the previous kernels), then a short table.
# Optional: SANITIZE=1 runs compute-sanitizer racecheck and memcheck over the FP8 decode test;
# NCU=1 profiles one bf16 and one fp8 decode launch (b256 x 1024) with ncu.
# Binaries built elsewhere: BIN_DIR holds them (or BIN_TAR, a .tar.xz of them); SETUP=1 unpacks
# the .deb files in DEB_DIR (default .devdeps) first. LOG_DIR (default $OUT).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
debs=${DEB_DIR:-$root/.devdeps}
source "$root/bench/cuda/device-setup.sh"
bin=${BIN_DIR:-/tmp/fp8attn-bin}
if [[ -n ${BIN_TAR:-} ]]; then mkdir -p "$bin" && tar -xJf "$BIN_TAR" -C "$bin"; fi
logs=${LOG_DIR:-${OUT:-/tmp/fp8attn-logs}}
mkdir -p "$logs"
summary=()
note() { summary+=("$1"); echo "== $1"; }
start=$(date +%s)
note "$(nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem --format=csv,noheader 2>/dev/null)"

timeout "${TEST_TIMEOUT:-180}" "$bin/test_cuda_backend" --gtest_filter="${TEST_FILTER:-CudaAttention.*}" \
  >"$logs/test_attention.log" 2>&1
note "tests: rc=$? $(grep -c '^\[       OK \]' "$logs/test_attention.log") ok, $(grep -c '^\[  FAILED  \]' "$logs/test_attention.log") failed lines"
grep -B2 -A6 "Failure" "$logs/test_attention.log" | head -40

for b in "$bin"/bench_cuda_kernels*; do
  name=$(basename "$b")
  timeout "${BENCH_TIMEOUT:-150}" "$b" decode >"$logs/$name.log" 2>&1
  note "$name decode: rc=$?"
done

echo
echo "================ decode attention (GB/s of K+V read) ================"
for b in "$bin"/bench_cuda_kernels*; do
  name=$(basename "$b")
  grep -E '^RESULT\|ceiling\|d2d copy kernel' "$logs/$name.log" | awk -F'|' -v n="$name" '{printf "%-22s copy kernel %s GB/s\n", n, $4}'
  grep -E '^(RESULT\|decode-attn|SKIP)' "$logs/$name.log" |
    awk -F'|' -v n="$name" '$1 == "SKIP" {next} {sub(/ember paged /, "", $3); sub(/ h32\/kv8 d128/, "", $3); printf "%-22s %-52s %7.0f  %s\n", n, $3, $4, $6}'
done

if [[ -n ${NCU:-} ]]; then
  timeout "${NCU_TIMEOUT:-120}" ncu --clock-control none -k regex:paged_attn --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section WarpStateStats \
    --section Occupancy --section LaunchStats --section SchedulerStats \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,l1tex__throughput.avg.pct_of_peak_sustained_active" \
    "$bin/bench_cuda_kernels" profile-decode >"$logs/ncu_decode.log" 2>&1
  note "ncu: rc=$?"
  grep -E "paged_attn|DRAM Throughput|Duration|Registers Per|Achieved Occupancy|No Eligible|Warp Cycles Per Issued|inst_executed|bank_conflicts|l1tex__throughput" \
    "$logs/ncu_decode.log" | cut -c1-150 | head -40
  # The largest stall reasons per kernel (cycles per issued instruction).
  awk '/paged_attn/ {k=$2} /issue_stalled_.*per_issue_active/ && $NF+0 > 0.2 {print k, $1, $NF}' "$logs/ncu_decode.log" | head -30
fi

if [[ -n ${SANITIZE:-} ]]; then
  for tool in racecheck memcheck; do
    timeout "${SANITIZE_TIMEOUT:-60}" compute-sanitizer --tool "$tool" "$bin/test_cuda_backend" \
      --gtest_filter="${SANITIZE_FILTER:-CudaAttention.Fp8DecodeStagesAndShapes}" >"$logs/sanitize_$tool.log" 2>&1
    note "compute-sanitizer $tool: rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$logs/sanitize_$tool.log" | tr '\n' ' ')"
  done
fi

echo
echo "================ summary ($(( $(date +%s) - start )) s) ================"
printf '%s\n' "${summary[@]}"
