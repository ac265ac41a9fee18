// The batch-1 decode attention fused with the o projection (attn_o.cuh).
#include "backend/cuda/attn_o.cuh"
#include "backend/cuda/attn_o_tile.cuh"
#include "backend/cuda/smem_limit.h"

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

namespace ember::cuda {
namespace {

namespace cg = cooperative_groups;
using qgemm_detail::clustered_config;
using qgemm_detail::launch_clustered;
using namespace attn_o_detail;


// Byte offsets of a block's shared memory (host and device agree through this one function).
struct Smem {
  int w_stride = 0;  // bytes a weight row: the packed row + 16, so the 8 rows a mma reads fall in distinct banks
  int sc = 0;        // int4: BF16 [2 tiles][groups][16]; fp8: F32 [32]
  int x = 0;         // the attention row, BF16 (int4) / F16 (fp8) [K]
  int q = 0;         // F32 [G][128]
  int tbl = 0;       // int [blocks of the key range]
  int work = 0;      // F32 scores [G][lpad], then the PV partials [warps][G][128]
  int inv = 0;       // F32 [G] 1 / softmax sum
  int red = 0;       // F32 [warps / 2][32] the GEMV's k-slice partials
  int lpad = 0;
  int total = 0;
};

// (warps: the block's; the partials of P V are per warp)
__host__ __device__ inline Smem smem_layout(QFormat f, int n_heads, int n_kv_heads, int max_kv, int block_size,
                                            int warps, int rows) {
  Smem s;
  const int k = n_heads * kHeadDim, g = n_heads / n_kv_heads;
  const int row_bytes = f == QFormat::Int4 ? k / 2 : k;
  s.w_stride = row_bytes + 16;
  int o = rows * s.w_stride;
  s.sc = o;
  o += align16(f == QFormat::Int4 ? rows / 16 * (k / kQGroup) * 16 * 2 : rows * 4);
  s.x = o;
  o += align16(k * 2);
  s.q = o;
  o += g * kHeadDim * 4;
  s.tbl = o;
  o += align16(((max_kv + block_size - 1) / block_size + 1) * 4);
  s.lpad = (max_kv + 3) / 4 * 4;
  s.work = o;
  const int scores = g * s.lpad * 4, parts = warps * g * kHeadDim * 4;
  o += align16(scores > parts ? scores : parts);
  s.inv = o;
  o += align16(kMaxGroup * 4);
  s.red = o;
  o += warps / (rows / 16) * rows * 4;
  s.total = o;
  return s;
}

struct Launch {
  AttnOArgs a;
  Smem s;
};

// Eight 16-bit K/V values -> floats.
template <typename T>
__device__ __forceinline__ void widen8(const uint4 u, float (&f)[8]) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (std::is_same_v<T, __half>) {
      const float2 p = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
      f[2 * i] = p.x;
      f[2 * i + 1] = p.y;
    } else {
      f[2 * i] = bf16_lo(w[i]);
      f[2 * i + 1] = bf16_hi(w[i]);
    }
  }
}

