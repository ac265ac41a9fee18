#pragma once
// Tensor-core GEMM for packed int4 weights (layout in qgemv.cuh) and batches past the GEMV's
// 8 rows: out [n, m] (+)= x [n, k] @ w^T (+ bias) for 9 <= n <= kQGemmMaxBatch, reading the
// 4-bit weights once (Marlin-style: dequantized in registers into mma A fragments) instead of
// dequantizing them to a BF16 copy for cuBLASLt (4.5 bytes a weight moved instead of 0.5).
// x is rounded to BF16 (as the GEMV and the BF16 fallback do); the weights are exact
// (QGemmPlan::offset_sums) or q * scale rounded to BF16.
#include "backend/cuda/qgemv.cuh"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace ember::cuda {

constexpr int kQGemmMaxBatch = 64;  // rows of x (eight n8 mma tiles)
constexpr int kQGemmRows = 128;     // weight rows a block owns (4 warps x 32)
constexpr int kQGemmMaxSplits = 16;  // k slices of one row block (one thread-block cluster; 9-16: non-portable sizes)

// True when launch_qgemm takes this problem: int4, 1 <= n <= kQGemmMaxBatch, k % 8 == 0, x
// 16-byte aligned.
bool qgemm_supported(QFormat f, int n, int64_t k, const void* x);

// How a GEMM is cut: `splits` k slices (1..kQGemmMaxSplits, one cluster per row block) of
// `units` 128-element groups each, x staged `phase` units at a time (0: as many as fit the
// block's shared memory; the planner's default 2). offset_sums: the mma multiplies the BF16
// values 136 + q and 136 * (sum of x over the group) comes off before the group scale (exact
// weights, as the GEMV; up to 16 rows only: past that its partial sums spill registers);
// otherwise the A fragments are q * scale rounded to BF16 (the values the dequantizing
// fallback multiplies). plan_qgemm picks the split count by a cost model of waves of
// resident blocks on `sms` SMs (qgemm.cu; EMBER_CUDA_QGEMM_SPLITS / _PHASE / _OFFSET=1|2
// override it, for experiments).
struct QGemmPlan {
  int splits = 1;
  int units = 0;
  int phase = 0;
  bool offset_sums = true;
};
QGemmPlan plan_qgemm(int n, int64_t m, int64_t k, int sms);
// Whether launch_qgemm multiplies exact weights (offset sums) for this plan and n, or q * scale
// rounded to BF16.
bool qgemm_exact_weights(const QGemmPlan& plan, int n);

// Bytes of the x scratch launch_qgemm needs (x as BF16 in the kernel's lane order, rows padded
// to 16, 32 or 64, and each 128-element group's sum of it).
size_t qgemm_x_bytes(int n, int64_t k);

// out = x @ w^T (+ bias), or out += ... when accumulate. x_scratch: qgemm_x_bytes, 16-byte
// aligned, not read by anything else until this GEMM is done. Two launches (x to BF16, the
// GEMM), both programmatic dependents when pdl. plan: from plan_qgemm (splits may be forced
// for tests).
cudaError_t launch_qgemm(QFormat f, const void* w, int64_t m, int64_t k, const float* x, int n, const float* bias,
                         float* out, bool accumulate, const QGemmPlan& plan, void* x_scratch, bool pdl,
                         cudaStream_t stream);

}  // namespace ember::cuda
