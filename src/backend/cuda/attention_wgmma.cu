// Prefill attention on Hopper's warpgroup MMAs (wgmma, sm_90a), FlashAttention-3-style: each
// consumer warpgroup of a block owns 64 packed (token, head) rows; S = Q K^T reads Q and a key
// tile from shared memory (both K-major), the online softmax runs on S's accumulator
// registers, and O += P V takes P straight from those registers (the F32 accumulator layout of
// one MMA is the 16-bit A-fragment layout of the next) and V from the same tile read N-major.
// K/V tiles stream in through a cp.async ring written in the 128-byte swizzle the descriptors
// name (wgmma.cuh). Two kernels:
//  - synced: every warp loads and computes; one block barrier per tile;
//  - warp-specialized: a producer warpgroup (few registers, setmaxnreg) streams the tiles and
//    signals each stage's mbarrier once its copies have landed; the consumer warpgroups (more
//    registers) wait on it and release the stage through a second mbarrier, so they never
//    wait for each other and their MMAs and softmax interleave.
// Why wgmma: the mma.sync kernel (attention.cu) is issue-bound at ~250 TFLOP/s; one wgmma does
// the work of 32 mma.sync and reads its operands without ldmatrix.
#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/wgmma.cuh"

#include <cmath>

namespace ember::cuda::attn {

namespace {

// Shared memory: Q [consumer warpgroups * 64 rows][D], then kStages x (K, V) [kKeys][D], all
// 16-bit and swizzled, then (warp-specialized) 2 x kStages mbarriers (4 x kStages room: K and V
// apart with 2 stages, kSplitKV), then (one-byte K/V, after the first 2 x kStages) two raw tiles
// [K, V][kKeys][D bytes], then (INT8) three [K, V][kKeys] float scale buffers; +1 KiB to align
// the base to the swizzle period.
constexpr int kI8ScaleBufs = 3;
// Raw one-byte tiles the widening producer keeps: two (tile t + 1 lands while tile t is
// widened), one at head_dim 256, where a second would not fit beside the two 64 KiB stages.
constexpr int raw_bufs(int D) { return D == 256 ? 1 : 2; }
constexpr size_t wgmma_smem_bytes(int wgs, int keys, int stages, int D, bool fp8 = false, bool i8 = false) {
  return static_cast<size_t>(wgs * 64 + 2 * stages * keys) * D * 2 + (fp8 ? raw_bufs(D) * 2 * keys * D : 0) + 32 * stages +
         (i8 ? kI8ScaleBufs * 2 * keys * sizeof(float) : 0) + wg::kAtomBytes;
}

#if defined(EMBER_WGMMA_DEVICE)
// The base of the dynamic shared memory rounded up to the swizzle period.
__device__ __forceinline__ uint8_t* aligned_smem(uint8_t* raw) {
  const uint32_t a = smem_addr(raw);
  return raw + ((wg::kAtomBytes - (a & (wg::kAtomBytes - 1))) & (wg::kAtomBytes - 1));
}

// One consumer warpgroup's running state over its 64 rows, and the tile step.
template <typename T, int D, int kKeys, bool kSoftcap>
struct WgRows {
  static constexpr int kNtS = kKeys / 8;  // score n-tiles
  static constexpr int kNtO = D / 8;      // output n-tiles
  float o[kNtO][4];
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;
  int r_a;            // this lane's first row (packed, within the sequence); the other is r_a + 8
  int pos_a, pos_b;   // their positions
  int warp_pos_min;   // position of the warp's first row
  int pos_min, pos_max;  // the warpgroup's rows' positions
  bool live;          // the warpgroup has rows
  uint32_t qa_addr;   // its Q rows: the A operand of every S MMA
  float qk_scale, inv_cap;

