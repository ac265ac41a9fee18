// FP8 GEMV on wgmma (qgemv_wg.cuh). A block is a warpgroup that multiplies (warps 0-3) and a
// warp that copies (warp 4). Its work is the sequence of items (tile, KPI k blocks of 128 bytes)
// of its 64-row tiles (tile = blockIdx.x, + gridDim.x, ...: a persistent grid), or with a cluster
// of C blocks, one tile whose k blocks the ranks split. The copying warp's lane 0 keeps `stages`
// items in flight in a ring of shared-memory slots: one TMA copy a matrix an item (gate/up + GLU:
// two), completing on the slot's `full` mbarrier; the first ones before griddepcontrol.wait
// (weights never depend on the previous kernel), the rest as the consumers release slots
// (`empty`, one arrival a consumer warp). After the wait every thread stages x: the folded norm's
// inverse (rms_inverse_rows, the norm kernel's order), each row's largest |value|, then the e4m3
// bytes into the B image. Per item the consumers wait for its slot, issue KPI x 4 m64n8k32
// wgmmas a matrix (k step q into accumulator set q: independent chains), leave W = 2 groups in
// flight and release the slot of the item W back. A tile's sets are added in order; with a
// cluster, ranks 1.. write their sums into rank 0's shared memory (distributed shared memory, a
// remote mbarrier arrival) and rank 0 adds them in rank order and stores (deterministic).
//
// Shared memory (dynamic, from a 1024-byte aligned base):
//   ring: stages slots of S matrices x KPI boxes; box = 64 rows x 128 bytes as the TMA writes it
//         with the 128-byte swizzle (row r at 128 r, its 16-byte chunk c at chunk c ^ (r % 8));
//   x:    k_blocks (rounded up to KPI) atoms of 8 rows x 128 bytes, the same swizzle: row j
//         (< n) holds x row j's e4m3 bytes; rows n..7 and the bytes past k are zero;
//   red:  rank 0 of a cluster: the other ranks' sums, [C - 1][S x 4][128] floats.
// Accumulators: m64n8 F32 fragments, warp w rows 16w + g and 16w + g + 8, batch columns 2t and
// 2t + 1 (g = lane / 4, t = lane % 4).
#include "backend/cuda/qgemv_wg.cuh"

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/fp8_rows.cuh"
#include "backend/cuda/mma_util.cuh"
#include "backend/cuda/norm_stage.cuh"
#include "backend/cuda/qgemm_common.cuh"
#include "backend/cuda/smem_limit.h"
#include "backend/cuda/tensor_map.h"
#include "backend/cuda/wgmma.cuh"

#include <cooperative_groups.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <mutex>
#include <vector>

