// Prefill attention on Hopper's warpgroup MMAs (wgmma, sm_90a), FlashAttention-3-style
// without the producer warps: each warpgroup of a block owns 64 packed (token, head) rows;
// S = Q K^T reads Q and a key tile from shared memory (both K-major), the online softmax runs
// on S's accumulator registers, and O += P V takes P straight from those registers (the F32
// accumulator layout of one MMA is the 16-bit A-fragment layout of the next) and V from the
// same tile read N-major. K/V tiles stream in through a cp.async ring written in the 128-byte
// swizzle the descriptors name (wgmma.cuh). Why wgmma: the mma.sync kernel (attention.cu) is
// issue-bound at ~250 TFLOP/s; one wgmma does the work of 32 mma.sync and reads its operands
// without ldmatrix.
#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/wgmma.cuh"

#include <cmath>

namespace ember::cuda::attn {

namespace {

// Shared memory: Q [kWg * 64 rows][D], then kStages x (K, V) [kKeys][D], all 16-bit and
// swizzled; +1 KiB to align the base to the swizzle period.
constexpr size_t wgmma_smem_bytes(int wgs, int keys, int stages, int D) {
  return static_cast<size_t>(wgs * 64 + 2 * stages * keys) * D * 2 + wg::kAtomBytes;
}

// kWg warpgroups of 64 rows; kKeys keys per tile (64 or 128: S is 64 x kKeys per warpgroup);
// kStages tiles in the cp.async ring. kPipe: FlashAttention-3's in-warpgroup pipelining: P V
// of tile t - 1 is issued behind Q K^T of tile t and runs on the tensor cores while the
// softmax of tile t runs on the other units; a tile's stage is then busy one iteration longer,
// so the ring keeps one tile in flight with 3 stages (2 without).
template <typename T, int D, int kWg, int kKeys, int kStages, bool kPipe, bool kSoftcap>
__global__ void __launch_bounds__(kWg * 128, 1) paged_attn_wgmma_kernel(const Launch L) {
#if defined(EMBER_WGMMA_DEVICE)
  constexpr int kThreads = kWg * 128;
  constexpr int kRows = kWg * 64;
  constexpr int kCh = D / 8;          // 16-byte chunks per row
  constexpr int kNtS = kKeys / 8;     // score n-tiles
  constexpr int kNtO = D / 8;         // output n-tiles
  constexpr uint32_t kTileBytes = kKeys * D * 2;  // one K or V tile
  constexpr int kSub = kKeys / kTileKeys;         // loader tiles (64 keys) per key tile
  constexpr int kAhead = kPipe ? kStages - 2 : kStages - 1;  // tiles in flight behind the current one
  static_assert(D % 64 == 0 && kKeys % kTileKeys == 0 && kAhead >= 1);

  const PagedAttnArgs& a = L.a;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw_addr = smem_addr(smem_raw);
  uint8_t* smem = smem_raw + ((wg::kAtomBytes - (raw_addr & (wg::kAtomBytes - 1))) & (wg::kAtomBytes - 1));
  uint8_t* s_q = smem;                       // [D / 64][kRows][64]
  uint8_t* s_kv = smem + kRows * D * 2;      // [kStages][K, V][D / 64][kKeys][64]
  const uint32_t q_addr = smem_addr(s_q), kv_addr = smem_addr(s_kv);

  pdl_wait();
  pdl_launch_dependents();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wgi = warp / 4, wwarp = warp % 4;  // warpgroup, warp within it
  const int kh = blockIdx.y;
  AttnSpan sp;
  if (!attn_span<false, kRows>(L, sp)) return;
  const int G = L.group;
  const int q0 = sp.q0, n_rows = sp.n_rows, row0 = sp.row0, pos_base = sp.pos_base;
  const int t_begin = sp.t_begin;
  const int n_tiles = (sp.kv_hi - t_begin + kKeys - 1) / kKeys;

  // Two 16-byte chunks per thread and row of a 64-key loader tile (kRun 2).
  KvTileLoader<D * 2, kThreads, 2> ld(a, sp.seq, kh, t_begin, sp.kv_hi);
  auto issue = [&](int stage) {
#pragma unroll
    for (int sub = 0; sub < kSub; ++sub) {
      ld.load_ids();
      ld.issue([&](int k0, int key, int c, int kv) {
        const int r = sub * kTileKeys + k0 + key;
        return s_kv + (stage * 2 + kv) * kTileBytes + wg::swizzled_offset(kKeys, r, c);
      });
    }
  };
#pragma unroll
  for (int st = 0; st < kAhead; ++st) {
    if (st < n_tiles) issue(st);
    cp_async_commit();
  }
  // Q: F32 rows of the packed (token, head) pairs -> T, swizzled, while K/V tiles load.
  for (int i = threadIdx.x; i < kRows * kCh; i += kThreads) {
    const int r = i / kCh, c = i % kCh;
    *reinterpret_cast<uint4*>(s_q + wg::swizzled_offset(kRows, r, c)) = q_chunk<T, D>(a, q0, kh, G, n_rows, row0 + r, c);
  }

  float o[kNtO][4];
#pragma unroll
  for (int i = 0; i < kNtO; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;
  // This lane's rows (g and g + 8 of its warp's 16) and positions; the warpgroup's range.
  const int wrow0 = wgi * 64 + wwarp * 16;
  const int r_a = row0 + wrow0 + lane / 4, r_b = r_a + 8;
  const int pos_a = pos_base + r_a / G, pos_b = pos_base + r_b / G;
  const int warp_pos_min = pos_base + (row0 + wrow0) / G;
  const int wg_pos_min = pos_base + (row0 + wgi * 64) / G;
  const int wg_pos_max = pos_base + (min(row0 + wgi * 64 + 63, n_rows - 1)) / G;
  const bool wg_live = row0 + wgi * 64 < n_rows;
  const float qk_scale = kSoftcap ? a.scale : a.scale * kLog2e;
  const float inv_cap = kSoftcap ? 1.0f / a.softcap : 0.0f;
  // Q rows of this warpgroup: the A operand of every S MMA.
  const uint32_t qa_addr = q_addr + wgi * 64 * wg::kSwizzleBytes;

  // kPipe: P of the previous live tile (A fragments) and its V, not yet multiplied.
  uint32_t pa[kKeys / 16][4];
  uint32_t pending_v = 0;  // shared address of that V tile; 0: none
  auto issue_pv = [&](uint32_t v_addr) {
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      const uint64_t db = wg::desc(v_addr + kk * 16 * wg::kSwizzleBytes, kKeys * wg::kSwizzleBytes, wg::kAtomBytes);
      wg::mma_rs_nmajor<T, D>(o, pa[kk], db);
    }
    wg::commit();
  };

  int stage = 0, issue_stage = kAhead;
  for (int t = 0; t < n_tiles; ++t) {
    cp_async_wait<kAhead - 1>();
    wg::fence_proxy_async();  // this thread's cp.async (and, at t = 0, Q) bytes -> wgmma
    // Tile t visible; every warpgroup done with tile t - 1 (kPipe: with the P V of tile t - 2).
    __syncthreads();
    if (t + kAhead < n_tiles) issue(issue_stage);
    cp_async_commit();
    issue_stage = issue_stage + 1 == kStages ? 0 : issue_stage + 1;
    const uint32_t k_addr = kv_addr + stage * 2 * kTileBytes, v_addr = k_addr + kTileBytes;
    stage = stage + 1 == kStages ? 0 : stage + 1;
    const int key0 = t_begin + t * kKeys;
    // A tile past every row of the warpgroup (causal) or before every row's window: nothing
    // to add; the warpgroup skips its MMAs (uniform over the warpgroup). Live tiles are
    // contiguous, so a pending P V is finished here before its stage is reloaded.
    if (!wg_live || key0 > wg_pos_max || (a.window > 0 && key0 + kKeys - 1 <= wg_pos_min - a.window)) {
      if (kPipe && pending_v) {
        wg::fence();
        issue_pv(pending_v);
        wg::wait<0>();
        wg::fence_operands(o);
        pending_v = 0;
      }
      continue;
    }

    // S = Q K^T   [64 x kKeys] per warpgroup
    float s[kNtS][4];
    wg::fence();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      const uint32_t col = (ks % 4) * 32;  // k offset inside the 128-byte row
      const uint64_t da = wg::desc(qa_addr + (ks / 4) * kRows * wg::kSwizzleBytes + col, 16, wg::kAtomBytes);
      const uint64_t db = wg::desc(k_addr + (ks / 4) * kKeys * wg::kSwizzleBytes + col, 16, wg::kAtomBytes);
      wg::mma_ss<T, kKeys>(s, da, db, ks > 0);
    }
    wg::commit();
    const bool pv_in_flight = kPipe && pending_v;
    if (pv_in_flight) {
      issue_pv(pending_v);  // O += P V of the previous tile, behind S
      wg::wait<1>();        // S done; P V may still run
    } else {
      wg::wait<0>();
    }
    wg::fence_operands(s);

    scale_scores<kNtS, kSoftcap>(s, qk_scale, a.softcap, inv_cap);
    if (key0 + kKeys - 1 > warp_pos_min || a.window > 0) mask_scores<kNtS>(s, key0, pos_a, pos_b, a.window, lane);
    float c_a, c_b;
    softmax_tile<kNtS>(s, m_a, m_b, l_a, l_b, c_a, c_b);
    if (pv_in_flight) {
      // The MMAs read their A registers until they complete: P of the previous tile stays
      // where it is until then.
      wg::wait<0>();
      wg::fence_operands(o);
      wg::fence_operands(pa);
    }
    rescale_rows<kNtO>(o, c_a, c_b);
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) p_fragment<T, kNtS>(pa[kk], s, kk);
    if constexpr (kPipe) {
      pending_v = v_addr;
    } else {
      // O += P V   [64 x D]: P of 16 keys per MMA, V's rows kk * 16 .. + 15 read N-major.
      wg::fence();
      issue_pv(v_addr);
      wg::wait<0>();
      wg::fence_operands(o);
    }
  }
  if (kPipe && pending_v) {
    wg::fence();
    issue_pv(pending_v);
    wg::wait<0>();
    wg::fence_operands(o);
  }
  store_prefill_rows<D>(a, q0, kh, G, n_rows, r_a, lane, o, l_a, l_b);
#else
  __trap();  // launched only where the sm_90a pass exists (wgmma_prefill_available)
#endif
}

