// Scalar vector helpers (the fallback entries of the kernel table).
#include "backend/cpu/kernels.h"
#include "core/half.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ember::cpu {

namespace {

float dot_f32(const float* a, const float* b, int64_t n) {
  float s[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int j = 0; j < 4; ++j) s[j] += a[i + j] * b[i + j];
  for (; i < n; ++i) s[0] += a[i] * b[i];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

float sum_squares(const float* x, int64_t n) { return dot_f32(x, x, n); }

void scale_axpy_f32(float* y, float s, float a, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = y[i] * s + a * x[i];
}

void f16_to_f32_row(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

void f32_to_f16_row(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}

void silu_mul(const float* g, const float* u, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

void gelu_tanh_mul(const float* g, const float* u, float* out, int64_t n) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (int64_t i = 0; i < n; ++i) {
    const float x = g[i];
    out[i] = 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x))) * u[i];
  }
}

float max_f32(const float* x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

int64_t argmax_f32(const float* x, int64_t n) {
  int64_t best = -1;
  float best_x = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i)
    if (x[i] > best_x) {
      best_x = x[i];
      best = i;
    }
  return best;
}

float exp_sub_sum(float* x, float max, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  return sum;
}

void attn_scores(const float* q, int nr, const float* k, int nt, int d, float* s, int ld_s, float*) {
  for (int r = 0; r < nr; ++r)
    for (int t = 0; t < nt; ++t) s[r * ld_s + t] = dot_f32(q + static_cast<size_t>(r) * d, k + static_cast<size_t>(t) * d, d);
}

void attn_accumulate(const float* p, int ld_p, int nr, const float* v, int nt, int d, float* o) {
  for (int r = 0; r < nr; ++r)
    for (int t = 0; t < nt; ++t) scale_axpy_f32(o + static_cast<size_t>(r) * d, 1.0f, p[r * ld_p + t], v + static_cast<size_t>(t) * d, d);
}

}  // namespace

void register_scalar_kernels(KernelTable& kt) {
  kt.dot_f32 = dot_f32;
  kt.sum_squares = sum_squares;
  kt.scale_axpy_f32 = scale_axpy_f32;
  kt.f16_to_f32 = f16_to_f32_row;
  kt.f32_to_f16 = f32_to_f16_row;
  kt.silu_mul = silu_mul;
  kt.gelu_tanh_mul = gelu_tanh_mul;
  kt.exp_sub_sum = exp_sub_sum;
  kt.max_f32 = max_f32;
  kt.argmax_f32 = argmax_f32;
  kt.attn_scores = attn_scores;
  kt.attn_accumulate = attn_accumulate;
  register_scalar_act_quant(kt);
  register_scalar_matmul(kt);
}

}  // namespace ember::cpu
