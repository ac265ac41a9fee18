// Weight-only int4 (group 128) and FP8 e4m3 (per-row scales) weights on the GPU: the packed
// bytes decoded here on the host (an independent reading of the layout in qgemv.cuh) must be
// close to the original weights; matmul through the backend (tensor-core GEMV for 1-8 rows,
// cuBLASLt above) must match a double-precision product of x and those decoded weights; the
// fused q/k/v and gate/up+GLU launches and get_rows of a packed table too. Random odd sizes,
// outputs poisoned with NaN first.
#include "backend/cuda/qgemv.cuh"
#include "cuda_test_util.h"

#include <cstdint>
#include <string>

namespace ember {
namespace {

using cuda_test::backend;
using cuda_test::DevTensor;
using cuda_test::dev_floats;
using cuda_test::dev_tensor;
using cuda_test::download_floats;
using cuda_test::random_floats;

float e4m3_to_float(uint8_t b) {
  const int e = (b >> 3) & 15, man = b & 7;
  const float v = e == 0 ? std::ldexp(man / 8.0f, -6) : std::ldexp(1.0f + man / 8.0f, e - 7);
  return (b & 0x80) ? -v : v;
}

// The packed matrix w (device) decoded on the host: [m, k] floats.
std::vector<float> decode_packed(cuda::QFormat f, const Tensor& w) {
  const int64_t m = w.n_rows(), k = w.n_cols();
  std::vector<uint8_t> bytes(cuda::qweight_bytes(f, m, k));
  backend()->download(bytes.data(), w.data, bytes.size());
  const size_t row = cuda::qweight_row_bytes(f, k), soff = cuda::qweight_scales_offset(f, m, k);
  std::vector<float> out(static_cast<size_t>(m * k));
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      float v;
      if (f == cuda::QFormat::Int4) {
        uint16_t sb;
        std::memcpy(&sb, &bytes[soff + static_cast<size_t>(((c / 128) * m + r) * 2)], 2);
        uint32_t word;
        const int64_t e = c % 32, j = e % 8;
        std::memcpy(&word, &bytes[r * row + static_cast<size_t>((c / 32) * 16 + (e / 8) * 4)], 4);
        const int q = static_cast<int>((word >> (4 * (j / 2) + 16 * (j % 2))) & 15u) - 8;
        v = static_cast<float>(q) * bf16_to_f32(sb);
      } else {
        float s;
        std::memcpy(&s, &bytes[soff + static_cast<size_t>(r) * 4], 4);
        v = e4m3_to_float(bytes[r * row + static_cast<size_t>(c)]) * s;
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
  EXPECT_EQ(p.t.dtype, format == "int4" ? DType::Q4_0 : DType::FP8_E4M3);
  p.dec = decode_packed(format == "int4" ? cuda::QFormat::Int4 : cuda::QFormat::Fp8, p.t);
  return p;
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

// ref [n, m] = x [n, k] (BF16-rounded when round_x) @ w [m, k]^T (+ bias).
std::vector<double> reference(const std::vector<float>& x, const std::vector<float>& w, const float* bias,
                              int64_t n, int64_t m, int64_t k, bool round_x) {
  std::vector<double> ref(static_cast<size_t>(n * m));
  for (int64_t j = 0; j < n; ++j)
    for (int64_t r = 0; r < m; ++r) {
      double s = bias ? bias[r] : 0.0;
      for (int64_t i = 0; i < k; ++i) {
        const float xv = x[static_cast<size_t>(j * k + i)];
        s += double(round_x ? cuda_test::round_to(DType::BF16, xv) : xv) * w[static_cast<size_t>(r * k + i)];
      }
      ref[static_cast<size_t>(j * m + r)] = s;
    }
  return ref;
}

TEST(CudaQuant, PackedWeightsCloseToOriginal) {
  SKIP_WITHOUT_GPU();
  for (const char* f : {"int4", "fp8"}) {
    for (DType src : {DType::F32, DType::BF16, DType::F16}) {
      Packed p = make_packed(f, 53, 392, 3, src);
      std::vector<double> o(p.orig.begin(), p.orig.end());
      const double e = rel(p.dec, o);
      // int4 RTN of uniform values: step max/8 -> ~6% rms; e4m3: 3 mantissa bits -> ~2-3%.
      EXPECT_LE(e, std::string(f) == "int4" ? 0.09 : 0.04) << f << " from " << dtype_name(src);
      EXPECT_GT(e, 1e-3) << f << ": suspiciously exact";
    }
  }
}

TEST(CudaQuant, MatmulGemvAndLargeBatch) {
  SKIP_WITHOUT_GPU();
  struct Case {
    int64_t m, k;
    int n;
    bool bias;
  };
  const Case cases[] = {{37, 200, 1, false},  {130, 264, 3, true},  {16, 64, 8, false},  {301, 1032, 5, false},
                        {4100, 520, 2, true}, {77, 136, 13, false}, {260, 392, 40, true}, {48, 4104, 1, false}};
  uint32_t seed = 100;
  for (const char* f : {"int4", "fp8"}) {
    for (const Case& c : cases) {
      Packed p = make_packed(f, c.m, c.k, seed++);
      const auto xs = random_floats(static_cast<size_t>(c.n * c.k), seed++);
      const auto bs = random_floats(static_cast<size_t>(c.m), seed++);
      auto x = dev_floats(xs, {c.n, c.k});
      auto bias = dev_floats(bs, {c.m});
      auto out = dev_tensor(DType::F32, {c.n, c.m});
      backend()->matmul(x.t, p.t, c.bias ? &bias.t : nullptr, out.t);
      const auto got = download_floats(out.t);
      const auto ref = reference(xs, p.dec, c.bias ? bs.data() : nullptr, c.n, c.m, c.k, true);
      // GEMV and int4 GEMM: BF16 x (and BF16 dequantized weights above 8 rows); the FP8 GEMM
      // quantizes x to e4m3 per row (3 mantissa bits).
      const bool fp8_gemm = std::string(f) == "fp8" && c.n > cuda::kQGemvMaxBatch;
      const double e = rel(got, ref);
      // The GEMV is exact but for F32 summation; the int4 GEMM rounds dequantized weights to BF16.
      EXPECT_LE(e, c.n <= cuda::kQGemvMaxBatch ? 1e-4 : fp8_gemm ? 6e-2 : 8e-3) << f << " m " << c.m << " k " << c.k << " n " << c.n;
    }
  }
}

// q/k/v (three matrices, one launch) and gate/up + GLU (one launch) with packed weights.
TEST(CudaQuant, FusedMultiAndGlu) {
  SKIP_WITHOUT_GPU();
  for (const char* f : {"int4", "fp8"}) {
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
      EXPECT_LE(rel(download_floats(oq.t), reference(xs, q.dec, nullptr, n, mq, k, true)), 8e-3) << f << " q";
      EXPECT_LE(rel(download_floats(ok.t), reference(xs, kk.dec, nullptr, n, mk, k, true)), 8e-3) << f << " k";
      EXPECT_LE(rel(download_floats(ov.t), reference(xs, v.dec, nullptr, n, mk, k, true)), 8e-3) << f << " v";
      const auto rg = reference(xs, g.dec, nullptr, n, mf, k, true);
      const auto ru = reference(xs, u.dec, nullptr, n, mf, k, true);
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
  const Case cases[] = {{9601, 136, 1}, {37, 200, 3}, {301, 1032, 8}, {4100, 4104, 2}, {16, 64, 5}, {1000, 10000, 8}};
  const cuda::QGemvPath paths[] = {cuda::QGemvPath::Staged, cuda::QGemvPath::Direct, cuda::QGemvPath::Auto};
  uint32_t seed = 500;
  for (const char* f : {"int4", "fp8"}) {
    const cuda::QFormat qf = std::string(f) == "int4" ? cuda::QFormat::Int4 : cuda::QFormat::Fp8;
    for (const Case& c : cases) {
      Packed p = make_packed(f, c.m, c.k, seed++);
      const auto xs = random_floats(static_cast<size_t>(c.n * c.k), seed++, -2.0f, 1.5f);
      auto x = dev_floats(xs, {c.n, c.k});
      const auto ref = reference(xs, p.dec, nullptr, c.n, c.m, c.k, true);
      int ran_staged = 0;
      for (cuda::QGemvPath path : paths) {
        if (path == cuda::QGemvPath::Staged && !cuda::qgemv_staged_fits(qf, c.n, c.k)) continue;
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
      EXPECT_EQ(ran_staged, c.k == 10000 ? 0 : 1) << "staged kernel coverage, k " << c.k << " n " << c.n;
    }
  }
}

// q/k/v-style segments and gate/up + GLU through each kernel, with more tiles than resident blocks.
TEST(CudaQuant, GemvKernelsSegmentsAndGlu) {
  SKIP_WITHOUT_GPU();
  for (const char* f : {"int4", "fp8"}) {
    const cuda::QFormat qf = std::string(f) == "int4" ? cuda::QFormat::Int4 : cuda::QFormat::Fp8;
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
          EXPECT_LE(rel(download_floats(outs[i].t), reference(xs, w[i].dec, i == 1 ? bs.data() : nullptr, n, ms[i], k, true)), 1e-4)
              << f << " path " << pi << " segment " << i << " n " << n;
        const auto rg = reference(xs, g.dec, nullptr, n, mf, k, true);
        const auto ru = reference(xs, u.dec, nullptr, n, mf, k, true);
        std::vector<double> rglu(rg.size());
        for (size_t i = 0; i < rg.size(); ++i) rglu[i] = rg[i] / (1.0 + std::exp(-rg[i])) * ru[i];
        EXPECT_LE(rel(download_floats(og.t), rg), 1e-4) << f << " path " << pi << " gate n " << n;
        EXPECT_LE(rel(download_floats(ou.t), ru), 1e-4) << f << " path " << pi << " up n " << n;
        EXPECT_LE(rel(download_floats(oglu.t), rglu), 2e-4) << f << " path " << pi << " glu n " << n;
      }
    }
  }
}

TEST(CudaQuant, GetRowsOfPackedTable) {
  SKIP_WITHOUT_GPU();
  for (const char* f : {"int4", "fp8"}) {
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