// kThreads: 256 or 512; kRows: 32 or 64 o rows a block; the GEMV's warps are kRows / 16 row
// tiles x the rest k slices.
template <QFormat F, typename T, int kThreads, int kRows>
__global__ void __launch_bounds__(kThreads, 1) attn_o_kernel(const Launch L) {
  constexpr int kWarps = kThreads / 32, kTiles = kRows / 16, kSlices = kWarps / kTiles;
  constexpr int kKeySlots = kThreads / 8;  // keys a pass of the score loop (8 threads a key)
  extern __shared__ __align__(16) uint8_t smem[];
  const AttnOArgs& a = L.a;
  const PagedAttnArgs& at = a.attn;
  const Smem& s = L.s;
  cg::cluster_group cluster = cg::this_cluster();
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int n_kv = at.n_kv_heads, group = at.n_heads / n_kv, k = at.n_heads * kHeadDim;
  const int kvh = static_cast<int>(cluster.block_rank());
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int64_t row_bytes = F == QFormat::Int4 ? k / 2 : k;

  // 1. This block's o rows and their scales into shared memory: weights, which no kernel of the
  // step writes, so before the PDL wait.
  const auto* wg = static_cast<const uint8_t*>(a.w);
  {
    const int chunks = static_cast<int>(row_bytes / 16);
    for (int i = tid; i < kRows * chunks; i += kThreads) {
      const int row = i / chunks, c = i - row * chunks;
      const bool ok = r0 + row < a.m;
      cp_async_16(smem + row * s.w_stride + c * 16, wg + (ok ? (r0 + row) * row_bytes + c * 16 : 0), ok);
    }
    const uint8_t* sg = wg + qweight_scales_offset(F, a.m, k);
    if constexpr (F == QFormat::Int4) {
      const int tile_bytes = k / kQGroup * 32, tile_chunks = tile_bytes / 16;  // a 16-row tile's scales
      for (int i = tid; i < kTiles * tile_chunks; i += kThreads) {
        const int t = i / tile_chunks, c = i - t * tile_chunks;
        const int64_t tile = r0 / 16 + t;
        const bool ok = tile * 16 < a.m;
        cp_async_16(smem + s.sc + t * tile_bytes + c * 16, sg + (ok ? tile * tile_bytes + c * 16 : 0), ok);
      }
    } else {
      if (tid < kRows) {
        const bool ok = r0 + tid < a.m;
        cp_async_4(smem + s.sc + tid * 4, sg + (ok ? (r0 + tid) * 4 : 0), ok);
      }
    }
    cp_async_commit();
  }
  // The sequence's key range and block table: step metadata, written before the step's first
  // kernel (as the decode attention reads them before its wait).
  const int seq = at.seq_ids ? at.seq_ids[0] : 0;
  const int len = at.seq_lens[seq];
  const int t0 = at.window > 0 ? max(0, len - at.window) : 0;
  const int n = min(len - t0, at.max_kv);
  const int bs = at.block_size, b0 = t0 / bs;
  int* tbl = reinterpret_cast<int*>(smem + s.tbl);
  for (int i = tid; i < (t0 + n + bs - 1) / bs - b0; i += kThreads)
    tbl[i] = at.block_tables[static_cast<int64_t>(seq) * at.max_blocks_per_seq + b0 + i];
  // (Remote shared memory may be written only once every block of the cluster runs: this arrival,
  // waited for before the first remote store.)
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
  // The next kernel's blocks may take the room beside this one's and start their own weights.
  if (at.pdl) pdl_launch_dependents();
  pdl_wait();

  // 2. Attention of K/V head kvh: query heads kvh * group .. + group - 1.
  float* qs = reinterpret_cast<float*>(smem + s.q);
  for (int i = tid; i < group * kHeadDim / 4; i += kThreads)
    reinterpret_cast<float4*>(qs)[i] = reinterpret_cast<const float4*>(at.q + static_cast<int64_t>(kvh) * group * kHeadDim)[i];
  __syncthreads();
  const T* kc = static_cast<const T*>(at.k);
  const T* vc = static_cast<const T*>(at.v);
  const int64_t slot_stride = static_cast<int64_t>(n_kv) * kHeadDim;
  float* sc = reinterpret_cast<float*>(smem + s.work);  // [group][lpad]
  auto row_of = [&](int j) {  // key j of the range: its (block, slot) row of head kvh
    const int t = t0 + j;
    return (static_cast<int64_t>(tbl[t / bs - b0]) * bs + t % bs) * slot_stride + kvh * kHeadDim;
  };
  {
    const int sub = tid & 7;  // 16 dims a thread, 8 threads a key
    const float inv_cap = at.softcap > 0.0f ? 1.0f / at.softcap : 0.0f;
    // Keys in rounds of kKeyRounds passes, all of a round's loads issued before its math; every
    // lane runs every round (the shuffles take the whole warp), keys past n masked.
    constexpr int kKeyRounds = 4;
    for (int base = 0; base < n; base += kKeyRounds * kKeySlots) {
      uint4 kr[kKeyRounds][2];
#pragma unroll
      for (int u = 0; u < kKeyRounds; ++u) {
        const int j = base + u * kKeySlots + (tid >> 3);
        if (j < n) {
          const T* kp = kc + row_of(j) + sub * 16;
          kr[u][0] = *reinterpret_cast<const uint4*>(kp);
          kr[u][1] = *reinterpret_cast<const uint4*>(kp + 8);
        } else {
          kr[u][0] = kr[u][1] = make_uint4(0u, 0u, 0u, 0u);
        }
      }
#pragma unroll
      for (int u = 0; u < kKeyRounds; ++u) {
        const int j = base + u * kKeySlots + (tid >> 3);
        float kf[16];
        widen8<T>(kr[u][0], *reinterpret_cast<float(*)[8]>(&kf[0]));
        widen8<T>(kr[u][1], *reinterpret_cast<float(*)[8]>(&kf[8]));
#pragma unroll
        for (int h = 0; h < kMaxGroup; ++h) {
          if (h >= group) break;
          const float4* qh = reinterpret_cast<const float4*>(qs + h * kHeadDim + sub * 16);
          float d = 0.0f;
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const float4 qv = qh[i];
            d += qv.x * kf[4 * i] + qv.y * kf[4 * i + 1] + qv.z * kf[4 * i + 2] + qv.w * kf[4 * i + 3];
          }
          d += __shfl_xor_sync(0xffffffffu, d, 1);
          d += __shfl_xor_sync(0xffffffffu, d, 2);
          d += __shfl_xor_sync(0xffffffffu, d, 4);
          if (sub == 0 && j < n) {
            float x = d * at.scale;
            if (at.softcap > 0.0f) x = at.softcap * tanhf(x * inv_cap);
            sc[h * s.lpad + j] = x;
          }
        }
      }
    }
  }
  __syncthreads();
  float* inv = reinterpret_cast<float*>(smem + s.inv);
  if (warp < group) {
    float* sh = sc + warp * s.lpad;
    float mx = -INFINITY;
    for (int j = lane; j < n; j += 32) mx = fmaxf(mx, sh[j]);
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int j = lane; j < n; j += 32) {
      const float p = expf(sh[j] - mx);
      sh[j] = p;
      sum += p;
    }
    sum = warp_sum(sum);
    if (lane == 0) inv[warp] = 1.0f / sum;
  }
  __syncthreads();
  float o[kMaxGroup][4];
