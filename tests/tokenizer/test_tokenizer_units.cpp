// Unit tests of the tokenizer pieces whose expected values are fixed by specifications (UTF-8,
// GPT-2's byte map) or by the error contract, not by HF outputs.
#include "fixtures.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/regex.h"
#include "tokenizer/tokenizer.h"
#include "core/utf8.h"

#include <gtest/gtest.h>

#include <thread>

namespace ember::test {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(Utf8, SanitizeReplacesMaximalSubparts) {
  // Unicode 15, Table 3-8: each maximal subpart of an ill-formed sequence is one U+FFFD.
  EXPECT_EQ(sanitize_utf8("abc"), "abc");
  EXPECT_EQ(sanitize_utf8("a\x80z"), "a" + kFffd + "z");
  EXPECT_EQ(sanitize_utf8("\xC0\xAF"), kFffd + kFffd);              // C0 is never valid
  EXPECT_EQ(sanitize_utf8("\xE0\x80\xAF"), kFffd + kFffd + kFffd);  // overlong: E0 80 is not a prefix
  EXPECT_EQ(sanitize_utf8("\xED\xA0\x80"), kFffd + kFffd + kFffd);  // surrogate
  EXPECT_EQ(sanitize_utf8("\xE2\x82"), kFffd);                      // truncated: one subpart
  EXPECT_EQ(sanitize_utf8("\xF0\x9F\x98 x"), kFffd + " x");
  EXPECT_EQ(sanitize_utf8("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);  // > U+10FFFF
  EXPECT_EQ(sanitize_utf8(std::string("\0", 1)), std::string("\0", 1));
}

TEST(ByteLevel, Gpt2Map) {
  const auto& m = tok::ByteLevelMap::get();
  EXPECT_EQ(m.encode(" "), "\u0120");   // Ġ
  EXPECT_EQ(m.encode("\n"), "\u010A");  // Ċ
  EXPECT_EQ(m.encode("a"), "a");
  std::string back;
  ASSERT_TRUE(m.decode(m.encode(std::string("\xFF\x00 z", 4)), back));
  EXPECT_EQ(back, std::string("\xFF\x00 z", 4));
}

TEST(Regex, TranslatesWhitespaceClasses) {
  auto re = tok::Regex::compile(R"(\s+|[^\s\p{L}]+)");
  ASSERT_TRUE(re.is_ok()) << re.message();
  std::vector<std::pair<size_t, size_t>> m;
  (*re)->find_all("a\xC2\x85\xC2\xA0!", m);  // NEL and NBSP are White_Space
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0], (std::pair<size_t, size_t>{1, 5}));
  EXPECT_EQ(m[1], (std::pair<size_t, size_t>{5, 6}));
}

TEST(Errors, BadInputsAreStatusNotCrash) {
  EXPECT_FALSE(Tokenizer::from_hf_dir("/nonexistent/dir").is_ok());
  EXPECT_FALSE(Tokenizer::from_hf_json(nlohmann::json::object(), nullptr).is_ok());
  auto unigram = nlohmann::json::parse(R"({"model": {"type": "Unigram", "vocab": []}})");
  auto r = Tokenizer::from_hf_json(unigram, nullptr);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.message().find("Unigram"), std::string::npos) << r.message();
  auto bad_merge = nlohmann::json::parse(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})");
  EXPECT_FALSE(Tokenizer::from_hf_json(bad_merge, nullptr).is_ok());
  auto wrong_type = nlohmann::json::parse(R"({"model": {"type": "BPE", "vocab": {"a": "x"}}})");
  EXPECT_FALSE(Tokenizer::from_hf_json(wrong_type, nullptr).is_ok());
  auto bad_pre = nlohmann::json::parse(
      R"({"model": {"type": "BPE", "vocab": {"a": 0}}, "pre_tokenizer": {"type": "BertPreTokenizer"}})");
  auto p = Tokenizer::from_hf_json(bad_pre, nullptr);
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.message().find("BertPreTokenizer"), std::string::npos);
  auto huge_id = nlohmann::json::parse(R"({"model": {"type": "BPE", "vocab": {"a": 2000000000}}})");
  EXPECT_FALSE(Tokenizer::from_hf_json(huge_id, nullptr).is_ok());
  EXPECT_FALSE(Tokenizer::from_gguf_metadata(nlohmann::json::object()).is_ok());
  auto short_types = nlohmann::json::parse(
      R"({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["a", "b"], "tokenizer.ggml.token_type": [1]})");
  EXPECT_FALSE(Tokenizer::from_gguf_metadata(short_types).is_ok());
  auto bad_merge_gguf = nlohmann::json::parse(
      R"({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["a", "b"], "tokenizer.ggml.merges": ["a b"]})");
  EXPECT_FALSE(Tokenizer::from_gguf_metadata(bad_merge_gguf).is_ok());
  auto bert = nlohmann::json::parse(R"({"tokenizer.ggml.model": "bert", "tokenizer.ggml.tokens": ["a"]})");
  EXPECT_FALSE(Tokenizer::from_gguf_metadata(bert).is_ok());
}