  __device__ __forceinline__ WgRows(const Launch& L, const AttnSpan& sp, int wgi, uint32_t q_addr) {
    const int lane = threadIdx.x % 32, wwarp = (threadIdx.x / 32) % 4;
    const int G = L.group;
#pragma unroll
    for (int i = 0; i < kNtO; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    const int wrow0 = wgi * 64 + wwarp * 16;
    r_a = sp.row0 + wrow0 + lane / 4;
    pos_a = sp.pos_base + r_a / G;
    pos_b = sp.pos_base + (r_a + 8) / G;
    warp_pos_min = sp.pos_base + (sp.row0 + wrow0) / G;
    pos_min = sp.pos_base + (sp.row0 + wgi * 64) / G;
    pos_max = sp.pos_base + min(sp.row0 + wgi * 64 + 63, sp.n_rows - 1) / G;
    live = sp.row0 + wgi * 64 < sp.n_rows;
    qa_addr = q_addr + wgi * 64 * wg::kSwizzleBytes;
    qk_scale = kSoftcap ? L.a.scale : L.a.scale * kLog2e;
    inv_cap = kSoftcap ? 1.0f / L.a.softcap : 0.0f;
  }

  // Whether the key tile from key0 holds a key any row of the warpgroup sees (causal, window):
  // uniform over the warpgroup.
  __device__ __forceinline__ bool sees(int key0, int window) const {
    return live && key0 <= pos_max && !(window > 0 && key0 + kKeys - 1 <= pos_min - window);
  }

  // S = Q K^T issued (one commit group): K [kKeys][D] swizzled at k_addr, Q with q_rows rows
  // in its column blocks. (Descriptors as one base plus constant offsets: computing each from
  // its address took ~150 integer instructions a tile.)
  __device__ __forceinline__ void issue_s(float (&s)[kNtS][4], uint32_t k_addr, int q_rows) {
    const uint64_t da0 = wg::desc(qa_addr, 16, wg::kAtomBytes), db0 = wg::desc(k_addr, 16, wg::kAtomBytes);
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      const uint32_t col = (ks % 4) * 32;  // k offset inside the 128-byte row
      const uint64_t da = wg::desc_add(da0, (ks / 4) * q_rows * wg::kSwizzleBytes + col);
      const uint64_t db = wg::desc_add(db0, (ks / 4) * kKeys * wg::kSwizzleBytes + col);
      wg::mma_ss<T, kKeys>(s, da, db, ks > 0);
    }
    wg::commit();
  }
  // O += P V issued (one commit group), P from pa: V's rows kk * 16 .. + 15 read N-major.
  __device__ __forceinline__ void issue_pv(const uint32_t (&pa)[kKeys / 16][4], uint32_t v_addr) {
    const uint64_t db0 = wg::desc(v_addr, kKeys * wg::kSwizzleBytes, wg::kAtomBytes);
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) wg::mma_rs_nmajor<T, D>(o, pa[kk], wg::desc_add(db0, kk * 16 * wg::kSwizzleBytes));
    wg::commit();
  }
  // Scores of the key tile from key0 -> probabilities; running state moved to it; c_a / c_b:
  // the factors O must still be scaled by; returns whether any maximum of the lane moved.
  // Without soft-capping the scale goes into the exponent's FMA (the softmax is the kernel's
  // bound: measured 578 TFLOP/s without it against 435 with it).
  __device__ __forceinline__ bool softmax(float (&s)[kNtS][4], int key0, const PagedAttnArgs& a, float& c_a,
                                          float& c_b) {
    if constexpr (kSoftcap) scale_scores<kNtS, true>(s, qk_scale, a.softcap, inv_cap);
    if (key0 + kKeys - 1 > warp_pos_min || a.window > 0)
      mask_scores<kNtS>(s, key0, pos_a, pos_b, a.window, threadIdx.x % 32);
    return softmax_tile<kNtS>(s, kSoftcap ? 1.0f : qk_scale, m_a, m_b, l_a, l_b, c_a, c_b);
  }

  // S = Q K^T, softmax, O += P V over one key tile, each MMA group waited for.
  __device__ __forceinline__ void attend(uint32_t k_addr, uint32_t v_addr, int key0, int q_rows, const PagedAttnArgs& a) {
    float s[kNtS][4];
    wg::fence();
    issue_s(s, k_addr, q_rows);
    wg::wait<0>();
    wg::fence_operands(s);
    float c_a, c_b;
    // O keeps its scale unless a row maximum of the warp moved (then c is exactly 1 elsewhere):
    // past the first tiles of a row, most tiles.
    if (__any_sync(0xffffffffu, softmax(s, key0, a, c_a, c_b))) rescale_rows<kNtO>(o, c_a, c_b);
    uint32_t pa[kKeys / 16][4];
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) p_fragment<T, kNtS>(pa[kk], s, kk);
    wg::fence();
    issue_pv(pa, v_addr);
    wg::wait<0>();
    wg::fence_operands(o);
    wg::fence_operands(pa);
  }

