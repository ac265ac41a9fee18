// CUDA matmul: GEMV (n <= 4, k % 8 == 0) and cuBLASLt paths, every weight dtype prepare_weight
// accepts (plain floats converted to BF16 on the GPU, GGUF quant types dequantized at load).
#include "backend/cuda/gemv.cuh"
#include "cuda_test_util.h"
#include "quant/quant.h"

#include <cuda_runtime.h>

namespace ember::cuda_test {
namespace {

struct MatmulCase {
  int64_t n, m, k;
  DType wtype;
  bool bias;
};

void run_case(const MatmulCase& c, uint32_t seed) {
  auto wf = random_floats(c.m * c.k, seed, -0.5f, 0.5f);
  auto x = random_floats(c.n * c.k, seed + 1, -1.0f, 1.0f);
  auto bias = random_floats(c.m, seed + 2);
  // Host weight in its storage format; the reference uses its dequantized values rounded to
  // BF16, which is what the CUDA backend keeps.
  const size_t row_bytes = dtype_row_bytes(c.wtype, c.k);
  std::vector<uint8_t> wq(row_bytes * c.m);
  for (int64_t r = 0; r < c.m; ++r)
    quant::quantize_row(c.wtype, wf.data() + r * c.k, wq.data() + r * row_bytes, c.k);
  std::vector<float> wd(static_cast<size_t>(c.m * c.k));
  for (int64_t r = 0; r < c.m; ++r)
    quant::dequantize_row(c.wtype, wq.data() + r * row_bytes, wd.data() + r * c.k, c.k);
  Tensor host = make_tensor(wq.data(), c.wtype, {c.m, c.k});
  auto w = backend()->prepare_weight(host);
  ASSERT_TRUE(w.is_ok()) << w.message();
  ASSERT_EQ(w->dtype, DType::BF16);
  DevTensor dx = dev_floats(x, {c.n, c.k});
  DevTensor db = dev_floats(bias, {c.m});
  DevTensor out = dev_tensor(DType::F32, {c.n, c.m});
  backend()->matmul(dx.t, w.value(), c.bias ? &db.t : nullptr, out.t);
  const bool gemv = cuda::gemv_supported(static_cast<int>(c.n), c.k, dx.t.data, w->data);
  std::vector<double> ref(static_cast<size_t>(c.n * c.m));
  for (int64_t i = 0; i < c.n; ++i)
    for (int64_t r = 0; r < c.m; ++r) {
      double s = c.bias ? bias[r] : 0.0;
      for (int64_t j = 0; j < c.k; ++j)
        s += double(round_to(DType::BF16, wd[r * c.k + j])) * (gemv ? x[i * c.k + j] : round_to(DType::BF16, x[i * c.k + j]));
      ref[i * c.m + r] = s;
    }
  // GEMV: exact products, F32 sums. cuBLASLt: x rounded to BF16 like w; F32 accumulation.
  EXPECT_LT(rel_error(download_floats(out.t), ref), gemv ? 2e-6 : 2e-5)
      << "n " << c.n << " m " << c.m << " k " << c.k << " " << dtype_name(c.wtype)
      << (gemv ? " gemv" : " cublasLt");
}

TEST(CudaMatmul, PlainWeightsGemvAndCublasLt) {
  SKIP_WITHOUT_GPU();
  const MatmulCase cases[] = {
      {1, 1001, 520, DType::F32, false}, {1, 1001, 520, DType::F32, true},
      {2, 333, 264, DType::BF16, true},  {3, 77, 1032, DType::F16, false},
      {4, 1001, 520, DType::F32, true},  {5, 1001, 520, DType::F32, true},
      {17, 333, 264, DType::BF16, false}, {1, 257, 333, DType::F32, true},
      {64, 129, 200, DType::F16, true},
  };
  uint32_t seed = 100;
  for (const auto& c : cases) run_case(c, seed += 3);
}

TEST(CudaMatmul, QuantizedWeightsDequantizedAtLoad) {
  SKIP_WITHOUT_GPU();
  const MatmulCase cases[] = {
      {1, 129, 256, DType::Q8_0, false}, {2, 67, 512, DType::Q4_K, true},
      {1, 95, 768, DType::Q6_K, false},  {3, 40, 96, DType::Q4_0, false},
      {9, 67, 512, DType::Q4_K, false},
  };
  uint32_t seed = 200;
  for (const auto& c : cases) run_case(c, seed += 3);
}

// F32 weights already on the device (e.g. an activation used as a matrix): cuBLASLt in F32.
TEST(CudaMatmul, DeviceF32WeightsUseF32Gemm) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 3, m = 45, k = 77;
  auto wf = random_floats(m * k, 400), x = random_floats(n * k, 401);
  DevTensor dw = dev_floats(wf, {m, k}), dx = dev_floats(x, {n, k}), out = dev_tensor(DType::F32, {n, m});
  backend()->matmul(dx.t, dw.t, nullptr, out.t);
  std::vector<double> ref(static_cast<size_t>(n * m));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t r = 0; r < m; ++r) {
      double s = 0.0;
      for (int64_t j = 0; j < k; ++j) s += double(wf[r * k + j]) * x[i * k + j];
      ref[i * m + r] = s;
    }
  EXPECT_LT(rel_error(download_floats(out.t), ref), 1e-5);
}

