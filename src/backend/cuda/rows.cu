#include "backend/cuda/device_util.cuh"
#include "backend/cuda/rows.cuh"

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

cudaError_t launch_kv_store2(const float* k, const float* v, const int32_t* slots, int n,
                             int64_t row, void* k_cache, void* v_cache, DType cache_type,
                             cudaStream_t stream, bool pdl) {
  if (n == 0) return cudaSuccess;
  switch (cache_type) {
    case DType::F32: return kv_store_typed<float>(k, v, slots, n, row, k_cache, v_cache, stream, pdl);
    case DType::F16: return kv_store_typed<__half>(k, v, slots, n, row, k_cache, v_cache, stream, pdl);
    case DType::BF16:
      return kv_store_typed<__nv_bfloat16>(k, v, slots, n, row, k_cache, v_cache, stream, pdl);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace ember::cuda
