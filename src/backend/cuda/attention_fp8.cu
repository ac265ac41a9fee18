// Paged decode attention over a one-byte K/V cache (FP8 e4m3 / e5m2, or INT8 with per-(slot,
// head) scales), 16 packed query rows a block: mma fragments built straight from the bytes in
// shared memory (the 16-bit kernel and the launchers: attention.cu; launches of <= 8 rows a
// sequence: attention_fp8_swap.cu).
#include "backend/cuda/attention_bytes.cuh"

#include <type_traits>

namespace ember::cuda {
namespace attn {

namespace {

// Sums over head dims (Q K^T) and over keys (P V) do not care which physical element a
// fragment register holds, as long as both operands agree, so the fragments are permuted to
// suit the bytes (g = lane / 4, t = lane % 4):
//  - Q K^T, B = K^T (k = head dim, n = key g): k-step c = 4u + w takes word w of the 16-byte
//    chunk 4u + t of key g's row, i.e. dims 64u + 16t + 4w .. +3 (bytes 0-1 in b0, 2-3 in
//    b1); one 16-byte load serves 4 k-steps. Q's A fragments hold the same dims.
//  - P V, B = V (k = key, n = output dim): for keys 2t, 2t+1, 2t+8, 2t+9 of the warp's 16 the
//    lane loads the D/8 bytes at dims (D/8) g ..; byte i pairs up across keys (byte permute)
//    into n-tile i, so n-tile i's column n is head dim (D/8) n + i. C element (row, column
//    2t + j) of n-tile i is dim (D/8)(2t + j) + i, put back in order when O leaves registers.

// Q rows row0 .. row0 + 15 (packed (token, head) pairs, zeros past n_rows) as F16 A fragments
// in the fp8 K order.   qa[D / 16][4]. row_sum (INT8): the sums of this lane's rows g and g + 8
// over the F16 values (whole rows: the quad's 4 lanes summed).
template <int D>
__device__ __forceinline__ void load_q_fp8_order(uint32_t (&qa)[D / 16][4], const Launch& L, const AttnSpan& sp,
                                                 int lane, float* row_sum = nullptr) {
  const PagedAttnArgs& a = L.a;
  const int G = L.group, kh = blockIdx.y, t = lane % 4;
#pragma unroll
  for (int half = 0; half < 2; ++half) {  // rows g (a0, a2) and g + 8 (a1, a3)
    const int row = sp.row0 + lane / 4 + 8 * half;
    const float4* src = row < sp.n_rows
                            ? reinterpret_cast<const float4*>(
                                  a.q + (static_cast<size_t>(sp.q0 + row / G) * a.n_heads + kh * G + row % G) * D + 16 * t)
                            : nullptr;
#pragma unroll
    for (int u = 0; u < D / 64; ++u)
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const float4 x = src ? src[16 * u + w] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        qa[4 * u + w][half] = pack2<__half>(x.x, x.y);
        qa[4 * u + w][2 + half] = pack2<__half>(x.z, x.w);
      }
  }
  if (row_sum) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float sum = 0.0f;
#pragma unroll
      for (int k = 0; k < D / 16; ++k)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&qa[k][half + 2 * j]));
          sum += f.x + f.y;
        }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      row_sum[half] = sum;
    }
  }
}

// S += Q K^T for this warp's 16 keys (two n-tiles) from the fp8 K tile.   s[2][4]
template <int D, int kFmt>
__device__ __forceinline__ void qk_fp8(float (&s)[2][4], const uint32_t (&qa)[D / 16][4], const uint8_t* k_tile,
                                       int key_off, int lane) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int u = 0; u < D / 64; ++u) {
    uint4 kw[2];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const int key = key_off + nt * 8 + g;
      kw[nt] = *reinterpret_cast<const uint4*>(k_tile + key * D + 16 * fp8_k_chunk<D>(key, 4 * u + t));
    }
    // The two n-tiles alternate: independent MMAs back to back.
