#pragma once
// What the two fused attention + o kernels (attn_o.cu, attn_o_split.cu) share: their shapes, and
// the product of one 16-row tile of packed o weights in shared memory with the attention row x
// (shared memory too) on mma.m16n8k16, x broadcast to every column of the product.
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/mma_util.cuh"
#include "backend/cuda/qgemm_common.cuh"
#include "backend/cuda/qgemv.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace ember::cuda::attn_o_detail {

constexpr int kHeadDim = 128;
constexpr int kMaxGroup = 8;  // query heads a K/V head

constexpr int align16(int b) { return (b + 15) / 16 * 16; }

// acc[0] / acc[2] (rows g and g + 8 of the tile, g = lane / 4; lanes with lane % 4 == 0 hold
// column 0) += the tile's rows times x over k slices first, first + step, ... of the k elements:
// 32-element slices of int4 (16 bytes a row; x BF16; the group's BF16 scales, tile layout
// [groups][16], applied once a slice in F32, as the GEMV applies them), 16-element slices of fp8
// (x F16; the row scales left to the caller). rows: the tile's row 0 at byte 0, w_stride bytes a row.
template <QFormat F>
__device__ __forceinline__ void o_tile_mma(float (&acc)[4], const uint8_t* rows, int w_stride, const void* scales,
                                           const void* x, int k, int first, int step) {
  const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const uint8_t* rg = rows + g * w_stride + 4 * c;
  const uint8_t* rg8 = rg + 8 * w_stride;
  if constexpr (F == QFormat::Int4) {
    const auto* scs = static_cast<const __nv_bfloat16*>(scales);
    const uint4* xq = static_cast<const uint4*>(x);  // 8 BF16 a lane: slice elements 8c .. 8c + 7
#pragma unroll 4
    for (int sl = first; sl < k / 32; sl += step) {
      const uint32_t w0 = *reinterpret_cast<const uint32_t*>(rg + sl * 16);
      const uint32_t w1 = *reinterpret_cast<const uint32_t*>(rg8 + sl * 16);
      const int grp = sl >> 2;
      const uint4 xv = xq[sl * 4 + c];
      // (q - 8) exactly in BF16; the group's scale applied once, in F32
      float p[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      mma_k16<__nv_bfloat16>(p, qgemm_detail::i4_exact(w0, 0), qgemm_detail::i4_exact(w1, 0),
                             qgemm_detail::i4_exact(w0, 1), qgemm_detail::i4_exact(w1, 1), xv.x, xv.y);
      mma_k16<__nv_bfloat16>(p, qgemm_detail::i4_exact(w0, 2), qgemm_detail::i4_exact(w1, 2),
                             qgemm_detail::i4_exact(w0, 3), qgemm_detail::i4_exact(w1, 3), xv.z, xv.w);
      acc[0] = fmaf(__bfloat162float(scs[grp * 16 + g]), p[0], acc[0]);
      acc[2] = fmaf(__bfloat162float(scs[grp * 16 + g + 8]), p[2], acc[2]);
    }
  } else {
    const uint2* xq = static_cast<const uint2*>(x);  // 4 F16 a lane: slice elements 4c .. 4c + 3
#pragma unroll 4
    for (int sl = first; sl < k / 16; sl += step) {
      const uint2 h0 = fp8x4_to_half4<true>(*reinterpret_cast<const uint32_t*>(rg + sl * 16));
      const uint2 h1 = fp8x4_to_half4<true>(*reinterpret_cast<const uint32_t*>(rg8 + sl * 16));
      const uint2 xv = xq[sl * 4 + c];
      mma_k16<__half>(acc, h0.x, h1.x, h0.y, h1.y, xv.x, xv.y);
    }
  }
}

}  // namespace ember::cuda::attn_o_detail
