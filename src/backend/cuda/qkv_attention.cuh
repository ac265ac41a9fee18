#pragma once
// Device half of the q/k/v GEMV's group attention (qkv_attention.h): one block of 8 warps
// computes the attention of kv head kh's G q heads over the sequence's keys, with CUDA cores.
//
// Warp w takes the 4-key chunks w, w + 8, ... of the keys; its K and V rows come by cp.async
// through a private ring of two chunks (L2 only: the group's k and v tiles stored the step's own
// row from other blocks of this grid). Lane l holds dims 4l..4l+3 of every head (lanes past
// head_dim / 4 hold zeros): a chunk's 4 keys x 4 heads partial dot products are summed over the
// lanes by a transposed reduction (16 shuffles; lane l ends with the score of key (l >> 3) & 3,
// head (l >> 1) & 3), the warp keeps an online softmax per head, and P V adds each key's V row
// times its 4 heads' probabilities into 4 x 4 accumulators a lane. The 8 warps' states then meet
// in shared memory. F32 throughout (q as the GEMV wrote it, K/V widened from the cache), so it
// differs from the tensor-core attention kernel (Q rounded to 16 bits) by rounding only.
#include "backend/cuda/mma_util.cuh"
#include "backend/cuda/qkv_attention.h"
#include "backend/cuda/rope_epilogue.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace ember::cuda {

namespace qkv_attn {

constexpr int kG = kGemvAttnMaxGroup;
constexpr int kKeys = 4;  // keys a chunk
// Shared memory the group attention takes: `ring` (warp stages, then the warps' outputs) and
// `aux` (scaled q, the warps' softmax states, the cached block table).
constexpr int ring_bytes(int head_dim) { return 8 * 2 * kKeys * 2 * head_dim * 2; }
constexpr int kAuxQBytes = kG * kGemvAttnMaxHeadDim * 4;
constexpr int kAuxStateBytes = 2 * 8 * kG * 4;
constexpr int kAuxTableOffset = 4096;
constexpr int kAuxBytes = kAuxTableOffset + kGemvAttnMaxTableBlocks * 4;
static_assert(kAuxQBytes + kAuxStateBytes <= kAuxTableOffset);

__device__ __forceinline__ void copy16(uint8_t* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wait_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// 4 cache elements (8 bytes) as floats.
__device__ __forceinline__ float4 widen4(uint2 r, bool bf16) {
  if (bf16)
    return make_float4(__uint_as_float(r.x << 16), __uint_as_float(r.x & 0xffff0000u), __uint_as_float(r.y << 16),
                       __uint_as_float(r.y & 0xffff0000u));
  const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&r.x));
  const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&r.y));
  return make_float4(a.x, a.y, b.x, b.y);
}

// v[i] summed over the warp's lanes for i = (lane >> 1) & 15, returned in that lane (both lanes
// of a pair hold it): each xor stage halves the values a lane carries.
__device__ __forceinline__ float transposed_sum16(float (&v)[16], int lane) {
  float a[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const bool hi = lane & 16;
    const float send = hi ? v[i] : v[i + 8];
    const float keep = hi ? v[i + 8] : v[i];
    a[i] = keep + __shfl_xor_sync(0xffffffffu, send, 16);
  }
  float b[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const bool hi = lane & 8;
    const float send = hi ? a[i] : a[i + 4];
    const float keep = hi ? a[i + 4] : a[i];
    b[i] = keep + __shfl_xor_sync(0xffffffffu, send, 8);
  }
  float c[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const bool hi = lane & 4;
    const float send = hi ? b[i] : b[i + 2];
    const float keep = hi ? b[i + 2] : b[i];
    c[i] = keep + __shfl_xor_sync(0xffffffffu, send, 4);
  }
  const bool hi = lane & 2;
  float d = (hi ? c[1] : c[0]) + __shfl_xor_sync(0xffffffffu, hi ? c[0] : c[1], 2);
  return d + __shfl_xor_sync(0xffffffffu, d, 1);
}

__device__ __forceinline__ float pick4(const float (&x)[kG], int i) {
  return i == 0 ? x[0] : i == 1 ? x[1] : i == 2 ? x[2] : x[3];
}

}  // namespace qkv_attn

