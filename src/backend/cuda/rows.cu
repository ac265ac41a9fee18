#include "backend/cuda/device_util.cuh"
#include "backend/cuda/rows.cuh"

namespace ember::cuda {

namespace {

constexpr int kThreads = 256;

// One block per output row.
template <typename T>
__global__ void get_rows_kernel(const T* __restrict__ table, const int32_t* __restrict__ ids,
                                int64_t d, float* __restrict__ out) {
  const T* src = table + static_cast<int64_t>(ids[blockIdx.x]) * d;
  float* dst = out + blockIdx.x * d;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) dst[i] = to_float<T>(src[i]);
}

// One block per token; skipped slots leave the cache untouched.
template <typename T>
__global__ void kv_store_kernel(const float* __restrict__ src, const int32_t* __restrict__ slots,
                                int64_t row, T* __restrict__ cache) {
  const int32_t slot = slots[blockIdx.x];
  if (slot < 0) return;
  const float* s = src + blockIdx.x * row;
  T* d = cache + static_cast<int64_t>(slot) * row;
  for (int64_t i = threadIdx.x; i < row; i += blockDim.x) d[i] = from_float<T>(s[i]);
}

}  // namespace

cudaError_t launch_get_rows(const void* table, DType table_type, const int32_t* ids, int n,
                            int64_t d, float* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  switch (table_type) {
    case DType::F32:
      get_rows_kernel<<<n, kThreads, 0, stream>>>(static_cast<const float*>(table), ids, d, out);
      break;
    case DType::F16:
      get_rows_kernel<<<n, kThreads, 0, stream>>>(static_cast<const __half*>(table), ids, d, out);
      break;
    case DType::BF16:
      get_rows_kernel<<<n, kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(table), ids, d,
                                                  out);
      break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t launch_kv_store(const float* src, const int32_t* slots, int n, int64_t row,
                            void* cache, DType cache_type, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  switch (cache_type) {
    case DType::F32:
      kv_store_kernel<<<n, kThreads, 0, stream>>>(src, slots, row, static_cast<float*>(cache));
      break;
    case DType::F16:
      kv_store_kernel<<<n, kThreads, 0, stream>>>(src, slots, row, static_cast<__half*>(cache));
      break;
    case DType::BF16:
      kv_store_kernel<<<n, kThreads, 0, stream>>>(src, slots, row,
                                                  static_cast<__nv_bfloat16*>(cache));
      break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace ember::cuda
