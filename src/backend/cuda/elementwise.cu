// Per-element kernels. None of these is on the critical path of decode (the GEMVs and the
// attention are), so they favour simple grid-stride loops over tuned tiles. The ones a decode
// step runs between GEMVs wait for their producer with pdl_wait() first, so the backend can
// launch them as programmatic dependents (their launch latency hides behind the GEMV drain).
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/elementwise.cuh"
#include "backend/cuda/fp8_rows.cuh"
#include "backend/cuda/norm_stage.cuh"
#include "backend/cuda/probe.cuh"

#include <algorithm>
#include <type_traits>

namespace ember::cuda {

namespace {

constexpr int kThreads = 256;

int grid_for(int64_t n) {
  // Enough blocks to fill the GPU many times over; grid-stride loops cover the rest.
  return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535 * 4));
}

template <typename S, typename D>
__global__ void convert_kernel(const S* __restrict__ src, D* __restrict__ dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    dst[i] = from_float<D>(to_float<S>(src[i]));
}

template <typename S>
cudaError_t convert_from(const S* src, DType dst_type, void* dst, int64_t n, cudaStream_t st) {
  const int g = grid_for(n);
  switch (dst_type) {
    case DType::F32: convert_kernel<<<g, kThreads, 0, st>>>(src, static_cast<float*>(dst), n); break;
    case DType::F16: convert_kernel<<<g, kThreads, 0, st>>>(src, static_cast<__half*>(dst), n); break;
    case DType::BF16:
      convert_kernel<<<g, kThreads, 0, st>>>(src, static_cast<__nv_bfloat16*>(dst), n);
      break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

// Sum of v over the block (every thread gets it); scratch holds 32 floats.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  v = warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float t = lane < static_cast<int>(blockDim.x / 32) ? scratch[lane] : 0.0f;
    t = warp_sum(t);
    if (lane == 0) scratch[0] = t;
  }
  __syncthreads();
  return scratch[0];
}

// One block per row: sum of squares in f32, then the scaled write. Each thread reads every
// element it later writes, so out may alias x.
template <typename W>
__global__ void rms_norm_kernel(const float* x, const W* __restrict__ w, float eps, float* out,
                                int64_t d, bool release_early) {
  pdl_enter(release_early);
  const float* xr = x + blockIdx.x * d;
  float* orow = out + blockIdx.x * d;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) ss += xr[i] * xr[i];
  __shared__ float partial[32];
  const float inv = rsqrtf(block_sum(ss, partial) / static_cast<float>(d) + eps);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) orow[i] = xr[i] * inv * to_float<W>(w[i]);
}

// sum = a + b, then out = rms_norm(sum) * w, one block per row. Each thread re-reads only the
// sums it wrote itself, so sum may alias a or b and out may alias sum.
template <typename W>
__global__ void add_rms_norm_kernel(const float* a, const float* b, float* sum,
                                    const W* __restrict__ w, float eps, float* out, int64_t d,
                                    bool release_early) {
  pdl_enter(release_early);
  const int64_t r0 = blockIdx.x * d;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float v = a[r0 + i] + b[r0 + i];
    sum[r0 + i] = v;
    ss += v * v;
  }
  __shared__ float partial[32];
  const float inv = rsqrtf(block_sum(ss, partial) / static_cast<float>(d) + eps);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) out[r0 + i] = sum[r0 + i] * inv * to_float<W>(w[i]);
}

// Which GEMM x rows a norm / GLU kernel writes besides its F32 output (GemmRowsOut).
constexpr int kRowsNone = 0, kRowsE4m3 = 1, kRowsBf16 = 2;
int rows_kind(const GemmRowsOut* ro) { return !ro ? kRowsNone : ro->fq.q ? kRowsE4m3 : kRowsBf16; }

// Four floats as four BF16 (round to nearest, as launch_convert).
__device__ __forceinline__ uint2 bf16x4(float4 v) {
  const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
  return make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));
}