#pragma unroll
    for (int w = 0; w < 4; ++w)
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const uint2 b = kv4_to_f16x4<kFmt>(word_of(kw[nt], w));
        mma_16816<__half>(s[nt], qa[4 * u + w], b.x, b.y);
      }
  }
}

// O += P V for this warp's 16 keys (one k-step) from the fp8 V tile; o in the permuted
// order (n-tile i, column n: head dim (D/8) n + i). INT8: o[D / 8] += P 1152 (every column).
//   o[D / 8 (+ 1)][4]
template <int D, int kFmt, int kNt>
__device__ __forceinline__ void pv_fp8(float (&o)[kNt][4], const uint32_t (&pa)[4], const uint8_t* v_tile,
                                       int key_off, int lane) {
  if constexpr (kFmt == kKvI8) mma_16816<__half>(o[D / 8], pa, kI8Offset2, kI8Offset2);
  constexpr int kB = D / 8;  // bytes of a V row one lane reads
  uint32_t vw[4][kB / 4];  // [key 2t, 2t+1, 2t+8, 2t+9][word]
  load_v_quad<D>(vw, v_tile, key_off, lane);
#pragma unroll
  for (int m = 0; m < kB / 4; ++m) {
    uint32_t b0[4], b1[4];
    fp8_key_pairs<kFmt>(vw[0][m], vw[1][m], b0);  // keys 2t, 2t+1
    fp8_key_pairs<kFmt>(vw[2][m], vw[3][m], b1);  // keys 2t+8, 2t+9
#pragma unroll
    for (int e = 0; e < 4; ++e) mma_16816<__half>(o[4 * m + e], pa, b0[e], b1[e]);
  }
}

// Column of head dim d in a row of the merge buffer: 4-float chunks XOR-swizzled (bits 1-2 of
// the chunk by its bits 3-4) so the float4 stores below, whose lanes t = 0..3 sit 2 kB dims
// apart, hit different banks; 32 consecutive dims stay in one 32-float group (reads are
// conflict-free too).
__device__ __forceinline__ int fp8_o_col(int d) { return d ^ (((d >> 5) & 3) << 3); }

// This warp's O (permuted order) into its [16][o_stride] slice of the merge buffer, in head-dim
// order (fp8_o_col): a lane's columns 2t and 2t + 1 of n-tiles 0..D/8-1 are D/8 consecutive
// dims each.
template <int D>
__device__ __forceinline__ void store_o_fp8_order(float* s_o, int o_stride, const float (&o)[D / 8][4], int lane) {
  constexpr int kB = D / 8;
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int e = 0; e < 4; ++e) {  // C element e: row g (e < 2) or g + 8, column 2t + (e & 1)
    float* dst = s_o + (g + 8 * (e >> 1)) * o_stride;
#pragma unroll
    for (int i = 0; i < kB; i += 4)
      *reinterpret_cast<float4*>(dst + fp8_o_col(kB * (2 * t + (e & 1)) + i)) =
          make_float4(o[i][e], o[i + 1][e], o[i + 2][e], o[i + 3][e]);
  }
}

