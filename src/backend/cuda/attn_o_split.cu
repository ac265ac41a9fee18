// The batch-1 decode attention fused with the o projection, keys split over a cluster (attn_o_split.cuh).
#include "backend/cuda/attn_o_split.cuh"
#include "backend/cuda/attn_o_tile.cuh"
#include "backend/cuda/smem_limit.h"

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

namespace ember::cuda {
namespace {

namespace cg = cooperative_groups;
using qgemm_detail::launch_clustered;
using namespace attn_o_detail;

constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kCluster = 8;  // blocks a cluster: key chunks of one K/V head

// Byte offsets of a block's shared memory (host and device agree through this one function).
struct Smem {
  int w_stride = 0;  // bytes a weight row slice: + 16, so the 8 rows a mma reads fall in distinct banks
  int sc = 0;        // int4: BF16 [rows / 16][group][16] (the slice's groups); fp8: F32 [rows]
  int x = 0;         // head r's attention output, BF16 (int4) / F16 (fp8) [group * 128]
  int q = 0;         // F32 [group][128]
  int tbl = 0;       // int [blocks of the key chunk]
  int work = 0;      // F32 scores [group][lpad], then the P V partials [warps][group][128]
  int pm = 0;        // F32 [kMaxGroup] the chunk's max score a query head
  int pl = 0;        // F32 [kMaxGroup] its sum of exp(score - max)
  int po = 0;        // F32 [group][128] its unnormalized output
  int flag = 0;      // int: this block sums the rows chunk
  int lpad = 0;
  int total = 0;
};

__host__ __device__ inline Smem smem_layout(QFormat f, int group, int rows, int max_kv, int block_size) {
  Smem s;
  const int kslice = group * kHeadDim;
  s.w_stride = (f == QFormat::Int4 ? kslice / 2 : kslice) + 16;
  int o = rows * s.w_stride;
  s.sc = o;
  o += align16(f == QFormat::Int4 ? rows / 16 * (kslice / kQGroup) * 16 * 2 : rows * 4);
  s.x = o;
  o += align16(kslice * 2);
  s.q = o;
  o += kslice * 4;
  const int chunk = (max_kv + kCluster - 1) / kCluster;
  s.tbl = o;
  o += align16(((chunk + block_size - 1) / block_size + 1) * 4);
  s.lpad = (chunk + 3) / 4 * 4;
  s.work = o;
  const int scores = group * s.lpad * 4, parts = kWarps * kslice * 4;
  o += align16(scores > parts ? scores : parts);
  s.pm = o;
  o += align16(kMaxGroup * 4);
  s.pl = o;
  o += align16(kMaxGroup * 4);
  s.po = o;
  o += kslice * 4;
  s.flag = o;
  o += 16;
  s.total = o;
  return s;
}

struct Launch {
  AttnOSplitArgs a;
  Smem s;
  int parts = 1;  // clusters a K/V head
  int rows = 0;   // o rows a block (a multiple of 16)
};

// Four 16-bit K/V values -> floats.
template <typename T>
__device__ __forceinline__ void widen4(const uint2 u, float (&f)[4]) {
  if constexpr (std::is_same_v<T, __half>) {
    const float2 p0 = __half22float2(*reinterpret_cast<const __half2*>(&u.x));
    const float2 p1 = __half22float2(*reinterpret_cast<const __half2*>(&u.y));
    f[0] = p0.x, f[1] = p0.y, f[2] = p1.x, f[3] = p1.y;
  } else {
    f[0] = bf16_lo(u.x), f[1] = bf16_hi(u.x), f[2] = bf16_lo(u.y), f[3] = bf16_hi(u.y);
  }
}

template <QFormat F, typename T>
__global__ void __launch_bounds__(kThreads, 1) attn_o_split_kernel(const Launch L) {
  extern __shared__ __align__(16) uint8_t smem[];
  const AttnOSplitArgs& a = L.a;
  const PagedAttnArgs& at = a.attn;
  const Smem& s = L.s;
  cg::cluster_group cluster = cg::this_cluster();
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int n_kv = at.n_kv_heads, group = at.n_heads / n_kv, kslice = group * kHeadDim, k = at.n_heads * kHeadDim;
  const int rank = static_cast<int>(cluster.block_rank());
  const int cid = static_cast<int>(blockIdx.x) / kCluster, r = cid / L.parts, part_i = cid % L.parts;
  const int chunk_i = part_i * kCluster + rank;  // the block's rows chunk (its counter)
  const int64_t r0 = static_cast<int64_t>(chunk_i) * L.rows;
  const int64_t row_bytes = F == QFormat::Int4 ? k / 2 : k;
  const int slice_bytes = F == QFormat::Int4 ? kslice / 2 : kslice;

  // 1. Rows [r0, r0 + rows) x head r's columns of the o weights, and their scales: weights, which
  // no kernel of the step writes, so before the PDL wait.
  const auto* wg = static_cast<const uint8_t*>(a.w);
  {
    const int chunks = slice_bytes / 16;
    const int64_t col0 = static_cast<int64_t>(r) * slice_bytes;
    for (int i = tid; i < L.rows * chunks; i += kThreads) {
      const int row = i / chunks, c = i - row * chunks;
      const bool ok = r0 + row < a.m;
      cp_async_16(smem + row * s.w_stride + c * 16, wg + (ok ? (r0 + row) * row_bytes + col0 + c * 16 : 0), ok);
    }
    const uint8_t* sg = wg + qweight_scales_offset(F, a.m, k);
    if constexpr (F == QFormat::Int4) {
      // (a 16-row tile's scales: BF16 [groups][16]; the slice's groups are contiguous)
      const int tile_bytes = k / kQGroup * 32, slice_sc = kslice / kQGroup * 32, sc_chunks = slice_sc / 16;
      for (int i = tid; i < L.rows / 16 * sc_chunks; i += kThreads) {
        const int t = i / sc_chunks, c = i - t * sc_chunks;
        const int64_t tile = r0 / 16 + t;
        const bool ok = tile * 16 < a.m;
        cp_async_16(smem + s.sc + t * slice_sc + c * 16, sg + (ok ? tile * tile_bytes + r * slice_sc + c * 16 : 0), ok);
      }
    } else {
      for (int i = tid; i < L.rows; i += kThreads) {
        const bool ok = r0 + i < a.m;
        cp_async_4(smem + s.sc + i * 4, sg + (ok ? (r0 + i) * 4 : 0), ok);
      }
    }
    cp_async_commit();
  }
  // This block's key chunk and its block table: step metadata, written before the step's first
  // kernel (as the decode attention reads them before its wait).
  const int seq = at.seq_ids ? at.seq_ids[0] : 0;
  const int len = at.seq_lens[seq];
  const int t0 = at.window > 0 ? max(0, len - at.window) : 0;
  const int n = min(len - t0, at.max_kv);
  const int per = (n + kCluster - 1) / kCluster;
  const int k0 = min(n, rank * per), nk = min(n, k0 + per) - k0;
  const int bs = at.block_size, b0 = (t0 + k0) / bs;
  int* tbl = reinterpret_cast<int*>(smem + s.tbl);
  if (nk > 0)
    for (int i = tid; i <= (t0 + k0 + nk - 1) / bs - b0; i += kThreads)
      tbl[i] = at.block_tables[static_cast<int64_t>(seq) * at.max_blocks_per_seq + b0 + i];
  if (at.pdl) pdl_launch_dependents();
  pdl_wait();

  // 2. Head r's attention over keys [k0, k0 + nk): scores a warp a key (4 dims a lane).
  float* qs = reinterpret_cast<float*>(smem + s.q);
  for (int i = tid; i < kslice / 4; i += kThreads)
    reinterpret_cast<float4*>(qs)[i] = reinterpret_cast<const float4*>(at.q + static_cast<int64_t>(r) * kslice)[i];
  __syncthreads();
  const T* kc = static_cast<const T*>(at.k);
  const T* vc = static_cast<const T*>(at.v);
  const int64_t slot_stride = static_cast<int64_t>(n_kv) * kHeadDim;
  auto row_of = [&](int j) {  // key k0 + j: its (block, slot) row of head r
    const int t = t0 + k0 + j;
    return (static_cast<int64_t>(tbl[t / bs - b0]) * bs + t % bs) * slot_stride + static_cast<int64_t>(r) * kHeadDim;
  };
  float* sc = reinterpret_cast<float*>(smem + s.work);  // [group][lpad]
  {
    const float inv_cap = at.softcap > 0.0f ? 1.0f / at.softcap : 0.0f;
    constexpr int kRound = 4;  // keys a warp loads before their math
    for (int jb = warp * kRound; jb < nk; jb += kWarps * kRound) {
      uint2 u[kRound];
#pragma unroll
      for (int i = 0; i < kRound; ++i)
        u[i] = jb + i < nk ? *reinterpret_cast<const uint2*>(kc + row_of(jb + i) + lane * 4) : make_uint2(0u, 0u);
#pragma unroll
      for (int i = 0; i < kRound; ++i) {
        if (jb + i >= nk) break;
        float kf[4];
        widen4<T>(u[i], kf);
#pragma unroll
        for (int h = 0; h < kMaxGroup; ++h) {
          if (h >= group) break;
          const float4 qv = *reinterpret_cast<const float4*>(qs + h * kHeadDim + lane * 4);
          const float d = warp_sum(qv.x * kf[0] + qv.y * kf[1] + qv.z * kf[2] + qv.w * kf[3]);
          if (lane == 0) {
            float x = d * at.scale;
            if (at.softcap > 0.0f) x = at.softcap * tanhf(x * inv_cap);
            sc[h * s.lpad + jb + i] = x;
          }
        }
      }
    }
  }
  __syncthreads();
  float* pm = reinterpret_cast<float*>(smem + s.pm);
  float* pl = reinterpret_cast<float*>(smem + s.pl);
  if (warp < group) {  // (an empty chunk: max -inf, sum 0, which the merge weighs 0)
    float* sh = sc + warp * s.lpad;
    float mx = -INFINITY;
    for (int j = lane; j < nk; j += 32) mx = fmaxf(mx, sh[j]);
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int j = lane; j < nk; j += 32) {
      const float p = expf(sh[j] - mx);
      sh[j] = p;
      sum += p;
    }
    sum = warp_sum(sum);
    if (lane == 0) {
      pm[warp] = mx;
      pl[warp] = sum;
    }
  }
  __syncthreads();
  float o[kMaxGroup][4];
#pragma unroll
  for (int h = 0; h < kMaxGroup; ++h) o[h][0] = o[h][1] = o[h][2] = o[h][3] = 0.0f;
  for (int j = warp; j < nk; j += kWarps) {
    float v[4];
    widen4<T>(*reinterpret_cast<const uint2*>(vc + row_of(j) + lane * 4), v);
#pragma unroll
    for (int h = 0; h < kMaxGroup; ++h) {
      if (h >= group) break;
      const float p = sc[h * s.lpad + j];
#pragma unroll
      for (int e = 0; e < 4; ++e) o[h][e] += p * v[e];
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
  float* po = reinterpret_cast<float*>(smem + s.po);
  for (int e = tid; e < kslice; e += kThreads) {
    float sum = 0.0f;
#pragma unroll 4
    for (int w = 0; w < kWarps; ++w) sum += parts[w * kslice + e];
    po[e] = sum;
  }
  cluster.sync();  // every block's partial is in its shared memory

  // 3. The merge of the cluster's eight partials (each block reads them all, in rank order).
  using X = std::conditional_t<F == QFormat::Int4, __nv_bfloat16, __half>;
  X* xs = reinterpret_cast<X*>(smem + s.x);
  for (int e = tid; e < kslice; e += kThreads) {
    const int h = e / kHeadDim;
    float mj[kCluster], mx = -INFINITY;
#pragma unroll
    for (int q = 0; q < kCluster; ++q) {
      mj[q] = cluster.map_shared_rank(pm, q)[h];
      mx = fmaxf(mx, mj[q]);
    }
    float l = 0.0f, x = 0.0f;
#pragma unroll
    for (int q = 0; q < kCluster; ++q) {
      const float wq = mj[q] == -INFINITY ? 0.0f : expf(mj[q] - mx);
      l += wq * cluster.map_shared_rank(pl, q)[h];
      x += wq * cluster.map_shared_rank(po, q)[e];
    }
    x /= l;
    xs[e] = from_float<X>(x);
    if (part_i == 0 && rank == 0) at.out[static_cast<int64_t>(r) * kslice + e] = x;
  }
  // (The other blocks may still read this block's partial: arrive now, wait before exiting.)
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
  cp_async_wait<0>();
  __syncthreads();  // this block's weights and x

  // 4. part[r][rows] = x_r @ w[rows, head r's columns]^T: a warp a 16-row tile, all of the slice.
  const int g = lane >> 2, c = lane & 3;
  for (int mt = warp; mt < L.rows / 16; mt += kWarps) {
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const void* tile_scales = F == QFormat::Int4 ? smem + s.sc + mt * (kslice / kQGroup) * 32 : nullptr;
    o_tile_mma<F>(acc, smem + mt * 16 * s.w_stride, s.w_stride, tile_scales, xs, kslice, 0, 1);
    if constexpr (F != QFormat::Int4) {
      const float* rs = reinterpret_cast<const float*>(smem + s.sc);
      acc[0] *= rs[mt * 16 + g];
      acc[2] *= rs[mt * 16 + g + 8];
    }
    if (c == 0) {  // (every column of the product is x's: take column 0)
      const int64_t ra = r0 + mt * 16 + g, rb = ra + 8;
      if (ra < a.m) a.part[static_cast<int64_t>(r) * a.m + ra] = acc[0];
      if (rb < a.m) a.part[static_cast<int64_t>(r) * a.m + rb] = acc[2];
    }
  }

  // 5. The last of the rows chunk's n_kv blocks adds the heads' products into acc in head order.
  __threadfence();  // (this thread's part stores, before the counter says they are there)
  __syncthreads();
  int* last = reinterpret_cast<int*>(smem + s.flag);
  if (tid == 0) *last = atomicAdd(a.counters + chunk_i, 1u) == static_cast<unsigned>(n_kv - 1);
  __syncthreads();
  if (*last) {
    __threadfence();
    for (int i = tid; i < L.rows && r0 + i < a.m; i += kThreads) {
      const int64_t row = r0 + i;
      float y = 0.0f;
      for (int h = 0; h < n_kv; ++h) y += __ldcg(a.part + static_cast<int64_t>(h) * a.m + row);
      a.acc[row] += y;
    }
    if (tid == 0) a.counters[chunk_i] = 0u;  // (for the next launch, which waits for this grid)
  }
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

using Kernel = void (*)(const Launch);

Kernel pick_kernel(const AttnOSplitArgs& a) {
  const bool f16 = a.attn.kv_type == DType::F16;
  if (a.format == QFormat::Int4)
    return f16 ? attn_o_split_kernel<QFormat::Int4, __half> : attn_o_split_kernel<QFormat::Int4, __nv_bfloat16>;
  return f16 ? attn_o_split_kernel<QFormat::Fp8, __half> : attn_o_split_kernel<QFormat::Fp8, __nv_bfloat16>;
}

int rows_of(const AttnOSplitArgs& a, int parts) {
  const int64_t per = (a.m + int64_t{parts} * kCluster - 1) / (int64_t{parts} * kCluster);
  return static_cast<int>((per + 15) / 16 * 16);
}

Smem layout_of(const AttnOSplitArgs& a, int parts) {
  const PagedAttnArgs& at = a.attn;
  return smem_layout(a.format, at.n_heads / at.n_kv_heads, rows_of(a, parts), at.max_kv, at.block_size);
}

// The shape checks attn_o_split_parts needs before it may size anything.
bool shape_ok(const AttnOSplitArgs& a) {
  const PagedAttnArgs& at = a.attn;
  if (!(at.kv_type == DType::BF16 || at.kv_type == DType::F16) || at.head_dim != kHeadDim) return false;
  if (!(a.format == QFormat::Int4 || a.format == QFormat::Fp8)) return false;
  if (at.n_kv_heads < 1 || at.n_heads % at.n_kv_heads != 0 || at.n_heads / at.n_kv_heads > kMaxGroup) return false;
  return at.max_kv >= 1 && at.max_kv <= kAttnOMaxKeys && at.block_size >= 1 && a.m >= 1 && at.max_blocks_per_seq >= 1;
}

}  // namespace

int attn_o_split_parts(const AttnOSplitArgs& a) {
  if (!shape_ok(a)) return 0;
  const int optin = static_cast<int>(smem_optin_bytes());
  for (int parts = 1; parts * kCluster <= kAttnOSplitMaxChunks; parts *= 2)
    if (layout_of(a, parts).total <= optin) return parts;
  return 0;
}

size_t attn_o_split_part_bytes(const AttnOSplitArgs& a) {
  return static_cast<size_t>(a.attn.n_kv_heads) * static_cast<size_t>(a.m) * sizeof(float);
}

bool attn_o_split_takes(const AttnOSplitArgs& a) {
  const PagedAttnArgs& at = a.attn;
  if (!shape_ok(a)) return false;
  if (!at.q || !at.out || !at.k || !at.v || !at.seq_lens || !at.block_tables || !a.w || !a.acc || !a.part ||
      !a.counters)
    return false;
  if (reinterpret_cast<uintptr_t>(at.q) % 16 || reinterpret_cast<uintptr_t>(a.w) % 16 ||
      reinterpret_cast<uintptr_t>(at.k) % 16 || reinterpret_cast<uintptr_t>(at.v) % 16)
    return false;
  return attn_o_split_parts(a) > 0;
}

cudaError_t launch_attn_o_split(const AttnOSplitArgs& a, cudaStream_t stream) {
  const int parts = attn_o_split_parts(a);
  if (parts == 0) return cudaErrorInvalidValue;
  const Launch L{a, layout_of(a, parts), parts, rows_of(a, parts)};
  const Kernel kernel = pick_kernel(a);
  // (the opt-in limit, not this launch's bytes: the limit is set once per kernel)
  if (const cudaError_t e = raise_smem_limit(reinterpret_cast<const void*>(kernel), smem_optin_bytes());
      e != cudaSuccess)
    return e;
  const unsigned blocks = static_cast<unsigned>(a.attn.n_kv_heads * parts * kCluster);
  return launch_clustered(kernel, dim3(blocks), kThreads, static_cast<size_t>(L.s.total), kCluster, a.attn.pdl,
                          stream, L);
}

}  // namespace ember::cuda
