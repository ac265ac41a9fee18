// get_rows, rms_norm, rope, glu, add, scale, softcap against double-precision references; argmax_rows
// against the host sampler's greedy rule.
#include "quant/quant.h"
#include "sample/logits_processors.h"
#include "test_util.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <span>

namespace ember::test {
namespace {

class OpsTest : public BackendTest {};

void expect_close(const std::vector<float>& got, const std::vector<double>& ref, double rel, double abs_tol,
                  const char* what) {
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << "[" << i << "] not written";
    ASSERT_NEAR(got[i], ref[i], rel * std::fabs(ref[i]) + abs_tol) << what << "[" << i << "]";
  }
}

TEST_P(OpsTest, GetRowsEveryDtype) {
  Rng rng(7);
  const int64_t d = 512, vocab = 23;
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K,
                  DType::Q5_1, DType::Q5_K}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    auto src = rng.normals(static_cast<size_t>(vocab * d));
    std::vector<uint8_t> table(dtype_row_bytes(t, d) * vocab);
    for (int64_t r = 0; r < vocab; ++r) quant::quantize_row(t, src.data() + r * d, table.data() + r * dtype_row_bytes(t, d), d);
    std::vector<int32_t> ids = {5, 0, 22, 5, 13, 1, 7};
    auto out = poisoned(ids.size() * d);
    Tensor tt = make_tensor(table.data(), t, {vocab, d});
    Tensor to = f32_tensor(out, {static_cast<int64_t>(ids.size()), d});
    backend_->get_rows(tt, ids.data(), static_cast<int>(ids.size()), to);
    std::vector<float> row(d);
    for (size_t i = 0; i < ids.size(); ++i) {
      quant::dequantize_row(t, tt.row_ptr(ids[i]), row.data(), d);
      ASSERT_EQ(0, std::memcmp(row.data(), out.data() + i * d, sizeof(float) * d)) << "row " << i;
    }
  }
}

TEST_P(OpsTest, RmsNorm) {
  Rng rng(8);
  for (int64_t n : {1, 5, 67}) {
    for (int64_t d : {7, 896, 1027}) {
      auto x = rng.normals(static_cast<size_t>(n * d), 3.0f);
      auto w = rng.normals(static_cast<size_t>(d));
      auto out = poisoned(x.size());
      Tensor tx = f32_tensor(x, {n, d}), tw = f32_tensor(w, {d}), to = f32_tensor(out, {n, d});
      backend_->rms_norm(tx, tw, 1e-6f, to);
      std::vector<double> ref(x.size());
      for (int64_t r = 0; r < n; ++r) {
        double ss = 0;
        for (int64_t i = 0; i < d; ++i) ss += double(x[r * d + i]) * x[r * d + i];
        const double inv = 1.0 / std::sqrt(ss / d + 1e-6);
        for (int64_t i = 0; i < d; ++i) ref[r * d + i] = x[r * d + i] * inv * w[i];
      }
      expect_close(out, ref, 1e-5, 1e-6, "rms_norm");
      // In place (out aliases x).
      backend_->rms_norm(tx, tw, 1e-6f, tx);
      expect_close(x, ref, 1e-5, 1e-6, "rms_norm in place");
    }
  }
}

TEST_P(OpsTest, Rope) {
  Rng rng(9);
  for (bool neox : {true, false}) {
    for (int head_dim : {64, 80, 128}) {
      for (int rotary_dim : {head_dim, head_dim / 2}) {
        SCOPED_TRACE(fmt::format("neox={} head_dim={} rotary_dim={}", neox, head_dim, rotary_dim));
        const int64_t n = 13, heads = 3;
        std::vector<float> inv_freq(rotary_dim / 2);
        for (int i = 0; i < rotary_dim / 2; ++i)
          inv_freq[i] = static_cast<float>(1.0 / std::pow(10000.0, 2.0 * i / rotary_dim));
        std::vector<int32_t> pos(n);
        for (auto& p : pos) p = rng.uniform_int(0, 5000);
        // Three calls at the same positions: the first computes cos/sin, the second reuses them,
        // the third has other frequencies in the same array (must not reuse them).
        for (int call = 0; call < 3; ++call) {
          if (call == 2)
            for (auto& f : inv_freq) f *= 0.75f;
          auto x = rng.normals(static_cast<size_t>(n * heads * head_dim));
          const auto x0 = x;
          RopeParams p;
          p.head_dim = head_dim;
          p.rotary_dim = rotary_dim;
          p.neox = neox;
          p.inv_freq = inv_freq.data();
          p.attention_factor = 1.25f;
          Tensor tx = f32_tensor(x, {n, heads, head_dim});
          backend_->rope(tx, pos.data(), p);
          std::vector<double> ref(x.size());
          for (int64_t t = 0; t < n; ++t) {
            for (int64_t h = 0; h < heads; ++h) {
              const float* v = x0.data() + (t * heads + h) * head_dim;
              double* r = ref.data() + (t * heads + h) * head_dim;
              for (int i = 0; i < head_dim; ++i) r[i] = v[i];
              for (int i = 0; i < rotary_dim / 2; ++i) {
                const double theta = double(static_cast<float>(pos[t]) * inv_freq[i]);
                const double c = std::cos(theta) * 1.25, s = std::sin(theta) * 1.25;
                const int a = neox ? i : 2 * i, b = neox ? i + rotary_dim / 2 : 2 * i + 1;
                r[a] = v[a] * c - v[b] * s;
                r[b] = v[b] * c + v[a] * s;
              }
            }
          }
          expect_close(x, ref, 1e-5, 1e-5, fmt::format("rope call {}", call).c_str());
        }
      }
    }
  }
}