  // The warp-specialized consumer's loop over n_tiles ring tiles (stage t % kStages, "full" /
  // "empty" mbarriers at full / empty) with FlashAttention-3's in-warpgroup overlap: S = Q K^T
  // of tile t and O += P V of tile t - 1 issued as two groups, the softmax of tile t run while
  // the P V does, then O rescaled and P converted; a stage is released once the P V that read
  // its V is done. Every tile is computed, the ones this warpgroup does not see too (masked to
  // P = 0): MMAs under a branch ptxas cannot prove uniform are serialized (warning C7520).
  // (Measured slower and not kept: P V of tile t - 1 and S of tile t as one group, with or
  // without FA3's ping-pong turns between two consumers, and this loop with the turns.)
  //
  // kSplitKV (2 stages, where K of tile t + 1 and V of tile t would share one stage's barrier
  // and each side would wait for the other): K and V have their own "full" / "empty" barriers
  // (full_v / empty_v; full / empty are K's), K of tile t is released once S of tile t is
  // done, V once its P V is, so the producer refills K a tile before V.
  template <int kStages, bool kSplitKV = false>
  __device__ __forceinline__ void run_overlap(uint32_t kv_addr, uint32_t full, uint32_t empty, int n_tiles,
                                              int t_begin, int q_rows, const PagedAttnArgs& a, uint32_t full_v = 0,
                                              uint32_t empty_v = 0) {
    constexpr uint32_t kTileBytes = kKeys * D * 2;
    auto stage_addr = [&](int t) { return kv_addr + (t % kStages) * 2 * kTileBytes; };
    // Waited for even by a warpgroup without rows: an early "empty" arrival could complete the
    // stage's previous phase.
    auto wait_full = [&](int t) { wg::mbar_wait(full + 8 * (t % kStages), (t / kStages) & 1); };
    auto wait_v = [&](int t) {
      if constexpr (kSplitKV) wg::mbar_wait(full_v + 8 * (t % kStages), (t / kStages) & 1);
    };
    auto release_k = [&](int t) {
      if constexpr (kSplitKV) wg::mbar_arrive(empty + 8 * (t % kStages));
    };
    auto release_v = [&](int t) { wg::mbar_arrive((kSplitKV ? empty_v : empty) + 8 * (t % kStages)); };
    if (!live || n_tiles == 0) {
      for (int t = 0; t < n_tiles; ++t) {
        wait_full(t);
        wait_v(t);
        release_k(t);
        release_v(t);
      }
      return;
    }
    uint32_t pa[kKeys / 16][4];
    float s[kNtS][4];
    float c_a, c_b;
    wait_full(0);
    wg::fence();
    issue_s(s, stage_addr(0), q_rows);
    wg::wait<0>();
    wg::fence_operands(s);
    release_k(0);
    softmax(s, t_begin, a, c_a, c_b);  // O is still zero: nothing to rescale
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) p_fragment<T, kNtS>(pa[kk], s, kk);
    for (int t = 1; t < n_tiles; ++t) {
      wait_full(t);
      wait_v(t - 1);
      wg::fence();
      issue_s(s, stage_addr(t), q_rows);
      issue_pv(pa, stage_addr(t - 1) + kTileBytes);
      wg::wait<1>();  // S of tile t (the older group) has landed
      wg::fence_operands(s);
      release_k(t);
      const bool moved = __any_sync(0xffffffffu, softmax(s, t_begin + t * kKeys, a, c_a, c_b));
      wg::wait<0>();
      wg::fence_operands(o);
      wg::fence_operands(pa);
      release_v(t - 1);
      if (moved) rescale_rows<kNtO>(o, c_a, c_b);
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk) p_fragment<T, kNtS>(pa[kk], s, kk);
    }
    wait_v(n_tiles - 1);
    wg::fence();
    issue_pv(pa, stage_addr(n_tiles - 1) + kTileBytes);
    wg::wait<0>();
    wg::fence_operands(o);
    wg::fence_operands(pa);
    release_v(n_tiles - 1);
  }
};

// Copies key tile t (kKeys keys from t_begin + t * kKeys) of K and V into ring stage `stage`
// through loader ld (64-key tiles, called in order).
// kWhich: 2 K and V, 0 K alone, 1 V alone.
template <int D, int kKeys, int kWhich = 2, typename Loader>
__device__ __forceinline__ void issue_tile(Loader& ld, uint8_t* s_kv, int stage) {
  constexpr uint32_t kTileBytes = kKeys * D * 2;
#pragma unroll
  for (int sub = 0; sub < kKeys / kTileKeys; ++sub) {
    ld.load_ids();
    ld.template issue<kWhich>([&](int k0, int key, int c, int kv) {
      const int r = sub * kTileKeys + k0 + key;
      return s_kv + (stage * 2 + kv) * kTileBytes + wg::swizzled_offset(kKeys, r, c);
    });
  }
}

