#include "sample/sampler.h"

#include "sample/logits_processors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <set>

namespace ember {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::vector<double> softmax(const std::vector<float>& x) {
  double m = -1e300;
  for (float v : x) m = std::max(m, static_cast<double>(v));
  std::vector<double> p(x.size());
  double sum = 0;
  for (size_t i = 0; i < x.size(); ++i) sum += p[i] = x[i] == kNegInf ? 0.0 : std::exp(x[i] - m);
  for (auto& v : p) v /= sum;
  return p;
}

// Pearson chi-square of observed counts against expected probabilities (cells with p == 0 must
// never be observed).
double chi_square(const std::vector<int>& counts, const std::vector<double>& p, int n) {
  double chi = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " outside the support was drawn";
      continue;
    }
    const double e = p[i] * n;
    chi += (counts[i] - e) * (counts[i] - e) / e;
  }
  return chi;
}

std::vector<int> draw_counts(Sampler& s, const std::vector<float>& logits, const SamplingParams& p,
                             int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int> counts(logits.size(), 0);
  SamplerRow row{0, &p, {}, {}, &rng};
  for (int i = 0; i < n; ++i) ++counts[static_cast<size_t>(s.sample_row(logits, row).token_id)];
  return counts;
}

const std::vector<float> kLogits = {1.0f, 2.0f, 0.5f, -1.0f, 3.0f, 0.0f, 2.5f, -2.0f};

// Critical values: chi-square with df <= 7 exceeds 24.3 with probability 0.001. Seeds are
// fixed, so the tests are deterministic; the bound only says the sampler is right.
TEST(Sampler, TemperatureDistribution) {
  Sampler s({});
  for (float t : {0.5f, 1.0f, 1.7f}) {
    SamplingParams p;
    p.temperature = t;
    std::vector<float> scaled = kLogits;
    for (auto& x : scaled) x /= t;
    const int n = 40000;
    const auto counts = draw_counts(s, kLogits, p, n, 17);
    EXPECT_LT(chi_square(counts, softmax(scaled), n), 24.3) << "temperature " << t;
  }
}

TEST(Sampler, TruncatedDistributions) {
  Sampler s({});
  struct Case {
    int top_k;
    float top_p;
    float min_p;
  };
  for (Case c : {Case{3, 1.0f, 0.0f}, Case{0, 0.8f, 0.0f}, Case{0, 1.0f, 0.2f}, Case{5, 0.9f, 0.05f}}) {
    SamplingParams p;
    p.temperature = 0.8f;
    p.top_k = c.top_k;
    p.top_p = c.top_p;
    p.min_p = c.min_p;
    // Reference: scale, then mask by the reference definitions, renormalize.
    std::vector<float> x = kLogits;
    for (auto& v : x) v /= p.temperature;
    apply_min_p(x, p.min_p);
    apply_top_k(x, p.top_k);
    apply_top_p(x, p.top_p);
    const int n = 30000;
    const auto counts = draw_counts(s, kLogits, p, n, 99);
    EXPECT_LT(chi_square(counts, softmax(x), n), 24.3)
        << "top_k " << c.top_k << " top_p " << c.top_p << " min_p " << c.min_p;
  }
}

// A chi-square test that must reject: the wrong temperature gives a far larger statistic,
// so the bound above has power.
TEST(Sampler, ChiSquareDetectsAWrongDistribution) {
  Sampler s({});
  SamplingParams p;
  p.temperature = 1.0f;
  std::vector<float> wrong = kLogits;
  for (auto& x : wrong) x /= 1.2f;
  const int n = 40000;
  EXPECT_GT(chi_square(draw_counts(s, kLogits, p, n, 17), softmax(wrong), n), 100.0);
}

TEST(Sampler, GreedyIsArgmaxAfterPenaltiesAndBias) {
  Sampler s({});
  SamplingParams p;
  p.temperature = 0.0f;
  SamplerRow row{0, &p, {}, {}, nullptr};  // greedy needs no random stream
  EXPECT_EQ(s.sample_row(kLogits, row).token_id, 4);
  p.logit_bias = {{7, 10.0f}};
  EXPECT_EQ(s.sample_row(kLogits, row).token_id, 7);
  p.logit_bias.clear();
  p.repetition_penalty = 2.0f;
  const std::vector<int32_t> prompt = {4};
  row.prompt_token_ids = prompt;
  EXPECT_EQ(s.sample_row(kLogits, row).token_id, 6);  // 3 / 2 < 2.5
  p.repetition_penalty = 1.0f;
  p.frequency_penalty = 0.4f;
  const std::vector<int32_t> out = {4, 4};
  row.output_token_ids = out;
  EXPECT_EQ(s.sample_row(kLogits, row).token_id, 6);  // 3 - 0.8 < 2.5
}

