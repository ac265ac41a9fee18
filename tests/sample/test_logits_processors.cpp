// Each logits processor against a plain, obviously-correct reference on random rows.
#include "sample/logits_processors.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>

namespace ember {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::vector<float> random_logits(std::mt19937_64& rng, int n, float scale = 4.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<double> softmax(const std::vector<float>& x) {
  double m = -1e300;
  for (float v : x) m = std::max(m, static_cast<double>(v));
  std::vector<double> p(x.size());
  double sum = 0;
  for (size_t i = 0; i < x.size(); ++i) sum += p[i] = x[i] == kNegInf ? 0.0 : std::exp(x[i] - m);
  for (auto& v : p) v /= sum;
  return p;
}

std::set<int> kept(const std::vector<float>& x) {
  std::set<int> s;
  for (size_t i = 0; i < x.size(); ++i)
    if (x[i] != kNegInf) s.insert(static_cast<int>(i));
  return s;
}

TEST(LogitsProcessors, PenaltiesMatchReference) {
  std::mt19937_64 rng(1);
  for (int trial = 0; trial < 200; ++trial) {
    const int vocab = 1 + static_cast<int>(rng() % 50);
    std::vector<float> x = random_logits(rng, vocab);
    std::vector<int32_t> prompt(rng() % 20), output(rng() % 20);
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % vocab);
    for (auto& t : output) t = static_cast<int32_t>(rng() % vocab);
    const float rep = 0.5f + static_cast<float>(rng() % 100) / 50.0f;
    const float pres = static_cast<float>(rng() % 41) / 10.0f - 2.0f;
    const float freq = static_cast<float>(rng() % 41) / 10.0f - 2.0f;
    std::vector<float> ref = x;
    for (int v = 0; v < vocab; ++v) {
      const bool seen = std::count(prompt.begin(), prompt.end(), v) + std::count(output.begin(), output.end(), v) > 0;
      const auto count = std::count(output.begin(), output.end(), v);
      float& r = ref[static_cast<size_t>(v)];
      if (seen) r = r > 0 ? r / rep : r * rep;
      r -= freq * static_cast<float>(count) + (count > 0 ? pres : 0.0f);
    }
    apply_penalties(x, prompt, output, rep, pres, freq);
    for (int v = 0; v < vocab; ++v) ASSERT_NEAR(x[static_cast<size_t>(v)], ref[static_cast<size_t>(v)], 1e-5) << v;
  }
}

TEST(LogitsProcessors, RepetitionPenaltyUsesPromptPresenceUsesOutputOnly) {
  std::vector<float> x = {2.0f, -2.0f, 2.0f, 2.0f};
  const std::vector<int32_t> prompt = {0, 1}, output = {2, 2};
  apply_penalties(x, prompt, output, 2.0f, 0.5f, 0.25f);
  EXPECT_FLOAT_EQ(x[0], 1.0f);                 // prompt: repetition only
  EXPECT_FLOAT_EQ(x[1], -4.0f);                // negative logits are multiplied
  EXPECT_FLOAT_EQ(x[2], 1.0f - 0.5f - 0.5f);   // output twice: rep, presence, 2 x frequency
  EXPECT_FLOAT_EQ(x[3], 2.0f);                 // unseen
}

TEST(LogitsProcessors, BiasSuppressTemperature) {
  std::vector<float> x = {1.0f, 2.0f, 3.0f};
  apply_logit_bias(x, {{0, 5.0f}, {2, -1.0f}, {99, 1.0f}});
  EXPECT_EQ(x, (std::vector<float>{6.0f, 2.0f, 2.0f}));
  suppress_tokens(x, std::vector<int32_t>{1, -3, 7});
  EXPECT_EQ(x[1], kNegInf);
  apply_temperature(x, 0.5f);
  EXPECT_FLOAT_EQ(x[0], 12.0f);
  EXPECT_EQ(x[1], kNegInf);
}

TEST(LogitsProcessors, MinPMatchesReference) {
  std::mt19937_64 rng(2);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> x = random_logits(rng, 2 + static_cast<int>(rng() % 60));
    const float min_p = static_cast<float>(rng() % 100) / 100.0f;
    const std::vector<double> p = softmax(x);
    const double pmax = *std::max_element(p.begin(), p.end());
    std::set<int> want;
    for (size_t i = 0; i < p.size(); ++i)
      if (p[i] >= min_p * pmax) want.insert(static_cast<int>(i));
    apply_min_p(x, min_p);
    ASSERT_EQ(kept(x), want) << "min_p " << min_p;
  }
}

