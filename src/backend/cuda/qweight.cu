// Packed int4 / FP8 / int8 weights (layout in qgemv.cuh): load-time quantization on the GPU,
// dequantization to dense rows (get_rows, and the BF16 GEMM of large batches), and the
// per-row FP8 quantization of activations with the scale epilogue of the FP8 cuBLASLt GEMM.
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/fp8_rows.cuh"
#include "backend/cuda/qgemv.cuh"

#include <cuda_fp8.h>

namespace ember::cuda {

namespace {

__device__ __forceinline__ float load_src(const void* src, int type, int64_t i) {
  if (type == 0) return static_cast<const float*>(src)[i];
  if (type == 1) return __half2float(static_cast<const __half*>(src)[i]);
  return __bfloat162float(static_cast<const __nv_bfloat16*>(src)[i]);
}

// One warp per (row, group of 128): each lane quantizes 4 consecutive elements and the
// even/odd lane pair assembles one u32 word of the row.
__global__ void pack_int4_kernel(int src_type, const void* src, int64_t r0, int64_t nr, int64_t m,
                                 int64_t k, int64_t n_groups, uint8_t* dst) {
  const int lane = threadIdx.x % 32;
  const int64_t task = blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32;
  if (task >= nr * n_groups) return;
  const int64_t r = task / n_groups, grp = task % n_groups;
  const int64_t k0 = grp * kQGroup + lane * 4;
  float v[4];
  float big = 0.0f;  // the element of largest magnitude, with its sign
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[i] = k0 + i < k ? load_src(src, src_type, r * k + k0 + i) : 0.0f;
    if (fabsf(v[i]) > fabsf(big)) big = v[i];
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, big, o);
    if (fabsf(other) > fabsf(big) || (fabsf(other) == fabsf(big) && other < big)) big = other;
  }
  const __nv_bfloat16 d = __float2bfloat16_rn(big / -8.0f);
  const float df = __bfloat162float(d);
  const float id = df != 0.0f ? 1.0f / df : 0.0f;
  const int64_t row = r0 + r;
  if (lane == 0) {
    auto* scales = reinterpret_cast<__nv_bfloat16*>(dst + qweight_scales_offset(QFormat::Int4, m, k));
    scales[qweight_int4_scale_index(n_groups, row, grp)] = d;
  }
  // Lane L holds elements 4L..4L+3 of the group: slice L / 8, word (L % 8) / 2, pairs
  // p0 = 2 (L % 2) and p0 + 1 (elements e, e+1 -> pair p0; e+2, e+3 -> pair p0 + 1).
  uint32_t word = 0;
  const int p0 = 2 * (lane % 2);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int q = min(15, max(0, __float2int_rn(v[i] * id) + 8));
    const int p = p0 + i / 2;
    word |= static_cast<uint32_t>(q) << (4 * p + 16 * (i % 2));
  }
  word |= __shfl_xor_sync(0xffffffffu, word, 1);
  if (lane % 2 == 0) {
    uint8_t* rowp = dst + row * static_cast<int64_t>(qweight_row_bytes(QFormat::Int4, k));
    const int64_t off = grp * 64 + (lane / 8) * 16 + ((lane % 8) / 2) * 4;
    *reinterpret_cast<uint32_t*>(rowp + off) = word;
  }
}

// One block per row: max |row| -> scale (fp8: / 448, int8: / 127), then the e4m3 (saturating) /
// int8 (round to nearest even, [-127, 127]) bytes of value * (1 / scale), zero padded to k_pad.
template <QFormat F>
__global__ void pack_row_kernel(int src_type, const void* src, int64_t r0, int64_t m, int64_t k,
                                int64_t k_pad, uint8_t* dst) {
  __shared__ float s_tmp[32];
  const int64_t r = blockIdx.x, row = r0 + r;
  float mx = 0.0f;
  for (int64_t i = threadIdx.x; i < k; i += blockDim.x) mx = fmaxf(mx, fabsf(load_src(src, src_type, r * k + i)));
  mx = block_max(mx, s_tmp);
  const float scale = mx > 0.0f ? mx / (F == QFormat::Int8 ? 127.0f : 448.0f) : 1.0f;
  const float inv = 1.0f / scale;
  if (threadIdx.x == 0)
    reinterpret_cast<float*>(dst + qweight_scales_offset(F, m, k))[row] = scale;
  uint8_t* out = dst + row * k_pad;
  for (int64_t i = threadIdx.x; i < k_pad; i += blockDim.x) {
    const float v = i < k ? load_src(src, src_type, r * k + i) * inv : 0.0f;
    if constexpr (F == QFormat::Int8)
      out[i] = static_cast<uint8_t>(static_cast<int8_t>(min(127, max(-127, __float2int_rn(v)))));
    else
      out[i] = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
  }
}

