#pragma once
// Packed int4 / int8 weights (layout in qgemv.cuh) times many rows of x on Hopper's warpgroup
// MMA (wgmma, sm_90a): out [n, m] (+)= x [n, k] @ w^T (+ bias) for prompts and decode batches
// past the mma.sync GEMM's 64 rows (qgemm.cuh), where the backend dequantized every weight to a
// BF16 copy for cuBLASLt (4.5 bytes moved a weight instead of 0.5; int8 5 instead of 1).
// Each weight is read once a 128-row tile of x, dequantized in registers straight into the
// wgmma A fragments (the packed lane slices are the mma.m16n8k16 fragments a warp of the
// warpgroup holds); x is the B operand, staged once per GEMM as BF16 (int4) / F16 (int8) in the
// k order those fragments imply and streamed through 128-byte-swizzled shared memory.
// Numerics: int4 multiplies the BF16 values q * scale (what the dequantizing fallback stores)
// with x rounded to BF16; int8 multiplies exact q with x rounded to F16 and scales each row's
// sum (as its GEMV and mma.sync GEMM: |x| > 65504 becomes inf); F32 sums.
#include "backend/cuda/qgemv.cuh"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace ember::cuda {

constexpr int kQGemmWgRows = 128;    // weight rows a block owns (two warpgroups of 64)
constexpr int kQGemmWgTokens = 128;  // rows of x a block multiplies (the wgmma N)
constexpr int kQGemmWgMaxSplits = 8;  // k slices of a tile (one thread-block cluster)

// Whether the kernel runs on `device`: a build with sm_90a code on a compute capability 9.0 GPU.
bool qgemm_wg_available(int device);

// True when launch_qgemm_wg takes this problem: int4 or int8, n >= 1, k % 8 == 0, x 16-byte
// aligned.
bool qgemm_wg_supported(QFormat f, int n, int64_t k, const void* x);

// How a GEMM is cut: `splits` k slices of `units` units each (int4: 128-element groups, int8:
// 64 elements); the slices of a tile are one cluster and add their sums in slice order
// (deterministic). plan_qgemm_wg splits in two while the tiles fill at most half of the `sms`
// SMs, in four below an eighth (EMBER_CUDA_QGEMM_WG_SPLITS overrides it, for experiments).
struct QGemmWgPlan {
  int splits = 1;
  int units = 0;
};
QGemmWgPlan plan_qgemm_wg(QFormat f, int n, int64_t m, int64_t k, int sms);

// Bytes of the x scratch launch_qgemm_wg needs (x as 16-bit values in the fragments' k order,
// rows padded to a multiple of kQGemmWgTokens).
size_t qgemm_wg_x_bytes(QFormat f, int n, int64_t k);

// out = x @ w^T (+ bias), or out += ... when accumulate. Two launches (x staged into
// x_scratch, the GEMM), both programmatic dependents when pdl; stage_x false: only the GEMM,
// reading what an earlier launch (launch_qgemm_wg_stage_x) of the same x, n, k and format left
// in x_scratch (several matrices of one x). x_scratch: qgemm_wg_x_bytes, 16-byte aligned.
cudaError_t launch_qgemm_wg(QFormat f, const void* w, int64_t m, int64_t k, const float* x, int n, const float* bias,
                            float* out, bool accumulate, const QGemmWgPlan& plan, void* x_scratch, bool pdl,
                            cudaStream_t stream, bool stage_x = true);
cudaError_t launch_qgemm_wg_stage_x(QFormat f, const float* x, int n, int64_t k, void* x_scratch, bool pdl,
                                    cudaStream_t stream);

}  // namespace ember::cuda