// Rows of d % 4 == 0 floats, at most 4 float4 per thread: one block per row, each thread
// keeps its float4s in registers between the sum of squares and the scaled write (one read
// of the inputs). kAdd: the row is a + b, also written to sum. Aliasing as the kernels above:
// every element is read and written by one thread.
template <typename W, int V, bool kAdd, int kRows>
__global__ void rms_norm_reg_kernel(const float* a, const float* b, float* sum,
                                    const W* __restrict__ w, float eps, float* out, int64_t d, GemmRowsOut ro,
                                    bool release_early) {
  const int n4 = static_cast<int>(d / 4);
  EMBER_PROBE_MARK(5, 0, kAdd, d, 0);
  // The norm's weights before the PDL wait: model constants, which the previous kernels' weight
  // stream has evicted from L2, so loaded after it they were a DRAM latency on the critical path.
  float4 wv[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int i = threadIdx.x + j * blockDim.x;
    if (i < n4) wv[j] = load_w4(w, i);
  }
  pdl_enter(release_early);
  const int64_t r0 = blockIdx.x * d;
  float4 v[V];
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int i = threadIdx.x + j * blockDim.x;
    if (i < n4) {
      float4 x = reinterpret_cast<const float4*>(a + r0)[i];
      if constexpr (kAdd) {
        const float4 y = reinterpret_cast<const float4*>(b + r0)[i];
        x.x += y.x;
        x.y += y.y;
        x.z += y.z;
        x.w += y.w;
        reinterpret_cast<float4*>(sum + r0)[i] = x;
      }
      v[j] = x;
      ss = __fadd_rn(ss, sum_sq4(x));
    }
  }
  __shared__ float partial[32];
  const float inv = rms_inverse(block_sum(ss, partial), d, eps);
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int i = threadIdx.x + j * blockDim.x;
    if (i < n4) {
      v[j] = rms_scale4(v[j], inv, wv[j]);
      if (kRows == kRowsNone || out) reinterpret_cast<float4*>(out + r0)[i] = v[j];
      if constexpr (kRows == kRowsBf16) reinterpret_cast<uint2*>(ro.bf16)[blockIdx.x * d / 4 + i] = bf16x4(v[j]);
    }
  }
  if constexpr (kRows == kRowsE4m3) {
    __shared__ float s_max[32];
    store_row_fp8(v, n4, blockIdx.x, ro.fq, s_max);
  }
  EMBER_PROBE_MARK(5, 7, kAdd, d, 0);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The register kernel when the row fits (d % 4 == 0, <= 4 float4 per thread of 1024) and every
// pointer is aligned; returns cudaErrorNotSupported otherwise (the caller takes the loop kernel).
// ro: also the GEMM x rows of out (null: none); out may then be null (not written).
template <typename W, bool kAdd>
cudaError_t launch_norm_reg(const float* a, const float* b, float* sum, const W* w, float eps,
                            float* out, int64_t rows, int64_t d, cudaStream_t stream, bool pdl,
                            bool release_early, const GemmRowsOut* ro = nullptr) {
  const int64_t n4 = d / 4;
  const int kind = rows_kind(ro);
  if (d % 4 != 0 || n4 > 4 * 1024 || !aligned16(a) || (out ? !aligned16(out) : !ro) ||
      (kAdd && (!aligned16(b) || !aligned16(sum))) ||
      reinterpret_cast<uintptr_t>(w) % (sizeof(W) * 4) != 0 ||
      (kind == kRowsE4m3 && (ro->fq.k_pad % 4 != 0 || ro->fq.k_pad < d || reinterpret_cast<uintptr_t>(ro->fq.q) % 4 != 0)) ||
      (kind == kRowsBf16 && reinterpret_cast<uintptr_t>(ro->bf16) % 8 != 0))
    return cudaErrorNotSupported;
  const int threads = rms_reg_threads(d);  // (rms_inverse_rows repeats this kernel's sums)
  const int v = static_cast<int>((n4 + threads - 1) / threads);
  const dim3 grid(static_cast<unsigned>(rows)), block(threads);
  const GemmRowsOut q = ro ? *ro : GemmRowsOut{};
  auto go = [&](auto kernel) { return launch_kernel(kernel, grid, block, 0, stream, pdl, a, b, sum, w, eps, out, d, q, release_early); };
  auto pick = [&](auto k) {
    constexpr int K = decltype(k)::value;
    switch (v) {
      case 1: return go(rms_norm_reg_kernel<W, 1, kAdd, K>);
      case 2: return go(rms_norm_reg_kernel<W, 2, kAdd, K>);
      default: return go(rms_norm_reg_kernel<W, 4, kAdd, K>);
    }
  };
  if (kind == kRowsE4m3) return pick(std::integral_constant<int, kRowsE4m3>{});
  if (kind == kRowsBf16) return pick(std::integral_constant<int, kRowsBf16>{});
  return pick(std::integral_constant<int, kRowsNone>{});
}

