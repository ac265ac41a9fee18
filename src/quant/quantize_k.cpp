// Simple round-to-nearest quantizers for the k-quant weight formats (Q4_K, Q5_K, Q6_K).
// Not GGML's iterative search: min-max scales per sub-block, then 6-bit (8-bit for Q6_K)
// super-block quantization of those scales, then every element rounded against the scale it
// will actually be decoded with. Good enough for tests and `ember quantize` fixtures.
#include "quant/blocks.h"
#include "quant/dequantize_impl.h"

#include "core/half.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace ember::quant::detail {

namespace {
// Value of f after a round trip through f16 (what decoders will see).
float through_f16(float f) { return f16_to_f32(f32_to_f16(f)); }

int quantize_clamped(float v, float scale, int lo, int hi) {
  if (scale == 0.0f) return std::clamp(0, lo, hi);
  return std::clamp(nearest_int(v / scale), lo, hi);
}

// Asymmetric 256-element super-block with 8 sub-blocks of 32 and levels 0..n_levels-1:
// x ~= d*sc[j]*q - dmin*m[j]. Writes q (one per element), packed 6-bit scales, d and dmin.
void quantize_asym_superblock(const float* x, int n_levels, uint8_t* q, uint8_t* packed,
                              f16_t* d_out, f16_t* dmin_out) {
  float scale[8], min[8];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float lo = 0.0f, hi = xs[0];  // lo <= 0: the min is stored as a non-negative offset
    for (int l = 0; l < 32; ++l) {
      lo = std::min(lo, xs[l]);
      hi = std::max(hi, xs[l]);
    }
    scale[j] = (hi - lo) / static_cast<float>(n_levels - 1);
    min[j] = -lo;
    max_scale = std::max(max_scale, scale[j]);
    max_min = std::max(max_min, min[j]);
  }
  *d_out = f32_to_f16(max_scale / 63.0f);
  *dmin_out = f32_to_f16(max_min / 63.0f);
  const float d = f16_to_f32(*d_out), dmin = f16_to_f32(*dmin_out);
  uint8_t sc[8], m[8];
  for (int j = 0; j < 8; ++j) {
    m[j] = static_cast<uint8_t>(quantize_clamped(min[j], dmin, 0, 63));
    const float offset = dmin * m[j];
    // Re-fit the scale to the range left after the quantized min.
    float hi = 0.0f;
    for (int l = 0; l < 32; ++l) hi = std::max(hi, x[32 * j + l] + offset);
    const float wanted = hi / static_cast<float>(n_levels - 1);
    sc[j] = static_cast<uint8_t>(quantize_clamped(wanted, d, 0, 63));
    const float ds = d * sc[j];
    for (int l = 0; l < 32; ++l) {
      q[32 * j + l] =
          static_cast<uint8_t>(quantize_clamped(x[32 * j + l] + offset, ds, 0, n_levels - 1));
    }
  }
  std::memset(packed, 0, kKScaleSize);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      packed[j] = sc[j];
      packed[j + 4] = m[j];
    } else {
      packed[j + 4] = static_cast<uint8_t>((sc[j] & 0xf) | ((m[j] & 0xf) << 4));
      packed[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);
      packed[j] |= static_cast<uint8_t>((m[j] >> 4) << 6);
    }
  }
}
}  // namespace

void quantize_q4_k(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ4_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    uint8_t q[kQK_K];
    quantize_asym_superblock(x, 16, q, y[i].scales, &y[i].d, &y[i].dmin);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        y[i].qs[32 * c + l] = static_cast<uint8_t>(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
      }
    }
  }
}

void quantize_q5_k(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ5_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    uint8_t q[kQK_K];
    quantize_asym_superblock(x, 32, q, y[i].scales, &y[i].d, &y[i].dmin);
    std::memset(y[i].qh, 0, sizeof(y[i].qh));
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t lo = q[64 * c + l], hi = q[64 * c + 32 + l];
        y[i].qs[32 * c + l] = static_cast<uint8_t>((lo & 0xf) | ((hi & 0xf) << 4));
        y[i].qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
      }
    }
  }
}

void quantize_q6_k(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ6_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    // Symmetric sub-blocks of 16: the largest magnitude maps to -32 (the one level whose
    // negation does not fit), as GGML's Q6_K does.
    float scale[16];
    float max_abs_scale = 0.0f;
    for (int j = 0; j < 16; ++j) {
      float amax = 0.0f, max = 0.0f;
      for (int l = 0; l < 16; ++l) {
        if (amax < std::fabs(x[16 * j + l])) {
          amax = std::fabs(x[16 * j + l]);
          max = x[16 * j + l];
        }
      }
      scale[j] = max / -32.0f;
      max_abs_scale = std::max(max_abs_scale, std::fabs(scale[j]));
    }
    y[i].d = f32_to_f16(max_abs_scale / 127.0f);
    const float d = through_f16(max_abs_scale / 127.0f);
    uint8_t level[kQK_K];  // q + 32 in 0..63
    for (int j = 0; j < 16; ++j) {
      y[i].scales[j] = static_cast<int8_t>(quantize_clamped(scale[j], d, -127, 127));
      const float ds = d * y[i].scales[j];
      for (int l = 0; l < 16; ++l) {
        level[16 * j + l] = static_cast<uint8_t>(quantize_clamped(x[16 * j + l], ds, -32, 31) + 32);
      }
    }
    for (int h = 0; h < 2; ++h) {
      const uint8_t* lv = level + 128 * h;
      for (int l = 0; l < 32; ++l) {
        y[i].ql[64 * h + l] = static_cast<uint8_t>((lv[l] & 0xf) | ((lv[l + 64] & 0xf) << 4));
        y[i].ql[64 * h + l + 32] =
            static_cast<uint8_t>((lv[l + 32] & 0xf) | ((lv[l + 96] & 0xf) << 4));
        y[i].qh[32 * h + l] = static_cast<uint8_t>((lv[l] >> 4) | ((lv[l + 32] >> 4) << 2) |
                                                   ((lv[l + 64] >> 4) << 4) |
                                                   ((lv[l + 96] >> 4) << 6));
      }
    }
  }
}

}  // namespace ember::quant::detail
