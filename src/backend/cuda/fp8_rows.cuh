#pragma once
// Device helper (nvcc only): a row of activations held in registers, written as e4m3 bytes
// with one scale (max |x| / 448) - the x operand of the FP8 cuBLASLt GEMM. Shared by the
// plain row quantizer (qweight.cu) and the kernels that produce a GEMM's x and quantize it
// on the way out (RMSNorm and GLU in elementwise.cu), so every producer gives the same bytes.
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/qgemv.cuh"

#include <cuda_fp8.h>

#include <cstdint>

namespace ember::cuda {

__device__ __forceinline__ float abs_max4(float m, float4 v) {
  return fmaxf(m, fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))));
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
  const float scale = mx > 0.0f ? mx / 448.0f : 1.0f;
  const float inv = 1.0f / scale;
  if (threadIdx.x == 0) o.scale[row] = scale;
  auto* q = reinterpret_cast<uint32_t*>(o.q + row * o.k_pad);
  const int kp4 = static_cast<int>(o.k_pad / 4);
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int c = static_cast<int>(threadIdx.x + j * blockDim.x);
    if (c < n4) {
      const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(v[j].x * inv, v[j].y * inv), __NV_SATFINITE, __NV_E4M3);
      const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(v[j].z * inv, v[j].w * inv), __NV_SATFINITE, __NV_E4M3);
      q[c] = lo | hi << 16;
    }
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
  const float scale = mx > 0.0f ? mx / 448.0f : 1.0f;
  const float inv = 1.0f / scale;
  if (threadIdx.x == 0) o.scale[row] = scale;
  auto pack4 = [inv](float4 x) {
    const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(x.x * inv, x.y * inv), __NV_SATFINITE, __NV_E4M3);
    const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(x.z * inv, x.w * inv), __NV_SATFINITE, __NV_E4M3);
    return lo | hi << 16;
  };
  auto* q = reinterpret_cast<uint2*>(o.q + row * o.k_pad);
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int c = static_cast<int>(threadIdx.x + j * blockDim.x);
    if (c < n8) q[c] = make_uint2(pack4(v[2 * j]), pack4(v[2 * j + 1]));
  }
  for (int c = n8 + static_cast<int>(threadIdx.x); c < static_cast<int>(o.k_pad / 8); c += static_cast<int>(blockDim.x))
    q[c] = make_uint2(0, 0);
}

}  // namespace ember::cuda