// FP8 K/V: copies key tile t's bytes into raw buffer `raw` ([K, V][kKeys][D] bytes) through
// loader ld (rows of D bytes), and widens this thread's own chunks of a landed raw buffer into
// a 16-bit swizzled stage (each chunk is read back by the thread that copied it: no barrier).
// INT8 (scales non-null): also the keys' K and V scales into scales [K, V][kKeys].
template <int D, int kKeys, typename Loader>
__device__ __forceinline__ void issue_raw_tile(Loader& ld, uint8_t* raw, const PagedAttnArgs& a, int kh,
                                               float* scales = nullptr) {
#pragma unroll
  for (int sub = 0; sub < kKeys / kTileKeys; ++sub) {
    ld.load_ids();
    ld.issue([&](int k0, int key, int c, int kv) { return raw + (kv * kKeys + sub * kTileKeys + k0 + key) * D + c * 16; });
    if (scales)
      ld.issue_scales(a.k_scales, a.v_scales, a.n_kv_heads, kh, scales + sub * kTileKeys,
                      scales + kKeys + sub * kTileKeys);
  }
}
// INT8: scales [K, V][kKeys] (written by other threads: the caller syncs before).
template <int D, int kKeys, int kFp8, typename Loader>
__device__ __forceinline__ void widen_tile(const Loader& ld, const uint8_t* raw, uint8_t* stage_kv,
                                           const float* scales = nullptr) {
  constexpr uint32_t kTileBytes = kKeys * D * 2;
#pragma unroll
  for (int sub = 0; sub < kKeys / kTileKeys; ++sub)
#pragma unroll
    for (int ps = 0; ps < Loader::kPasses; ++ps)
#pragma unroll
      for (int kv = 0; kv < 2; ++kv) {
        const int r = sub * kTileKeys + ps * Loader::kKeysPerPass + ld.key;
        const uint4 b = *reinterpret_cast<const uint4*>(raw + (kv * kKeys + r) * D + ld.chunk * 16);
        uint2 h0, h1, h2, h3;
        if constexpr (kFp8 == kKvI8) {
          const __half2 sc = __float2half2_rn(scales[kv * kKeys + r]);
          h0 = i8x4_scaled_f16x4(b.x, sc), h1 = i8x4_scaled_f16x4(b.y, sc);
          h2 = i8x4_scaled_f16x4(b.z, sc), h3 = i8x4_scaled_f16x4(b.w, sc);
        } else {
          h0 = fp8x4_to_half4<kFp8 == kKvE4M3>(b.x), h1 = fp8x4_to_half4<kFp8 == kKvE4M3>(b.y);
          h2 = fp8x4_to_half4<kFp8 == kKvE4M3>(b.z), h3 = fp8x4_to_half4<kFp8 == kKvE4M3>(b.w);
        }
        uint8_t* dst = stage_kv + kv * kTileBytes;
        *reinterpret_cast<uint4*>(dst + wg::swizzled_offset(kKeys, r, 2 * ld.chunk)) = make_uint4(h0.x, h0.y, h1.x, h1.y);
        *reinterpret_cast<uint4*>(dst + wg::swizzled_offset(kKeys, r, 2 * ld.chunk + 1)) = make_uint4(h2.x, h2.y, h3.x, h3.y);
      }
}

// Q rows [row_lo, row_lo + n) of the block's q_rows: F32 -> T, swizzled; threads [0, threads).
template <typename T, int D>
__device__ __forceinline__ void load_q(const Launch& L, const AttnSpan& sp, uint8_t* s_q, int q_rows, int row_lo, int n,
                                       int tid, int threads) {
  constexpr int kCh = D / 8;
  for (int i = tid; i < n * kCh; i += threads) {
    const int r = row_lo + i / kCh, c = i % kCh;
    *reinterpret_cast<uint4*>(s_q + wg::swizzled_offset(q_rows, r, c)) =
        q_chunk<T, D>(L.a, sp.q0, sp.kh, L.group, sp.n_rows, sp.row0 + r, c);
  }
}
// A consumer warpgroup's 64 Q rows from row_lo (tid: 0 .. 127): every load issued before the
// first conversion, so the block's start waits for one global latency, not one a chunk.
template <typename T, int D>
__device__ __forceinline__ void load_q_rows64(const Launch& L, const AttnSpan& sp, uint8_t* s_q, int q_rows, int row_lo,
                                              int tid) {
  constexpr int kCh = D / 8, kPer = 64 * kCh / 128;
  static_assert(64 * kCh % 128 == 0);
  uint4 v[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int i = tid + j * 128;
    v[j] = q_chunk<T, D>(L.a, sp.q0, sp.kh, L.group, sp.n_rows, sp.row0 + row_lo + i / kCh, i % kCh);
  }
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int i = tid + j * 128;
    *reinterpret_cast<uint4*>(s_q + wg::swizzled_offset(q_rows, row_lo + i / kCh, i % kCh)) = v[j];
  }
}
// This block's span: decode rows split over the key range (L.splits > 1: one row tile, see
// launch_paged_attention) or prefill row tiles longest first.
template <int kRows>
__device__ __forceinline__ bool wgmma_span(const Launch& L, AttnSpan& sp) {
  return L.splits > 1 ? attn_span<true, kRows>(L, sp) : attn_span<false, kRows>(L, sp);
}
// The end of a consumer: its rows as a split's partial, or normalized into out.
template <typename T, int D, int kKeys, bool kSoftcap>
__device__ __forceinline__ void store_rows(const Launch& L, const AttnSpan& sp, const WgRows<T, D, kKeys, kSoftcap>& w) {
  const int lane = threadIdx.x % 32;
  if (L.splits > 1) store_split_rows<D>(L, sp, w.r_a, lane, w.o, w.m_a, w.m_b, w.l_a, w.l_b);
  else store_prefill_rows<D>(L.a, sp.q0, sp.kh, L.group, sp.n_rows, w.r_a, lane, w.o, w.l_a, w.l_b);
}
// Hands a landed stage to wgmma (the async proxy) and arrives on its "full" barrier: the writer
// fences, so the consumers do not (a fence costs a MEMBAR.ALL.CTA a warp).
__device__ __forceinline__ void publish_stage(uint32_t full_bar) {
  wg::fence_proxy_async();
  wg::mbar_arrive(full_bar);
}
#endif  // EMBER_WGMMA_DEVICE

