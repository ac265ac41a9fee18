#pragma once
// Helpers of the CUDA backend-ops tests: one backend for the whole binary, device tensors
// poisoned with NaN bytes before each op, downloads, and error norms against references.
#include "backend/cuda/cuda_backend.h"
#include "core/half.h"
#include "core/tensor.h"
#include "quant/fp8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

namespace ember::cuda_test {

inline Backend* backend() {
  static std::unique_ptr<Backend> be = make_cuda_backend(0);
  return be.get();
}

#define SKIP_WITHOUT_GPU() \
  if (!::ember::cuda_test::backend()) GTEST_SKIP() << "no usable CUDA device"

// A device tensor that owns its buffer.
struct DevTensor {
  std::unique_ptr<Buffer> buf;
  Tensor t;
};

inline DevTensor dev_tensor(DType dtype, std::initializer_list<int64_t> shape) {
  DevTensor d;
  d.t = make_tensor(nullptr, dtype, shape, Device::CUDA);
  d.buf = backend()->alloc(std::max<size_t>(d.t.nbytes(), 16));
  d.t.data = d.buf->data();
  // 0xff bytes are NaN in F32, F16 and BF16: an element the op forgets stays NaN.
  std::vector<uint8_t> poison(d.t.nbytes(), 0xff);
  backend()->upload(d.t.data, poison.data(), poison.size());
  return d;
}

inline DevTensor dev_floats(const std::vector<float>& v, std::initializer_list<int64_t> shape) {
  DevTensor d = dev_tensor(DType::F32, shape);
  EXPECT_EQ(static_cast<size_t>(d.t.numel()), v.size());
  backend()->upload(d.t.data, v.data(), v.size() * sizeof(float));
  return d;
}

inline std::vector<float> download_floats(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  backend()->download(v.data(), t.data, v.size() * sizeof(float));
  return v;
}

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline float round_to(DType t, float x) {
  if (t == DType::BF16) return bf16_to_f32(f32_to_bf16(x));
  if (t == DType::F16) return f16_to_f32(f32_to_f16(x));
  if (t == DType::FP8_E4M3) return quant::fp8_e4m3_to_f32(quant::f32_to_fp8_e4m3(x));
  if (t == DType::FP8_E5M2) return quant::fp8_e5m2_to_f32(quant::f32_to_fp8_e5m2(x));
  return x;
}

inline bool is_fp8(DType t) { return t == DType::FP8_E4M3 || t == DType::FP8_E5M2; }

// Encodes floats as F32 / F16 / BF16 / FP8 (unit scale, quant/fp8.h: the CPU cache's codec) bytes.
inline std::vector<uint8_t> encode(DType t, const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * (t == DType::F32 ? 4 : is_fp8(t) ? 1 : 2));
  for (size_t i = 0; i < v.size(); ++i) {
    if (is_fp8(t)) {
      out[i] = t == DType::FP8_E4M3 ? quant::f32_to_fp8_e4m3(v[i]) : quant::f32_to_fp8_e5m2(v[i]);
    } else if (t == DType::F32) {
      std::memcpy(out.data() + 4 * i, &v[i], 4);
    } else {
      const uint16_t h = t == DType::BF16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

// One (slot, head) row of n values in the CPU cache's INT8 format, restated from
// backend/cpu/kv_store.cpp kv_write_head (test_cuda_kv_int8.cpp checks the two agree): scale =
// max|x| / 127, q = lround(x * (1 / scale)), all zeros for a zero row. Returns the scale; the
// stored value reads back as scale * q (kv_read_head).
inline float quantize_i8_row(const float* x, int n, int8_t* q) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  const float s = amax / 127.0f;
  const float inv = s != 0.0f ? 1.0f / s : 0.0f;
  for (int i = 0; i < n; ++i) q[i] = static_cast<int8_t>(std::lround(x[i] * inv));
  return s;
}

// rms_norm(x) * w of n rows of width k, in double (x: float or double values).
template <typename T>
std::vector<double> host_rms_norm(const std::vector<T>& x, int64_t n, int64_t k, const std::vector<float>& w, double eps) {
  std::vector<double> out(x.size());
  for (int64_t j = 0; j < n; ++j) {
    double ss = 0;
    for (int64_t i = 0; i < k; ++i) ss += double(x[j * k + i]) * x[j * k + i];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(k) + eps);
    for (int64_t i = 0; i < k; ++i) out[j * k + i] = x[j * k + i] * inv * w[i];
  }
  return out;
}

// ||got - ref|| / ||ref||, and a failure for any non-finite output.
inline double rel_error(const std::vector<float>& got, const std::vector<double>& ref) {
  EXPECT_EQ(got.size(), ref.size());
  double num = 0.0, den = 0.0;
  size_t bad = 0;
  for (size_t i = 0; i < got.size() && i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) {
      ++bad;
      continue;
    }
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  EXPECT_EQ(bad, 0u) << "non-finite outputs (unwritten or NaN)";
  if (bad) return INFINITY;
  return den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace ember::cuda_test