TEST(Sampler, MinTokensSuppressesStopAndEos) {
  Sampler s({4});  // token 4 (the argmax) is EOS
  SamplingParams p;
  p.temperature = 0.0f;
  p.min_tokens = 2;
  p.stop_token_ids = {6};
  const std::vector<int32_t> one = {1};
  SamplerRow row{0, &p, {}, one, nullptr};
  EXPECT_EQ(s.sample_row(kLogits, row).token_id, 1);  // 4 and 6 suppressed
  const std::vector<int32_t> two = {1, 1};
  row.output_token_ids = two;
  EXPECT_EQ(s.sample_row(kLogits, row).token_id, 4);
  // ignore_eos: EOS is an ordinary token, only the stop ids are suppressed.
  p.ignore_eos = true;
  row.output_token_ids = one;
  EXPECT_EQ(s.sample_row(kLogits, row).token_id, 4);
}

TEST(Sampler, SeedsReproduceAndRowsAreIndependent) {
  Sampler s({});
  SamplingParams p;
  p.temperature = 1.0f;
  std::vector<float> two_rows = kLogits;
  two_rows.insert(two_rows.end(), kLogits.rbegin(), kLogits.rend());
  auto run = [&](bool with_neighbour) {
    std::mt19937_64 a(7), b(8);
    std::vector<int32_t> tokens;
    for (int i = 0; i < 50; ++i) {
      std::vector<SamplerRow> rows;
      if (with_neighbour) rows.push_back({1, &p, {}, {}, &b});
      rows.push_back({0, &p, {}, {}, &a});
      tokens.push_back(s.sample(two_rows, 8, rows).back().token_id);
    }
    return tokens;
  };
  EXPECT_EQ(run(false), run(true));
}

TEST(Sampler, LogprobsDescribeTheRawDistribution) {
  Sampler s({});
  SamplingParams p;
  p.temperature = 0.5f;
  p.top_k = 2;
  p.logprobs = 3;
  std::mt19937_64 rng(1);
  SamplerRow row{0, &p, {}, {}, &rng};
  const SampledToken t = s.sample_row(kLogits, row);
  ASSERT_TRUE(t.logprobs.has_value());
  const auto probs = softmax(kLogits);
  EXPECT_NEAR(t.logprobs->logprob, std::log(probs[static_cast<size_t>(t.token_id)]), 1e-5);
  EXPECT_EQ(t.logprobs->rank, t.token_id == 4 ? 1 : 2);
  ASSERT_EQ(t.logprobs->top.size(), 3u);
  EXPECT_EQ(t.logprobs->top[0].token_id, 4);
  EXPECT_EQ(t.logprobs->top[1].token_id, 6);
  EXPECT_EQ(t.logprobs->top[2].token_id, 1);
  EXPECT_NEAR(t.logprobs->top[1].logprob, std::log(probs[6]), 1e-5);
  p.logprobs = 0;
  const SampledToken u = s.sample_row(kLogits, row);
  ASSERT_TRUE(u.logprobs.has_value());
  EXPECT_TRUE(u.logprobs->top.empty());
  p.logprobs.reset();
  EXPECT_FALSE(s.sample_row(kLogits, row).logprobs.has_value());
}

TEST(Sampler, NanIsNeverChosenAndAllMaskedFallsBack) {
  Sampler s({0, 1, 2});
  SamplingParams p;
  p.temperature = 1.0f;
  std::mt19937_64 rng(3);
  const std::vector<float> x = {std::nanf(""), 1.0f, std::nanf(""), 0.5f};
  SamplerRow row{0, &p, {}, {}, &rng};
  for (int i = 0; i < 100; ++i) {
    const int32_t t = s.sample_row(x, row).token_id;
    EXPECT_TRUE(t == 1 || t == 3);
  }
  // min_tokens over a vocabulary made only of stop tokens: everything is masked.
  p.min_tokens = 5;
  p.stop_token_ids = {3};
  const std::vector<float> y = {0.0f, 3.0f, 1.0f, 2.0f};
  EXPECT_EQ(s.sample_row(y, row).token_id, 1);
}

