// `ember quantize` against the `gguf` Python package: quantizing the F32 llama_q model
// (tests/quantize/data, rebuilt by make_fixture.py from tools/make_fixtures.py's weights) must
// give byte for byte the tensors of the committed gguf-quantized fixtures, and the result must
// run with the fixture's logits. Also: the policy, k-types, metadata round trip, bad input.
#include "core/npy.h"
#include "quant/quant.h"
#include "quantize_test_util.h"
#include "runner/model_runner.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <fstream>

namespace ember {
namespace {

using test::ember_quantize;
using test::read_gguf;
using test::run_cmd;

const std::string kF32 = EMBER_QUANTIZE_DATA "/llama_q-f32.gguf";
const std::string kFixtures = EMBER_FIXTURES_DIR "/models/llama_q";

class MatchesGguf : public ::testing::TestWithParam<std::string> {};

TEST_P(MatchesGguf, TensorBytesIdentical) {
  const std::string type = GetParam();
  const std::string out = test::temp_dir("gguf-" + type) + "/out.gguf";
  auto r = run_cmd(ember_quantize("-m " + kF32 + " -o " + out + " --type " + type + " --pure --threads 3"));
  ASSERT_EQ(r.rc, 0) << r.output;
  auto got = read_gguf(out);
  ASSERT_TRUE(got.is_ok()) << got.message();
  auto want = read_gguf(kFixtures + "/model-" + type + ".gguf");
  ASSERT_TRUE(want.is_ok()) << want.message();
  ASSERT_EQ(got->gguf.tensors.size(), want->gguf.tensors.size());
  for (size_t i = 0; i < got->gguf.tensors.size(); ++i) {
    const auto& g = got->gguf.tensors[i];
    const auto& w = want->gguf.tensors[i];
    ASSERT_EQ(g.name, w.name);
    EXPECT_EQ(g.dtype, w.dtype) << g.name;
    EXPECT_EQ(g.ne, w.ne) << g.name;
    ASSERT_EQ(g.nbytes, w.nbytes) << g.name;
    EXPECT_EQ(std::memcmp(got->data(g), want->data(w), g.nbytes), 0) << g.name << " differs";
  }
}

INSTANTIATE_TEST_SUITE_P(LegacyTypes, MatchesGguf,
                         ::testing::Values("q8_0", "q4_0", "q4_1", "q5_0", "q5_1"));

// Logits of every prompt position for reference prompt p.
Result<std::vector<float>> prompt_logits(const std::string& path, const std::vector<int32_t>& prompt) {
  RunnerOptions opt;
  opt.n_threads = 2;
  EMBER_ASSIGN_OR_RETURN(auto runner, ModelRunner::load(path, opt));
  EMBER_RETURN_IF_ERROR(runner->allocate_kv_cache({4, 16}));
  ForwardBatch b;
  for (size_t i = 0; i < prompt.size(); ++i) {
    b.token_ids.push_back(prompt[i]);
    b.positions.push_back(static_cast<int32_t>(i));
    b.slot_mapping.push_back(static_cast<int32_t>(i));
    b.logit_rows.push_back(static_cast<int32_t>(i));
  }
  b.query_start = {0, static_cast<int32_t>(prompt.size())};
  b.seq_lens = {static_cast<int32_t>(prompt.size())};
  b.block_tables = {0, 1, 2, 3};
  b.max_blocks_per_seq = 4;
  std::vector<float> logits;
  EMBER_RETURN_IF_ERROR(runner->execute(b, logits));
  return logits;
}

TEST(Quantize, LoadsWithTheFixtureLogits) {
  std::ifstream gin(kFixtures + "/reference/q4_0/greedy.json");
  ASSERT_TRUE(gin.good());
  const auto prompt = nlohmann::json::parse(gin)["prompts"][0].get<std::vector<int32_t>>();
  const std::string out = test::temp_dir("logits") + "/q4_0.gguf";
  auto r = run_cmd(ember_quantize("-m " + kF32 + " -o " + out + " --type q4_0 --pure"));
  ASSERT_EQ(r.rc, 0) << r.output;
  auto got = prompt_logits(out, prompt);
  ASSERT_TRUE(got.is_ok()) << got.message();
  auto want = prompt_logits(kFixtures + "/model-q4_0.gguf", prompt);
  ASSERT_TRUE(want.is_ok()) << want.message();
  ASSERT_EQ(got->size(), want->size());
  EXPECT_EQ(std::memcmp(got->data(), want->data(), got->size() * 4), 0);
  // And within the fidelity bound (tests/model) of transformers on the dequantized weights.
  auto ref = read_npy(kFixtures + "/reference/q4_0/logits_0.npy");
  ASSERT_TRUE(ref.is_ok()) << ref.message();
  const size_t vocab = static_cast<size_t>(ref->shape[1]);
  for (size_t row = 0; row < prompt.size(); ++row) {
    double num = 0, den = 0;
    for (size_t k = 0; k < vocab; ++k) {
      const double d = (*got)[row * vocab + k] - ref->data[row * vocab + k];
      num += d * d;
      den += double(ref->data[row * vocab + k]) * ref->data[row * vocab + k];
    }
    EXPECT_LE(std::sqrt(num / den), 3e-2) << "row " << row;
  }
}

std::map<std::string, DType> dtypes(const test::GgufOnDisk& g) {
  std::map<std::string, DType> m;
  for (const auto& t : g.gguf.tensors) m[t.name] = t.dtype;
  return m;
}

TEST(Quantize, OutputMatrixPolicy) {
  const std::string dir = test::temp_dir("policy");
  struct Case { std::string args; DType other, output; };
  for (const Case& c : {Case{"--type q4_0", DType::Q4_0, DType::Q6_K},
                        Case{"--type q4_0 --pure", DType::Q4_0, DType::Q4_0},
                        Case{"--type q4_0 --keep-output", DType::Q4_0, DType::F32},
                        Case{"--type q8_0", DType::Q8_0, DType::Q8_0},
                        Case{"--type F16", DType::F16, DType::F16}}) {
    auto r = run_cmd(ember_quantize("-m " + kF32 + " -o " + dir + "/o.gguf " + c.args));
    ASSERT_EQ(r.rc, 0) << c.args << "\n" << r.output;
    auto g = read_gguf(dir + "/o.gguf");
    ASSERT_TRUE(g.is_ok()) << g.message();
    for (const auto& [name, dt] : dtypes(*g)) {
      const bool is_1d = g->find(name)->n_dims == 1;
      const DType want = is_1d ? DType::F32 : name == "output.weight" ? c.output : c.other;
      EXPECT_EQ(dt, want) << c.args << ": " << name;
    }
    EXPECT_NE(r.output.find("tensors: 21"), std::string::npos) << r.output;  // the summary
  }
}

// k-types: every row as ember's reference quantizer makes it (so the thread split changes
// nothing), and the dequantized weights close to the F32 source.
TEST(Quantize, KTypes) {
  const std::string dir = test::temp_dir("ktypes");
  auto src = read_gguf(kF32);
  ASSERT_TRUE(src.is_ok()) << src.message();
  for (auto [type, dt, bound] : {std::tuple{"q4_k", DType::Q4_K, 0.12}, std::tuple{"q5_k", DType::Q5_K, 0.06},
                                 std::tuple{"q6_k", DType::Q6_K, 0.03}}) {
    auto r = run_cmd(ember_quantize("-m " + kF32 + " -o " + dir + "/o.gguf --pure --threads 3 --type " + type));
    ASSERT_EQ(r.rc, 0) << r.output;
    auto g = read_gguf(dir + "/o.gguf");
    ASSERT_TRUE(g.is_ok()) << g.message();
    for (const auto& t : g->gguf.tensors) {
      const auto* s = src->find(t.name);
      ASSERT_NE(s, nullptr);
      if (t.n_dims == 1) continue;
      ASSERT_EQ(t.dtype, dt) << t.name;
      const int64_t n = t.ne[0] * t.ne[1];
      std::vector<uint8_t> want(t.nbytes);
      quant::quantize_row(dt, reinterpret_cast<const float*>(src->data(*s)), want.data(), n);
      EXPECT_EQ(std::memcmp(want.data(), g->data(t), t.nbytes), 0) << type << " " << t.name;
      std::vector<float> deq(static_cast<size_t>(n));
      quant::dequantize_row(dt, g->data(t), deq.data(), n);
      const auto* x = reinterpret_cast<const float*>(src->data(*s));
      double num = 0, den = 0;
      for (int64_t i = 0; i < n; ++i) {
        num += (deq[i] - x[i]) * double(deq[i] - x[i]);
        den += double(x[i]) * x[i];
      }
      EXPECT_LE(std::sqrt(num / den), bound) << type << " " << t.name;
    }
    auto loaded = prompt_logits(dir + "/o.gguf", {5, 17, 300, 42});
    EXPECT_TRUE(loaded.is_ok()) << loaded.message();
  }
}

// Quantize then read back: metadata (values and stored types) and tensor names/shapes equal.
void expect_round_trip(const std::string& in, const std::string& args, uint64_t alignment,
                       const std::string& out) {
  auto r = run_cmd(ember_quantize("-m " + in + " -o " + out + " " + args));
  ASSERT_EQ(r.rc, 0) << r.output;
  auto a = read_gguf(in);
  auto b = read_gguf(out);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_EQ(b->gguf.alignment, alignment);
  auto strip = [](nlohmann::json j) {
    j.erase("general.file_type");
    j.erase("general.quantization_version");
    return j;
  };
  EXPECT_EQ(strip(a->gguf.metadata), strip(b->gguf.metadata));
  for (const auto& key : a->gguf.metadata_keys) {
    if (key == "general.file_type") continue;
    const auto& ta = a->gguf.metadata_types.at(key);
    const auto& tb = b->gguf.metadata_types.at(key);
    EXPECT_EQ(ta.type, tb.type) << key;
    EXPECT_EQ(ta.elem, tb.elem) << key;
    EXPECT_EQ(ta.items.size(), tb.items.size()) << key;
  }
  ASSERT_EQ(a->gguf.tensors.size(), b->gguf.tensors.size());
  for (size_t i = 0; i < a->gguf.tensors.size(); ++i) {
    EXPECT_EQ(a->gguf.tensors[i].name, b->gguf.tensors[i].name);
    EXPECT_EQ(a->gguf.tensors[i].ne, b->gguf.tensors[i].ne);
    EXPECT_EQ(a->gguf.tensors[i].n_dims, b->gguf.tensors[i].n_dims);
  }
}

TEST(Quantize, RoundTripEveryMetadataType) {
  const std::string formats = EMBER_FIXTURES_DIR "/formats";
  const std::string out = test::temp_dir("roundtrip") + "/o.gguf";
  expect_round_trip(formats + "/all_types.gguf", "--type f16 --allow-requantize", 32, out);
  expect_round_trip(formats + "/aligned64.gguf", "--type q8_0 --allow-requantize", 64, out);
  expect_round_trip(kF32, "--type q5_k", 32, out);
  auto g = read_gguf(out);
  ASSERT_TRUE(g.is_ok());
  EXPECT_EQ(g->gguf.metadata["general.file_type"], 16);  // llama.cpp's MOSTLY_Q5_K_S
  EXPECT_EQ(g->gguf.metadata_types.at("general.file_type").type, loader::GgufType::UINT32);
}

// ---- bad input: a clear message, a non-zero exit, nothing left behind.

void expect_error(const std::string& args, const std::string& message, const std::string& out) {
  auto r = run_cmd(ember_quantize(args));
  EXPECT_NE(r.rc, 0) << args;
  EXPECT_NE(r.output.find(message), std::string::npos) << args << "\n" << r.output;
  EXPECT_LT(r.output.size(), 2000u) << "a message, not a dump: " << r.output;
  if (!out.empty()) {
    EXPECT_FALSE(std::filesystem::exists(out)) << out;
    EXPECT_FALSE(std::filesystem::exists(out + ".tmp")) << out;
  }
}

TEST(QuantizeBadInput, UnknownType) {
  const std::string out = test::temp_dir("bad-type") + "/o.gguf";
  expect_error("-m " + kF32 + " -o " + out + " --type q3_z", "unknown --type 'q3_z'", out);
}

TEST(QuantizeBadInput, UnwritableOutput) {
  expect_error("-m " + kF32 + " -o /nonexistent-dir/o.gguf --type q8_0",
               "/nonexistent-dir/o.gguf.tmp: cannot create: No such file or directory", "");
}

TEST(QuantizeBadInput, TruncatedInput) {
  const std::string dir = test::temp_dir("truncated");
  const std::string in = dir + "/cut.gguf", out = dir + "/o.gguf";
  std::filesystem::copy_file(kF32, in);
  std::filesystem::resize_file(in, std::filesystem::file_size(kF32) - 1000);
  expect_error("-m " + in + " -o " + out + " --type q8_0", "exceeds file size", out);
  std::filesystem::resize_file(in, 500);
  expect_error("-m " + in + " -o " + out + " --type q8_0", "impossible for file size 500", out);
  std::filesystem::resize_file(in, 20);
  expect_error("-m " + in + " -o " + out + " --type q8_0",
               "cut.gguf: truncated at offset 16 reading metadata count", out);
  expect_error("-m " + dir + "/missing.gguf -o " + out + " --type q8_0", "missing.gguf", out);
  expect_error("-m " + dir + " -o " + out + " --type q8_0", "is a directory", out);
}

TEST(QuantizeBadInput, RequantizeNeedsTheFlag) {
  const std::string out = test::temp_dir("requant") + "/o.gguf";
  expect_error("-m " + kFixtures + "/model-q8_0.gguf -o " + out + " --type q4_0",
               "pass --allow-requantize", out);
  // The same type is copied, not requantized: no flag needed.
  auto r = run_cmd(ember_quantize("-m " + kFixtures + "/model-q8_0.gguf -o " + out + " --type q8_0"));
  EXPECT_EQ(r.rc, 0) << r.output;
}

// A full disk, simulated by a file size limit (SIGXFSZ ignored, so writes fail with EFBIG).
TEST(QuantizeBadInput, DiskFull) {
  const std::string out = test::temp_dir("full") + "/o.gguf";
  auto r = run_cmd("sh -c \"trap '' XFSZ; ulimit -f 100; exec " +
                   ember_quantize("-m " + kF32 + " -o " + out + " --type q8_0") + "\"");
  EXPECT_EQ(r.rc, 1) << r.output;
  EXPECT_NE(r.output.find("o.gguf.tmp: write failed: File too large"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(out));
  EXPECT_FALSE(std::filesystem::exists(out + ".tmp"));
}

}  // namespace
}  // namespace ember
