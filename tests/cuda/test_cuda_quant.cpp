// Weight-only int4 (group 128), FP8 e4m3 and int8 (per-row scales) weights on the GPU: the packed
// bytes decoded here on the host (an independent reading of the layout in qgemv.cuh) must be
// close to the original weights; matmul through the backend (tensor-core GEMV for 1-8 rows,
// cuBLASLt above) must match a double-precision product of x and those decoded weights; the
// fused q/k/v and gate/up+GLU launches and get_rows of a packed table too. Random odd sizes,
// outputs poisoned with NaN first.
#include "backend/cuda/attn_o.cuh"
#include "backend/cuda/attn_o_split.cuh"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/qgemm.cuh"
#include "backend/cuda/qgemm_wg.cuh"
#include "backend/cuda/qgemv.cuh"
#include "backend/cuda/qgemv_wg.cuh"
#include "backend/cuda/rows.cuh"
#include "cuda_test_util.h"
#include "quant/fp8.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <tuple>

namespace ember {
namespace {

using cuda_test::backend;
using cuda_test::DevTensor;
using cuda_test::dev_floats;
using cuda_test::dev_tensor;
using cuda_test::download_floats;
using cuda_test::host_rms_norm;
using cuda_test::random_floats;

float e4m3_to_float(uint8_t b) {
  const int e = (b >> 3) & 15, man = b & 7;
  const float v = e == 0 ? std::ldexp(man / 8.0f, -6) : std::ldexp(1.0f + man / 8.0f, e - 7);
  return (b & 0x80) ? -v : v;
}

cuda::QFormat qformat(const std::string& f) {
  return f == "int4" ? cuda::QFormat::Int4 : f == "int8" ? cuda::QFormat::Int8 : cuda::QFormat::Fp8;
}
// What the GEMV rounds x to: BF16, F16 for int8 (its mma takes F16 operands).
DType gemv_x(const std::string& f) { return f == "int8" ? DType::F16 : DType::BF16; }

// The packed matrix w (device) decoded on the host: [m, k] floats.
std::vector<float> decode_packed(cuda::QFormat f, const Tensor& w) {
  const int64_t m = w.n_rows(), k = w.n_cols();
  std::vector<uint8_t> bytes(cuda::qweight_bytes(f, m, k));
  backend()->download(bytes.data(), w.data, bytes.size());
  const size_t row = cuda::qweight_row_bytes(f, k), soff = cuda::qweight_scales_offset(f, m, k);
  std::vector<float> out(static_cast<size_t>(m * k));
  if (f == cuda::QFormat::Int4) {  // the last tile's rows past m carry scale 0 (the GEMV reads them)
    const int64_t groups = cuda::qweight_k_pad(f, k) / cuda::kQGroup;
    for (int64_t r = m; r < (m + 15) / 16 * 16; ++r)
      for (int64_t gi = 0; gi < groups; ++gi) {
        uint16_t sb;
        std::memcpy(&sb, &bytes[soff + static_cast<size_t>(cuda::qweight_int4_scale_index(groups, r, gi) * 2)], 2);
        EXPECT_EQ(sb, 0) << "padding scale of row " << r << " group " << gi << " (m " << m << ")";
      }
  }
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      float v;
      if (f == cuda::QFormat::Int4) {
        uint16_t sb;
        const int64_t groups = cuda::qweight_k_pad(f, k) / cuda::kQGroup;
        std::memcpy(&sb, &bytes[soff + static_cast<size_t>(cuda::qweight_int4_scale_index(groups, r, c / 128) * 2)], 2);
        uint32_t word;
        const int64_t e = c % 32, j = e % 8;
        std::memcpy(&word, &bytes[r * row + static_cast<size_t>((c / 32) * 16 + (e / 8) * 4)], 4);
        const int q = static_cast<int>((word >> (4 * (j / 2) + 16 * (j % 2))) & 15u) - 8;
        v = static_cast<float>(q) * bf16_to_f32(sb);
      } else {
        float s;
        std::memcpy(&s, &bytes[soff + static_cast<size_t>(r) * 4], 4);
        const uint8_t b = bytes[r * row + static_cast<size_t>(c)];
        v = (f == cuda::QFormat::Int8 ? static_cast<float>(static_cast<int8_t>(b)) : e4m3_to_float(b)) * s;
      }
      out[static_cast<size_t>(r * k + c)] = v;
    }
  }
  return out;
}

struct Packed {
  std::vector<float> orig, dec;
  Tensor t;
};

Packed make_packed(const std::string& format, int64_t m, int64_t k, uint32_t seed, DType src = DType::F32) {
  Packed p;
  p.orig = random_floats(static_cast<size_t>(m * k), seed);
  for (auto& v : p.orig) v = cuda_test::round_to(src, v);
  const std::vector<uint8_t> raw = cuda_test::encode(src, p.orig);
  Tensor host = make_tensor(const_cast<uint8_t*>(raw.data()), src, {m, k});
  CudaStep* cs = cuda_step(*backend());
  EXPECT_TRUE(cs->set_weight_format(format).is_ok());
  auto r = backend()->prepare_weight(host);
  EXPECT_TRUE(cs->set_weight_format("auto").is_ok());
  EXPECT_TRUE(r.is_ok()) << r.message();
  p.t = *r;
  EXPECT_EQ(p.t.dtype, format == "int4" ? DType::Q4_0 : format == "int8" ? DType::Q8_0 : DType::FP8_E4M3);
  p.dec = decode_packed(qformat(format), p.t);
  return p;
}

// A random [m, k] matrix on the GPU as packed ("fp8", "int4", "int8") or BF16 ("bf16").
Tensor gpu_weight(const std::string& format, int64_t m, int64_t k, uint32_t seed) {
  if (format != "bf16") return make_packed(format, m, k, seed).t;
  std::vector<uint8_t> raw = cuda_test::encode(DType::BF16, random_floats(static_cast<size_t>(m * k), seed));
  auto w = backend()->prepare_weight(make_tensor(raw.data(), DType::BF16, {m, k}));  // copied to the GPU
  EXPECT_TRUE(w.is_ok()) << w.message();
  return w.is_ok() ? *w : Tensor{};
}

