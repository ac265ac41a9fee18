// rms_norm and rope: row-wise ops split over tokens.
#include "backend/cpu/context.h"

#include <algorithm>
#include <cmath>

namespace ember::cpu {

namespace {
constexpr int64_t kMinParallelElems = 1 << 14;

template <typename Fn>
void run_rows(CpuContext& ctx, int64_t n_rows, int64_t row_elems, Fn&& fn) {
  if (n_rows * row_elems < kMinParallelElems || ctx.pool.size() == 1 || n_rows == 1) {
    fn(0, int64_t{0}, n_rows);
    return;
  }
  ctx.pool.run([&](int ith, int nth) {
    const Range r = split_range(n_rows, ith, nth);
    if (r.begin < r.end) fn(ith, r.begin, r.end);
  });
}
}  // namespace

void cpu_rms_norm(CpuContext& ctx, const Tensor& x, const Tensor& w, float eps, Tensor& out) {
  EMBER_CHECK(x.dtype == DType::F32 && out.dtype == DType::F32 && w.dtype == DType::F32,
              "rms_norm: F32 tensors expected");
  const int64_t d = x.n_cols();
  const int64_t n = x.n_rows();
  EMBER_CHECK(w.numel() == d && out.n_cols() == d && out.n_rows() == n, "rms_norm: x {} w {} out {}",
              shape_string(x), shape_string(w), shape_string(out));
  const float* px = x.as<float>();
  const float* pw = w.as<float>();
  float* po = out.as<float>();
  const auto sum_squares = ctx.kt.sum_squares;
  run_rows(ctx, n, d, [&](int, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = px + r * d;
      float* orow = po + r * d;
      const float mean = sum_squares(xr, d) / static_cast<float>(d);
      const float inv = 1.0f / std::sqrt(mean + eps);
      for (int64_t i = 0; i < d; ++i) orow[i] = (xr[i] * inv) * pw[i];
    }
  });
}

void cpu_rope(CpuContext& ctx, Tensor& x, const int32_t* positions, const RopeParams& p) {
  EMBER_CHECK(x.dtype == DType::F32, "rope: F32 expected");
  EMBER_CHECK(p.head_dim > 0 && p.rotary_dim > 0 && p.rotary_dim <= p.head_dim && p.rotary_dim % 2 == 0,
              "rope: head_dim {} rotary_dim {}", p.head_dim, p.rotary_dim);
  EMBER_CHECK(p.inv_freq != nullptr, "rope: inv_freq missing");
  const int64_t n = x.dim(0);
  const int64_t per_token = n == 0 ? 0 : x.numel() / n;
  EMBER_CHECK(per_token % p.head_dim == 0, "rope: {} not a multiple of head_dim {}", shape_string(x), p.head_dim);
  const int64_t n_heads = per_token / p.head_dim;
  const int half = p.rotary_dim / 2;
  float* px = x.as<float>();
  // The table of these positions: found, or filled by this call's threads (token rows each).
  RopeTable* table = nullptr;
  for (auto& tb : ctx.rope_tables)
    if (tb.half == half && tb.attention_factor == p.attention_factor && tb.positions.size() == static_cast<size_t>(n) &&
        std::equal(tb.inv_freq.begin(), tb.inv_freq.end(), p.inv_freq) &&
        std::equal(tb.positions.begin(), tb.positions.end(), positions))
      table = &tb;
  const bool fill = table == nullptr;
  if (fill) {
    table = &ctx.rope_tables[ctx.rope_next];
    ctx.rope_next = (ctx.rope_next + 1) % ctx.rope_tables.size();
    table->inv_freq.assign(p.inv_freq, p.inv_freq + half);
    table->attention_factor = p.attention_factor;
    table->half = half;
    table->positions.assign(positions, positions + n);
    table->cos_sin.resize(static_cast<size_t>(n) * 2 * static_cast<size_t>(half));
  }
  float* cos_sin = table->cos_sin.data();
  run_rows(ctx, n, per_token, [&](int, int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* cs = cos_sin + t * 2 * half;
      float* sn = cs + half;
      if (fill) {
        // theta in float as HF computes it (inv_freq * position in fp32), cos/sin rounded once.
        const float pos = static_cast<float>(positions[t]);
        for (int i = 0; i < half; ++i) {
          const float theta = pos * p.inv_freq[i];
          cs[i] = static_cast<float>(std::cos(static_cast<double>(theta))) * p.attention_factor;
          sn[i] = static_cast<float>(std::sin(static_cast<double>(theta))) * p.attention_factor;
        }
      }
      for (int64_t h = 0; h < n_heads; ++h) {
        float* v = px + t * per_token + h * p.head_dim;
        if (p.neox) {
          for (int i = 0; i < half; ++i) {
            const float x0 = v[i], x1 = v[i + half];
            v[i] = x0 * cs[i] - x1 * sn[i];
            v[i + half] = x1 * cs[i] + x0 * sn[i];
          }
        } else {
          for (int i = 0; i < half; ++i) {
            const float x0 = v[2 * i], x1 = v[2 * i + 1];
            v[2 * i] = x0 * cs[i] - x1 * sn[i];
            v[2 * i + 1] = x1 * cs[i] + x0 * sn[i];
          }
        }
      }
    }
  });
}

}  // namespace ember::cpu
