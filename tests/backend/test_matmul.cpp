// matmul for every weight dtype against a double-precision reference:
//  - tight: weights dequantized by the quant reference, activations quantized and dequantized
//    exactly as the integer kernels see them (quant::quantize_row Q8_0 / Q8_K);
//  - loose: the same weights against the unquantized activations, within a bound derived
//    from the activation quantization step.
#include "quant/blocks.h"
#include "quant/quant.h"
#include "test_util.h"

#include <cstring>

namespace ember::test {
namespace {

// Offsets of the f16 scale fields of a block (they must hold finite, modest values).
std::vector<size_t> scale_offsets(DType t) {
  switch (t) {
    case DType::Q4_0: case DType::Q5_0: case DType::Q8_0: return {0};
    case DType::Q4_1: case DType::Q5_1: case DType::Q4_K: case DType::Q5_K: return {0, 2};
    case DType::Q2_K: return {80, 82};
    case DType::Q3_K: return {108};
    case DType::Q6_K: return {208};
    default: return {};
  }
}

// Random weights [m, k] of dtype t: random bytes (every bit pattern of quants and sub-block
// scales) with random finite block scales; float types from normals.
std::vector<uint8_t> random_weights(Rng& rng, DType t, int64_t m, int64_t k) {
  const size_t bytes = dtype_row_bytes(t, k) * static_cast<size_t>(m);
  std::vector<uint8_t> w(bytes);
  if (t == DType::F32) {
    auto v = rng.normals(static_cast<size_t>(m * k), 0.1f);
    std::memcpy(w.data(), v.data(), bytes);
    return w;
  }
  if (t == DType::F16 || t == DType::BF16) {
    for (int64_t i = 0; i < m * k; ++i) {
      const float f = rng.normal() * 0.1f;
      const uint16_t h = t == DType::F16 ? f32_to_f16(f) : f32_to_bf16(f);
      std::memcpy(w.data() + 2 * i, &h, 2);
    }
    return w;
  }
  for (auto& b : w) b = static_cast<uint8_t>(rng.uniform_int(0, 255));
  const size_t block_bytes = dtype_block_bytes(t);
  for (size_t b = 0; b < bytes / block_bytes; ++b) {
    for (size_t off : scale_offsets(t)) {
      const float s = rng.uniform(0.001f, 0.02f) * (rng.uniform_int(0, 3) == 0 ? -1.0f : 1.0f);
      const uint16_t h = f32_to_f16(s);
      std::memcpy(w.data() + b * block_bytes + off, &h, 2);
    }
  }
  return w;
}

DType act_dtype_for(DType w) {
  switch (w) {
    case DType::Q2_K: case DType::Q3_K: case DType::Q4_K: case DType::Q5_K: case DType::Q6_K: return DType::Q8_K;
    case DType::F32: case DType::F16: case DType::BF16: return DType::F32;
    default: return DType::Q8_0;
  }
}

struct MatmulCase {
  DType dtype;
  int64_t n, m, k;
  bool bias;
};

// c against the references for the given weights, activations [n, k] and bias [m].
void check_case(Backend& be, const MatmulCase& c, std::vector<uint8_t>& wbytes, std::vector<float>& x,
                std::vector<float>& bias) {
  SCOPED_TRACE(fmt::format("{} n={} m={} k={} bias={}", dtype_name(c.dtype), c.n, c.m, c.k, c.bias));
  auto out = poisoned(static_cast<size_t>(c.n * c.m));

  Tensor tw = make_tensor(wbytes.data(), c.dtype, {c.m, c.k});
  Tensor tx = f32_tensor(x, {c.n, c.k});
  Tensor tb = f32_tensor(bias, {c.m});
  Tensor to = f32_tensor(out, {c.n, c.m});
  be.matmul(tx, tw, c.bias ? &tb : nullptr, to);

  // Reference weights.
  std::vector<float> wf(static_cast<size_t>(c.m * c.k));
  for (int64_t r = 0; r < c.m; ++r) quant::dequantize_row(c.dtype, tw.row_ptr(r), wf.data() + r * c.k, c.k);
  // Activations as the kernel sees them, and the bound on their quantization error.
  const DType adt = act_dtype_for(c.dtype);
  std::vector<float> xq(x.size()), xerr(x.size(), 0.0f);
  if (adt == DType::F32) {
    xq = x;
  } else {
    const int64_t bs = dtype_block_size(adt);
    std::vector<uint8_t> qrow(dtype_row_bytes(adt, c.k));
    for (int64_t r = 0; r < c.n; ++r) {
      quant::quantize_row(adt, x.data() + r * c.k, qrow.data(), c.k);
      quant::dequantize_row(adt, qrow.data(), xq.data() + r * c.k, c.k);
      for (int64_t b = 0; b < c.k / bs; ++b) {
        float amax = 0.0f;
        for (int64_t j = 0; j < bs; ++j) amax = std::max(amax, std::fabs(x[static_cast<size_t>(r * c.k + b * bs + j)]));
        // half a step, plus Q8_0's f16-rounded scale (up to 127 * 2^-11 of a step)
        for (int64_t j = 0; j < bs; ++j) xerr[static_cast<size_t>(r * c.k + b * bs + j)] = amax / 127.0f * 0.57f;
      }
    }
  }
  for (int64_t i = 0; i < c.n; ++i) {
    for (int64_t j = 0; j < c.m; ++j) {
      double ref_q = 0, ref_x = 0, mag = 0, act_bound = 0;
      for (int64_t l = 0; l < c.k; ++l) {
        const double w = wf[static_cast<size_t>(j * c.k + l)];
        ref_q += w * xq[static_cast<size_t>(i * c.k + l)];
        ref_x += w * x[static_cast<size_t>(i * c.k + l)];
        mag += std::fabs(w * xq[static_cast<size_t>(i * c.k + l)]);
        act_bound += std::fabs(w) * xerr[static_cast<size_t>(i * c.k + l)];
      }
      const double b = c.bias ? bias[static_cast<size_t>(j)] : 0.0;
      const float got = out[static_cast<size_t>(i * c.m + j)];
      ASSERT_TRUE(std::isfinite(got)) << "out[" << i << "," << j << "] not written";
      const double tight = 3e-6 * mag + 1e-6 * std::fabs(b) + 1e-6;
      ASSERT_NEAR(got, ref_q + b, tight) << "at [" << i << "," << j << "] (vs quantized activations)";
      ASSERT_NEAR(got, ref_x + b, tight + act_bound) << "at [" << i << "," << j << "] (vs float activations)";
    }
  }
}

void run_case(Backend& be, const MatmulCase& c, uint64_t seed) {
  Rng rng(seed);
  auto wbytes = random_weights(rng, c.dtype, c.m, c.k);
  auto x = rng.normals(static_cast<size_t>(c.n * c.k));
  // A few large outliers, as real activations have.
  for (int i = 0; i < 5; ++i) x[static_cast<size_t>(rng.uniform_int(0, static_cast<int>(x.size()) - 1))] *= 20.0f;
  auto bias = rng.normals(static_cast<size_t>(c.m));
  check_case(be, c, wbytes, x, bias);
}

// Byte ranges of the k-quants' sub-block scales (and mins) within a block.
std::pair<size_t, size_t> sub_scale_range(DType t) {
  switch (t) {
    case DType::Q4_K: case DType::Q5_K: return {4, 16};
    case DType::Q6_K: return {192, 208};
    case DType::Q3_K: return {96, 108};
    case DType::Q2_K: return {0, 16};
    default: return {0, 0};
  }
}

// Every quant byte `fill` (all codes 0 or all at their maximum), sub-block scales 0x11 (small,
// nonzero), block scales modest: the largest integer products a kernel can meet.
std::vector<uint8_t> extreme_weights(DType t, int64_t m, int64_t k, uint8_t fill) {
  std::vector<uint8_t> w(dtype_row_bytes(t, k) * static_cast<size_t>(m), fill);
  const size_t block_bytes = dtype_block_bytes(t);
  const auto [s0, s1] = sub_scale_range(t);
  for (size_t b = 0; b < w.size() / block_bytes; ++b) {
    for (size_t i = s0; i < s1; ++i) w[b * block_bytes + i] = 0x11;
    for (size_t off : scale_offsets(t)) {
      const uint16_t h = f32_to_f16(off == 0 || t == DType::Q6_K || t == DType::Q3_K ? 0.01f : 0.003f);
      std::memcpy(w.data() + b * block_bytes + off, &h, 2);
    }
  }
  return w;
}

const DType kAllDtypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0, DType::Q4_1,
                            DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q2_K, DType::Q3_K,
                            DType::Q4_K, DType::Q5_K, DType::Q6_K};

class MatmulTest : public BackendTest {};

TEST_P(MatmulTest, AllDtypesOddShapes) {
  uint64_t seed = 1;
  for (DType t : kAllDtypes) {
    const int64_t bs = dtype_block_size(t);
    // Block-32 formats: 5 blocks (a quad and a single), 15 (8 + 4 + 3), 28 (3 x 8 + 4).
    const std::vector<int64_t> ks = bs == 256 ? std::vector<int64_t>{256, 256 * 3}
                                              : std::vector<int64_t>{32 * 5, 32 * 15, 32 * 28, 256 * 3};
    for (int64_t k : ks) {
      for (int64_t n : {1, 3, 17}) {
        run_case(*backend_, {t, n, 37, k, n == 3}, seed++);
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST_P(MatmulTest, ManyRowsTakesTheBlockedPath) {
  uint64_t seed = 100;
  for (DType t : kAllDtypes) {
    run_case(*backend_, {t, 70, 45, 512, true}, seed++);
    if (HasFatalFailure()) return;
  }
}

TEST_P(MatmulTest, ExtremeCodesStayExact) {
  // Without VNNI the panel kernels add several vpmaddubsw results in int16 before widening
  // (matmul_gemm_avx2.inc): all codes at 0 or at their maximum against activations that all
  // quantize to +-127 give the largest sums; a saturated one would miss the reference by far.
  // n = 16: the fused panels; n = 22: a second fused panel of 6 rows (8 lanes on AVX-512);
  // n = 70: the decoded ones where the ISA has them (and a last panel of 6 rows).
  for (DType t : kAllDtypes) {
    if (!dtype_is_quantized(t)) continue;
    for (uint8_t fill : {uint8_t{0x00}, uint8_t{0xff}, uint8_t{0x80}}) {  // 0x80: Q8_0's -128
      for (float sign : {1.0f, -1.0f}) {
        for (int64_t n : {16, 22, 70}) {
          const int64_t m = 19, k = 512;
          auto w = extreme_weights(t, m, k, fill);
          std::vector<float> x(static_cast<size_t>(n * k), sign);
          std::vector<float> bias(static_cast<size_t>(m), 0.0f);
          SCOPED_TRACE(fmt::format("fill {:#x} x {}", fill, sign));
          check_case(*backend_, {t, n, m, k, false}, w, x, bias);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST_P(MatmulTest, WideOutput) {
  // m large enough that threads split the columns; m odd so tiles have tails.
  uint64_t seed = 200;
  for (DType t : {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K, DType::F16}) {
    run_case(*backend_, {t, 2, 301, 512, false}, seed++);
    if (HasFatalFailure()) return;
  }
}

TEST_P(MatmulTest, FiveRowTilesMatchOneRowAtATime) {
  // Five rows stay below every k-quant's panel threshold and take the row tiles (one tile of
  // five where the ISA has 32 vector registers, else 4 + 1): each row's integer sums and float
  // steps are those of a one-row matmul, so the outputs must be equal bit for bit.
  uint64_t seed = 500;
  for (DType t : {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    SCOPED_TRACE(dtype_name(t));
    Rng rng(seed++);
    const int64_t n = 5, m = 37, k = 256 * 3;
    auto wbytes = random_weights(rng, t, m, k);
    auto x = rng.normals(static_cast<size_t>(n * k));
    Tensor tw = make_tensor(wbytes.data(), t, {m, k});
    auto all = poisoned(static_cast<size_t>(n * m));
    Tensor tx = f32_tensor(x, {n, k});
    Tensor tall = f32_tensor(all, {n, m});
    backend_->matmul(tx, tw, nullptr, tall);
    for (int64_t r = 0; r < n; ++r) {
      std::vector<float> xr(x.begin() + r * k, x.begin() + (r + 1) * k);
      auto one = poisoned(static_cast<size_t>(m));
      Tensor txr = f32_tensor(xr, {1, k});
      Tensor tone = f32_tensor(one, {1, m});
      backend_->matmul(txr, tw, nullptr, tone);
      ASSERT_EQ(std::memcmp(one.data(), &all[static_cast<size_t>(r * m)], static_cast<size_t>(m) * sizeof(float)), 0)
          << "row " << r;
    }
  }
}

TEST_P(MatmulTest, FewPanelsMatchManyPanelsBitForBit) {
  // Up to two panels of 16 rows take the fused kernels (weights read raw, signed panels),
  // more take the decoded-column path where the ISA has one for the kind; both compute the
  // same integer sums in the same float order, so each row's output must not depend on how
  // many rows came with it.
  uint64_t seed = 300;
  for (DType t : kAllDtypes) {
    SCOPED_TRACE(dtype_name(t));
    Rng rng(seed++);
    const int64_t m = 77, k = 32 * 24, n_many = 70;
    auto wbytes = random_weights(rng, t, m, k);
    auto x = rng.normals(static_cast<size_t>(n_many * k));
    auto bias = rng.normals(static_cast<size_t>(m));
    Tensor tw = make_tensor(wbytes.data(), t, {m, k});
    Tensor tb = f32_tensor(bias, {m});
    auto many = poisoned(static_cast<size_t>(n_many * m));
    Tensor tmany = f32_tensor(many, {n_many, m});
    Tensor tx_many = f32_tensor(x, {n_many, k});
    backend_->matmul(tx_many, tw, &tb, tmany);
    // At or past every kind's panel threshold (fused_min_rows); 18, 23 and 24 end on a panel
    // of 2, 7 and 8 rows, which AVX-512 runs on 8 lanes (ymm) instead of 16.
    for (int64_t n : {12, 16, 18, 23, 24, 32}) {
      std::vector<float> xs(x.begin(), x.begin() + n * k);
      auto few = poisoned(static_cast<size_t>(n * m));
      Tensor tx = f32_tensor(xs, {n, k});
      Tensor tfew = f32_tensor(few, {n, m});
      backend_->matmul(tx, tw, &tb, tfew);
      for (int64_t i = 0; i < n * m; ++i)
        ASSERT_EQ(std::memcmp(&few[static_cast<size_t>(i)], &many[static_cast<size_t>(i)], 4), 0)
            << "n=" << n << " row " << i / m << " col " << i % m << ": " << few[static_cast<size_t>(i)] << " vs "
            << many[static_cast<size_t>(i)];
    }
  }
}

TEST_P(MatmulTest, ManyEqualsOneAtATime) {
  // matmul_many (q/k/v, gate/up) shares x's quantization, panels and pool runs between the
  // weights; each output must be bit-identical to a matmul of its own, for one decode row,
  // the fused panels, the decoded panels, the row tiles, and a mix of weight kinds.
  Rng rng(400);
  const int64_t k = 32 * 16;  // also a multiple of 256 for the k-quants
  for (DType t : kAllDtypes) {
    for (int64_t n : {1, 4, 16, 70}) {
      SCOPED_TRACE(fmt::format("{} n={}", dtype_name(t), n));
      const std::vector<int64_t> ms = {301, 64, 37};
      const DType dts[3] = {t, t, n == 4 ? DType::Q8_0 : t};  // n=4: a mixed call
      auto x = rng.normals(static_cast<size_t>(n * k));
      Tensor tx = f32_tensor(x, {n, k});
      std::vector<std::vector<uint8_t>> wb;
      std::vector<std::vector<float>> bias, one, many;
      std::vector<Tensor> tw, tb, tone, tmany;
      for (size_t i = 0; i < ms.size(); ++i) {
        wb.push_back(random_weights(rng, dts[i], ms[i], k));
        bias.push_back(rng.normals(static_cast<size_t>(ms[i])));
        one.push_back(poisoned(static_cast<size_t>(n * ms[i])));
        many.push_back(poisoned(static_cast<size_t>(n * ms[i])));
      }
      for (size_t i = 0; i < ms.size(); ++i) {
        tw.push_back(make_tensor(wb[i].data(), dts[i], {ms[i], k}));
        tb.push_back(f32_tensor(bias[i], {ms[i]}));
        tone.push_back(f32_tensor(one[i], {n, ms[i]}));
        tmany.push_back(f32_tensor(many[i], {n, ms[i]}));
      }
      std::vector<MatmulTarget> targets;
      for (size_t i = 0; i < ms.size(); ++i) {
        const Tensor* b = i == 1 ? nullptr : &tb[i];
        backend_->matmul(tx, tw[i], b, tone[i]);
        targets.push_back({&tw[i], b, &tmany[i]});
      }
      backend_->matmul_many(tx, targets);
      for (size_t i = 0; i < ms.size(); ++i)
        ASSERT_EQ(std::memcmp(one[i].data(), many[i].data(), one[i].size() * sizeof(float)), 0) << "target " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, MatmulTest, testing::ValuesIn(backend_cases()), case_name);

}  // namespace
}  // namespace ember::test