// One thread per rotated pair, over the heads of x1 then those of x2 (q and k in one launch;
// x2 may be null with n_heads2 = 0).
__global__ void rope_kernel(float* x1, int n_heads1, float* x2, int n_heads2,
                            const int32_t* __restrict__ positions,
                            const float* __restrict__ inv_freq, int64_t n, int head_dim,
                            int rotary_dim, bool neox, float factor) {
  pdl_wait();
  pdl_launch_dependents();
  const int half = rotary_dim / 2;
  const int heads = n_heads1 + n_heads2;
  const int64_t total = n * heads * half;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int i = static_cast<int>(idx % half);
    const int64_t th = idx / half;  // token * heads + head
    const int64_t t = th / heads;
    const int h = static_cast<int>(th % heads);
    float* v = h < n_heads1 ? x1 + (t * n_heads1 + h) * head_dim
                            : x2 + (t * n_heads2 + (h - n_heads1)) * head_dim;
    const float theta = static_cast<float>(positions[t]) * inv_freq[i];
    float sn, cs;
    sincosf(theta, &sn, &cs);
    cs *= factor;
    sn *= factor;
    const int i0 = neox ? i : 2 * i;
    const int i1 = neox ? i + half : 2 * i + 1;
    const float a = v[i0], b = v[i1];
    v[i0] = a * cs - b * sn;
    v[i1] = a * sn + b * cs;
  }
}

__global__ void glu_kernel(const float* gate, const float* up, bool gelu_tanh, float* out,
                           int64_t n) {
  pdl_wait();
  pdl_launch_dependents();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = glu_act(gate[i], gelu_tanh) * up[i];
}

__device__ __forceinline__ float4 glu4(float4 g, float4 u, bool gelu_tanh) {
  return make_float4(glu_act(g.x, gelu_tanh) * u.x, glu_act(g.y, gelu_tanh) * u.y, glu_act(g.z, gelu_tanh) * u.z,
                     glu_act(g.w, gelu_tanh) * u.w);
}

// The same per element, four at a time (n % 4 == 0, aligned): memory-bound, so wide accesses.
__global__ void glu4_kernel(const float4* gate, const float4* up, bool gelu_tanh, float4* out, int64_t n4) {
  pdl_wait();
  pdl_launch_dependents();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n4; i += int64_t{gridDim.x} * blockDim.x)
    out[i] = glu4(gate[i], up[i], gelu_tanh);
}

// One block of 256 threads a row: the GLU of the row kept in registers, written as F32 (out
// null: not at all) and as the GEMM x rows that read it (kRows). gate and up F32, or BF16
// (what the gate / up GEMMs write when nothing else reads them).
template <typename T, int kVec, int kRows>
__global__ void __launch_bounds__(256) glu_rows_kernel(const T* gate, const T* up, bool gelu_tanh, float* out,
                                                       int64_t cols, GemmRowsOut ro) {
  pdl_wait();
  pdl_launch_dependents();
  const int64_t r0 = blockIdx.x * cols;
  const int n4 = static_cast<int>(cols / 4);
  float4 v[kVec];
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    const int c = static_cast<int>(threadIdx.x) + j * 256;
    if (c < n4) {
      v[j] = glu4(load_w4(gate + r0, c), load_w4(up + r0, c), gelu_tanh);
      if (out) reinterpret_cast<float4*>(out + r0)[c] = v[j];
      if constexpr (kRows == kRowsBf16) reinterpret_cast<uint2*>(ro.bf16)[r0 / 4 + c] = bf16x4(v[j]);
    }
  }
  if constexpr (kRows == kRowsE4m3) {
    __shared__ float s_max[32];
    store_row_fp8(v, n4, blockIdx.x, ro.fq, s_max);
  }
}

