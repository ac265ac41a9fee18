// Tensor-core paged attention (decode with split-K and GQA packing; tiled prefill) and the
// split merge. See attention.cuh for the scheme; the comments here say why each step is so.
#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/probe.cuh"

#include <algorithm>
#include <cmath>
#include <type_traits>

namespace ember::cuda {

namespace {

using namespace attn;

// Shared memory of one paged_attn_mma_kernel block: 16-bit tiles (Q, and kStages K/V stages;
// one-byte prefill: 2 K/V slots with Q over the second, plus kStages stages of the raw tiles;
// INT8 then also each thread's copies of its keys' K and V scales, scale_bytes a stage).
size_t smem_bytes(int rows, int stages, int D, bool one_byte, size_t scale_bytes = 0) {
  if (one_byte)
    return static_cast<size_t>(2 * 2 * kTileKeys) * D * 2 + static_cast<size_t>(2 * stages * kTileKeys) * D +
           stages * scale_bytes;
  return static_cast<size_t>(rows + 2 * stages * kTileKeys) * D * 2;
}

// kWarps: prefill 4 or 8 (16 rows each); decode 4. kStages: K/V tiles in the cp.async ring.
// kSoftcap: logit soft-capping compiled in (tanh per score) or out. kFp8: the cache holds
// e4m3 / e5m2 / int8 bytes (T is then __half) instead of T; prefill only (one-byte decode has
// its own kernel, attention_fp8.cu), widened to F16 in shared memory (int8 times its
// per-(slot, head) scale, which the thread that copies a chunk also copies for itself).
// The tile loader here is the lambdas below, not KvTileLoader: with the struct, ptxas picks
// 168 registers and a spill for the 16-bit decode kernel (198 without), measured 1-5% slower.
template <typename T, int D, bool kDecode, int kWarps, int kStages, bool kSoftcap, int kFp8>
__global__ void __launch_bounds__(kWarps * 32) paged_attn_mma_kernel(const Launch L) {
  constexpr int kThreads = kWarps * 32;
  constexpr int kRows = kDecode ? kDecodeRows : 16 * kWarps;
  constexpr int kCh = D / 8;                  // 16-byte chunks per row of 16-bit values
  constexpr bool kIsFp8 = kFp8 != kKvNative;
  using S = std::conditional_t<kIsFp8, uint8_t, T>;  // stored element
  constexpr int kLCh = D * static_cast<int>(sizeof(S)) / 16;  // 16-byte chunks per cache row
  constexpr int kChElems = 16 / static_cast<int>(sizeof(S));
  constexpr int kWarpKeys = kDecode ? 16 : kTileKeys;  // keys of a tile one warp handles
  constexpr int kNtS = kWarpKeys / 8;         // score n-tiles per warp
  constexpr int kNtO = D / 8;                 // output n-tiles
  constexpr int kKs = D / 16;                 // k-steps of Q K^T
  constexpr int kKeysPerPass = kThreads / kLCh;
  constexpr int kPasses = kTileKeys / kKeysPerPass;
  static_assert(kTileKeys % kKeysPerPass == 0 && kCh >= 8 && kStages >= 2);
  static_assert(!kDecode || kWarps == kDecodeWarps);
  static_assert(!kIsFp8 || (!kDecode && std::is_same_v<T, __half> && kRows <= 2 * kTileKeys));
  constexpr bool kI8 = kFp8 == kKvI8;

  const PagedAttnArgs& a = L.a;
  extern __shared__ uint4 smem[];
  // 16-bit tiles: [kRows][kCh] Q, then K and V stages [kStages][kTileKeys][kCh] each. FP8:
  // two slots of (K [kTileKeys][kCh], V [kTileKeys][kCh]) with Q over slot 1 (read into
  // registers before slot 1 is first written), then the raw stages
  // [kStages][K, V][kTileKeys][kLCh], each chunk read only by the thread that copied it.
  uint4* s_q = kIsFp8 ? smem + 2 * kTileKeys * kCh : smem;
  uint4* s_k = kIsFp8 ? smem : s_q + kRows * kCh;
  uint4* s_v = s_k + kStages * kTileKeys * kCh;  // (not used with FP8)
  uint4* s_raw = smem + 4 * kTileKeys * kCh;     // FP8 only
  // INT8: [kStages][kThreads][kPasses][K, V] scales, each written and read by one thread.
  float* s_psc = reinterpret_cast<float*>(s_raw + 2 * kStages * kTileKeys * kLCh);
  auto psc = [&](int stage, int ps, int kv) -> float* {
    return s_psc + ((stage * kThreads + static_cast<int>(threadIdx.x)) * kPasses + ps) * 2 + kv;
  };

  // (launched as a programmatic dependent: q and the cache are written before). With the fused
  // rope (16-bit decode), the wait comes after the copies of the prologue's tiles whose keys all
  // precede this step's new tokens: earlier steps wrote those, and the block tables and spans
  // are the step's metadata, copied before the step's first kernel (the backend fuses the rope
  // only where the sequence ids are metadata too, not a kernel-written order). The tile with
  // the new keys waits for this block's store. (Batch-1 decode on an H200, session 19: the attention's part
  // of the critical path 10.9 -> 8.1 us a layer with the rope's loads batched, int4 473 -> 492
  // tok/s. Taking the new keys from shared memory instead of the cache, with no fence, and Q
  // from the rope's registers measured slower: 473.)
  constexpr bool kMayRope = kDecode && !kIsFp8;
  const bool rope = kMayRope && a.rope.active;  // (block-uniform)
  const bool early = rope || (kMayRope && a.early_tiles);  // tiles of earlier tokens before the wait
  if constexpr (kDecode) EMBER_PROBE_MARK(2, 0, blockIdx.y, blockIdx.x, blockIdx.z);
  pdl_enter_or_defer(early, kDecode && a.pdl_release_early);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  AttnSpan sp;
  if (!attn_span<kDecode, kRows>(L, sp)) {
    if (kDecode && a.hold_gate.words) {  // (every block arrives, or the gate opens only by its timeout)
      pdl_wait();
      hold_gate_arrive(a.hold_gate, a.hold_gate.point);
    }
    return;
  }
  if constexpr (kDecode)
    if (!early) hold_gate_arrive(a.hold_gate, 1);
  const int kh = sp.kh;
  const int G = L.group;
  const int seq = sp.seq, q0 = sp.q0, n_rows = sp.n_rows, row0 = sp.row0, pos_base = sp.pos_base;
  const int kv_hi = sp.kv_hi, t_begin = sp.t_begin, n_tiles = sp.n_tiles;

  // ---- K/V tile loader: thread owns chunk my_c of kPasses keys per tile. Cache slots are
  // found without divisions in the loop: (tile start) / block_size is carried from tile to
  // tile, and each thread's in-tile offsets are divided once. Block ids of a tile are loaded
  // one iteration before its copy is issued, so the copy never waits on the table.
  const int my_c = threadIdx.x % kLCh, my_key = threadIdx.x / kLCh;
  const int bs = a.block_size;
  const int32_t* bt = a.block_tables + static_cast<size_t>(seq) * a.max_blocks_per_seq;
  const size_t slot_stride = static_cast<size_t>(a.n_kv_heads) * D;  // elements per cache slot
  const S* k_base = static_cast<const S*>(a.k) + static_cast<size_t>(kh) * D + my_c * kChElems;
  const S* v_base = static_cast<const S*>(a.v) + static_cast<size_t>(kh) * D + my_c * kChElems;
  int kq[kPasses], kr[kPasses];  // in-tile key offset of each pass, divided by block size
#pragma unroll
  for (int ps = 0; ps < kPasses; ++ps) {
    kq[ps] = (ps * kKeysPerPass + my_key) / bs;
    kr[ps] = (ps * kKeysPerPass + my_key) % bs;
  }
  const int step_q = kTileKeys / bs, step_r = kTileKeys % bs;
  int next_tile = 0, tq = t_begin / bs, tr = t_begin % bs;  // tile whose ids load_ids reads next
  int blk[kPasses], off[kPasses];  // block id (-1: past kv_hi) and slot offset of each pass
  auto load_ids = [&]() {
    const int t0 = t_begin + next_tile * kTileKeys;
#pragma unroll
    for (int ps = 0; ps < kPasses; ++ps) {
      int q = tq + kq[ps], r = tr + kr[ps];
      if (r >= bs) {
        r -= bs;
        ++q;
      }
      off[ps] = r;
      blk[ps] = t0 + ps * kKeysPerPass + my_key < kv_hi ? bt[q] : -1;
    }
    ++next_tile;
    tq += step_q;
    tr += step_r;
    if (tr >= bs) {
      tr -= bs;
      ++tq;
    }
  };
  auto issue = [&](int stage) {
#pragma unroll
    for (int ps = 0; ps < kPasses; ++ps) {
      const int kt = ps * kKeysPerPass + my_key;  // key within the tile
      const bool valid = blk[ps] >= 0;  // keys past kv_hi become zeros (masked, never NaN)
      const size_t slot = valid ? static_cast<size_t>(blk[ps]) * bs + off[ps] : 0;
      if constexpr (kIsFp8) {
        uint4* r = s_raw + (stage * 2 * kTileKeys + kt) * kLCh + my_c;
        cp_async_16(r, k_base + slot * slot_stride, valid);
        cp_async_16(r + kTileKeys * kLCh, v_base + slot * slot_stride, valid);
        if constexpr (kI8) {
          const size_t si = slot * a.n_kv_heads + kh;
          cp_async_4(psc(stage, ps, 0), a.k_scales + si, valid);
          cp_async_4(psc(stage, ps, 1), a.v_scales + si, valid);
        }
      } else {
        const int o = stage * kTileKeys * kCh + swz<D>(kt, my_c);
        cp_async_16(s_k + o, k_base + slot * slot_stride, valid);
        cp_async_16(s_v + o, v_base + slot * slot_stride, valid);
      }
    }
  };
  // FP8: widens this thread's own chunks of raw stage `stage` into 16-bit slot `slot` (its
  // copies are complete after its cp.async wait; no other thread reads them).
  auto widen = [&](int stage, int slot) {
#pragma unroll
    for (int ps = 0; ps < kPasses; ++ps) {
      const int kt = ps * kKeysPerPass + my_key;
#pragma unroll
      for (int kv = 0; kv < 2; ++kv) {
        const uint4 r = s_raw[((stage * 2 + kv) * kTileKeys + kt) * kLCh + my_c];
        uint2 h0, h1, h2, h3;
        if constexpr (kI8) {
          const __half2 sc = __float2half2_rn(*psc(stage, ps, kv));
          h0 = i8x4_scaled_f16x4(r.x, sc), h1 = i8x4_scaled_f16x4(r.y, sc);
          h2 = i8x4_scaled_f16x4(r.z, sc), h3 = i8x4_scaled_f16x4(r.w, sc);
        } else {
          h0 = fp8x4_to_half4<kFp8 == kKvE4M3>(r.x), h1 = fp8x4_to_half4<kFp8 == kKvE4M3>(r.y);
          h2 = fp8x4_to_half4<kFp8 == kKvE4M3>(r.z), h3 = fp8x4_to_half4<kFp8 == kKvE4M3>(r.w);
        }
        uint4* dst = smem + (slot * 2 + kv) * kTileKeys * kCh;
        dst[swz<D>(kt, 2 * my_c)] = make_uint4(h0.x, h0.y, h1.x, h1.y);
        dst[swz<D>(kt, 2 * my_c + 1)] = make_uint4(h2.x, h2.y, h3.x, h3.y);
      }
    }
  };
  // Prologue: tiles 0 .. kStages - 2 in flight, one commit group each (empty past the end,
  // so that the group count per iteration stays uniform for cp.async.wait_group).
  int first_st = 0;
  bool ids_early = false;  // the block ids of stage first_st are loaded
  if constexpr (kMayRope) {
    if (early) {
      for (; first_st < kStages - 1 && first_st < n_tiles && t_begin + (first_st + 1) * kTileKeys <= pos_base;
           ++first_st) {
        load_ids();
        issue(first_st);
        cp_async_commit();
      }
      // The ids of the tile with the new keys too (step metadata): only its copy waits for the
      // store below, no longer behind a block-table load after it.
      ids_early = first_st < kStages - 1 && first_st < n_tiles;
      if (ids_early) load_ids();
      pdl_finish_deferred(a.pdl_release_early);
      hold_gate_arrive(a.hold_gate, 1);
      EMBER_PROBE_MARK(2, 1, first_st, blockIdx.x, blockIdx.z);
      if (rope) decode_rope_store<T, D>(a, q0, n_rows, G, kh);
      EMBER_PROBE_MARK(2, 2, n_tiles, blockIdx.x, blockIdx.z);
    }
  }
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < first_st) continue;
    if (st < n_tiles) {
      if (!ids_early || st != first_st) load_ids();
      issue(st);
    }
    cp_async_commit();
  }
  if (kStages - 1 < n_tiles) load_ids();
  // ---- Q: F32 rows of the packed (token, head) pairs -> T in shared memory, loaded while
  // the first K/V tiles are in flight.
  for (int i = threadIdx.x; i < kRows * kCh; i += kThreads) {
    const int r = i / kCh, c = i % kCh;
    s_q[swz<D>(r, c)] = q_chunk<T, D>(a, q0, kh, G, n_rows, row0 + r, c);
  }

