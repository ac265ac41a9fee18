#pragma once
// Device code shared by the paged-attention kernels (nvcc only): launch arguments, shared-memory
// layout constants, the key-tile loader, score scaling/masking, the online softmax and the
// decode epilogue. attention.cu holds the 16-bit kernel (decode, prefill, FP8 prefill) and the
// launchers, attention_fp8.cu the FP8 decode kernel. Named namespace: both files pass Launch.
#include "backend/cuda/attention.cuh"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/mma_util.cuh"
#include "backend/cuda/smem_limit.h"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace ember::cuda::attn {

constexpr int kTileKeys = 64;     // keys per shared-memory tile
constexpr int kDecodeRows = 16;   // packed query rows per decode block (one m16 tile)
constexpr int kDecodeWarps = 4;   // decode: the warps split each key tile
constexpr float kLog2e = 1.4426950408889634f;
constexpr int kDefaultDecodeStages = 3;
constexpr int kDefaultFp8DecodeStages = 4;  // FP8 decode: 3 blocks of 64 KiB per SM ...
constexpr int kLongFp8Keys = 4096;          // ... or, from this many keys,
constexpr int kLongFp8DecodeStages = 6;     // 2 blocks of 96 KiB (see decode_stages)
constexpr int kDefaultPrefillWarps = 8;
constexpr int kDefaultPrefillStages = 2;
constexpr int kShortDecodeTiles = 8;  // fill_gpu: key ranges this short run unsplit ...
constexpr int kFewDecodeBlocks = 64;  // ... in launches of this few (sequence, kv head) blocks

struct Launch {
  PagedAttnArgs a;
  int group = 1;        // query heads per K/V head
  int row_tiles = 1;    // blocks along the packed rows of one (sequence, kv head)
  int splits = 1;       // decode: blocks along the key range
  int split_len = 0;    // decode: keys per split (multiple of kTileKeys)
  float* part_o = nullptr;    // [n_launch_seqs, n_kv_heads, row_tiles, splits, 16, head_dim]
  float* part_lse = nullptr;  // [n_launch_seqs, n_kv_heads, row_tiles, splits, 16] (log2)
};

// 2^x by the SFU alone (relative error ~2^-22; -inf -> 0), without exp2f's extra range
// handling: the softmax inner loop is issue-bound.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Shared-memory tiles are rows of D 16-bit values, addressed in 16-byte chunks; chunk c of
// row r is stored at c ^ (r % 8) so the 8 rows an ldmatrix reads hit 8 different bank groups.
template <int D>
__device__ __forceinline__ int swz(int row, int chunk) {
  return row * (D / 8) + (chunk ^ (row & 7));
}

// One-byte K/V in the kernels' template argument kFp8: FP8 (unit scale), or INT8 with one float
// scale per (slot, head) for K and for V (KvLayer's k_scales / v_scales).
constexpr int kKvNative = 0, kKvE4M3 = 1, kKvE5M2 = 2, kKvI8 = 3;

// One-byte decode (ByteTileRing, attention_bytes.cuh): kStages stages of K and V tiles (INT8:
// and their [K, V][kTileKeys] float scales; staged_ids: and of a tile's block-table ids).
constexpr size_t byte_ring_smem(int stages, int D, bool scales, bool staged_ids) {
  return static_cast<size_t>(stages) * (2 * kTileKeys * (D + (scales ? 4 : 0)) + (staged_ids ? 4 * (kTileKeys + 1) : 0));
}
// A one-byte decode kernel's shared memory: the ring, which the 4 warps' partial states (F32 O
// [kDecodeWarps][rows][D + 4], then m and l) reuse at the end; and the blocks an SM holds of
// it: what 228 KiB holds (1 KiB reserved per block), at most max_blocks (its register budget).
constexpr int fp8_o_stride(int D) { return D + 4; }  // padded: fewer bank conflicts
constexpr size_t byte_decode_smem(int stages, int D, bool scales, int rows, bool staged_ids) {
  const size_t tiles = byte_ring_smem(stages, D, scales, staged_ids);
  const size_t merge =
      (static_cast<size_t>(kDecodeWarps) * rows * fp8_o_stride(D) + 2 * kDecodeWarps * rows) * sizeof(float);
  return tiles > merge ? tiles : merge;
}
constexpr int byte_decode_blocks_per_sm(size_t smem, int max_blocks) {
  const int by_smem = static_cast<int>((228u << 10) / (smem + 1024));
  return by_smem < 1 ? 1 : (by_smem > max_blocks ? max_blocks : by_smem);
}
// FP8 decode (paged_attn_fp8_decode_kernel, 16 rows): at most 3 blocks an SM, so that a thread
// keeps 168 registers and nothing spills (4 blocks, 128 registers, spilled loop invariants and
// measured 4% slower at b256 x 1024 keys).
constexpr int kFp8DecodeMaxBlocksPerSm = 3;
constexpr size_t fp8_decode_smem(int stages, int D, bool scales = false) {
  return byte_decode_smem(stages, D, scales, kDecodeRows, false);
}
constexpr int fp8_decode_blocks_per_sm(int stages, int D, bool scales = false) {
  return byte_decode_blocks_per_sm(fp8_decode_smem(stages, D, scales), kFp8DecodeMaxBlocksPerSm);
}