#pragma unroll
  for (int h = 0; h < kMaxGroup; ++h) o[h][0] = o[h][1] = o[h][2] = o[h][3] = 0.0f;
  {
    const int per = (n + kWarps - 1) / kWarps, j0 = warp * per, j1 = min(n, j0 + per);
    // A warp's keys in rounds of 8, the round's V loads issued first (warp-uniform bounds).
    for (int jb = j0; jb < j1; jb += 8) {
      uint2 u[8];
#pragma unroll
      for (int i = 0; i < 8; ++i)
        u[i] = jb + i < j1 ? *reinterpret_cast<const uint2*>(vc + row_of(jb + i) + lane * 4) : make_uint2(0u, 0u);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        if (jb + i >= j1) break;
        float v[4];
        if constexpr (std::is_same_v<T, __half>) {
          const float2 p0 = __half22float2(*reinterpret_cast<const __half2*>(&u[i].x));
          const float2 p1 = __half22float2(*reinterpret_cast<const __half2*>(&u[i].y));
          v[0] = p0.x, v[1] = p0.y, v[2] = p1.x, v[3] = p1.y;
        } else {
          v[0] = bf16_lo(u[i].x), v[1] = bf16_hi(u[i].x), v[2] = bf16_lo(u[i].y), v[3] = bf16_hi(u[i].y);
        }
#pragma unroll
        for (int h = 0; h < kMaxGroup; ++h) {
          if (h >= group) break;
          const float p = sc[h * s.lpad + jb + i];
#pragma unroll
          for (int e = 0; e < 4; ++e) o[h][e] += p * v[e];
        }
      }
    }
  }
  __syncthreads();  // (the scores are read; their room takes the partials)
  float* parts = sc;  // [kWarps][group][128]
#pragma unroll
  for (int h = 0; h < kMaxGroup; ++h) {
    if (h >= group) break;
    *reinterpret_cast<float4*>(parts + (warp * group + h) * kHeadDim + lane * 4) =
        make_float4(o[h][0], o[h][1], o[h][2], o[h][3]);
  }
  __syncthreads();
  using X = std::conditional_t<F == QFormat::Int4, __nv_bfloat16, __half>;
  X* xs = reinterpret_cast<X*>(smem + s.x);
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
  for (int e = tid; e < group * kHeadDim; e += kThreads) {
    const int h = e / kHeadDim, d = e - h * kHeadDim;
    float sum = 0.0f;
#pragma unroll 4
    for (int w = 0; w < kWarps; ++w) sum += parts[(w * group + h) * kHeadDim + d];
    sum *= inv[h];
    const int col = (kvh * group + h) * kHeadDim + d;
    const X xv = from_float<X>(sum);
    for (int r = 0; r < n_kv; ++r) cluster.map_shared_rank(xs, r)[col] = xv;
    if (blockIdx.x < static_cast<unsigned>(n_kv)) at.out[col] = sum;
  }
  cp_async_wait<0>();
  cluster.sync();  // every block's slice of x is in every block; this block's weights too

  // 3. acc[r0 .. r0 + 32) += x @ w^T: warp = (row tile mt, k slice ks).
  const int mt = warp % kTiles, ks = warp / kTiles, g = lane >> 2, c = lane & 3;  // ks < kSlices
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const void* tile_scales = F == QFormat::Int4 ? smem + s.sc + mt * (k / kQGroup) * 32 : nullptr;
  o_tile_mma<F>(acc, smem + mt * 16 * s.w_stride, s.w_stride, tile_scales, xs, k, ks, kSlices);
  float* red = reinterpret_cast<float*>(smem + s.red);  // [kSlices][kRows]
  if (c == 0) {  // (every column of the product is x's: take column 0)
    red[ks * kRows + mt * 16 + g] = acc[0];
    red[ks * kRows + mt * 16 + g + 8] = acc[2];
  }
  __syncthreads();
  if (tid < kRows && r0 + tid < a.m) {
    float y = 0.0f;
#pragma unroll
    for (int q = 0; q < kSlices; ++q) y += red[q * kRows + tid];
    if constexpr (F != QFormat::Int4) y *= reinterpret_cast<const float*>(smem + s.sc)[tid];
    a.acc[r0 + tid] += y;
  }
}

