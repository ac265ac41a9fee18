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
    ASSERT_EQ(cuda::launch_gemv_bf16(dws[i].data, src.as<float>(), nullptr, dst.as<float>(), 1, d, d,
                                     cuda::kGemvDefaultVariant, /*pdl=*/true, nullptr),
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
