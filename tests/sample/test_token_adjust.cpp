// Sampler::token_adjustments (the lists a device sampler applies for min_tokens suppression,
// logit_bias and penalties) against the host Sampler itself: the list applied to a row gives
// Sampler::adjust_row's row bit for bit, and the pick from it (pick_adjusted) equals
// sample_row's for the same random stream, over random requests, histories and rows with
// NaN / -inf / +-0 / subnormal logits; lists are sorted, distinct and in the vocabulary,
// proportional to the distinct tokens of long histories, and the same on a thread pool.
#include "sample/logits_processors.h"
#include "sample/sampler.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <sstream>

namespace ember {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// One random request with its history and a row of logits.
struct Case {
  int vocab = 0;
  SamplingParams params;
  std::vector<int32_t> prompt, output;
  std::vector<float> logits;
  std::string what;
};

template <class T>
T pick(std::mt19937_64& rng, std::initializer_list<T> options) {
  return *(options.begin() + static_cast<long>(rng() % options.size()));
}

Case random_case(std::mt19937_64& rng, int index) {
  Case c;
  c.vocab = pick(rng, {7, 64, 1001, 5003});
  const int vocab = c.vocab;
  // Ids mostly from a small set (repeats), some anywhere, a few outside the vocabulary.
  auto token = [&]() -> int32_t {
    const uint64_t r = rng() % 100;
    if (r < 3) return pick(rng, {-1, -7, vocab, vocab + 3});
    if (r < 60) return static_cast<int32_t>(rng() % static_cast<uint64_t>(std::min(vocab, 23)));
    return static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
  };
  c.prompt.resize(rng() % 300);
  for (auto& t : c.prompt) t = token();
  c.output.resize(rng() % 300);
  for (auto& t : c.output) t = token();
  SamplingParams& p = c.params;
  p.temperature = pick(rng, {0.0f, 0.0f, 0.7f, 1.0f, 1.3f});
  p.top_k = pick(rng, {0, 0, 1, 5, 40});
  p.top_p = pick(rng, {1.0f, 1.0f, 0.9f, 0.5f});
  p.min_p = pick(rng, {0.0f, 0.0f, 0.05f});
  p.repetition_penalty = pick(rng, {1.0f, 1.0f, 1.3f, 0.7f, 2.0f});
  p.presence_penalty = pick(rng, {0.0f, 0.0f, 0.5f, -1.25f});
  p.frequency_penalty = pick(rng, {0.0f, 0.0f, 0.3f, -0.7f, 2.0f});
  const int n_bias = static_cast<int>(rng() % 6);
  for (int i = 0; i < n_bias; ++i)
    p.logit_bias[token()] = pick(rng, {-100.0f, 100.0f, 0.0f, 2.5f, -1e30f, kNegInf, -0.125f});
  p.min_tokens = pick(rng, {0, 0, static_cast<int>(c.output.size()), static_cast<int>(c.output.size()) + 1, 1000});
  p.ignore_eos = rng() % 3 == 0;
  const int n_stop = static_cast<int>(rng() % 4);
  for (int i = 0; i < n_stop; ++i) p.stop_token_ids.push_back(token());
  // Logits: normal values with NaN, -inf, +-0 and subnormals sprinkled in.
  std::normal_distribution<float> nd(0.0f, 3.0f);
  c.logits.resize(static_cast<size_t>(vocab));
  for (auto& v : c.logits) {
    const uint64_t r = rng() % 200;
    v = r == 0 ? NAN : r == 1 ? kNegInf : r == 2 ? -0.0f : r == 3 ? 0.0f : r == 4 ? -1e-40f : nd(rng);
  }
  std::ostringstream os;
  os << "case " << index << ": vocab " << vocab << " T " << p.temperature << " rep " << p.repetition_penalty
     << " presence " << p.presence_penalty << " frequency " << p.frequency_penalty << " bias " << p.logit_bias.size()
     << " min_tokens " << p.min_tokens << " (output " << c.output.size() << ") ignore_eos " << p.ignore_eos;
  c.what = os.str();
  return c;
}

const std::vector<int32_t> kEos = {0, 2};

SamplerRow row_of(const Case& c, std::mt19937_64* rng) { return {0, &c.params, c.prompt, c.output, rng}; }

std::vector<float> scrubbed(const std::vector<float>& raw) {
  std::vector<float> x = raw;
  for (float& v : x)
    if (std::isnan(v)) v = kNegInf;
  return x;
}

TEST(TokenAdjustments, ListEqualsSamplerEditsBitForBit) {
  Sampler sampler(kEos);
  std::mt19937_64 rng(2024);
  int non_empty = 0;
  for (int i = 0; i < 600; ++i) {
    const Case c = random_case(rng, i);
    const SamplerRow row = row_of(c, nullptr);
    const auto lists = sampler.token_adjustments(std::span<const SamplerRow>(&row, 1), c.vocab);
    ASSERT_EQ(lists.size(), 1u);
    const std::span<const TokenAdjust> list = lists[0];
    non_empty += !list.empty();
    for (size_t j = 0; j < list.size(); ++j) {
      ASSERT_TRUE(list[j].token >= 0 && list[j].token < c.vocab) << c.what << ": id " << list[j].token;
      ASSERT_TRUE(j == 0 || list[j - 1].token < list[j].token) << c.what << ": entry " << j << " not ascending";
      ASSERT_NE(list[j].flags, 0u) << c.what << ": entry for token " << list[j].token << " does nothing";
    }
    std::vector<float> want = scrubbed(c.logits), got = want;
    sampler.adjust_row(want, row);
    apply_token_adjustments(got, list, c.params.repetition_penalty);
    for (int t = 0; t < c.vocab; ++t) {
      const size_t k = static_cast<size_t>(t);
      ASSERT_EQ(std::memcmp(&got[k], &want[k], sizeof(float)), 0)
          << c.what << ": token " << t << " list gives " << got[k] << ", the Sampler " << want[k] << " (raw "
          << c.logits[k] << ")";
    }
  }
  EXPECT_GT(non_empty, 400);
}

TEST(TokenAdjustments, PicksEqualTheSampler) {
  Sampler sampler(kEos);
  std::mt19937_64 rng(77);
  for (int i = 0; i < 300; ++i) {
    const Case c = random_case(rng, i);
    std::mt19937_64 host_rng(1000 + i), dev_rng(1000 + i);
    const SamplerRow row = row_of(c, &host_rng);
    const auto lists = sampler.token_adjustments(std::span<const SamplerRow>(&row, 1), c.vocab);
    for (int draw = 0; draw < 20; ++draw) {
      const int32_t want = sampler.sample_row(c.logits, row).token_id;
      std::vector<float> x = scrubbed(c.logits);
      apply_token_adjustments(x, lists[0], c.params.repetition_penalty);
      const double u = c.params.is_greedy() ? 0.0 : uniform01(dev_rng);
      ASSERT_EQ(pick_adjusted(x, c.logits, c.params, u), want) << c.what << ", draw " << draw;
    }
  }
}

TEST(TokenAdjustments, ThreadedEqualsSerial) {
  std::mt19937_64 rng(5);
  std::vector<Case> cases;
  for (int i = 0; i < 67; ++i) cases.push_back(random_case(rng, i));
  const int vocab = 5003;  // one logits width for all rows; ids of smaller cases stay valid
  std::vector<SamplerRow> rows;
  for (const Case& c : cases) rows.push_back(row_of(c, nullptr));
  Sampler serial(kEos), threaded(kEos, 4);
  const auto a = serial.token_adjustments(rows, vocab);
  const auto b = threaded.token_adjustments(rows, vocab);
  ASSERT_EQ(a.size(), rows.size());
  ASSERT_EQ(b.size(), rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    ASSERT_EQ(a[i].size(), b[i].size()) << "row " << i;
    EXPECT_EQ(std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(TokenAdjust)), 0) << "row " << i;
  }
}

