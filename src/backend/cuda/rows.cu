#include "backend/cuda/device_util.cuh"
#include "backend/cuda/rows.cuh"

#include <algorithm>
#include <type_traits>

namespace ember::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kRopeHeads = 8;     // heads of one token per rope_kv_store block ...
constexpr int kRopeThreads = 128; // ... 4 rotated pairs a thread at head_dim 128

// One block per output row.
template <typename T>
__global__ void get_rows_kernel(const T* __restrict__ table, const int32_t* __restrict__ ids,
                                int64_t d, float* __restrict__ out) {
  pdl_wait();
  pdl_launch_dependents();
  const T* src = table + static_cast<int64_t>(ids[blockIdx.x]) * d;
  float* dst = out + blockIdx.x * d;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) dst[i] = to_float<T>(src[i]);
}

// One block per token and tensor (blockIdx.y: 0 the first, 1 the second pair); skipped
// slots leave the cache untouched.
template <typename T>
__global__ void kv_store_kernel(const float* __restrict__ src0, T* __restrict__ cache0,
                                const float* __restrict__ src1, T* __restrict__ cache1,
                                const int32_t* __restrict__ slots, int64_t row) {
  pdl_wait();
  pdl_launch_dependents();
  const int32_t slot = slots[blockIdx.x];
  if (slot < 0) return;
  const float* s = (blockIdx.y == 0 ? src0 : src1) + blockIdx.x * row;
  T* d = (blockIdx.y == 0 ? cache0 : cache1) + static_cast<int64_t>(slot) * row;
  for (int64_t i = threadIdx.x; i < row; i += blockDim.x) d[i] = from_float<T>(s[i]);
}

// One (slot, head) row of D floats as int8 plus its scale, by one warp, with the CPU cache's
// rule (backend/cpu/kv_store.cpp kv_write_head) and the same bits: fabs and max are exact, so
// the warp's max equals the CPU's sequential one (fmaxf skips NaN like std::fmax); the
// division and the reciprocal are IEEE round-to-nearest in CUDA (no fast-math in this
// library), x * inv is one rounding as on the CPU, and roundf rounds halves away from zero
// like std::lround.
__device__ __forceinline__ void quantize_head_i8(const float* x, int D, int8_t* q, float* scale, int lane) {
  float amax = 0.0f;
  for (int i = lane; i < D; i += 32) amax = fmaxf(amax, fabsf(x[i]));
  amax = warp_max(amax);
  const float s = amax / 127.0f;
  const float inv = s != 0.0f ? 1.0f / s : 0.0f;
  for (int i = lane; i < D; i += 32) q[i] = static_cast<int8_t>(static_cast<int>(roundf(x[i] * inv)));
  if (lane == 0) *scale = s;
}

// kv_store_kernel for INT8 caches: a warp per (token, head) row (the scale needs the whole
// row's max); blockIdx.y picks K or V as there.
__global__ void kv_store_i8_kernel(const float* __restrict__ src0, int8_t* __restrict__ cache0,
                                   float* __restrict__ scales0, const float* __restrict__ src1,
                                   int8_t* __restrict__ cache1, float* __restrict__ scales1,
                                   const int32_t* __restrict__ slots, int n_heads, int D) {
  pdl_wait();
  pdl_launch_dependents();
  const int32_t slot = slots[blockIdx.x];
  if (slot < 0) return;
  const bool second = blockIdx.y != 0;
  const int64_t row = static_cast<int64_t>(n_heads) * D;
  const float* s = (second ? src1 : src0) + blockIdx.x * row;
  int8_t* d = (second ? cache1 : cache0) + slot * row;
  float* sc = (second ? scales1 : scales0) + static_cast<int64_t>(slot) * n_heads;
  const int lane = threadIdx.x % 32;
  for (int h = threadIdx.x / 32; h < n_heads; h += blockDim.x / 32)
    quantize_head_i8(s + h * D, D, d + h * D, sc + h, lane);
}

