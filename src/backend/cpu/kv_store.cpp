// kv_store and the per-dtype row codecs of the paged K/V cache.
#include "backend/cpu/context.h"
#include "backend/cpu/kv_cache_format.h"
#include "core/half.h"
#include "quant/fp8.h"

#include <cmath>
#include <cstring>

namespace ember::cpu {

bool kv_dtype_supported(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::I8 || t == DType::FP8_E4M3 ||
         t == DType::FP8_E5M2;
}

namespace {
float amax_of(const float* x, int n) {
  float a = 0.0f;
  for (int i = 0; i < n; ++i) a = std::fmax(a, std::fabs(x[i]));
  return a;
}
}  // namespace

void kv_write_head(const KernelTable& kt, const Tensor& cache, float* scales, int64_t slot, int n_kv_heads, int h, int head_dim,
                   const float* src) {
  const int64_t e0 = (slot * n_kv_heads + h) * head_dim;  // element offset
  switch (cache.dtype) {
    case DType::F32:
      std::memcpy(static_cast<float*>(cache.data) + e0, src, sizeof(float) * static_cast<size_t>(head_dim));
      break;
    case DType::F16: {
      kt.f32_to_f16(src, static_cast<uint16_t*>(cache.data) + e0, head_dim);
      break;
    }
    case DType::BF16: {
      auto* d = static_cast<uint16_t*>(cache.data) + e0;
      for (int i = 0; i < head_dim; ++i) d[i] = f32_to_bf16(src[i]);
      break;
    }
    case DType::I8: {
      auto* d = static_cast<int8_t*>(cache.data) + e0;
      const float s = amax_of(src, head_dim) / 127.0f;
      const float inv = s != 0.0f ? 1.0f / s : 0.0f;
      for (int i = 0; i < head_dim; ++i) d[i] = static_cast<int8_t>(std::lround(src[i] * inv));
      scales[slot * n_kv_heads + h] = s;
      break;
    }
    case DType::FP8_E4M3:
    case DType::FP8_E5M2: {
      auto* d = static_cast<uint8_t*>(cache.data) + e0;
      const bool e4m3 = cache.dtype == DType::FP8_E4M3;
      float inv = 1.0f;
      if (scales) {  // per-head scale so the largest magnitude lands on the format's max
        const float s = amax_of(src, head_dim) / (e4m3 ? 448.0f : 57344.0f);
        inv = s != 0.0f ? 1.0f / s : 0.0f;
        scales[slot * n_kv_heads + h] = s;
      }
      for (int i = 0; i < head_dim; ++i)
        d[i] = e4m3 ? quant::f32_to_fp8_e4m3(src[i] * inv) : quant::f32_to_fp8_e5m2(src[i] * inv);
      break;
    }
    default: EMBER_CHECK(false, "kv cache dtype {} unsupported", dtype_name(cache.dtype));
  }
}

void kv_read_head(const KernelTable& kt, const Tensor& cache, const float* scales, int64_t slot, int n_kv_heads,
                  int h, int head_dim, float* dst) {
  const int64_t e0 = (slot * n_kv_heads + h) * head_dim;
  switch (cache.dtype) {
    case DType::F32:
      std::memcpy(dst, static_cast<const float*>(cache.data) + e0, sizeof(float) * static_cast<size_t>(head_dim));
      break;
    case DType::F16: kt.f16_to_f32(static_cast<const uint16_t*>(cache.data) + e0, dst, head_dim); break;
    case DType::BF16: {
      const auto* s = static_cast<const uint16_t*>(cache.data) + e0;
      for (int i = 0; i < head_dim; ++i) dst[i] = bf16_to_f32(s[i]);
      break;
    }
    case DType::I8: {
      const auto* s = static_cast<const int8_t*>(cache.data) + e0;
      const float sc = scales[slot * n_kv_heads + h];
      for (int i = 0; i < head_dim; ++i) dst[i] = sc * static_cast<float>(s[i]);
      break;
    }
    case DType::FP8_E4M3:
    case DType::FP8_E5M2: {
      const auto* s = static_cast<const uint8_t*>(cache.data) + e0;
      const float sc = scales ? scales[slot * n_kv_heads + h] : 1.0f;
      const bool e4m3 = cache.dtype == DType::FP8_E4M3;
      for (int i = 0; i < head_dim; ++i)
        dst[i] = sc * (e4m3 ? quant::fp8_e4m3_to_f32(s[i]) : quant::fp8_e5m2_to_f32(s[i]));
      break;
    }
    default: EMBER_CHECK(false, "kv cache dtype {} unsupported", dtype_name(cache.dtype));
  }
}

void cpu_kv_store(CpuContext& ctx, KvLayer& kv, const Tensor& k, const Tensor& v, const int32_t* slots) {
  EMBER_CHECK(kv_dtype_supported(kv.k.dtype) && kv_dtype_supported(kv.v.dtype), "kv_store: cache dtypes {} / {}",
              dtype_name(kv.k.dtype), dtype_name(kv.v.dtype));
  EMBER_CHECK(k.dtype == DType::F32 && v.dtype == DType::F32, "kv_store: k, v must be F32");
  EMBER_CHECK(kv.k.n_dims == 4 && kv.v.n_dims == 4, "kv_store: cache must be [n_blocks, block_size, heads, dim]");
  const int n_kv_heads = static_cast<int>(kv.k.dim(2));
  const int head_dim = static_cast<int>(kv.k.dim(3));
  const int64_t n_slots = kv.k.dim(0) * kv.k.dim(1);
  EMBER_CHECK(kv.k.dim(1) == kv.block_size && kv.v.dim(1) == kv.block_size, "kv_store: block_size mismatch");
  EMBER_CHECK(kv.v.dim(2) == n_kv_heads && kv.v.dim(3) == head_dim && kv.v.dim(0) * kv.v.dim(1) == n_slots,
              "kv_store: k cache {} vs v cache {}", shape_string(kv.k), shape_string(kv.v));
  EMBER_CHECK(kv.k.dtype != DType::I8 || kv.k_scales, "kv_store: INT8 K cache needs scales");
  EMBER_CHECK(kv.v.dtype != DType::I8 || kv.v_scales, "kv_store: INT8 V cache needs scales");
  const int64_t row = static_cast<int64_t>(n_kv_heads) * head_dim;
  const int64_t n = k.dim(0);
  EMBER_CHECK(k.numel() == n * row && v.numel() == n * row, "kv_store: k {} v {} for {} heads x {}",
              shape_string(k), shape_string(v), n_kv_heads, head_dim);
  const float* pk = k.as<float>();
  const float* pv = v.as<float>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t slot = slots[i];
    if (slot < 0) continue;
    EMBER_CHECK(slot < n_slots, "kv_store: slot {} out of {} slots", slot, n_slots);
    for (int h = 0; h < n_kv_heads; ++h) {
      kv_write_head(ctx.kt, kv.k, kv.k_scales, slot, n_kv_heads, h, head_dim, pk + i * row + h * head_dim);
      kv_write_head(ctx.kt, kv.v, kv.v_scales, slot, n_kv_heads, h, head_dim, pv + i * row + h * head_dim);
    }
  }
}

}  // namespace ember::cpu
