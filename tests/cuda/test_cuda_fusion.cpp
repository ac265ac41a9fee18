// The CUDA backend's deferred (fused) launches and step-level controls, against
// double-precision references: q/k/v GEMVs sharing x in one launch, gate/up GEMVs with the
// GLU in their epilogue, residual add + RMSNorm, rope of q and k in one launch, a chain where
// a fused result feeds the next op, and graph capture/replay over step metadata.
#include "backend/cuda/gemv.cuh"
#include "cuda_test_util.h"

namespace ember::cuda_test {
namespace {

struct Weight {
  std::vector<float> f;  // BF16-rounded values (what the GPU keeps)
  Tensor t;
};

Weight make_weight(int64_t m, int64_t k, uint32_t seed) {
  Weight w;
  w.f = random_floats(static_cast<size_t>(m * k), seed, -0.5f, 0.5f);
  for (auto& v : w.f) v = round_to(DType::BF16, v);
  Tensor host = make_tensor(w.f.data(), DType::F32, {m, k});
  auto r = backend()->prepare_weight(host);
  EXPECT_TRUE(r.is_ok()) << r.message();
  w.t = r.value();
  return w;
}

std::vector<double> matvec(const std::vector<float>& x, int64_t n, int64_t k, const Weight& w, int64_t m,
                           const std::vector<float>* bias = nullptr) {
  std::vector<double> out(static_cast<size_t>(n * m));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t r = 0; r < m; ++r) {
      double s = bias ? (*bias)[r] : 0.0;
      for (int64_t j = 0; j < k; ++j) s += double(w.f[r * k + j]) * x[i * k + j];
      out[i * m + r] = s;
    }
  return out;
}

TEST(CudaFusion, GemvsSharingXInOneLaunch) {
  SKIP_WITHOUT_GPU();
  for (int64_t n : {1, 3, 4}) {
    const int64_t k = 1048;  // x staged in shared memory up to n * k * 4 <= 96 KiB
    const int64_t ms[3] = {517, 131, 131};
    auto x = random_floats(static_cast<size_t>(n * k), 10 + n);
    auto bias = random_floats(ms[1], 20 + n);
    DevTensor dx = dev_floats(x, {n, k}), db = dev_floats(bias, {ms[1]});
    Weight w[3] = {make_weight(ms[0], k, 30), make_weight(ms[1], k, 31), make_weight(ms[2], k, 32)};
    DevTensor out[3] = {dev_tensor(DType::F32, {n, ms[0]}), dev_tensor(DType::F32, {n, ms[1]}),
                        dev_tensor(DType::F32, {n, ms[2]})};
    for (int s = 0; s < 3; ++s) backend()->matmul(dx.t, w[s].t, s == 1 ? &db.t : nullptr, out[s].t);
    for (int s = 0; s < 3; ++s)
      EXPECT_LT(rel_error(download_floats(out[s].t), matvec(x, n, k, w[s], ms[s], s == 1 ? &bias : nullptr)), 2e-6)
          << "n " << n << " matrix " << s;
  }
}

TEST(CudaFusion, GateUpGemvWithGluEpilogue) {
  SKIP_WITHOUT_GPU();
  for (int64_t n : {1, 2, 4}) {
    for (int64_t k : {264, 9000}) {  // shared-memory x, and rows too long for it
      for (bool gelu : {false, true}) {
        for (bool in_place : {true, false}) {
          const int64_t m = 333;
          auto x = random_floats(static_cast<size_t>(n * k), 40 + n + k);
          DevTensor dx = dev_floats(x, {n, k});
          Weight wg = make_weight(m, k, 50), wu = make_weight(m, k, 51);
          DevTensor gate = dev_tensor(DType::F32, {n, m}), up = dev_tensor(DType::F32, {n, m});
          DevTensor sep = dev_tensor(DType::F32, {n, m});
          backend()->matmul(dx.t, wg.t, nullptr, gate.t);
          backend()->matmul(dx.t, wu.t, nullptr, up.t);
          backend()->glu(gate.t, up.t, gelu, in_place ? gate.t : sep.t);
          const auto g = matvec(x, n, k, wg, m), u = matvec(x, n, k, wu, m);
          std::vector<double> ref(g.size());
          for (size_t i = 0; i < g.size(); ++i) {
            const double a = gelu ? 0.5 * g[i] * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (g[i] + 0.044715 * g[i] * g[i] * g[i])))
                                  : g[i] / (1.0 + std::exp(-g[i]));
            ref[i] = a * u[i];
          }
          const std::string what = "n " + std::to_string(n) + " k " + std::to_string(k) +
                                   (gelu ? " gelu" : " silu") + (in_place ? " in place" : "");
          EXPECT_LT(rel_error(download_floats(in_place ? gate.t : sep.t), ref), 1e-5) << what;
          EXPECT_LT(rel_error(download_floats(up.t), u), 2e-6) << what << ": up keeps x @ w_up^T";
          if (!in_place) {
            EXPECT_LT(rel_error(download_floats(gate.t), g), 2e-6) << what << ": gate keeps x @ w_gate^T";
          }
        }
      }
    }
  }
}