// RoPE of q [n, hq, D] and k [n, hk, D] in place (rotary_dim == D), and the rotated k and
// v [n, hk, D] stored into the caches at slots (< 0 skipped). Block (t, y) covers heads
// [y * kRopeHeads, ..) of token t and the y-th part of its v row: the token's cos and sin
// first (one sincosf per rotated pair for kRopeHeads heads; per head and pair, with 64-bit
// index divisions, this kernel was compute-bound in prefill) into shared memory, then a thread
// per rotated pair, then per element of v. Several blocks a token keep decode batches (a few
// hundred tokens) spread over the SMs. An INT8 cache (T = int8_t, scales [n_slots, hk]) needs
// each row's max first, so the rotated k rows are read back from k after a barrier and a warp
// stores each of the block's k heads, and the v heads hv with hv % gridDim.y == blockIdx.y.
template <typename T>
__global__ void rope_kv_store_kernel(float* q, int hq, float* k, const float* __restrict__ v, int hk,
                                     const int32_t* __restrict__ positions,
                                     const float* __restrict__ inv_freq,
                                     const int32_t* __restrict__ slots, int D, bool neox,
                                     float factor, T* __restrict__ k_cache, T* __restrict__ v_cache,
                                     float* __restrict__ k_scales, float* __restrict__ v_scales) {
  constexpr bool kI8 = std::is_same_v<T, int8_t>;
  extern __shared__ float s_cs[];  // [half] cos, then [half] sin, both times factor
  pdl_wait();
  pdl_launch_dependents();
  const int half = D / 2, row = hk * D;
  const int64_t t = blockIdx.x;
  const int h_begin = blockIdx.y * kRopeHeads, h_end = min(hq + hk, h_begin + kRopeHeads);
  const int v_part = (row + gridDim.y - 1) / gridDim.y;
  const int v_begin = blockIdx.y * v_part, v_end = min(row, v_begin + v_part);
  const float pos = static_cast<float>(positions[t]);
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    float sn, cs;
    sincosf(pos * inv_freq[i], &sn, &cs);
    s_cs[i] = cs * factor;
    s_cs[half + i] = sn * factor;
  }
  __syncthreads();
  const int32_t slot = slots[t];
  float* qt = q + t * hq * D;
  float* kt = k + t * row;
  for (int p = h_begin * half + threadIdx.x; p < h_end * half; p += blockDim.x) {
    const int h = p / half, i = p - h * half;
    float* x = h < hq ? qt + h * D : kt + (h - hq) * D;
    const float cs = s_cs[i], sn = s_cs[half + i];
    const int i0 = neox ? i : 2 * i;
    const int i1 = neox ? i + half : 2 * i + 1;
    const float a = x[i0], b = x[i1];
    const float r0 = a * cs - b * sn, r1 = a * sn + b * cs;
    x[i0] = r0;
    x[i1] = r1;
    if constexpr (!kI8) {
      if (h >= hq && slot >= 0) {
        T* c = k_cache + static_cast<int64_t>(slot) * row + (h - hq) * D;
        c[i0] = from_float<T>(r0);
        c[i1] = from_float<T>(r1);
      }
    }
  }
  if (slot < 0) return;  // (slot is the same for the whole block: the barrier below is safe)
  if constexpr (kI8) {
    __syncthreads();  // this block's rotated k rows are in k
    const int lane = threadIdx.x % 32, n_warps = blockDim.x / 32;
    const int k_begin = max(h_begin, hq) - hq, n_k = max(h_end, hq) - hq - k_begin;
    const int n_v = (hk - static_cast<int>(blockIdx.y) + static_cast<int>(gridDim.y) - 1) / static_cast<int>(gridDim.y);
    for (int w = threadIdx.x / 32; w < n_k + n_v; w += n_warps) {
      const bool is_k = w < n_k;
      const int h = is_k ? k_begin + w : static_cast<int>(blockIdx.y) + (w - n_k) * static_cast<int>(gridDim.y);
      const int64_t e = static_cast<int64_t>(slot) * row + h * D;
      const int64_t si = static_cast<int64_t>(slot) * hk + h;
      if (is_k) quantize_head_i8(kt + h * D, D, k_cache + e, k_scales + si, lane);
      else quantize_head_i8(v + t * row + h * D, D, v_cache + e, v_scales + si, lane);
    }
  } else {
    T* vc = v_cache + static_cast<int64_t>(slot) * row;
    const float* vt = v + t * row;
    for (int r = v_begin + threadIdx.x; r < v_end; r += blockDim.x) vc[r] = from_float<T>(vt[r]);
  }
}

template <typename T>
cudaError_t rope_kv_store_typed(const RopeKvStoreArgs& a, cudaStream_t stream, bool pdl) {
  const size_t smem = static_cast<size_t>(a.head_dim) * sizeof(float);
  const dim3 grid(static_cast<unsigned>(a.n), static_cast<unsigned>((a.hq + a.hk + kRopeHeads - 1) / kRopeHeads));
  return launch_kernel(rope_kv_store_kernel<T>, grid, dim3(kRopeThreads), smem, stream, pdl,
                       a.q, a.hq, a.k, a.v, a.hk, a.positions, a.inv_freq, a.slots, a.head_dim, a.neox, a.factor,
                       static_cast<T*>(a.k_cache), static_cast<T*>(a.v_cache), a.k_scales, a.v_scales);
}

