// Fidelity of every architecture and checkpoint variant against Hugging Face transformers:
// logits of every prompt position, of every teacher-forced decode step, and free-running
// greedy continuations (fixtures: tools/make_fixtures.py). Every variant runs again tensor
// parallel (2 ranks, and 4 where the K/V heads are fewer than the ranks and so are
// replicated), to the same bounds.
#include "core/npy.h"
#include "one_sequence_batch.h"
#include "runner/model_runner.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>

namespace ember {
namespace {

const std::string kFixtures = EMBER_FIXTURES_DIR "/models";

struct Variant {
  std::string model, name, path, reference, kind;
  int tensor_parallel = 1;
};

std::vector<Variant> variants() {
  std::ifstream in(kFixtures + "/manifest.json");
  EXPECT_TRUE(in.good()) << "missing " << kFixtures << "/manifest.json";
  std::vector<Variant> out;
  if (!in) return out;
  auto j = nlohmann::json::parse(in);
  for (auto& [model, entry] : j["models"].items())
    for (auto& v : entry["variants"])
      out.push_back({model, v["name"], v["path"], v["reference"], v["kind"]});
  return out;
}

// Every variant on 2 CPU ranks (the quantized ones split their rows at block boundaries);
// llama3 (2 K/V heads) and gemma3 (1) also on 4, so that ranks share a replicated K/V head.
std::vector<Variant> tensor_parallel_variants() {
  std::vector<Variant> out;
  for (Variant v : variants()) {
    v.tensor_parallel = 2;
    out.push_back(v);
    if ((v.model == "llama3" || v.model == "gemma3") && v.kind == "f32") {
      v.tensor_parallel = 4;
      out.push_back(v);
    }
  }
  return out;
}

// Relative error bound per variant kind. Float weights are used exactly (bf16/f16 rounding is
// in the reference too), so only f32 summation order differs: 1e-4. Quantized weights are
// also exact in the reference (dequantized by the gguf package); the remaining error comes
// from quantizing activations to 8 bits per block (as llama.cpp does), about 1/254 of each
// block's max per element, compounded over the layers: bound 3e-2.
double tolerance(const std::string& kind) {
  if (kind == "f32" || kind == "f16" || kind == "bf16") return 1e-4;
  return 3e-2;
}

double rel_error(const float* a, const float* b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// One sequence stepping through the paged cache; blocks are handed out in a scrambled order
// so that block-table indirection is exercised.
class Sequence {
 public:
  Sequence(ModelRunner& r, int block_size, int n_blocks) : r_(r), block_size_(block_size) {
    for (int i = 0; i < n_blocks; ++i) table_.push_back((i * 7 + 3) % n_blocks);
  }
  Status step(const std::vector<int32_t>& tokens, bool all_logits, std::vector<float>& logits) {
    const ForwardBatch b = one_sequence_batch(table_, block_size_, len_, tokens, all_logits);
    len_ += static_cast<int>(tokens.size());
    return r_.execute(b, logits);
  }

 private:
  ModelRunner& r_;
  int block_size_;
  int len_ = 0;
  std::vector<int32_t> table_;
};

class Fidelity : public ::testing::TestWithParam<Variant> {};

TEST_P(Fidelity, MatchesTransformers) {
  const Variant& v = GetParam();
  const std::string mdir = kFixtures + "/" + v.model;
  RunnerOptions opt;
  opt.n_threads = 2;
  opt.tensor_parallel = v.tensor_parallel;
  auto runner = ModelRunner::load(mdir + "/" + v.path, opt);
  ASSERT_TRUE(runner.is_ok()) << runner.message();
  ASSERT_EQ((*runner)->tensor_parallel(), v.tensor_parallel);
  const int block_size = 16, n_blocks = 8;
  ASSERT_TRUE((*runner)->allocate_kv_cache({n_blocks, block_size}).is_ok());
  const int vocab = (*runner)->vocab_size();
  std::ifstream gin(mdir + "/" + v.reference + "/greedy.json");
  ASSERT_TRUE(gin.good());
  auto g = nlohmann::json::parse(gin);
  const double tol = tolerance(v.kind);
  for (size_t p = 0; p < g["prompts"].size(); ++p) {
    const auto prompt = g["prompts"][p].get<std::vector<int32_t>>();
    const auto greedy = g["greedy"][p].get<std::vector<int32_t>>();
    auto ref = read_npy(mdir + "/" + v.reference + "/logits_" + std::to_string(p) + ".npy");
    ASSERT_TRUE(ref.is_ok()) << ref.message();
    ASSERT_EQ(ref->shape.size(), 2u);
    ASSERT_EQ(ref->shape[1], vocab);
    ASSERT_EQ(ref->shape[0], static_cast<int64_t>(prompt.size() + greedy.size() - 1));
    const float* ref_rows = ref->data.data();

    // Prefill: every prompt row, then teacher-forced decode steps.
    Sequence seq(**runner, block_size, n_blocks);
    std::vector<float> logits;
    ASSERT_TRUE(seq.step(prompt, true, logits).is_ok());
    for (size_t i = 0; i < prompt.size(); ++i)
      EXPECT_LE(rel_error(&logits[i * vocab], ref_rows + i * vocab, vocab), tol)
          << v.model << "/" << v.name << " prompt " << p << " row " << i;
    for (size_t j = 0; j + 1 < greedy.size(); ++j) {
      ASSERT_TRUE(seq.step({greedy[j]}, false, logits).is_ok());
      const size_t row = prompt.size() + j;
      EXPECT_LE(rel_error(logits.data(), ref_rows + row * vocab, vocab), tol)
          << v.model << "/" << v.name << " prompt " << p << " decode step " << j;
    }

    // Free-running greedy decoding must reproduce transformers' continuation exactly for
    // float weights (quantized activations may legitimately flip near-ties).
    if (tol <= 1e-4) {
      Sequence free_seq(**runner, block_size, n_blocks);
      std::vector<int32_t> out;
      std::vector<int32_t> next = prompt;
      for (size_t j = 0; j < greedy.size(); ++j) {
        ASSERT_TRUE(free_seq.step(next, false, logits).is_ok());
        const int32_t tok = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        out.push_back(tok);
        next = {tok};
      }
      EXPECT_EQ(out, greedy) << v.model << "/" << v.name << " prompt " << p;
    }
  }
}

std::string variant_name(const ::testing::TestParamInfo<Variant>& info) {
  std::string s = info.param.model + "_" + info.param.name;
  if (info.param.tensor_parallel > 1) s += "_tp" + std::to_string(info.param.tensor_parallel);
  std::replace_if(s.begin(), s.end(), [](char c) { return !std::isalnum(static_cast<unsigned char>(c)); }, '_');
  return s;
}

INSTANTIATE_TEST_SUITE_P(AllVariants, Fidelity, ::testing::ValuesIn(variants()), variant_name);
INSTANTIATE_TEST_SUITE_P(TensorParallel, Fidelity, ::testing::ValuesIn(tensor_parallel_variants()), variant_name);

}  // namespace
}  // namespace ember