namespace ember::cuda {

namespace {

constexpr int kConsumers = 128;              // one warpgroup multiplies
constexpr int kThreads = kConsumers + 32;    // and a warp copies
constexpr int kRows = 64;                    // a tile: the wgmma's M
constexpr int kKBlock = 128;                 // k bytes of a box and of a swizzle row
constexpr int kBoxBytes = kRows * kKBlock;   // 8 KiB
constexpr int kXAtomBytes = 8 * kKBlock;     // x rows (the wgmma's N = 8) of one k block
constexpr int kMaxStages = 32;
constexpr int kWgmmaGroups = 2;                // wgmma groups a consumer leaves in flight (W)
constexpr int kMinStages = kWgmmaGroups + 2;   // ring slots the kernel needs
constexpr int kMaxCluster = 4;
// float4s of x a thread holds while staging it: k <= 4096, or any k the kernel takes.
constexpr int kHoldSmall = (4096 / 4 + kThreads - 1) / kThreads;
constexpr int kHoldLarge = static_cast<int>((kQGemvWgMaxK / 4 + kThreads - 1) / kThreads);

struct WgArgs {  // (64-byte aligned: CUtensorMap is)
  CUtensorMap map[kQGemvMaxSegs];  // GLU: [0] gate, [1] up
  const float* scales[kQGemvMaxSegs];
  const float* bias[kQGemvMaxSegs];
  float* out[kQGemvMaxSegs];
  int64_t m[kQGemvMaxSegs];
  int tile_end[kQGemvMaxSegs];  // cumulative 64-row tiles of segments 0..s
  bool accumulate[kQGemvMaxSegs];
  int n_segs = 0, n_tiles = 0, n = 0, k_blocks = 0, stages = 0;
  int cluster = 1, kb_per = 0;  // blocks of a cluster split a tile's k blocks, kb_per each
  int64_t k = 0;
  const float* x = nullptr;
  XNorm norm;
  float* glu_out = nullptr;
  float* gate_out = nullptr;
  float* up_out = nullptr;
  bool gelu = false;
};

#if defined(EMBER_WGMMA_DEVICE)
// D (+)= A * B: A 64 x 32 e4m3 and B 32 x 8 e4m3, both K-major in shared memory.
__device__ __forceinline__ void mma_e4m3_n8(float (&d)[4], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, %4, %5, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// The box at (c0 bytes of k, c1 rows) of the tensor map into shared memory at dst.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}

// The box at (c0 bytes, c1 rows, c2 k blocks) of a 3-D tensor map into shared memory at dst.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}

__device__ __forceinline__ int segment_of(const WgArgs& A, int tile) {
  int s = 0;
  while (s + 1 < A.n_segs && tile >= A.tile_end[s]) ++s;
  return s;
}
#endif

// KPI: k blocks an item (one TMA copy a matrix: 3-D boxes of KPI k blocks when KPI > 1). A copy
// takes ~0.5 us whatever its size (H200: 8 KiB boxes streamed 2.2 TB/s, 16 KiB 4.2 TB/s), so
// the copies must be large.
template <bool kGlu, bool kNorm, int kHold, int KPI>
__global__ void __launch_bounds__(kThreads, 1) qgemv_fp8_wg_kernel(const __grid_constant__ WgArgs A) {
#if defined(EMBER_WGMMA_DEVICE)
  constexpr int S = kGlu ? 2 : 1;
  constexpr int kMatBytes = KPI * kBoxBytes;  // a matrix's share of a slot
  constexpr int kSlotBytes = S * kMatBytes;
  constexpr int kSteps = KPI * kKBlock / 32;  // k32 wgmmas an item and matrix (each into its own set)
  constexpr int W = kWgmmaGroups;
  extern __shared__ uint8_t smem_raw[];
  __shared__ uint64_t full[kMaxStages], empty[kMaxStages], red_full;
  __shared__ float s_part[kXNormMaxRows * 32], s_inv[kXNormMaxRows], s_tmp[32], s_xs[kQGemvWgMaxRows];
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t ring = (raw + 1023u) & ~1023u;
  const int stages = A.stages, KB = A.k_blocks;
  const uint32_t xb = ring + static_cast<uint32_t>(stages * kSlotBytes);
  uint8_t* xb_ptr = smem_raw + (xb - raw);
  const int KB_img = (KB + KPI - 1) / KPI * KPI;  // k blocks of the x image (zeros past KB)
  float* red = reinterpret_cast<float*>(xb_ptr + KB_img * kXAtomBytes);  // [C - 1][S * 4][kConsumers], rank 0's
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  // Cluster (A.cluster blocks, consecutive, one tile each when more than one): rank r takes k
  // blocks [kb0, kb0 + KBr) of the cluster's tiles cl, cl + n_cl, ..., IT items a tile (kb_per is
  // a multiple of KPI, so only the last rank's last item reaches past its blocks: zeros).
  const int C = A.cluster, b = static_cast<int>(blockIdx.x), rank = b % C;
  const int cl = b / C, n_cl = static_cast<int>(gridDim.x) / C;
  const int kb0 = rank * A.kb_per, KBr = min(KB, kb0 + A.kb_per) - kb0;
  const int my_tiles = A.n_tiles > cl ? (A.n_tiles - cl + n_cl - 1) / n_cl : 0;
  const int IT = (KBr + KPI - 1) / KPI;
  const int items = my_tiles * IT;

  auto issue = [&](int i) {  // the producer: item i into its slot
    const int s = i % stages, tile = cl + (i / IT) * n_cl, kb = kb0 + (i % IT) * KPI;
    const int seg = kGlu ? 0 : segment_of(A, tile);
    const int row0 = (tile - (seg > 0 ? A.tile_end[seg - 1] : 0)) * kRows;
    const uint32_t bar = smem_addr(&full[s]), dst = ring + static_cast<uint32_t>(s * kSlotBytes);
    wg::mbar_expect_tx(bar, kSlotBytes);
    if constexpr (KPI > 1) {
      tma_load_3d(dst, &A.map[seg], 0, row0, kb, bar);
      if constexpr (kGlu) tma_load_3d(dst + kMatBytes, &A.map[1], 0, row0, kb, bar);
    } else {
      tma_load_2d(dst, &A.map[seg], kb * kKBlock, row0, bar);
      if constexpr (kGlu) tma_load_2d(dst + kMatBytes, &A.map[1], kb * kKBlock, row0, bar);
    }
  };
  if (tid == kConsumers) {
    for (int s = 0; s < stages; ++s) {
      wg::mbar_init(smem_addr(&full[s]), 1);
      wg::mbar_init(smem_addr(&empty[s]), kConsumers / 32);
    }
    if (C > 1 && rank == 0) wg::mbar_init(smem_addr(&red_full), static_cast<uint32_t>((C - 1) * kConsumers));
    wg::fence_mbar_init();
    for (int i = 0; i < min(stages, items); ++i) issue(i);
  }
  for (int i = tid; i < KB_img * (kXAtomBytes / 16); i += kThreads)
    reinterpret_cast<uint4*>(xb_ptr)[i] = make_uint4(0u, 0u, 0u, 0u);
  if (C > 1) {
    cooperative_groups::this_cluster().sync();  // (rank 0's red_full initialized before any remote arrival)
  } else {
    __syncthreads();  // the barriers initialized, x's image zeroed
  }
  pdl_wait();
  pdl_launch_dependents();

  // x: row j's float4 c = tid + kThreads * h (h < kHold), normalized when kNorm, to e4m3.
  if constexpr (kNorm) rms_inverse_rows<kThreads>(A.x, A.n, A.k, A.norm.eps, s_part, s_inv);
  const int n4 = static_cast<int>(A.k / 4);
  for (int j = 0; j < A.n; ++j) {
    float4 v[kHold];
    float mx = 0.0f;
#pragma unroll
    for (int h = 0; h < kHold; ++h) {
      const int c = tid + kThreads * h;
      v[h] = c < n4 ? reinterpret_cast<const float4*>(A.x + j * A.k)[c] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int h = 0; h < kHold; ++h) {
      const int c = tid + kThreads * h;
      if (c < n4) {
        if constexpr (kNorm) {
          v[h] = rms_scale4(v[h], s_inv[j], xnorm_w4(A.norm, c));
          if (b == 0 && A.norm.out) reinterpret_cast<float4*>(A.norm.out + j * A.k)[c] = v[h];
        }
        mx = abs_max4(mx, v[h]);
      }
    }
    mx = block_max(mx, s_tmp);
    const float scale = fp8_row_scale(mx);
    const float inv = 1.0f / scale;
    if (tid == 0) s_xs[j] = scale;
#pragma unroll
    for (int h = 0; h < kHold; ++h) {
      const int c = tid + kThreads * h;
      if (c < n4) {
        const uint32_t q = e4m3x4(v[h], inv);
        const int e = 4 * c;  // k byte
        const int at = (e / kKBlock) * kXAtomBytes + j * kKBlock + ((((e % kKBlock) / 16) ^ j) * 16) + e % 16;
        *reinterpret_cast<uint32_t*>(xb_ptr + at) = q;
      }
    }
  }
  wg::fence_proxy_async();  // x's image, written by st.shared, is read next by wgmma
  __syncthreads();

  if (warp == kConsumers / 32) {  // the producer warp: refill each slot once its item is consumed
    if (lane == 0)
      for (int i = stages; i < items; ++i) {
        wg::mbar_wait(smem_addr(&empty[i % stages]), static_cast<uint32_t>((i / stages - 1) & 1));
        issue(i);
      }
    return;
  }

  const int g = lane / 4, t = lane % 4;
  float xs[2];
#pragma unroll
  for (int c = 0; c < 2; ++c) xs[c] = 2 * t + c < A.n ? s_xs[2 * t + c] : 0.0f;
  const uint64_t desc_x = wg::desc(xb, 16, wg::kAtomBytes);
  const uint64_t desc_w = wg::desc(ring, 16, wg::kAtomBytes);
  // Items up to `done` have been read by this warp's wgmmas: their slots are released.
  int released = 0;
  auto release = [&](int done) {
    for (; released <= done; ++released)
      if (lane == 0) wg::mbar_arrive(smem_addr(&empty[released % stages]));
  };
  float acc[S][kSteps][4];
  for (int ti = 0; ti < my_tiles; ++ti) {
    const int tile = cl + ti * n_cl;
    const int seg = kGlu ? 0 : segment_of(A, tile);
    const int64_t m = A.m[seg];
    const int64_t row0 = int64_t{tile - (seg > 0 ? A.tile_end[seg - 1] : 0)} * kRows + 16 * warp + g;
    // The epilogue's reads, issued before the tile's products.
    float wsc[S][2], bias[2] = {0.0f, 0.0f}, prev[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t row = row0 + 8 * r;
      const bool in = row < m && rank == 0;
#pragma unroll
      for (int s = 0; s < S; ++s) wsc[s][r] = in ? __ldg(A.scales[kGlu ? s : seg] + row) : 0.0f;
      if constexpr (!kGlu) {
        if (in && A.bias[seg]) bias[r] = __ldg(A.bias[seg] + row);
#pragma unroll
        for (int c = 0; c < 2; ++c)
          if (in && A.accumulate[seg] && 2 * t + c < A.n) prev[r][c] = A.out[seg][(2 * t + c) * m + row];
      }
    }
    // Item j's k step q accumulates into set q (independent chains); item 0 overwrites.
    for (int j = 0; j < IT; ++j) {
      const int i = ti * IT + j, s = i % stages, kb = kb0 + j * KPI;
      wg::mbar_wait(smem_addr(&full[s]), static_cast<uint32_t>((i / stages) & 1));
      wg::fence();
#pragma unroll
      for (int q = 0; q < kSteps; ++q) {
        // k step q: k block kb + q / 4 (slab q / 4 of the slot), 32-byte step q % 4 of it
        const uint64_t dx = wg::desc_add(desc_x, static_cast<uint32_t>((kb + q / 4) * kXAtomBytes + 32 * (q % 4)));
        const uint32_t off = static_cast<uint32_t>(s * kSlotBytes + (q / 4) * kBoxBytes + 32 * (q % 4));
#pragma unroll
        for (int m2 = 0; m2 < S; ++m2)
          mma_e4m3_n8(acc[m2][q], wg::desc_add(desc_w, off + m2 * kMatBytes), dx, j > 0);
      }
      wg::commit();
      wg::wait<W>();  // (no access to acc inside this loop: ptxas would wait for the wgmmas there)
      release(i - W);
    }
    wg::wait<0>();
#pragma unroll
    for (int m2 = 0; m2 < S; ++m2) wg::fence_operands(acc[m2]);
    release((ti + 1) * IT - 1);
    float sum[S][4];
#pragma unroll
    for (int m2 = 0; m2 < S; ++m2)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float z = 0.0f;
#pragma unroll
        for (int q = 0; q < kSteps; ++q) z += acc[m2][q][e];
        sum[m2][e] = z;
      }
    if (C > 1) {  // one tile a cluster: rank 0 adds the other ranks' sums in rank order
      if (rank != 0) {
        float* dst = cooperative_groups::this_cluster().map_shared_rank(red, 0) + (rank - 1) * S * 4 * kConsumers;
#pragma unroll
        for (int m2 = 0; m2 < S; ++m2)
#pragma unroll
          for (int e = 0; e < 4; ++e) dst[(m2 * 4 + e) * kConsumers + tid] = sum[m2][e];
        wg::mbar_arrive_rank0(smem_addr(&red_full));
        continue;
      }
      wg::mbar_wait<true>(smem_addr(&red_full), 0);
      for (int q = 1; q < C; ++q) {
        const float* src = red + (q - 1) * S * 4 * kConsumers;
#pragma unroll
        for (int m2 = 0; m2 < S; ++m2)
#pragma unroll
          for (int e = 0; e < 4; ++e) sum[m2][e] += src[(m2 * 4 + e) * kConsumers + tid];
      }
    }
    // Epilogue: rows row0 and row0 + 8, batch columns 2t and 2t + 1.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t row = row0 + 8 * r;
      if (row >= m) continue;
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int col = 2 * t + c;
        if (col >= A.n) continue;
        const float y0 = sum[0][2 * r + c] * xs[c] * wsc[0][r];
        if constexpr (kGlu) {
          const float y1 = sum[1][2 * r + c] * xs[c] * wsc[1][r];
          A.glu_out[col * m + row] = glu_act(y0, A.gelu) * y1;
          if (A.gate_out) A.gate_out[col * m + row] = y0;
          if (A.up_out) A.up_out[col * m + row] = y1;
        } else {
          A.out[seg][col * m + row] = prev[r][c] + (y0 + bias[r]);
        }
      }
    }
  }
#endif
}