TEST_P(OpsTest, GluAddScale) {
  Rng rng(10);
  for (int64_t n : {1, 3, 40}) {
    const int64_t f = 4864 + 3;
    auto g = rng.normals(static_cast<size_t>(n * f), 4.0f);
    auto u = rng.normals(static_cast<size_t>(n * f));
    for (bool gelu : {false, true}) {
      auto out = poisoned(g.size());
      Tensor tg = f32_tensor(g, {n, f}), tu = f32_tensor(u, {n, f}), to = f32_tensor(out, {n, f});
      backend_->glu(tg, tu, gelu, to);
      std::vector<double> ref(g.size());
      for (size_t i = 0; i < g.size(); ++i) {
        const double x = g[i];
        const double a = gelu ? 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)))
                              : x / (1 + std::exp(-x));
        ref[i] = a * u[i];
      }
      expect_close(out, ref, 2e-6, 1e-6, gelu ? "gelu" : "silu");
      // In place (out aliases gate).
      auto g2 = g;
      Tensor tg2 = f32_tensor(g2, {n, f});
      backend_->glu(tg2, tu, gelu, tg2);
      expect_close(g2, ref, 2e-6, 1e-6, "glu in place");
    }
    auto out = poisoned(g.size());
    Tensor tg = f32_tensor(g, {n, f}), tu = f32_tensor(u, {n, f}), to = f32_tensor(out, {n, f});
    backend_->add(tg, tu, to);
    std::vector<double> ref(g.size());
    for (size_t i = 0; i < g.size(); ++i) ref[i] = g[i] + u[i];  // float addition
    expect_close(out, ref, 0, 0, "add");
    backend_->add(tg, tu, tg);  // out aliases a
    expect_close(g, ref, 0, 0, "add in place");
    backend_->scale(tg, -0.37f);
    for (size_t i = 0; i < g.size(); ++i) ref[i] = double(static_cast<float>(ref[i]) * -0.37f);
    expect_close(g, ref, 0, 0, "scale");
  }
}

// Final logit soft-capping: cap * tanh(x / cap) in place, values far past the cap included.
TEST_P(OpsTest, Softcap) {
  Rng rng(12);
  for (int64_t n : {1, 7, 40000 + 3}) {
    auto x = rng.normals(static_cast<size_t>(n), 40.0f);
    std::vector<double> ref(x.size());
    for (float cap : {30.0f, 0.5f}) {
      auto y = x;
      for (size_t i = 0; i < x.size(); ++i) ref[i] = cap * std::tanh(double(x[i]) / cap);
      Tensor t = f32_tensor(y, {n});
      backend_->softcap(t, cap);
      expect_close(y, ref, 2e-6, 1e-6, "softcap");
    }
  }
}

TEST_P(OpsTest, ArgmaxRowsIsTheHostGreedyPick) {
  // Reference: the host Sampler's plain greedy pick (sample/logits_processors.h argmax: first
  // strictly larger value wins, NaN never; 0 when nothing is above -inf, as Sampler does).
  auto host_pick = [](const float* x, int64_t n) {
    return std::max<int32_t>(0, argmax(std::span<const float>(x, static_cast<size_t>(n))));
  };
  Rng rng(11);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (int64_t vocab : {1, 7, 8, 9, 1000, 262144 + 5}) {
    const int64_t rows = 9;
    auto x = rng.normals(static_cast<size_t>(rows * vocab));
    auto row = [&](int64_t r) { return x.data() + r * vocab; };
    // Row 1: a tie between two maxima (the first must win); row 2: NaN before and at the max
    // position; row 3: all NaN; row 4: all -inf; row 5: +inf late; row 6: the max in the tail;
    // row 7: NaN everywhere but one value.
    if (vocab > 2) { row(1)[vocab / 3] = 50.0f; row(1)[vocab - 1] = 50.0f; }
    row(2)[0] = nan;
    if (vocab > 1) { row(2)[vocab / 2] = nan; row(2)[vocab - 1] = 40.0f; }
    std::fill(row(3), row(3) + vocab, nan);
    std::fill(row(4), row(4) + vocab, -inf);
    row(5)[vocab - 1] = inf;
    row(6)[vocab - 1] = 60.0f;
    std::fill(row(7), row(7) + vocab, nan);
    row(7)[vocab / 2] = -3.0f;
    std::vector<int32_t> ids(static_cast<size_t>(rows), -7);
    Tensor t = f32_tensor(x, {rows, vocab});
    ASSERT_TRUE(backend_->argmax_rows(t, ids.data()).is_ok());
    for (int64_t r = 0; r < rows; ++r)
      EXPECT_EQ(ids[static_cast<size_t>(r)], host_pick(row(r), vocab)) << "vocab " << vocab << " row " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, OpsTest, testing::ValuesIn(backend_cases()), case_name);

}  // namespace
}  // namespace ember::test
