#pragma once
// Device helper (nvcc only): a row of activations held in registers, written as e4m3 bytes
// with one scale (max |x| / 448) - the x operand of the FP8 cuBLASLt GEMM. Shared by the
// plain row quantizer (qweight.cu), the kernels that produce a GEMM's x and quantize it on the
// way out (RMSNorm and GLU in elementwise.cu) and the FP8 wgmma GEMV's x staging (qgemv_wg.cu),
// so every producer gives the same bytes (fp8_row_scale, e4m3x4).
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/qgemv.cuh"

#include <cuda_fp8.h>

#include <cstdint>

namespace ember::cuda {

__device__ __forceinline__ float abs_max4(float m, float4 v) {
  return fmaxf(m, fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))));
}

// The e4m3 scale of a row whose largest |value| is mx (max |x| / 448; a zero row gets 1).
__device__ __forceinline__ float fp8_row_scale(float mx) { return mx > 0.0f ? mx / 448.0f : 1.0f; }

// Four values times inv as saturated e4m3 bytes, v.x in the low byte.
__device__ __forceinline__ uint32_t e4m3x4(float4 v, float inv) {
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(v.x * inv, v.y * inv), __NV_SATFINITE, __NV_E4M3);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(v.z * inv, v.w * inv), __NV_SATFINITE, __NV_E4M3);
  return lo | hi << 16;
}

// Row `row` whose float4 number threadIdx.x + j * blockDim.x is v[j] (those < n4 hold data;
// k % 4 == 0, k_pad % 4 == 0): every thread of the block calls this.
template <int V>
__device__ __forceinline__ void store_row_fp8(const float4 (&v)[V], int n4, int64_t row, const Fp8RowsOut& o,
                                              float* s_tmp) {
  float mx = 0.0f;
#pragma unroll
  for (int j = 0; j < V; ++j)
    if (static_cast<int>(threadIdx.x + j * blockDim.x) < n4) mx = abs_max4(mx, v[j]);
  mx = block_max(mx, s_tmp);
  const float scale = fp8_row_scale(mx);
  const float inv = 1.0f / scale;
  if (threadIdx.x == 0) o.scale[row] = scale;
  auto* q = reinterpret_cast<uint32_t*>(o.q + row * o.k_pad);
  const int kp4 = static_cast<int>(o.k_pad / 4);
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int c = static_cast<int>(threadIdx.x + j * blockDim.x);
    if (c < n4) q[c] = e4m3x4(v[j], inv);
  }
  for (int c = n4 + static_cast<int>(threadIdx.x); c < kp4; c += static_cast<int>(blockDim.x)) q[c] = 0;
}

// As store_row_fp8, for a row held in chunks of 8 values: v[2 j] and v[2 j + 1] are values
// 8c .. 8c + 7 of chunk c = threadIdx.x + j * blockDim.x (those < n8 hold data; k % 8 == 0,
// k_pad % 8 == 0). The same bytes and scale as store_row_fp8 of the same row.
template <int V>
__device__ __forceinline__ void store_row_fp8_x8(const float4 (&v)[2 * V], int n8, int64_t row, const Fp8RowsOut& o,
                                                 float* s_tmp) {
  float mx = 0.0f;
#pragma unroll
  for (int j = 0; j < V; ++j)
    if (static_cast<int>(threadIdx.x + j * blockDim.x) < n8) mx = abs_max4(abs_max4(mx, v[2 * j]), v[2 * j + 1]);
  mx = block_max(mx, s_tmp);
  const float scale = fp8_row_scale(mx);
  const float inv = 1.0f / scale;
  if (threadIdx.x == 0) o.scale[row] = scale;
  auto* q = reinterpret_cast<uint2*>(o.q + row * o.k_pad);
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int c = static_cast<int>(threadIdx.x + j * blockDim.x);
    if (c < n8) q[c] = make_uint2(e4m3x4(v[2 * j], inv), e4m3x4(v[2 * j + 1], inv));
  }
  for (int c = n8 + static_cast<int>(threadIdx.x); c < static_cast<int>(o.k_pad / 8); c += static_cast<int>(blockDim.x))
    q[c] = make_uint2(0, 0);
}

}  // namespace ember::cuda
