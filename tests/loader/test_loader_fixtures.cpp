// WeightSource on fixtures written by gguf's GGUFWriter, safetensors and transformers
// (tools/make_format_fixtures.py): every tensor's dtype, shape, bytes and offset, and the
// metadata, must match what the script recorded.
#include "loader/gguf_parser.h"
#include "loader/safetensors_parser.h"
#include "loader/weight_source.h"
#include "test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <set>

namespace ember::loader::test {
namespace {

nlohmann::json expected() {
  std::ifstream f(fixture("expected.json"));
  return nlohmann::json::parse(f);
}

std::vector<int64_t> shape_of(const Tensor& t) {
  return std::vector<int64_t>(t.shape.begin(), t.shape.begin() + t.n_dims);
}

// Tensors of `src` against `want` (name -> {dtype, shape, nbytes, fnv1a64}).
void check_tensors(const WeightSource& src, const nlohmann::json& want) {
  std::set<std::string> want_names;
  for (const auto& [name, w] : want.items()) want_names.insert(name);
  const auto names = src.tensor_names();
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()), want_names);
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  size_t total = 0;
  for (const auto& [name, w] : want.items()) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(src.has_tensor(name));
    auto t = src.tensor(name);
    ASSERT_TRUE(t.is_ok()) << t.message();
    EXPECT_EQ(dtype_name(t->dtype), w["dtype"].get<std::string>());
    EXPECT_EQ(shape_of(*t), w["shape"].get<std::vector<int64_t>>());
    EXPECT_EQ(t->nbytes(), w["nbytes"].get<size_t>());
    EXPECT_EQ(fnv1a64(t->data, t->nbytes()), w["fnv1a64"].get<std::string>());
    EXPECT_EQ(t->device, Device::CPU);
    total += t->nbytes();
  }
  EXPECT_EQ(src.total_tensor_bytes(), total);
  auto missing = src.tensor("no.such.tensor");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.message().find("no.such.tensor"), std::string::npos);
}

class GgufFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufFixture, TensorsAndMetadataMatchWriter) {
  const auto want = expected()[GetParam()];
  const std::string path = fixture(GetParam());
  auto src = WeightSource::open(path);
  ASSERT_TRUE(src.is_ok()) << src.message();
  EXPECT_EQ((*src)->format(), CheckpointFormat::GGUF);
  EXPECT_EQ((*src)->path(), path);
  check_tensors(**src, want["tensors"]);
  EXPECT_EQ((*src)->metadata(), want["metadata"]) << (*src)->metadata().dump(1);

  // Offsets (not visible through WeightSource) against gguf's own reader.
  const auto bytes = read_file(path);
  auto parsed = parse_gguf(bytes.data(), bytes.size(), path);
  ASSERT_TRUE(parsed.is_ok()) << parsed.message();
  EXPECT_EQ(parsed->version, want["version"].get<uint32_t>());
  for (const auto& t : parsed->tensors) {
    EXPECT_EQ(t.file_offset, want["tensors"][t.name]["offset"].get<size_t>()) << t.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Files, GgufFixture,
                         ::testing::Values("all_types.gguf", "all_types_v2.gguf",
                                           "aligned64.gguf"),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           std::string s = p.param;
                           for (char& c : s) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return s;
                         });

class HfFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(HfFixture, TensorsAndMetadataMatchWriter) {
  const auto want = expected()[GetParam()];
  const std::string dir = fixture(GetParam());
  auto src = WeightSource::open(dir);
  ASSERT_TRUE(src.is_ok()) << src.message();
  EXPECT_EQ((*src)->format(), CheckpointFormat::HuggingFace);
  check_tensors(**src, want["tensors"]);
  EXPECT_EQ((*src)->metadata(), want["metadata"]) << (*src)->metadata().dump(1);

  for (const auto& [name, w] : want["tensors"].items()) {
    const std::string file = dir + "/" + w["file"].get<std::string>();
    const auto bytes = read_file(file);
    auto st = parse_safetensors(bytes.data(), bytes.size(), file);
    ASSERT_TRUE(st.is_ok()) << st.message();
    bool found = false;
    for (const auto& t : st->tensors) {
      if (t.name != name) continue;
      found = true;
      EXPECT_EQ(t.file_offset, w["offset"].get<size_t>()) << name;
    }
    EXPECT_TRUE(found) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Dirs, HfFixture, ::testing::Values("hf_single", "hf_sharded"));

TEST(WeightSourceOpen, HfSingleSafetensorsMetadata) {
  const auto bytes = read_file(fixture("hf_single/model.safetensors"));
  auto st = parse_safetensors(bytes.data(), bytes.size(), "model.safetensors");
  ASSERT_TRUE(st.is_ok()) << st.message();
  EXPECT_EQ(st->metadata, nlohmann::json({{"format", "pt"}}));
}

// A GGUF vocabulary of 262144 tokens must load in well under a second.
TEST(GgufParse, LargeTokenArraysAreFast) {
  constexpr uint64_t kTokens = 262144;
  Bytes b;
  b.buf = {'G', 'G', 'U', 'F'};
  b.put<uint32_t>(3);
  b.put<uint64_t>(0);
  b.put<uint64_t>(3);
  b.put_str("tokenizer.ggml.tokens");
  b.put<uint32_t>(9);
  b.put<uint32_t>(8);
  b.put<uint64_t>(kTokens);
  for (uint64_t i = 0; i < kTokens; ++i) b.put_str("tok_" + std::to_string(i * 7919 % 100000));
  b.put_str("tokenizer.ggml.scores");
  b.put<uint32_t>(9);
  b.put<uint32_t>(6);
  b.put<uint64_t>(kTokens);
  for (uint64_t i = 0; i < kTokens; ++i) b.put<float>(-static_cast<float>(i));
  b.put_str("tokenizer.ggml.token_type");
  b.put<uint32_t>(9);
  b.put<uint32_t>(5);
  b.put<uint64_t>(kTokens);
  for (uint64_t i = 0; i < kTokens; ++i) b.put<int32_t>(1);

  const auto t0 = std::chrono::steady_clock::now();
  auto f = parse_gguf(b.buf.data(), b.buf.size(), "vocab.gguf");
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(f.is_ok()) << f.message();
  EXPECT_EQ(f->metadata["tokenizer.ggml.tokens"].size(), kTokens);
  EXPECT_EQ(f->metadata["tokenizer.ggml.tokens"][1].get<std::string>(), "tok_7919");
  EXPECT_EQ(f->metadata["tokenizer.ggml.scores"][5].get<float>(), -5.0f);
  std::printf("parse of 3 x %llu-element vocabulary arrays: %.1f ms\n",
              static_cast<unsigned long long>(kTokens), ms);
#if defined(__OPTIMIZE__) && !defined(__SANITIZE_ADDRESS__)  // timing only means something here
  EXPECT_LT(ms, 500.0);
#endif
}

}  // namespace
}  // namespace ember::loader::test
