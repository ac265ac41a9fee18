#pragma once
// Memory-bound matrix-vector products for small batches (decode): each weight byte is read
// once, with 16-byte streaming loads and several loads in flight per thread. One launch can
// cover up to kGemvMaxSegs weight matrices that share the input (q/k/v, gate/up), and the
// gate/up pair can apply the GLU in its epilogue.
#include "backend/cuda/hold_gate.cuh"
#include "backend/cuda/l2_prefetch.h"
#include "backend/cuda/rope_epilogue.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace ember::cuda {

// Tiling variants (rows per warp x 16-byte loads in flight per row per lane, and the warps
// sharing a row: each takes every k_splits-th slab of it, and the block adds their sums).
// Benchmarks time them all; the backend uses gemv_pick_variant.
struct GemvVariant {
  int rows_per_warp;
  int unroll;
  int k_splits = 1;
};
// Variants 4 and 5 stage x in shared memory (F32, n * k * 4 bytes <= kGemvMaxSmemX) instead of
// reading it through L1 next to the streaming weights. Variants 6-9 split rows over 2 or 4
// warps: a block covers fewer rows, so a matrix of few rows (4096) makes more, shorter blocks
// and the SMs finish together.
// Variants 10 and 11 are variant 7 whose blocks take 4 + 6 (10) or 4 + 4 (11) rows, the second
// part copied into shared memory before the PDL wait, so that a whole matrix streams while the
// previous kernel runs (one row of x and one matrix whose blocks fit the GPU at once; other
// launches of them run variant 7).
constexpr int kGemvNumVariants = 12;
constexpr GemvVariant kGemvVariants[kGemvNumVariants] = {{1, 8},    {2, 4},    {4, 4},    {2, 8},
                                                         {1, 8},    {2, 4},    {2, 4, 2}, {2, 4, 4},
                                                         {1, 8, 2}, {1, 8, 4}, {2, 4, 4}, {2, 4, 4}};
constexpr int kGemvHoldVariant = 10;
constexpr int kGemvHold2Variant = 11;
constexpr int64_t kGemvHoldMaxSmem = 96 * 1024;  // 6 rows of k <= 8192
constexpr int64_t kGemvMaxSmemX = 96 * 1024;
constexpr int kGemvDefaultVariant = 1;
// The variant measured fastest on an H200 for n rows of x and m rows of weights of length k
// (`bench_cuda_kernels gemv`, session 8, as programmatic dependents, GB/s; 2 / 4 rows below).
// One row: four warps a row pair (variant 7: 3139 / 4047 / 3659 / 4520 for 4096x4096 /
// 14336x4096 / 4096x14336 / 128256x4096, against 2477 / 3726 / 2890 / 4345 for variant 5).
// Two and four rows: long rows split over warps (k 14336: 3360 v7 / 2370 v6 against 1892 /
// 1448 for the variant 0 picked before), 14336 rows two warps a pair (3415 / 2439 v6 against
// 3205 / 2006 v5), 128256 rows unsplit (4328 v3 / 3070 v2 against 4060 / 2487 v5), 4096 rows
// x staged in shared memory (v5: 2665 / 1874). (Three rows, not timed, take four rows' picks.)
inline int gemv_pick_variant(int n, int64_t m, int64_t k) {
  if (n == 1) return 7;
  if (k > 8192) return n == 2 ? 7 : 6;
  if (m >= 65536) return n == 2 ? 3 : 2;
  if (m >= 8192) return 6;
  return static_cast<int64_t>(n) * k * 4 <= kGemvMaxSmemX ? 5 : kGemvDefaultVariant;
}
// Whether variant v can run n rows of length k (the shared-memory variants 4, 5 need the
// F32 rows of x to fit kGemvMaxSmemX).
inline bool gemv_variant_takes(int v, int n, int64_t k) {
  return v >= 0 && v < kGemvNumVariants && ((v != 4 && v != 5) || static_cast<int64_t>(n) * k * 4 <= kGemvMaxSmemX);
}
// The variants the GLU launcher takes (gemv_pick_variant's picks for a GLU's shapes, and 0).
inline bool gemv_glu_variant(int v) { return v == 0 || v == 1 || v == 5 || v == 6 || v == 7; }
constexpr int kGemvMaxBatch = 4;
constexpr int kGemvMaxSegs = 4;