// A batch sampled on a pool of threads gives every row exactly what the serial sampler gives:
// each row draws from its own rng, so the split cannot matter.
TEST(Sampler, ThreadedBatchEqualsSerial) {
  constexpr int kVocab = 3001, kRows = 67;
  std::mt19937 gen(7);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> logits(static_cast<size_t>(kVocab) * kRows);
  for (auto& v : logits) v = nd(gen);
  std::vector<SamplingParams> params(kRows);
  const std::vector<int32_t> prompt = {5, 17, 17, 2999}, output = {17, 42};
  for (int i = 0; i < kRows; ++i) {
    SamplingParams& p = params[static_cast<size_t>(i)];
    switch (i % 5) {
      case 0: p.temperature = 0.0f; break;
      case 1: p.temperature = 0.8f; p.top_p = 0.9f; break;
      case 2: p.temperature = 1.3f; p.top_k = 40; break;
      case 3: p.temperature = 1.0f; p.min_p = 0.05f; p.repetition_penalty = 1.3f; break;
      default: p.temperature = 0.7f; p.presence_penalty = 0.5f; p.frequency_penalty = 0.25f; break;
    }
  }
  auto run = [&](int threads) {
    Sampler s({2}, threads);
    std::vector<std::mt19937_64> rngs;
    for (int i = 0; i < kRows; ++i) rngs.emplace_back(1000 + i);
    std::vector<SamplerRow> rows;
    for (int i = 0; i < kRows; ++i)
      rows.push_back({(i * 7) % kRows, &params[static_cast<size_t>(i)], prompt, output, &rngs[static_cast<size_t>(i)]});
    std::vector<int32_t> tokens;
    for (int step = 0; step < 3; ++step)
      for (const auto& t : s.sample(logits, kVocab, rows)) tokens.push_back(t.token_id);
    return tokens;
  };
  const auto serial = run(1);
  EXPECT_EQ(run(4), serial);
  EXPECT_EQ(run(3), serial);
  // Not a constant: the seeded rows drew different tokens over the steps.
  std::set<int32_t> distinct(serial.begin(), serial.end());
  EXPECT_GT(distinct.size(), 50u);
}

TEST(SamplingParams, ValidateNamesTheBadField) {
  auto msg = [](auto edit) {
    SamplingParams p;
    edit(p);
    return p.validate(100).message();
  };
  EXPECT_TRUE(SamplingParams{}.validate(100).is_ok());
  EXPECT_NE(msg([](SamplingParams& p) { p.temperature = -1; }).find("temperature"), std::string::npos);
  EXPECT_NE(msg([](SamplingParams& p) { p.top_p = 0; }).find("top_p"), std::string::npos);
  EXPECT_NE(msg([](SamplingParams& p) { p.top_k = -5; }).find("top_k"), std::string::npos);
  EXPECT_NE(msg([](SamplingParams& p) { p.min_p = 2; }).find("min_p"), std::string::npos);
  EXPECT_NE(msg([](SamplingParams& p) { p.repetition_penalty = 0; }).find("repetition_penalty"), std::string::npos);
  EXPECT_NE(msg([](SamplingParams& p) { p.presence_penalty = 3; }).find("presence_penalty"), std::string::npos);
  EXPECT_NE(msg([](SamplingParams& p) { p.frequency_penalty = -3; }).find("frequency_penalty"), std::string::npos);
  EXPECT_NE(msg([](SamplingParams& p) { p.logit_bias[5] = 101; }).find("logit_bias"), std::string::npos);
  EXPECT_NE(msg([](SamplingParams& p) { p.logit_bias[100] = 1; }).find("logit_bias"), std::string::npos);
  EXPECT_NE(msg([](SamplingParams& p) { p.stop_token_ids = {-1}; }).find("stop_token_ids"), std::string::npos);
  EXPECT_NE(msg([](SamplingParams& p) { p.max_tokens = 0; }).find("max_tokens"), std::string::npos);
  EXPECT_NE(msg([](SamplingParams& p) { p.min_tokens = 20; }).find("min_tokens"), std::string::npos);
  EXPECT_NE(msg([](SamplingParams& p) { p.n = 0; }).find("n must"), std::string::npos);
  EXPECT_NE(msg([](SamplingParams& p) { p.logprobs = 21; }).find("logprobs"), std::string::npos);
  EXPECT_NE(msg([](SamplingParams& p) { p.temperature = std::nanf(""); }).find("temperature"), std::string::npos);
}

}  // namespace
}  // namespace ember
