// Per-element and row ops of the CUDA backend against double-precision references.
#include "cuda_test_util.h"
#include "quant/quant.h"

namespace ember::cuda_test {
namespace {

TEST(CudaOps, RmsNormF32AndBf16WeightsInPlace) {
  SKIP_WITHOUT_GPU();
  const int64_t rows = 7, d = 1037;
  const float eps = 1e-5f;
  auto x = random_floats(rows * d, 1, -2.0f, 2.0f);
  auto w = random_floats(d, 2, 0.5f, 1.5f);
  for (DType wt : {DType::F32, DType::BF16}) {
    DevTensor dx = dev_floats(x, {rows, d});
    DevTensor dw = dev_tensor(wt, {d});
    const auto wb = encode(wt, w);
    backend()->upload(dw.t.data, wb.data(), wb.size());
    DevTensor out = dev_tensor(DType::F32, {rows, d});
    backend()->rms_norm(dx.t, dw.t, eps, out.t);
    backend()->rms_norm(dx.t, dw.t, eps, dx.t);  // out aliasing x
    std::vector<float> w_used(w.size());  // (the weights as the kernel reads them)
    for (size_t i = 0; i < w.size(); ++i) w_used[i] = round_to(wt, w[i]);
    const std::vector<double> ref = host_rms_norm(x, rows, d, w_used, eps);
    EXPECT_LT(rel_error(download_floats(out.t), ref), 1e-6) << dtype_name(wt);
    EXPECT_LT(rel_error(download_floats(dx.t), ref), 1e-6) << dtype_name(wt) << " in place";
  }
}

TEST(CudaOps, RopeNeoxAndInterleavedPartialRotary) {
  SKIP_WITHOUT_GPU();
  const int n = 5, heads = 3, hd = 64, rot = 48;
  std::vector<int32_t> pos = {0, 1, 17, 999, 3071};
  std::vector<float> freq(rot / 2);
  for (int i = 0; i < rot / 2; ++i) freq[i] = std::pow(10000.0f, -2.0f * i / rot);
  DevTensor dfreq = dev_floats(freq, {rot / 2});
  for (bool neox : {true, false}) {
    for (bool freq_on_device : {true, false}) {
      auto x = random_floats(n * heads * hd, neox ? 3 : 4);
      DevTensor dx = dev_floats(x, {n, heads, hd});
      RopeParams p;
      p.head_dim = hd;
      p.rotary_dim = rot;
      p.neox = neox;
      p.inv_freq = freq_on_device ? dfreq.t.as<float>() : freq.data();
      p.attention_factor = 1.25f;
      backend()->rope(dx.t, pos.data(), p);
      std::vector<double> ref(x.begin(), x.end());
      for (int t = 0; t < n; ++t)
        for (int h = 0; h < heads; ++h)
          for (int i = 0; i < rot / 2; ++i) {
            // The angle is a float product on every backend; the rotation is exact here.
            const double th = static_cast<float>(static_cast<float>(pos[t]) * freq[i]);
            const double c = std::cos(th) * 1.25, s = std::sin(th) * 1.25;
            const size_t base = (static_cast<size_t>(t) * heads + h) * hd;
            const size_t i0 = base + (neox ? i : 2 * i), i1 = base + (neox ? i + rot / 2 : 2 * i + 1);
            ref[i0] = x[i0] * c - x[i1] * s;
            ref[i1] = x[i0] * s + x[i1] * c;
          }
      EXPECT_LT(rel_error(download_floats(dx.t), ref), 1e-5) << "neox " << neox;
    }
  }
}

TEST(CudaOps, GluSiluAndGeluTanh) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 3001;
  auto g = random_floats(n, 5, -6.0f, 6.0f), u = random_floats(n, 6, -2.0f, 2.0f);
  for (bool gelu : {false, true}) {
    DevTensor dg = dev_floats(g, {n}), du = dev_floats(u, {n}), out = dev_tensor(DType::F32, {n});
    backend()->glu(dg.t, du.t, gelu, out.t);
    backend()->glu(dg.t, du.t, gelu, dg.t);  // out aliasing gate
    std::vector<double> ref(n);
    for (int64_t i = 0; i < n; ++i) {
      const double x = g[i];
      const double a = gelu ? 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)))
                            : x / (1.0 + std::exp(-x));
      ref[i] = a * u[i];
    }
    EXPECT_LT(rel_error(download_floats(out.t), ref), 1e-6) << "gelu " << gelu;
    EXPECT_LT(rel_error(download_floats(dg.t), ref), 1e-6) << "gelu " << gelu << " in place";
  }
}