template <typename T>
cudaError_t kv_store_typed(const float* k, const float* v, const int32_t* slots, int n,
                           int64_t row, void* k_cache, void* v_cache, cudaStream_t stream,
                           bool pdl) {
  const dim3 grid(static_cast<unsigned>(n), v ? 2u : 1u);
  return launch_kernel(kv_store_kernel<T>, grid, dim3(kThreads), 0, stream, pdl, k,
                       static_cast<T*>(k_cache), v, static_cast<T*>(v_cache), slots, row);
}

}  // namespace

cudaError_t launch_get_rows(const void* table, DType table_type, const int32_t* ids, int n,
                            int64_t d, float* out, cudaStream_t stream, bool pdl) {
  if (n == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(n)), block(kThreads);
  switch (table_type) {
    case DType::F32:
      return launch_kernel(get_rows_kernel<float>, grid, block, 0, stream, pdl,
                           static_cast<const float*>(table), ids, d, out);
    case DType::F16:
      return launch_kernel(get_rows_kernel<__half>, grid, block, 0, stream, pdl,
                           static_cast<const __half*>(table), ids, d, out);
    case DType::BF16:
      return launch_kernel(get_rows_kernel<__nv_bfloat16>, grid, block, 0, stream, pdl,
                           static_cast<const __nv_bfloat16*>(table), ids, d, out);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t launch_kv_store(const float* src, const int32_t* slots, int n, int64_t row,
                            void* cache, DType cache_type, cudaStream_t stream) {
  return launch_kv_store2(src, nullptr, slots, n, row, cache, nullptr, cache_type, stream, false);
}

cudaError_t launch_rope_kv_store(const RopeKvStoreArgs& a, cudaStream_t stream, bool pdl) {
  if (a.n == 0) return cudaSuccess;
  if (a.head_dim % 2 != 0) return cudaErrorInvalidValue;
  switch (a.cache_type) {
    case DType::F32: return rope_kv_store_typed<float>(a, stream, pdl);
    case DType::F16: return rope_kv_store_typed<__half>(a, stream, pdl);
    case DType::BF16: return rope_kv_store_typed<__nv_bfloat16>(a, stream, pdl);
    case DType::FP8_E4M3: return rope_kv_store_typed<Fp8E4M3>(a, stream, pdl);
    case DType::FP8_E5M2: return rope_kv_store_typed<Fp8E5M2>(a, stream, pdl);
    case DType::I8:
      if (!a.k_scales || !a.v_scales) return cudaErrorInvalidValue;
      return rope_kv_store_typed<int8_t>(a, stream, pdl);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t launch_kv_store2(const float* k, const float* v, const int32_t* slots, int n,
                             int64_t row, void* k_cache, void* v_cache, DType cache_type,
                             cudaStream_t stream, bool pdl) {
  if (n == 0) return cudaSuccess;
  switch (cache_type) {
    case DType::F32: return kv_store_typed<float>(k, v, slots, n, row, k_cache, v_cache, stream, pdl);
    case DType::F16: return kv_store_typed<__half>(k, v, slots, n, row, k_cache, v_cache, stream, pdl);
    case DType::BF16:
      return kv_store_typed<__nv_bfloat16>(k, v, slots, n, row, k_cache, v_cache, stream, pdl);
    case DType::FP8_E4M3: return kv_store_typed<Fp8E4M3>(k, v, slots, n, row, k_cache, v_cache, stream, pdl);
    case DType::FP8_E5M2: return kv_store_typed<Fp8E5M2>(k, v, slots, n, row, k_cache, v_cache, stream, pdl);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t launch_kv_store2_i8(const float* k, const float* v, const int32_t* slots, int n,
                                int n_kv_heads, int head_dim, int8_t* k_cache, int8_t* v_cache,
                                float* k_scales, float* v_scales, cudaStream_t stream, bool pdl) {
  if (n == 0) return cudaSuccess;
  if (!k_scales || (v && !v_scales) || n_kv_heads <= 0 || head_dim <= 0) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(n), v ? 2u : 1u);
  return launch_kernel(kv_store_i8_kernel, grid, dim3(kThreads), 0, stream, pdl, k, k_cache, k_scales, v, v_cache,
                       v_scales, slots, n_kv_heads, head_dim);
}

}  // namespace ember::cuda