TEST(CudaFusion, ResidualAddThenRmsNorm) {
  SKIP_WITHOUT_GPU();
  // Odd rows (loop kernel), rows of whole float4s (register kernel: 1 and 2 float4 per thread).
  for (int64_t d : {2053, 1036, 8192}) {
    const int64_t rows = 5;
    auto a = random_floats(rows * d, 60, -2.0f, 2.0f), b = random_floats(rows * d, 61);
    auto w = random_floats(d, 62, 0.5f, 1.5f);
    DevTensor da = dev_floats(a, {rows, d}), dbb = dev_floats(b, {rows, d}), dw = dev_floats(w, {d});
    DevTensor h = dev_tensor(DType::F32, {rows, d});
    backend()->add(da.t, dbb.t, da.t);  // x += o
    backend()->rms_norm(da.t, dw.t, 1e-5f, h.t);
    std::vector<double> sum(a.size());
    for (size_t i = 0; i < a.size(); ++i) sum[i] = a[i] + b[i];  // (an F32 sum)
    const std::vector<double> ref = host_rms_norm(sum, rows, d, w, 1e-5);
    EXPECT_LT(rel_error(download_floats(da.t), sum), 1e-7) << "d " << d;
    EXPECT_LT(rel_error(download_floats(h.t), ref), 1e-6) << "d " << d;
    backend()->rms_norm(h.t, dw.t, 1e-5f, h.t);  // plain norm, in place
    auto hv = download_floats(h.t);
    EXPECT_LT(rel_error(hv, host_rms_norm(ref, rows, d, w, 1e-5)), 2e-6) << "d " << d << " plain";
  }
}

TEST(CudaFusion, RopeOfQAndKInOneLaunch) {
  SKIP_WITHOUT_GPU();
  const int n = 3, hq = 8, hk = 2, hd = 128;
  std::vector<int32_t> pos = {5, 6, 4000};
  std::vector<float> freq(hd / 2);
  for (int i = 0; i < hd / 2; ++i) freq[i] = std::pow(500000.0f, -2.0f * i / hd);
  DevTensor dfreq = dev_floats(freq, {hd / 2});
  auto q = random_floats(n * hq * hd, 70), k = random_floats(n * hk * hd, 71);
  DevTensor dq = dev_floats(q, {n, hq, hd}), dk = dev_floats(k, {n, hk, hd});
  RopeParams p;
  p.head_dim = hd;
  p.rotary_dim = hd;
  p.neox = true;
  p.inv_freq = dfreq.t.as<float>();
  backend()->rope(dq.t, pos.data(), p);
  backend()->rope(dk.t, pos.data(), p);
  auto ref = [&](const std::vector<float>& x, int heads) {
    std::vector<double> r(x.begin(), x.end());
    for (int t = 0; t < n; ++t)
      for (int h = 0; h < heads; ++h)
        for (int i = 0; i < hd / 2; ++i) {
          const double th = static_cast<float>(static_cast<float>(pos[t]) * freq[i]);
          const size_t b = (static_cast<size_t>(t) * heads + h) * hd;
          r[b + i] = x[b + i] * std::cos(th) - x[b + i + hd / 2] * std::sin(th);
          r[b + i + hd / 2] = x[b + i] * std::sin(th) + x[b + i + hd / 2] * std::cos(th);
        }
    return r;
  };
  EXPECT_LT(rel_error(download_floats(dq.t), ref(q, hq)), 1e-5);
  EXPECT_LT(rel_error(download_floats(dk.t), ref(k, hk)), 1e-5);
}

