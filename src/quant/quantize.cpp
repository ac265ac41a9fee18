// Round-to-nearest quantizers of the 32-element formats and the activation formats, each
// following GGML's quantize_row_*_ref step by step (same float operations in the same order,
// same tie rules) so that the bytes match llama.cpp's and the gguf Python package's.
#include "quant/blocks.h"
#include "quant/dequantize_impl.h"

#include "core/half.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace ember::quant::detail {

namespace {
// The element of largest magnitude (first one on ties), sign kept.
float signed_absmax(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

float absmax(const float* x, int n) {
  float amax = 0.0f;
  for (int j = 0; j < n; ++j) amax = std::max(amax, std::fabs(x[j]));
  return amax;
}

void min_max(const float* x, int n, float* mn, float* mx) {
  *mn = x[0];
  *mx = x[0];
  for (int j = 1; j < n; ++j) {
    *mn = std::min(*mn, x[j]);
    *mx = std::max(*mx, x[j]);
  }
}

// Truncation toward zero of a value GGML casts with (int8_t), clamped to [0, hi].
uint8_t trunc_clamp(float v, int hi) {
  const int q = static_cast<int>(v);
  return static_cast<uint8_t>(std::clamp(q, 0, hi));
}
}  // namespace

void quantize_q4_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ4_0*>(dst);
  for (int64_t i = 0; i < n / kQK4_0; ++i, x += kQK4_0) {
    const float d = signed_absmax(x, kQK4_0) / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      const uint8_t q0 = trunc_clamp(x[j] * id + 8.5f, 15);
      const uint8_t q1 = trunc_clamp(x[j + kQK4_0 / 2] * id + 8.5f, 15);
      y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void quantize_q4_1(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ4_1*>(dst);
  for (int64_t i = 0; i < n / kQK4_1; ++i, x += kQK4_1) {
    float mn, mx;
    min_max(x, kQK4_1, &mn, &mx);
    const float d = (mx - mn) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    y[i].m = f32_to_f16(mn);
    for (int j = 0; j < kQK4_1 / 2; ++j) {
      const uint8_t q0 = trunc_clamp((x[j] - mn) * id + 0.5f, 15);
      const uint8_t q1 = trunc_clamp((x[j + kQK4_1 / 2] - mn) * id + 0.5f, 15);
      y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

namespace {
// Packs 32 five-bit values: low nibbles into qs (j and j+16 share a byte), 5th bits into qh.
void pack_q5(const uint8_t* q, uint8_t* qs, uint8_t* qh_bytes) {
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = static_cast<uint8_t>((q[j] & 0xf) | ((q[j + 16] & 0xf) << 4));
    qh |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
    qh |= static_cast<uint32_t>((q[j + 16] >> 4) & 1) << (j + 16);
  }
  std::memcpy(qh_bytes, &qh, 4);
}
}  // namespace

void quantize_q5_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ5_0*>(dst);
  for (int64_t i = 0; i < n / kQK5_0; ++i, x += kQK5_0) {
    const float d = signed_absmax(x, kQK5_0) / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    uint8_t q[kQK5_0];
    for (int j = 0; j < kQK5_0; ++j) q[j] = trunc_clamp(x[j] * id + 16.5f, 31);
    pack_q5(q, y[i].qs, y[i].qh);
  }
}

void quantize_q5_1(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ5_1*>(dst);
  for (int64_t i = 0; i < n / kQK5_1; ++i, x += kQK5_1) {
    float mn, mx;
    min_max(x, kQK5_1, &mn, &mx);
    const float d = (mx - mn) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    y[i].m = f32_to_f16(mn);
    uint8_t q[kQK5_1];
    for (int j = 0; j < kQK5_1; ++j) q[j] = trunc_clamp((x[j] - mn) * id + 0.5f, 31);
    pack_q5(q, y[i].qs, y[i].qh);
  }
}

void quantize_q8_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kQK8_0; ++i, x += kQK8_0) {
    const float d = absmax(x, kQK8_0) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    for (int j = 0; j < kQK8_0; ++j) y[i].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
  }
}

void quantize_q8_1(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(dst);
  for (int64_t i = 0; i < n / kQK8_1; ++i, x += kQK8_1) {
    const float d = absmax(x, kQK8_1) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    int sum = 0;
    for (int j = 0; j < kQK8_1; ++j) {
      y[i].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
      sum += y[i].qs[j];
    }
    y[i].s = f32_to_f16(static_cast<float>(sum) * d);
  }
}

void quantize_q8_k(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    const float max = signed_absmax(x, kQK_K);
    if (max == 0.0f) {
      std::memset(&y[i], 0, sizeof(BlockQ8_K));  // GGML leaves bsums stale; we zero them
      continue;
    }
    // -127 (not -128) so the largest magnitude maps to exactly +-127, as GGML does.
    const float iscale = -127.0f / max;
    for (int j = 0; j < kQK_K; ++j) {
      y[i].qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[j])));
    }
    for (int g = 0; g < kQK_K / 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += y[i].qs[g * 16 + j];
      y[i].bsums[g] = static_cast<int16_t>(sum);
    }
    y[i].d = 1.0f / iscale;
  }
}

}  // namespace ember::quant::detail
