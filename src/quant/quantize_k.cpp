// Quantizers for the k-quant weight formats (Q4_K, Q5_K, Q6_K). Each sub-block's scale (and
// min) is fitted by a small search: several candidate scales around the min-max one each give
// a rounding, the weighted least-squares scale/min for that rounding is solved in closed form,
// and the candidate with the lowest weighted error wins (weights favour large elements, which
// dominate a matmul's error). The sub-block scales are then quantized to 6 bits (8 for Q6_K)
// against the super-block scale, and every element is rounded against the scale it will
// actually be decoded with.
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

// Importance of each element of a sub-block: its square plus the sub-block's mean square, so
// small elements still count.
void element_weights(const float* x, int n, float* w) {
  float ms = 0.0f;
  for (int l = 0; l < n; ++l) ms += x[l] * x[l];
  ms /= static_cast<float>(n);
  for (int l = 0; l < n; ++l) w[l] = x[l] * x[l] + ms;
}

// Fits x ~= scale * q + mn with q in 0..n_levels-1 and mn <= 0 for one sub-block of n elements.
void fit_asym(const float* x, const float* w, int n, int n_levels, float* scale_out, float* mn_out) {
  float lo = 0.0f, hi = x[0];
  for (int l = 0; l < n; ++l) {
    lo = std::min(lo, x[l]);
    hi = std::max(hi, x[l]);
  }
  const int nmax = n_levels - 1;
  float best_scale = (hi - lo) / static_cast<float>(nmax), best_mn = lo;
  if (hi <= lo) {
    *scale_out = 0.0f;
    *mn_out = lo;
    return;
  }
  auto error_of = [&](float sc, float mn) {
    float e = 0.0f;
    for (int l = 0; l < n; ++l) {
      const int q = sc > 0.0f ? std::clamp(nearest_int((x[l] - mn) / sc), 0, nmax) : 0;
      const float d = sc * static_cast<float>(q) + mn - x[l];
      e += w[l] * d * d;
    }
    return e;
  };
  float best_err = error_of(best_scale, best_mn);
  constexpr int kSteps = 24;
  for (int step = 0; step <= kSteps; ++step) {
    const float iscale = (static_cast<float>(nmax) - 1.0f + 0.1f * static_cast<float>(step)) / (hi - lo);
    float sw = 0, swq = 0, swq2 = 0, swx = 0, swqx = 0;
    for (int l = 0; l < n; ++l) {
      const float q = static_cast<float>(std::clamp(nearest_int(iscale * (x[l] - lo)), 0, nmax));
      sw += w[l];
      swq += w[l] * q;
      swq2 += w[l] * q * q;
      swx += w[l] * x[l];
      swqx += w[l] * q * x[l];
    }
    const float det = sw * swq2 - swq * swq;
    if (det <= 0.0f) continue;
    float sc = (sw * swqx - swx * swq) / det;
    float mn = (swq2 * swx - swq * swqx) / det;
    if (mn > 0.0f) {  // the format's offset only subtracts
      mn = 0.0f;
      sc = swq2 > 0.0f ? swqx / swq2 : 0.0f;
    }
    if (sc <= 0.0f) continue;
    const float e = error_of(sc, mn);
    if (e < best_err) {
      best_err = e;
      best_scale = sc;
      best_mn = mn;
    }
  }
  *scale_out = best_scale;
  *mn_out = best_mn;
}

// Asymmetric 256-element super-block with 8 sub-blocks of 32 and levels 0..n_levels-1:
// x ~= d*sc[j]*q - dmin*m[j]. Writes q (one per element), packed 6-bit scales, d and dmin.
void quantize_asym_superblock(const float* x, int n_levels, uint8_t* q, uint8_t* packed,
                              f16_t* d_out, f16_t* dmin_out) {
  float scale[8], min[8];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < 8; ++j) {
    float w[32], mn = 0.0f;
    element_weights(x + 32 * j, 32, w);
    fit_asym(x + 32 * j, w, 32, n_levels, &scale[j], &mn);
    min[j] = -mn;
    max_scale = std::max(max_scale, scale[j]);
    max_min = std::max(max_min, min[j]);
  }
  *d_out = f32_to_f16(max_scale / 63.0f);
  *dmin_out = f32_to_f16(max_min / 63.0f);
  const float d = f16_to_f32(*d_out), dmin = f16_to_f32(*dmin_out);
  uint8_t sc[8], m[8];
  for (int j = 0; j < 8; ++j) {
    m[j] = static_cast<uint8_t>(quantize_clamped(min[j], dmin, 0, 63));
    sc[j] = static_cast<uint8_t>(quantize_clamped(scale[j], d, 0, 63));
    const float offset = dmin * m[j];
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

// Fits x ~= scale * q with q in -32..31 for one sub-block of 16 (Q6_K); scale may be negative
// so that the largest magnitude can use level -32.
float fit_sym6(const float* x, const float* w) {
  float amax = 0.0f, max = 0.0f;
  for (int l = 0; l < 16; ++l) {
    if (amax < std::fabs(x[l])) {
      amax = std::fabs(x[l]);
      max = x[l];
    }
  }
  if (amax == 0.0f) return 0.0f;
  float best = max / -32.0f, best_err = 0.0f;
  auto error_of = [&](float sc) {
    float e = 0.0f;
    for (int l = 0; l < 16; ++l) {
      const float d = sc * static_cast<float>(quantize_clamped(x[l], sc, -32, 31)) - x[l];
      e += w[l] * d * d;
    }
    return e;
  };
  best_err = error_of(best);
  for (int step = -9; step <= 9; ++step) {
    const float iscale = -(32.0f + 0.1f * static_cast<float>(step)) / max;
    float swqx = 0, swq2 = 0;
    for (int l = 0; l < 16; ++l) {
      const float q = static_cast<float>(std::clamp(nearest_int(iscale * x[l]), -32, 31));
      swqx += w[l] * q * x[l];
      swq2 += w[l] * q * q;
    }
    if (swq2 <= 0.0f) continue;
    const float sc = swqx / swq2;
    const float e = error_of(sc);
    if (e < best_err) {
      best_err = e;
      best = sc;
    }
  }
  return best;
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
    // Symmetric sub-blocks of 16, fitted as above; the largest magnitude may use level -32.
    float scale[16];
    float max_abs_scale = 0.0f;
    for (int j = 0; j < 16; ++j) {
      float w[16];
      element_weights(x + 16 * j, 16, w);
      scale[j] = fit_sym6(x + 16 * j, w);
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