// The swapped one-byte decode kernel (attention_fp8_swap.cu: keys as the MMA rows) takes
// launches of at most kSwapRows packed rows a (sequence, kv head); the same stages, its merge
// buffer [kDecodeWarps][kSwapRows][D + 4] floats and m, l. Its registers (no 16-row O) leave
// room for a fourth block per SM where the shared memory has it.
constexpr int kSwapRows = 8;
// The keys-as-M kernel's loader run (16-byte chunks a thread copies of a row): FP8 one, so that
// a warp's cp.async covers whole 128-byte rows (the kernel was bound by L2 requests, which
// 64-byte runs double: ncu, the same request count as the BF16 kernel for half the bytes);
// INT8 two (measured faster there). The 16-row kernel keeps two (one measured slower there:
// its registers are at their cap).
constexpr int fp8_swap_run(bool i8) { return i8 ? 2 : 1; }
constexpr size_t fp8_swap_smem(int stages, int D, bool scales = false) {
  return byte_decode_smem(stages, D, scales, kSwapRows, true);
}
constexpr int kFp8SwapMaxBlocksPerSm = 4;
// Its default stages (4 blocks per SM either way), measured on an H200 (session 18): FP8 3,
// INT8 2.
constexpr int kSwapFp8DecodeStages = 3;
constexpr int kSwapI8DecodeStages = 2;
constexpr int fp8_swap_blocks_per_sm(int stages, int D, bool scales = false) {
  return byte_decode_blocks_per_sm(fp8_swap_smem(stages, D, scales), kFp8SwapMaxBlocksPerSm);
}
// Whether a one-byte decode launch takes the swapped kernel: asked for (decode_keys_as_m) and
// at most kSwapRows packed rows a sequence.
inline bool fp8_decode_swapped(const PagedAttnArgs& a) {
  return a.decode_keys_as_m && a.n_kv_heads > 0 && a.max_new * (a.n_heads / a.n_kv_heads) <= kSwapRows &&
         (a.kv_type == DType::FP8_E4M3 || a.kv_type == DType::FP8_E5M2 || a.kv_type == DType::I8) &&
         (a.head_dim == 64 || a.head_dim == 128);
}

// ---- Pieces the kernels share ----

// The fused decode prologue (PagedAttnArgs::rope): RoPE of this block's q rows and of its kv
// head's new k rows, in place, and the cache store of those k and v rows (S: the cache
// element), with launch_rope_kv_store's arithmetic (same sincosf, factor and rotation
// expressions), so both paths store the same bytes. Then a barrier, before the block reads q
// or any K/V tile. Called only for one block per (sequence, kv head) (row0 is 0).
// Every load of a round is issued before its first store: the compiler may not move a load
// above a store to memory it cannot prove apart, and a warp issues in order, so a head at a
// time cost one L2 round trip per head (5 for Llama-3's group of 4 and its k head) plus the v
// row's, on the critical path of every batch-1 layer.
template <typename S, int D>
__device__ __forceinline__ void decode_rope_store(const PagedAttnArgs& a, int q0, int n_rows, int G, int kh) {
  constexpr int kHalf = D / 2;
  constexpr int kHeadsPerRound = 8;
  const DecodeRopeArgs& r = a.rope;
  const int n_new = n_rows / G;
  float* q = const_cast<float*>(a.q);
  const size_t kv_row = static_cast<size_t>(a.n_kv_heads) * D;
  S* k_cache = static_cast<S*>(const_cast<void*>(a.k));
  S* v_cache = static_cast<S*>(const_cast<void*>(a.v));
  auto v_index = [&](int it, int32_t& slot) {  // (token, dim) it of the v rows: cache slot, offset
    const int t = q0 + it / D, d = it % D;
    slot = r.slots[t];
    return static_cast<size_t>(kh) * D + d;
  };
  // This thread's first v element, loaded with the first round's q / k pairs.
  const int v_first = threadIdx.x;
  int32_t v_first_slot = -1;
  float v_first_val = 0.0f;
  size_t v_first_off = 0;
  if (v_first < n_new * D) {
    v_first_off = v_index(v_first, v_first_slot);
    v_first_val = r.v[(q0 + v_first / D) * kv_row + v_first_off];
  }
  // A thread per (token, rotated pair): one sincosf for the pair's G q heads and its k head.
  for (int it = threadIdx.x; it < n_new * kHalf; it += blockDim.x) {
    const int i = it % kHalf, t = q0 + it / kHalf;
    const float pos = static_cast<float>(r.positions[t]);
    const int32_t slot = r.slots[t];
    const int i0 = r.neox ? i : 2 * i;
    const int i1 = r.neox ? i + kHalf : 2 * i + 1;
    auto head_row = [&](int h) {  // h == G: the k head
      return h < G ? q + (static_cast<size_t>(t) * a.n_heads + kh * G + h) * D
                   : r.k + static_cast<size_t>(t) * kv_row + static_cast<size_t>(kh) * D;
    };
    for (int h0 = 0; h0 <= G; h0 += kHeadsPerRound) {
      float x0[kHeadsPerRound], x1[kHeadsPerRound];
#pragma unroll
      for (int j = 0; j < kHeadsPerRound; ++j) {
        if (h0 + j <= G) {
          const float* x = head_row(h0 + j);
          x0[j] = x[i0];
          x1[j] = x[i1];
        }
      }
      float sn, cs;
      sincosf(pos * r.inv_freq[i], &sn, &cs);
      cs = cs * r.factor;
      sn = sn * r.factor;
#pragma unroll
      for (int j = 0; j < kHeadsPerRound; ++j) {
        const int h = h0 + j;
        if (h > G) continue;
        const float r0 = x0[j] * cs - x1[j] * sn, r1 = x0[j] * sn + x1[j] * cs;
        float* x = head_row(h);
        x[i0] = r0;
        x[i1] = r1;
        if (h == G && slot >= 0) {
          S* c = k_cache + static_cast<size_t>(slot) * kv_row + static_cast<size_t>(kh) * D;
          c[i0] = from_float<S>(r0);
          c[i1] = from_float<S>(r1);
        }
      }
    }
  }
  if (v_first_slot >= 0) v_cache[static_cast<size_t>(v_first_slot) * kv_row + v_first_off] = from_float<S>(v_first_val);
  for (int it = v_first + blockDim.x; it < n_new * D; it += blockDim.x) {
    int32_t slot;
    const size_t off = v_index(it, slot);
    if (slot >= 0) v_cache[static_cast<size_t>(slot) * kv_row + off] = from_float<S>(r.v[(q0 + it / D) * kv_row + off]);
  }
  // The K/V tiles are read by cp.async (through L2) of other threads of the block.
  __threadfence();
  __syncthreads();
}
// INT8 -> F16: the integers of a word's bytes (exact) times scale2 (the row's scale as F16 in
// both halves), in F16: two roundings (the scale's and the product's) instead of the F32
// product's one, for a third of the instructions. (The wgmma producer widening in F32 held
// the INT8 prefill at 222 TFLOP/s against 367 for FP8.)
__device__ __forceinline__ uint2 i8x4_scaled_f16x4(uint32_t w, __half2 scale2) {
  uint32_t h[2] = {i8x2_to_f16x2<0x4140>(w), i8x2_to_f16x2<0x4342>(w)};
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const __half2 p = __hmul2(*reinterpret_cast<const __half2*>(&h[i]), scale2);
    h[i] = *reinterpret_cast<const uint32_t*>(&p);
  }
  return make_uint2(h[0], h[1]);
}