__device__ __forceinline__ float fp8_to_float(uint8_t b) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(b), __NV_E4M3);
  return __half2float(__half(h));
}

// One thread per 8 consecutive elements of an output row.
__global__ void dequant_kernel(QFormat f, const uint8_t* w, int64_t m, int64_t k, const int32_t* ids,
                               int64_t r0, int64_t n_rows, void* out, bool out_bf16) {
  const int64_t per_row = k / 8;
  const int64_t task = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  pdl_wait();
  if (task >= n_rows * per_row) return;
  const int64_t i = task / per_row, c = (task % per_row) * 8;
  const int64_t row = ids ? ids[i] : r0 + i;
  const uint8_t* rowp = w + row * static_cast<int64_t>(qweight_row_bytes(f, k));
  float v[8];
  if (f == QFormat::Int4) {
    const auto* scales = reinterpret_cast<const __nv_bfloat16*>(w + qweight_scales_offset(f, m, k));
    const float s = __bfloat162float(scales[qweight_int4_scale_index(qweight_k_pad(f, k) / kQGroup, row, c / kQGroup)]);
    // Elements c..c+7 are word (c % 32) / 8 of slice c / 32.
    const uint32_t word = *reinterpret_cast<const uint32_t*>(rowp + (c / 32) * 16 + ((c % 32) / 8) * 4);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int q = static_cast<int>((word >> (4 * (j / 2) + 16 * (j % 2))) & 15u) - 8;
      v[j] = static_cast<float>(q) * s;
    }
  } else {
    const float s = reinterpret_cast<const float*>(w + qweight_scales_offset(f, m, k))[row];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint8_t b = rowp[c + j];
      v[j] = (f == QFormat::Int8 ? static_cast<float>(static_cast<int8_t>(b)) : fp8_to_float(b)) * s;
    }
  }
  if (out_bf16) {
    uint4 o;
    o.x = pack2<__nv_bfloat16>(v[0], v[1]);
    o.y = pack2<__nv_bfloat16>(v[2], v[3]);
    o.z = pack2<__nv_bfloat16>(v[4], v[5]);
    o.w = pack2<__nv_bfloat16>(v[6], v[7]);
    *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(out) + i * k + c) = o;
  } else {
    float4* o = reinterpret_cast<float4*>(static_cast<float*>(out) + i * k + c);
    o[0] = make_float4(v[0], v[1], v[2], v[3]);
    o[1] = make_float4(v[4], v[5], v[6], v[7]);
  }
}

__global__ void quantize_rows_fp8_kernel(const float* x, int64_t k, int64_t k_pad, uint8_t* xq, float* x_scale) {
  __shared__ float s_tmp[32];
  const int64_t r = blockIdx.x;
  float mx = 0.0f;
  for (int64_t i = threadIdx.x; i < k; i += blockDim.x) mx = fmaxf(mx, fabsf(x[r * k + i]));
  mx = block_max(mx, s_tmp);
  const float scale = fp8_row_scale(mx);
  const float inv = 1.0f / scale;
  if (threadIdx.x == 0) x_scale[r] = scale;
  for (int64_t i = threadIdx.x; i < k_pad; i += blockDim.x)
    xq[r * k_pad + i] = __nv_cvt_float_to_fp8(i < k ? x[r * k + i] * inv : 0.0f, __NV_SATFINITE, __NV_E4M3);
}

// The same quantization with float4 loads kept in registers between the row maximum and the
// conversion (one read of x): rows of k % 4 == 0 up to 1024 * kVec wide. Bit-identical to the
// kernel above (same scale, same per-element rounding).
template <int kVec>
__global__ void __launch_bounds__(256) quantize_rows_fp8_vec_kernel(const float* x, int64_t k, Fp8RowsOut o) {
  __shared__ float s_tmp[32];
  const int64_t r = blockIdx.x;
  const auto* xr = reinterpret_cast<const float4*>(x + r * k);
  const int n4 = static_cast<int>(k / 4);
  float4 v[kVec];
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    const int c = static_cast<int>(threadIdx.x) + i * 256;
    if (c < n4) v[i] = xr[c];
  }
  store_row_fp8(v, n4, r, o, s_tmp);
}