// Synced kernel: kWg warpgroups of 64 rows, all loading; kStages tiles in the cp.async ring.
template <typename T, int D, int kWg, int kKeys, int kStages, bool kSoftcap>
__global__ void __launch_bounds__(kWg * 128, 1) paged_attn_wgmma_kernel(const Launch L) {
#if defined(EMBER_WGMMA_DEVICE)
  constexpr int kThreads = kWg * 128;
  constexpr int kRows = kWg * 64;
  constexpr uint32_t kTileBytes = kKeys * D * 2;
  static_assert(D % 64 == 0 && kKeys % kTileKeys == 0 && kStages >= 2);
  extern __shared__ uint8_t smem_raw[];
  uint8_t* s_q = aligned_smem(smem_raw);  // [D / 64][kRows][64]
  uint8_t* s_kv = s_q + kRows * D * 2;    // [kStages][K, V][D / 64][kKeys][64]
  const uint32_t kv_addr = smem_addr(s_kv);

  pdl_wait();
  pdl_launch_dependents();
  AttnSpan sp;
  if (!wgmma_span<kRows>(L, sp)) return;
  const int n_tiles = (sp.kv_hi - sp.t_begin + kKeys - 1) / kKeys;
  // Two 16-byte chunks per thread and row of a 64-key loader tile (kRun 2).
  KvTileLoader<D * 2, kThreads, 2> ld(L.a, sp.seq, sp.kh, sp.t_begin, sp.kv_hi);
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < n_tiles) issue_tile<D, kKeys>(ld, s_kv, st);
    cp_async_commit();
  }
  load_q<T, D>(L, sp, s_q, kRows, 0, kRows, threadIdx.x, kThreads);  // while K/V tiles load
  WgRows<T, D, kKeys, kSoftcap> w(L, sp, threadIdx.x / 128, smem_addr(s_q));

  int stage = 0, issue_stage = kStages - 1;
  for (int t = 0; t < n_tiles; ++t) {
    cp_async_wait<kStages - 2>();
    wg::fence_proxy_async();  // this thread's cp.async (and, at t = 0, Q) bytes -> wgmma
    __syncthreads();          // tile t visible; every warpgroup done with tile t - 1
    if (t + kStages - 1 < n_tiles) issue_tile<D, kKeys>(ld, s_kv, issue_stage);
    cp_async_commit();
    issue_stage = issue_stage + 1 == kStages ? 0 : issue_stage + 1;
    const uint32_t k_addr = kv_addr + stage * 2 * kTileBytes;
    stage = stage + 1 == kStages ? 0 : stage + 1;
    const int key0 = sp.t_begin + t * kKeys;
    if (w.sees(key0, L.a.window)) w.attend(k_addr, k_addr + kTileBytes, key0, kRows, L.a);
  }
  store_rows(L, sp, w);
#else
  __trap();  // launched only where the sm_90a pass exists (wgmma_prefill_available)
#endif
}