TEST(LogitsProcessors, TopKMatchesReference) {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    const int vocab = 1 + static_cast<int>(rng() % 60);
    std::vector<float> x = random_logits(rng, vocab);
    const int k = static_cast<int>(rng() % (vocab + 3)) - 1;
    std::vector<int> order(static_cast<size_t>(vocab));
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return x[static_cast<size_t>(a)] > x[static_cast<size_t>(b)]; });
    std::set<int> want(order.begin(), order.begin() + (k <= 0 ? vocab : std::min(k, vocab)));
    apply_top_k(x, k);
    ASSERT_EQ(kept(x), want) << "k " << k;
  }
}

TEST(LogitsProcessors, TopKKeepsTies) {
  std::vector<float> x = {1.0f, 3.0f, 3.0f, 0.0f};
  apply_top_k(x, 1);
  EXPECT_EQ(kept(x), (std::set<int>{1, 2}));
}

TEST(LogitsProcessors, TopPMatchesReference) {
  std::mt19937_64 rng(4);
  for (int trial = 0; trial < 400; ++trial) {
    // Small rows, and large flat ones whose kept set outgrows the first sorted prefixes (64, 512).
    const bool large = trial % 2 == 1;
    const int vocab = large ? 100 + static_cast<int>(rng() % 3000) : 1 + static_cast<int>(rng() % 60);
    std::vector<float> x = random_logits(rng, vocab, large ? 0.05f + static_cast<float>(rng() % 100) / 50.0f : 4.0f);
    if (rng() % 3 == 0) apply_top_k(x, 1 + static_cast<int>(rng() % vocab));  // pre-masked rows too
    const float top_p = 0.01f + static_cast<float>(rng() % 100) / 100.0f;
    const std::vector<double> p = softmax(x);
    std::vector<int> order;
    for (int i = 0; i < vocab; ++i)
      if (x[static_cast<size_t>(i)] != kNegInf) order.push_back(i);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return p[static_cast<size_t>(a)] > p[static_cast<size_t>(b)]; });
    std::set<int> want;
    double cum = 0;
    for (int i : order) {
      want.insert(i);
      cum += p[static_cast<size_t>(i)];
      if (cum >= top_p) break;
    }
    apply_top_p(x, top_p);
    ASSERT_EQ(kept(x), want) << "top_p " << top_p;
  }
}

TEST(LogitsProcessors, ArgmaxAndDraw) {
  EXPECT_EQ(argmax(std::vector<float>{1.0f, 5.0f, 5.0f, 2.0f}), 1);  // lowest id among ties
  EXPECT_EQ(argmax(std::vector<float>{kNegInf, kNegInf}), -1);
  EXPECT_EQ(draw_from_logits(std::vector<float>{kNegInf}, 0.5), -1);
  // Probabilities 1/4, 0 (masked), 3/4: the CDF decides.
  const float l = std::log(3.0f);
  const std::vector<float> x = {0.0f, kNegInf, l};
  EXPECT_EQ(draw_from_logits(x, 0.0), 0);
  EXPECT_EQ(draw_from_logits(x, 0.2499), 0);
  EXPECT_EQ(draw_from_logits(x, 0.2501), 2);
  EXPECT_EQ(draw_from_logits(x, 0.9999999), 2);
}

}  // namespace
}  // namespace ember
