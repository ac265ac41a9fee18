#pragma once
// Shared helpers of the backend op tests: random inputs, poisoned outputs, and the list of
// backends to test (every instruction set this CPU has, with several thread counts).
#include "backend/cpu/cpu_backend.h"
#include "core/half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace ember::test {

struct BackendCase {
  std::string isa;
  int n_threads;
};

inline std::vector<BackendCase> backend_cases() {
  std::vector<BackendCase> cases;
  for (const char* isa : {"scalar", "avx2", "avx512", "avx512vbmi"})
    for (int t : {1, 2, 3}) cases.push_back({isa, t});
  return cases;
}

inline std::string case_name(const testing::TestParamInfo<BackendCase>& info) {
  return info.param.isa + "_t" + std::to_string(info.param.n_threads);
}

// Fixture base: builds the backend, skips ISAs the CPU lacks.
class BackendTest : public testing::TestWithParam<BackendCase> {
 protected:
  void SetUp() override {
    backend_ = make_cpu_backend_isa(GetParam().n_threads, GetParam().isa);
    if (!backend_) GTEST_SKIP() << GetParam().isa << " not supported on this CPU";
  }
  std::unique_ptr<Backend> backend_;
};

class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(gen_); }
  float normal() { return std::normal_distribution<float>(0.0f, 1.0f)(gen_); }
  int uniform_int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen_); }
  std::vector<float> normals(size_t n, float scale = 1.0f) {
    std::vector<float> v(n);
    for (auto& x : v) x = normal() * scale;
    return v;
  }
  std::mt19937_64& gen() { return gen_; }

 private:
  std::mt19937_64 gen_;
};

inline std::vector<float> poisoned(size_t n) {
  return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN());
}

inline Tensor f32_tensor(std::vector<float>& v, std::initializer_list<int64_t> shape) {
  return make_tensor(v.data(), DType::F32, shape);
}

}  // namespace ember::test