double rel(const std::vector<float>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// ref [n, m] = x [n, k] (rounded to x_type when round_x) @ w [m, k]^T (+ bias).
std::vector<double> reference(const std::vector<float>& x, const std::vector<float>& w, const float* bias,
                              int64_t n, int64_t m, int64_t k, bool round_x, DType x_type = DType::BF16) {
  std::vector<double> ref(static_cast<size_t>(n * m));
  for (int64_t j = 0; j < n; ++j)
    for (int64_t r = 0; r < m; ++r) {
      double s = bias ? bias[r] : 0.0;
      for (int64_t i = 0; i < k; ++i) {
        const float xv = x[static_cast<size_t>(j * k + i)];
        s += double(round_x ? cuda_test::round_to(x_type, xv) : xv) * w[static_cast<size_t>(r * k + i)];
      }
      ref[static_cast<size_t>(j * m + r)] = s;
    }
  return ref;
}

TEST(CudaQuant, PackedWeightsCloseToOriginal) {
  SKIP_WITHOUT_GPU();
  for (const char* f : {"int4", "fp8", "int8"}) {
    for (DType src : {DType::F32, DType::BF16, DType::F16}) {
      Packed p = make_packed(f, 53, 392, 3, src);
      std::vector<double> o(p.orig.begin(), p.orig.end());
      const double e = rel(p.dec, o);
      // int4 RTN of uniform values: step max/8 -> ~6% rms; e4m3: 3 mantissa bits -> ~2-3%;
      // int8: error uniform in +-max/254, rms max/127/sqrt(12), over the rms max/sqrt(3) of
      // uniform values = 1/254 ~ 0.39% (bound 0.5%).
      const std::string fs = f;
      EXPECT_LE(e, fs == "int4" ? 0.09 : fs == "int8" ? 0.005 : 0.04) << f << " from " << dtype_name(src);
      EXPECT_GT(e, 1e-3) << f << ": suspiciously exact";
    }
  }
}

// The packed int8 bytes and scales equal a host quantizer of qgemv.cuh's definition bit for bit:
// scale = max |row| / 127 (1 for a zero row), q = w * (1 / scale) rounded to nearest even in
// [-127, 127], rows zero padded to k_pad. Rows of max 127 (scale 1) put exact ties on the rounding.
TEST(CudaQuant, Int8BytesEqualHostQuantizer) {
  SKIP_WITHOUT_GPU();
  const int64_t m = 37, k = 200;  // k_pad 256
  const size_t k_pad = cuda::qweight_row_bytes(cuda::QFormat::Int8, k);
  ASSERT_EQ(k_pad, 256u);
  const float ties[] = {127.0f, 2.5f, -3.5f, 0.5f, -0.5f, 1.5f, -126.5f, 126.5f};
  const int expect_ties[] = {127, 2, -4, 0, 0, 2, -126, 126};  // round half to even
  for (DType src : {DType::F32, DType::BF16, DType::F16}) {
    std::vector<float> w = random_floats(static_cast<size_t>(m * k), 31);
    for (int64_t r = 0; r < m; ++r)  // rows of magnitudes 2^-9 .. 2^9
      for (int64_t c = 0; c < k; ++c) w[static_cast<size_t>(r * k + c)] *= std::ldexp(1.0f, static_cast<int>(r % 19) - 9);
    for (int64_t c = 0; c < k; ++c) w[static_cast<size_t>(c)] = 0.0f;  // row 0: zero
    for (int64_t c = 0; c < k; ++c) w[static_cast<size_t>(k + c)] = ties[c % 8] * (c % 16 < 8 ? 1.0f : -1.0f);
    for (auto& v : w) v = cuda_test::round_to(src, v);
    const std::vector<uint8_t> raw = cuda_test::encode(src, w);
    CudaStep* cs = cuda_step(*backend());
    ASSERT_TRUE(cs->set_weight_format("int8").is_ok());
    auto t = backend()->prepare_weight(make_tensor(const_cast<uint8_t*>(raw.data()), src, {m, k}));
    ASSERT_TRUE(cs->set_weight_format("auto").is_ok());
    ASSERT_TRUE(t.is_ok()) << t.message();
    ASSERT_EQ(t->dtype, DType::Q8_0);
    std::vector<uint8_t> bytes(cuda::qweight_bytes(cuda::QFormat::Int8, m, k));
    backend()->download(bytes.data(), t->data, bytes.size());
    const size_t soff = cuda::qweight_scales_offset(cuda::QFormat::Int8, m, k);
    int bad_q = 0, bad_scale = 0;
    for (int64_t r = 0; r < m; ++r) {
      float mx = 0.0f;
      for (int64_t c = 0; c < k; ++c) mx = std::max(mx, std::fabs(w[static_cast<size_t>(r * k + c)]));
      const float scale = mx > 0.0f ? mx / 127.0f : 1.0f, inv = 1.0f / scale;
      float got_scale;
      std::memcpy(&got_scale, &bytes[soff + static_cast<size_t>(r) * 4], 4);
      if (std::memcmp(&got_scale, &scale, 4) != 0 && bad_scale++ < 3)
        ADD_FAILURE() << dtype_name(src) << " row " << r << ": scale " << got_scale << ", host " << scale;
      for (size_t c = 0; c < k_pad; ++c) {
        const float v = c < static_cast<size_t>(k) ? w[static_cast<size_t>(r * k) + c] * inv : 0.0f;
        const int q = std::clamp(static_cast<int>(std::nearbyint(v)), -127, 127);
        const int got = static_cast<int8_t>(bytes[static_cast<size_t>(r) * k_pad + c]);
        if (got != q && bad_q++ < 5)
          ADD_FAILURE() << dtype_name(src) << " row " << r << " col " << c << ": q " << got << ", host " << q
                        << " (w * inv = " << v << ")";
        EXPECT_NE(got, -128) << "row " << r << " col " << c;
      }
    }
    EXPECT_EQ(bad_q, 0) << dtype_name(src) << ": int8 values differing from the host quantizer";
    EXPECT_EQ(bad_scale, 0) << dtype_name(src) << ": row scales differing from the host quantizer";
    for (int64_t c = 0; c < 16; ++c)  // the ties row, independently of the host quantizer above
      EXPECT_EQ(static_cast<int8_t>(bytes[static_cast<size_t>(k_pad) + c]), expect_ties[c % 8] * (c % 16 < 8 ? 1 : -1))
          << dtype_name(src) << " tie " << w[static_cast<size_t>(k + c)];
  }
}

TEST(CudaQuant, MatmulGemvAndLargeBatch) {
  SKIP_WITHOUT_GPU();
  struct Case {
    int64_t m, k;
    int n;
    bool bias;
  };
  const Case cases[] = {{37, 200, 1, false},  {130, 264, 3, true},  {16, 64, 8, false},   {301, 1032, 5, false},
                        {4100, 520, 2, true}, {77, 136, 13, false}, {260, 392, 40, true},  {48, 4104, 1, false},
                        {90, 264, 64, true},  {90, 264, 65, false}, {300, 14336, 8, true}, {77, 14336, 6, false}};
  uint32_t seed = 100;
  for (const char* f : {"int4", "fp8", "int8"}) {
    for (const Case& c : cases) {
      Packed p = make_packed(f, c.m, c.k, seed++);
      const auto xs = random_floats(static_cast<size_t>(c.n * c.k), seed++);
      const auto bs = random_floats(static_cast<size_t>(c.m), seed++);
      auto x = dev_floats(xs, {c.n, c.k});
      auto bias = dev_floats(bs, {c.m});
      auto out = dev_tensor(DType::F32, {c.n, c.m});
      backend()->matmul(x.t, p.t, c.bias ? &bias.t : nullptr, out.t);
      const auto got = download_floats(out.t);
      const bool gemv = c.n <= cuda::kQGemvMaxBatch;
      const auto ref = reference(xs, p.dec, c.bias ? bs.data() : nullptr, c.n, c.m, c.k, true,
                                 gemv ? gemv_x(f) : DType::BF16);
      // GEMV: BF16 x (int8: F16); int4 / int8 GEMM: BF16 x and BF16 dequantized weights above 8
      // rows (the packed GEMM of 9-64 rows, and for int4 of 6-8 where the GEMV would take its
      // direct kernel, k 14336: exact or BF16 weights; int8 F16 x); the FP8 GEMM quantizes x
      // to e4m3 per row (3 mantissa bits).
      const bool fp8_gemm = std::string(f) == "fp8" && !gemv;
      const double e = rel(got, ref);
      // The GEMV is exact but for F32 summation; the int4 / int8 GEMM rounds dequantized weights
      // to BF16 (relative error <= 2^-9 each, ~1e-3 on the products).
      EXPECT_LE(e, gemv ? 1e-4 : fp8_gemm ? 6e-2 : 8e-3) << f << " m " << c.m << " k " << c.k << " n " << c.n;
    }
  }
}

// x as the FP8 GEMM sees it: each row scaled by max|x| / 448 and rounded to e4m3 (the CPU
// codec's rounding), times the scale again.
std::vector<float> fp8_rows(const std::vector<float>& x, int64_t n, int64_t k) {
  std::vector<float> q(x.size());
  for (int64_t j = 0; j < n; ++j) {
    float mx = 0.0f;
    for (int64_t i = 0; i < k; ++i) mx = std::max(mx, std::fabs(x[static_cast<size_t>(j * k + i)]));
    const float scale = mx > 0.0f ? mx / 448.0f : 1.0f, inv = 1.0f / scale;
    for (int64_t i = 0; i < k; ++i) {
      const size_t at = static_cast<size_t>(j * k + i);
      q[at] = quant::fp8_e4m3_to_f32(quant::f32_to_fp8_e4m3(x[at] * inv)) * scale;
    }
  }
  return q;
}

// The FP8 GEMM of batches past the GEMV against a reference on the same e4m3 x: what is left
// is accumulation rounding, so a wrong row or channel scale (inside cuBLASLt or in the kernel
// after it, EMBER_CUDA_FP8_OUTER=0) cannot hide in the e4m3 rounding of x. Widths take every
// quantization kernel (<= 4096, <= 8192, <= 16384 and wider); k >= 8192 at <= 512 rows takes
// the split-k pair of GEMMs (fp8_gemm_split_k), 600 rows the single GEMM.
TEST(CudaQuant, Fp8GemmScalesExact) {
  SKIP_WITHOUT_GPU();
  struct Case {
    int64_t m, k;
    int n;
    bool bias;
  };
  const Case cases[] = {{36, 264, 9, false}, {132, 392, 40, true}, {64, 4104, 17, false},
                        {20, 8200, 11, false}, {12, 16400, 10, true}, {44, 104, 33, false},
                        {200, 14336, 252, true}, {40, 8200, 600, false}};
  uint32_t seed = 900;
  for (const Case& c : cases) {
    Packed p = make_packed("fp8", c.m, c.k, seed++);
    auto xs = random_floats(static_cast<size_t>(c.n * c.k), seed++);
    for (int64_t i = 0; i < c.k; ++i) xs[static_cast<size_t>(i)] *= 40.0f;  // rows of very different scales
    const auto bs = random_floats(static_cast<size_t>(c.m), seed++);
    auto x = dev_floats(xs, {c.n, c.k});
    auto bias = dev_floats(bs, {c.m});
    auto out = dev_tensor(DType::F32, {c.n, c.m});
    backend()->matmul(x.t, p.t, c.bias ? &bias.t : nullptr, out.t);
    const auto ref = reference(fp8_rows(xs, c.n, c.k), p.dec, c.bias ? bs.data() : nullptr, c.n, c.m, c.k, false);
    // Hopper's FP8 tensor cores keep fewer than 23 accumulator bits between promotions: 1-2e-4
    // measured on an H200; a wrong scale is an O(1) error.
    const double e = rel(download_floats(out.t), ref);
    std::printf("fp8 GEMM m %lld k %lld n %d: rel. error %.2e vs e4m3 x\n", static_cast<long long>(c.m),
                static_cast<long long>(c.k), c.n, e);
    EXPECT_LE(e, 1e-3) << "m " << c.m << " k " << c.k << " n " << c.n;
  }
}

// matmul_many over packed FP8 matrices past the GEMV quantizes x once for all of them: the
// same bits as one matmul each; a list with a BF16 matrix in it takes the plain loop.
TEST(CudaQuant, MatmulManySharesFp8Rows) {
  SKIP_WITHOUT_GPU();
  const int64_t k = 392;
  for (int n : {3, 24}) {
    Packed q = make_packed("fp8", 72, k, 11), kk = make_packed("fp8", 24, k, 12), v = make_packed("fp8", 24, k, 13);
    const auto xs = random_floats(static_cast<size_t>(n * k), 14);
    const auto bs = random_floats(72, 15);
    auto x = dev_floats(xs, {n, k});
    auto bias = dev_floats(bs, {72});
    auto oq = dev_tensor(DType::F32, {n, 72}), ok = dev_tensor(DType::F32, {n, 24}), ov = dev_tensor(DType::F32, {n, 24});
    const MatmulTarget targets[] = {{&q.t, &bias.t, &oq.t}, {&kk.t, nullptr, &ok.t}, {&v.t, nullptr, &ov.t}};
    backend()->matmul_many(x.t, targets);
    const auto gq = download_floats(oq.t), gk = download_floats(ok.t), gv = download_floats(ov.t);
    backend()->matmul(x.t, q.t, &bias.t, oq.t);
    backend()->matmul(x.t, kk.t, nullptr, ok.t);
    backend()->matmul(x.t, v.t, nullptr, ov.t);
    EXPECT_EQ(gq, download_floats(oq.t)) << "n " << n;
    EXPECT_EQ(gk, download_floats(ok.t)) << "n " << n;
    EXPECT_EQ(gv, download_floats(ov.t)) << "n " << n;
    EXPECT_LE(rel(gq, reference(xs, q.dec, bs.data(), n, 72, k, true)), n > cuda::kQGemvMaxBatch ? 6e-2 : 1e-4);
  }
  // One BF16 matrix among FP8 ones.
  const int n = 24;
  Packed q = make_packed("fp8", 40, k, 21);
  const auto ws = random_floats(static_cast<size_t>(40 * k), 22);
  const auto raw = cuda_test::encode(DType::F32, ws);
  auto wb = backend()->prepare_weight(make_tensor(const_cast<uint8_t*>(raw.data()), DType::F32, {40, k}));
  ASSERT_TRUE(wb.is_ok()) << wb.message();
  const auto xs = random_floats(static_cast<size_t>(n * k), 23);
  auto x = dev_floats(xs, {n, k});
  auto o1 = dev_tensor(DType::F32, {n, 40}), o2 = dev_tensor(DType::F32, {n, 40});
  const MatmulTarget mixed[] = {{&q.t, nullptr, &o1.t}, {&*wb, nullptr, &o2.t}};
  backend()->matmul_many(x.t, mixed);
  const auto g1 = download_floats(o1.t), g2 = download_floats(o2.t);
  backend()->matmul(x.t, q.t, nullptr, o1.t);
  backend()->matmul(x.t, *wb, nullptr, o2.t);
  EXPECT_EQ(g1, download_floats(o1.t));
  EXPECT_EQ(g2, download_floats(o2.t));
}

// matmul_many runs the GEMMs of one x on side streams at decode batch sizes (<= 512 rows),
// one after another past that, for FP8 and BF16 matrices alike, and stages x once for the packed
// int4 / int8 GEMMs of 9-64 rows: every output equals its own matmul bit for bit, eagerly and
// replayed from a CUDA graph (the side streams' work becomes branches of the graph) after x
// changed.
TEST(CudaQuant, MatmulManySideStreamsEqualOneByOne) {
  SKIP_WITHOUT_GPU();
  CudaStep* step = cuda_step(*backend());
  const int64_t k = 520;
  const int64_t ms[] = {136, 40, 40};
  // (int4 / int8 at 24 rows: x staged once for the three packed GEMMs; past 64 rows one by one)
  for (const std::string format : {"fp8", "bf16", "int4", "int8"}) {
    std::vector<Tensor> ws;
    for (int i = 0; i < 3; ++i) {
      ws.push_back(gpu_weight(format, ms[i], k, 40 + i));
      ASSERT_TRUE(ws.back().valid()) << format;
    }
    const auto bs = random_floats(static_cast<size_t>(ms[0]), 45);
    auto bias = dev_floats(bs, {ms[0]});
    for (int n : {24, 300, 700}) {
      auto x = dev_floats(random_floats(static_cast<size_t>(n * k), 46 + n), {n, k});
      std::vector<DevTensor> outs;
      for (int64_t m : ms) outs.push_back(dev_tensor(DType::F32, {n, m}));
      const MatmulTarget targets[] = {{&ws[0], &bias.t, &outs[0].t}, {&ws[1], nullptr, &outs[1].t}, {&ws[2], nullptr, &outs[2].t}};
      auto one_by_one = [&] {
        std::vector<std::vector<float>> r;
        for (int i = 0; i < 3; ++i) {
          auto o = dev_tensor(DType::F32, {n, ms[i]});
          backend()->matmul(x.t, ws[i], i == 0 ? &bias.t : nullptr, o.t);
          r.push_back(download_floats(o.t));
        }
        return r;
      };
      backend()->matmul_many(x.t, targets);
      auto want = one_by_one();
      for (int i = 0; i < 3; ++i) EXPECT_EQ(download_floats(outs[i].t), want[i]) << format << " n " << n << " out " << i;
      if (n > 300) continue;
      const uint64_t key = 777 + static_cast<uint64_t>(n);
      ASSERT_TRUE(step->begin_capture().is_ok());
      backend()->matmul_many(x.t, targets);
      ASSERT_TRUE(step->end_capture(key).is_ok());
      const auto xs2 = random_floats(static_cast<size_t>(n * k), 99 + n);
      backend()->upload(x.t.data, xs2.data(), xs2.size() * sizeof(float));
      for (auto& o : outs) backend()->upload(o.t.data, std::vector<float>(o.t.numel(), -7.0f).data(), o.t.nbytes());
      ASSERT_TRUE(step->launch_graph(key));
      want = one_by_one();
      for (int i = 0; i < 3; ++i)
        EXPECT_EQ(download_floats(outs[i].t), want[i]) << format << " graph n " << n << " out " << i;
    }
  }
  step->drop_graphs();
}

// matmul_accumulate (acc += x @ w^T, the out projections of Llama-style layers): the GEMM
// paths add into acc inside cuBLASLt (FP8 with its scales, split-k at k >= 8192 leaving a
// pending add that a following RMSNorm of acc takes; BF16), the packed GEMV in its epilogue
// (1-8 rows), the packed int4 / int8 GEMMs in theirs (9-1024 / 9-384 rows; past that the
// dequantizing fallback declines); the BF16 GEMV declines. Against acc + matmul, and the RMSNorm that follows
// against one of the reference sum.
TEST(CudaQuant, MatmulAccumulateAddsIntoAcc) {
  SKIP_WITHOUT_GPU();
  struct Case {
    const char* format;
    int64_t m, k;
    int n;
    bool taken;
  };
  const Case cases[] = {{"fp8", 136, 520, 24, true},  {"fp8", 136, 520, 700, true}, {"fp8", 72, 8200, 252, true},
                        {"fp8", 72, 8200, 600, true}, {"fp8", 136, 520, 3, true},   {"bf16", 136, 520, 24, true},
                        {"bf16", 136, 520, 3, false}, {"int4", 136, 520, 8, true},  {"int8", 72, 4096, 1, true},
                        {"bf16", 72, 4096, 4, false}, {"int4", 136, 520, 24, true}, {"int4", 136, 520, 65, true},
                        {"int8", 72, 4096, 40, true}, {"int4", 136, 14336, 8, true}, {"int4", 136, 520, 300, true},
                        {"int4", 136, 520, 1100, false}, {"int8", 72, 4096, 200, true}, {"int8", 72, 4096, 400, false}};
  uint32_t seed = 1200;
  for (const Case& c : cases) {
    const Tensor w = gpu_weight(c.format, c.m, c.k, seed++);
    ASSERT_TRUE(w.valid()) << c.format;
    auto x = dev_floats(random_floats(static_cast<size_t>(c.n * c.k), seed++), {c.n, c.k});
    const auto acc0 = random_floats(static_cast<size_t>(c.n * c.m), seed++, -4.0f, 4.0f);
    auto acc = dev_floats(acc0, {c.n, c.m});
    auto prod = dev_tensor(DType::F32, {c.n, c.m});
    backend()->matmul(x.t, w, nullptr, prod.t);
    const auto p = download_floats(prod.t);
    std::vector<double> want(acc0.size());
    for (size_t i = 0; i < want.size(); ++i) want[i] = double(acc0[i]) + p[i];
    const bool taken = backend()->matmul_accumulate(x.t, w, acc.t);
    EXPECT_EQ(taken, c.taken) << c.format << " n " << c.n << " k " << c.k;
    if (!taken) continue;
    // The RMSNorm of acc right after (as the next layer's attention norm): it takes a pending
    // add of the split-k half, and acc itself holds the whole sum afterwards.
    const auto nw = random_floats(static_cast<size_t>(c.m), seed++, 0.5f, 1.5f);
    auto dnw = dev_floats(nw, {c.m});
    auto normed = dev_tensor(DType::F32, {c.n, c.m});
    backend()->rms_norm(acc.t, dnw.t, 1e-6f, normed.t);
    EXPECT_LT(cuda_test::rel_error(download_floats(acc.t), want), 1e-6) << c.format << " n " << c.n << " k " << c.k;
    const std::vector<double> want_norm = host_rms_norm(want, c.n, c.m, nw, 1e-6);
    EXPECT_LT(cuda_test::rel_error(download_floats(normed.t), want_norm), 1e-5) << c.format << " n " << c.n << " k " << c.k;
  }
}

// A [m, k] weight on the GPU, packed FP8 or BF16, and its values as the GEMM sees them.
struct ChainWeight {
  Tensor t;
  std::vector<float> dec;
};
ChainWeight chain_weight(const std::string& format, int64_t m, int64_t k, uint32_t seed) {
  if (format != "bf16") {
    Packed p = make_packed(format, m, k, seed);
    return {p.t, p.dec};
  }
  ChainWeight w;
  w.dec = random_floats(static_cast<size_t>(m * k), seed);
  for (auto& v : w.dec) v = cuda_test::round_to(DType::BF16, v);
  std::vector<uint8_t> raw = cuda_test::encode(DType::BF16, w.dec);
  auto r = backend()->prepare_weight(make_tensor(raw.data(), DType::BF16, {m, k}));  // copied to the GPU
  EXPECT_TRUE(r.is_ok()) << r.message();
  if (r.is_ok()) w.t = *r;
  return w;
}

// A layer's chain on n rows of width d and an MLP of width f with packed (FP8, int4, int8) or
// BF16 weights: add, RMSNorm, q/k GEMMs, RMSNorm, gate/up GEMMs, GLU, down GEMM (GEMVs for a
// few rows).
struct Chain {
  std::string format;
  int n;
  int64_t d, f;
  ChainWeight q, k, g, u, dn;
  std::vector<float> as, bs;
  DevTensor w;
  Chain(const std::string& format_, int n_, int64_t d_, int64_t f_, uint32_t seed)
      : format(format_), n(n_), d(d_), f(f_), q(chain_weight(format, 40, d, seed)),
        k(chain_weight(format, 24, d, seed + 1)), g(chain_weight(format, f, d, seed + 2)),
        u(chain_weight(format, f, d, seed + 3)), dn(chain_weight(format, 48, f, seed + 4)),
        as(random_floats(static_cast<size_t>(n * d), seed + 5)), bs(random_floats(static_cast<size_t>(n * d), seed + 6)),
        w(dev_floats(random_floats(static_cast<size_t>(d), seed + 7), {d})) {}
  std::string where() const {
    return format + " n " + std::to_string(n) + " d " + std::to_string(d) + " f " + std::to_string(f);
  }
  // A GEMM (or GEMV) of this chain on rows x [n, kk] as it sees them: e4m3 rows (FP8 GEMM),
  // BF16 (BF16 GEMM, packed GEMV; F16 for int8), F32 (BF16 GEMV).
  std::vector<double> product(const std::vector<float>& x, const ChainWeight& w, int64_t m, int64_t kk) const {
    const bool gemv = n <= (format == "bf16" ? cuda::kGemvMaxBatch : cuda::kQGemvMaxBatch);
    if (gemv) return reference(x, w.dec, nullptr, n, m, kk, format != "bf16", gemv_x(format));
    if (format == "fp8") return reference(fp8_rows(x, n, kk), w.dec, nullptr, n, m, kk, false);
    return reference(x, w.dec, nullptr, n, m, kk, true, DType::BF16);
  }
  std::vector<double> down_of(const std::vector<float>& x) const { return product(x, dn, 48, f); }
  struct Out {
    std::vector<float> sum, h, q, k, glu, down;
  };
  // sync_each: a synchronize() after each norm and the GLU (every op launched alone); hints:
  // the read-once hints llama_layer gives; sync_glu: a synchronize() right after the GLU.
  Out run(bool sync_each, bool hints = false, bool sync_glu = false) {
    auto a = dev_floats(as, {n, d});
    auto b = dev_floats(bs, {n, d});
    auto h = dev_tensor(DType::F32, {n, d});
    auto oq = dev_tensor(DType::F32, {n, 40}), ok = dev_tensor(DType::F32, {n, 24});
    auto og = dev_tensor(DType::F32, {n, f}), ou = dev_tensor(DType::F32, {n, f});
    auto od = dev_tensor(DType::F32, {n, 48});
    auto hint = [&](const Tensor& t) {
      if (hints) backend()->hint_read_once(t);
    };
    backend()->add(a.t, b.t, a.t);
    backend()->rms_norm(a.t, w.t, 1e-5f, h.t);
    if (sync_each) backend()->synchronize();
    hint(h.t);
    const MatmulTarget qk[] = {{&q.t, nullptr, &oq.t}, {&k.t, nullptr, &ok.t}};
    backend()->matmul_many(h.t, qk);
    backend()->rms_norm(a.t, w.t, 1e-5f, h.t);  // plain norm (no add before it)
    if (sync_each) backend()->synchronize();
    hint(h.t);
    const MatmulTarget gu[] = {{&g.t, nullptr, &og.t}, {&u.t, nullptr, &ou.t}};
    backend()->matmul_many(h.t, gu);
    hint(ou.t);
    backend()->glu(og.t, ou.t, false, og.t);
    if (sync_each || sync_glu) backend()->synchronize();
    hint(og.t);
    backend()->matmul(og.t, dn.t, nullptr, od.t);
    return Out{download_floats(a.t), download_floats(h.t), download_floats(oq.t), download_floats(ok.t),
               download_floats(og.t), download_floats(od.t)};
  }
};

// (add +) RMSNorm and GLU of more rows than the GEMV takes, followed by GEMMs of their output
// (FP8 or BF16 weights): the norm / GLU kernel writes the e4m3 / BF16 rows itself. Everything
// (the residual sum, the norm and GLU outputs, the GEMM results) must equal the unfused
// sequence bit for bit; a synchronize() between the ops gives that sequence. Widths take the
// register kernels (392, 4096, 14336) and ones that do not fit them (16392, 20000: the
// quantize / convert kernel after).
TEST(CudaQuant, NormAndGluWriteGemmRows) {
  SKIP_WITHOUT_GPU();
  for (const std::string format : {"fp8", "bf16"}) {
    for (const auto& [n, d, f] : {std::tuple{24, 392, 200}, {9, 4096, 14336}, {33, 1032, 16392}, {17, 20000, 264}}) {
      Chain c(format, n, d, f, 31);
      const Chain::Out fused = c.run(false), plain = c.run(true);
      EXPECT_EQ(fused.sum, plain.sum) << c.where();
      EXPECT_EQ(fused.h, plain.h) << c.where();
      EXPECT_EQ(fused.q, plain.q) << c.where();
      EXPECT_EQ(fused.k, plain.k) << c.where();
      EXPECT_EQ(fused.glu, plain.glu) << c.where();
      EXPECT_EQ(fused.down, plain.down) << c.where();
      // And the chain is right, not only repeatable: the last GEMM against a reference on the
      // downloaded GLU rows as the GEMM sees them.
      EXPECT_LE(rel(fused.down, c.down_of(plain.glu)), 1e-3) << c.where();
    }
  }
}

bool all_nan(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return std::isnan(x); });
}