// rope(q), rope(k), kv_store(k, v): with the positions and slots in the step metadata one
// kernel rotates q and k and fills the BF16 cache; with per-op uploads the ops run apart.
TEST(CudaFusion, RopeAndCacheStoreInOneLaunch) {
  SKIP_WITHOUT_GPU();
  const int n = 3, hq = 4, hk = 2, hd = 64, n_blocks = 4, bs = 4;
  std::vector<int32_t> pos = {7, 8, 2000}, slots = {5, -1, 9};
  std::vector<float> freq(hd / 2);
  for (int i = 0; i < hd / 2; ++i) freq[i] = std::pow(10000.0f, -2.0f * i / hd);
  DevTensor dfreq = dev_floats(freq, {hd / 2});
  for (bool registered : {false, true}) {
    auto q = random_floats(n * hq * hd, 100 + registered), k = random_floats(n * hk * hd, 102 + registered),
         v = random_floats(n * hk * hd, 104 + registered);
    DevTensor dq = dev_floats(q, {n, hq, hd}), dk = dev_floats(k, {n, hk, hd}), dv = dev_floats(v, {n, hk, hd});
    DevTensor kc = dev_tensor(DType::BF16, {n_blocks, bs, hk, hd}), vc = dev_tensor(DType::BF16, {n_blocks, bs, hk, hd});
    KvLayer kv;
    kv.k = kc.t;
    kv.v = vc.t;
    kv.block_size = bs;
    CudaStep* step = cuda_step(*backend());
    if (registered)
      step->set_step_metadata({HostArray{pos.data(), pos.size() * 4}, HostArray{slots.data(), slots.size() * 4}});
    RopeParams p;
    p.head_dim = hd;
    p.rotary_dim = hd;
    p.neox = false;
    p.inv_freq = dfreq.t.as<float>();
    backend()->rope(dq.t, pos.data(), p);
    backend()->rope(dk.t, pos.data(), p);
    backend()->kv_store(kv, dk.t, dv.t, slots.data());
    auto rot = [&](const std::vector<float>& x, int heads) {
      std::vector<double> r(x.begin(), x.end());
      for (int t = 0; t < n; ++t)
        for (int h = 0; h < heads; ++h)
          for (int i = 0; i < hd / 2; ++i) {
            const double th = static_cast<float>(static_cast<float>(pos[t]) * freq[i]);
            const size_t b = (static_cast<size_t>(t) * heads + h) * hd;
            r[b + 2 * i] = x[b + 2 * i] * std::cos(th) - x[b + 2 * i + 1] * std::sin(th);
            r[b + 2 * i + 1] = x[b + 2 * i] * std::sin(th) + x[b + 2 * i + 1] * std::cos(th);
          }
      return r;
    };
    const auto rq = rot(q, hq), rk = rot(k, hk);
    EXPECT_LT(rel_error(download_floats(dq.t), rq), 1e-5) << "registered " << registered;
    const auto got_k = download_floats(dk.t);
    EXPECT_LT(rel_error(got_k, rk), 1e-5) << "registered " << registered;
    std::vector<uint16_t> kraw(static_cast<size_t>(kc.t.numel())), vraw(kraw.size());
    backend()->download(kraw.data(), kc.t.data, kraw.size() * 2);
    backend()->download(vraw.data(), vc.t.data, vraw.size() * 2);
    const int row = hk * hd;
    for (int t = 0; t < n; ++t) {
      if (slots[t] < 0) continue;
      std::vector<float> gk(row), gv(row);
      std::vector<double> wk(row), wv(row);
      for (int e = 0; e < row; ++e) {
        gk[e] = bf16_to_f32(kraw[static_cast<size_t>(slots[t]) * row + e]);
        gv[e] = bf16_to_f32(vraw[static_cast<size_t>(slots[t]) * row + e]);
        wk[e] = round_to(DType::BF16, got_k[static_cast<size_t>(t) * row + e]);
        wv[e] = round_to(DType::BF16, v[static_cast<size_t>(t) * row + e]);
      }
      EXPECT_LT(rel_error(gk, wk), 1e-7) << "k cache, token " << t << ", registered " << registered;
      EXPECT_LT(rel_error(gv, wv), 1e-7) << "v cache, token " << t << ", registered " << registered;
    }
    step->clear_step_metadata();
  }
}