// Warp-specialized kernel: warpgroup 0 produces, warpgroups 1 .. kWg consume (64 rows each).
// kStages ring stages, each with a "full" mbarrier (the producer's 128 threads arrive once
// their copies have landed) and an "empty" one (the consumers' 128 * kWg threads arrive when
// done).
// Registers per thread after setmaxnreg: the producer needs few; the consumers take the rest
// of the 64 Ki (in multiples of 8).
// (FP8: the producer also widens the tiles and spilled at 40; 56 / 224; at head_dim 256 72 / 216:
// ptxas, no spills for FP8, 32 bytes for INT8.)
constexpr int producer_regs(bool fp8, int D) { return fp8 ? (D == 256 ? 72 : 56) : 40; }
constexpr int consumer_regs(int wgs, bool fp8, int D) { return wgs == 2 ? (fp8 ? (D == 256 ? 216 : 224) : 232) : 152; }
// setmaxnreg.inc takes registers from the block's own pool (PTX ISA: it blocks until the pool
// has enough), which holds the launch's allocation (65536 over the threads, in multiples of
// 8): a split past it makes the consumers wait forever (a one-byte head_dim 256 build at
// 64 / 224, past this bound, hung on the H200 in session 15).
constexpr int launch_regs(int threads) { return 65536 / threads / 8 * 8; }
// kFp8 (kKvE4M3 / kKvE5M2 / kKvI8; T = __half): the producer copies the bytes into two raw
// buffers and widens each landed tile (FP8 exactly; INT8 times its scales) into the 16-bit stage
// the consumers read. INT8: the thread of a key's chunk 0 copies its scales into one of three
// buffers, read by the key's other threads after a producer barrier; with three, a thread a
// tile ahead never overwrites the scales another is still widening.
// kOverlap: the consumers run WgRows::run_overlap, else they attend tile by tile.
template <typename T, int D, int kWg, int kKeys, int kStages, bool kSoftcap, int kFp8 = kKvNative, bool kOverlap = false>
__global__ void __launch_bounds__((kWg + 1) * 128, 1) paged_attn_wgmma_ws_kernel(const Launch L) {
#if defined(EMBER_WGMMA_DEVICE)
  constexpr int kRows = kWg * 64;
  constexpr bool kIsFp8 = kFp8 != kKvNative;
  constexpr int kProducerRegs = producer_regs(kIsFp8, D), kConsumerRegs = consumer_regs(kWg, kIsFp8, D);
  static_assert(kWg * 128 * kConsumerRegs + 128 * kProducerRegs <= (kWg + 1) * 128 * launch_regs((kWg + 1) * 128));
  constexpr uint32_t kTileBytes = kKeys * D * 2;
  static_assert(D % 64 == 0 && kKeys % kTileKeys == 0 && kStages >= 2);
  // The 16-bit producer publishes tile t - 1 only after issuing tile t, which waits for the
  // release of tile t - kStages; run_overlap releases a tile one tile late, so with 2 stages
  // each side would wait for the other (a head_dim 256 build of it hung on the H200). There K
  // and V take their own barriers and producer halves instead (kSplitKV), each publishing its
  // last tile before it waits for a free stage.
  constexpr bool kSplitKV = kOverlap && !kIsFp8 && kStages == 2;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* s_q = aligned_smem(smem_raw);                 // [D / 64][kRows][64]
  uint8_t* s_kv = s_q + kRows * D * 2;                   // [kStages][K, V][D / 64][kKeys][64]
  const uint32_t kv_addr = smem_addr(s_kv);
  const uint32_t full = kv_addr + kStages * 2 * kTileBytes;  // [kStages] mbarriers (kSplitKV: K's)
  const uint32_t empty = full + 8 * kStages;                 // [kStages]
  const uint32_t full_v = empty + 8 * kStages;               // kSplitKV: V's [kStages], [kStages]
  const uint32_t empty_v = full_v + 8 * kStages;

  pdl_wait();
  pdl_launch_dependents();
  AttnSpan sp;
  if (!wgmma_span<kRows>(L, sp)) return;
  const int n_tiles = (sp.kv_hi - sp.t_begin + kKeys - 1) / kKeys;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      wg::mbar_init(full + 8 * s, kSplitKV ? 64 : 128);
      wg::mbar_init(empty + 8 * s, kWg * 128);
      if constexpr (kSplitKV) {
        wg::mbar_init(full_v + 8 * s, 64);
        wg::mbar_init(empty_v + 8 * s, kWg * 128);
      }
    }
  }
  __syncthreads();  // barriers initialized before anyone arrives
  const int wgi = threadIdx.x / 128;
  if (kIsFp8 && wgi == 0) {
    wg::regs_dec<kProducerRegs>();
    constexpr int kRaw = raw_bufs(D);
    uint8_t* raw = s_kv + kStages * 2 * kTileBytes + 16 * kStages;  // [kRaw][K, V][kKeys][D]
    float* scales = reinterpret_cast<float*>(raw + kRaw * 2 * kKeys * D);  // INT8: [3][K, V][kKeys]
    KvTileLoader<D, 128, 1> ld(L.a, sp.seq, sp.kh, sp.t_begin, sp.kv_hi);
    auto scale_buf = [&](int u) { return kFp8 == kKvI8 ? scales + (u % kI8ScaleBufs) * 2 * kKeys : nullptr; };
    // Tile t's bytes go out while tile t - 1 (landed) is widened into its stage, once the
    // consumers have released that stage; then the fence hands the stage to wgmma.
    auto publish = [&](int u) {
      const int stage = u % kStages;
      if constexpr (kFp8 == kKvI8) wg::named_sync(1 + kWg, 128);  // every producer copy of tile u landed
      if (u >= kStages) wg::mbar_wait(empty + 8 * stage, (u / kStages - 1) & 1);
      widen_tile<D, kKeys, kFp8>(ld, raw + (u % kRaw) * 2 * kKeys * D, s_kv + stage * 2 * kTileBytes, scale_buf(u));
      publish_stage(full + 8 * stage);
    };
    for (int t = 0; t < n_tiles; ++t) {
      // (each thread widens the chunks it copied itself, so with one raw tile its next copies
      // wait for nobody else's widening)
      issue_raw_tile<D, kKeys>(ld, raw + (t % kRaw) * 2 * kKeys * D, L.a, sp.kh, scale_buf(t));
      cp_async_commit();
      if constexpr (kRaw == 1) {
        cp_async_wait<0>();
        publish(t);
      } else if (t > 0) {
        cp_async_wait<1>();
        publish(t - 1);
      }
    }
    if (kRaw > 1 && n_tiles > 0) {
      cp_async_wait<0>();
      publish(n_tiles - 1);
    }
  } else if (wgi == 0) {
    wg::regs_dec<kProducerRegs>();
    if constexpr (kSplitKV) {
      // Threads 0-63 copy K, 64-127 V, each half into its own barriers; a tile is published
      // (its copies landed, fenced for wgmma) before the wait for the stage of the next.
      const int half = threadIdx.x / 64;
      KvTileLoader<D * 2, 64, 8> ld(L.a, sp.seq, sp.kh, sp.t_begin, sp.kv_hi, threadIdx.x % 64u);
      const uint32_t my_full = half ? full_v : full, my_empty = half ? empty_v : empty;
      for (int t = 0; t < n_tiles; ++t) {
        const int stage = t % kStages;
        if (t > 0) {
          cp_async_wait<0>();
          publish_stage(my_full + 8 * ((t - 1) % kStages));
        }
        if (t >= kStages) wg::mbar_wait(my_empty + 8 * stage, (t / kStages - 1) & 1);
        if (half) issue_tile<D, kKeys, 1>(ld, s_kv, stage);
        else issue_tile<D, kKeys, 0>(ld, s_kv, stage);
        cp_async_commit();
      }
      if (n_tiles > 0) {
        cp_async_wait<0>();
        publish_stage(my_full + 8 * ((n_tiles - 1) % kStages));
      }
    } else {
      KvTileLoader<D * 2, 128, 2> ld(L.a, sp.seq, sp.kh, sp.t_begin, sp.kv_hi);
      // A tile is published once this thread's copies of it have landed (publish_stage).
      // Waiting on tile t - 1 only after issuing tile t keeps a tile in flight.
      for (int t = 0; t < n_tiles; ++t) {
        const int stage = t % kStages;
        if (t >= kStages) wg::mbar_wait(empty + 8 * stage, (t / kStages - 1) & 1);
        issue_tile<D, kKeys>(ld, s_kv, stage);
        cp_async_commit();
        if (t > 0) {
          cp_async_wait<1>();
          publish_stage(full + 8 * ((t - 1) % kStages));
        }
      }
      if (n_tiles > 0) {
        cp_async_wait<0>();
        publish_stage(full + 8 * ((n_tiles - 1) % kStages));
      }
    }
  } else {
    wg::regs_inc<kConsumerRegs>();
    const int c = wgi - 1;  // consumer index: rows c * 64 .. + 63
    const int tid = threadIdx.x - 128 * wgi;
    load_q_rows64<T, D>(L, sp, s_q, kRows, c * 64, tid);
    wg::fence_proxy_async();
    wg::named_sync(1 + c, 128);  // the warpgroup's Q rows written
    WgRows<T, D, kKeys, kSoftcap> w(L, sp, c, smem_addr(s_q));
    if constexpr (kOverlap) {
      w.template run_overlap<kStages, kSplitKV>(kv_addr, full, empty, n_tiles, sp.t_begin, kRows, L.a, full_v, empty_v);
    } else {
      for (int t = 0; t < n_tiles; ++t) {
        const int stage = t % kStages;
        // Waited for even when skipped: an early "empty" arrival could complete the stage's
        // previous phase.
        wg::mbar_wait(full + 8 * stage, (t / kStages) & 1);
        const int key0 = sp.t_begin + t * kKeys;
        if (w.sees(key0, L.a.window)) {
          const uint32_t k_addr = kv_addr + stage * 2 * kTileBytes;
          w.attend(k_addr, k_addr + kTileBytes, key0, kRows, L.a);
        }
        wg::mbar_arrive(empty + 8 * stage);
      }
    }
    store_rows(L, sp, w);
  }