// The chain with read-once hints (Backend::hint_read_once, as llama_layer gives them): a
// hinted norm / GLU output feeding a GEMM is never written as F32 (it stays poisoned) while
// the GEMMs see the same e4m3 / BF16 rows, and gate / up, hinted, come out of their GEMMs as
// BF16 for the GLU. Against the same chain without hints: the residual sum and q/k bit for
// bit, the down projection within the BF16 rounding of gate / up; and (a synchronize() after
// the GLU launches it alone, writing F32) the GLU output and the GEMM after it against
// references. Widths past the register kernels (f 16392) write everything as before.
TEST(CudaQuant, ReadOnceHintsSkipDeadRows) {
  SKIP_WITHOUT_GPU();
  for (const std::string format : {"fp8", "bf16"}) {
    for (const auto& [n, d, f] : {std::tuple{24, 392, 200}, {300, 1032, 1000}, {33, 1032, 16392}}) {
      Chain c(format, n, d, f, 51);
      const bool fits = f <= 16384;
      const Chain::Out plain = c.run(false), lean = c.run(false, true), synced = c.run(false, true, true);
      EXPECT_EQ(lean.sum, plain.sum) << c.where();
      EXPECT_EQ(lean.q, plain.q) << c.where();
      EXPECT_EQ(lean.k, plain.k) << c.where();
      EXPECT_FALSE(all_nan(plain.h)) << c.where();
      EXPECT_TRUE(all_nan(lean.h)) << c.where() << ": the hinted norm output was written";
      if (fits) {
        EXPECT_TRUE(all_nan(lean.glu)) << c.where() << ": the hinted GLU output was written";
      } else {
        EXPECT_EQ(lean.glu, plain.glu) << c.where();
        EXPECT_EQ(lean.down, plain.down) << c.where();
      }
      // BF16 gate / up: the GLU within their rounding, the GEMM after it exact on its rows.
      const std::vector<double> plain_glu(plain.glu.begin(), plain.glu.end());
      EXPECT_LE(rel(synced.glu, plain_glu), fits ? 1e-2 : 0.0) << c.where();
      EXPECT_LE(rel(synced.down, c.down_of(synced.glu)), 1e-3) << c.where();
      const std::vector<double> plain_down(plain.down.begin(), plain.down.end());
      EXPECT_LE(rel(lean.down, plain_down), fits ? 3e-2 : 0.0) << c.where();
      EXPECT_LE(rel(synced.down, plain_down), fits ? 3e-2 : 0.0) << c.where();
    }
  }
}