// The GLU of BF16 gate / up rows in chunks of 8 values (16-byte loads), up to 1024 threads a
// row so that a decode batch's few hundred rows still fill the SMs; out (F32, null: not
// written) and the GEMM x rows as glu_rows_kernel.
template <int V, int kRows>
__global__ void __launch_bounds__(1024) glu_bf16x8_rows_kernel(const __nv_bfloat16* gate, const __nv_bfloat16* up,
                                                               bool gelu_tanh, float* out, int64_t cols,
                                                               GemmRowsOut ro) {
  pdl_wait();
  pdl_launch_dependents();
  const int64_t r0 = blockIdx.x * cols;
  const int n8 = static_cast<int>(cols / 8);
  float4 v[2 * V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int c = static_cast<int>(threadIdx.x + j * blockDim.x);
    if (c < n8) {
      const uint4 g = reinterpret_cast<const uint4*>(gate + r0)[c];
      const uint4 u = reinterpret_cast<const uint4*>(up + r0)[c];
      v[2 * j] = glu4(make_float4(bf16_lo(g.x), bf16_hi(g.x), bf16_lo(g.y), bf16_hi(g.y)),
                      make_float4(bf16_lo(u.x), bf16_hi(u.x), bf16_lo(u.y), bf16_hi(u.y)), gelu_tanh);
      v[2 * j + 1] = glu4(make_float4(bf16_lo(g.z), bf16_hi(g.z), bf16_lo(g.w), bf16_hi(g.w)),
                          make_float4(bf16_lo(u.z), bf16_hi(u.z), bf16_lo(u.w), bf16_hi(u.w)), gelu_tanh);
      if (out) {
        reinterpret_cast<float4*>(out + r0)[2 * c] = v[2 * j];
        reinterpret_cast<float4*>(out + r0)[2 * c + 1] = v[2 * j + 1];
      }
      if constexpr (kRows == kRowsBf16) {
        const uint2 lo = bf16x4(v[2 * j]), hi = bf16x4(v[2 * j + 1]);
        reinterpret_cast<uint4*>(ro.bf16)[r0 / 8 + c] = make_uint4(lo.x, lo.y, hi.x, hi.y);
      }
    }
  }
  if constexpr (kRows == kRowsE4m3) {
    __shared__ float s_max[32];
    store_row_fp8_x8<V>(v, n8, blockIdx.x, ro.fq, s_max);
  }
}

__global__ void add_kernel(const float* a, const float* b, float* out, int64_t n) {
  pdl_wait();
  pdl_launch_dependents();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = a[i] + b[i];
}

__global__ void scale_kernel(float* x, float s, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    x[i] *= s;
}

__global__ void softcap_kernel(float* x, float cap, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    x[i] = cap * tanhf(x[i] / cap);
}

__global__ void add_bias_kernel(float* out, const float* __restrict__ bias, int64_t total,
                                int64_t m) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] += bias[i % m];
}

__global__ void copy16_kernel(uint4* __restrict__ dst, const uint4* __restrict__ src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    dst[i] = src[i];
}

// splitmix64 of (seed, i): independent uniform values without any state.
__device__ __forceinline__ float hash_uniform(uint64_t seed, uint64_t i) {
  uint64_t z = seed + (i + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
}

template <typename T>
__global__ void fill_random_kernel(T* dst, int64_t n, uint64_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    dst[i] = from_float<T>(lo + (hi - lo) * hash_uniform(seed, static_cast<uint64_t>(i)));
}

}  // namespace

