#pragma once
// Tensor-core GEMM for packed int4 and int8 weights (layout in qgemv.cuh) and batches past
// the GEMV's 8 rows: out [n, m] (+)= x [n, k] @ w^T (+ bias) for 9 <= n <= kQGemmMaxBatch,
// reading the packed weights once (Marlin-style: dequantized in registers into mma A
// fragments) instead of dequantizing them to a BF16 copy for cuBLASLt (4.5 bytes a weight
// moved instead of 0.5; int8 5 instead of 1). int4: x rounded to BF16 (as the GEMV and the
// BF16 fallback do), weights exact (QGemmPlan::offset_sums) or q * scale rounded to BF16;
// int8: x rounded to F16 and exact weights, as its GEMV (|x| > 65504 becomes inf there too).
#include "backend/cuda/qgemv.cuh"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace ember::cuda {

constexpr int kQGemmMaxBatch = 64;  // rows of x (eight n8 mma tiles)
constexpr int kQGemmRows = 128;     // weight rows a block owns (4 warps x 32)
constexpr int kQGemmMaxSplits = 16;  // k slices of one row block (one thread-block cluster; 9-16: non-portable sizes)

// Whether the GEMM runs on `device`: a build with sm_90a code (EMBER_CUDA_ARCHS) on a compute
// capability 9.0 GPU (its k slices are thread-block clusters).
bool qgemm_available(int device);

// True when launch_qgemm takes this problem: int4 or int8, 1 <= n <= kQGemmMaxBatch, k % 8 == 0,
// x 16-byte aligned.
bool qgemm_supported(QFormat f, int n, int64_t k, const void* x);

// How a GEMM is cut: `splits` k slices (1..kQGemmMaxSplits, one cluster per row block) of
// `units` units each (int4: 128-element groups; int8: 64 elements), x staged `phase` units at a time (0: as many as fit the
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
QGemmPlan plan_qgemm(QFormat f, int n, int64_t m, int64_t k, int sms);
// Whether launch_qgemm multiplies exact weights for this format, plan and n (int8; int4 with
// offset sums), or q * scale rounded to BF16.
bool qgemm_exact_weights(QFormat f, const QGemmPlan& plan, int n);

// Bytes of the x scratch launch_qgemm needs (x as BF16 / F16 in the kernel's lane order, rows
// padded to 16, 32 or 64; int4 also each group's sum of it).
size_t qgemm_x_bytes(QFormat f, int n, int64_t k);

// out = x @ w^T (+ bias), or out += ... when accumulate. x_scratch: qgemm_x_bytes, 16-byte
// aligned, not read by anything else until this GEMM is done. Two launches (x to BF16, the
// GEMM), both programmatic dependents when pdl; with stage_x false only the GEMM, reading what
// an earlier launch_qgemm (or launch_qgemm_stage_x) of the same x, n, k and format left in
// x_scratch (several matrices of one x). plan: from plan_qgemm (splits may be forced for tests).
cudaError_t launch_qgemm(QFormat f, const void* w, int64_t m, int64_t k, const float* x, int n, const float* bias,
                         float* out, bool accumulate, const QGemmPlan& plan, void* x_scratch, bool pdl,
                         cudaStream_t stream, bool stage_x = true);
// The first of launch_qgemm's two launches alone: x staged into x_scratch.
cudaError_t launch_qgemm_stage_x(QFormat f, const float* x, int n, int64_t k, void* x_scratch, bool pdl,
                                 cudaStream_t stream);

}  // namespace ember::cuda