// A plain RMSNorm of a few rows followed by GEMVs of its output: the packed GEMV folds the norm
// into its x staging (xnorm.h), reading the norm's input and writing its output from block 0;
// before a BF16 GEMV the deferred norm launches alone. The chain (whose first norm, with a
// residual add, is not folded) must equal the one with every norm launched alone bit for bit,
// with or without read-once hints (the norm output is written either way), for BF16 weights
// (1-4 rows; 8 rows take cuBLASLt) and packed ones (1-8 rows); and the GLU of the gate / up
// GEMVs and the down GEMV against references on the norm / GLU output. (One row at k <= 4096,
// 1032 and 4096 here, takes the staging that sums x's squares from its own staged chunks:
// stage_x_norm_one.)
TEST(CudaQuant, NormFoldsIntoGemvStaging) {
  SKIP_WITHOUT_GPU();
  for (const std::string format : {"bf16", "fp8", "int4", "int8"}) {
    for (const auto& [n, d, f] :
         {std::tuple{1, 4096, 1000}, {1, 1032, 264}, {3, 392, 200}, {4, 1032, 264}, {8, 4096, 136}}) {
      if (format == "bf16" && n > cuda::kGemvMaxBatch) continue;  // (cuBLASLt: NormAndGluWriteGemmRows)
      Chain c(format, n, d, f, 71);
      const Chain::Out fused = c.run(false), hinted = c.run(false, true), plain = c.run(true);
      for (const Chain::Out* o : {&fused, &hinted}) {
        EXPECT_EQ(o->sum, plain.sum) << c.where();
        EXPECT_EQ(o->h, plain.h) << c.where();
        EXPECT_EQ(o->q, plain.q) << c.where();
        EXPECT_EQ(o->k, plain.k) << c.where();
        EXPECT_EQ(o->glu, plain.glu) << c.where();
        EXPECT_EQ(o->down, plain.down) << c.where();
      }
      EXPECT_FALSE(all_nan(fused.h)) << c.where();
      // (h holds the second norm's output, the x of gate / up)
      const std::vector<double> g = c.product(plain.h, c.g, f, d), u = c.product(plain.h, c.u, f, d);
      std::vector<double> glu(g.size());
      for (size_t i = 0; i < g.size(); ++i) glu[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      EXPECT_LE(rel(fused.glu, glu), 1e-3) << c.where();
      EXPECT_LE(rel(fused.down, c.down_of(plain.glu)), 1e-3) << c.where();
    }
  }
}

// q/k/v (three matrices, one launch) and gate/up + GLU (one launch) with packed weights.
TEST(CudaQuant, FusedMultiAndGlu) {
  SKIP_WITHOUT_GPU();
  for (const char* f : {"int4", "fp8", "int8"}) {
    const int64_t k = 392, mq = 72, mk = 24, mf = 200;
    for (int n : {1, 4, 8}) {
      Packed q = make_packed(f, mq, k, 1), kk = make_packed(f, mk, k, 2), v = make_packed(f, mk, k, 3);
      Packed g = make_packed(f, mf, k, 4), u = make_packed(f, mf, k, 5);
      const auto xs = random_floats(static_cast<size_t>(n * k), 6);
      auto x = dev_floats(xs, {n, k});
      auto oq = dev_tensor(DType::F32, {n, mq}), ok = dev_tensor(DType::F32, {n, mk}), ov = dev_tensor(DType::F32, {n, mk});
      auto og = dev_tensor(DType::F32, {n, mf}), ou = dev_tensor(DType::F32, {n, mf});
      backend()->matmul(x.t, q.t, nullptr, oq.t);
      backend()->matmul(x.t, kk.t, nullptr, ok.t);
      backend()->matmul(x.t, v.t, nullptr, ov.t);
      backend()->matmul(x.t, g.t, nullptr, og.t);
      backend()->matmul(x.t, u.t, nullptr, ou.t);
      backend()->glu(og.t, ou.t, false, og.t);
      const DType xt = gemv_x(f);
      EXPECT_LE(rel(download_floats(oq.t), reference(xs, q.dec, nullptr, n, mq, k, true, xt)), 8e-3) << f << " q";
      EXPECT_LE(rel(download_floats(ok.t), reference(xs, kk.dec, nullptr, n, mk, k, true, xt)), 8e-3) << f << " k";
      EXPECT_LE(rel(download_floats(ov.t), reference(xs, v.dec, nullptr, n, mk, k, true, xt)), 8e-3) << f << " v";
      const auto rg = reference(xs, g.dec, nullptr, n, mf, k, true, xt);
      const auto ru = reference(xs, u.dec, nullptr, n, mf, k, true, xt);
      std::vector<double> rglu(rg.size());
      for (size_t i = 0; i < rg.size(); ++i) rglu[i] = rg[i] / (1.0 + std::exp(-rg[i])) * ru[i];
      EXPECT_LE(rel(download_floats(og.t), rglu), 1e-2) << f << " glu n " << n;
      EXPECT_LE(rel(download_floats(ou.t), ru), 8e-3) << f << " up kept n " << n;
    }
  }
}

// Each packed GEMV kernel (staged: x in shared memory, persistent grid; direct) on its own
// against the double reference, at sizes that take the persistent loop (more 16-row tiles than
// resident blocks), segment changes inside it, odd k, every batch size class, and a k whose
// BF16 x does not fit the staged kernel (direct only; Auto must take it too).
TEST(CudaQuant, GemvKernelsEachMatchReference) {
  SKIP_WITHOUT_GPU();
  struct Case {
    int64_t m, k;
    int n;
  };
  // (4100 x 4104 at n 8: x fits only beside the staged kernel's 4-unit ring, which int4 takes.)
  const Case cases[] = {{9601, 136, 1}, {37, 200, 3},     {301, 1032, 8},  {4100, 4104, 2},
                        {16, 64, 5},    {1000, 10000, 8}, {4100, 4104, 8}};
  const cuda::QGemvPath paths[] = {cuda::QGemvPath::Staged, cuda::QGemvPath::Direct, cuda::QGemvPath::Auto};
  uint32_t seed = 500;
  for (const char* f : {"int4", "fp8", "int8"}) {
    const cuda::QFormat qf = qformat(f);
    for (const Case& c : cases) {
      Packed p = make_packed(f, c.m, c.k, seed++);
      const auto xs = random_floats(static_cast<size_t>(c.n * c.k), seed++, -2.0f, 1.5f);
      auto x = dev_floats(xs, {c.n, c.k});
      const auto ref = reference(xs, p.dec, nullptr, c.n, c.m, c.k, true, gemv_x(f));
      int ran_staged = 0;
      for (cuda::QGemvPath path : paths) {
        if (path == cuda::QGemvPath::Staged && !cuda::qgemv_staged_takes(qf, false, false, c.n, c.k)) continue;
        ran_staged += path == cuda::QGemvPath::Staged;
        auto out = dev_tensor(DType::F32, {c.n, c.m});
        cuda::QGemvSeg seg;
        seg.w = p.t.data;
        seg.out = static_cast<float*>(out.t.data);
        seg.m = c.m;
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        ASSERT_EQ(cuda::launch_qgemv_multi(qf, &seg, 1, static_cast<const float*>(x.t.data), c.n, c.k, false, nullptr, path),
                  cudaSuccess);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        EXPECT_LE(rel(download_floats(out.t), ref), 1e-4)
            << f << " path " << static_cast<int>(path) << " m " << c.m << " k " << c.k << " n " << c.n;
      }
      // (With clusters, sm_90a, the staged kernel takes every case: x split over the blocks.)
      const bool staged = cuda::qgemv_clusters_allowed() ||
                          (c.k != 10000 && (c.n < 8 || c.k != 4104 || qf == cuda::QFormat::Int4));
      EXPECT_EQ(ran_staged, staged ? 1 : 0) << "staged kernel coverage, " << f << " k " << c.k << " n " << c.n;
    }
  }
}

// The staged GEMV with each tile's units split over a cluster of 2, 4 or 8 blocks (each staging
// its slice of x; the owner adds the blocks' sums in rank order), forced at sizes whose slices
// are uneven (the last rank's shorter), a persistent loop (more tiles than resident clusters),
// two segments (one with bias, one accumulating into a random output), gate/up + GLU, and a
// folded norm, whose normalized rows the first cluster's blocks write slice by slice: against
// the double reference, and bit-equal between two runs (the cluster sums do not depend on
// timing). Outputs are poisoned with NaN first.
TEST(CudaQuant, GemvClusterSplitMatchesReference) {
  SKIP_WITHOUT_GPU();
  if (!cuda::qgemv_clusters_allowed())
    GTEST_SKIP() << "needs an sm_90a build on a compute capability 9.0 GPU, EMBER_CUDA_QGEMV_CLUSTER not 0";
  struct Case {
    int64_t m, k;
    int n;
  };
  const Case cases[] = {{301, 1032, 8}, {4100, 4104, 5}, {1000, 10000, 8}, {77, 520, 3}, {2000, 1160, 2}};
  uint32_t seed = 900;
  const float nan = std::nanf("");
  for (const char* f : {"int4", "fp8", "int8"}) {
    const cuda::QFormat qf = qformat(f);
    for (const Case& c : cases) {
      const int64_t m2 = 72;  // second segment's rows
      Packed p = make_packed(f, c.m, c.k, seed++), p2 = make_packed(f, m2, c.k, seed++);
      Packed up = make_packed(f, c.m, c.k, seed++);
      const auto xs = random_floats(static_cast<size_t>(c.n * c.k), seed++, -2.0f, 1.5f);
      const auto bias = random_floats(static_cast<size_t>(c.m), seed++);
      const auto acc0 = random_floats(static_cast<size_t>(c.n * m2), seed++);
      const auto nw = random_floats(static_cast<size_t>(c.k), seed++, 0.5f, 1.5f);
      auto x = dev_floats(xs, {c.n, c.k});
      auto bias_d = dev_floats(bias, {c.m});
      auto nw_d = dev_floats(nw, {c.k});
      const DType xt = gemv_x(f);
      // Host references: x @ w^T + bias; acc0 + x @ w2^T; act(x @ g^T) * (x @ u^T); and the
      // same first product of rms_norm(x) * nw.
      auto ref = reference(xs, p.dec, bias.data(), c.n, c.m, c.k, true, xt);
      auto ref2 = reference(xs, p2.dec, nullptr, c.n, m2, c.k, true, xt);
      for (size_t i = 0; i < ref2.size(); ++i) ref2[i] += acc0[i];
      const auto rg = reference(xs, p.dec, nullptr, c.n, c.m, c.k, true, xt);
      const auto ru = reference(xs, up.dec, nullptr, c.n, c.m, c.k, true, xt);
      std::vector<double> rglu(rg.size());
      for (size_t i = 0; i < rg.size(); ++i) rglu[i] = rg[i] / (1.0 + std::exp(-rg[i])) * ru[i];
      const std::vector<double> xn_d = host_rms_norm(xs, c.n, c.k, nw, 1e-5);
      const std::vector<float> xn(xn_d.begin(), xn_d.end());
      const auto refn = reference(xn, p.dec, nullptr, c.n, c.m, c.k, true, xt);
      int plain_runs = 0, glu_runs = 0;  // cluster sizes taken
      for (int cl : {2, 4, 8}) {
        // (Sizes whose ranks would go without units, or whose slice of x does not fit, are
        // refused: launch_qgemv_* return an error for them.)
        if (!cuda::qgemv_staged_cluster_fits(qf, false, c.n, c.k, cl)) continue;
        ++plain_runs;
        const std::string where = std::string(f) + " m " + std::to_string(c.m) + " k " + std::to_string(c.k) +
                                  " n " + std::to_string(c.n) + " cluster " + std::to_string(cl);
        // Plain, two segments; run twice for the bit-equality.
        std::vector<float> first;
        for (int run = 0; run < 2; ++run) {
          auto out = dev_floats(std::vector<float>(static_cast<size_t>(c.n * c.m), nan), {c.n, c.m});
          auto out2 = dev_floats(acc0, {c.n, m2});
          cuda::QGemvSeg segs[2];
          segs[0].w = p.t.data, segs[0].bias = static_cast<const float*>(bias_d.t.data);
          segs[0].out = static_cast<float*>(out.t.data), segs[0].m = c.m;
          segs[1].w = p2.t.data, segs[1].out = static_cast<float*>(out2.t.data), segs[1].m = m2;
          segs[1].accumulate = true;
          ASSERT_EQ(cuda::launch_qgemv_multi(qf, segs, 2, static_cast<const float*>(x.t.data), c.n, c.k, false,
                                             nullptr, cuda::QGemvPath::Staged, nullptr, cl),
                    cudaSuccess)
              << where;
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << where;
          const auto got = download_floats(out.t);
          EXPECT_LE(rel(got, ref), 1e-4) << where;
          EXPECT_LE(rel(download_floats(out2.t), ref2), 1e-4) << where << " (accumulate)";
          if (run == 0) first = got;
          else EXPECT_EQ(got, first) << where << " (two runs)";
        }
        // Gate / up + GLU, the up product kept.
        if (!cuda::qgemv_staged_cluster_fits(qf, true, c.n, c.k, cl)) continue;
        ++glu_runs;
        auto og = dev_floats(std::vector<float>(static_cast<size_t>(c.n * c.m), nan), {c.n, c.m});
        auto ou = dev_floats(std::vector<float>(static_cast<size_t>(c.n * c.m), nan), {c.n, c.m});
        ASSERT_EQ(cuda::launch_qgemv_glu(qf, p.t.data, up.t.data, static_cast<const float*>(x.t.data), c.n, c.m, c.k,
                                         false, static_cast<float*>(og.t.data), nullptr,
                                         static_cast<float*>(ou.t.data), false, nullptr, cuda::QGemvPath::Staged,
                                         nullptr, cl),
                  cudaSuccess)
            << where;
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << where;
        EXPECT_LE(rel(download_floats(og.t), rglu), 1e-3) << where << " (glu)";
        EXPECT_LE(rel(download_floats(ou.t), ru), 1e-4) << where << " (up)";
        // The norm folded in (where the kernel takes it), and the normalized rows it writes.
        if (!cuda::qgemv_staged_fits(qf, c.n, c.k)) continue;  // (qgemv_takes_norm)
        auto on = dev_floats(std::vector<float>(static_cast<size_t>(c.n * c.m), nan), {c.n, c.m});
        auto xo = dev_floats(std::vector<float>(xs.size(), nan), {c.n, c.k});
        cuda::XNorm nm;
        nm.w = nw_d.t.data;
        nm.eps = 1e-5f;
        nm.out = static_cast<float*>(xo.t.data);
        cuda::QGemvSeg seg;
        seg.w = p.t.data, seg.out = static_cast<float*>(on.t.data), seg.m = c.m;
        ASSERT_EQ(cuda::launch_qgemv_multi(qf, &seg, 1, static_cast<const float*>(x.t.data), c.n, c.k, false, nullptr,
                                           cuda::QGemvPath::Staged, &nm, cl),
                  cudaSuccess)
            << where;
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << where;
        EXPECT_LE(rel(download_floats(on.t), refn), 1e-3) << where << " (norm)";
        std::vector<double> xnd(xn.begin(), xn.end());
        EXPECT_LE(rel(download_floats(xo.t), xnd), 1e-5) << where << " (normalized rows)";
      }
      EXPECT_GE(plain_runs, 1) << f << " m " << c.m << " k " << c.k << " n " << c.n << ": no cluster size taken";
      EXPECT_GE(glu_runs, 1) << f << " m " << c.m << " k " << c.k << " n " << c.n << ": no GLU cluster size taken";
    }
  }
}

// The packed tensor-core GEMM (qgemm.cuh), int4 and int8, against a product of x rounded as the
// kernel rounds it (BF16; int8 F16) and the decoded weights, exact or rounded to BF16 as the
// plan multiplies them (what is left is F32 summation order): each n8 tile count (n 1-64), k
// slices forced to 1, 2, 3, 16 and the planner's choice (cluster sums in slice order; 9-16 slices
// are non-portable cluster sizes), both int4 weight paths at <= 16 rows, phases of 1 and 2 units
// and as many as fit, rows past a 128-row block, bias, and accumulate into a random output;
// outputs poisoned with NaN otherwise.
TEST(CudaQuant, PackedGemmMatchesReference) {
  SKIP_WITHOUT_GPU();
  if (!cuda::qgemm_available(0)) GTEST_SKIP() << "needs an sm_90a build on a compute capability 9.0 GPU";
  struct Case {
    int64_t m, k;
    int n;
  };
  const Case cases[] = {{37, 200, 9},   {130, 1032, 16}, {301, 520, 17},  {260, 4104, 32}, {16, 64, 33},
                        {129, 3000, 64}, {1000, 264, 5}, {77, 13000, 40}, {200, 2504, 12}};
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  uint32_t seed = 1700;
  for (const char* fmt : {"int4", "int8"}) {
    const cuda::QFormat f = qformat(fmt);
    for (const Case& c : cases) {
      Packed p = make_packed(fmt, c.m, c.k, seed++);
      std::vector<float> wb(p.dec.size());
      for (size_t i = 0; i < wb.size(); ++i) wb[i] = cuda_test::round_to(DType::BF16, p.dec[i]);
      const auto xs = random_floats(static_cast<size_t>(c.n * c.k), seed++, -2.0f, 1.5f);
      const auto bs = random_floats(static_cast<size_t>(c.m), seed++);
      const auto acc0 = random_floats(static_cast<size_t>(c.n * c.m), seed++, -4.0f, 4.0f);
      auto x = dev_floats(xs, {c.n, c.k});
      auto bias = dev_floats(bs, {c.m});
      const DType xt = gemv_x(fmt);  // BF16, F16 for int8
      const auto ref_bf16 = reference(xs, wb, bs.data(), c.n, c.m, c.k, true, xt);
      const auto ref_exact = reference(xs, p.dec, bs.data(), c.n, c.m, c.k, true, xt);
      auto xq = dev_tensor(DType::I8, {static_cast<int64_t>(cuda::qgemm_x_bytes(f, c.n, c.k))});
      const int units = static_cast<int>(cuda::qweight_k_pad(f, c.k) / cuda::qformat_unit(f));
      std::vector<cuda::QGemmPlan> plans{cuda::plan_qgemm(f, c.n, c.m, c.k, sms)};
      int variant = 0;
      for (int splits : {1, 2, 3, 16}) {
        if (splits > units) continue;
        cuda::QGemmPlan pl;
        pl.units = (units + splits - 1) / splits;
        pl.splits = (units + pl.units - 1) / pl.units;
        pl.phase = variant % 3;  // 0 (as many as fit), 1, 2
        pl.offset_sums = variant % 2 == 0;
        ++variant;
        plans.push_back(pl);
      }
      for (const cuda::QGemmPlan& pl : plans) {
        const bool exact = cuda::qgemm_exact_weights(f, pl, c.n);
        EXPECT_EQ(exact, f == cuda::QFormat::Int8 || (pl.offset_sums && c.n <= 16));
        for (bool accumulate : {false, true}) {
          auto out = accumulate ? dev_floats(acc0, {c.n, c.m}) : dev_tensor(DType::F32, {c.n, c.m});
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          ASSERT_EQ(cuda::launch_qgemm(f, p.t.data, c.m, c.k, static_cast<const float*>(x.t.data), c.n,
                                       static_cast<const float*>(bias.t.data), static_cast<float*>(out.t.data),
                                       accumulate, pl, xq.t.data, /*pdl=*/false, nullptr),
                    cudaSuccess);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          std::vector<double> want = exact ? ref_exact : ref_bf16;
          if (accumulate)
            for (size_t i = 0; i < want.size(); ++i) want[i] += acc0[i];
          // (int4 exact weights: 136 + q times x summed in F32 before 136 * sum(x) comes off, as
          // the GEMV, whose tests take 1e-4)
          EXPECT_LE(rel(download_floats(out.t), want), exact ? 1e-4 : 4e-5)
              << fmt << " m " << c.m << " k " << c.k << " n " << c.n << " splits " << pl.splits << " units " << pl.units
              << " phase " << pl.phase << (exact ? " exact" : " bf16") << (accumulate ? " accumulate" : "");
        }
      }
    }
  }
  // What it declines: FP8 (cuBLASLt's FP8 GEMM takes it), k % 8 != 0, more than 64 rows.
  EXPECT_FALSE(cuda::qgemm_supported(cuda::QFormat::Fp8, 16, 256, nullptr));
  EXPECT_FALSE(cuda::qgemm_supported(cuda::QFormat::Int4, 16, 260, nullptr));
  EXPECT_FALSE(cuda::qgemm_supported(cuda::QFormat::Int8, 65, 256, nullptr));
}

// The wgmma GEMM for many rows (qgemm_wg.cuh): int4 multiplies BF16 q * scale with BF16 x, int8
// exact q with F16 x; every k slice count up to 8 (clusters), partial 128-row tiles of x and of
// the weights, accumulate and bias, and a second matrix reading the x staged for the first.
TEST(CudaQuant, PackedWgmmaGemmMatchesReference) {
  SKIP_WITHOUT_GPU();
  if (!cuda::qgemm_wg_available(0)) GTEST_SKIP() << "needs an sm_90a build on a compute capability 9.0 GPU";
  struct Case {
    int64_t m, k;
    int n;
  };
  const Case cases[] = {{37, 200, 65},    {130, 1032, 128}, {301, 520, 129}, {260, 4104, 200},
                        {129, 3000, 300}, {1000, 264, 100}, {77, 13000, 70}};
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  uint32_t seed = 2900;
  for (const char* fmt : {"int4", "int8"}) {
    const cuda::QFormat f = qformat(fmt);
    for (const Case& c : cases) {
      Packed p = make_packed(fmt, c.m, c.k, seed++);
      Packed p2 = make_packed(fmt, c.m, c.k, seed++);
      const bool int4 = f == cuda::QFormat::Int4;
      // int4: the BF16 values q * scale (the dequantizing fallback's); int8: exact q * scale.
      auto weights = [&](const Packed& pk) {
        std::vector<float> wv(pk.dec.size());
        for (size_t i = 0; i < wv.size(); ++i) wv[i] = int4 ? cuda_test::round_to(DType::BF16, pk.dec[i]) : pk.dec[i];
        return wv;
      };
      const auto xs = random_floats(static_cast<size_t>(c.n * c.k), seed++, -2.0f, 1.5f);
      const auto bs = random_floats(static_cast<size_t>(c.m), seed++);
      const auto acc0 = random_floats(static_cast<size_t>(c.n * c.m), seed++, -4.0f, 4.0f);
      auto x = dev_floats(xs, {c.n, c.k});
      auto bias = dev_floats(bs, {c.m});
      const DType xt = gemv_x(fmt);  // BF16, F16 for int8
      const auto ref = reference(xs, weights(p), bs.data(), c.n, c.m, c.k, true, xt);
      const auto ref2 = reference(xs, weights(p2), nullptr, c.n, c.m, c.k, true, xt);
      auto xq = dev_tensor(DType::I8, {static_cast<int64_t>(cuda::qgemm_wg_x_bytes(f, c.n, c.k))});
      const int units = static_cast<int>(cuda::qweight_k_pad(f, c.k) / cuda::qformat_unit(f));
      std::vector<cuda::QGemmWgPlan> plans{cuda::plan_qgemm_wg(f, c.n, c.m, c.k, sms)};
      for (int splits : {1, 2, 3, 8}) {
        if (splits > units) continue;
        cuda::QGemmWgPlan pl;
        pl.units = (units + splits - 1) / splits;
        pl.splits = (units + pl.units - 1) / pl.units;
        plans.push_back(pl);
      }
      for (const cuda::QGemmWgPlan& pl : plans) {
        for (bool accumulate : {false, true}) {
          auto out = accumulate ? dev_floats(acc0, {c.n, c.m}) : dev_tensor(DType::F32, {c.n, c.m});
          auto out2 = dev_tensor(DType::F32, {c.n, c.m});
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          ASSERT_EQ(cuda::launch_qgemm_wg(f, p.t.data, c.m, c.k, static_cast<const float*>(x.t.data), c.n,
                                          static_cast<const float*>(bias.t.data), static_cast<float*>(out.t.data),
                                          accumulate, pl, xq.t.data, /*pdl=*/false, nullptr),
                    cudaSuccess);
          ASSERT_EQ(cuda::launch_qgemm_wg(f, p2.t.data, c.m, c.k, static_cast<const float*>(x.t.data), c.n, nullptr,
                                          static_cast<float*>(out2.t.data), false, pl, xq.t.data, /*pdl=*/true,
                                          nullptr, /*stage_x=*/false),
                    cudaSuccess);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          std::vector<double> want = ref;
          if (accumulate)
            for (size_t i = 0; i < want.size(); ++i) want[i] += acc0[i];
          const std::string what = std::string(fmt) + " m " + std::to_string(c.m) + " k " + std::to_string(c.k) +
                                   " n " + std::to_string(c.n) + " splits " + std::to_string(pl.splits) +
                                   (accumulate ? " accumulate" : "");
          EXPECT_LE(rel(download_floats(out.t), want), 4e-5) << what;
          EXPECT_LE(rel(download_floats(out2.t), ref2), 4e-5) << what << " (x staged before)";
        }
      }
    }
  }
  // What it declines: FP8 (cuBLASLt's FP8 GEMM takes it), k % 8 != 0.
  EXPECT_FALSE(cuda::qgemm_wg_supported(cuda::QFormat::Fp8, 128, 256, nullptr));
  EXPECT_FALSE(cuda::qgemm_wg_supported(cuda::QFormat::Int4, 128, 260, nullptr));
  EXPECT_TRUE(cuda::qgemm_wg_supported(cuda::QFormat::Int8, 4096, 256, nullptr));
}

// q/k/v-style segments and gate/up + GLU through each kernel, with more tiles than resident blocks.
TEST(CudaQuant, GemvKernelsSegmentsAndGlu) {
  SKIP_WITHOUT_GPU();
  for (const char* f : {"int4", "fp8", "int8"}) {
    const cuda::QFormat qf = qformat(f);
    const DType xt = gemv_x(f);
    const int64_t k = 264, ms[3] = {5001, 3001, 77}, mf = 4500;
    Packed w[3] = {make_packed(f, ms[0], k, 41), make_packed(f, ms[1], k, 42), make_packed(f, ms[2], k, 43)};
    Packed g = make_packed(f, mf, k, 44), u = make_packed(f, mf, k, 45);
    for (int n : {1, 3}) {
      const auto xs = random_floats(static_cast<size_t>(n * k), 46 + n);
      auto x = dev_floats(xs, {n, k});
      const auto* xp = static_cast<const float*>(x.t.data);
      for (cuda::QGemvPath path : {cuda::QGemvPath::Staged, cuda::QGemvPath::Direct}) {
        DevTensor outs[3] = {dev_tensor(DType::F32, {n, ms[0]}), dev_tensor(DType::F32, {n, ms[1]}),
                             dev_tensor(DType::F32, {n, ms[2]})};
        const auto bs = random_floats(static_cast<size_t>(ms[1]), 48);
        auto bias = dev_floats(bs, {ms[1]});
        cuda::QGemvSeg segs[3];
        for (int i = 0; i < 3; ++i) {
          segs[i].w = w[i].t.data;
          segs[i].out = static_cast<float*>(outs[i].t.data);
          segs[i].m = ms[i];
        }
        segs[1].bias = static_cast<const float*>(bias.t.data);
        auto og = dev_tensor(DType::F32, {n, mf}), ou = dev_tensor(DType::F32, {n, mf}), oglu = dev_tensor(DType::F32, {n, mf});
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        ASSERT_EQ(cuda::launch_qgemv_multi(qf, segs, 3, xp, n, k, false, nullptr, path), cudaSuccess);
        ASSERT_EQ(cuda::launch_qgemv_glu(qf, g.t.data, u.t.data, xp, n, mf, k, false, static_cast<float*>(oglu.t.data),
                                         static_cast<float*>(og.t.data), static_cast<float*>(ou.t.data), false, nullptr, path),
                  cudaSuccess);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const int pi = static_cast<int>(path);
        for (int i = 0; i < 3; ++i)
          EXPECT_LE(rel(download_floats(outs[i].t), reference(xs, w[i].dec, i == 1 ? bs.data() : nullptr, n, ms[i], k, true, xt)), 1e-4)
              << f << " path " << pi << " segment " << i << " n " << n;
        const auto rg = reference(xs, g.dec, nullptr, n, mf, k, true, xt);
        const auto ru = reference(xs, u.dec, nullptr, n, mf, k, true, xt);
        std::vector<double> rglu(rg.size());
        for (size_t i = 0; i < rg.size(); ++i) rglu[i] = rg[i] / (1.0 + std::exp(-rg[i])) * ru[i];
        EXPECT_LE(rel(download_floats(og.t), rg), 1e-4) << f << " path " << pi << " gate n " << n;
        EXPECT_LE(rel(download_floats(ou.t), ru), 1e-4) << f << " path " << pi << " up n " << n;
        EXPECT_LE(rel(download_floats(oglu.t), rglu), 2e-4) << f << " path " << pi << " glu n " << n;
      }
    }
  }
}

// The one-row plain GEMV's start gate (hold_gate.cuh; the packed o projection after a decode
// attention): where qgemv_gate_takes, the gated kernel gives the ungated result bit for bit with
// the gate open (its last block sets the count back to zero, no block counts a timeout) and with
// it shut (every block goes ahead after kHoldGateTimeoutNs and counts it).
TEST(CudaQuant, GemvGateChangesNothing) {
  SKIP_WITHOUT_GPU();
  uint32_t* words = nullptr;
  ASSERT_EQ(cudaMalloc(&words, 3 * sizeof(uint32_t)), cudaSuccess);
  // With EMBER_CUDA_QGEMV_GATE_TWIN=3 (ctest test_cuda_backend_gate_twin) the gated kernel of int4
  // and fp8 runs on 32-row tiles, unless a TMA mask is set (the TMA ring takes precedence): m 1000
  // / 1016 put the last tile's second 16 rows past the end / partly inside.
  const char* twin_env = std::getenv("EMBER_CUDA_QGEMV_GATE_TWIN");
  const bool twin_asked = twin_env != nullptr && std::strcmp(twin_env, "3") == 0 &&
                          std::getenv("EMBER_CUDA_QGEMV_TMA") == nullptr;
  for (const int64_t m : {int64_t{1000}, int64_t{1016}}) {
    for (const char* f : {"int4", "fp8", "int8"}) {
      const cuda::QFormat qf = qformat(f);
      const int64_t k = 4000;  // (int4: 32 units, the 4-unit ring an o projection takes)
      if (twin_asked) {
        EXPECT_EQ(cuda::qgemv_staged_gate_twin(qf), qf != cuda::QFormat::Int8) << f;
      }
      ASSERT_TRUE(cuda::qgemv_gate_takes(qf, 1, m, k, false)) << f;
      EXPECT_FALSE(cuda::qgemv_gate_takes(qf, 2, m, k, false)) << f;
      EXPECT_FALSE(cuda::qgemv_gate_takes(qf, 1, m, k, true)) << f;
      Packed w = make_packed(f, m, k, 81);
      const auto acc0 = random_floats(static_cast<size_t>(m), 82);
      const auto xs = random_floats(static_cast<size_t>(k), 83);
      auto x = dev_floats(xs, {1, k});
      auto run = [&](const cuda::HoldGateUse* gate) {
        auto out = dev_floats(acc0, {1, m});
        cuda::QGemvSeg seg{w.t.data, nullptr, static_cast<float*>(out.t.data), m, /*accumulate=*/true};
        EXPECT_EQ(cuda::launch_qgemv_multi(qf, &seg, 1, static_cast<const float*>(x.t.data), 1, k, false, nullptr,
                                           cuda::QGemvPath::Auto, nullptr, 0, nullptr, nullptr, gate),
                  cudaSuccess);
        EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        return download_floats(out.t);
      };
      auto read_words = [&] {
        std::array<uint32_t, 3> h{};
        EXPECT_EQ(cudaMemcpy(h.data(), words, sizeof(h), cudaMemcpyDeviceToHost), cudaSuccess);
        return h;
      };
      const std::vector<float> plain = run(nullptr);
      std::vector<double> ref = reference(xs, w.dec, nullptr, 1, m, k, true, gemv_x(f));
      for (size_t i = 0; i < ref.size(); ++i) ref[i] += acc0[i];
      EXPECT_LE(rel(plain, ref), 1e-4) << f;
      for (const bool open : {true, false}) {
        const uint32_t init[3] = {open ? 8u : 0u, 0u, 0u};
        ASSERT_EQ(cudaMemcpy(words, init, sizeof(init), cudaMemcpyHostToDevice), cudaSuccess);
        const cuda::HoldGateUse gate{words, 8, 3};
        const std::vector<float> got = run(&gate);
        EXPECT_EQ(0, std::memcmp(got.data(), plain.data(), plain.size() * sizeof(float)))
            << f << " m " << m << " open " << open;
        const auto h = read_words();
        EXPECT_EQ(h[0], 0u) << f << " open " << open << ": the count after the last block";
        EXPECT_EQ(h[1], 0u) << f << " open " << open << ": blocks passed, after the last";
        if (open)
          EXPECT_EQ(h[2], 0u) << f << ": blocks that timed out at an open gate";
        else
          EXPECT_GT(h[2], 0u) << f << ": blocks that timed out at a shut gate";
      }
    }
  }
  cudaFree(words);
}

// The batch-1 decode attention fused with the o projection (attn_o.cuh) against a double-precision
// attention of the same cache and the decoded packed o weights: the attention row it writes (F32)
// and acc + round(row) @ w^T (x rounded to BF16 for int4, F16 for fp8, as the kernel feeds its
// tensor cores). Paged cache with a shuffled block table, odd block sizes, GQA groups 1-8, m past a
// whole 32-row tile, sliding window, soft-capping, F16 K/V, one key and 1,500 keys; blocks of 512
// and 256 threads, of 32 o rows and (int4) 64; k 8192 refused where its rows overflow shared memory;
// and the keys-split form (attn_o_split.cuh) on every case, twice (its counters left zero).
TEST(CudaQuant, AttnOMatchesReference) {
  SKIP_WITHOUT_GPU();
  struct Case {
    int n_heads, n_kv, len, block_size, window;
    int64_t m;
    float softcap;
    DType kv;
  };
  const Case cases[] = {
      {32, 8, 384, 16, 0, 4096, 0.0f, DType::BF16}, {32, 8, 37, 16, 20, 1000, 30.0f, DType::BF16},
      {8, 2, 1, 7, 0, 200, 0.0f, DType::BF16},      {12, 4, 1500, 16, 0, 333, 0.0f, DType::F16},
      {8, 1, 130, 5, 0, 64, 0.0f, DType::BF16},     {64, 8, 300, 16, 0, 520, 0.0f, DType::BF16},
  };
  int seed = 900;
  for (const Case& c : cases) {
    for (const char* f : {"int4", "fp8"}) {
      const int d = 128, k = c.n_heads * d, group = c.n_heads / c.n_kv;
      const std::string label = std::string(f) + " heads " + std::to_string(c.n_heads) + "/" +
                                std::to_string(c.n_kv) + " len " + std::to_string(c.len) + " m " + std::to_string(c.m);
      const int blocks = (c.len + c.block_size - 1) / c.block_size, pool = blocks + 3;
      std::vector<int32_t> table(static_cast<size_t>(blocks));
      for (int b = 0; b < blocks; ++b) table[static_cast<size_t>(b)] = (b * 7 + 3) % pool;  // (7 and pool coprime below)
      if (std::gcd(7, pool) != 1)
        for (int b = 0; b < blocks; ++b) table[static_cast<size_t>(b)] = pool - 1 - b;
      const size_t cache_elems = static_cast<size_t>(pool) * c.block_size * c.n_kv * d;
      std::vector<float> kh = random_floats(cache_elems, ++seed), vh = random_floats(cache_elems, ++seed, -2.0f, 2.0f);
      for (auto& x : kh) x = cuda_test::round_to(c.kv, x);
      for (auto& x : vh) x = cuda_test::round_to(c.kv, x);
      const std::vector<float> q = random_floats(static_cast<size_t>(k), ++seed, -0.5f, 0.5f);
      DevTensor kd = dev_tensor(c.kv, {static_cast<int64_t>(cache_elems)});
      DevTensor vd = dev_tensor(c.kv, {static_cast<int64_t>(cache_elems)});
      const auto kb = cuda_test::encode(c.kv, kh), vb = cuda_test::encode(c.kv, vh);
      backend()->upload(kd.t.data, kb.data(), kb.size());
      backend()->upload(vd.t.data, vb.data(), vb.size());
      DevTensor qd = dev_floats(q, {1, k});
      DevTensor outd = dev_tensor(DType::F32, {1, k});
      DevTensor meta = dev_tensor(DType::I32, {2 + blocks});
      std::vector<int32_t> mh = {c.len, 0};
      mh.insert(mh.end(), table.begin(), table.end());
      backend()->upload(meta.t.data, mh.data(), mh.size() * 4);
      Packed w = make_packed(f, c.m, k, static_cast<uint32_t>(++seed));
      const auto acc0 = random_floats(static_cast<size_t>(c.m), ++seed);
      DevTensor accd = dev_floats(acc0, {1, c.m});
      cuda::AttnOArgs a;
      cuda::PagedAttnArgs& pa = a.attn;
      pa.q = static_cast<const float*>(qd.t.data);
      pa.out = static_cast<float*>(outd.t.data);
      pa.k = kd.t.data;
      pa.v = vd.t.data;
      pa.kv_type = c.kv;
      pa.seq_lens = static_cast<const int32_t*>(meta.t.data);
      pa.seq_ids = static_cast<const int32_t*>(meta.t.data) + 1;
      pa.block_tables = static_cast<const int32_t*>(meta.t.data) + 2;
      pa.max_blocks_per_seq = blocks;
      pa.block_size = c.block_size;
      pa.n_heads = c.n_heads;
      pa.n_kv_heads = c.n_kv;
      pa.head_dim = d;
      pa.scale = 0.3f;
      pa.softcap = c.softcap;
      pa.window = c.window;
      pa.max_kv = c.len + 5;
      pa.pdl = false;
      a.format = qformat(f);
      a.w = w.t.data;
      a.m = c.m;
      a.acc = static_cast<float*>(accd.t.data);
      // The reference attention row.
      std::vector<double> row(static_cast<size_t>(k));
      const int t0 = c.window > 0 ? std::max(0, c.len - c.window) : 0;
      for (int h = 0; h < c.n_heads; ++h) {
        const int kv = h / group;
        auto at = [&](int t, int i) {
          return (static_cast<size_t>(table[static_cast<size_t>(t / c.block_size)]) * c.block_size + t % c.block_size) *
                     c.n_kv * d + static_cast<size_t>(kv) * d + i;
        };
        std::vector<double> sc;
        double mx = -1e300;
        for (int t = t0; t < c.len; ++t) {
          double dot = 0;
          for (int i = 0; i < d; ++i) dot += double(q[static_cast<size_t>(h * d + i)]) * kh[at(t, i)];
          dot *= 0.3;
          if (c.softcap > 0) dot = c.softcap * std::tanh(dot / c.softcap);
          sc.push_back(dot);
          mx = std::max(mx, dot);
        }
        double sum = 0;
        for (double& x : sc) sum += (x = std::exp(x - mx));
        for (int i = 0; i < d; ++i) {
          double o = 0;
          for (int t = t0; t < c.len; ++t) o += sc[static_cast<size_t>(t - t0)] * vh[at(t, i)];
          row[static_cast<size_t>(h * d + i)] = o / sum;
        }
      }
      // After a launch from acc0 (and the row zeroed): the row, and acc against acc0 + the row
      // the kernel wrote, rounded as it rounds it, times the decoded weights.
      auto check = [&](const std::string& tl) {
        const std::vector<float> got_row = download_floats(outd.t);
        EXPECT_LE(rel(got_row, row), 1e-5) << tl << ": the attention row";
        std::vector<double> ref = reference(got_row, w.dec, nullptr, 1, c.m, k, true,
                                            std::string(f) == "int4" ? DType::BF16 : DType::F16);
        for (size_t i = 0; i < ref.size(); ++i) ref[i] += acc0[i];
        EXPECT_LE(rel(download_floats(accd.t), ref), 1e-4) << tl << ": acc";
      };
      auto reset = [&] {
        backend()->upload(accd.t.data, acc0.data(), acc0.size() * sizeof(float));
        ASSERT_EQ(cudaMemset(outd.t.data, 0, static_cast<size_t>(k) * sizeof(float)), cudaSuccess);
      };
      // Blocks of 512 threads (the default), then of 256 (EMBER_CUDA_ATTN_O_THREADS), of 32 o
      // rows, and for int4 of 64 (EMBER_CUDA_ATTN_O_ROWS), from acc0 each.
      for (const int variant : {0, 1, 2, 3}) {
        const int threads = variant % 2 ? 256 : 512, rows = variant >= 2 ? 64 : 32;
        if (rows == 64 && std::string(f) != "int4") continue;
        a.threads = threads;
        a.rows = rows;
        // (k 8192: 256 KiB of o rows a block in fp8, 257 KiB at 64 int4 rows)
        const bool too_big = c.n_heads == 64 && (std::string(f) == "fp8" || rows == 64);
        const std::string tl = label + " threads " + std::to_string(threads) + " rows " + std::to_string(rows);
        reset();
        const bool takes = cuda::attn_o_takes(a);
        const bool launched = takes && cuda::launch_attn_o(a, nullptr) == cudaSuccess;
        ASSERT_EQ(takes, !too_big) << tl;
        if (too_big) continue;
        ASSERT_TRUE(launched) << tl;
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << tl;
        check(tl);
      }
      // The keys-split form (attn_o_split.cuh; it takes every case), twice from acc0: the second
      // launch finds the counters zero again, as the first must leave them.
      DevTensor part = dev_tensor(DType::F32, {c.n_kv * c.m});
      DevTensor counters = dev_tensor(DType::I32, {cuda::kAttnOSplitMaxChunks});
      ASSERT_EQ(cudaMemset(counters.t.data, 0, cuda::kAttnOSplitMaxChunks * sizeof(uint32_t)), cudaSuccess);
      const cuda::AttnOSplitArgs sa{pa, qformat(f), w.t.data, c.m, static_cast<float*>(accd.t.data),
                                    static_cast<float*>(part.t.data), static_cast<uint32_t*>(counters.t.data)};
      ASSERT_TRUE(cuda::attn_o_split_takes(sa)) << label << " split";
      EXPECT_GE(cuda::attn_o_split_parts(sa), 1) << label;
      for (int launch = 0; launch < 2; ++launch) {
        const std::string tl = label + " split, launch " + std::to_string(launch + 1);
        reset();
        ASSERT_EQ(cuda::launch_attn_o_split(sa, nullptr), cudaSuccess) << tl;
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << tl;
        check(tl);
        std::vector<int32_t> left(cuda::kAttnOSplitMaxChunks, -1);
        backend()->download(left.data(), counters.t.data, left.size() * sizeof(int32_t));
        for (const int32_t v : left) ASSERT_EQ(v, 0) << tl << ": a counter left non-zero";
      }
    }
  }
}

// The L2 prefetch of the next GEMV's weights (L2Prefetch, EMBER_CUDA_NEXT_L2) is a hint: the
// one-row GEMV that issues it (the staged kernel's plain 8-unit ring: a down projection, odd sizes
// with a partly covered last tile, accumulating into out as the down projection does) writes the
// same bits with it at each of its three points (when 0, 1, 2) as without, the next matrices are
// unchanged, and launch_qgemv_multi ignores it where qgemv_prefetch_takes says no (two rows, the
// norm folded, int4 at k <= 4096) and refuses a misaligned range.
TEST(CudaQuant, GemvPrefetchChangesNothing) {
  SKIP_WITHOUT_GPU();
  for (const char* f : {"int4", "fp8", "int8"}) {
    const cuda::QFormat qf = qformat(f);
    const int64_t m = 1000, k = 5000, mq = 640, mk = 128;  // (int4 at k 5000: 40 units, past the 4-unit ring)
    ASSERT_TRUE(cuda::qgemv_prefetch_takes(qf, 1, m, k, false)) << f;
    EXPECT_FALSE(cuda::qgemv_prefetch_takes(qf, 2, m, k, false)) << f;
    EXPECT_FALSE(cuda::qgemv_prefetch_takes(qf, 1, m, k, true)) << f;
    if (qf == cuda::QFormat::Int4) {
      EXPECT_FALSE(cuda::qgemv_prefetch_takes(qf, 1, m, 4096, false));
    }
    Packed w = make_packed(f, m, k, 71);
    Packed nq = make_packed(f, mq, 4096, 72), nk = make_packed(f, mk, 4096, 73), nv = make_packed(f, mk, 4096, 74);
    const size_t next_bytes[3] = {cuda::qweight_bytes(qf, mq, 4096), cuda::qweight_bytes(qf, mk, 4096),
                                  cuda::qweight_bytes(qf, mk, 4096)};
    std::vector<uint8_t> before[3];
    const void* next_p[3] = {nq.t.data, nk.t.data, nv.t.data};
    for (int i = 0; i < 3; ++i) {
      before[i].resize(next_bytes[i]);
      backend()->download(before[i].data(), next_p[i], next_bytes[i]);
    }
    const auto acc0 = random_floats(static_cast<size_t>(2 * m), 75);
    for (int n : {1, 2}) {
      const auto xs = random_floats(static_cast<size_t>(n * k), 76 + n);
      auto x = dev_floats(xs, {n, k});
      const auto* xp = static_cast<const float*>(x.t.data);
      auto run = [&](const cuda::L2Prefetch* pf) {
        auto out = dev_floats(std::vector<float>(acc0.begin(), acc0.begin() + n * m), {n, m});
        cuda::QGemvSeg seg{w.t.data, nullptr, static_cast<float*>(out.t.data), m, /*accumulate=*/true};
        EXPECT_EQ(cuda::launch_qgemv_multi(qf, &seg, 1, xp, n, k, false, nullptr, cuda::QGemvPath::Auto, nullptr, 0,
                                           nullptr, pf),
                  cudaSuccess);
        EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        return download_floats(out.t);
      };
      const std::vector<float> plain = run(nullptr);
      std::vector<double> ref = reference(xs, w.dec, nullptr, n, m, k, true, gemv_x(f));
      for (size_t i = 0; i < ref.size(); ++i) ref[i] += acc0[i];
      EXPECT_LE(rel(plain, ref), 1e-4) << f << " n " << n;
      for (int when : {0, 1, 2}) {
        cuda::L2Prefetch pf;
        for (int i = 0; i < 3; ++i) {
          pf.p[i] = next_p[i];
          pf.bytes[i] = static_cast<uint32_t>(next_bytes[i] / 16 * 16);
        }
        pf.n = 3;
        pf.when = when;
        const std::vector<float> got = run(&pf);
        EXPECT_EQ(0, std::memcmp(got.data(), plain.data(), plain.size() * sizeof(float)))
            << f << " n " << n << " when " << when;
      }
    }
    for (int i = 0; i < 3; ++i) {
      std::vector<uint8_t> after(next_bytes[i]);
      backend()->download(after.data(), next_p[i], next_bytes[i]);
      EXPECT_EQ(after, before[i]) << f << " next matrix " << i;
    }
    cuda::L2Prefetch bad;
    bad.p[0] = static_cast<const uint8_t*>(nq.t.data) + 8;
    bad.bytes[0] = 4096;
    bad.n = 1;
    auto x = dev_floats(random_floats(static_cast<size_t>(k), 79), {1, k});
    auto out = dev_tensor(DType::F32, {1, m});
    cuda::QGemvSeg seg{w.t.data, nullptr, static_cast<float*>(out.t.data), m, false};
    EXPECT_EQ(cuda::launch_qgemv_multi(qf, &seg, 1, static_cast<const float*>(x.t.data), 1, k, false, nullptr,
                                       cuda::QGemvPath::Auto, nullptr, 0, nullptr, &bad),
              cudaErrorInvalidValue)
        << f;
  }
}

// The q/k/v GEMV's rope + K/V store epilogue (GemvRope) against the same GEMV without it followed
// by launch_rope_kv_store (the rope + store as the backend launches them apart; the attention's
// prologue computes the same): the packed GEMV (int4 / fp8 / int8, the norm folded: the one-row
// path that takes the epilogue) and the BF16 GEMV (variant 7), head dims 64 and 128, GQA groups
// 1 and 4, biases on q and v, BF16 and F16 caches, a position past 2^11, a scaling factor, a slot
// of -1 (nothing stored). The epilogue's tiles / warps hold rows i and D/2 + i of a head, each
// row's sum is the plain kernel's, so q, k, v (F32) agree to the rope's rounding and the caches
// (poisoned before) to one unit in the last place, with every slot but the step's left as it was.
TEST(CudaQuant, GemvRopeEpilogueEqualsRopeKernel) {
  SKIP_WITHOUT_GPU();
  struct Case {
    int hd, hq, hk;
    int64_t k;
    int32_t pos, slot;
    float factor;
    bool bf16;
  };
  const Case cases[] = {{128, 8, 2, 1032, 37, 5, 1.0f, true},
                        {64, 6, 6, 392, 2051, -1, 0.75f, false},
                        {128, 32, 8, 4096, 300, 11, 1.0f, true},
                        {64, 4, 1, 264, 5, 0, 1.0f, false}};
  constexpr int kSlots = 16;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const std::string f : {"int4", "fp8", "int8", "bf16"}) {
    const bool bf16 = f == "bf16";
    const cuda::QFormat qf = bf16 ? cuda::QFormat::Int4 : qformat(f);
    for (const Case& c : cases) {
      const int64_t mq = int64_t{c.hq} * c.hd, mkv = int64_t{c.hk} * c.hd;
      const std::string where = f + " hd " + std::to_string(c.hd) + " heads " + std::to_string(c.hq) + "/" +
                                std::to_string(c.hk) + " k " + std::to_string(c.k);
      const Tensor wq = gpu_weight(f, mq, c.k, 61), wk = gpu_weight(f, mkv, c.k, 62), wv = gpu_weight(f, mkv, c.k, 63);
      const auto xs = random_floats(static_cast<size_t>(c.k), 64), nws = random_floats(static_cast<size_t>(c.k), 65, 0.5f, 1.5f);
      const auto bq = random_floats(static_cast<size_t>(mq), 66), bv = random_floats(static_cast<size_t>(mkv), 67);
      auto x = dev_floats(xs, {1, c.k});
      auto nw = dev_floats(nws, {c.k});
      auto dbq = dev_floats(bq, {mq}), dbv = dev_floats(bv, {mkv});
      std::vector<float> freq(static_cast<size_t>(c.hd / 2));
      for (int i = 0; i < c.hd / 2; ++i) freq[static_cast<size_t>(i)] = std::pow(500000.0f, -2.0f * i / c.hd);
      auto dfreq = dev_floats(freq, {c.hd / 2});
      auto ints = dev_tensor(DType::I32, {2});
      const int32_t host_ints[2] = {c.pos, c.slot};
      backend()->upload(ints.t.data, host_ints, sizeof(host_ints));
      const auto* dpos = static_cast<const int32_t*>(ints.t.data);
      const DType ct = c.bf16 ? DType::BF16 : DType::F16;
      struct Side {
        DevTensor q, k, v, xo, kc, vc;
      };
      auto side = [&] {
        return Side{dev_floats(std::vector<float>(static_cast<size_t>(mq), nan), {1, mq}),
                    dev_floats(std::vector<float>(static_cast<size_t>(mkv), nan), {1, mkv}),
                    dev_floats(std::vector<float>(static_cast<size_t>(mkv), nan), {1, mkv}),
                    dev_floats(std::vector<float>(static_cast<size_t>(c.k), nan), {1, c.k}),
                    dev_tensor(ct, {kSlots, c.hk, c.hd}), dev_tensor(ct, {kSlots, c.hk, c.hd})};
      };
      Side ref = side(), got = side();
      auto segs_of = [&](Side& sd, cuda::QGemvSeg (&g)[3]) {
        g[0] = cuda::QGemvSeg{wq.data, static_cast<const float*>(dbq.t.data), static_cast<float*>(sd.q.t.data), mq, false};
        g[1] = cuda::QGemvSeg{wk.data, nullptr, static_cast<float*>(sd.k.t.data), mkv, false};
        g[2] = cuda::QGemvSeg{wv.data, static_cast<const float*>(dbv.t.data), static_cast<float*>(sd.v.t.data), mkv, false};
      };
      const auto* xp = static_cast<const float*>(x.t.data);
      cuda::QGemvSeg rs[3], gs[3];
      segs_of(ref, rs);
      segs_of(got, gs);
      cuda::GemvSeg rb[3], gb[3];  // (the BF16 GEMV's)
      for (int i = 0; i < 3; ++i) {
        rb[i] = cuda::GemvSeg{rs[i].w, rs[i].bias, rs[i].out, rs[i].m};
        gb[i] = cuda::GemvSeg{gs[i].w, gs[i].bias, gs[i].out, gs[i].m};
      }
      const cuda::XNorm rn{nw.t.data, false, 1e-5f, static_cast<float*>(ref.xo.t.data)};
      const cuda::XNorm gn{nw.t.data, false, 1e-5f, static_cast<float*>(got.xo.t.data)};
      if (bf16) ASSERT_TRUE(cuda::gemv_rope_takes(gb, 3, 1, c.k, 7, c.hd)) << where;
      else ASSERT_TRUE(cuda::qgemv_rope_takes(qf, gs, 3, 1, c.k, xp, &gn, c.hd)) << where;
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      if (bf16)
        ASSERT_EQ(cuda::launch_gemv_bf16_multi(rb, 3, xp, 1, c.k, 7, false, nullptr), cudaSuccess) << where;
      else
        ASSERT_EQ(cuda::launch_qgemv_multi(qf, rs, 3, xp, 1, c.k, false, nullptr, cuda::QGemvPath::Auto, &rn), cudaSuccess)
            << where;
      cuda::RopeKvStoreArgs a;
      a.q = static_cast<float*>(ref.q.t.data);
      a.hq = c.hq;
      a.k = static_cast<float*>(ref.k.t.data);
      a.v = static_cast<const float*>(ref.v.t.data);
      a.hk = c.hk;
      a.positions = dpos;
      a.inv_freq = static_cast<const float*>(dfreq.t.data);
      a.slots = dpos + 1;
      a.n = 1;
      a.head_dim = c.hd;
      a.neox = true;
      a.factor = c.factor;
      a.k_cache = ref.kc.t.data;
      a.v_cache = ref.vc.t.data;
      a.cache_type = ct;
      ASSERT_EQ(cuda::launch_rope_kv_store(a, nullptr), cudaSuccess) << where;
      const cuda::GemvRope rope{dpos, static_cast<const float*>(dfreq.t.data), dpos + 1, c.factor, c.hd,
                                 got.kc.t.data, got.vc.t.data, c.bf16};
      if (bf16)
        ASSERT_EQ(cuda::launch_gemv_bf16_multi(gb, 3, xp, 1, c.k, 7, false, nullptr, &rope), cudaSuccess) << where;
      else
        ASSERT_EQ(cuda::launch_qgemv_multi(qf, gs, 3, xp, 1, c.k, false, nullptr, cuda::QGemvPath::Auto, &gn, 0, &rope),
                  cudaSuccess)
            << where;
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << where;
      for (auto [name, r, g] : {std::tuple{"q", &ref.q, &got.q}, {"k", &ref.k, &got.k}, {"v", &ref.v, &got.v}}) {
        const auto rv = download_floats(r->t), gv = download_floats(g->t);
        EXPECT_LE(rel(gv, std::vector<double>(rv.begin(), rv.end())), 1e-6) << where << " " << name;
      }
      if (!bf16) {
        EXPECT_EQ(download_floats(got.xo.t), download_floats(ref.xo.t)) << where << " normalized x";
      }
      const size_t row = static_cast<size_t>(mkv);
      for (auto [name, r, g] : {std::tuple{"k cache", &ref.kc, &got.kc}, {"v cache", &ref.vc, &got.vc}}) {
        std::vector<uint16_t> rc(static_cast<size_t>(r->t.numel())), gc(rc.size());
        backend()->download(rc.data(), r->t.data, rc.size() * 2);
        backend()->download(gc.data(), g->t.data, gc.size() * 2);
        int far = 0, kept = 0, stored = 0;
        for (size_t i = 0; i < rc.size(); ++i) {
          const bool in_slot = c.slot >= 0 && i / row == static_cast<size_t>(c.slot);
          far += std::abs(int(rc[i]) - int(gc[i])) > 1;
          if (in_slot) stored += gc[i] != 0xffff;
          else kept += gc[i] == 0xffff;
        }
        EXPECT_EQ(far, 0) << where << " " << name;
        EXPECT_EQ(stored, c.slot >= 0 ? static_cast<int>(row) : 0) << where << " " << name;
        EXPECT_EQ(kept, static_cast<int>(rc.size() - (c.slot >= 0 ? row : 0))) << where << " " << name;
      }
    }
  }
  // What it does not take: more than one row, head dims not a multiple of 16, k past one round of
  // the one-row staging, no folded norm, other than three segments.
  Packed w = make_packed("int4", 256, 8192, 70);
  auto x = dev_floats(random_floats(8192 * 2, 71), {2, 8192});
  auto nw = dev_floats(random_floats(8192, 72), {8192});
  auto o = dev_tensor(DType::F32, {2, 256});
  const cuda::QGemvSeg s3[3] = {{w.t.data, nullptr, static_cast<float*>(o.t.data), 128, false},
                                {w.t.data, nullptr, static_cast<float*>(o.t.data), 64, false},
                                {w.t.data, nullptr, static_cast<float*>(o.t.data), 64, false}};
  auto xo = dev_tensor(DType::F32, {2, 8192});
  const cuda::XNorm nm{nw.t.data, false, 1e-5f, static_cast<float*>(xo.t.data)};
  const auto* xp = static_cast<const float*>(x.t.data);
  EXPECT_TRUE(cuda::qgemv_rope_takes(cuda::QFormat::Int4, s3, 3, 1, 4096, xp, &nm, 64));  // (the control)
  EXPECT_FALSE(cuda::qgemv_rope_takes(cuda::QFormat::Int4, s3, 3, 2, 4096, xp, &nm, 64));
  EXPECT_FALSE(cuda::qgemv_rope_takes(cuda::QFormat::Int4, s3, 3, 1, 4096, xp, &nm, 24));
  EXPECT_FALSE(cuda::qgemv_rope_takes(cuda::QFormat::Int4, s3, 3, 1, 8192, xp, &nm, 64));
  EXPECT_FALSE(cuda::qgemv_rope_takes(cuda::QFormat::Int4, s3, 3, 1, 4096, xp, nullptr, 64));
  EXPECT_FALSE(cuda::qgemv_rope_takes(cuda::QFormat::Int4, s3, 2, 1, 4096, xp, &nm, 64));
  cuda::GemvSeg b3[3];
  for (int i = 0; i < 3; ++i) b3[i] = cuda::GemvSeg{s3[i].w, nullptr, s3[i].out, s3[i].m};
  EXPECT_TRUE(cuda::gemv_rope_takes(b3, 3, 1, 4096, 7, 64));  // (the control)
  EXPECT_FALSE(cuda::gemv_rope_takes(b3, 3, 2, 4096, 7, 64));
  EXPECT_FALSE(cuda::gemv_rope_takes(b3, 3, 1, 4096, 6, 64));
  EXPECT_FALSE(cuda::gemv_rope_takes(b3, 3, 1, 4096, 7, 48));
  EXPECT_FALSE(cuda::gemv_rope_takes(b3, 2, 1, 4096, 7, 64));
}