using Kernel = void (*)(const Launch);

template <QFormat F, int kThreads, int kRows>
Kernel kernel_of(DType kv) {
  return kv == DType::F16 ? attn_o_kernel<F, __half, kThreads, kRows> : attn_o_kernel<F, __nv_bfloat16, kThreads, kRows>;
}

// (64 rows for int4 only: fp8's would take 256 KiB of shared memory)
Kernel pick_kernel(const AttnOArgs& a) {
  const DType kv = a.attn.kv_type;
  if (a.format == QFormat::Int4) {
    if (a.rows == 64)
      return a.threads == 256 ? kernel_of<QFormat::Int4, 256, 64>(kv) : kernel_of<QFormat::Int4, 512, 64>(kv);
    return a.threads == 256 ? kernel_of<QFormat::Int4, 256, 32>(kv) : kernel_of<QFormat::Int4, 512, 32>(kv);
  }
  return a.threads == 256 ? kernel_of<QFormat::Fp8, 256, 32>(kv) : kernel_of<QFormat::Fp8, 512, 32>(kv);
}

Smem layout_of(const AttnOArgs& a) {
  const PagedAttnArgs& at = a.attn;
  return smem_layout(a.format, at.n_heads, at.n_kv_heads, at.max_kv, at.block_size, a.threads / 32, a.rows);
}

int blocks_of(const AttnOArgs& a) {
  const int64_t tiles = (a.m + a.rows - 1) / a.rows, c = a.attn.n_kv_heads;
  return static_cast<int>((tiles + c - 1) / c * c);
}

}  // namespace

bool attn_o_takes(const AttnOArgs& a) {
  const PagedAttnArgs& at = a.attn;
  if (!(at.kv_type == DType::BF16 || at.kv_type == DType::F16) || at.head_dim != kHeadDim) return false;
  if (!(a.format == QFormat::Int4 || a.format == QFormat::Fp8) || !(a.threads == 256 || a.threads == 512)) return false;
  if (!(a.rows == 32 || (a.rows == 64 && a.format == QFormat::Int4))) return false;
  if (at.n_kv_heads < 1 || at.n_kv_heads > 8 || at.n_heads % at.n_kv_heads != 0 ||
      at.n_heads / at.n_kv_heads > kMaxGroup)
    return false;
  if (at.max_kv < 1 || at.max_kv > kAttnOMaxKeys || at.block_size < 1 || a.m < 1 || at.max_blocks_per_seq < 1)
    return false;
  if (!at.q || !at.out || !at.k || !at.v || !at.seq_lens || !at.block_tables || !a.w || !a.acc) return false;
  if (reinterpret_cast<uintptr_t>(at.q) % 16 || reinterpret_cast<uintptr_t>(a.w) % 16 ||
      reinterpret_cast<uintptr_t>(at.k) % 16 || reinterpret_cast<uintptr_t>(at.v) % 16)
    return false;
  return layout_of(a).total <= smem_optin_bytes();
}

int attn_o_max_clusters(const AttnOArgs& a) {
  const Kernel kernel = pick_kernel(a);
  if (raise_smem_limit(reinterpret_cast<const void*>(kernel), smem_optin_bytes()) != cudaSuccess) return 0;
  cudaLaunchAttribute attr[2];
  const cudaLaunchConfig_t cfg = clustered_config(dim3(static_cast<unsigned>(blocks_of(a))), a.threads,
                                                  static_cast<size_t>(layout_of(a).total),
                                                  static_cast<unsigned>(a.attn.n_kv_heads), false, nullptr, attr);
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return clusters;
}

bool attn_o_one_wave(const AttnOArgs& a) { return attn_o_max_clusters(a) >= blocks_of(a) / a.attn.n_kv_heads; }

cudaError_t launch_attn_o(const AttnOArgs& a, cudaStream_t stream) {
  const Launch L{a, layout_of(a)};
  const Kernel kernel = pick_kernel(a);
  // (the opt-in limit, not this launch's bytes: the limit is set once per kernel)
  if (const cudaError_t e = raise_smem_limit(reinterpret_cast<const void*>(kernel), smem_optin_bytes());
      e != cudaSuccess)
    return e;
  return launch_clustered(kernel, dim3(static_cast<unsigned>(blocks_of(a))), a.threads,
                          static_cast<size_t>(L.s.total), static_cast<unsigned>(a.attn.n_kv_heads), a.attn.pdl,
                          stream, L);
}

}  // namespace ember::cuda
