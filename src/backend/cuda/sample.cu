#include "backend/cuda/sample.cuh"

#include <climits>
#include <cmath>

namespace ember::cuda {

namespace {

constexpr int kThreads = 512;

// (v, i) beats (bv, bi): larger value, or the same value at a lower index. Entries that were
// never set carry (-inf, INT_MAX), so they lose to any real candidate.
__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
  return v > bv || (v == bv && i < bi);
}

// One block per row. Each thread scans its elements in ascending index order keeping the
// first strict maximum (NaN and -inf never compare greater than the -inf start), then the
// block reduces (value, index) pairs.
template <bool kVec4>
__global__ void __launch_bounds__(kThreads) argmax_rows_kernel(const float* __restrict__ x, int64_t vocab,
                                                               int32_t* __restrict__ out) {
  const float* row = x + static_cast<int64_t>(blockIdx.x) * vocab;
  float bv = -INFINITY;
  int bi = INT_MAX;
  if constexpr (kVec4) {
    const float4* row4 = reinterpret_cast<const float4*>(row);
    const int64_t n4 = vocab / 4;
    for (int64_t j = threadIdx.x; j < n4; j += kThreads) {
      const float4 v = __ldg(row4 + j);
      const int base = static_cast<int>(j * 4);
      if (v.x > bv) { bv = v.x; bi = base; }
      if (v.y > bv) { bv = v.y; bi = base + 1; }
      if (v.z > bv) { bv = v.z; bi = base + 2; }
      if (v.w > bv) { bv = v.w; bi = base + 3; }
    }
  } else {
    for (int64_t j = threadIdx.x; j < vocab; j += kThreads) {
      const float v = __ldg(row + j);
      if (v > bv) { bv = v; bi = static_cast<int>(j); }
    }
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
    if (better(ov, oi, bv, bi)) { bv = ov; bi = oi; }
  }
  __shared__ float sv[kThreads / 32];
  __shared__ int si[kThreads / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) { sv[warp] = bv; si[warp] = bi; }
  __syncthreads();
  if (warp == 0) {
    bv = lane < kThreads / 32 ? sv[lane] : -INFINITY;
    bi = lane < kThreads / 32 ? si[lane] : INT_MAX;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
      if (better(ov, oi, bv, bi)) { bv = ov; bi = oi; }
    }
    if (lane == 0) out[blockIdx.x] = bi == INT_MAX ? 0 : bi;
  }
}

}  // namespace

cudaError_t launch_argmax_rows(const float* x, int n_rows, int64_t vocab, int32_t* out,
                               cudaStream_t stream) {
  if (n_rows <= 0) return cudaSuccess;
  if (vocab <= 0 || vocab >= INT_MAX) return cudaErrorInvalidValue;
  const bool vec4 = vocab % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  if (vec4)
    argmax_rows_kernel<true><<<n_rows, kThreads, 0, stream>>>(x, vocab, out);
  else
    argmax_rows_kernel<false><<<n_rows, kThreads, 0, stream>>>(x, vocab, out);
  return cudaGetLastError();
}

}  // namespace ember::cuda