// What one block covers: sequence seq, packed (token, head) rows [row0, row0 + rows) of its
// n_rows, and the kTileKeys-key tiles from t_begin (n_tiles of them) over keys [kv_lo, kv_hi).
struct AttnSpan {
  int seq, kh, q0, n_rows, row0;  // kh: the K/V head
  int pos_base;  // position of the sequence's first new token
  int kv_lo, kv_hi, t_begin, n_tiles;
  size_t part;   // decode: this block's split partial
};

// Fills sp for this block; false when it has nothing to do (rows past the sequence's, or a
// decode split past every row's keys, whose empty partial it writes first). Uniform over the
// block, so callers return before any barrier.
template <bool kDecode, int kRows>
__device__ __forceinline__ bool attn_span(const Launch& L, AttnSpan& sp) {
  const PagedAttnArgs& a = L.a;
  const int zi = blockIdx.z;
  int rt, split, kh;
  if constexpr (kDecode) {
    kh = blockIdx.y;
    rt = blockIdx.x / L.splits;
    split = blockIdx.x % L.splits;
  } else {
    // Blocks start in the order of (x, y): the longest (latest) row tiles of every head first,
    // so the last to start are the shortest (with the heads one after another, a 4096-token
    // prompt of 86 row tiles a head lost 13% of the makespan to the tail, simulated).
    const int li = blockIdx.y * gridDim.x + blockIdx.x;
    kh = li % gridDim.y;
    rt = gridDim.x - 1 - li / gridDim.y;
    split = 0;
  }
  sp.kh = kh;
  sp.seq = a.seq_ids[zi];
  sp.q0 = a.query_start[sp.seq];
  const int n_new = a.query_start[sp.seq + 1] - sp.q0;
  const int seq_len = a.seq_lens[sp.seq];
  const int G = L.group;
  sp.n_rows = n_new * G;
  sp.row0 = rt * kRows;
  if (sp.row0 >= sp.n_rows) return false;
  sp.pos_base = seq_len - n_new;
  const int pos_min = sp.pos_base + sp.row0 / G;
  const int pos_max = sp.pos_base + (min(sp.row0 + kRows, sp.n_rows) - 1) / G;
  sp.kv_lo = a.window > 0 ? max(0, pos_min - a.window + 1) : 0;
  sp.kv_hi = pos_max + 1;  // exclusive; causal: no row sees past its own position
  sp.part = ((static_cast<size_t>(zi) * a.n_kv_heads + kh) * L.row_tiles + rt) * L.splits + split;
  if constexpr (kDecode) {
    sp.kv_lo = max(sp.kv_lo, split * L.split_len);
    sp.kv_hi = min(sp.kv_hi, (split + 1) * L.split_len);
    if (sp.kv_lo >= sp.kv_hi) {  // this split lies past every row's keys: an empty partial
      if (L.splits > 1 && threadIdx.x < kDecodeRows) L.part_lse[sp.part * kDecodeRows + threadIdx.x] = -INFINITY;
      return false;
    }
  }
  // Tiles start on a multiple of kTileKeys, so splits (multiples too) never share a tile.
  sp.t_begin = sp.kv_lo / kTileKeys * kTileKeys;
  sp.n_tiles = (sp.kv_hi - sp.t_begin + kTileKeys - 1) / kTileKeys;
  return true;
}

