// Parity with Hugging Face on the committed tiny tokenizers (one per pre-tokenizer and model
// family, as tokenizer.json directories and as tokenizer-only GGUF files) over the hard-strings
// corpus. Expected values come from tools/make_tokenizer_fixtures.py.
#include "fixtures.h"
#include "parity.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace ember::test {
namespace {

class TinyParity : public ::testing::TestWithParam<std::string> {};

TEST_P(TinyParity, MatchesHuggingFace) {
  auto expected = read_json_file(GetParam());
  auto tok = load_tokenizer_for(expected);
  ASSERT_TRUE(tok.is_ok()) << tok.message();
  expect_parity(expected, **tok);
}

TEST_P(TinyParity, IncrementalDetokenizerMatchesDecode) {
  auto expected = read_json_file(GetParam());
  auto tok = load_tokenizer_for(expected);
  ASSERT_TRUE(tok.is_ok()) << tok.message();
  expect_incremental_parity(expected, **tok);
}

TEST_P(TinyParity, TokenBytesJoinToDecode) {
  auto expected = read_json_file(GetParam());
  auto tok = load_tokenizer_for(expected);
  ASSERT_TRUE(tok.is_ok()) << tok.message();
  expect_token_bytes_parity(expected, **tok);
}

std::string test_name(const ::testing::TestParamInfo<std::string>& info) {
  return std::filesystem::path(info.param).stem().string();
}

INSTANTIATE_TEST_SUITE_P(Tiny, TinyParity, ::testing::ValuesIn(expected_files(false)), test_name);

TEST(TinyParity, EveryFamilyIsCovered) {
  // The corpus must reach every pre-tokenizer and model family; a lost fixture is a failure.
  std::vector<std::string> names;
  for (const auto& f : expected_files(false)) names.push_back(std::filesystem::path(f).stem().string());
  for (const char* want : {"bpe_gpt2", "bpe_llama3", "bpe_qwen2", "bpe_qwen2_added", "spm_llama2", "spm_metaspace",
                           "spm_gemma", "gguf_qwen2", "gguf_llama_bpe", "gguf_gpt2", "gguf_llama_spm", "gguf_gemma3"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
}

}  // namespace
}  // namespace ember::test
