// Paged decode attention over a one-byte K/V cache (FP8 e4m3 / e5m2, INT8 with per-(slot, head)
// scales) for launches of at most kSwapRows packed query rows a (sequence, kv head): one new
// token a sequence with GQA groups up to 8, the decode steps of a serving batch. Keys are the
// rows of the MMAs ("swap AB"):
//   S^T [16 keys x 8 rows] = K [16 keys x D] Q^T [D x 8 rows]       (A = K, B = Q^T)
//   O^T [D x 8 rows]      += V^T [D x 16 keys] P^T [16 keys x 8 rows] (A = V^T, B = P^T)
// The 16-row kernel (attention_fp8.cu) puts the query rows on the MMA's 16 rows, of which a
// Llama-3 group fills 4: this one issues half its MMAs and holds half its O registers for the
// same bytes, converted the same way (attention_bytes.cuh).
//
// Fragments (g = lane / 4, t = lane % 4; head dims and keys may be permuted freely as long as
// both operands of a sum agree, output dims as long as they are put back):
//  - Q K^T: k-step c = 4u + w takes word w of the 16-byte chunk 4u + t of keys g and g + 8
//    (A rows g, g + 8): dims 64u + 16t + 4w + {0, 1} as k 2t, 2t + 1 and + {2, 3} as k 2t + 8,
//    2t + 9; Q row g's B fragment holds the same dims. The K tile layout and fragment loads
//    are the 16-row kernel's; its cp.async ring (ByteTileRing) copies whole 128-byte rows
//    per warp instruction (FP8) and stages the block-table ids in shared memory.
//  - S^T's C fragment (keys g, g + 8; rows 2t, 2t + 1), rounded to F16 P^T, is transposed in
//    registers (movmatrix) into P^T's B fragment (keys 2t, 2t + 1 / 2t + 8, 2t + 9; row g).
//  - P V: the lane loads the V bytes of keys 2t, 2t + 1, 2t + 8, 2t + 9 at dims (D/8) g ..
//    (D/8) g + D/8 - 1 (the 16-row kernel's loads) and pairs them across keys; m-tile i's rows
//    g and g + 8 are dims (D/8) g + 2i and (D/8) g + 2i + 1.
#include "backend/cuda/attention_bytes.cuh"

#include <type_traits>

namespace ember::cuda {
namespace attn {

namespace {

// Q row row0 + g (zeros past n_rows) as the F16 B fragments of Q^T, in the K order above.
// qb[D / 16][2]. row_sum (INT8): the sum of row g's F16 values (the quad's lanes summed).
template <int D>
__device__ __forceinline__ void load_q_swap(uint32_t (&qb)[D / 16][2], const Launch& L, const AttnSpan& sp, int lane,
                                            float* row_sum) {
  const PagedAttnArgs& a = L.a;
  const int G = L.group, kh = blockIdx.y, t = lane % 4;
  const int row = sp.row0 + lane / 4;
  const size_t q_row = static_cast<size_t>(sp.q0 + row / G) * a.n_heads + kh * G + row % G;
  const float4* src = row < sp.n_rows ? reinterpret_cast<const float4*>(a.q + q_row * D + 16 * t) : nullptr;
#pragma unroll
  for (int u = 0; u < D / 64; ++u)
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const float4 x = src ? src[16 * u + w] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      qb[4 * u + w][0] = pack2<__half>(x.x, x.y);
      qb[4 * u + w][1] = pack2<__half>(x.z, x.w);
    }
  if (row_sum) {
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < D / 16; ++k)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&qb[k][j]));
        sum += f.x + f.y;
      }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    *row_sum = sum;
  }
}

// The transpose of an 8x8 F16 matrix held as a fragment (lane: row g, columns 2t, 2t + 1).
__device__ __forceinline__ uint32_t transpose_8x8(uint32_t x) {
  uint32_t y;
  asm("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}

// -inf where key g (s[0], s[1]) or g + 8 (s[2], s[3]) lies past row 2t's (pos_a) or 2t + 1's
// (pos_b) position or outside its window.   key0: the warp's first key of the tile
__device__ __forceinline__ void mask_swap(float (&s)[4], int key0, int pos_a, int pos_b, int window, int lane) {
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int key = key0 + lane / 4 + 8 * (e >> 1);
    const int pos = e & 1 ? pos_b : pos_a;
    if (key > pos || (window > 0 && key <= pos - window)) s[e] = -INFINITY;
  }
}

// The max over the lanes of one t (the 8 values of g): a column of S^T.
__device__ __forceinline__ float max_over_keys(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 4));
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 8));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 16));
}
__device__ __forceinline__ float sum_over_keys(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 4);
  x += __shfl_xor_sync(0xffffffffu, x, 8);
  return x + __shfl_xor_sync(0xffffffffu, x, 16);
}

