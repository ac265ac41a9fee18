#include "server/stop_matcher.h"

#include <gtest/gtest.h>

#include <random>

namespace ember::server {
namespace {

// Feeds pieces and returns (emitted text, stopped).
std::pair<std::string, bool> run(std::vector<std::string> stops, const std::vector<std::string>& pieces) {
  StopMatcher m(std::move(stops));
  std::string out;
  for (const auto& p : pieces) {
    out += m.push(p);
    if (m.stopped()) return {out, true};
  }
  out += m.flush();
  return {out, false};
}

TEST(StopMatcher, NoStopsPassesEverythingThrough) {
  StopMatcher m(std::vector<std::string>{});
  EXPECT_EQ(m.push("hello"), "hello");
  EXPECT_EQ(m.push(" world"), " world");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, StopInsideOnePieceIsTrimmed) {
  auto [out, stopped] = run({"STOP"}, {"abcSTOPdef", "more"});
  EXPECT_TRUE(stopped);
  EXPECT_EQ(out, "abc");
}

TEST(StopMatcher, StopAcrossPiecesIsFoundAndNothingOfItLeaks) {
  StopMatcher m({"\n\nUser:"});
  EXPECT_EQ(m.push("Hi there."), "Hi there.");
  EXPECT_EQ(m.push("\n"), "");       // could start the stop string: held
  EXPECT_EQ(m.push("\nUs"), "");     // still a prefix
  EXPECT_EQ(m.push("er:"), "");      // complete: dropped
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), "\n\nUser:");
  EXPECT_EQ(m.push("ignored"), "");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, HeldTextIsReleasedWhenItStopsMatching) {
  StopMatcher m({"abc"});
  EXPECT_EQ(m.push("xxa"), "xx");
  EXPECT_EQ(m.push("b"), "");
  EXPECT_EQ(m.push("d"), "abd");
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.push("a"), "");
  EXPECT_EQ(m.flush(), "a");  // end of generation releases what was held
}

TEST(StopMatcher, FirstCompletedMatchWinsAmongSeveralStops) {
  auto [out, stopped] = run({"world", "lo w"}, {"hello world"});
  EXPECT_TRUE(stopped);
  EXPECT_EQ(out, "hel");
  // "b" is complete before "abc" is, whether the text comes in one piece or in several.
  EXPECT_EQ(run({"abc", "b"}, {"xabc"}).first, "xa");
  EXPECT_EQ(run({"abc", "b"}, {"x", "a", "b", "c"}).first, "xa");
}

TEST(StopMatcher, OverlappingPrefixesAreHandled) {
  // "aab" after "aaa...": the held suffix must be the longest prefix match.
  auto [out, stopped] = run({"aab"}, {"a", "a", "a", "b", "z"});
  EXPECT_TRUE(stopped);
  EXPECT_EQ(out, "a");
}

TEST(StopMatcher, MultiByteStopStrings) {
  auto [out, stopped] = run({"終わり"}, {"これで", "終", "わ", "り", "です"});
  EXPECT_TRUE(stopped);
  EXPECT_EQ(out, "これで");
}

TEST(StopMatcher, EmptyStopStringsAreIgnored) {
  auto [out, stopped] = run({"", "x"}, {"abc"});
  EXPECT_FALSE(stopped);
  EXPECT_EQ(out, "abc");
}

// Randomized: splitting the same text into arbitrary pieces never changes the result, which
// must equal the text up to the first occurrence of any stop string.
TEST(StopMatcher, SplitInvariance) {
  std::mt19937 rng(7);
  const std::string alphabet = "ab\n:";
  for (int iter = 0; iter < 3000; ++iter) {
    std::string text;
    const int len = static_cast<int>(rng() % 40);
    for (int i = 0; i < len; ++i) text += alphabet[rng() % alphabet.size()];
    std::vector<std::string> stops;
    const int n_stops = 1 + static_cast<int>(rng() % 3);
    for (int s = 0; s < n_stops; ++s) {
      std::string stop;
      const int sl = 1 + static_cast<int>(rng() % 4);
      for (int i = 0; i < sl; ++i) stop += alphabet[rng() % alphabet.size()];
      stops.push_back(stop);
    }
    // Oracle: the text grows one character at a time and stops at the first complete stop.
    size_t first = std::string::npos;
    for (size_t end = 1; end <= text.size() && first == std::string::npos; ++end)
      for (const auto& s : stops)
        if (s.size() <= end && text.compare(end - s.size(), s.size(), s) == 0)
          first = std::min(first, end - s.size());
    const std::string expected = first == std::string::npos ? text : text.substr(0, first);
    std::vector<std::string> pieces;
    for (size_t i = 0; i < text.size();) {
      const size_t k = 1 + rng() % 5;
      pieces.push_back(text.substr(i, k));
      i += k;
    }
    auto [out, stopped] = run(stops, pieces);
    std::string all_stops;
    for (const auto& s : stops) all_stops += "[" + s + "]";
    ASSERT_EQ(out, expected) << "text=[" << text << "] stops=" << all_stops;
    ASSERT_EQ(stopped, first != std::string::npos);
  }
}

}  // namespace
}  // namespace ember::server