// The tensor map of a packed FP8 matrix [m, k_pad] (boxes of 64 rows x 128 bytes, 128-byte
// swizzle; boxes past the matrix read zeros): kpi 1, 2-D; kpi > 1 (k_pad % 128 == 0), 3-D as
// [k_pad / 128 blocks][m rows][128 bytes] with boxes of kpi blocks. Cached by address: a decode
// step launches the same few hundred matrices every step.
bool weight_map(CUtensorMap* map, const void* w, int64_t m, int64_t k_pad, int kpi) {
  return cached_tensor_map(TensorMapKey{w, m, k_pad, kpi}, map, [&](CUtensorMap* out) {
    const PFN_cuTensorMapEncodeTiled_v12000 fn = encode_tiled();
    if (fn == nullptr) return false;
    const bool three = kpi > 1;
    const cuuint64_t dims[3] = {static_cast<cuuint64_t>(three ? kKBlock : k_pad), static_cast<cuuint64_t>(m),
                                static_cast<cuuint64_t>(k_pad / kKBlock)};
    const cuuint64_t strides[2] = {static_cast<cuuint64_t>(k_pad), kKBlock};
    const cuuint32_t box[3] = {kKBlock, kRows, static_cast<cuuint32_t>(kpi)}, elem[3] = {1, 1, 1};
    static const int promo = qgemm_detail::env_int("EMBER_CUDA_FP8_WG_PROMO", 2);
    const CUtensorMapL2promotion l2 = promo == 0   ? CU_TENSOR_MAP_L2_PROMOTION_NONE
                                      : promo == 1 ? CU_TENSOR_MAP_L2_PROMOTION_L2_128B
                                                   : CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
    return fn(out, CU_TENSOR_MAP_DATA_TYPE_UINT8, three ? 3 : 2, const_cast<void*>(w), dims, strides, box, elem,
              CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, l2,
              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
  });
}

using WgKernel = void (*)(const WgArgs);

template <bool kGlu, bool kNorm>
WgKernel kernel_of(int64_t k, int kpi) {
  if (kpi > 1)
    return k <= 4096 ? qgemv_fp8_wg_kernel<kGlu, kNorm, kHoldSmall, 2> : qgemv_fp8_wg_kernel<kGlu, kNorm, kHoldLarge, 2>;
  return k <= 4096 ? qgemv_fp8_wg_kernel<kGlu, kNorm, kHoldSmall, 1> : qgemv_fp8_wg_kernel<kGlu, kNorm, kHoldLarge, 1>;
}

// Dynamic shared memory the kernel may use on the current device (the opt-in limit less its
// static shared memory), raised to that once per kernel and device; 0 when unknown.
size_t dynamic_smem_limit(WgKernel kernel) {
  struct Entry {
    WgKernel kernel;
    int device;
    size_t bytes;
  };
  static std::mutex mu;
  static std::vector<Entry> known;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  std::lock_guard<std::mutex> lock(mu);
  for (const Entry& e : known)
    if (e.kernel == kernel && e.device == dev) return e.bytes;
  const size_t limit = static_cast<size_t>(smem_optin_bytes());
  cudaFuncAttributes fa{};
  size_t dyn = 0;
  if (limit > 0 && cudaFuncGetAttributes(&fa, kernel) == cudaSuccess && fa.sharedSizeBytes < limit) {
    dyn = limit - fa.sharedSizeBytes;
    if (raise_smem_limit(reinterpret_cast<const void*>(kernel), static_cast<int>(dyn)) != cudaSuccess) dyn = 0;
  }
  known.push_back({kernel, dev, dyn});
  return dyn;
}

// Dynamic shared memory of each of `blocks` blocks of the kernel that share an SM: one block
// takes what it may opt in to; several split the SM's shared memory less the 1 KiB each block
// reserves (cudaDevAttrReservedSharedMemoryPerBlock) and their static shared memory.
size_t smem_budget(WgKernel kernel, int blocks) {
  const size_t dyn = dynamic_smem_limit(kernel);
  if (blocks <= 1 || dyn == 0) return dyn;
  int dev = 0, per_sm = 0, reserved = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev) != cudaSuccess)
    return 0;
  const size_t static_bytes = static_cast<size_t>(smem_optin_bytes()) - dyn;  // (dynamic_smem_limit: the opt-in limit less it)
  const size_t share = static_cast<size_t>(per_sm) / static_cast<size_t>(blocks);
  const size_t fixed = static_cast<size_t>(reserved) + static_bytes;
  return share > fixed ? std::min(dyn, share - fixed) : 0;
}

}  // namespace