// The FP8 GEMV on wgmma (W8A8, qgemv_wg.cuh) against a double product of the decoded weights
// and x as e4m3 rows (fp8_rows: what the kernel stages); what is left is the tensor cores'
// accumulation (as Fp8GemmScalesExact; 3e-4 measured on an H200). Segments with bias and
// accumulation into a random output, gate/up + GLU with the plain products kept, widths with a
// half 128-byte box at the end (k_pad % 128 == 64: one k block a copy) or whole blocks (4096,
// 14336: 3-D copies of two; at 14336 a cluster of two blocks a tile, four for the one-tile
// GLU), rows past a 64-row tile, more tiles than SMs (the persistent loop), 1-4 rows of x; the
// folded norm writes rows equal to a host norm's and gives the same bits as the unfolded kernel
// on those rows. Outputs are poisoned with NaN first.
TEST(CudaQuant, Fp8WgmmaGemvMatchesE4m3Reference) {
  SKIP_WITHOUT_GPU();
  if (!cuda::qgemv_fp8_wg_takes(1, 264)) GTEST_SKIP() << "needs an sm_90a build on a compute capability 9.0 GPU";
  struct Case {
    int64_t k, ms[3], mf;
  };
  const Case cases[] = {{264, {5001, 77, 300}, 200}, {4096, {4096, 1024, 1000}, 14336}, {14336, {4096, 0, 0}, 64},
                        {1032, {13000, 64, 65}, 130}};
  uint32_t seed = 1300;
  for (const Case& c : cases) {
    Packed w[3];
    int segs = 0;
    for (int i = 0; i < 3; ++i)
      if (c.ms[i] > 0) w[segs++] = make_packed("fp8", c.ms[i], c.k, seed++);
    Packed g = make_packed("fp8", c.mf, c.k, seed++), u = make_packed("fp8", c.mf, c.k, seed++);
    for (int n : {1, 2, 4}) {
      auto xs = random_floats(static_cast<size_t>(n * c.k), seed++, -2.0f, 1.5f);
      for (int64_t i = 0; i < c.k; ++i) xs[static_cast<size_t>(i)] *= 30.0f;  // rows of different scales
      auto x = dev_floats(xs, {n, c.k});
      const auto* xp = static_cast<const float*>(x.t.data);
      const auto xq = fp8_rows(xs, n, c.k);
      const std::string where = "k " + std::to_string(c.k) + " n " + std::to_string(n);
      // Segments: the second with bias, the third accumulating into a random output.
      std::vector<DevTensor> outs;
      std::vector<std::vector<float>> init;
      cuda::QGemvSeg sg[3];
      const auto bs = random_floats(static_cast<size_t>(std::max<int64_t>(c.ms[1], 1)), seed++);
      auto bias = dev_floats(bs, {static_cast<int64_t>(bs.size())});
      for (int i = 0; i < segs; ++i) {
        init.push_back(random_floats(static_cast<size_t>(n * c.ms[i]), seed++));
        outs.push_back(i == 2 ? dev_floats(init.back(), {n, c.ms[i]}) : dev_tensor(DType::F32, {n, c.ms[i]}));
        sg[i].w = w[i].t.data;
        sg[i].out = static_cast<float*>(outs.back().t.data);
        sg[i].m = c.ms[i];
        sg[i].bias = i == 1 ? static_cast<const float*>(bias.t.data) : nullptr;
        sg[i].accumulate = i == 2;
      }
      auto og = dev_tensor(DType::F32, {n, c.mf}), ou = dev_tensor(DType::F32, {n, c.mf}), oglu = dev_tensor(DType::F32, {n, c.mf});
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      ASSERT_EQ(cuda::launch_qgemv_multi(cuda::QFormat::Fp8, sg, segs, xp, n, c.k, false, nullptr, cuda::QGemvPath::Fp8Wg),
                cudaSuccess)
          << where;
      ASSERT_EQ(cuda::launch_qgemv_glu(cuda::QFormat::Fp8, g.t.data, u.t.data, xp, n, c.mf, c.k, false,
                                       static_cast<float*>(oglu.t.data), static_cast<float*>(og.t.data),
                                       static_cast<float*>(ou.t.data), false, nullptr, cuda::QGemvPath::Fp8Wg),
                cudaSuccess)
          << where;
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      for (int i = 0; i < segs; ++i) {
        auto ref = reference(xq, w[i].dec, i == 1 ? bs.data() : nullptr, n, c.ms[i], c.k, false);
        if (i == 2)
          for (size_t e = 0; e < ref.size(); ++e) ref[e] += init[2][e];
        const double e = rel(download_floats(outs[static_cast<size_t>(i)].t), ref);
        EXPECT_LE(e, 1e-3) << where << " segment " << i;
      }
      const auto rg = reference(xq, g.dec, nullptr, n, c.mf, c.k, false);
      const auto ru = reference(xq, u.dec, nullptr, n, c.mf, c.k, false);
      std::vector<double> rglu(rg.size());
      for (size_t i = 0; i < rg.size(); ++i) rglu[i] = rg[i] / (1.0 + std::exp(-rg[i])) * ru[i];
      const double eg = rel(download_floats(og.t), rg), eu = rel(download_floats(ou.t), ru);
      const double eglu = rel(download_floats(oglu.t), rglu);
      std::printf("fp8 wgmma GEMV %s: rel. error gate %.2e, up %.2e, glu %.2e vs e4m3 x\n", where.c_str(), eg, eu, eglu);
      EXPECT_LE(eg, 1e-3) << where;
      EXPECT_LE(eu, 1e-3) << where;
      EXPECT_LE(eglu, 2e-3) << where;

      // The folded norm: its rows against a host norm, and the unfolded kernel on those rows.
      const auto nw = random_floats(static_cast<size_t>(c.k), seed++);
      auto normw = dev_floats(nw, {c.k});
      auto normed = dev_tensor(DType::F32, {n, c.k});
      cuda::XNorm nm;
      nm.w = normw.t.data;
      nm.eps = 1e-5f;
      nm.out = static_cast<float*>(normed.t.data);
      auto fused = dev_tensor(DType::F32, {n, c.ms[0]}), plain = dev_tensor(DType::F32, {n, c.ms[0]});
      cuda::QGemvSeg one = sg[0];
      one.out = static_cast<float*>(fused.t.data);
      ASSERT_EQ(cuda::launch_qgemv_multi(cuda::QFormat::Fp8, &one, 1, xp, n, c.k, false, nullptr, cuda::QGemvPath::Fp8Wg, &nm),
                cudaSuccess)
          << where;
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const auto hn = download_floats(normed.t);
      EXPECT_LE(rel(hn, host_rms_norm(xs, n, c.k, nw, 1e-5)), 1e-6) << where << " norm rows";
      auto normed_in = dev_floats(hn, {n, c.k});
      one.out = static_cast<float*>(plain.t.data);
      ASSERT_EQ(cuda::launch_qgemv_multi(cuda::QFormat::Fp8, &one, 1, static_cast<const float*>(normed_in.t.data), n, c.k,
                                         false, nullptr, cuda::QGemvPath::Fp8Wg),
                cudaSuccess)
          << where;
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const auto f_out = download_floats(fused.t);
      EXPECT_EQ(f_out, download_floats(plain.t)) << where << " folded norm";
      EXPECT_LE(rel(f_out, reference(fp8_rows(hn, n, c.k), w[0].dec, nullptr, n, c.ms[0], c.k, false)), 1e-3)
          << where << " folded norm";
    }
  }
}

TEST(CudaQuant, GetRowsOfPackedTable) {
  SKIP_WITHOUT_GPU();
  for (const char* f : {"int4", "fp8", "int8"}) {
    const int64_t vocab = 203, d = 136;
    Packed p = make_packed(f, vocab, d, 9);
    const std::vector<int32_t> ids = {5, 0, 202, 77, 5};
    auto out = dev_tensor(DType::F32, {static_cast<int64_t>(ids.size()), d});
    backend()->get_rows(p.t, ids.data(), static_cast<int>(ids.size()), out.t);
    const auto got = download_floats(out.t);
    std::vector<double> ref;
    for (int32_t id : ids)
      for (int64_t c = 0; c < d; ++c) ref.push_back(p.dec[static_cast<size_t>(id * d + c)]);
    EXPECT_LE(rel(got, ref), 1e-6) << f;
  }
}

}  // namespace
}  // namespace ember