// Streams one kv head's K/V rows of a sequence into shared-memory tiles with cp.async. A row
// (kRowBytes) is shared by kTpr = kRowBytes / 16 / kRun threads: thread h copies the 16-byte
// chunks h, h + kTpr, .. of its row (kRun of them; one instruction moves 16 kTpr contiguous
// bytes of each row it covers), for kPasses keys of each tile. Wider runs mean fewer keys per
// thread (fewer block-table lookups and cache addresses per tile) but more cache lines per
// cp.async instruction.
// Cache slots are found without divisions in the loop: (tile start) / block_size is carried
// from tile to tile, and each thread's in-tile offsets are divided once. Block ids of a tile
// are loaded one iteration before its copy is issued (kept apart from the multiply that uses
// them), so the copy never waits on the table; or (stage_ids, then load_ids(staged)) copied
// into shared memory with an earlier tile's data, for kernels whose iteration is shorter than a
// global load's latency under full DRAM traffic (the load queues behind the tiles in flight).
template <int kRowBytes, int kThreads, int kRun>
struct KvTileLoader {
  static constexpr int kLCh = kRowBytes / 16;  // 16-byte chunks per row
  static constexpr int kTpr = kLCh / kRun;     // threads per row
  static constexpr int kKeysPerPass = kThreads / kTpr;
  static constexpr int kPasses = kTileKeys / kKeysPerPass;
  // A pass moves the key by a multiple of 8: shared-memory swizzles of (key & 7) are the same
  // for every pass, so destinations are one base plus constants.
  static_assert(kLCh % kRun == 0 && kTileKeys % kKeysPerPass == 0 && kKeysPerPass % 8 == 0);

  const uint8_t* k_src;  // this thread's first chunk of the head in cache slot 0
  const uint8_t* v_src;
  uint32_t slot_bytes;   // one cache slot, every head
  uint32_t block_bytes;  // one cache block
  const int32_t* bt;     // the sequence's block table
  int bs, kv_hi, t_begin, chunk, key;
  int kq[kPasses], kr[kPasses];  // in-tile key offset of each pass, divided by block size
  int step_q, step_r, next_tile, tq, tr;  // tq, tr: start of the tile load_ids reads next
  int blk[kPasses];              // block id of each pass's key, -1 past kv_hi
  uint32_t off[kPasses];         // its slot's byte offset in the block