  __syncthreads();  // Q tile written
  if constexpr (kDecode) {
    EMBER_PROBE_MARK(2, 3, n_tiles, blockIdx.x, blockIdx.z);
    hold_gate_arrive(a.hold_gate, 2);
  }

  // ---- Q fragments stay in registers for the whole key loop.
  const int wrow0 = kDecode ? 0 : warp * 16;
  uint32_t qa[kKs][4];
#pragma unroll
  for (int ks = 0; ks < kKs; ++ks)
    ldmatrix_x4(qa[ks], s_q + swz<D>(wrow0 + (lane & 15), ks * 2 + (lane >> 4)));

  float o[kNtO][4];
#pragma unroll
  for (int i = 0; i < kNtO; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;
  // This lane's two rows (g and g + 8 of the warp's m16 tile) and their positions.
  const int r_a = row0 + wrow0 + lane / 4, r_b = r_a + 8;
  const int pos_a = pos_base + r_a / G, pos_b = pos_base + r_b / G;
  const int warp_pos_min = pos_base + (row0 + wrow0) / G;
  const int key_off = kDecode ? warp * 16 : 0;  // first key of this warp within a tile
  // Without soft-capping, scale and log2(e) fold into one multiply.
  const float qk_scale = kSoftcap ? a.scale : a.scale * kLog2e;
  const float inv_cap = kSoftcap ? 1.0f / a.softcap : 0.0f;

  int stage = 0, issue_stage = kStages - 1;
  for (int t = 0; t < n_tiles; ++t) {
    cp_async_wait<kStages - 2>();
    if constexpr (kIsFp8) widen(stage, t & 1);  // slot t & 1 was last read for tile t - 2
    __syncthreads();  // tile t visible to all; everyone is done reading tile t - 1
    if constexpr (kDecode) EMBER_PROBE_MARK(2, 4, t, blockIdx.x, blockIdx.z);
    if (t + kStages - 1 < n_tiles) {
      issue(issue_stage);  // into the stage tile t - 1 used
      if (t + kStages < n_tiles) load_ids();
    }
    cp_async_commit();
    issue_stage = issue_stage + 1 == kStages ? 0 : issue_stage + 1;
    const uint4* k_s = kIsFp8 ? smem + (t & 1) * 2 * kTileKeys * kCh : s_k + stage * kTileKeys * kCh;
    const uint4* v_s = kIsFp8 ? k_s + kTileKeys * kCh : s_v + stage * kTileKeys * kCh;
    stage = stage + 1 == kStages ? 0 : stage + 1;
    const int key0 = t_begin + t * kTileKeys + key_off;

    // S = Q K^T for this warp's 16 rows x kWarpKeys keys.
    float s[kNtS][4];
#pragma unroll
    for (int i = 0; i < kNtS; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < kKs; ++ks) {
#pragma unroll
      for (int np = 0; np < kNtS / 2; ++np) {
        uint32_t b[4];
        const int kr = key_off + np * 16 + (lane & 7) + ((lane >> 4) << 3);
        ldmatrix_x4(b, k_s + swz<D>(kr, ks * 2 + ((lane >> 3) & 1)));
        mma_16816<T>(s[2 * np], qa[ks], b[0], b[1]);
        mma_16816<T>(s[2 * np + 1], qa[ks], b[2], b[3]);
      }
    }
    // Mask only tiles that reach past the warp's first row's position or start inside a
    // sliding window's edge.
    if constexpr (kDecode) {
      // Without soft-capping the scale goes into the exponent's FMA; O is rescaled only when a
      // row maximum of the warp moved (H200, bf16 K/V, two calls against a third without it:
      // b32 x 4096 keys 3916 / 3857 vs 3851 GB/s, b64 4342 / 4277 vs 4259; small but on every
      // shape). The prefill kernel measured slower so (251 -> 229 TFLOP/s) and keeps the
      // plain order.
      if constexpr (kSoftcap) scale_scores<kNtS, true>(s, qk_scale, a.softcap, inv_cap);
      if (key0 + kWarpKeys - 1 > warp_pos_min || a.window > 0) mask_scores<kNtS>(s, key0, pos_a, pos_b, a.window, lane);
      float c_a, c_b;
      if (__any_sync(0xffffffffu, softmax_tile<kNtS>(s, kSoftcap ? 1.0f : qk_scale, m_a, m_b, l_a, l_b, c_a, c_b)))
        rescale_rows<kNtO>(o, c_a, c_b);
    } else {
      scale_scores<kNtS, kSoftcap>(s, qk_scale, a.softcap, inv_cap);
      if (key0 + kWarpKeys - 1 > warp_pos_min || a.window > 0) mask_scores<kNtS>(s, key0, pos_a, pos_b, a.window, lane);
      online_softmax<kNtS, kNtO, false>(s, o, m_a, m_b, l_a, l_b);
    }
    // O += P V: the score C fragments of two n-tiles form one A fragment of P.
#pragma unroll
    for (int kk = 0; kk < kNtS / 2; ++kk) {
      uint32_t pa[4];
      p_fragment<T, kNtS>(pa, s, kk);
      const int vr = key_off + kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, v_s + swz<D>(vr, dp * 2 + (lane >> 4)));
        mma_16816<T>(o[2 * dp], pa, b[0], b[1]);
        mma_16816<T>(o[2 * dp + 1], pa, b[2], b[3]);
      }
    }
  }

  if constexpr (!kDecode) {
    store_prefill_rows<D>(a, q0, kh, G, n_rows, r_a, lane, o, l_a, l_b);
  } else {
    // Merge the 4 warps' partial softmax states through shared memory, reusing the K/V tiles
    // once no copy is in flight.
    cp_async_wait<0>();
    __syncthreads();
    float* s_o = reinterpret_cast<float*>(s_k);     // [kWarps][16][D]
    float* s_m = s_o + kWarps * kDecodeRows * D;    // [kWarps][16]
    float* s_l = s_m + kWarps * kDecodeRows;        // [kWarps][16]
    const int ra = lane / 4;
#pragma unroll
    for (int nt = 0; nt < kNtO; ++nt) {
      const int d = nt * 8 + 2 * (lane & 3);
      *reinterpret_cast<float2*>(s_o + (warp * kDecodeRows + ra) * D + d) = make_float2(o[nt][0], o[nt][1]);
      *reinterpret_cast<float2*>(s_o + (warp * kDecodeRows + ra + 8) * D + d) = make_float2(o[nt][2], o[nt][3]);
    }
    store_warp_state(s_m, s_l, warp, lane, m_a, m_b, l_a, l_b);
    __syncthreads();
    EMBER_PROBE_MARK(2, 5, n_tiles, blockIdx.x, blockIdx.z);
    hold_gate_arrive(a.hold_gate, 3);
    finish_decode_rows<D>(L, sp, s_m, s_l, [&](int w, int r, int d) { return s_o[(w * kDecodeRows + r) * D + d]; });
    EMBER_PROBE_MARK(2, 7, n_tiles, blockIdx.x, blockIdx.z);
  }
}

