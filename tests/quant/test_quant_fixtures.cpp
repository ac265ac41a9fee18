// ember's dequantize_row / quantize_row against values produced by the gguf Python package,
// PyTorch (FP8) and GGML's reference definitions (tools/make_quant_fixtures.py).
#include "quant/quant.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

namespace ember::quant {
namespace {

std::vector<uint8_t> read_bytes(const std::string& name) {
  std::ifstream f(std::string(EMBER_QUANT_FIXTURES) + "/" + name, std::ios::binary);
  EXPECT_TRUE(f.good()) << "missing fixture " << name;
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::vector<float> read_floats(const std::string& name) {
  const auto bytes = read_bytes(name);
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

nlohmann::json manifest() {
  std::ifstream f(std::string(EMBER_QUANT_FIXTURES) + "/manifest.json");
  return nlohmann::json::parse(f);
}

std::optional<DType> dtype_named(const std::string& name) {
  for (DType t : {DType::F16, DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                  DType::Q8_0, DType::Q8_1, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K,
                  DType::Q6_K, DType::Q8_K, DType::FP8_E4M3, DType::FP8_E5M2}) {
    if (dtype_name(t) == name) return t;
  }
  return std::nullopt;
}

bool same_float(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::memcmp(&a, &b, 4) == 0;  // bit-exact, so -0 != +0
}

TEST(QuantFixtures, DequantizeMatchesReferenceBitExact) {
  const auto m = manifest();
  ASSERT_GE(m["dequantize"].size(), 16u);
  for (const auto& e : m["dequantize"]) {
    const std::string type = e["type"];
    SCOPED_TRACE(type);
    const auto t = dtype_named(type);
    ASSERT_TRUE(t.has_value());
    ASSERT_TRUE(can_dequantize(*t));
    const int64_t n = e["n"];
    const auto blocks = read_bytes(e["blocks"]);
    const auto want = read_floats(e["values"]);
    ASSERT_EQ(blocks.size(), dtype_row_bytes(*t, n));
    ASSERT_EQ(want.size(), static_cast<size_t>(n));
    std::vector<float> got(static_cast<size_t>(n));
    dequantize_row(*t, blocks.data(), got.data(), n);
    int n_bad = 0;
    for (int64_t i = 0; i < n && n_bad < 5; ++i) {
      if (!same_float(got[i], want[i])) {
        ADD_FAILURE() << type << " element " << i << ": got " << got[i] << " want " << want[i];
        ++n_bad;
      }
    }
  }
}

TEST(QuantFixtures, QuantizeMatchesReferenceByteExact) {
  const auto m = manifest();
  ASSERT_GE(m["quantize"].size(), 11u);
  for (const auto& e : m["quantize"]) {
    const std::string type = e["type"];
    SCOPED_TRACE(type);
    const auto t = dtype_named(type);
    ASSERT_TRUE(t.has_value());
    ASSERT_TRUE(can_quantize(*t));
    const int64_t n = e["n"];
    const auto src = read_floats(e["source"]);
    const auto want = read_bytes(e["bytes"]);
    ASSERT_EQ(src.size(), static_cast<size_t>(n));
    ASSERT_EQ(want.size(), dtype_row_bytes(*t, n));
    std::vector<uint8_t> got(want.size());
    quantize_row(*t, src.data(), got.data(), n);
    const size_t bb = dtype_block_bytes(*t);
    int n_bad = 0;
    for (size_t b = 0; b < want.size() / bb && n_bad < 5; ++b) {
      if (std::memcmp(got.data() + b * bb, want.data() + b * bb, bb) != 0) {
        size_t k = 0;
        while (got[b * bb + k] == want[b * bb + k]) ++k;
        ADD_FAILURE() << type << " block " << b << " differs at byte " << k << ": got "
                      << int(got[b * bb + k]) << " want " << int(want[b * bb + k]);
        ++n_bad;
      }
    }
  }
}

}  // namespace
}  // namespace ember::quant