// The attention of kv head kh's group (8 warps, every thread of the block). q_all: the GEMV's q
// output [n_heads * D] (F32, rotated); ring: >= qkv_attn::ring_bytes(D) bytes of shared memory,
// aux: qkv_attn::kAuxBytes, both free (no copy in flight into them).
__device__ __forceinline__ void gemv_group_attention(const GemvAttn& at, const GemvRope& rp, const float* q_all,
                                                     int n_kv_heads, int kh, uint8_t* ring, uint8_t* aux) {
  using namespace qkv_attn;
  const int D = rp.head_dim, G = at.group, bs = at.block_size;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float* s_q = reinterpret_cast<float*>(aux);  // [kG][D], times scale * log2(e); heads past G zero
  float* s_m = s_q + kG * kGemvAttnMaxHeadDim;  // [8][kG] each warp's running maxima
  float* s_l = s_m + 8 * kG;                    // [8][kG] and sums
  int32_t* s_bt = reinterpret_cast<int32_t*>(aux + kAuxTableOffset);
  const int n_keys = __ldcg(at.seq_len);  // (step metadata: L2, as every read here)
  const int n_blocks = min((n_keys + bs - 1) / bs, kGemvAttnMaxTableBlocks);
  for (int i = threadIdx.x; i < kG * D; i += blockDim.x) {
    const int h = i / D;
    s_q[i] = h < G ? __ldcg(q_all + (static_cast<size_t>(kh) * G + h) * D + i % D) * at.scale_log2 : 0.0f;
  }
  for (int i = threadIdx.x; i < n_blocks; i += blockDim.x) s_bt[i] = __ldcg(at.block_table + i);
  __syncthreads();

  // Warp stages: chunk rows (key kk, K or V) of D * 2 bytes at (kk * 2 + kv) * D * 2.
  const int stage_bytes = kKeys * 2 * D * 2;
  uint8_t* wring = ring + warp * 2 * stage_bytes;
  const int chunks = (n_keys + kKeys - 1) / kKeys;
  const int mine = chunks > warp ? (chunks - warp + 7) / 8 : 0;  // chunks warp + 8i, i < mine
  const size_t slot_bytes = static_cast<size_t>(n_kv_heads) * D * 2;
  const uint8_t* k_base = static_cast<const uint8_t*>(rp.k_cache) + static_cast<size_t>(kh) * D * 2;
  const uint8_t* v_base = static_cast<const uint8_t*>(rp.v_cache) + static_cast<size_t>(kh) * D * 2;
  const int row_chunks = D / 8;  // 16-byte pieces of a row
  auto issue = [&](int i, int stage) {
    uint8_t* dst = wring + stage * stage_bytes;
    const int c = warp + 8 * i;
    for (int idx = lane; idx < kKeys * 2 * row_chunks; idx += 32) {
      const int kk = idx / (2 * row_chunks), kv = (idx / row_chunks) & 1, piece = idx % row_chunks;
      const int j = kKeys * c + kk;
      const bool ok = i < mine && j < n_keys;
      size_t off = 0;
      if (ok) off = (static_cast<size_t>(s_bt[j / bs]) * bs + j % bs) * slot_bytes + piece * 16;
      copy16(dst + idx * 16, (kv ? v_base : k_base) + off, ok);
    }
  };
  issue(0, 0);
  commit();
  issue(1, 1);
  commit();

  const bool dims = lane * 4 < D;  // this lane holds dims 4 lane .. 4 lane + 3
  const int my_key = (lane >> 3) & 3, my_head = (lane >> 1) & 3;
  float o[kG][4], m[kG];
#pragma unroll
  for (int h = 0; h < kG; ++h) {
    m[h] = -INFINITY;
    o[h][0] = o[h][1] = o[h][2] = o[h][3] = 0.0f;
  }
  float l_own = 0.0f;  // this lane's (key, head) probabilities summed, at its head's running max
  for (int i = 0; i < mine; ++i) {
    const int stage = i & 1;
    wait_copies<1>();
    __syncwarp();
    const uint8_t* st = wring + stage * stage_bytes;
    float s[kKeys * kG];
#pragma unroll
    for (int h = 0; h < kG; ++h) {
      const float4 q = dims ? *reinterpret_cast<const float4*>(s_q + h * D + 4 * lane) : make_float4(0, 0, 0, 0);
#pragma unroll
      for (int kk = 0; kk < kKeys; ++kk) {
        const float4 k = dims ? widen4(*reinterpret_cast<const uint2*>(st + kk * 4 * D + lane * 8), rp.cache_bf16)
                              : make_float4(0, 0, 0, 0);
        s[kk * kG + h] = q.x * k.x + q.y * k.y + q.z * k.z + q.w * k.w;
      }
    }
    const int j = kKeys * (warp + 8 * i) + my_key;
    const float sum = transposed_sum16(s, lane);  // (every lane: its shuffles take the whole warp)
    const float x = j < n_keys ? sum : -INFINITY;
    // (a chunk's first key is always in range, so each head's chunk maximum is finite)
    float cm = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 8));
    cm = fmaxf(cm, __shfl_xor_sync(0xffffffffu, cm, 16));
    const float m_own = fmaxf(pick4(m, my_head), cm);
    float corr[kG];
