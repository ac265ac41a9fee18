// Parity with Hugging Face (transformers' GGUF tokenizer) on the real models that
// scripts/get-models.sh installs. Every expected/real_*.json names a model that must be present:
// a missing file fails the test. EMBER_SKIP_REAL_MODELS=1 turns that into an explicit skip for
// machines that have deliberately not fetched the models.
#include "fixtures.h"
#include "parity.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

namespace ember::test {
namespace {

class RealParity : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    expected_ = read_json_file(GetParam());
    const std::string path = models_dir() + "/" + expected_["source"].get<std::string>();
    if (!std::filesystem::exists(path)) {
      const char* skip = std::getenv("EMBER_SKIP_REAL_MODELS");
      if (skip && std::string(skip) == "1") GTEST_SKIP() << "EMBER_SKIP_REAL_MODELS=1 and " << path << " is absent";
      FAIL() << path << " is missing: run scripts/get-models.sh (or set EMBER_MODELS)";
    }
    auto tok = load_tokenizer_for(expected_);
    ASSERT_TRUE(tok.is_ok()) << tok.message();
    tok_ = std::move(tok).value();
  }
  nlohmann::json expected_;
  std::unique_ptr<Tokenizer> tok_;
};

TEST_P(RealParity, MatchesHuggingFace) { expect_parity(expected_, *tok_); }

TEST_P(RealParity, IncrementalDetokenizerMatchesDecode) { expect_incremental_parity(expected_, *tok_); }

TEST_P(RealParity, TokenBytesJoinToDecode) { expect_token_bytes_parity(expected_, *tok_); }

TEST_P(RealParity, StopTokens) {
  // The chat formats' end-of-turn tokens stop generation besides eos (from the models' own
  // generation configs: Gemma 3 stops on <end_of_turn>, Qwen2.5 on <|im_end|> and <|endoftext|>,
  // SmolLM2 on <|im_end|>).
  const auto& stops = tok_->eos_ids();
  ASSERT_TRUE(tok_->eos_id().has_value());
  EXPECT_NE(std::find(stops.begin(), stops.end(), *tok_->eos_id()), stops.end());
  for (const char* name : {"<end_of_turn>", "<|im_end|>"}) {
    auto id = tok_->token_id(name);
    if (id && tok_->is_special(*id)) {
      EXPECT_NE(std::find(stops.begin(), stops.end(), *id), stops.end()) << name;
    }
  }
}

std::string test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string s = std::filesystem::path(info.param).stem().string();
  std::replace_if(s.begin(), s.end(), [](char c) { return !std::isalnum(static_cast<unsigned char>(c)); }, '_');
  return s;
}

INSTANTIATE_TEST_SUITE_P(Real, RealParity, ::testing::ValuesIn(expected_files(true)), test_name);

TEST(RealParity, DefaultModelsHaveFixtures) {
  // The default models of scripts/get-models.sh all have expectations recorded.
  auto files = expected_files(true);
  for (const char* m : {"gemma3-270m-q4_k_m", "smollm2-135m-instruct-q4_1", "qwen2.5-coder-0.5b-instruct-q4_k_m"}) {
    bool found = false;
    for (const auto& f : files) found = found || f.find(m) != std::string::npos;
    EXPECT_TRUE(found) << "no expected/real_" << m << ".json: run tools/make_tokenizer_fixtures.py";
  }
}

}  // namespace
}  // namespace ember::test
