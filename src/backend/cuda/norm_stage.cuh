#pragma once
// Device side of RMSNorm: the sum of squares and scale of the register norm kernel
// (elementwise.cu), and the same computation inside a GEMV's x staging (xnorm.h). Both round
// every operation explicitly (no contraction into FMAs the compiler might choose differently
// in the two kernels), so their results agree bit for bit.
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/xnorm.h"

namespace ember::cuda {

// x.x^2 + x.y^2 + x.z^2 + x.w^2, left to right.
__device__ __forceinline__ float sum_sq4(float4 v) {
  float s = __fmul_rn(v.x, v.x);
  s = __fadd_rn(s, __fmul_rn(v.y, v.y));
  s = __fadd_rn(s, __fmul_rn(v.z, v.z));
  return __fadd_rn(s, __fmul_rn(v.w, v.w));
}
__device__ __forceinline__ float rms_inverse(float total, int64_t d, float eps) {
  return rsqrtf(__fadd_rn(__fdiv_rn(total, static_cast<float>(d)), eps));
}
// v * inv * g, per element.
__device__ __forceinline__ float4 rms_scale4(float4 v, float inv, float4 g) {
  return make_float4(__fmul_rn(__fmul_rn(v.x, inv), g.x), __fmul_rn(__fmul_rn(v.y, inv), g.y),
                     __fmul_rn(__fmul_rn(v.z, inv), g.z), __fmul_rn(__fmul_rn(v.w, inv), g.w));
}

// Four norm weights from index 4 i.
template <typename W>
__device__ __forceinline__ float4 load_w4(const W* w, int64_t i);
template <>
__device__ __forceinline__ float4 load_w4<float>(const float* w, int64_t i) {
  return reinterpret_cast<const float4*>(w)[i];
}
template <>
__device__ __forceinline__ float4 load_w4<__nv_bfloat16>(const __nv_bfloat16* w, int64_t i) {
  const uint2 u = reinterpret_cast<const uint2*>(w)[i];
  return make_float4(bf16_lo(u.x), bf16_hi(u.x), bf16_lo(u.y), bf16_hi(u.y));
}
__device__ __forceinline__ float4 xnorm_w4(const XNorm& nm, int64_t i) {
  return nm.w_bf16 ? load_w4(static_cast<const __nv_bfloat16*>(nm.w), i) : load_w4(static_cast<const float*>(nm.w), i);
}

// The register norm kernel's block for a row of d floats: threads and float4s per thread.
__host__ __device__ inline int rms_reg_threads(int64_t d) {
  const int64_t n4 = d / 4;
  const int64_t t = (n4 + 31) / 32 * 32;
  return static_cast<int>(t < 1024 ? t : 1024);
}

// inv[j] = 1 / sqrt(mean(x[j]^2) + eps) for the n rows of x [n, d] (d <= kXNormMaxK), by a
// block of kThreads (>= 32 * n) threads summing exactly as the register norm kernel does with
// its rms_reg_threads(d) threads: "virtual" thread t sums float4s t, t + T, ... left to right
// (at most 4; the zeros past the row change no sum), each virtual warp of 32 is reduced by
// warp_sum, and the partials by one more warp_sum. A warp takes kBatch virtual warps at a
// time with all their loads in flight (one L2 round trip, not one per virtual warp).
// part: 32 * n floats of shared memory; inv: n floats of shared memory. Ends with a barrier.
template <int kThreads>
__device__ void rms_inverse_rows(const float* x, int n, int64_t d, float eps, float* part, float* inv) {
  static_assert(kThreads % 32 == 0);
  constexpr int kWarps = kThreads / 32, kBatch = 4;
  const int T = rms_reg_threads(d);
  const int n4 = static_cast<int>(d / 4), vwarps = T / 32, total = n * vwarps;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int vw0 = warp; vw0 < total; vw0 += kWarps * kBatch) {
    float4 v[kBatch][4];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int vw = vw0 + b * kWarps;
      const int row = vw < total ? vw / vwarps : 0, t = (vw % vwarps) * 32 + lane;
      const float4* xr = reinterpret_cast<const float4*>(x + row * d);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int i = t + j * T;
        v[b][j] = vw < total && i < n4 ? xr[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      float ss = 0.0f;
#pragma unroll
      for (int j = 0; j < 4; ++j) ss = __fadd_rn(ss, sum_sq4(v[b][j]));
      ss = warp_sum(ss);
      const int vw = vw0 + b * kWarps;
      if (lane == 0 && vw < total) part[(vw / vwarps) * 32 + vw % vwarps] = ss;
    }
  }
  __syncthreads();
  if (warp < n) {
    float t = lane < vwarps ? part[warp * 32 + lane] : 0.0f;
    t = warp_sum(t);
    if (lane == 0) inv[warp] = rms_inverse(t, d, eps);
  }
  __syncthreads();
}

}  // namespace ember::cuda