  __device__ __forceinline__ KvTileLoader(const PagedAttnArgs& a, int seq, int kh, int t_begin_, int kv_hi_)
      : KvTileLoader(a, seq, kh, t_begin_, kv_hi_, threadIdx.x) {}
  // tid: this thread's index among the kThreads loading. (Unsigned: the signed division and
  // remainder cost the 128-key wgmma kernels' producers 72 bytes of spills.)
  __device__ __forceinline__ KvTileLoader(const PagedAttnArgs& a, int seq, int kh, int t_begin_, int kv_hi_,
                                          unsigned tid)
      : bs(a.block_size), kv_hi(kv_hi_), t_begin(t_begin_) {
    chunk = tid % kTpr;
    key = tid / kTpr;
    slot_bytes = static_cast<uint32_t>(a.n_kv_heads) * kRowBytes;
    block_bytes = slot_bytes * static_cast<uint32_t>(bs);
    const size_t head = static_cast<size_t>(kh) * kRowBytes + chunk * 16;
    k_src = static_cast<const uint8_t*>(a.k) + head;
    v_src = static_cast<const uint8_t*>(a.v) + head;
    bt = a.block_tables + static_cast<size_t>(seq) * a.max_blocks_per_seq;
#pragma unroll
    for (int ps = 0; ps < kPasses; ++ps) {
      kq[ps] = (ps * kKeysPerPass + key) / bs;
      kr[ps] = (ps * kKeysPerPass + key) % bs;
    }
    step_q = kTileKeys / bs;
    step_r = kTileKeys % bs;
    next_tile = 0;
    tq = t_begin / bs;
    tr = t_begin % bs;
  }
  // The next tile's ids from the block table, or (staged != nullptr) from what stage_ids copied
  // for that tile.
  __device__ __forceinline__ void load_ids(const int32_t* staged = nullptr) {
    const int t0 = t_begin + next_tile * kTileKeys;
#pragma unroll
    for (int ps = 0; ps < kPasses; ++ps) {
      int q = kq[ps], r = tr + kr[ps];  // q: from the tile's first block
      if (r >= bs) {
        r -= bs;
        ++q;
      }
      off[ps] = static_cast<uint32_t>(r) * slot_bytes;
      const bool valid = t0 + ps * kKeysPerPass + key < kv_hi;
      blk[ps] = !valid ? -1 : staged ? staged[q] : bt[tq + q];
    }
    ++next_tile;
    tq += step_q;
    tr += step_r;
    if (tr >= bs) {
      tr -= bs;
      ++tq;
    }
  }
  // Most block-table entries one tile's keys touch (block size 1, a tile not block-aligned).
  static constexpr int kIdsPerTile = kTileKeys + 1;
  // Copies the block-table entries of tile `tile` (from its first key's block, as long as they
  // hold keys below kv_hi) to dst[0 ..] with cp.async, by threads tid < their count, in the
  // caller's commit group; load_ids(dst) reads them once that group is waited for.
  __device__ __forceinline__ void stage_ids(int32_t* dst, int tile, unsigned tid) const {
    if (tid >= static_cast<unsigned>(kIdsPerTile)) return;
    const int k0 = t_begin + tile * kTileKeys;
    if (k0 >= kv_hi) return;
    const int b0 = k0 / bs;
    if (static_cast<int>(tid) <= (min(k0 + kTileKeys, kv_hi) - 1) / bs - b0) cp_async_4(dst + tid, bt + b0 + tid, true);
  }
  // Copies the tile whose ids load_ids read last: K's chunk c of key k0 + key (k0: the pass's
  // first key in the tile) to dst(k0, key, c, 0), V's to dst(.., 1). Keys past kv_hi become
  // zeros (masked, never NaN), read from nowhere.
  // kWhich: 2 both, 0 K alone, 1 V alone.
  template <int kWhich = 2, typename Dst>
  __device__ __forceinline__ void issue(Dst dst) const {
#pragma unroll
    for (int ps = 0; ps < kPasses; ++ps) {
      const bool valid = blk[ps] >= 0;
      const size_t o = static_cast<size_t>(static_cast<uint32_t>(max(blk[ps], 0))) * block_bytes + off[ps];
#pragma unroll
      for (int kv = kWhich == 1 ? 1 : 0; kv < (kWhich == 0 ? 1 : 2); ++kv)
#pragma unroll
        for (int j = 0; j < kRun; ++j)
          cp_async_16(dst(ps * kKeysPerPass, key, chunk + kTpr * j, kv), (kv ? v_src : k_src) + o + 16 * kTpr * j,
                      valid);
    }
  }
  // INT8 K/V: the per-(slot, head) scales of the same tile into k_dst[key] and v_dst[key], 0
  // past kv_hi; copied by the thread of chunk 0 of each key, in the caller's commit group, so
  // they are visible after the barrier that shows the tile.
  __device__ __forceinline__ void issue_scales(const float* k_scales, const float* v_scales, int n_kv_heads, int kh,
                                               float* k_dst, float* v_dst) const {
    if (chunk != 0) return;
#pragma unroll
    for (int ps = 0; ps < kPasses; ++ps) {
      const bool valid = blk[ps] >= 0;
      const size_t slot = valid ? static_cast<size_t>(blk[ps]) * bs + off[ps] / slot_bytes : 0;
      const size_t i = slot * n_kv_heads + kh;
      cp_async_4(k_dst + ps * kKeysPerPass + key, k_scales + i, valid);
      cp_async_4(v_dst + ps * kKeysPerPass + key, v_scales + i, valid);
    }
  }
};

// Scores -> log2 domain: scale (and soft-cap; without it scale and log2(e) are one multiply,
// folded into qk_scale by the caller).   s[kNtS][4] (C fragments)
template <int kNtS, bool kSoftcap>
__device__ __forceinline__ void scale_scores(float (&s)[kNtS][4], float qk_scale, float softcap, float inv_cap) {
#pragma unroll
  for (int nt = 0; nt < kNtS; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if constexpr (kSoftcap) s[nt][e] = softcap * tanhf(s[nt][e] * qk_scale * inv_cap) * kLog2e;
      else s[nt][e] *= qk_scale;
    }
}

// -inf for keys past a row's position or outside its window. Callers run it behind a
// warp-uniform branch (tiles that reach past the warp's first row or meet a window edge), as
// its own loop so the unrolled body is not duplicated: the kernels are instruction-fetch bound
// when their loop outgrows the instruction cache.   key0: the key of n-tile 0, column 0
template <int kNtS>
__device__ __forceinline__ void mask_scores(float (&s)[kNtS][4], int key0, int pos_a, int pos_b, int window, int lane) {
#pragma unroll
  for (int nt = 0; nt < kNtS; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = key0 + nt * 8 + 2 * (lane & 3) + (e & 1);
      const int pos = e < 2 ? pos_a : pos_b;
      if (key > pos || (window > 0 && key <= pos - window)) s[nt][e] = -INFINITY;
    }
}