// A fused GEMV's output feeds the next GEMV, and an add's output feeds a matmul: the deferred
// launches must run before their consumers.
TEST(CudaFusion, ChainsKeepProgramOrder) {
  SKIP_WITHOUT_GPU();
  const int64_t k = 256;
  auto x = random_floats(k, 80);
  DevTensor dx = dev_floats(x, {1, k});
  Weight w1 = make_weight(k, k, 81), w2 = make_weight(k, k, 82);
  DevTensor y1 = dev_tensor(DType::F32, {1, k}), y2 = dev_tensor(DType::F32, {1, k});
  backend()->matmul(dx.t, w1.t, nullptr, y1.t);  // y1 = w1 x
  backend()->matmul(y1.t, w2.t, nullptr, y2.t);  // y2 = w2 y1
  backend()->add(y2.t, dx.t, y2.t);              // y2 += x
  backend()->matmul(y2.t, w1.t, nullptr, y1.t);  // y1 = w1 y2 (overwrites the first input)
  auto r1 = matvec(x, 1, k, w1, k);
  std::vector<float> r1f(r1.begin(), r1.end());
  auto r2 = matvec(r1f, 1, k, w2, k);
  std::vector<float> r2f(k);
  for (int64_t i = 0; i < k; ++i) r2f[i] = static_cast<float>(r2[i] + x[i]);
  auto r3 = matvec(r2f, 1, k, w1, k);
  EXPECT_LT(rel_error(download_floats(y1.t), r3), 1e-5);
}

// Graph capture over step metadata: ops given host pointers inside the registered arrays read
// their device copies, so replaying with new metadata uses the new values; an op given other
// host data fails the capture.
TEST(CudaFusion, GraphReplayReadsNewStepMetadata) {
  SKIP_WITHOUT_GPU();
  CudaStep* step = cuda_step(*backend());
  ASSERT_NE(step, nullptr);
  const int64_t vocab = 50, d = 264;
  auto table = random_floats(vocab * d, 90);
  auto w = random_floats(d, 91, 0.5f, 1.5f);
  DevTensor dt = dev_floats(table, {vocab, d}), dw = dev_floats(w, {d});
  DevTensor out = dev_tensor(DType::F32, {2, d});
  std::vector<int32_t> ids = {3, 7};
  auto expect_rows = [&](const std::vector<int32_t>& want) {
    std::vector<float> rows;  // the table rows of want, in order
    for (int r = 0; r < 2; ++r) rows.insert(rows.end(), table.begin() + want[r] * d, table.begin() + (want[r] + 1) * d);
    EXPECT_LT(rel_error(download_floats(out.t), host_rms_norm(rows, 2, d, w, 1e-6)), 1e-6) << want[0] << " " << want[1];
  };
  step->set_step_metadata({HostArray{ids.data(), ids.size() * sizeof(int32_t)}});
  ASSERT_TRUE(step->begin_capture().is_ok());
  backend()->get_rows(dt.t, ids.data(), 2, out.t);
  backend()->rms_norm(out.t, dw.t, 1e-6f, out.t);
  ASSERT_TRUE(step->end_capture(42).is_ok());
  for (const std::vector<int32_t>& next : {std::vector<int32_t>{11, 0}, std::vector<int32_t>{49, 49}}) {
    ids = next;  // same host array, new values
    step->set_step_metadata({HostArray{ids.data(), ids.size() * sizeof(int32_t)}});
    ASSERT_TRUE(step->launch_graph(42));
    expect_rows(next);
  }
  std::vector<int32_t> other = {1, 2};
  ASSERT_TRUE(step->begin_capture().is_ok());
  backend()->get_rows(dt.t, other.data(), 2, out.t);  // not step metadata
  EXPECT_FALSE(step->end_capture(43).is_ok());
  EXPECT_FALSE(step->launch_graph(43));
  step->clear_step_metadata();
  step->drop_graphs();
  EXPECT_EQ(step->num_graphs(), 0u);
  backend()->get_rows(dt.t, other.data(), 2, out.t);  // eager again: a per-op upload
  backend()->rms_norm(out.t, dw.t, 1e-6f, out.t);
  expect_rows(other);
}

}  // namespace
}  // namespace ember::cuda_test
