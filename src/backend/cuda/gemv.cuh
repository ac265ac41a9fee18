#pragma once
// Memory-bound matrix-vector products for small batches (decode): each weight byte is read
// once, with 16-byte streaming loads and several loads in flight per thread.
#include <cuda_runtime.h>

#include <cstdint>

namespace ember::cuda {

// Tiling variants (rows per warp x 16-byte loads in flight per row per lane). Benchmarks time
// them all; the backend uses kGemvDefaultVariant.
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
// 8 loads in flight, rows of <= 8192 two rows with 4.
inline int gemv_pick_variant(int n, int64_t k) {
  if (static_cast<int64_t>(n) * k * 4 <= kGemvMaxSmemX) return 5;
  return k > 8192 ? 0 : kGemvDefaultVariant;
}
constexpr int kGemvMaxBatch = 4;

// True when launch_gemv_bf16 handles this problem: n <= kGemvMaxBatch, k % 8 == 0, and
// 16-byte aligned x and w.
bool gemv_supported(int n, int64_t k, const void* x, const void* w);

// out[j, r] = sum_i x[j, i] * w[r, i] (+ bias[r]).
//   w [m, k] BF16, x [n, k] F32, bias [m] F32 or null, out [n, m] F32.
// pdl: launch as a programmatic dependent of the previous kernel in the stream (weights start
// streaming before that kernel finishes; x and out are touched only after it has).
cudaError_t launch_gemv_bf16(const void* w, const float* x, const float* bias, float* out, int n,
                             int64_t m, int64_t k, int variant, bool pdl, cudaStream_t stream);

}  // namespace ember::cuda