std::unique_ptr<Tokenizer> load_tiny(const std::string& name) {
  auto t = Tokenizer::from_hf_dir(fixture_dir() + "/tiny/" + name);
  EXPECT_TRUE(t.is_ok()) << t.message();
  return t.is_ok() ? std::move(t).value() : nullptr;
}

TEST(IncrementalDetokenizer, HoldsBackByteFallbackRuns) {
  // Byte-fallback tokens of one 4-byte emoji: nothing while the run of byte tokens may go on
  // (HF decodes a run as one byte string), then the whole character once a normal token ends it.
  auto tok = load_tiny("spm_llama2");
  ASSERT_TRUE(tok);
  std::vector<int32_t> ids;
  for (unsigned char b : std::string("\xF0\x9F\x98\x80")) ids.push_back(*tok->token_id(fmt::format("<0x{:02X}>", b)));
  IncrementalDetokenizer d(*tok);
  for (int32_t id : ids) EXPECT_EQ(d.push(id), "");
  auto the = tok->encode("the", false);  // one token, "▁the"
  ASSERT_EQ(the.size(), 1u);
  EXPECT_EQ(d.push(the[0]), "\xF0\x9F\x98\x80 the");
  for (int32_t id : ids) EXPECT_EQ(d.push(id), "");
  EXPECT_EQ(d.flush(), "\xF0\x9F\x98\x80");
}

TEST(IncrementalDetokenizer, ByteRunTurnedInvalidLaterMatchesDecode) {
  // <0x41> alone is "A", but HF's ByteFallback turns the run <0x41><0xFF> into two U+FFFD: the
  // stream must not have emitted the "A".
  auto tok = load_tiny("spm_llama2");
  ASSERT_TRUE(tok);
  auto the = tok->encode("the", false);
  ASSERT_EQ(the.size(), 1u);
  std::vector<int32_t> ids = {the[0], *tok->token_id("<0x41>"), *tok->token_id("<0xFF>"), the[0]};
  IncrementalDetokenizer d(*tok);
  std::string all;
  for (int32_t id : ids) all += d.push(id);
  all += d.flush();
  EXPECT_EQ(all, tok->decode(ids));
  EXPECT_EQ(all, "the" + kFffd + kFffd + " the");
}

TEST(IncrementalDetokenizer, FlushEmitsWhatNeverCompleted) {
  auto tok = load_tiny("bpe_gpt2");
  ASSERT_TRUE(tok);
  auto ids = tok->encode("\xE4\xBD", false);  // sanitized to U+FFFD first: one complete char
  IncrementalDetokenizer d(*tok);
  std::string all;
  for (int32_t id : ids) all += d.push(id);
  all += d.flush();
  EXPECT_EQ(all, tok->decode(ids));
  EXPECT_EQ(all, kFffd);
}

TEST(Tokenizer, ConcurrentEncodeIsConsistent) {
  auto tok = load_tiny("bpe_llama3");
  ASSERT_TRUE(tok);
  std::vector<std::vector<int32_t>> want;
  for (const auto& e : corpus()) want.push_back(tok->encode(e.bytes, true));
  auto worker = [&](int seed) {
    for (int round = 0; round < 20; ++round)
      for (size_t i = 0; i < corpus().size(); ++i) {
        size_t k = (i * 7 + static_cast<size_t>(seed + round)) % corpus().size();
        EXPECT_EQ(tok->encode(corpus()[k].bytes, true), want[k]);
      }
  };
  std::thread a(worker, 1), b(worker, 2);
  a.join();
  b.join();
}

}  // namespace
}  // namespace ember::test
