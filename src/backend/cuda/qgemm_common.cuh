#pragma once
// What the two packed GEMMs (qgemm.cu on mma.sync, qgemm_wg.cu on wgmma) share: their common
// kernel arguments, the int4 weight pair as BF16 q * scale, the k slices' sums added in slice
// order across a thread-block cluster (distributed shared memory), and the launch of a
// clustered grid.
#include "backend/cuda/mma_util.cuh"
#include "backend/cuda/qgemv.cuh"

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>

namespace ember::cuda::qgemm_detail {

// The arguments both GEMM kernels take (each kernel's Params adds its x operand).
struct PackedGemmArgs {
  const uint8_t* w = nullptr;
  const void* scales = nullptr;  // int4: BF16 per (16-row tile, group); int8: F32 per row
  const float* bias = nullptr;
  float* out = nullptr;
  int64_t m = 0;
  int64_t row_bytes = 0;
  int n = 0;
  int units_total = 0;  // packed units (64 bytes) of a row: k_pad / the format's unit
  int units = 0;        // per k slice
  int splits = 1;
  bool accumulate = false;
};

// Them for out (+)= x [n, k] @ w^T (+ bias), w a packed [m, k] matrix of format f (qgemv.cuh),
// cut into `splits` k slices of `units` units.
inline PackedGemmArgs packed_gemm_args(QFormat f, const void* w, int64_t m, int64_t k, int n, const float* bias,
                                       float* out, bool accumulate, int units, int splits) {
  PackedGemmArgs a;
  a.w = static_cast<const uint8_t*>(w);
  a.scales = static_cast<const uint8_t*>(w) + qweight_scales_offset(f, m, k);
  a.bias = bias;
  a.out = out;
  a.m = m;
  a.row_bytes = static_cast<int64_t>(qweight_row_bytes(f, k));
  a.n = n;
  a.units_total = static_cast<int>(qweight_k_pad(f, k) / qformat_unit(f));
  a.units = units;
  a.splits = splits;
  a.accumulate = accumulate;
  return a;
}

// Nibble pair p of int4 word w as BF16 q - 8, exactly (136 comes off exactly; the scale left to
// the caller).
__device__ __forceinline__ uint32_t i4_exact(uint32_t w, int p) {
  uint32_t v = i4pair(w, p);
  const __nv_bfloat162 off = __halves2bfloat162(__ushort_as_bfloat16(0x4308), __ushort_as_bfloat16(0x4308));
  const __nv_bfloat162 b = __hsub2(*reinterpret_cast<__nv_bfloat162*>(&v), off);
  return *reinterpret_cast<const uint32_t*>(&b);
}

// Nibble pair p of int4 word w as BF16 q * s (s2: the scale twice; the product rounds once: the
// value the dequantizing fallback stores).
__device__ __forceinline__ uint32_t i4_scaled(uint32_t w, int p, __nv_bfloat162 s2) {
  uint32_t v = i4_exact(w, p);
  const __nv_bfloat162 b = __hmul2(*reinterpret_cast<__nv_bfloat162*>(&v), s2);
  return *reinterpret_cast<const uint32_t*>(&b);
}

// After every block of the cluster has written its slice's partial sums of a tile of kRows
// weight rows into red [column][kStride] and synced the cluster (a plain block barrier when
// splits == 1): block `split` finishes rows [r0, r1) of the tile (contiguous, whole float4s, so
// a warp's stores coalesce) for columns 0..cols-1, adding the slices in slice order (each
// thread issues all its loads before it adds: one distributed-shared-memory round trip), so
// the result does not depend on timing. out [column][m] from row0 (+ bias; += when accumulate).
template <int kRows, int kStride, int kMaxSplits, int kThreads>
__device__ __forceinline__ void sum_slices_and_store(const float* red, int split, int splits, int cols, int64_t row0,
                                                     int64_t m, const float* bias, float* out, bool accumulate) {
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  const int r0 = split * (kRows / 4) / splits * 4, r1 = (split + 1) * (kRows / 4) / splits * 4;
  const int quads = (r1 - r0) / 4;
  for (int e = threadIdx.x; e < cols * quads; e += kThreads) {
    const int col = e / quads, r = r0 + 4 * (e % quads);
    float4 part[kMaxSplits];
#pragma unroll
    for (int q = 0; q < kMaxSplits; ++q)
      if (q < splits)
        part[q] = *reinterpret_cast<const float4*>(
            (splits > 1 ? cluster.map_shared_rank(const_cast<float*>(red), q) : red) + col * kStride + r);
    float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int q = 0; q < kMaxSplits; ++q)
      if (q < splits) {
        sum.x += part[q].x;
        sum.y += part[q].y;
        sum.z += part[q].z;
        sum.w += part[q].w;
      }
    const float v[4] = {sum.x, sum.y, sum.z, sum.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t row = row0 + r + i;
      if (row >= m) break;
      const float y = v[i] + (bias ? bias[row] : 0.0f);
      float* o = out + int64_t{col} * m + row;
      *o = accumulate ? *o + y : y;
    }
  }
}

// The launch configuration of a grid in clusters of cluster_x blocks along x, with programmatic
// stream serialization when pdl; attr is the attributes' storage (2 entries).
inline cudaLaunchConfig_t clustered_config(dim3 grid, int threads, size_t smem, unsigned cluster_x, bool pdl,
                                           cudaStream_t stream, cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  int na = 0;
  attr[na].id = cudaLaunchAttributeClusterDimension;
  attr[na].val.clusterDim.x = cluster_x;
  attr[na].val.clusterDim.y = 1;
  attr[na].val.clusterDim.z = 1;
  ++na;
  if (pdl) {
    attr[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[na].val.programmaticStreamSerializationAllowed = 1;
    ++na;
  }
  cfg.attrs = attr;
  cfg.numAttrs = static_cast<unsigned>(na);
  return cfg;
}

// kernel<<<grid, threads, smem, stream>>>(args) with clusters of cluster_x blocks along x, a
// programmatic dependent of the stream's previous kernel when pdl.
template <typename Kernel, typename Args>
cudaError_t launch_clustered(Kernel kernel, dim3 grid, int threads, size_t smem, unsigned cluster_x, bool pdl,
                             cudaStream_t stream, const Args& args) {
  cudaLaunchAttribute attr[2];
  const cudaLaunchConfig_t cfg = clustered_config(grid, threads, smem, cluster_x, pdl, stream, attr);
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, args);
  return e != cudaSuccess ? e : cudaGetLastError();
}

// Whether `splits` k slices of `units` units each cover units_total units, every slice non-empty.
inline bool cut_covers(int units_total, int units, int splits) {
  return int64_t{units} * splits >= units_total && int64_t{units} * (splits - 1) < units_total;
}

// An integer from the environment (`unset` when unset): the GEMMs' and GEMVs' experiment overrides.
inline int env_int(const char* name, int unset = 0) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : unset;
}

}  // namespace ember::cuda::qgemm_detail