template <typename T, int D, int kWg, int kKeys, int kStages, bool kPipe>
cudaError_t launch_wgmma(const Launch& L, dim3 grid, cudaStream_t stream) {
  auto plain = paged_attn_wgmma_kernel<T, D, kWg, kKeys, kStages, kPipe, false>;
  auto capped = paged_attn_wgmma_kernel<T, D, kWg, kKeys, kStages, kPipe, true>;
  const size_t smem = wgmma_smem_bytes(kWg, kKeys, kStages, D);
  static const cudaError_t attr[2] = {
      cudaFuncSetAttribute(plain, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
      cudaFuncSetAttribute(capped, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem))};
  if (attr[0] != cudaSuccess) return attr[0];
  if (attr[1] != cudaSuccess) return attr[1];
  return launch_kernel(L.a.softcap > 0.0f ? capped : plain, grid, dim3(kWg * 128), smem, stream, L.a.pdl, L);
}

// Configurations: keys per tile 64 or 128, pipelined (3 stages; 4 at 64 keys) or not (2; 3).
template <typename T, int D>
cudaError_t launch_wgmma_cfg(const Launch& L, int keys, bool pipe, dim3 grid, cudaStream_t stream) {
  if (keys == 64) return pipe ? launch_wgmma<T, D, kWgmmaWarpgroups, 64, 4, true>(L, grid, stream)
                              : launch_wgmma<T, D, kWgmmaWarpgroups, 64, 3, false>(L, grid, stream);
  if (keys == 128) return pipe ? launch_wgmma<T, D, kWgmmaWarpgroups, 128, 3, true>(L, grid, stream)
                               : launch_wgmma<T, D, kWgmmaWarpgroups, 128, 2, false>(L, grid, stream);
  return cudaErrorInvalidValue;
}

template <int D>
cudaError_t launch_wgmma_dim(const Launch& L, int keys, bool pipe, dim3 grid, cudaStream_t stream) {
  switch (L.a.kv_type) {
    case DType::BF16: return launch_wgmma_cfg<__nv_bfloat16, D>(L, keys, pipe, grid, stream);
    case DType::F16: return launch_wgmma_cfg<__half, D>(L, keys, pipe, grid, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t launch_prefill_wgmma(const Launch& L, int keys, bool pipe, dim3 grid, cudaStream_t stream) {
  switch (L.a.head_dim) {
    case 64: return launch_wgmma_dim<64>(L, keys, pipe, grid, stream);
    case 128: return launch_wgmma_dim<128>(L, keys, pipe, grid, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace ember::cuda::attn
