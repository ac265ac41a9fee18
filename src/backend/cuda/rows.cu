#include "backend/cuda/device_util.cuh"
#include "backend/cuda/rows.cuh"

#include <algorithm>

namespace ember::cuda {

namespace {

constexpr int kThreads = 256;

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

// RoPE of q [n, hq, D] and k [n, hk, D] in place (rotary_dim == D), and the rotated k and
// v [n, hk, D] stored into the caches at slots (< 0 skipped): one thread per rotated pair,
// then one per v element.
template <typename T>
__global__ void rope_kv_store_kernel(float* q, int hq, float* k, const float* __restrict__ v, int hk,
                                     const int32_t* __restrict__ positions,
                                     const float* __restrict__ inv_freq,
                                     const int32_t* __restrict__ slots, int64_t n, int D, bool neox,
                                     float factor, T* __restrict__ k_cache, T* __restrict__ v_cache) {
  pdl_wait();
  pdl_launch_dependents();
  const int half = D / 2, heads = hq + hk;
  const int64_t row = static_cast<int64_t>(hk) * D;
  const int64_t n_rope = n * heads * half, total = n_rope + n * row;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    if (idx < n_rope) {
      const int i = static_cast<int>(idx % half);
      const int64_t th = idx / half;  // token * heads + head
      const int64_t t = th / heads;
      const int h = static_cast<int>(th % heads);
      float* x = h < hq ? q + (t * hq + h) * D : k + (t * hk + (h - hq)) * D;
      const float theta = static_cast<float>(positions[t]) * inv_freq[i];
      float sn, cs;
      sincosf(theta, &sn, &cs);
      cs *= factor;
      sn *= factor;
      const int i0 = neox ? i : 2 * i;
      const int i1 = neox ? i + half : 2 * i + 1;
      const float a = x[i0], b = x[i1];
      const float r0 = a * cs - b * sn, r1 = a * sn + b * cs;
      x[i0] = r0;
      x[i1] = r1;
      if (h >= hq) {
        const int32_t slot = slots[t];
        if (slot >= 0) {
          T* c = k_cache + static_cast<int64_t>(slot) * row + static_cast<int64_t>(h - hq) * D;
          c[i0] = from_float<T>(r0);
          c[i1] = from_float<T>(r1);
        }
      }
    } else {
      const int64_t e = idx - n_rope, t = e / row, r = e % row;
      const int32_t slot = slots[t];
      if (slot >= 0) v_cache[static_cast<int64_t>(slot) * row + r] = from_float<T>(v[t * row + r]);
    }
  }
}

template <typename T>
cudaError_t rope_kv_store_typed(const RopeKvStoreArgs& a, cudaStream_t stream, bool pdl) {
  const int64_t total = a.n * (a.hq + a.hk) * (a.head_dim / 2) + a.n * a.hk * a.head_dim;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((total + kThreads - 1) / kThreads, 65535 * 4));
  return launch_kernel(rope_kv_store_kernel<T>, dim3(blocks), dim3(kThreads), 0, stream, pdl, a.q, a.hq,
                       a.k, a.v, a.hk, a.positions, a.inv_freq, a.slots, a.n, a.head_dim, a.neox,
                       a.factor, static_cast<T*>(a.k_cache), static_cast<T*>(a.v_cache));
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

}  // namespace ember::cuda