// Requests without bias, penalties or pending min_tokens have nothing to adjust; all but more
// than kDeviceMaxTopLogprobs top logprob alternatives are device-sampleable.
TEST(TokenAdjustments, PlainRequestsHaveEmptyLists) {
  Sampler sampler(kEos);
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_p = 0.9f;
  p.min_tokens = 2;
  const std::vector<int32_t> prompt = {1, 2, 3}, output = {4, 4};
  const SamplerRow row{0, &p, prompt, output, nullptr};
  EXPECT_TRUE(sampler.token_adjustments(std::span<const SamplerRow>(&row, 1), 10)[0].empty());
  EXPECT_TRUE(is_device_sampleable(p));
  p.logprobs = 0;
  p.repetition_penalty = 1.1f;
  p.logit_bias = {{3, 1.0f}};
  EXPECT_TRUE(is_device_sampleable(p));
  p.logprobs = 1;
  EXPECT_TRUE(is_device_sampleable(p));
  p.logprobs = kDeviceMaxTopLogprobs;
  EXPECT_TRUE(is_device_sampleable(p));
  p.logprobs = kDeviceMaxTopLogprobs + 1;  // validate() refuses it (kMaxLogprobs); the host would take it
  EXPECT_FALSE(is_device_sampleable(p));
  static_assert(kDeviceMaxTopLogprobs >= kMaxLogprobs, "every valid request samples on the device");
}

