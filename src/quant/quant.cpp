// Dispatch of quant.h onto the per-format reference kernels.
#include "quant/quant.h"

#include "core/check.h"
#include "core/half.h"
#include "quant/dequantize_impl.h"
#include "quant/fp8.h"

#include <cstring>

namespace ember::quant {

bool can_dequantize(DType t) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16:
    case DType::Q4_0: case DType::Q4_1: case DType::Q5_0: case DType::Q5_1:
    case DType::Q8_0: case DType::Q8_1:
    case DType::Q2_K: case DType::Q3_K: case DType::Q4_K: case DType::Q5_K: case DType::Q6_K:
    case DType::Q8_K:
    case DType::FP8_E4M3: case DType::FP8_E5M2:
      return true;
    default:
      return false;
  }
}

bool can_quantize(DType t) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16:
    case DType::Q4_0: case DType::Q4_1: case DType::Q5_0: case DType::Q5_1:
    case DType::Q8_0: case DType::Q8_1:
    case DType::Q4_K: case DType::Q5_K: case DType::Q6_K: case DType::Q8_K:
    case DType::FP8_E4M3: case DType::FP8_E5M2:
      return true;
    default:
      return false;
  }
}

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  EMBER_CHECK(can_dequantize(t), "dequantize_row: unsupported dtype {}", dtype_name(t));
  EMBER_CHECK(n % dtype_block_size(t) == 0, "dequantize_row: n={} not a multiple of {}", n,
              dtype_block_size(t));
  const auto* bytes = static_cast<const uint8_t*>(src);
  switch (t) {
    case DType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, bytes + 2 * i, 2);
        dst[i] = f16_to_f32(h);
      }
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, bytes + 2 * i, 2);
        dst[i] = bf16_to_f32(h);
      }
      return;
    case DType::FP8_E4M3:
      for (int64_t i = 0; i < n; ++i) dst[i] = fp8_e4m3_to_f32(bytes[i]);
      return;
    case DType::FP8_E5M2:
      for (int64_t i = 0; i < n; ++i) dst[i] = fp8_e5m2_to_f32(bytes[i]);
      return;
    case DType::Q4_0: detail::dequantize_q4_0(src, dst, n); return;
    case DType::Q4_1: detail::dequantize_q4_1(src, dst, n); return;
    case DType::Q5_0: detail::dequantize_q5_0(src, dst, n); return;
    case DType::Q5_1: detail::dequantize_q5_1(src, dst, n); return;
    case DType::Q8_0: detail::dequantize_q8_0(src, dst, n); return;
    case DType::Q8_1: detail::dequantize_q8_1(src, dst, n); return;
    case DType::Q2_K: detail::dequantize_q2_k(src, dst, n); return;
    case DType::Q3_K: detail::dequantize_q3_k(src, dst, n); return;
    case DType::Q4_K: detail::dequantize_q4_k(src, dst, n); return;
    case DType::Q5_K: detail::dequantize_q5_k(src, dst, n); return;
    case DType::Q6_K: detail::dequantize_q6_k(src, dst, n); return;
    case DType::Q8_K: detail::dequantize_q8_k(src, dst, n); return;
    default: return;
  }
}

void quantize_row(DType t, const float* src, void* dst, int64_t n) {
  EMBER_CHECK(can_quantize(t), "quantize_row: unsupported dtype {}", dtype_name(t));
  EMBER_CHECK(n % dtype_block_size(t) == 0, "quantize_row: n={} not a multiple of {}", n,
              dtype_block_size(t));
  auto* bytes = static_cast<uint8_t*>(dst);
  switch (t) {
    case DType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_f16(src[i]);
        std::memcpy(bytes + 2 * i, &h, 2);
      }
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_bf16(src[i]);
        std::memcpy(bytes + 2 * i, &h, 2);
      }
      return;
    case DType::FP8_E4M3:
      for (int64_t i = 0; i < n; ++i) bytes[i] = f32_to_fp8_e4m3(src[i]);
      return;
    case DType::FP8_E5M2:
      for (int64_t i = 0; i < n; ++i) bytes[i] = f32_to_fp8_e5m2(src[i]);
      return;
    case DType::Q4_0: detail::quantize_q4_0(src, dst, n); return;
    case DType::Q4_1: detail::quantize_q4_1(src, dst, n); return;
    case DType::Q5_0: detail::quantize_q5_0(src, dst, n); return;
    case DType::Q5_1: detail::quantize_q5_1(src, dst, n); return;
    case DType::Q8_0: detail::quantize_q8_0(src, dst, n); return;
    case DType::Q8_1: detail::quantize_q8_1(src, dst, n); return;
    case DType::Q4_K: detail::quantize_q4_k(src, dst, n); return;
    case DType::Q5_K: detail::quantize_q5_k(src, dst, n); return;
    case DType::Q6_K: detail::quantize_q6_k(src, dst, n); return;
    case DType::Q8_K: detail::quantize_q8_k(src, dst, n); return;
    default: return;
  }
}

}  // namespace ember::quant