// One tile's step of the online softmax for this lane's two rows (g and g + 8): running maxima
// m and per-lane sums l (log2 domain) move to this tile, scores s * scale (scale > 0: 1 when s
// is scaled already, else folded into the exponent's FMA) become probabilities, and c_a / c_b
// are the factors the old O rows must be scaled by (exactly 1 where a maximum did not move).
// Returns whether any of the two maxima moved.
template <int kNtS>
__device__ __forceinline__ bool softmax_tile(float (&s)[kNtS][4], float scale, float& m_a, float& m_b, float& l_a,
                                             float& l_b, float& c_a, float& c_b) {
  // Maxima and sums as trees, not chains: a chain of kNtS dependent instructions is latency
  // the few warps of a prefill block cannot hide.
  float ta[kNtS], tb[kNtS];
#pragma unroll
  for (int nt = 0; nt < kNtS; ++nt) {
    ta[nt] = fmaxf(s[nt][0], s[nt][1]);
    tb[nt] = fmaxf(s[nt][2], s[nt][3]);
  }
#pragma unroll
  for (int w = 1; w < kNtS; w *= 2)
#pragma unroll
    for (int i = 0; i + w < kNtS; i += 2 * w) {
      ta[i] = fmaxf(ta[i], ta[i + w]);
      tb[i] = fmaxf(tb[i], tb[i + w]);
    }
  float mx_a = ta[0], mx_b = tb[0];
  // A row lives in the 4 lanes of a quad.
  mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 1));
  mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 2));
  mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 1));
  mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 2));
  const float mn_a = fmaxf(m_a, mx_a * scale), mn_b = fmaxf(m_b, mx_b * scale);
  // A row with every key masked so far keeps max -inf; subtract 0 then so exp2 gives 0,
  // not NaN.
  const float base_a = mn_a == -INFINITY ? 0.0f : mn_a;
  const float base_b = mn_b == -INFINITY ? 0.0f : mn_b;
  const bool moved = !(mn_a == m_a && mn_b == m_b);
  c_a = fast_exp2(m_a - base_a);
  c_b = fast_exp2(m_b - base_b);
  l_a *= c_a;
  l_b *= c_b;
  m_a = mn_a;
  m_b = mn_b;
#pragma unroll
  for (int nt = 0; nt < kNtS; ++nt) {
    s[nt][0] = fast_exp2(fmaf(s[nt][0], scale, -base_a));
    s[nt][1] = fast_exp2(fmaf(s[nt][1], scale, -base_a));
    s[nt][2] = fast_exp2(fmaf(s[nt][2], scale, -base_b));
    s[nt][3] = fast_exp2(fmaf(s[nt][3], scale, -base_b));
    ta[nt] = s[nt][0] + s[nt][1];
    tb[nt] = s[nt][2] + s[nt][3];
  }
#pragma unroll
  for (int w = 1; w < kNtS; w *= 2)
#pragma unroll
    for (int i = 0; i + w < kNtS; i += 2 * w) {
      ta[i] += ta[i + w];
      tb[i] += tb[i + w];
    }
  l_a += ta[0];
  l_b += tb[0];
  return moved;
}

// O rows g (c_a) and g + 8 (c_b) scaled.   o[kNtO][4] (C fragments)
template <int kNtO>
__device__ __forceinline__ void rescale_rows(float (&o)[kNtO][4], float c_a, float c_b) {
#pragma unroll
  for (int i = 0; i < kNtO; ++i) {
    o[i][0] *= c_a;
    o[i][1] *= c_a;
    o[i][2] *= c_b;
    o[i][3] *= c_b;
  }
}

// softmax_tile with O rescaled at once. kLazy: skip the rescale when no row maximum of the
// warp moved (the factors are then exactly 1; in decode, after the first tiles, that is most
// tiles).
template <int kNtS, int kNtO, bool kLazy>
__device__ __forceinline__ void online_softmax(float (&s)[kNtS][4], float (&o)[kNtO][4], float& m_a, float& m_b,
                                               float& l_a, float& l_b) {
  float c_a, c_b;
  const bool moved = softmax_tile<kNtS>(s, 1.0f, m_a, m_b, l_a, l_b, c_a, c_b);
  if (!kLazy || __any_sync(0xffffffffu, moved)) rescale_rows<kNtO>(o, c_a, c_b);
}

