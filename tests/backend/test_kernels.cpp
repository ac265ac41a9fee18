// Internal kernels that have an exact reference: the activation quantizers of every ISA
// must produce exactly quant::quantize_row's values (scales and quants).
#include "backend/cpu/kernels.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "test_util.h"

#include <cstring>

namespace ember::test {
namespace {

using cpu::Isa;

class ActQuantTest : public testing::TestWithParam<Isa> {};

TEST_P(ActQuantTest, Q8_32MatchesReference) {
  if (!cpu::isa_supported(GetParam())) GTEST_SKIP();
  const auto kt = cpu::make_kernel_table(GetParam());
  Rng rng(3);
  for (int64_t k : {32, 160, 4864}) {
    auto x = rng.normals(static_cast<size_t>(k), 2.0f);
    for (int64_t i = 0; i < k; i += 37) x[i] = 0.5f * static_cast<float>(i % 5);  // exact ties
    for (int64_t i = 64; i < std::min<int64_t>(k, 96); ++i) x[i] = 0.0f;          // an all-zero block
    if (k >= 160) {  // a block with scale exactly 1: x * id lands on .5 ties
      x[128] = 127.0f;
      for (int64_t i = 129; i < 160; ++i) x[i] = static_cast<float>(i - 144) + 0.5f;
    }
    std::vector<uint8_t> row(cpu::act_row_bytes(cpu::ActFormat::Q8_32, k));
    kt.quantize_q8_32(x.data(), row.data(), k);
    std::vector<quant::BlockQ8_0> ref(static_cast<size_t>(k / 32));
    quant::quantize_row(DType::Q8_0, x.data(), ref.data(), k);
    const auto* qs = reinterpret_cast<const int8_t*>(row.data());
    const auto* d = reinterpret_cast<const float*>(row.data() + k);
    const auto* sums = reinterpret_cast<const int32_t*>(d + k / 32);
    for (int64_t b = 0; b < k / 32; ++b) {
      ASSERT_EQ(d[b], f16_to_f32(ref[b].d)) << "block " << b;
      int32_t s = 0;
      for (int j = 0; j < 32; ++j) {
        ASSERT_EQ(qs[b * 32 + j], ref[b].qs[j]) << "block " << b << " elem " << j;
        s += ref[b].qs[j];
      }
      ASSERT_EQ(sums[b], s);
    }
  }
}

TEST_P(ActQuantTest, Q8_KMatchesReference) {
  if (!cpu::isa_supported(GetParam())) GTEST_SKIP();
  const auto kt = cpu::make_kernel_table(GetParam());
  Rng rng(4);
  for (int64_t k : {256, 256 * 19}) {
    auto x = rng.normals(static_cast<size_t>(k), 2.0f);
    if (k > 256) std::fill(x.begin() + 256, x.begin() + 512, 0.0f);  // an all-zero block
    std::vector<uint8_t> row(cpu::act_row_bytes(cpu::ActFormat::Q8_K, k));
    kt.quantize_q8_k(x.data(), row.data(), k);
    std::vector<quant::BlockQ8_K> ref(static_cast<size_t>(k / 256));
    quant::quantize_row(DType::Q8_K, x.data(), ref.data(), k);
    const auto* qs = reinterpret_cast<const int8_t*>(row.data());
    const auto* d = reinterpret_cast<const float*>(row.data() + k);
    const auto* bsums = reinterpret_cast<const int16_t*>(d + k / 256);
    for (int64_t b = 0; b < k / 256; ++b) {
      ASSERT_EQ(d[b], ref[b].d) << "block " << b;
      for (int j = 0; j < 256; ++j) ASSERT_EQ(qs[b * 256 + j], ref[b].qs[j]) << "block " << b << " elem " << j;
      for (int g = 0; g < 16; ++g) ASSERT_EQ(bsums[b * 16 + g], ref[b].bsums[g]);
    }
  }
}

TEST_P(ActQuantTest, VectorHelpers) {
  if (!cpu::isa_supported(GetParam())) GTEST_SKIP();
  const auto kt = cpu::make_kernel_table(GetParam());
  Rng rng(5);
  for (int64_t n : {1, 7, 64, 80, 1027}) {
    auto a = rng.normals(static_cast<size_t>(n)), b = rng.normals(static_cast<size_t>(n));
    double dot = 0, mag = 0, ss = 0;
    for (int64_t i = 0; i < n; ++i) {
      dot += double(a[i]) * b[i];
      mag += std::fabs(double(a[i]) * b[i]);
      ss += double(a[i]) * a[i];
    }
    EXPECT_NEAR(kt.dot_f32(a.data(), b.data(), n), dot, 1e-6 * mag + 1e-7);
    EXPECT_NEAR(kt.sum_squares(a.data(), n), ss, 1e-6 * ss);
    std::vector<uint16_t> h(static_cast<size_t>(n));
    std::vector<float> back(static_cast<size_t>(n));
    kt.f32_to_f16(a.data(), h.data(), n);
    kt.f16_to_f32(h.data(), back.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(h[i], f32_to_f16(a[i]));
      ASSERT_EQ(back[i], f16_to_f32(h[i]));
    }
    auto y = rng.normals(static_cast<size_t>(n));
    auto y0 = y;
    kt.scale_axpy_f32(y.data(), 0.75f, -1.5f, a.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(y[i], 0.75 * y0[i] - 1.5 * a[i], 1e-6 * (std::fabs(y0[i]) + std::fabs(a[i])));
    auto e = a;
    float mx = *std::max_element(a.begin(), a.end());
    double esum = 0;
    for (auto v : a) esum += std::exp(double(v) - mx);
    const float got = kt.exp_sub_sum(e.data(), mx, n);
    EXPECT_NEAR(got, esum, 1e-6 * esum);
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(e[i], std::exp(double(a[i]) - mx), 2e-7 + 1e-6 * std::exp(double(a[i]) - mx));
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, ActQuantTest, testing::Values(Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Vbmi),
                         [](const testing::TestParamInfo<Isa>& i) { return std::string(cpu::isa_name(i.param)); });

}  // namespace
}  // namespace ember::test