// Decode over a one-byte cache, keys as the MMA rows: kSwapRows packed rows, 4 warps splitting
// each 64-key tile (16 keys a warp), split-K and the merge of the 4 warps as in the 16-row
// kernel, whose INT8 handling this repeats with keys and rows exchanged (K scales on S^T's
// rows, V scales on P^T's rows against the warp's v_ref, 1152 off the scores and, through one
// more m-tile of constant A, off O).
template <int D, int kStages, bool kSoftcap, int kFmt>
__global__ void __launch_bounds__(kDecodeWarps * 32, fp8_swap_blocks_per_sm(kStages, D, kFmt == kKvI8))
    paged_attn_fp8_swap_kernel(const Launch L) {
  constexpr bool kI8 = kFmt == kKvI8;
  constexpr int kTileBytes = kTileKeys * D;  // one K or V tile
  constexpr int kMt = D / 16;                // m-tiles of O^T
  constexpr int kB = D / 8;                  // bytes of a V row one lane reads
  static_assert(kStages >= 2 && (D == 64 || D == 128) && kFmt != kKvNative);
  using Ring = ByteTileRing<D, kStages, kI8, fp8_swap_run(kI8), /*kStagedIds=*/true>;

  const PagedAttnArgs& a = L.a;
  extern __shared__ uint4 smem[];  // the ring (byte_ring_smem), then the merge buffer

  // With the fused rope, the tiles of keys before the new tokens' are copied before the PDL
  // wait (see the 16-bit kernel, attention.cu).
  const bool rope = !kI8 && a.rope.active;  // (block-uniform)
  pdl_enter_or_defer(rope, a.pdl_release_early);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  AttnSpan sp;
  if (!attn_span<true, kSwapRows>(L, sp)) return;
  Ring ring(smem, a, sp);
  int first_tile = 0;
  if constexpr (!kI8) {
    using S = std::conditional_t<kFmt == kKvE4M3, Fp8E4M3, Fp8E5M2>;
    if (rope) first_tile = ring.template prologue_rope<S>(a, sp, L.group);
  }

  // Q's loads first: their latency overlaps the block table's.
  uint32_t qb[D / 16][2];
  float q_sum = 0.0f;
  load_q_swap<D>(qb, L, sp, lane, kI8 ? &q_sum : nullptr);

  ring.prologue(a, first_tile);

  // INT8: 1152 * (sum of Q row r) is in every score of row r; this lane's columns are rows 2t
  // and 2t + 1, whose sums lanes 8t and 8t + 4 hold.
  float off_a = 0.0f, off_b = 0.0f;
  if constexpr (kI8) {
    off_a = kI8Offset * __shfl_sync(0xffffffffu, q_sum, 8 * t);
    off_b = kI8Offset * __shfl_sync(0xffffffffu, q_sum, 8 * t + 4);
  }

  constexpr int kMtAcc = kMt + (kI8 ? 1 : 0);  // INT8: o[kMt] = 1152 P (every dim)
  float o[kMtAcc][4];
#pragma unroll
  for (int i = 0; i < kMtAcc; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  // Rows 2t (a) and 2t + 1 (b): maxima equal over the lanes of a t, sums per lane (keys g,
  // g + 8) until the end.
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;
  const int G = L.group;
  const int r_a = sp.row0 + 2 * t, r_b = r_a + 1;
  const int pos_a = sp.pos_base + r_a / G, pos_b = sp.pos_base + r_b / G;
  const int block_pos_min = sp.pos_base + sp.row0 / G;
  const int key_off = warp * 16;
  const float qk_scale = kSoftcap ? a.scale : a.scale * kLog2e;
  const float inv_cap = kSoftcap ? 1.0f / a.softcap : 0.0f;
  float v_ref = 0.0f, inv_v_ref = 0.0f;  // INT8 (see the 16-row kernel)

  for (int tile = 0; tile < sp.n_tiles; ++tile) {
    const uint8_t* k_s;
    const float* sc;
    ring.next(a, tile, k_s, sc);
    const uint8_t* v_s = k_s + kTileBytes;
    const int key0 = sp.t_begin + tile * kTileKeys + key_off;

    // S^T: two accumulator chains (even and odd k-steps), summed after.
    float s[1][4] = {}, s_odd[4] = {};
#pragma unroll
    for (int u = 0; u < D / 64; ++u) {
      uint4 kw[2];  // keys g, g + 8
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int key = key_off + 8 * h + g;
        kw[h] = *reinterpret_cast<const uint4*>(k_s + key * D + 16 * fp8_k_chunk<D>(key, 4 * u + t));
      }
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const uint2 x0 = kv4_to_f16x4<kFmt>(word_of(kw[0], w)), x1 = kv4_to_f16x4<kFmt>(word_of(kw[1], w));
        const uint32_t af[4] = {x0.x, x1.x, x0.y, x1.y};
        mma_16816<__half>(w & 1 ? s_odd : s[0], af, qb[4 * u + w][0], qb[4 * u + w][1]);
      }
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) s[0][e] += s_odd[e];
    if constexpr (kI8) {
      const float ks_g = sc[key_off + g], ks_g8 = sc[key_off + g + 8];
      s[0][0] = (s[0][0] - off_a) * ks_g, s[0][1] = (s[0][1] - off_b) * ks_g;
      s[0][2] = (s[0][2] - off_a) * ks_g8, s[0][3] = (s[0][3] - off_b) * ks_g8;
    }
    scale_scores<1, kSoftcap>(s, qk_scale, a.softcap, inv_cap);
    if (key0 + 15 > block_pos_min || a.window > 0) mask_swap(s[0], key0, pos_a, pos_b, a.window, lane);

    // Online softmax of rows 2t, 2t + 1 (columns of S^T).
    const float mn_a = fmaxf(m_a, max_over_keys(fmaxf(s[0][0], s[0][2])));
    const float mn_b = fmaxf(m_b, max_over_keys(fmaxf(s[0][1], s[0][3])));
    const float base_a = mn_a == -INFINITY ? 0.0f : mn_a;  // every key masked so far: exp2 gives 0
    const float base_b = mn_b == -INFINITY ? 0.0f : mn_b;
    const bool moved = !(mn_a == m_a && mn_b == m_b);
    const float c_a = fast_exp2(m_a - base_a), c_b = fast_exp2(m_b - base_b);
    m_a = mn_a;
    m_b = mn_b;
    float p[4];
    p[0] = fast_exp2(s[0][0] - base_a);
    p[1] = fast_exp2(s[0][1] - base_b);
    p[2] = fast_exp2(s[0][2] - base_a);
    p[3] = fast_exp2(s[0][3] - base_b);
    l_a = l_a * c_a + (p[0] + p[2]);
    l_b = l_b * c_b + (p[1] + p[3]);
    if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
      for (int i = 0; i < kMtAcc; ++i) {
        o[i][0] *= c_a, o[i][1] *= c_b;
        o[i][2] *= c_a, o[i][3] *= c_b;
      }
    }
    if constexpr (kI8) {
      const float vs_g = sc[kTileKeys + key_off + g], vs_g8 = sc[kTileKeys + key_off + g + 8];
      const float vmax = max_over_keys(fmaxf(vs_g, vs_g8));  // the warp's 16 keys: the same in all lanes
      if (vmax > v_ref) {
        const float f = v_ref / vmax;  // 0 at the first tile, where O is still 0
#pragma unroll
        for (int i = 0; i < kMtAcc; ++i) o[i][0] *= f, o[i][1] *= f, o[i][2] *= f, o[i][3] *= f;
        v_ref = vmax;
        inv_v_ref = 1.0f / vmax;
      }
      const float fg = vs_g * inv_v_ref, fg8 = vs_g8 * inv_v_ref;
      p[0] *= fg, p[1] *= fg, p[2] *= fg8, p[3] *= fg8;
    }
    // P^T (keys g, g + 8 x rows 2t, 2t + 1) -> B fragments (keys 2t.. / 2t + 8.. x row g).
    const uint32_t pb0 = transpose_8x8(pack2<__half>(p[0], p[1]));
    const uint32_t pb1 = transpose_8x8(pack2<__half>(p[2], p[3]));

    uint32_t vw[4][kB / 4];  // [key 2t, 2t + 1, 2t + 8, 2t + 9][word]
    load_v_quad<D>(vw, v_s, key_off, lane);
    if constexpr (kI8) {
      const uint32_t off[4] = {kI8Offset2, kI8Offset2, kI8Offset2, kI8Offset2};
      mma_16816<__half>(o[kMt], off, pb0, pb1);
    }