// Merges the decode splits of one (sequence, kv head, row tile): out = sum_s w_s O_s with
// w_s = 2^(lse_s - LSE). Splits with lse -inf (empty) are skipped, never multiplied.
__global__ void attn_merge_kernel(const Launch L) {
  pdl_enter(L.a.pdl_release_early);
  const PagedAttnArgs& a = L.a;
  const int zi = blockIdx.z, kh = blockIdx.y, rt = blockIdx.x;
  const int seq = a.seq_ids[zi];
  const int q0 = a.query_start[seq];
  const int n_rows = (a.query_start[seq + 1] - q0) * L.group;
  const int row0 = rt * kDecodeRows;
  const int D = a.head_dim;
  const size_t part0 = ((static_cast<size_t>(zi) * a.n_kv_heads + kh) * L.row_tiles + rt) * L.splits;
  for (int i = threadIdx.x; i < kDecodeRows * D; i += blockDim.x) {
    const int r = i / D, d = i % D;
    const int row = row0 + r;
    if (row >= n_rows) continue;
    float M = -INFINITY;
    for (int s = 0; s < L.splits; ++s) M = fmaxf(M, L.part_lse[(part0 + s) * kDecodeRows + r]);
    float wsum = 0.0f, acc = 0.0f;
    if (M != -INFINITY) {
      for (int s = 0; s < L.splits; ++s) {
        const float lse = L.part_lse[(part0 + s) * kDecodeRows + r];
        if (lse == -INFINITY) continue;
        const float w = exp2f(lse - M);
        wsum += w;
        acc += w * L.part_o[((part0 + s) * kDecodeRows + r) * D + d];
      }
    }
    a.out[(static_cast<size_t>(q0 + row / L.group) * a.n_heads + kh * L.group + row % L.group) * D + d] =
        wsum > 0.0f ? acc / wsum : 0.0f;
  }
}