#else
  __trap();  // launched only where the sm_90a pass exists (wgmma_prefill_available)
#endif
}

// kMode: 0 block-synced (2 warpgroups), 1 warp-specialized with 2 consumer warpgroups,
// 2 the same with 3, 3 warp-specialized with 2 consumers overlapping softmax and P V
// (WgRows::run_overlap), 4 the same with 3.
template <typename T, int D, int kKeys, int kStages, int kMode, int kFp8 = kKvNative>
cudaError_t launch_wgmma(const Launch& L, dim3 grid, cudaStream_t stream) {
  constexpr int kWg = kMode == 2 || kMode == 4 ? 3 : 2;
  constexpr bool kOverlap = kMode >= 3;
  static_assert(kFp8 == kKvNative || kMode == 1 || kMode >= 3);
  const size_t smem = wgmma_smem_bytes(kWg, kKeys, kStages, D, kFp8 != kKvNative, kFp8 == kKvI8);
  const dim3 block((kWg + (kMode > 0 ? 1 : 0)) * 128);
  if constexpr (kMode > 0)
    return launch_softcap_pair<paged_attn_wgmma_ws_kernel<T, D, kWg, kKeys, kStages, false, kFp8, kOverlap>,
                               paged_attn_wgmma_ws_kernel<T, D, kWg, kKeys, kStages, true, kFp8, kOverlap>>(
        L, smem, grid, block, stream);
  else
    return launch_softcap_pair<paged_attn_wgmma_kernel<T, D, kWg, kKeys, kStages, false>,
                               paged_attn_wgmma_kernel<T, D, kWg, kKeys, kStages, true>>(L, smem, grid, block, stream);
}