// Every GEMV tiling variant (the backend uses one; the benchmark times all).
TEST(CudaMatmul, GemvVariantsAgree) {
  SKIP_WITHOUT_GPU();
  const int64_t m = 1003, k = 4104;
  auto wf = random_floats(m * k, 300, -0.5f, 0.5f);
  Tensor host = make_tensor(wf.data(), DType::F32, {m, k});
  auto w = backend()->prepare_weight(host);
  ASSERT_TRUE(w.is_ok());
  for (int n = 1; n <= cuda::kGemvMaxBatch; ++n) {
    auto x = random_floats(n * k, 301 + n);
    DevTensor dx = dev_floats(x, {n, k});
    std::vector<double> ref(static_cast<size_t>(n * m));
    for (int i = 0; i < n; ++i)
      for (int64_t r = 0; r < m; ++r) {
        double s = 0.0;
        for (int64_t j = 0; j < k; ++j) s += double(round_to(DType::BF16, wf[r * k + j])) * x[i * k + j];
        ref[i * m + r] = s;
      }
    for (int v = 0; v < cuda::kGemvNumVariants; ++v) {
      DevTensor out = dev_tensor(DType::F32, {n, m});
      ASSERT_EQ(cuda::launch_gemv_bf16(w->data, dx.t.as<float>(), nullptr, out.t.as<float>(), n, m, k, v,
                                       /*pdl=*/v % 2 == 1, nullptr),
                cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_LT(rel_error(download_floats(out.t), ref), 2e-6) << "n " << n << " variant " << v;
    }
  }
}

// The hold variants (4 + 6 and 4 + 4 rows a block, the second part copied into shared memory
// before the PDL wait) compute each row as variant 7 does, so they must equal it bit for bit: a
// whole wave (4096 x 4096), a last block with 2 of its shared-memory rows (1006), one with none
// (1003; 13 at 4 + 6), k not a whole slab (1032, 4104) and the largest k variant 10 takes (8192),
// with a bias, as PDL launches.
TEST(CudaMatmul, GemvHoldVariantEqualsVariant7) {
  SKIP_WITHOUT_GPU();
  struct Shape {
    int64_t m, k;
  };
  for (const Shape sh : {Shape{4096, 4096}, Shape{1006, 1032}, Shape{1003, 8192}, Shape{13, 4104}}) {
    auto wf = random_floats(sh.m * sh.k, 310, -0.5f, 0.5f);
    Tensor host = make_tensor(wf.data(), DType::F32, {sh.m, sh.k});
    auto w = backend()->prepare_weight(host);
    ASSERT_TRUE(w.is_ok());
    auto x = random_floats(sh.k, 311);
    auto bias = random_floats(sh.m, 312);
    DevTensor dx = dev_floats(x, {1, sh.k}), db = dev_floats(bias, {sh.m});
    DevTensor o7 = dev_tensor(DType::F32, {1, sh.m});
    ASSERT_EQ(cuda::launch_gemv_bf16(w->data, dx.t.as<float>(), db.t.as<float>(), o7.t.as<float>(), 1, sh.m, sh.k, 7,
                                     /*pdl=*/true, nullptr),
              cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> a = download_floats(o7.t);
    std::vector<double> ref(static_cast<size_t>(sh.m));
    for (int64_t r = 0; r < sh.m; ++r) {
      double s = bias[r];
      for (int64_t j = 0; j < sh.k; ++j) s += double(round_to(DType::BF16, wf[r * sh.k + j])) * x[j];
      ref[r] = s;
    }
    EXPECT_LT(rel_error(a, ref), 2e-6) << sh.m << " x " << sh.k;
    for (const int v : {cuda::kGemvHoldVariant, cuda::kGemvHold2Variant}) {
      ASSERT_TRUE(cuda::gemv_hold_applies(v, 1, sh.m, sh.k)) << sh.m << " x " << sh.k << " variant " << v;
      DevTensor oh = dev_tensor(DType::F32, {1, sh.m});
      ASSERT_EQ(cuda::launch_gemv_bf16(w->data, dx.t.as<float>(), db.t.as<float>(), oh.t.as<float>(), 1, sh.m, sh.k, v,
                                       /*pdl=*/true, nullptr),
                cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::vector<float> b = download_floats(oh.t);
      int64_t differ = 0;
      for (int64_t r = 0; r < sh.m; ++r) differ += !(a[r] == b[r]);
      EXPECT_EQ(differ, 0) << sh.m << " x " << sh.k << " variant " << v << ": rows that differ from variant 7";
    }
  }
}

// The BF16 GEMV's L2 prefetch of the next GEMV's weights (L2Prefetch, EMBER_CUDA_NEXT_L2) is a
// hint: variant 7 at one row (the down projection's kernel) writes the same bits with it (when 1,
// 2, and 0, which the BF16 kernel takes as 1) as without, over a grid larger than the GPU holds
// at once (only its last wave asks) and one smaller (every block asks), with two matrices sharing
// the grid; the next matrices stay unchanged; two rows and the hold kernel ignore it
// (gemv_prefetch_takes); a misaligned range is refused.
TEST(CudaMatmul, GemvPrefetchChangesNothing) {
  SKIP_WITHOUT_GPU();
  struct Shape {
    int64_t m, k;
  };
  const int64_t mn = 777, kn = 4096;  // the next matrices: 777 x 4096 twice
  std::vector<Tensor> next_w;
  for (int i = 0; i < 2; ++i) {
    auto nf = random_floats(mn * kn, 330 + i);
    auto nw = backend()->prepare_weight(make_tensor(nf.data(), DType::F32, {mn, kn}));
    ASSERT_TRUE(nw.is_ok());
    next_w.push_back(*nw);
  }
  std::vector<uint8_t> before[2];
  for (int i = 0; i < 2; ++i) {
    before[i].resize(static_cast<size_t>(mn * kn * 2));
    backend()->download(before[i].data(), next_w[i].data, before[i].size());
  }
  EXPECT_FALSE(cuda::gemv_prefetch_takes(7, 2, 1, 4096, 4096));
  EXPECT_FALSE(cuda::gemv_prefetch_takes(cuda::kGemvHold2Variant, 1, 1, 4096, 4096));  // (the hold kernel runs)
  for (const Shape sh : {Shape{6000, 2056}, Shape{1003, 14336}}) {
    ASSERT_TRUE(cuda::gemv_prefetch_takes(7, 1, 2, sh.m, sh.k));
    auto wf = random_floats(sh.m * sh.k, 320, -0.5f, 0.5f);
    auto w = backend()->prepare_weight(make_tensor(wf.data(), DType::F32, {sh.m, sh.k}));
    ASSERT_TRUE(w.is_ok());
    auto x = random_floats(sh.k, 321);
    DevTensor dx = dev_floats(x, {1, sh.k});
    auto run = [&](const cuda::L2Prefetch* pf) {
      DevTensor o1 = dev_tensor(DType::F32, {1, sh.m}), o2 = dev_tensor(DType::F32, {1, 5});
      cuda::GemvSeg segs[2];
      segs[0].w = w->data;
      segs[0].out = o1.t.as<float>();
      segs[0].m = sh.m;
      segs[1].w = w->data;  // (five rows of the same matrix as a second segment)
      segs[1].out = o2.t.as<float>();
      segs[1].m = 5;
      EXPECT_EQ(cuda::launch_gemv_bf16_multi(segs, 2, dx.t.as<float>(), 1, sh.k, 7, /*pdl=*/true, nullptr, nullptr, pf),
                cudaSuccess);
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<float> out = download_floats(o1.t), tail = download_floats(o2.t);
      out.insert(out.end(), tail.begin(), tail.end());
      return out;
    };
    const std::vector<float> plain = run(nullptr);
    for (int when : {0, 1, 2}) {
      cuda::L2Prefetch pf;
      for (int i = 0; i < 2; ++i) {
        pf.p[i] = next_w[i].data;
        pf.bytes[i] = static_cast<uint32_t>(mn * kn * 2);
      }
      pf.n = 2;
      pf.when = when;
      const std::vector<float> got = run(&pf);
      EXPECT_EQ(0, std::memcmp(got.data(), plain.data(), plain.size() * sizeof(float)))
          << sh.m << " x " << sh.k << " when " << when;
    }
  }
  for (int i = 0; i < 2; ++i) {
    std::vector<uint8_t> after(before[i].size());
    backend()->download(after.data(), next_w[i].data, after.size());
    EXPECT_EQ(after, before[i]) << "next matrix " << i;
  }
  cuda::L2Prefetch bad;
  bad.p[0] = static_cast<const uint8_t*>(next_w[0].data) + 8;
  bad.bytes[0] = 4096;
  bad.n = 1;
  DevTensor dx = dev_floats(random_floats(kn, 322), {1, kn}), o = dev_tensor(DType::F32, {1, mn});
  cuda::GemvSeg seg;
  seg.w = next_w[1].data;
  seg.out = o.t.as<float>();
  seg.m = mn;
  EXPECT_EQ(cuda::launch_gemv_bf16_multi(&seg, 1, dx.t.as<float>(), 1, kn, 7, true, nullptr, nullptr, &bad),
            cudaErrorInvalidValue);
}

// A chain of programmatic dependent launches where each GEMV reads the previous one's output:
// the early weight loads must not let x be read before its producer finished.
TEST(CudaMatmul, GemvPdlChainWaitsForProducer) {
  SKIP_WITHOUT_GPU();
  const int64_t d = 2048;
  const int steps = 6;
  std::vector<std::vector<float>> ws;
  std::vector<Tensor> dws;
  for (int i = 0; i < steps; ++i) {
    ws.push_back(random_floats(d * d, 500 + i, -1.0f / 32, 1.0f / 32));
    Tensor host = make_tensor(ws.back().data(), DType::F32, {d, d});
    auto w = backend()->prepare_weight(host);
    ASSERT_TRUE(w.is_ok());
    dws.push_back(w.value());
  }
  auto x = random_floats(d, 499);
  DevTensor a = dev_floats(x, {1, d}), b = dev_tensor(DType::F32, {1, d});
  std::vector<double> ref(x.begin(), x.end());
  for (int i = 0; i < steps; ++i) {
    const Tensor& src = i % 2 == 0 ? a.t : b.t;
    const Tensor& dst = i % 2 == 0 ? b.t : a.t;
    // (every other launch the hold variant, whose blocks copy their weights before the wait)
    ASSERT_EQ(cuda::launch_gemv_bf16(dws[i].data, src.as<float>(), nullptr, dst.as<float>(), 1, d, d,
                                     i % 2 == 0 ? cuda::kGemvDefaultVariant : cuda::kGemvHoldVariant,
                                     /*pdl=*/true, nullptr),
              cudaSuccess);
    std::vector<double> next(static_cast<size_t>(d), 0.0);
    for (int64_t r = 0; r < d; ++r)
      for (int64_t j = 0; j < d; ++j) next[r] += double(round_to(DType::BF16, ws[i][r * d + j])) * ref[j];
    ref = next;
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_LT(rel_error(download_floats(steps % 2 == 0 ? a.t : b.t), ref), 1e-5);
}

}  // namespace
}  // namespace ember::cuda_test