template <typename T, int D, bool kDecode, int kWarps, int kStages, int kFp8>
cudaError_t launch_mma(const Launch& L, dim3 grid, cudaStream_t stream) {
  // INT8 scales: 2 floats per key a thread copies (kPasses = 16 * kTileKeys / (D * kWarps * 32)).
  const size_t scale_bytes = kFp8 == kKvI8 ? size_t{kTileKeys} * (D / 16) * 2 * sizeof(float) : 0;
  const size_t smem = smem_bytes(kDecode ? kDecodeRows : 16 * kWarps, kStages, D, kFp8 != kKvNative, scale_bytes);
  return launch_softcap_pair<paged_attn_mma_kernel<T, D, kDecode, kWarps, kStages, false, kFp8>,
                             paged_attn_mma_kernel<T, D, kDecode, kWarps, kStages, true, kFp8>>(L, smem, grid,
                                                                                               dim3(kWarps * 32), stream);
}

// Instantiated configurations (others measured slower on an H200; see docs/CUDA_NOTES.md):
// decode 2 or 3 stages (FP8: 2, 3, 4 or 6), prefill 4 or 8 warps with 2 stages.
template <typename T, int D, int kFp8>
cudaError_t launch_mma_cfg(const Launch& L, bool decode, int warps, int stages, dim3 grid,
                           cudaStream_t stream) {
  if (decode) {
    if constexpr (kFp8 != kKvNative) {
      return launch_fp8_decode(L, stages, grid, stream);
    } else {
      switch (stages) {
        case 2: return launch_mma<T, D, true, kDecodeWarps, 2, kFp8>(L, grid, stream);
        case 3: return launch_mma<T, D, true, kDecodeWarps, 3, kFp8>(L, grid, stream);
        default: return cudaErrorInvalidValue;
      }
    }
  }
  if (stages != 2) return cudaErrorInvalidValue;
  if (warps == 4) return launch_mma<T, D, false, 4, 2, kFp8>(L, grid, stream);
  if (warps == 8) return launch_mma<T, D, false, 8, 2, kFp8>(L, grid, stream);
  return cudaErrorInvalidValue;
}