TEST(CudaOps, AddInPlaceAndScale) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 4097;
  auto a = random_floats(n, 7), b = random_floats(n, 8);
  DevTensor da = dev_floats(a, {n}), db = dev_floats(b, {n}), out = dev_tensor(DType::F32, {n});
  backend()->add(da.t, db.t, out.t);
  backend()->add(da.t, db.t, da.t);
  backend()->scale(db.t, -0.75f);
  std::vector<double> sum(n), sc(n);
  for (int64_t i = 0; i < n; ++i) {
    sum[i] = double(a[i]) + b[i];
    sc[i] = b[i] * -0.75;
  }
  EXPECT_LT(rel_error(download_floats(out.t), sum), 1e-7);
  EXPECT_LT(rel_error(download_floats(da.t), sum), 1e-7);
  EXPECT_LT(rel_error(download_floats(db.t), sc), 1e-7);
}

// Final logit soft-capping in place, values far past the cap included (a vocabulary-sized row
// and an odd one).
TEST(CudaOps, Softcap) {
  SKIP_WITHOUT_GPU();
  for (int64_t n : {int64_t{7}, int64_t{128256 * 3 + 1}}) {
    const auto x = random_floats(static_cast<size_t>(n), 31, -80.0f, 80.0f);
    for (float cap : {30.0f, 0.5f}) {
      DevTensor d = dev_floats(x, {n});
      backend()->softcap(d.t, cap);
      std::vector<double> ref(x.size());
      for (size_t i = 0; i < x.size(); ++i) ref[i] = cap * std::tanh(double(x[i]) / cap);
      EXPECT_LT(rel_error(download_floats(d.t), ref), 1e-6) << n << " cap " << cap;
    }
  }
}

TEST(CudaOps, GetRowsDeviceBf16HostQ8AndDeviceF32) {
  SKIP_WITHOUT_GPU();
  const int64_t vocab = 37, d = 128;
  auto table = random_floats(vocab * d, 9);
  std::vector<int32_t> ids = {5, 0, 36, 5, 11};
  const int n = static_cast<int>(ids.size());
  // Device BF16 table made by prepare_weight.
  Tensor host = make_tensor(table.data(), DType::F32, {vocab, d});
  auto prepared = backend()->prepare_weight(host);
  ASSERT_TRUE(prepared.is_ok()) << prepared.message();
  EXPECT_EQ(prepared->dtype, DType::BF16);
  // Host Q8_0 table, gathered and dequantized on the host.
  std::vector<uint8_t> q8(dtype_row_bytes(DType::Q8_0, d) * vocab);
  for (int64_t r = 0; r < vocab; ++r)
    quant::quantize_row(DType::Q8_0, table.data() + r * d, q8.data() + r * dtype_row_bytes(DType::Q8_0, d), d);
  Tensor host_q8 = make_tensor(q8.data(), DType::Q8_0, {vocab, d});
  DevTensor dev_f32 = dev_floats(table, {vocab, d});
  for (int which = 0; which < 3; ++which) {
    const Tensor& t = which == 0 ? prepared.value() : (which == 1 ? host_q8 : dev_f32.t);
    DevTensor out = dev_tensor(DType::F32, {n, d});
    backend()->get_rows(t, ids.data(), n, out.t);
    std::vector<double> ref(static_cast<size_t>(n * d));
    std::vector<float> row(d);
    for (int i = 0; i < n; ++i) {
      if (which == 1) quant::dequantize_row(DType::Q8_0, q8.data() + ids[i] * dtype_row_bytes(DType::Q8_0, d), row.data(), d);
      for (int64_t j = 0; j < d; ++j) {
        const float v = table[ids[i] * d + j];
        ref[i * d + j] = which == 0 ? round_to(DType::BF16, v) : (which == 1 ? row[j] : v);
      }
    }
    EXPECT_LT(rel_error(download_floats(out.t), ref), 1e-7) << "table " << which;
  }
}