cudaError_t launch_convert(DType src_type, const void* src, DType dst_type, void* dst, int64_t n,
                           cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  switch (src_type) {
    case DType::F32: return convert_from(static_cast<const float*>(src), dst_type, dst, n, stream);
    case DType::F16: return convert_from(static_cast<const __half*>(src), dst_type, dst, n, stream);
    case DType::BF16:
      return convert_from(static_cast<const __nv_bfloat16*>(src), dst_type, dst, n, stream);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t launch_rms_norm(const float* x, const void* w, DType w_type, float eps, float* out,
                            int64_t rows, int64_t d, cudaStream_t stream, bool pdl, bool release_early) {
  if (rows == 0) return cudaSuccess;
  // Small rows (per-head q/k norms) get one warp's worth of threads, model-width rows more.
  cudaError_t e = w_type == DType::F32
                      ? launch_norm_reg<float, false>(x, nullptr, nullptr, static_cast<const float*>(w), eps, out, rows, d, stream, pdl, release_early)
                  : w_type == DType::BF16
                      ? launch_norm_reg<__nv_bfloat16, false>(x, nullptr, nullptr, static_cast<const __nv_bfloat16*>(w), eps, out, rows, d, stream, pdl, release_early)
                      : cudaErrorInvalidValue;
  if (e != cudaErrorNotSupported) return e;
  const int threads = d <= 256 ? 64 : (d <= 2048 ? 256 : 512);
  const dim3 grid(static_cast<unsigned>(rows));
  if (w_type == DType::F32)
    return launch_kernel(rms_norm_kernel<float>, grid, dim3(threads), 0, stream, pdl, x,
                         static_cast<const float*>(w), eps, out, d, release_early);
  if (w_type == DType::BF16)
    return launch_kernel(rms_norm_kernel<__nv_bfloat16>, grid, dim3(threads), 0, stream, pdl, x,
                         static_cast<const __nv_bfloat16*>(w), eps, out, d, release_early);
  return cudaErrorInvalidValue;
}

cudaError_t launch_add_rms_norm(const float* a, const float* b, float* sum, const void* w,
                                DType w_type, float eps, float* out, int64_t rows, int64_t d,
                                cudaStream_t stream, bool pdl, bool release_early) {
  if (rows == 0) return cudaSuccess;
  cudaError_t e = w_type == DType::F32
                      ? launch_norm_reg<float, true>(a, b, sum, static_cast<const float*>(w), eps, out, rows, d, stream, pdl, release_early)
                  : w_type == DType::BF16
                      ? launch_norm_reg<__nv_bfloat16, true>(a, b, sum, static_cast<const __nv_bfloat16*>(w), eps, out, rows, d, stream, pdl, release_early)
                      : cudaErrorInvalidValue;
  if (e != cudaErrorNotSupported) return e;
  const int threads = d <= 256 ? 64 : (d <= 2048 ? 256 : 512);
  const dim3 grid(static_cast<unsigned>(rows));
  if (w_type == DType::F32)
    return launch_kernel(add_rms_norm_kernel<float>, grid, dim3(threads), 0, stream, pdl, a, b,
                         sum, static_cast<const float*>(w), eps, out, d, release_early);
  if (w_type == DType::BF16)
    return launch_kernel(add_rms_norm_kernel<__nv_bfloat16>, grid, dim3(threads), 0, stream, pdl,
                         a, b, sum, static_cast<const __nv_bfloat16*>(w), eps, out, d, release_early);
  return cudaErrorInvalidValue;
}

cudaError_t launch_rope(float* x, const int32_t* positions, const float* inv_freq, int64_t n,
                        int n_heads, int head_dim, int rotary_dim, bool neox,
                        float attention_factor, cudaStream_t stream, bool pdl) {
  return launch_rope2(x, n_heads, nullptr, 0, positions, inv_freq, n, head_dim, rotary_dim, neox,
                      attention_factor, stream, pdl);
}

cudaError_t launch_rope2(float* x1, int n_heads1, float* x2, int n_heads2,
                         const int32_t* positions, const float* inv_freq, int64_t n, int head_dim,
                         int rotary_dim, bool neox, float attention_factor, cudaStream_t stream,
                         bool pdl) {
  const int64_t total = n * (n_heads1 + n_heads2) * (rotary_dim / 2);
  if (total == 0) return cudaSuccess;
  return launch_kernel(rope_kernel, dim3(grid_for(total)), dim3(kThreads), 0, stream, pdl, x1,
                       n_heads1, x2, n_heads2, positions, inv_freq, n, head_dim, rotary_dim, neox,
                       attention_factor);
}

cudaError_t launch_glu(const float* gate, const float* up, bool gelu_tanh, float* out, int64_t n,
                       cudaStream_t stream, bool pdl) {
  if (n == 0) return cudaSuccess;
  if (n % 4 == 0 && aligned16(gate) && aligned16(up) && aligned16(out))
    return launch_kernel(glu4_kernel, dim3(grid_for(n / 4)), dim3(kThreads), 0, stream, pdl,
                         reinterpret_cast<const float4*>(gate), reinterpret_cast<const float4*>(up), gelu_tanh,
                         reinterpret_cast<float4*>(out), n / 4);
  return launch_kernel(glu_kernel, dim3(grid_for(n)), dim3(kThreads), 0, stream, pdl, gate, up,
                       gelu_tanh, out, n);
}

cudaError_t launch_add(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream,
                       bool pdl) {
  if (n == 0) return cudaSuccess;
  return launch_kernel(add_kernel, dim3(grid_for(n)), dim3(kThreads), 0, stream, pdl, a, b, out, n);
}

cudaError_t launch_scale(float* x, float s, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  scale_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, s, n);
  return cudaGetLastError();
}

cudaError_t launch_softcap(float* x, float cap, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  softcap_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, cap, n);
  return cudaGetLastError();
}

