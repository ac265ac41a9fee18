#pragma once
// Memory-bound matrix-vector products for small batches (decode): each weight byte is read
// once, with 16-byte streaming loads and several loads in flight per thread. One launch can
// cover up to kGemvMaxSegs weight matrices that share the input (q/k/v, gate/up), and the
// gate/up pair can apply the GLU in its epilogue.
#include <cuda_runtime.h>

#include <cstdint>

namespace ember::cuda {

// Tiling variants (rows per warp x 16-byte loads in flight per row per lane). Benchmarks time
// them all; the backend uses gemv_pick_variant.
struct GemvVariant {
  int rows_per_warp;
  int unroll;
};
// Variants 4 and 5 stage x in shared memory (F32, n * k * 4 bytes <= kGemvMaxSmemX) instead of
// reading it through L1 next to the streaming weights.
constexpr int kGemvNumVariants = 6;
constexpr GemvVariant kGemvVariants[kGemvNumVariants] = {{1, 8}, {2, 4}, {4, 4}, {2, 8}, {1, 8}, {2, 4}};
constexpr int64_t kGemvMaxSmemX = 96 * 1024;
constexpr int kGemvDefaultVariant = 1;
// The variant measured fastest on an H200 for this shape: x staged in shared memory when it
// fits (2 rows per warp, 4 loads in flight); otherwise long rows prefer one row per warp with
// 8 loads in flight, rows of <= 8192 two rows with 4. (The GLU launcher takes only these three.)
inline int gemv_pick_variant(int n, int64_t k) {
  if (static_cast<int64_t>(n) * k * 4 <= kGemvMaxSmemX) return 5;
  return k > 8192 ? 0 : kGemvDefaultVariant;
}
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

// n_segs (1..kGemvMaxSegs) GEMVs over the same x in one launch (their rows form one grid).
cudaError_t launch_gemv_bf16_multi(const GemvSeg* segs, int n_segs, const float* x, int n,
                                   int64_t k, int variant, bool pdl, cudaStream_t stream);

// out = act(x @ w_gate^T) * (x @ w_up^T), act SiLU or GeLU-tanh, in one launch: each warp
// reads the same rows of both matrices. gate_out / up_out (may be null) also receive the
// plain products; out may equal gate_out (then only out is written there).
//   w_gate, w_up [m, k] BF16; x [n, k] F32; out, gate_out, up_out [n, m] F32.
// variant: one of gemv_pick_variant's picks (0, 1, 5).
cudaError_t launch_gemv_bf16_glu(const void* w_gate, const void* w_up, const float* x, int n,
                                 int64_t m, int64_t k, bool gelu_tanh, float* out, float* gate_out,
                                 float* up_out, int variant, bool pdl, cudaStream_t stream);

}  // namespace ember::cuda
