// Fallback paged attention: one warp per (query token, head), keys one at a time with an
// online softmax. Slow (a warp reduction per key) but it takes any K/V dtype and any
// head_dim up to 256, so every model runs while the tensor-core kernels cover the common
// shapes. INT8 K/V carries one float scale per (slot, head) row (PagedAttnArgs::k_scales /
// v_scales, the CPU cache's layout): q.k is summed over the int8 values and scaled once, and
// v's scale goes into the softmax weight, so the result is the CPU's over the dequantized rows
// up to F32 rounding.
#include "backend/cuda/attention.cuh"
#include "backend/cuda/device_util.cuh"

#include <type_traits>

namespace ember::cuda {

namespace {

constexpr int kMaxDimPerLane = 8;  // head_dim <= 256
constexpr int kWarps = 4;

// A cached element as float (int8: the unscaled value; the row's scale is applied by the caller).
template <typename T>
__device__ __forceinline__ float kv_value(T x) {
  if constexpr (std::is_same_v<T, int8_t>) return static_cast<float>(x);
  else return to_float<T>(x);
}

template <typename T>
__global__ void __launch_bounds__(kWarps * 32) paged_attn_simple_kernel(const PagedAttnArgs a) {
  constexpr bool kI8 = std::is_same_v<T, int8_t>;
  const int lane = threadIdx.x % 32;
  const int idx = blockIdx.x * kWarps + threadIdx.x / 32;  // token * n_heads + head
  const int seq = a.seq_ids[blockIdx.z];
  const int q0 = a.query_start[seq];
  const int n_new = a.query_start[seq + 1] - q0;
  const int j = idx / a.n_heads, h = idx % a.n_heads;
  if (j >= n_new) return;
  const int D = a.head_dim;
  const int kh = h / (a.n_heads / a.n_kv_heads);
  const int pos = a.seq_lens[seq] - n_new + j;
  const int lo = a.window > 0 ? max(0, pos - a.window + 1) : 0;
  const float* q = a.q + (static_cast<size_t>(q0 + j) * a.n_heads + h) * D;
  float qv[kMaxDimPerLane], acc[kMaxDimPerLane];
#pragma unroll
  for (int i = 0; i < kMaxDimPerLane; ++i) {
    const int d = lane + 32 * i;
    qv[i] = d < D ? q[d] : 0.0f;
    acc[i] = 0.0f;
  }
  const int32_t* bt = a.block_tables + static_cast<size_t>(seq) * a.max_blocks_per_seq;
  const int bs = a.block_size;
  const T* kb = static_cast<const T*>(a.k);
  const T* vb = static_cast<const T*>(a.v);
  float m = -INFINITY, l = 0.0f;
  for (int key = lo; key <= pos; ++key) {
    const size_t block = static_cast<size_t>(bt[key / bs]), offset = static_cast<size_t>(key % bs);
    const size_t row = (block * bs + offset) * a.n_kv_heads + kh;
    const T* kr = kb + row * D;
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < kMaxDimPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < D) s += qv[i] * kv_value<T>(kr[d]);
    }
    s = warp_sum(s);
    if constexpr (kI8) s *= a.k_scales[row];
    s *= a.scale;
    if (a.softcap > 0.0f) s = a.softcap * tanhf(s / a.softcap);
    const float mn = fmaxf(m, s);
    const float c = expf(m - mn), p = expf(s - mn);
    l = l * c + p;
    const T* vr = vb + row * D;
    float pv = p;  // the weight of this key's v row as stored
    if constexpr (kI8) pv *= a.v_scales[row];
#pragma unroll
    for (int i = 0; i < kMaxDimPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < D) acc[i] = acc[i] * c + pv * kv_value<T>(vr[d]);
    }
    m = mn;
  }
  float* out = a.out + (static_cast<size_t>(q0 + j) * a.n_heads + h) * D;
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
  for (int i = 0; i < kMaxDimPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < D) out[d] = acc[i] * inv;
  }
}

}  // namespace

bool attention_simple_supported(DType kv_type, int head_dim) {
  return (kv_type == DType::F32 || kv_type == DType::F16 || kv_type == DType::BF16 ||
          kv_type == DType::FP8_E4M3 || kv_type == DType::FP8_E5M2 || kv_type == DType::I8) &&
         head_dim > 0 && head_dim <= 32 * kMaxDimPerLane;
}

cudaError_t launch_paged_attention_simple(const PagedAttnArgs& a, cudaStream_t stream) {
  if (a.n_launch_seqs == 0 || a.max_new == 0) return cudaSuccess;
  if (!attention_simple_supported(a.kv_type, a.head_dim)) return cudaErrorInvalidValue;
  if (a.kv_type == DType::I8 && (!a.k_scales || !a.v_scales)) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>((a.max_new * a.n_heads + kWarps - 1) / kWarps), 1,
                  static_cast<unsigned>(a.n_launch_seqs));
  switch (a.kv_type) {
    case DType::F32: paged_attn_simple_kernel<float><<<grid, kWarps * 32, 0, stream>>>(a); break;
    case DType::F16: paged_attn_simple_kernel<__half><<<grid, kWarps * 32, 0, stream>>>(a); break;
    case DType::BF16:
      paged_attn_simple_kernel<__nv_bfloat16><<<grid, kWarps * 32, 0, stream>>>(a);
      break;
    case DType::FP8_E4M3: paged_attn_simple_kernel<Fp8E4M3><<<grid, kWarps * 32, 0, stream>>>(a); break;
    case DType::FP8_E5M2: paged_attn_simple_kernel<Fp8E5M2><<<grid, kWarps * 32, 0, stream>>>(a); break;
    case DType::I8: paged_attn_simple_kernel<int8_t><<<grid, kWarps * 32, 0, stream>>>(a); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace ember::cuda