// P of 16 keys (score n-tiles 2kk and 2kk + 1) as one A fragment of P V.
template <typename T, int kNtS>
__device__ __forceinline__ void p_fragment(uint32_t (&pa)[4], const float (&s)[kNtS][4], int kk) {
  pa[0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
  pa[1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
  pa[2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
  pa[3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}

// 16-byte chunk c (8 values, rounded to T) of packed row `row` of Q: token q0 + row / G, head
// kh * G + row % G; zeros past n_rows.
template <typename T, int D>
__device__ __forceinline__ uint4 q_chunk(const PagedAttnArgs& a, int q0, int kh, int G, int n_rows, int row, int c) {
  if (row >= n_rows) return make_uint4(0, 0, 0, 0);
  const int j = row / G, h = kh * G + row % G;
  const float4* src = reinterpret_cast<const float4*>(a.q + (static_cast<size_t>(q0 + j) * a.n_heads + h) * D + c * 8);
  const float4 x0 = src[0], x1 = src[1];
  return make_uint4(pack2<T>(x0.x, x0.y), pack2<T>(x0.z, x0.w), pack2<T>(x1.x, x1.y), pack2<T>(x1.z, x1.w));
}

// The end of a prefill warp: completes this lane's row sums (rows r_a, r_b = r_a + 8) over
// its quad and writes O / l of the rows below n_rows.   o[D / 8][4] (C fragments)
template <int D>
__device__ __forceinline__ void store_prefill_rows(const PagedAttnArgs& a, int q0, int kh, int G, int n_rows, int r_a,
                                                   int lane, const float (&o)[D / 8][4], float l_a, float l_b) {
  l_a += __shfl_xor_sync(0xffffffffu, l_a, 1);
  l_a += __shfl_xor_sync(0xffffffffu, l_a, 2);
  l_b += __shfl_xor_sync(0xffffffffu, l_b, 1);
  l_b += __shfl_xor_sync(0xffffffffu, l_b, 2);
  const float inv_a = l_a > 0.0f ? 1.0f / l_a : 0.0f;
  const float inv_b = l_b > 0.0f ? 1.0f / l_b : 0.0f;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = r_a + 8 * half;
    if (r >= n_rows) continue;
    const float inv = half ? inv_b : inv_a;
    float* dst = a.out + (static_cast<size_t>(q0 + r / G) * a.n_heads + kh * G + r % G) * D + 2 * (lane & 3);
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt)
      *reinterpret_cast<float2*>(dst + nt * 8) = make_float2(o[nt][2 * half] * inv, o[nt][2 * half + 1] * inv);
  }
}

// The end of a key-range split of decode rows on the wgmma kernels (rows < kDecodeRows): this
// lane's rows r_a, r_a + 8 as the split's partial, O / l and log2-sum-exp m + log2(l), in the
// layout finish_decode_rows writes for attn_merge_kernel.   o[D / 8][4] (C fragments)
template <int D>
__device__ __forceinline__ void store_split_rows(const Launch& L, const AttnSpan& sp, int r_a, int lane,
                                                 const float (&o)[D / 8][4], float m_a, float m_b, float l_a,
                                                 float l_b) {
  l_a += __shfl_xor_sync(0xffffffffu, l_a, 1);
  l_a += __shfl_xor_sync(0xffffffffu, l_a, 2);
  l_b += __shfl_xor_sync(0xffffffffu, l_b, 1);
  l_b += __shfl_xor_sync(0xffffffffu, l_b, 2);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = r_a + 8 * half;
    if (r >= sp.n_rows) continue;
    const float l = half ? l_b : l_a, m = half ? m_b : m_a;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    float* dst = L.part_o + (sp.part * kDecodeRows + r) * D + 2 * (lane & 3);
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt)
      *reinterpret_cast<float2*>(dst + nt * 8) = make_float2(o[nt][2 * half] * inv, o[nt][2 * half + 1] * inv);
    if ((lane & 3) == 0) L.part_lse[sp.part * kDecodeRows + r] = l > 0.0f ? m + log2f(l) : -INFINITY;
  }
}

// Completes this lane's row sums over its quad and stores the warp's softmax state for the
// block's merge.   s_m, s_l [kDecodeWarps][16]
__device__ __forceinline__ void store_warp_state(float* s_m, float* s_l, int warp, int lane, float m_a, float m_b,
                                                 float l_a, float l_b) {
  l_a += __shfl_xor_sync(0xffffffffu, l_a, 1);
  l_a += __shfl_xor_sync(0xffffffffu, l_a, 2);
  l_b += __shfl_xor_sync(0xffffffffu, l_b, 1);
  l_b += __shfl_xor_sync(0xffffffffu, l_b, 2);
  if ((lane & 3) == 0) {
    const int ra = lane / 4;
    s_m[warp * kDecodeRows + ra] = m_a;
    s_m[warp * kDecodeRows + ra + 8] = m_b;
    s_l[warp * kDecodeRows + ra] = l_a;
    s_l[warp * kDecodeRows + ra + 8] = l_b;
  }
}