// Configurations: keys per tile 64 or 128; block-synced (2 stages at 128 keys, 3 at 64),
// warp-specialized with 2 consumers (3 stages at 128 keys: 225 KiB; 6 at 64) or 3 (64 keys
// only, 5 stages: S and O in 152 registers).
template <typename T, int D>
cudaError_t launch_wgmma_cfg(const Launch& L, int keys, int mode, dim3 grid, cudaStream_t stream) {
  if (keys == 64) {
    switch (mode) {
      case 0: return launch_wgmma<T, D, 64, 3, 0>(L, grid, stream);
      case 1: return launch_wgmma<T, D, 64, 6, 1>(L, grid, stream);
      case 2: return launch_wgmma<T, D, 64, 5, 2>(L, grid, stream);
      case 3: return launch_wgmma<T, D, 64, 6, 3>(L, grid, stream);
      case 4: return launch_wgmma<T, D, 64, 5, 4>(L, grid, stream);
    }
  } else if (keys == 128) {
    switch (mode) {
      case 0: return launch_wgmma<T, D, 128, 2, 0>(L, grid, stream);
      case 1: return launch_wgmma<T, D, 128, 3, 1>(L, grid, stream);
      case 3: return launch_wgmma<T, D, 128, 3, 3>(L, grid, stream);
    }
  }
  return cudaErrorInvalidValue;
}

// FP8 K/V: warp-specialized (modes 1, 3, 4); 128-key tiles with 2 stages (+ 64 KiB raw; modes
// 1 and 3), or 64 with 4.
template <int D, int kFp8>
cudaError_t launch_wgmma_fp8(const Launch& L, int keys, int mode, dim3 grid, cudaStream_t stream) {
  if (keys == 128) {
    if (mode == 1) return launch_wgmma<__half, D, 128, 2, 1, kFp8>(L, grid, stream);
    if (mode == 3) return launch_wgmma<__half, D, 128, 2, 3, kFp8>(L, grid, stream);
  } else if (keys == 64) {
    if (mode == 1) return launch_wgmma<__half, D, 64, 4, 1, kFp8>(L, grid, stream);
    if (mode == 3) return launch_wgmma<__half, D, 64, 4, 3, kFp8>(L, grid, stream);
    if (mode == 4) return launch_wgmma<__half, D, 64, 4, 4, kFp8>(L, grid, stream);
  }
  return cudaErrorInvalidValue;
}

// INT8 K/V: 64-key tiles with 4 stages only (128-key tiles leave no room for the scales).
template <int D>
cudaError_t launch_wgmma_i8(const Launch& L, int keys, int mode, dim3 grid, cudaStream_t stream) {
  if (keys != 64) return cudaErrorInvalidValue;
  if (mode == 1) return launch_wgmma<__half, D, 64, 4, 1, kKvI8>(L, grid, stream);
  if (mode == 4) return launch_wgmma<__half, D, 64, 4, 4, kKvI8>(L, grid, stream);
  return cudaErrorInvalidValue;
}

template <int D>
cudaError_t launch_wgmma_dim(const Launch& L, int keys, int mode, dim3 grid, cudaStream_t stream) {
  switch (L.a.kv_type) {
    case DType::BF16: return launch_wgmma_cfg<__nv_bfloat16, D>(L, keys, mode, grid, stream);
    case DType::F16: return launch_wgmma_cfg<__half, D>(L, keys, mode, grid, stream);
    case DType::FP8_E4M3: return launch_wgmma_fp8<D, kKvE4M3>(L, keys, mode, grid, stream);
    case DType::FP8_E5M2: return launch_wgmma_fp8<D, kKvE5M2>(L, keys, mode, grid, stream);
    case DType::I8: return launch_wgmma_i8<D>(L, keys, mode, grid, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t launch_prefill_wgmma(const Launch& L, int keys, int mode, dim3 grid, cudaStream_t stream) {
  switch (L.a.head_dim) {
    case 64: return launch_wgmma_dim<64>(L, keys, mode, grid, stream);
    case 128: return launch_wgmma_dim<128>(L, keys, mode, grid, stream);
    case 256:  // 64-key tiles, 2 stages (192 KiB): block-synced, or 2 consumers overlapping (split K / V)
      if ((mode != 0 && mode != 3) || keys != 64) return cudaErrorInvalidValue;
      if (L.a.kv_type == DType::BF16)
        return mode == 0 ? launch_wgmma<__nv_bfloat16, 256, 64, 2, 0>(L, grid, stream)
                         : launch_wgmma<__nv_bfloat16, 256, 64, 2, 3>(L, grid, stream);
      if (L.a.kv_type == DType::F16)
        return mode == 0 ? launch_wgmma<__half, 256, 64, 2, 0>(L, grid, stream)
                         : launch_wgmma<__half, 256, 64, 2, 3>(L, grid, stream);
      // One-byte K/V: the widening producer with one raw tile (225 KiB), overlapping consumers only.
      if (mode != 3) return cudaErrorInvalidValue;
      if (L.a.kv_type == DType::FP8_E4M3) return launch_wgmma<__half, 256, 64, 2, 3, kKvE4M3>(L, grid, stream);
      if (L.a.kv_type == DType::FP8_E5M2) return launch_wgmma<__half, 256, 64, 2, 3, kKvE5M2>(L, grid, stream);
      if (L.a.kv_type == DType::I8) return launch_wgmma<__half, 256, 64, 2, 3, kKvI8>(L, grid, stream);
      return cudaErrorInvalidValue;
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace ember::cuda::attn