// True when launch_gemv_bf16 handles this problem: n <= kGemvMaxBatch, k % 8 == 0, and
// 16-byte aligned x and w.
bool gemv_supported(int n, int64_t k, const void* x, const void* w);

// out[j, r] = sum_i x[j, i] * w[r, i] (+ bias[r]).
//   w [m, k] BF16, x [n, k] F32, bias [m] F32 or null, out [n, m] F32.
// pdl: launch as a programmatic dependent of the previous kernel in the stream (weights start
// streaming before that kernel finishes; x and out are touched only after it has).
cudaError_t launch_gemv_bf16(const void* w, const float* x, const float* bias, float* out, int n,
                             int64_t m, int64_t k, int variant, bool pdl, cudaStream_t stream);

// One weight matrix of a multi-matrix GEMV: out [n, m] = x @ w^T (+ bias).
struct GemvSeg {
  const void* w = nullptr;  // [m, k] BF16
  const float* bias = nullptr;
  float* out = nullptr;
  int64_t m = 0;
};

// Whether a one-matrix launch of hold variant v (kGemvHoldVariant, kGemvHold2Variant) with n rows
// of x runs its own kernel on this GPU (false: it runs variant 7).
bool gemv_hold_applies(int variant, int n, int64_t m, int64_t k);

// Whether launch_gemv_bf16_multi takes the rope epilogue (rope_epilogue.h: a warp's two rows are
// i and D/2 + i of a q or k head): one row of x, variant 7 (or a hold variant, which runs as 7 for
// three matrices), three segments q, k, v of whole heads (k and v of one size).
bool gemv_rope_takes(const GemvSeg* segs, int n_segs, int n, int64_t k, int variant, int head_dim);

// Whether launch_gemv_bf16_multi issues an L2Prefetch (l2_prefetch.h) for n rows of x, n_segs
// matrices (the first of m0 rows) and variant: one row on variant 7 (or a hold variant that runs as
// 7), where a kernel of its own lets the grid's last wave of blocks (as many as the GPU holds at
// once) each ask for a slice; elsewhere the hint is ignored.
bool gemv_prefetch_takes(int variant, int n, int n_segs, int64_t m0, int64_t k);

// n_segs (1..kGemvMaxSegs) GEMVs over the same x in one launch (their rows form one grid).
// rope (null or head_dim 0: none): the rope + K/V store epilogue (gemv_rope_takes).
// prefetch (null or n 0: none): the next GEMV's weights into L2 (gemv_prefetch_takes; not with
// the rope epilogue). hold_gate (null: none): a hold kernel's blocks wait at that start gate
// (hold_gate.cuh) before the loads it names; other kernels ignore it.
cudaError_t launch_gemv_bf16_multi(const GemvSeg* segs, int n_segs, const float* x, int n,
                                   int64_t k, int variant, bool pdl, cudaStream_t stream,
                                   const GemvRope* rope = nullptr, const L2Prefetch* prefetch = nullptr,
                                   const HoldGateUse* hold_gate = nullptr);

// out = act(x @ w_gate^T) * (x @ w_up^T), act SiLU or GeLU-tanh, in one launch: each warp
// reads the same rows of both matrices. gate_out / up_out (may be null) also receive the
// plain products; out may equal gate_out (then only out is written there).
//   w_gate, w_up [m, k] BF16; x [n, k] F32; out, gate_out, up_out [n, m] F32.
// variant: one of gemv_pick_variant's picks (gemv_glu_variant).
cudaError_t launch_gemv_bf16_glu(const void* w_gate, const void* w_up, const float* x, int n,
                                 int64_t m, int64_t k, bool gelu_tanh, float* out, float* gate_out,
                                 float* up_out, int variant, bool pdl, cudaStream_t stream);

}  // namespace ember::cuda