template <int D>
cudaError_t launch_mma_dim(const Launch& L, bool decode, int warps, int stages, dim3 grid,
                           cudaStream_t stream) {
  switch (L.a.kv_type) {
    case DType::BF16: return launch_mma_cfg<__nv_bfloat16, D, kKvNative>(L, decode, warps, stages, grid, stream);
    case DType::F16: return launch_mma_cfg<__half, D, kKvNative>(L, decode, warps, stages, grid, stream);
    case DType::FP8_E4M3: return launch_mma_cfg<__half, D, kKvE4M3>(L, decode, warps, stages, grid, stream);
    case DType::FP8_E5M2: return launch_mma_cfg<__half, D, kKvE5M2>(L, decode, warps, stages, grid, stream);
    case DType::I8: return launch_mma_cfg<__half, D, kKvI8>(L, decode, warps, stages, grid, stream);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t launch_mma_any(const Launch& L, bool decode, int warps, int stages, dim3 grid,
                           cudaStream_t stream) {
  switch (L.a.head_dim) {
    case 64: return launch_mma_dim<64>(L, decode, warps, stages, grid, stream);
    case 128: return launch_mma_dim<128>(L, decode, warps, stages, grid, stream);
    default: return cudaErrorInvalidValue;
  }
}

bool is_fp8(DType t) { return t == DType::FP8_E4M3 || t == DType::FP8_E5M2; }
// One-byte caches (FP8 or INT8): the decode kernel of attention_fp8.cu and its planning.
bool is_byte_kv(DType t) { return is_fp8(t) || t == DType::I8; }

// Decode blocks one SM holds: two of the 16-bit kernel (registers and shared memory at 3
// stages), the one-byte kernel's by its shared memory.
int decode_blocks_per_sm(const PagedAttnArgs& a, int stages) {
  if (!is_byte_kv(a.kv_type)) return 2;
  const bool i8 = a.kv_type == DType::I8;
  if (fp8_decode_swapped(a))
    return a.head_dim == 64 ? fp8_swap_blocks_per_sm(stages, 64, i8) : fp8_swap_blocks_per_sm(stages, 128, i8);
  return a.head_dim == 64 ? fp8_decode_blocks_per_sm(stages, 64, i8) : fp8_decode_blocks_per_sm(stages, 128, i8);
}

// Split count for decode: about one wave of the resident blocks (measured on an H200 with
// 3 stages: fewer, longer blocks beat many short ones, whose start-up latency is not
// hidden), and at least 4 tiles per split so the merge stays a small part of the traffic.
// With fill_gpu, a launch too small to give every SM a block even so (a few sequences with
// short contexts: batch-1 decode) may split down to one tile per split: its time is the
// latency of one block's walk over its keys, which more splits shorten; but for a few blocks
// over at most kShortDecodeTiles tiles one unsplit pass beats any split, whose merge is a
// second launch (batch 1, 512-key bound: 212 tok/s unsplit vs 208 with 8 splits, 199 with 2;
// 8 x 128/256 at concurrency 8, 64 blocks, session 22 call 2: int4 1,642-1,658 output tok/s
// split -> 1,820 unsplit, fp8 1,559-1,572 -> 1,700, the rope fused again).
void plan_decode_at(const PagedAttnArgs& a, int stages, int num_sms, int* row_tiles, int* splits,
                    int* split_len) {
  const int group = a.n_heads / a.n_kv_heads;
  *row_tiles = std::max(1, (a.max_new * group + kDecodeRows - 1) / kDecodeRows);
  const int base = std::max(1, a.n_launch_seqs * a.n_kv_heads * *row_tiles);
  const int max_kv = std::max(1, a.max_kv);
  int max_splits = std::max(1, (max_kv + 4 * kTileKeys - 1) / (4 * kTileKeys));
  const int n_tiles = (max_kv + kTileKeys - 1) / kTileKeys;
  if (a.fill_gpu && base <= kFewDecodeBlocks && n_tiles <= kShortDecodeTiles)
    max_splits = 1;  // no merge launch: faster at batch 1 with <= 512 keys (H200, CUDA_NOTES.md)
  else if (a.fill_gpu && base * max_splits < num_sms)
    max_splits = std::max(max_splits, std::min(n_tiles, (num_sms + base - 1) / base));
  // The 16-row one-byte kernel: about 1.5 waves of its resident blocks measured best (b32 x 4096
  // keys, 3 blocks per SM: 3 splits 3077 GB/s, 2 splits 2785, where 1.3 waves leave a long,
  // thin second one). The keys-as-M kernel (4 blocks per SM): at most one wave (session 18,
  // b32 / b64 x 4096 keys: 2 splits 3529 GB/s against 3243 at 4, 1 split 4155 against 3741 at 2).
  const bool swapped = fp8_decode_swapped(a);
  const int slots = num_sms * decode_blocks_per_sm(a, stages) * (is_byte_kv(a.kv_type) && !swapped ? 3 : 2) / 2;
  int s = a.splits > 0 ? a.splits : swapped ? std::max(1, slots / base) : (slots + base - 1) / base;
  s = std::clamp(s, 1, a.splits > 0 ? (max_kv + kTileKeys - 1) / kTileKeys : max_splits);
  const int tiles = (max_kv + kTileKeys - 1) / kTileKeys;
  const int len = (tiles + s - 1) / s * kTileKeys;
  *split_len = len;
  *splits = (max_kv + len - 1) / len;
}

// Decode stages: a.stages, or the default. FP8 takes 6 stages (2 blocks per SM, deeper rings)
// for key ranges of kLongFp8Keys and more, 4 (3 blocks) below: measured on an H200, b64 x 4096
// keys 3708 vs 3317 GB/s, but b256 x 1024 keys 3076 vs 3461. max_kv is what decides, not the
// tiles per split: under a graph it is the width bucket's bound (a power of two above the
// longest sequence), and blocks of sequences half as long run better on 4 stages. INT8 (its
// stages also hold the scales) keeps 4 stages: 6 measured slower on every shape (session 14:
// b32 x 4096 2,553 vs 2,769 GB/s, b64 x 4096 2,941 vs 3,091).
int decode_stages(const PagedAttnArgs& a) {
  if (a.stages) return a.stages;
  if (!is_byte_kv(a.kv_type)) return kDefaultDecodeStages;
  if (fp8_decode_swapped(a)) return a.kv_type == DType::I8 ? kSwapI8DecodeStages : kSwapFp8DecodeStages;
  if (a.kv_type == DType::I8) return kDefaultFp8DecodeStages;
  return a.max_kv >= kLongFp8Keys ? kLongFp8DecodeStages : kDefaultFp8DecodeStages;
}

void plan_decode(const PagedAttnArgs& a, int num_sms, int* row_tiles, int* splits, int* split_len, int* stages) {
  *stages = decode_stages(a);
  plan_decode_at(a, *stages, num_sms, row_tiles, splits, split_len);
}

// head_dim 256 decode rows (<= kDecodeRows a sequence and K/V head) take the wgmma kernel, one
// block an SM (its 192 KiB): key-range splits so that the launch covers the SMs about once,
// each at least 4 tiles long, merged by attn_merge_kernel (a.splits > 0 forces a count). A
// batch-1 step of 4 K/V heads over 4096 keys walked its keys on 4 SMs (H200, session 15:
// 239 GB/s); batches of blocks >= the SMs are not split.
bool wgmma_decode_rows(const PagedAttnArgs& a) {
  return a.head_dim == 256 && a.max_new * (a.n_heads / a.n_kv_heads) <= kDecodeRows;
}
void plan_wgmma_decode(const PagedAttnArgs& a, int num_sms, int* splits, int* split_len) {
  const int base = std::max(1, a.n_launch_seqs * a.n_kv_heads);
  const int max_kv = std::max(1, a.max_kv);
  const int tiles = (max_kv + kTileKeys - 1) / kTileKeys;
  int s = a.splits > 0 ? a.splits : num_sms / base;
  s = std::clamp(s, 1, a.splits > 0 ? tiles : std::max(1, tiles / 4));
  const int len = (tiles + s - 1) / s * kTileKeys;
  *split_len = len;
  *splits = (max_kv + len - 1) / len;
}

// A split launch's partials in the workspace (L.splits > 1): O [parts][kDecodeRows][head_dim],
// then the log2-sum-exps [parts][kDecodeRows]; false when the workspace is too small.
bool use_split_workspace(Launch& L, void* workspace, size_t workspace_bytes, int num_sms, AttnKernel kind) {
  const PagedAttnArgs& a = L.a;
  if (workspace_bytes < attention_workspace_bytes(a, kind, num_sms)) return false;
  const size_t parts = static_cast<size_t>(a.n_launch_seqs) * a.n_kv_heads * L.row_tiles * L.splits;
  L.part_o = static_cast<float*>(workspace);
  L.part_lse = L.part_o + parts * kDecodeRows * a.head_dim;
  return true;
}

// The grid of a launch over every (row tile, split), K/V head and sequence, and the merge of
// the splits after it (a no-op without splits).
dim3 split_grid(const Launch& L) {
  return dim3(static_cast<unsigned>(L.row_tiles * L.splits), static_cast<unsigned>(L.a.n_kv_heads),
              static_cast<unsigned>(L.a.n_launch_seqs));
}
cudaError_t merge_splits(const Launch& L, cudaStream_t stream) {
  if (L.splits == 1) return cudaSuccess;
  const dim3 mgrid(static_cast<unsigned>(L.row_tiles), static_cast<unsigned>(L.a.n_kv_heads),
                   static_cast<unsigned>(L.a.n_launch_seqs));
  return launch_kernel(attn_merge_kernel, mgrid, dim3(256), 0, stream, L.a.pdl, L);
}

}  // namespace

bool cuda_kv_dtype_supported(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::FP8_E4M3 || t == DType::FP8_E5M2 ||
         t == DType::I8;
}

bool attention_mma_supported(DType kv_type, int head_dim) {
  return (kv_type == DType::BF16 || kv_type == DType::F16 || kv_type == DType::FP8_E4M3 ||
          kv_type == DType::FP8_E5M2 || kv_type == DType::I8) &&
         (head_dim == 64 || head_dim == 128);
}

bool wgmma_prefill_available(int device) { return sm90a_kernels_run_on(device); }

bool attention_wgmma_supported(DType kv_type, int head_dim) {
  if (is_byte_kv(kv_type)) return head_dim == 64 || head_dim == 128 || head_dim == 256;
  return (kv_type == DType::BF16 || kv_type == DType::F16) && (head_dim == 64 || head_dim == 128 || head_dim == 256);
}

AttnKernel attention_pick(const PagedAttnArgs& a) {
  // head_dim 256 has no mma.sync kernel: the wgmma one takes decode rows too.
  if (a.head_dim == 256 && a.wgmma && attention_wgmma_supported(a.kv_type, a.head_dim)) return AttnKernel::PrefillWgmma;
  if (!attention_mma_supported(a.kv_type, a.head_dim)) return AttnKernel::Simple;
  const int group = a.n_heads / a.n_kv_heads;
  if (a.max_new * group <= kDecodeRows) return AttnKernel::Decode;
  return a.wgmma && attention_wgmma_supported(a.kv_type, a.head_dim) ? AttnKernel::PrefillWgmma : AttnKernel::Prefill;
}

bool attention_decode_takes_rope(const PagedAttnArgs& a, int num_sms) {
  if (!(a.kv_type == DType::BF16 || a.kv_type == DType::F16 || is_fp8(a.kv_type))) return false;
  if (attention_pick(a) != AttnKernel::Decode) return false;
  int row_tiles, splits, split_len, stages;
  plan_decode(a, num_sms, &row_tiles, &splits, &split_len, &stages);
  return row_tiles == 1 && splits == 1;
}

bool attention_decode_opens_gate(const PagedAttnArgs& a, int num_sms) {
  return (a.kv_type == DType::BF16 || a.kv_type == DType::F16) && attention_decode_takes_rope(a, num_sms);
}

bool attention_decode_keys_as_m(const PagedAttnArgs& a) { return fp8_decode_swapped(a); }

namespace {
// Rank of sequence i = how many sequences come before it (longer, or as long with a lower
// index); a permutation, written at once.
__global__ void longest_first_kernel(const int32_t* seq_lens, int n, int32_t* order) {
  extern __shared__ int32_t s_len[];
  for (int i = threadIdx.x; i < n; i += blockDim.x) s_len[i] = seq_lens[i];
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int len = s_len[i];
    int rank = 0;
    for (int j = 0; j < n; ++j) rank += s_len[j] > len || (s_len[j] == len && j < i);
    order[rank] = i;
  }
}
}  // namespace