cudaError_t launch_add_bias(float* out, const float* bias, int64_t rows, int64_t m,
                            cudaStream_t stream) {
  const int64_t total = rows * m;
  if (total == 0) return cudaSuccess;
  add_bias_kernel<<<grid_for(total), kThreads, 0, stream>>>(out, bias, total, m);
  return cudaGetLastError();
}

cudaError_t launch_copy16(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  const auto n = static_cast<int64_t>(bytes / 16);
  if (n == 0) return cudaSuccess;
  copy16_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<uint4*>(dst),
                                                      static_cast<const uint4*>(src), n);
  return cudaGetLastError();
}

cudaError_t launch_fill_bytes(void* dst, uint8_t value, size_t n, cudaStream_t stream) {
  return cudaMemsetAsync(dst, value, n, stream);
}

cudaError_t launch_fill_random(DType type, void* dst, int64_t n, uint64_t seed, float lo,
                               float hi, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const int g = grid_for(n);
  switch (type) {
    case DType::F32:
      fill_random_kernel<<<g, kThreads, 0, stream>>>(static_cast<float*>(dst), n, seed, lo, hi);
      break;
    case DType::F16:
      fill_random_kernel<<<g, kThreads, 0, stream>>>(static_cast<__half*>(dst), n, seed, lo, hi);
      break;
    case DType::BF16:
      fill_random_kernel<<<g, kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(dst), n, seed,
                                                     lo, hi);
      break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t launch_rms_norm_rows(const float* a, const float* b, float* sum, const void* w, DType w_type, float eps,
                                 float* out, int64_t rows, int64_t d, const GemmRowsOut& ro, cudaStream_t stream,
                                 bool pdl, bool release_early) {
  if (rows == 0) return cudaSuccess;
  if (w_type != DType::F32 && w_type != DType::BF16) return cudaErrorInvalidValue;
  if ((ro.fq.q != nullptr) == (ro.bf16 != nullptr)) return cudaErrorInvalidValue;
  const auto* wf = static_cast<const float*>(w);
  const auto* wb = static_cast<const __nv_bfloat16*>(w);
  if (b) {
    return w_type == DType::F32 ? launch_norm_reg<float, true>(a, b, sum, wf, eps, out, rows, d, stream, pdl, release_early, &ro)
                                : launch_norm_reg<__nv_bfloat16, true>(a, b, sum, wb, eps, out, rows, d, stream, pdl, release_early, &ro);
  }
  return w_type == DType::F32
             ? launch_norm_reg<float, false>(a, nullptr, nullptr, wf, eps, out, rows, d, stream, pdl, release_early, &ro)
             : launch_norm_reg<__nv_bfloat16, false>(a, nullptr, nullptr, wb, eps, out, rows, d, stream, pdl, release_early, &ro);
}

cudaError_t launch_glu_rows(DType in_type, const void* gate, const void* up, bool gelu_tanh, float* out, int64_t rows,
                            int64_t cols, const GemmRowsOut* ro, cudaStream_t stream, bool pdl) {
  if (rows == 0) return cudaSuccess;
  if (ro && (ro->fq.q != nullptr) == (ro->bf16 != nullptr)) return cudaErrorInvalidValue;
  const int kind = rows_kind(ro);
  const size_t esize = in_type == DType::BF16 ? 2 : 4;
  if ((in_type != DType::F32 && in_type != DType::BF16) || cols % 4 != 0 || cols > 16 * 1024 ||
      (cols * esize) % 8 != 0 || reinterpret_cast<uintptr_t>(gate) % (4 * esize) != 0 ||
      reinterpret_cast<uintptr_t>(up) % (4 * esize) != 0 || (out ? !aligned16(out) : !ro) ||
      (kind == kRowsE4m3 &&
       (ro->fq.k_pad % 4 != 0 || ro->fq.k_pad < cols || reinterpret_cast<uintptr_t>(ro->fq.q) % 4 != 0)) ||
      (kind == kRowsBf16 && !aligned16(ro->bf16)))
    return cudaErrorNotSupported;
  const dim3 grid(static_cast<unsigned>(rows)), block(256);
  const GemmRowsOut q = ro ? *ro : GemmRowsOut{};
  auto by_kind = [&](auto launch) {
    if (kind == kRowsE4m3) return launch(std::integral_constant<int, kRowsE4m3>{});
    if (kind == kRowsBf16) return launch(std::integral_constant<int, kRowsBf16>{});
    return launch(std::integral_constant<int, kRowsNone>{});
  };
  const int64_t n8 = cols / 8;
  if (in_type == DType::BF16 && cols % 8 == 0 && aligned16(gate) && aligned16(up) && n8 <= 2048 &&
      (kind != kRowsE4m3 || (ro->fq.k_pad % 8 == 0 && reinterpret_cast<uintptr_t>(ro->fq.q) % 8 == 0))) {
    const int threads = static_cast<int>(std::min<int64_t>(1024, (n8 + 31) / 32 * 32));
    const bool two = n8 > threads;
    const auto* g = static_cast<const __nv_bfloat16*>(gate);
    const auto* u = static_cast<const __nv_bfloat16*>(up);
    return by_kind([&](auto k) {
      constexpr int K = decltype(k)::value;
      auto kernel = two ? glu_bf16x8_rows_kernel<2, K> : glu_bf16x8_rows_kernel<1, K>;
      return launch_kernel(kernel, grid, dim3(threads), 0, stream, pdl, g, u, gelu_tanh, out, cols, q);
    });
  }
  auto go = [&](auto t) {
    using T = decltype(t);
    const T* g = static_cast<const T*>(gate);
    const T* u = static_cast<const T*>(up);
    return by_kind([&](auto k) {
      constexpr int K = decltype(k)::value;
      auto kernel = cols <= 4 * 1024 ? glu_rows_kernel<T, 4, K> : cols <= 8 * 1024 ? glu_rows_kernel<T, 8, K>
                                                                                   : glu_rows_kernel<T, 16, K>;
      return launch_kernel(kernel, grid, block, 0, stream, pdl, g, u, gelu_tanh, out, cols, q);
    });
  };
  return in_type == DType::BF16 ? go(__nv_bfloat16{}) : go(float{});
}

}  // namespace ember::cuda