bool qgemv_fp8_wg_takes(int n, int64_t k) {
  static const bool device_ok = [] {
    int dev = 0;
    return cudaGetDevice(&dev) == cudaSuccess && sm90a_kernels_run_on(dev) && encode_tiled() != nullptr;
  }();
  return device_ok && n >= 1 && n <= kQGemvWgMaxRows && k > 0 && k <= kQGemvWgMaxK && k % 8 == 0;
}

bool qgemv_fp8_wg_wanted(int n, int64_t k, int kind) {
  static const int rows = qgemm_detail::env_int("EMBER_CUDA_FP8_WG", 0);
  static const int kinds = qgemm_detail::env_int("EMBER_CUDA_FP8_WG_KINDS", kWgGlu);
  return n <= rows && (kinds & kind) != 0 && qgemv_fp8_wg_takes(n, k);
}

cudaError_t launch_qgemv_fp8_wg(const QGemvProblem& p, bool glu, bool pdl, cudaStream_t stream) {
  if (!qgemv_fp8_wg_takes(p.n, p.k) || p.n_segs < 1 || (glu && p.n_segs != 1)) return cudaErrorInvalidValue;
  if (p.norm.w && !xnorm_supported(p.n, p.k, p.x, p.norm.out, p.norm.w, p.norm.w_bf16)) return cudaErrorInvalidValue;
  const int64_t k_pad = qweight_k_pad(QFormat::Fp8, p.k);
  const int S = glu ? 2 : 1;
  WgArgs A;
  int tiles = 0;
  for (int s = 0; s < S * p.n_segs; ++s) {
    A.scales[s] = static_cast<const float*>(p.scales[s]);
    A.bias[s] = p.bias[s];
    A.out[s] = p.out[s];
    A.m[s] = p.m[s];
    A.accumulate[s] = p.accumulate[s];
    if (s < p.n_segs) {
      tiles += static_cast<int>((p.m[s] + kRows - 1) / kRows);
      A.tile_end[s] = tiles;
    }
  }
  A.n_segs = p.n_segs;
  A.n_tiles = tiles;
  A.n = p.n;
  A.k = p.k;
  A.k_blocks = static_cast<int>((k_pad + kKBlock - 1) / kKBlock);
  A.x = p.x;
  A.norm = p.norm;
  A.glu_out = p.glu_out;
  A.gate_out = p.gate_out;
  A.up_out = p.up_out;
  A.gelu = p.gelu;
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    return cudaErrorInvalidValue;
  // A cluster of C blocks, one tile each, while the tiles fill at most 1 / C of the resident
  // blocks (EMBER_CUDA_FP8_WG_CLUSTER forces 1, 2 or 4), each rank at least four k blocks.
  static const int cluster_env = qgemm_detail::env_int("EMBER_CUDA_FP8_WG_CLUSTER", 0);
  static const int blocks_env = std::clamp(qgemm_detail::env_int("EMBER_CUDA_FP8_WG_BLOCKS", 1), 1, 2);
  static const int stages_env = qgemm_detail::env_int("EMBER_CUDA_FP8_WG_STAGES", kMaxStages);
  static const int kpi_env = qgemm_detail::env_int("EMBER_CUDA_FP8_WG_KPI", 2);
  const int slots = sms * blocks_env;
  int C = 1;
  if (cluster_env > 0) {
    C = std::min(cluster_env, kMaxCluster);
    if (tiles * C > slots) C = 1;
  } else {
    while (2 * C <= kMaxCluster && tiles * 2 * C <= slots && A.k_blocks >= 8 * C) C *= 2;
  }
  // k blocks a copy: two where the rows are whole blocks (EMBER_CUDA_FP8_WG_KPI=1: one), one
  // where two leave fewer than kMinStages slots (the producer refills a slot only after the
  // wgmmas W items later have been issued; fewer slots than W + 2 would deadlock).
  const bool norm = p.norm.w != nullptr;
  for (int kpi = kpi_env > 1 && k_pad % kKBlock == 0 ? 2 : 1; kpi >= 1; --kpi) {
    const WgKernel kernel = glu ? (norm ? kernel_of<true, true>(p.k, kpi) : kernel_of<true, false>(p.k, kpi))
                                : (norm ? kernel_of<false, true>(p.k, kpi) : kernel_of<false, false>(p.k, kpi));
    int c = C;
    for (;; --c) {  // every rank gets k blocks, a multiple of kpi but the last rank's
      A.kb_per = ((A.k_blocks + c - 1) / c + kpi - 1) / kpi * kpi;
      if (c == 1 || (c - 1) * A.kb_per < A.k_blocks) break;
    }
    A.cluster = c;
    // Shared memory: the ring (as many slots as fit, EMBER_CUDA_FP8_WG_STAGES capping them), the x
    // image, rank 0's sums of the other ranks; EMBER_CUDA_FP8_WG_BLOCKS = 2: two blocks share an SM
    // (smem_budget).
    const size_t slot = static_cast<size_t>(S) * static_cast<size_t>(kpi) * kBoxBytes;
    const size_t fixed = 1024 + static_cast<size_t>((A.k_blocks + kpi - 1) / kpi * kpi) * kXAtomBytes +
                         static_cast<size_t>(c - 1) * static_cast<size_t>(S) * 4 * kConsumers * sizeof(float);
    const size_t budget = smem_budget(kernel, blocks_env);
    if (budget < fixed + static_cast<size_t>(kMinStages) * slot) continue;
    A.stages = static_cast<int>(std::min<size_t>({(budget - fixed) / slot, static_cast<size_t>(kMaxStages),
                                                   static_cast<size_t>(std::max(stages_env, kMinStages))}));
    bool mapped = true;
    for (int s = 0; s < S * p.n_segs && mapped; ++s) mapped = weight_map(&A.map[s], p.w[s], p.m[s], k_pad, kpi);
    if (!mapped) continue;
    const size_t smem = fixed + static_cast<size_t>(A.stages) * slot;
    const int grid = std::min(tiles, std::max(slots / c, 1)) * c;
    if (c > 1)
      return qgemm_detail::launch_clustered(kernel, dim3(static_cast<unsigned>(grid)), kThreads, smem,
                                            static_cast<unsigned>(c), pdl, stream, A);
    return launch_kernel(kernel, dim3(static_cast<unsigned>(grid)), dim3(kThreads), smem, stream, pdl, A);
  }
  return cudaErrorNotSupported;
}

}  // namespace ember::cuda