#pragma unroll
    for (int h = 0; h < kG; ++h) {
      const float mn = __shfl_sync(0xffffffffu, m_own, 2 * h);
      corr[h] = exp2f(m[h] - mn);  // (m -inf before the first chunk: 0)
      m[h] = mn;
#pragma unroll
      for (int e = 0; e < 4; ++e) o[h][e] *= corr[h];
    }
    const float p = exp2f(x - m_own);
    l_own = l_own * pick4(corr, my_head) + p;
#pragma unroll
    for (int kk = 0; kk < kKeys; ++kk) {
      const float4 v = dims ? widen4(*reinterpret_cast<const uint2*>(st + (kk * 2 + 1) * 2 * D + lane * 8), rp.cache_bf16)
                            : make_float4(0, 0, 0, 0);
#pragma unroll
      for (int h = 0; h < kG; ++h) {
        const float ph = __shfl_sync(0xffffffffu, p, 2 * (kk * kG + h));
        o[h][0] = fmaf(ph, v.x, o[h][0]);
        o[h][1] = fmaf(ph, v.y, o[h][1]);
        o[h][2] = fmaf(ph, v.z, o[h][2]);
        o[h][3] = fmaf(ph, v.w, o[h][3]);
      }
    }
    __syncwarp();  // every lane has read the stage before it is refilled
    issue(i + 2, stage);
    commit();
  }
  wait_copies<0>();
  // Sums a head over its lanes (each (key, head) pair sits in two lanes: odd lanes left out).
  float l = (lane & 1) ? 0.0f : l_own;
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 8);
  l += __shfl_xor_sync(0xffffffffu, l, 16);
  float l_head[kG];
#pragma unroll
  for (int h = 0; h < kG; ++h) l_head[h] = __shfl_sync(0xffffffffu, l, 2 * h);
  __syncthreads();  // every warp is done with its stages: the ring takes the outputs
  float* s_o = reinterpret_cast<float*>(ring);  // [8][kG][D]
  if (dims) {
#pragma unroll
    for (int h = 0; h < kG; ++h)
      *reinterpret_cast<float4*>(s_o + (warp * kG + h) * D + 4 * lane) = make_float4(o[h][0], o[h][1], o[h][2], o[h][3]);
  }
  if (lane < kG) {
    s_m[warp * kG + lane] = pick4(m, lane);
    s_l[warp * kG + lane] = pick4(l_head, lane);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < G * D; i += blockDim.x) {
    const int h = i / D, d = i % D;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < 8; ++w) mx = fmaxf(mx, s_m[w * kG + h]);
    float sum = 0.0f, acc = 0.0f;
#pragma unroll
    for (int w = 0; w < 8; ++w) {
      const float f = exp2f(s_m[w * kG + h] - mx);  // (a warp without keys: -inf, 0)
      sum = fmaf(s_l[w * kG + h], f, sum);
      acc = fmaf(s_o[(w * kG + h) * D + d], f, acc);
    }
    at.out[(static_cast<size_t>(kh) * G + h) * D + d] = acc / sum;
  }
}

}  // namespace ember::cuda