#pragma unroll
    for (int m = 0; m < kB / 4; ++m) {
      uint32_t h0[4], h1[4];  // dims 4m .. 4m + 3 of keys (2t, 2t + 1) and (2t + 8, 2t + 9)
      fp8_key_pairs<kFmt>(vw[0][m], vw[1][m], h0);
      fp8_key_pairs<kFmt>(vw[2][m], vw[3][m], h1);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const uint32_t af[4] = {h0[2 * j], h0[2 * j + 1], h1[2 * j], h1[2 * j + 1]};
        mma_16816<__half>(o[2 * m + j], af, pb0, pb1);
      }
    }
  }
  if constexpr (kI8) {
#pragma unroll
    for (int i = 0; i < kMt; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[i][e] = (o[i][e] - o[kMt][e]) * v_ref;
  }
  l_a = sum_over_keys(l_a);
  l_b = sum_over_keys(l_b);

  // Merge the 4 warps' partial states through shared memory once no copy is in flight.
  cp_async_wait<0>();
  __syncthreads();
  constexpr int kOStride = fp8_o_stride(D);
  float* s_o = reinterpret_cast<float*>(smem);             // [kDecodeWarps][kSwapRows][kOStride]
  float* s_m = s_o + kDecodeWarps * kSwapRows * kOStride;  // [kDecodeWarps][kSwapRows]
  float* s_l = s_m + kDecodeWarps * kSwapRows;             // [kDecodeWarps][kSwapRows]
  {
    // Row 2t (C elements 0, 2) and 2t + 1 (1, 3); m-tile i's elements are dims kB g + 2i (0, 1)
    // and kB g + 2i + 1 (2, 3): a lane's kB dims of a row are consecutive.
    float* dst_a = s_o + (warp * kSwapRows + 2 * t) * kOStride + kB * g;
    float* dst_b = dst_a + kOStride;
#pragma unroll
    for (int i = 0; i < kMt; i += 2) {
      *reinterpret_cast<float4*>(dst_a + 2 * i) = make_float4(o[i][0], o[i][2], o[i + 1][0], o[i + 1][2]);
      *reinterpret_cast<float4*>(dst_b + 2 * i) = make_float4(o[i][1], o[i][3], o[i + 1][1], o[i + 1][3]);
    }
    if (g == 0) {
      s_m[warp * kSwapRows + 2 * t] = m_a;
      s_m[warp * kSwapRows + 2 * t + 1] = m_b;
      s_l[warp * kSwapRows + 2 * t] = l_a;
      s_l[warp * kSwapRows + 2 * t + 1] = l_b;
    }
  }
  __syncthreads();
  finish_decode_rows<D, kSwapRows>(L, sp, s_m, s_l,
                                   [&](int w, int r, int d) { return s_o[(w * kSwapRows + r) * kOStride + d]; });
}

struct SwapDecodeKernel {
  template <int D, int kStages, int kFmt>
  static cudaError_t launch(const Launch& L, dim3 grid, cudaStream_t stream) {
    return launch_softcap_pair<paged_attn_fp8_swap_kernel<D, kStages, false, kFmt>,
                               paged_attn_fp8_swap_kernel<D, kStages, true, kFmt>>(
        L, fp8_swap_smem(kStages, D, kFmt == kKvI8), grid, dim3(kDecodeWarps * 32), stream);
  }
};

}  // namespace

cudaError_t launch_fp8_swap_decode(const Launch& L, int stages, dim3 grid, cudaStream_t stream) {
  return launch_byte_decode<SwapDecodeKernel>(L, stages, grid, stream);
}

}  // namespace attn
}  // namespace ember::cuda