__global__ void scale_rows_cols_kernel(float* out, int64_t n, int64_t m, int64_t ld, const float* x_scale,
                                       const float* w_scale, const float* bias) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n * m) return;
  const int64_t j = i / m, r = i % m;
  float& o = out[j * ld + r];
  o = o * x_scale[j] * w_scale[r] + (bias ? bias[r] : 0.0f);
}

unsigned blocks_for(int64_t n, int per_block) { return static_cast<unsigned>((n + per_block - 1) / per_block); }

}  // namespace

cudaError_t launch_qweight_pack(QFormat f, int src_type, const void* src, int64_t r0, int64_t nr,
                                int64_t m, int64_t k, void* dst, cudaStream_t stream) {
  if (nr <= 0) return cudaSuccess;
  if (src_type < 0 || src_type > 2) return cudaErrorInvalidValue;
  auto* d = static_cast<uint8_t*>(dst);
  if (f == QFormat::Int4) {
    const int64_t n_groups = qweight_k_pad(f, k) / kQGroup;
    pack_int4_kernel<<<blocks_for(nr * n_groups, 8), 256, 0, stream>>>(src_type, src, r0, nr, m, k, n_groups, d);
    if (r0 + nr == m && m % 16 != 0) {  // the last tile's rows past m: scale 0 (the GEMV reads them)
      auto* pad = reinterpret_cast<__nv_bfloat16*>(d + qweight_scales_offset(f, m, k)) +
                  qweight_int4_scale_index(n_groups, m, 0);
      const cudaError_t e = cudaMemset2DAsync(pad, 32, 0, static_cast<size_t>(16 - m % 16) * 2,
                                              static_cast<size_t>(n_groups), stream);
      if (e != cudaSuccess) return e;
    }
  } else {
    const auto grid = static_cast<unsigned>(nr);
    const int64_t k_pad = qweight_k_pad(f, k);
    if (f == QFormat::Int8) pack_row_kernel<QFormat::Int8><<<grid, 256, 0, stream>>>(src_type, src, r0, m, k, k_pad, d);
    else pack_row_kernel<QFormat::Fp8><<<grid, 256, 0, stream>>>(src_type, src, r0, m, k, k_pad, d);
  }
  return cudaGetLastError();
}

cudaError_t launch_qweight_dequant(QFormat f, const void* w, int64_t m, int64_t k, const int32_t* ids,
                                   int64_t r0, int64_t n_rows, void* out, bool out_bf16, bool pdl,
                                   cudaStream_t stream) {
  if (n_rows <= 0) return cudaSuccess;
  if (k % 8 != 0) return cudaErrorInvalidValue;
  return launch_kernel(dequant_kernel, dim3(blocks_for(n_rows * (k / 8), 256)), dim3(256), 0, stream, pdl, f,
                       static_cast<const uint8_t*>(w), m, k, ids, r0, n_rows, out, out_bf16);
}

cudaError_t launch_quantize_rows_fp8(const float* x, int64_t n, int64_t k, int64_t k_pad, void* xq,
                                     float* x_scale, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  auto* q = static_cast<uint8_t*>(xq);
  const bool vec = k % 4 == 0 && k_pad % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(q) % 4 == 0;
  const auto grid = static_cast<unsigned>(n);
  const Fp8RowsOut o{q, x_scale, k_pad};
  if (vec && k <= 1024 * 4) quantize_rows_fp8_vec_kernel<4><<<grid, 256, 0, stream>>>(x, k, o);
  else if (vec && k <= 1024 * 8) quantize_rows_fp8_vec_kernel<8><<<grid, 256, 0, stream>>>(x, k, o);
  else if (vec && k <= 1024 * 16) quantize_rows_fp8_vec_kernel<16><<<grid, 256, 0, stream>>>(x, k, o);
  else quantize_rows_fp8_kernel<<<grid, 256, 0, stream>>>(x, k, k_pad, q, x_scale);
  return cudaGetLastError();
}

cudaError_t launch_scale_rows_cols(float* out, int64_t n, int64_t m, int64_t ld, const float* x_scale,
                                   const float* w_scale, const float* bias, cudaStream_t stream) {
  if (n * m == 0) return cudaSuccess;
  scale_rows_cols_kernel<<<blocks_for(n * m, 256), 256, 0, stream>>>(out, n, m, ld, x_scale, w_scale, bias);
  return cudaGetLastError();
}

}  // namespace ember::cuda