cudaError_t launch_longest_first(const int32_t* seq_lens, int n, int32_t* order, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (n > kMaxLongestFirst) return cudaErrorInvalidValue;
  const size_t smem = static_cast<size_t>(n) * sizeof(int32_t);  // (<= 32 KiB: no opt-in)
  longest_first_kernel<<<1, 512, smem, stream>>>(seq_lens, n, order);
  return cudaGetLastError();
}

size_t attention_workspace_bytes(const PagedAttnArgs& a, AttnKernel kind, int num_sms) {
  if (kind == AttnKernel::Auto) kind = attention_pick(a);
  int row_tiles = 1, splits = 1, split_len, stages;
  if (kind == AttnKernel::PrefillWgmma && wgmma_decode_rows(a)) plan_wgmma_decode(a, num_sms, &splits, &split_len);
  else if (kind == AttnKernel::Decode) plan_decode(a, num_sms, &row_tiles, &splits, &split_len, &stages);
  if (splits == 1) return 0;
  const size_t parts = static_cast<size_t>(a.n_launch_seqs) * a.n_kv_heads * row_tiles * splits;
  return parts * kDecodeRows * (static_cast<size_t>(a.head_dim) + 1) * sizeof(float);
}

cudaError_t launch_paged_attention(const PagedAttnArgs& a, AttnKernel kind, void* workspace,
                                   size_t workspace_bytes, int num_sms, cudaStream_t stream) {
  if (a.n_launch_seqs == 0 || a.max_new == 0) return cudaSuccess;
  if (a.n_kv_heads <= 0 || a.n_heads % a.n_kv_heads != 0) return cudaErrorInvalidValue;
  if (kind == AttnKernel::Auto) kind = attention_pick(a);
  if (a.rope.active && kind != AttnKernel::Decode) return cudaErrorInvalidValue;
  if (a.hold_gate.words && !attention_decode_opens_gate(a, num_sms)) return cudaErrorInvalidValue;  // (it would stay shut)
  if (kind == AttnKernel::Simple) return launch_paged_attention_simple(a, stream);
  Launch L;
  L.a = a;
  L.group = a.n_heads / a.n_kv_heads;
  if (kind == AttnKernel::PrefillWgmma) {
    if (!a.wgmma || !attention_wgmma_supported(a.kv_type, a.head_dim)) return cudaErrorInvalidValue;
    // head_dim 256: 64-key tiles, 2 stages, modes 0 and 3 only (its O takes 128 registers, a
    // stage 64 KiB); one-byte K/V: only warp-specialized kernels (their producer widens the
    // tiles; the launcher rejects the others); INT8 with 64-key tiles only (room for its scales).
    const bool d256 = a.head_dim == 256;
    // (one-byte K/V at head_dim 256: mode 3 only, the producer widening one raw tile at a time)
    const int mode = d256 ? (is_byte_kv(a.kv_type)                            ? 3
                             : a.prefill_mode == 0 || a.prefill_mode == 3 ? a.prefill_mode
                                                                          : kDefaultWgmmaModeD256)
                          : a.prefill_mode < 0 ? kDefaultWgmmaMode : a.prefill_mode;
    const int keys = d256 || a.kv_type == DType::I8 ? 64 : a.prefill_keys ? a.prefill_keys : kDefaultWgmmaKeys;
    const int rows = wgmma_block_rows(mode);
    L.row_tiles = (a.max_new * L.group + rows - 1) / rows;
    if (wgmma_decode_rows(a)) plan_wgmma_decode(a, num_sms, &L.splits, &L.split_len);
    if (L.splits > 1 && !use_split_workspace(L, workspace, workspace_bytes, num_sms, kind)) return cudaErrorInvalidValue;
    const cudaError_t e = launch_prefill_wgmma(L, keys, mode, split_grid(L), stream);
    return e != cudaSuccess ? e : merge_splits(L, stream);
  }
  if (!attention_mma_supported(a.kv_type, a.head_dim)) return cudaErrorInvalidValue;
  if (kind == AttnKernel::Prefill) {
    const int warps = a.prefill_warps ? a.prefill_warps : kDefaultPrefillWarps;
    const int stages = a.stages ? a.stages : kDefaultPrefillStages;
    L.row_tiles = (a.max_new * L.group + 16 * warps - 1) / (16 * warps);
    const dim3 grid(static_cast<unsigned>(L.row_tiles), static_cast<unsigned>(a.n_kv_heads),
                    static_cast<unsigned>(a.n_launch_seqs));
    return launch_mma_any(L, false, warps, stages, grid, stream);
  }
  int stages;
  plan_decode(a, num_sms, &L.row_tiles, &L.splits, &L.split_len, &stages);
  if ((a.rope.active || a.early_tiles) && !attention_decode_takes_rope(a, num_sms)) return cudaErrorInvalidValue;
  if (L.splits > 1 && !use_split_workspace(L, workspace, workspace_bytes, num_sms, kind)) return cudaErrorInvalidValue;
  const cudaError_t e = launch_mma_any(L, true, kDecodeWarps, stages, split_grid(L), stream);
  return e != cudaSuccess ? e : merge_splits(L, stream);
}

}  // namespace ember::cuda