// The end of a decode block: merges its 4 warps' partial softmax states (each saw a quarter of
// every tile) into out (one split) or this split's partial.   s_m / s_l [kDecodeWarps][16];
// o_at(w, r, d): warp w's O at row r, head dim d (shared memory).
// kRows: the block's rows (16, or kSwapRows for the swapped one-byte kernel); partials keep
// the kDecodeRows stride whatever it is.
// One thread a row first turns s_m into the warps' weights 2^(m_w - M) and keeps the row's sum
// and maximum in s_l[0] / s_l[1], then the block walks only the rows it holds (a batch-1 GQA
// block: 4 of 16): per element 4 loads and FMAs, where every element used to redo the row's
// maximum and 4 exp2f and every padding row cost an iteration (H200, batch-1 int4: this end
// took 3,500 cycles of the attention's ~20,000). Per element the same operations in the same
// order as before.
template <int D, int kRows = kDecodeRows, typename OAt>
__device__ __forceinline__ void finish_decode_rows(const Launch& L, const AttnSpan& sp, float* s_m, float* s_l,
                                                   OAt o_at) {
  static_assert(kDecodeWarps >= 2 && kRows <= kDecodeWarps * 32);
  const PagedAttnArgs& a = L.a;
  const int G = L.group, kh = blockIdx.y;
  const int rows = min(kRows, sp.n_rows - sp.row0);  // (the rest are padding)
  if (static_cast<int>(threadIdx.x) < rows) {
    const int r = threadIdx.x;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < kDecodeWarps; ++w) M = fmaxf(M, s_m[w * kRows + r]);
    float Lsum = 0.0f;
#pragma unroll
    for (int w = 0; w < kDecodeWarps; ++w) {
      const float f = M != -INFINITY ? exp2f(s_m[w * kRows + r] - M) : 0.0f;
      Lsum += s_l[w * kRows + r] * f;
      s_m[w * kRows + r] = f;
    }
    s_l[r] = M != -INFINITY ? Lsum : 0.0f;
    s_l[kRows + r] = M;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < rows * D; i += kDecodeWarps * 32) {
    const int r = i / D, d = i % D;
    const int row = sp.row0 + r;
    const float Lsum = s_l[r];
    float acc = 0.0f;
    if (Lsum > 0.0f) {
#pragma unroll
      for (int w = 0; w < kDecodeWarps; ++w) acc += o_at(w, r, d) * s_m[w * kRows + r];
    }
    const float val = Lsum > 0.0f ? acc / Lsum : 0.0f;
    if (L.splits == 1) {
      a.out[(static_cast<size_t>(sp.q0 + row / G) * a.n_heads + kh * G + row % G) * D + d] = val;
    } else {
      L.part_o[(sp.part * kDecodeRows + r) * D + d] = val;
      if (d == 0) L.part_lse[sp.part * kDecodeRows + r] = Lsum > 0.0f ? s_l[kRows + r] + log2f(Lsum) : -INFINITY;
    }
  }
}

// Launches the soft-capped or the plain instantiation of a kernel, as L.a asks, with smem bytes
// of dynamic shared memory, each kernel's limit raised once per GPU (smem_limit.h; the size of
// its first launch there, which is never inside a graph capture).
template <void (*kPlain)(Launch), void (*kCapped)(Launch)>
cudaError_t launch_softcap_pair(const Launch& L, size_t smem, dim3 grid, dim3 block, cudaStream_t stream) {
  const void* kernel = reinterpret_cast<const void*>(L.a.softcap > 0.0f ? kCapped : kPlain);
  const cudaError_t attr = raise_smem_limit(kernel, static_cast<int>(smem));
  if (attr != cudaSuccess) return attr;
  return launch_kernel(L.a.softcap > 0.0f ? kCapped : kPlain, grid, block, smem, stream, L.a.pdl, L);
}

// The one-byte decode kernel's launch (attention_fp8.cu): D from L.a.head_dim (64 / 128), the
// cache type from L.a.kv_type (FP8_E4M3 / FP8_E5M2 / I8), stages 2, 3, 4 or 6;
// cudaErrorInvalidValue for anything else. Launches of fp8_decode_swapped arguments go to the
// swapped kernel.
cudaError_t launch_fp8_decode(const Launch& L, int stages, dim3 grid, cudaStream_t stream);
// The swapped kernel's launch (attention_fp8_swap.cu), the same arguments and stage counts.
cudaError_t launch_fp8_swap_decode(const Launch& L, int stages, dim3 grid, cudaStream_t stream);

// The wgmma prefill kernels (attention_wgmma.cu, sm_90a builds only): warpgroups of 64 packed
// rows, keys 64 or 128 per tile; mode 0 block-synced (2 warpgroups), 1 warp-specialized (a
// producer warpgroup and 2 consumers), 2 the same with 3 consumers (64-key tiles only), 3 / 4
// as 1 / 2 with the consumers overlapping softmax and P V (4: 64-key tiles only). BF16 / F16
// K/V at head_dim 64 / 128 take every mode (256: modes 0 and 3, 64 keys only); FP8 K/V (widened
// by the producer) modes 1, 3 and 4 (128-key tiles: 1 and 3); INT8 modes 1 and 4 with 64-key
// tiles; cudaErrorInvalidValue for anything else.
// The default: mode 4 (measured on an H200, causal 4096 x 32 heads of 128: 506 TFLOP/s against
// 431 for mode 1 with 128-key tiles, same call; FP8 K/V 451 vs 375, INT8 351 vs 257).
constexpr int kDefaultWgmmaKeys = 64;
constexpr int kDefaultWgmmaMode = 4;
// head_dim 256: 0 (block-synced) or 3 (two consumers overlapping, K and V on their own
// barriers, 2 stages); the others need more shared memory than an SM has. Mode 3 measured on
// an H200 (session 15, causal 4096 x 8 heads / 4 KV heads): 473 TFLOP/s against 342, same call.
constexpr int kDefaultWgmmaModeD256 = 3;
constexpr int wgmma_block_rows(int mode) { return mode == 2 || mode == 4 ? 192 : 128; }
cudaError_t launch_prefill_wgmma(const Launch& L, int keys, int mode, dim3 grid, cudaStream_t stream);

}  // namespace ember::cuda::attn