TEST(CudaOps, KvStoreAllCacheDtypesSkipsNegativeSlots) {
  SKIP_WITHOUT_GPU();
  const int n_blocks = 5, bs = 16, hkv = 3, hd = 40, n = 9;
  const int64_t row = hkv * hd;
  std::vector<int32_t> slots = {0, 17, -1, 79, 33, 5, -1, 64, 2};
  auto k = random_floats(n * row, 10), v = random_floats(n * row, 11);
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::FP8_E4M3, DType::FP8_E5M2}) {
    DevTensor dk = dev_floats(k, {n, hkv, hd}), dv = dev_floats(v, {n, hkv, hd});
    DevTensor ck = dev_tensor(t, {n_blocks, bs, hkv, hd}), cv = dev_tensor(t, {n_blocks, bs, hkv, hd});
    // Start from zeros so untouched slots are recognizable.
    std::vector<uint8_t> zeros(ck.t.nbytes(), 0);
    backend()->upload(ck.t.data, zeros.data(), zeros.size());
    backend()->upload(cv.t.data, zeros.data(), zeros.size());
    KvLayer kv{ck.t, cv.t, nullptr, nullptr, bs};
    backend()->kv_store(kv, dk.t, dv.t, slots.data());
    // Convert the caches to F32 on the device by reading them back through get_rows.
    std::vector<int32_t> all(n_blocks * bs);
    for (int i = 0; i < n_blocks * bs; ++i) all[i] = i;
    for (int which = 0; which < 2; ++which) {
      Tensor cache = which == 0 ? ck.t : cv.t;
      Tensor as_rows = make_tensor(cache.data, t, {n_blocks * bs, row}, Device::CUDA);
      DevTensor got = dev_tensor(DType::F32, {n_blocks * bs, row});
      std::vector<double> ref(static_cast<size_t>(n_blocks * bs * row), 0.0);
      const auto& src = which == 0 ? k : v;
      for (int i = 0; i < n; ++i)
        if (slots[i] >= 0)
          for (int64_t j = 0; j < row; ++j) ref[slots[i] * row + j] = round_to(t, src[i * row + j]);
      if (is_fp8(t)) {  // no get_rows of FP8 tables: compare bytes
        std::vector<uint8_t> bytes(cache.nbytes());
        backend()->download(bytes.data(), cache.data, bytes.size());
        std::vector<uint8_t> want(bytes.size(), 0);
        for (int i = 0; i < n; ++i)
          if (slots[i] >= 0)
            for (int64_t j = 0; j < row; ++j)
              want[slots[i] * row + j] = encode(t, {src[i * row + j]})[0];
        EXPECT_EQ(bytes, want) << dtype_name(t) << (which ? " v" : " k");
        continue;
      }
      backend()->get_rows(as_rows, all.data(), n_blocks * bs, got.t);
      EXPECT_LT(rel_error(download_floats(got.t), ref), 1e-7) << dtype_name(t) << (which ? " v" : " k");
    }
  }
}

// FP8 cache bytes are the CPU codec's (quant/fp8.h) for every value class: normals,
// subnormals, ties, e4m3 saturation at +-448, e5m2 overflow to +-inf, NaN.
TEST(CudaOps, KvStoreFp8MatchesCpuCodec) {
  SKIP_WITHOUT_GPU();
  const int hkv = 2, hd = 64, n = 64, bs = 16, n_blocks = 4;
  const int64_t row = hkv * hd;
  std::vector<float> vals = random_floats(n * row, 31, -600.0f, 600.0f);
  auto small = random_floats(n * row, 32, -0.02f, 0.02f);
  for (size_t i = 0; i < vals.size(); i += 3) vals[i] = small[i];
  for (size_t i = 1; i < vals.size(); i += 7) vals[i] = std::ldexp(small[i], -8);  // subnormals
  const float specials[] = {448.0f, 464.0f, -1e6f, 57344.0f, 61440.0f, 70000.0f, -INFINITY, NAN, 0.0f, -0.0f,
                            1.0625f, 1.1875f, 3.0e-3f, 1.953125e-3f};  // includes ties
  for (size_t i = 0; i < std::size(specials); ++i) vals[5 * i + 2] = specials[i];
  std::vector<int32_t> slots(n);
  for (int i = 0; i < n; ++i) slots[i] = i;
  for (DType t : {DType::FP8_E4M3, DType::FP8_E5M2}) {
    auto decode = [t](uint8_t b) { return t == DType::FP8_E4M3 ? quant::fp8_e4m3_to_f32(b) : quant::fp8_e5m2_to_f32(b); };
    DevTensor dk = dev_floats(vals, {n, hkv, hd}), dv = dev_floats(vals, {n, hkv, hd});
    DevTensor ck = dev_tensor(t, {n_blocks, bs, hkv, hd}), cv = dev_tensor(t, {n_blocks, bs, hkv, hd});
    KvLayer kv{ck.t, cv.t, nullptr, nullptr, bs};
    backend()->kv_store(kv, dk.t, dv.t, slots.data());
    std::vector<uint8_t> got(ck.t.nbytes());
    backend()->download(got.data(), ck.t.data, got.size());
    const auto want = encode(t, vals);
    size_t bad = 0;
    for (size_t i = 0; i < want.size(); ++i)
      if (got[i] != want[i] && !(std::isnan(vals[i]) && std::isnan(decode(got[i])))) {
        if (bad++ < 5) ADD_FAILURE() << dtype_name(t) << " value " << vals[i] << ": got 0x" << std::hex << int(got[i]) << " want 0x" << int(want[i]) << std::dec;
      }
    EXPECT_EQ(bad, 0u) << dtype_name(t);
  }
}

}  // namespace
}  // namespace ember::cuda_test
