#include "sample/json_constraint.h"

#include "sample/logits_processors.h"
#include "sample/sampler.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <limits>
#include <random>
#include <string>

namespace ember {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Byte by byte, as tokens of one byte would come: whether every byte was accepted and the
// object closed at the end.
bool matches_whole(std::string_view text) {
  JsonMatcher m;
  for (char c : text)
    if (!m.feed(std::string_view(&c, 1))) return false;
  return m.complete();
}

TEST(JsonMatcher, AgreesWithPythonJsonOnFixtures) {
  std::ifstream in(std::string(EMBER_JSON_FIXTURES) + "/cases.json");
  ASSERT_TRUE(in) << "tests/fixtures/json/cases.json (tools/make_json_fixtures.py)";
  const nlohmann::json cases = nlohmann::json::parse(in);
  ASSERT_GT(cases.size(), 1000u);
  int n_valid = 0, n_invalid = 0;
  for (const auto& c : cases) {
    const std::string text = c["text"].get<std::string>();
    const bool valid = c["valid"].get<bool>();
    (valid ? n_valid : n_invalid) += 1;
    EXPECT_EQ(matches_whole(text), valid) << "Python's json says " << (valid ? "valid" : "invalid") << ": " << text;
    // Fed whole, the same verdict.
    JsonMatcher m;
    EXPECT_EQ(m.feed(text) && m.complete(), valid) << text;
  }
  EXPECT_GT(n_valid, 500);
  EXPECT_GT(n_invalid, 300);
}

TEST(JsonMatcher, AFailedFeedLeavesTheStateAlone) {
  JsonMatcher m;
  ASSERT_TRUE(m.feed("{\"a\""));
  EXPECT_FALSE(m.feed(": x"));
  EXPECT_FALSE(m.accepts("}"));
  EXPECT_TRUE(m.accepts(": 1}"));
  EXPECT_FALSE(m.complete());
  ASSERT_TRUE(m.feed(": 12"));
  EXPECT_FALSE(m.complete());  // a number may go on
  ASSERT_TRUE(m.feed("}"));
  EXPECT_TRUE(m.complete());
  EXPECT_FALSE(m.accepts(" "));
  EXPECT_FALSE(m.accepts("{}"));
}

TEST(JsonMatcher, Utf8InsideStrings) {
  EXPECT_TRUE(matches_whole("{\"\xC3\xA9\": \"\xE4\xB8\xAD\xF0\x9F\x98\x80\"}"));
  EXPECT_FALSE(matches_whole("{\"a\": \"\xC3\"}"));          // a character cut short
  EXPECT_FALSE(matches_whole("{\"a\": \"\xC0\x80\"}"));      // overlong lead byte
  EXPECT_FALSE(matches_whole("{\"a\": \"\xA9\"}"));          // a continuation byte first
  EXPECT_FALSE(matches_whole("{\"a\": \"\xFF\"}"));
  EXPECT_FALSE(matches_whole("{\"\xC3\xA9\": 1, \xC3\xA9}"));  // outside a string
  // Split across tokens, as byte-level BPE splits characters.
  JsonMatcher m;
  ASSERT_TRUE(m.feed("{\"a\": \"\xE4"));
  EXPECT_FALSE(m.in_plain_string());
  EXPECT_FALSE(m.accepts("x"));
  ASSERT_TRUE(m.feed("\xB8"));
  ASSERT_TRUE(m.feed("\xAD"));
  EXPECT_TRUE(m.in_plain_string());
}

TEST(JsonMatcher, BoundsOnDepthAndWhitespace) {
  const int d = JsonMatcher::kMaxDepth;
  std::string deep = "{\"a\":" + std::string(static_cast<size_t>(d - 1), '[') + std::string(static_cast<size_t>(d - 1), ']') + "}";
  EXPECT_TRUE(matches_whole(deep));
  std::string deeper = "{\"a\":" + std::string(static_cast<size_t>(d), '[') + std::string(static_cast<size_t>(d), ']') + "}";
  EXPECT_FALSE(matches_whole(deeper));
  const std::string ws(JsonMatcher::kMaxWhitespaceRun, '\n');
  EXPECT_TRUE(matches_whole(ws + "{" + ws + "}"));
  EXPECT_FALSE(matches_whole(ws + " {}"));
  EXPECT_FALSE(matches_whole("{\"a\":" + ws + " 1}"));
  EXPECT_FALSE(matches_whole("{} "));  // the end of sequence comes next, nothing else
  const std::string spaces(2 * JsonMatcher::kMaxWhitespaceRun, ' ');
  EXPECT_TRUE(matches_whole("{\"" + spaces + "\": 1}"));  // inside a string: text, not a run
}

// A vocabulary of JSON pieces, words, partial characters and one special token (32, no
// text). Like a real tokenizer's, it can continue every valid prefix (the single letters of
// the literals, digits, exponent signs), so the mask never leaves a sequence stranded.
std::vector<std::string> toy_vocab() {
  return {"{", "}", "[", "]", "\"", ":", ",", " ", "\n", "a", "bc", "\":", "\": ", "1", "-", "0", ".5", "e3", "true",
          "fal", "se", "null", "\\", "n", "u", "00e9", "\xC3", "\xA9", "\xC3\xA9", "{\"", "\"}", "x y", "",
          "\"]", "}}", "\t\t", "word", "l", "e", "s", "r", "t", "2", "E", "+", ".", "<eos>"};
}

TEST(JsonConstraint, SampledAndGreedyOutputsAreJsonObjects) {
  std::vector<std::string> words = toy_vocab();
  const int32_t eos = static_cast<int32_t>(words.size()) - 1;
  words[static_cast<size_t>(eos)] = "";  // special: no text
  auto vocab = std::make_shared<const JsonVocab>(words);
  Sampler sampler({eos});
  sampler.set_json_vocab(vocab);
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  int ended = 0, beyond_double = 0;
  for (int run = 0; run < 200; ++run) {
    SamplingParams p;
    p.json_object = true;
    p.temperature = run % 2 == 0 ? 0.0f : 1.0f;
    std::vector<int32_t> out;
    std::string text;
    for (int step = 0; step < 300; ++step) {
      std::vector<float> logits(words.size());
      for (float& v : logits) v = normal(rng);
      logits[1] += 1.0f;  // '}' a little more likely, so runs end
      logits[3] += 1.0f;
      const SamplerRow row{0, &p, {}, out, &rng};
      const int32_t t = sampler.sample_row(logits, row).token_id;
      if (t == eos) {
        ++ended;
        JsonMatcher m;
        ASSERT_TRUE(json_state_of(*vocab, nullptr, out, m) && m.complete()) << text;
        try {
          EXPECT_TRUE(nlohmann::json::parse(text).is_object()) << text;
        } catch (const nlohmann::json::out_of_range& e) {
          // A number past double's range (1e9121): valid JSON that RFC 8259 lets a parser refuse.
          ASSERT_EQ(e.id, 406) << e.what();
          ++beyond_double;
        } catch (const nlohmann::json::exception& e) {
          FAIL() << "nlohmann::json rejects " << text << ": " << e.what();
        }
        break;
      }
      ASSERT_NE(t, 32) << "the token without text was picked";
      out.push_back(t);
      text += words[static_cast<size_t>(t)];
      JsonMatcher m;
      ASSERT_TRUE(json_state_of(*vocab, nullptr, out, m)) << "not a JSON prefix: " << text;
    }
  }
  EXPECT_GT(ended, 100);
  EXPECT_LT(beyond_double, ended / 4);
}

TEST(JsonConstraint, GreedyShortcutEqualsTheFullMask) {
  std::vector<std::string> words = toy_vocab();
  const int32_t eos = static_cast<int32_t>(words.size()) - 1;
  words[static_cast<size_t>(eos)] = "";
  const JsonVocab vocab(words);
  const std::vector<int32_t> ends{eos};
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<int32_t> out;
  for (int step = 0; step < 2000; ++step) {
    std::vector<float> x(words.size());
    for (float& v : x) v = normal(rng);
    if (step % 5 == 0) x[static_cast<size_t>(rng() % x.size())] = kNegInf;
    std::vector<float> quick = x, full = x;
    constrain_to_json(quick, vocab, nullptr, out, ends, /*greedy=*/true);
    constrain_to_json(full, vocab, nullptr, out, ends, /*greedy=*/false);
    const int32_t t = argmax(quick);
    ASSERT_EQ(t, argmax(full)) << "step " << step;
    JsonMatcher m;
    ASSERT_TRUE(json_state_of(vocab, nullptr, out, m));
    auto ok = [&](size_t i) { return static_cast<int32_t>(i) == eos ? m.complete() : vocab.allows(m, static_cast<int32_t>(i)); };
    bool any = false;
    for (size_t i = 0; i < full.size(); ++i) any = any || (x[i] != kNegInf && ok(i));
    for (size_t i = 0; i < full.size(); ++i) {
      // Every allowed token keeps its logit, every other one is masked; when the caller had
      // masked all the allowed ones, the end is let back in.
      const bool want = any ? x[i] != kNegInf && ok(i) : static_cast<int32_t>(i) == eos;
      EXPECT_EQ(full[i] != kNegInf, want) << "token " << i << " after " << out.size();
    }
    if (t == eos) out.clear();
    else out.push_back(t);
  }
}

TEST(JsonConstraint, ABrokenPrefixCanOnlyEndAndNothingLeftMeansEnd) {
  const JsonVocab vocab({"{", "}", "x", ""});
  std::vector<float> x{1.0f, 2.0f, 3.0f, 0.0f};
  constrain_to_json(x, vocab, nullptr, std::vector<int32_t>{2}, std::vector<int32_t>{3}, false);
  EXPECT_EQ(argmax(x), 3);
  EXPECT_EQ(x[0], kNegInf);
  // After "{}" only the end may come; with it masked by the caller (min_tokens), it is let back.
  std::vector<float> y{1.0f, 2.0f, 3.0f, kNegInf};
  constrain_to_json(y, vocab, nullptr, std::vector<int32_t>{0, 1}, std::vector<int32_t>{3}, true);
  EXPECT_EQ(argmax(y), 3);
}

TEST(JsonConstraint, NeverTheDevicePaths) {
  SamplingParams p;
  p.temperature = 0.0f;
  EXPECT_TRUE(is_plain_argmax(p, 0));
  p.json_object = true;
  EXPECT_FALSE(is_plain_argmax(p, 0));
  EXPECT_FALSE(is_device_sampleable(p));
}

}  // namespace
}  // namespace ember