// A prompt and an output of 1000 tokens each: one entry per distinct id (the upload a device
// step makes), built in microseconds per row (printed, not checked).
TEST(TokenAdjustments, LongHistoryListIsTheDistinctTokens) {
  const int vocab = 128256, n_rows = 256;
  std::mt19937_64 rng(9);
  std::vector<std::vector<int32_t>> prompts(n_rows), outputs(n_rows);
  SamplingParams p;
  p.temperature = 0.8f;
  p.repetition_penalty = 1.1f;
  p.frequency_penalty = 0.2f;
  std::vector<SamplerRow> rows;
  for (int r = 0; r < n_rows; ++r) {
    auto token = [&] {  // text-like: a few hundred frequent ids and a long tail
      return static_cast<int32_t>(rng() % 4 ? rng() % 400 : rng() % static_cast<uint64_t>(vocab));
    };
    for (int i = 0; i < 1000; ++i) prompts[static_cast<size_t>(r)].push_back(token());
    for (int i = 0; i < 1000; ++i) outputs[static_cast<size_t>(r)].push_back(token());
    rows.push_back({r, &p, prompts[static_cast<size_t>(r)], outputs[static_cast<size_t>(r)], nullptr});
  }
  Sampler sampler({});
  sampler.token_adjustments(rows, vocab);  // warm-up (storage)
  const auto t0 = std::chrono::steady_clock::now();
  const auto lists = sampler.token_adjustments(rows, vocab);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  size_t total = 0;
  for (int r = 0; r < n_rows; ++r) {
    std::set<int32_t> distinct(prompts[static_cast<size_t>(r)].begin(), prompts[static_cast<size_t>(r)].end());
    distinct.insert(outputs[static_cast<size_t>(r)].begin(), outputs[static_cast<size_t>(r)].end());
    ASSERT_EQ(lists[static_cast<size_t>(r)].size(), distinct.size()) << "row " << r;
    total += distinct.size();
  }
  std::printf("token_adjustments: %d rows of 1000 + 1000 tokens, %zu entries (%.0f per row, %zu KiB to upload), "
              "%.2f ms on one thread\n",
              n_rows, total, static_cast<double>(total) / n_rows, total * sizeof(TokenAdjust) / 1024, ms);
}

}  // namespace
}  // namespace ember