// Decode over a one-byte cache: 16 packed rows, 4 warps splitting each 64-key tile, split-K as
// in paged_attn_mma_kernel; Q and P in F16.
// INT8 (kFp8 == kKvI8): the MMAs see 1152 + q (exact in F16; the offset comes off afterwards,
// see kv4_to_f16x4); each key's K scale multiplies its score column (F32), and its V scale
// multiplies its P column before P is rounded to F16. So that P stays in F16's normal range
// whatever the scales, a warp keeps P V relative to a reference v_ref (the largest V scale it
// has met): P is p * v_scale / v_ref (<= 1), O is rescaled when v_ref grows (rarely after the
// first tiles: a warp-uniform branch), and multiplied by v_ref once at the end.
template <int D, int kStages, bool kSoftcap, int kFp8>
__global__ void __launch_bounds__(kDecodeWarps * 32, fp8_decode_blocks_per_sm(kStages, D, kFp8 == kKvI8))
    paged_attn_fp8_decode_kernel(const Launch L) {
  constexpr bool kI8 = kFp8 == kKvI8;
  constexpr int kTileBytes = kTileKeys * D;  // one K or V tile
  constexpr int kNtO = D / 8;
  static_assert(kStages >= 2 && (D == 64 || D == 128) && kFp8 != kKvNative);
  // 32-byte runs: 2 keys per thread at D 128. (64-byte runs were 17% slower: long- and
  // short-scoreboard stalls doubled; 16-byte runs and staged ids 5-10% slower, session 18.)
  using Ring = ByteTileRing<D, kStages, kI8, 2, /*kStagedIds=*/false>;

  const PagedAttnArgs& a = L.a;
  extern __shared__ uint4 smem[];  // the ring (byte_ring_smem), then the merge buffer

  // (a programmatic dependent: q and the cache are written before; with the fused rope, the
  // tiles of keys before the new tokens' are copied before the wait, see attention.cu)
  const bool rope = !kI8 && a.rope.active;  // (block-uniform)
  pdl_enter_or_defer(rope, a.pdl_release_early);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  AttnSpan sp;
  if (!attn_span<true, kDecodeRows>(L, sp)) return;
  Ring ring(smem, a, sp);
  int first_tile = 0;
  if constexpr (!kI8) {
    using S = std::conditional_t<kFp8 == kKvE4M3, Fp8E4M3, Fp8E5M2>;
    if (rope) first_tile = ring.template prologue_rope<S>(a, sp, L.group);
  }
  ring.prologue(a, first_tile);

  // Q straight from global memory into registers while the first tiles are in flight.
  uint32_t qa[D / 16][4];
  float q_sum[2];  // INT8: 1152 * q_sum is in every score (see kv4_to_f16x4)
  load_q_fp8_order<D>(qa, L, sp, lane, kI8 ? q_sum : nullptr);
  const float off_a = kI8 ? kI8Offset * q_sum[0] : 0.0f, off_b = kI8 ? kI8Offset * q_sum[1] : 0.0f;

  // INT8: o[kNtO] = P 1152 (the V offset each column of O carries).
  constexpr int kNtAcc = kNtO + (kI8 ? 1 : 0);
  float o[kNtAcc][4];
#pragma unroll
  for (int i = 0; i < kNtAcc; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;
  const int G = L.group;
  const int r_a = sp.row0 + lane / 4, r_b = r_a + 8;  // this lane's rows
  const int pos_a = sp.pos_base + r_a / G, pos_b = sp.pos_base + r_b / G;
  const int block_pos_min = sp.pos_base + sp.row0 / G;
  const int key_off = warp * 16;  // first key of this warp within a tile
  const float qk_scale = kSoftcap ? a.scale : a.scale * kLog2e;
  const float inv_cap = kSoftcap ? 1.0f / a.softcap : 0.0f;
  const int col = key_off + 2 * (lane & 3);  // this lane's score columns: col, col + 1 (+ 8)
  float v_ref = 0.0f, inv_v_ref = 0.0f;      // INT8 (see above)

  for (int t = 0; t < sp.n_tiles; ++t) {
    const uint8_t* k_s;
    const float* sc;
    ring.next(a, t, k_s, sc);
    const int key0 = sp.t_begin + t * kTileKeys + key_off;

    float s[2][4] = {};
    qk_fp8<D, kFp8>(s, qa, k_s, key_off, lane);
    if constexpr (kI8) {
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const float2 ks = *reinterpret_cast<const float2*>(sc + col + 8 * nt);
        s[nt][0] = (s[nt][0] - off_a) * ks.x, s[nt][1] = (s[nt][1] - off_a) * ks.y;
        s[nt][2] = (s[nt][2] - off_b) * ks.x, s[nt][3] = (s[nt][3] - off_b) * ks.y;
      }
    }
    scale_scores<2, kSoftcap>(s, qk_scale, a.softcap, inv_cap);
    if (key0 + 15 > block_pos_min || a.window > 0) mask_scores<2>(s, key0, pos_a, pos_b, a.window, lane);
    online_softmax<2, kNtAcc, true>(s, o, m_a, m_b, l_a, l_b);
    if constexpr (kI8) {
      float2 vs[2];
      vs[0] = *reinterpret_cast<const float2*>(sc + kTileKeys + col);
      vs[1] = *reinterpret_cast<const float2*>(sc + kTileKeys + col + 8);
      // The warp's 16 keys are spread over the 4 lanes of each quad: the same maximum in all.
      float vmax = fmaxf(fmaxf(vs[0].x, vs[0].y), fmaxf(vs[1].x, vs[1].y));
      vmax = fmaxf(vmax, __shfl_xor_sync(0xffffffffu, vmax, 1));
      vmax = fmaxf(vmax, __shfl_xor_sync(0xffffffffu, vmax, 2));
      if (vmax > v_ref) {
        const float f = v_ref / vmax;  // 0 at the first tile, where O is still 0
        rescale_rows<kNtAcc>(o, f, f);
        v_ref = vmax;
        inv_v_ref = 1.0f / vmax;
      }
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const float fx = vs[nt].x * inv_v_ref, fy = vs[nt].y * inv_v_ref;
        s[nt][0] *= fx, s[nt][1] *= fy, s[nt][2] *= fx, s[nt][3] *= fy;
      }
    }
    uint32_t pa[4];
    p_fragment<__half, 2>(pa, s, 0);
    pv_fp8<D, kFp8, kNtAcc>(o, pa, k_s + kTileBytes, key_off, lane);
  }
  if constexpr (kI8) {
    // O = (P (1152 + q) - P 1152) v_ref; element e of every n-tile is row g (e < 2) or g + 8,
    // like o[kNtO]'s, whose columns are all equal.
#pragma unroll
    for (int i = 0; i < kNtO; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[i][e] = (o[i][e] - o[kNtO][e]) * v_ref;
  }

  // Merge the 4 warps' partial states through shared memory once no copy is in flight.
  cp_async_wait<0>();
  __syncthreads();
  constexpr int kOStride = fp8_o_stride(D);
  float* s_o = reinterpret_cast<float*>(smem);               // [kDecodeWarps][16][kOStride]
  float* s_m = s_o + kDecodeWarps * kDecodeRows * kOStride;  // [kDecodeWarps][16]
  float* s_l = s_m + kDecodeWarps * kDecodeRows;             // [kDecodeWarps][16]
  store_o_fp8_order<D>(s_o + warp * kDecodeRows * kOStride, kOStride, reinterpret_cast<const float(&)[kNtO][4]>(o),
                       lane);
  store_warp_state(s_m, s_l, warp, lane, m_a, m_b, l_a, l_b);
  __syncthreads();
  finish_decode_rows<D>(L, sp, s_m, s_l, [&](int w, int r, int d) {
    return s_o[(w * kDecodeRows + r) * kOStride + fp8_o_col(d)];
  });
}

struct Fp8DecodeKernel {
  template <int D, int kStages, int kFp8>
  static cudaError_t launch(const Launch& L, dim3 grid, cudaStream_t stream) {
    return launch_softcap_pair<paged_attn_fp8_decode_kernel<D, kStages, false, kFp8>,
                               paged_attn_fp8_decode_kernel<D, kStages, true, kFp8>>(
        L, fp8_decode_smem(kStages, D, kFp8 == kKvI8), grid, dim3(kDecodeWarps * 32), stream);
  }
};

}  // namespace

cudaError_t launch_fp8_decode(const Launch& L, int stages, dim3 grid, cudaStream_t stream) {
  if (fp8_decode_swapped(L.a)) return launch_fp8_swap_decode(L, stages, grid, stream);
  return launch_byte_decode<Fp8DecodeKernel>(L, stages, grid, stream);
}

}  // namespace attn
}  // namespace ember::cuda
