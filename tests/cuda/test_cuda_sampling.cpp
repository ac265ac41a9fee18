// Sampling on the GPU (CudaStep::sample_rows, sample.cu) against the host Sampler's definition
// (sample/logits_processors.cpp): for the same uniform draw u the device must pick the token
// the host's inverse-CDF walk picks over the same kept set (temperature, min_p, top_k, top_p
// with ties cut by id), and over many u the device frequencies must match the host
// probabilities (chi-square). Edge cases: top_k = 1 with tied maxima, tiny top_p, NaN / -inf
// logits, rows with nothing finite, greedy rows in the same launch, vocabularies of 7 to
// 262,144 columns; logprobs and ranks vs compute_logprobs; the same launch twice gives the
// same tokens. Rows with token adjustments (logit_bias, repetition / presence / frequency
// penalties, min_tokens suppression; Sampler::token_adjustments builds the lists) against the
// host Sampler's own adjust_row: 0 picks may differ for the same u, greedy rows included. Top
// logprob alternatives (n 1, 5, 20; ties, NaN, -inf, vocab 7, adjusted rows) against
// compute_logprobs' top list: ids exactly, in order.
#include "backend/cuda/cuda_backend.h"
#include "cuda_test_util.h"
#include "sample/logits_processors.h"
#include "sample/sampler.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <limits>
#include <numeric>
#include <span>
#include <sstream>

namespace ember::cuda_test {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Params {
  float temperature = 1.0f;
  int top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
};

cuda::DeviceSampleRow device_row(int logits_row, const Params& p, double u) {
  cuda::DeviceSampleRow d;
  d.logits_row = logits_row;
  d.greedy = p.temperature == 0.0f;
  d.inv_temperature = (p.temperature == 1.0f || p.temperature <= 0.0f) ? 1.0f : 1.0f / p.temperature;
  d.top_k = p.top_k;
  d.top_p = p.top_p;
  d.log_min_p = p.min_p > 0.0f ? std::log(p.min_p) : kNegInf;
  d.u = u;
  return d;
}

// The host's kept distribution of one row: processed logits and the cumulative mass in id
// order (what draw_from_logits walks). adjusted: the row after Sampler::adjust_row (bias,
// penalties, min_tokens), when the row has adjustments.
struct HostDist {
  std::vector<float> x;
  std::vector<double> cum;  // cum[i] = mass of kept tokens <= i
  double total = 0.0;
  int fallback = 0;  // the host's token when nothing is kept
  int greedy = 0;    // the host's greedy pick

  HostDist(const std::vector<float>& raw, const Params& p, const std::vector<float>* adjusted = nullptr)
      : x(adjusted ? *adjusted : raw) {
    for (float& v : x)
      if (std::isnan(v)) v = kNegInf;
    fallback = std::max<int32_t>(0, argmax(raw));
    greedy = argmax(x) < 0 ? fallback : argmax(x);
    apply_temperature(x, p.temperature);
    apply_min_p(x, p.min_p);
    apply_top_k(x, p.top_k);
    apply_top_p(x, p.top_p);
    float m = kNegInf;
    for (float v : x) m = std::max(m, v);
    cum.resize(x.size());
    double c = 0.0;
    for (size_t i = 0; i < x.size(); ++i) {
      if (m > kNegInf && x[i] > kNegInf) c += std::exp(static_cast<double>(x[i]) - m);
      cum[i] = c;
    }
    total = c;
  }
  // draw_from_logits(x, u) by binary search over the same cumulative sums.
  int token(double u) const {
    if (total == 0.0) return fallback;
    const double target = u * total;
    const auto it = std::upper_bound(cum.begin(), cum.end(), target);
    if (it == cum.end()) {  // the host returns its last kept token
      for (size_t i = x.size(); i-- > 0;)
        if (x[i] > kNegInf) return static_cast<int>(i);
    }
    return static_cast<int>(it - cum.begin());
  }
  double prob(size_t i) const { return total > 0 ? (cum[i] - (i ? cum[i - 1] : 0.0)) / total : 0.0; }
};

// top: the launch's top-alternative slots ([rows, kSampleMaxTop], or empty), when wanted.
std::vector<cuda::DeviceSampleOut> run_rows(const DevTensor& logits, const std::vector<cuda::DeviceSampleRow>& rows,
                                            const std::vector<cuda::DeviceSampleAdj>& adj = {},
                                            std::vector<cuda::DeviceSampleTop>* top = nullptr) {
  std::vector<cuda::DeviceSampleOut> out;
  std::vector<cuda::DeviceSampleTop> top_slots;
  CudaStep* cs = cuda_step(*backend());
  EXPECT_NE(cs, nullptr);
  const Status st = cs->sample_rows(logits.t, rows, adj, out, top ? *top : top_slots);
  EXPECT_TRUE(st.is_ok()) << st.message();
  return out;
}

// A row's adjustments, host and device views: the Sampler's adjusted row and its list.
struct Adjusted {
  std::vector<float> x;  // Sampler::adjust_row of the NaN-scrubbed row
  std::vector<cuda::DeviceSampleAdj> list;
  float repetition = 1.0f;
};

Adjusted adjusted_row(const std::vector<float>& raw, const SamplingParams& sp, std::span<const int32_t> prompt,
                      std::span<const int32_t> output, const std::vector<int32_t>& eos) {
  Sampler sampler(eos);
  const SamplerRow row{0, &sp, prompt, output, nullptr};
  Adjusted a;
  a.x = raw;
  for (float& v : a.x)
    if (std::isnan(v)) v = kNegInf;
  sampler.adjust_row(a.x, row);
  const auto lists = sampler.token_adjustments(std::span<const SamplerRow>(&row, 1), static_cast<int>(raw.size()));
  for (const TokenAdjust& t : lists[0]) a.list.push_back({t.token, t.flags, t.bias, t.subtract});
  a.repetition = sp.repetition_penalty;
  return a;
}

// Points a row at adjustments [0, n) of the launch's list.
cuda::DeviceSampleRow with_adjustments(cuda::DeviceSampleRow d, const Adjusted* adj) {
  if (adj) {
    d.n_adj = static_cast<int32_t>(adj->list.size());
    d.repetition = adj->repetition;
  }
  return d;
}

// Logits with ties: values on a grid of 1/8 (many equal values around any cut), a few large.
std::vector<float> tie_logits(int vocab, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(vocab));
  for (auto& x : v) x = std::round(nd(rng) * 8.0f) / 8.0f;
  std::uniform_int_distribution<int> pick(0, vocab - 1);
  for (int i = 0; i < std::min(vocab / 4 + 1, 12); ++i) v[static_cast<size_t>(pick(rng))] = 3.0f * scale + static_cast<float>(i % 4);
  return v;
}

// Samples the row n times with fresh u: checks every token against the host's pick for the
// same u, the support, and the chi-square of the frequencies against the host probabilities.
// Returns the number of picks that differ from the host's (greedy rows: from its argmax).
int check_distribution(const std::vector<float>& raw, const Params& p, int n, uint32_t seed, const std::string& what,
                       const Adjusted* adj = nullptr) {
  const int vocab = static_cast<int>(raw.size());
  DevTensor dl = dev_floats(raw, {1, vocab});
  HostDist host(raw, p, adj ? &adj->x : nullptr);
  std::mt19937_64 rng(seed);
  std::vector<cuda::DeviceSampleRow> rows(static_cast<size_t>(n));
  for (auto& r : rows) r = with_adjustments(device_row(0, p, uniform01(rng)), adj);
  const auto out = run_rows(dl, rows, adj ? adj->list : std::vector<cuda::DeviceSampleAdj>{});
  EXPECT_EQ(out.size(), rows.size()) << what;
  if (out.size() != rows.size()) return n;
  int mismatch = 0, outside = 0;
  std::vector<int> count(static_cast<size_t>(vocab), 0);
  for (int i = 0; i < n; ++i) {
    const int t = out[static_cast<size_t>(i)].token;
    EXPECT_TRUE(t >= 0 && t < vocab) << what << ": token " << t;
    if (t < 0 || t >= vocab) return n;
    if (p.temperature == 0.0f || host.total == 0.0) {  // one possible token
      mismatch += t != (p.temperature == 0.0f ? host.greedy : host.fallback);
      continue;
    }
    mismatch += t != host.token(rows[static_cast<size_t>(i)].u);
    outside += host.prob(static_cast<size_t>(t)) == 0.0;
    ++count[static_cast<size_t>(t)];
  }
  if (p.temperature == 0.0f || host.total == 0.0) {
    EXPECT_EQ(mismatch, 0) << what << ": picks differing from the host's only token ("
                           << (p.temperature == 0.0f ? host.greedy : host.fallback) << ")";
    std::printf("%s: vocab %d, one possible token, %d/%d picks differ from the host's\n", what.c_str(), vocab,
                mismatch, n);
    return mismatch;
  }
  EXPECT_EQ(outside, 0) << what << ": tokens outside the host's kept set";
  EXPECT_LE(mismatch, n / 1000) << what << ": picks differing from the host's for the same u";
  // Chi-square over tokens expected >= 5 times, the rest pooled.
  double chi2 = 0.0, pooled_e = 0.0, pooled_o = 0.0, tv = 0.0;
  int bins = 0;
  for (int i = 0; i < vocab; ++i) {
    const double e = host.prob(static_cast<size_t>(i)) * n, o = count[static_cast<size_t>(i)];
    tv += std::fabs(e - o) / n;
    if (e >= 5.0) {
      chi2 += (o - e) * (o - e) / e;
      ++bins;
    } else {
      pooled_e += e;
      pooled_o += o;
    }
  }
  if (pooled_e >= 5.0) {
    chi2 += (pooled_o - pooled_e) * (pooled_o - pooled_e) / pooled_e;
    ++bins;
  }
  const double df = std::max(1, bins - 1);
  EXPECT_LT(chi2, df + 8.0 * std::sqrt(2.0 * df) + 20.0) << what << ": chi2 " << chi2 << " df " << df;
  std::printf("%s: vocab %d, %d kept-mass bins, chi2 %.1f (df %.0f), TV %.4f, %d/%d picks differ from the host's\n",
              what.c_str(), vocab, bins, chi2, df, tv / 2.0, mismatch, n);
  return mismatch;
}

TEST(CudaSampling, MatchesHostDistribution) {
  SKIP_WITHOUT_GPU();
  struct Case {
    int vocab;
    float scale;
    Params p;
    const char* name;
  };
  const Case cases[] = {
      {1001, 2.0f, {0.8f, 0, 0.9f, 0.0f}, "t0.8 top_p0.9"},
      {128256, 2.5f, {0.8f, 0, 0.95f, 0.0f}, "t0.8 top_p0.95 (Llama-3 vocab)"},
      {262144, 2.0f, {1.0f, 0, 0.5f, 0.0f}, "top_p0.5 (262144)"},
      {5003, 1.5f, {1.3f, 40, 1.0f, 0.0f}, "t1.3 top_k40"},
      {5003, 1.5f, {0.7f, 0, 1.0f, 0.05f}, "t0.7 min_p0.05"},
      {32771, 2.0f, {0.9f, 50, 0.8f, 0.02f}, "t0.9 top_k50 top_p0.8 min_p0.02"},
      {7, 1.0f, {1.0f, 3, 0.7f, 0.0f}, "vocab 7 top_k3 top_p0.7"},
      {4099, 1.0f, {1.0f, 0, 1.0f, 0.0f}, "plain softmax"},
  };
  uint32_t seed = 100;
  for (const Case& c : cases) check_distribution(tie_logits(c.vocab, seed, c.scale), c.p, 20000, seed + 1, c.name), seed += 7;
}

// The replica HostDist used above against the real Sampler (same rng stream: the same u).
TEST(CudaSampling, HostReplicaIsTheSampler) {
  const std::vector<float> raw = tie_logits(3001, 5, 2.0f);
  Sampler sampler({});
  for (const Params& p : {Params{0.8f, 0, 0.9f, 0.0f}, Params{1.0f, 20, 0.95f, 0.01f}, Params{0.5f, 1, 1.0f, 0.0f}}) {
    HostDist host(raw, p);
    SamplingParams sp;
    sp.temperature = p.temperature;
    sp.top_k = p.top_k;
    sp.top_p = p.top_p;
    sp.min_p = p.min_p;
    std::mt19937_64 rng(77), twin(77);
    for (int i = 0; i < 200; ++i) {
      const double u = uniform01(twin);
      const SampledToken t = sampler.sample_row(raw, SamplerRow{0, &sp, {}, {}, &rng});
      ASSERT_EQ(t.token_id, host.token(u)) << "draw " << i;
    }
  }
}

TEST(CudaSampling, EdgeCases) {
  SKIP_WITHOUT_GPU();
  const int vocab = 999;
  std::vector<float> raw = tie_logits(vocab, 9, 2.0f);
  float mx = *std::max_element(raw.begin(), raw.end());
  // Two tied maxima (top_k = 1 keeps both: ties with the k-th are kept), NaN and -inf entries.
  raw[17] = mx + 1.0f;
  raw[600] = mx + 1.0f;
  raw[3] = NAN;
  raw[18] = NAN;
  raw[601] = kNegInf;
  raw[599] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> all_bad(vocab, kNegInf);
  all_bad[5] = NAN;
  std::vector<float> both = raw;
  both.insert(both.end(), all_bad.begin(), all_bad.end());
  DevTensor dl = dev_floats(both, {2, vocab});
  const Params cases[] = {{1.0f, 1, 1.0f, 0.0f}, {1.0f, 0, 1e-6f, 0.0f}, {0.6f, 0, 0.97f, 0.0f},
                          {2.0f, 0, 1.0f, 0.5f}, {0.0f, 0, 1.0f, 0.0f}};
  std::mt19937_64 rng(3);
  for (const Params& p : cases) {
    HostDist host(raw, p);
    std::vector<cuda::DeviceSampleRow> rows;
    for (int i = 0; i < 4000; ++i) rows.push_back(device_row(0, p, uniform01(rng)));
    for (int i = 0; i < 8; ++i) rows.push_back(device_row(1, p, uniform01(rng)));  // nothing finite
    const auto out = run_rows(dl, rows);
    ASSERT_EQ(out.size(), rows.size());
    int mismatch = 0;
    std::vector<int> seen(vocab, 0);
    for (int i = 0; i < 4000; ++i) {
      const int t = out[static_cast<size_t>(i)].token;
      ++seen[static_cast<size_t>(t)];
      EXPECT_TRUE(std::isfinite(raw[static_cast<size_t>(t)])) << "picked a NaN / -inf logit: " << t;
      mismatch += p.temperature == 0.0f ? t != 17 : t != host.token(rows[static_cast<size_t>(i)].u);
    }
    for (int i = 4000; i < 4008; ++i) EXPECT_EQ(out[static_cast<size_t>(i)].token, 0) << "row without a finite logit";
    EXPECT_LE(mismatch, 4) << "T " << p.temperature << " top_k " << p.top_k << " top_p " << p.top_p;
    if (p.top_k == 1) {  // both maxima, about half each
      EXPECT_GT(seen[17], 1700);
      EXPECT_GT(seen[600], 1700);
      EXPECT_EQ(seen[17] + seen[600], 4000);
    }
    if (p.top_p < 1e-3f) {
      EXPECT_EQ(seen[17], 4000) << "tiny top_p keeps the first of the tied maxima";
    }
  }
}

TEST(CudaSampling, LogprobsRankAndDeterminism) {
  SKIP_WITHOUT_GPU();
  const int vocab = 128256, n_rows = 6;
  std::vector<float> raw;
  for (int r = 0; r < n_rows; ++r) {
    auto row = tie_logits(vocab, 40 + r, 2.0f + r);
    row[static_cast<size_t>(r * 7)] = NAN;
    raw.insert(raw.end(), row.begin(), row.end());
  }
  DevTensor dl = dev_floats(raw, {n_rows, vocab});
  std::mt19937_64 rng(8);
  std::vector<cuda::DeviceSampleRow> rows;
  for (int i = 0; i < 64; ++i) {
    Params p{i % 5 == 0 ? 0.0f : 0.8f, i % 3 == 0 ? 20 : 0, i % 2 ? 0.9f : 1.0f, i % 4 == 1 ? 0.05f : 0.0f};
    rows.push_back(device_row(i % n_rows, p, uniform01(rng)));
    rows.back().want_logprob = 1;
  }
  const auto a = run_rows(dl, rows), b = run_rows(dl, rows);
  ASSERT_EQ(a.size(), rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(a[i].token, b[i].token) << "row " << i << ": same u, different token";
    EXPECT_EQ(a[i].logprob, b[i].logprob) << "row " << i;
    const std::span<const float> row(raw.data() + static_cast<size_t>(rows[i].logits_row) * vocab, vocab);
    const SampleLogprobs want = compute_logprobs(row, a[i].token, 0);
    EXPECT_NEAR(a[i].logprob, want.logprob, 1e-4) << "row " << i;
    EXPECT_EQ(a[i].rank, want.rank) << "row " << i;
  }
}

// ---- Rows with token adjustments (bias, penalties, min_tokens).

// Ids of the n largest values of raw (ties by id), and of n values below -1.
std::vector<int32_t> top_ids(const std::vector<float>& raw, size_t n) {
  std::vector<int32_t> ids(raw.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + static_cast<long>(n), ids.end(), [&](int32_t a, int32_t b) {
    const float va = raw[static_cast<size_t>(a)], vb = raw[static_cast<size_t>(b)];
    return va != vb ? va > vb : a < b;
  });
  ids.resize(n);
  return ids;
}
std::vector<int32_t> negative_ids(const std::vector<float>& raw, size_t n) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < raw.size() && ids.size() < n; i += 7)
    if (raw[i] < -1.0f) ids.push_back(static_cast<int32_t>(i));
  return ids;
}

// One request over a row: its sampling knobs and what setup() adds (bias, penalties,
// min_tokens, history; eos: the EOS ids the Sampler is built with).
struct AdjCase {
  const char* name;
  int vocab;
  Params p;
  std::function<void(const std::vector<float>& raw, SamplingParams& sp, std::vector<int32_t>& prompt,
                     std::vector<int32_t>& output, std::vector<int32_t>& eos)>
      setup;
};

std::vector<AdjCase> adjustment_cases() {
  // History over the top tokens (positive logits) and some negative ones: counts 1..4.
  auto history = [](const std::vector<float>& raw, std::vector<int32_t>& prompt, std::vector<int32_t>& output) {
    const auto top = top_ids(raw, 12), neg = negative_ids(raw, 10);
    for (size_t i = 0; i < top.size(); ++i) {
      std::vector<int32_t>& h = i % 2 ? prompt : output;
      h.insert(h.end(), 1 + i % 4, top[i]);
    }
    const auto half = neg.begin() + static_cast<long>(neg.size() / 2);
    prompt.insert(prompt.end(), neg.begin(), half);
    output.insert(output.end(), half, neg.end());
  };
  // Penalties over that history, then extra(raw, sp) (e.g. a bias).
  auto penalties = [history](float repetition, float presence, float frequency,
                             std::function<void(const std::vector<float>&, SamplingParams&)> extra = {}) {
    return [=](const std::vector<float>& raw, SamplingParams& sp, std::vector<int32_t>& prompt,
               std::vector<int32_t>& output, std::vector<int32_t>&) {
      sp.repetition_penalty = repetition;
      sp.presence_penalty = presence;
      sp.frequency_penalty = frequency;
      if (extra) extra(raw, sp);
      history(raw, prompt, output);
    };
  };
  return {
      {"bias: -100 on the top 3, +4 mid, -1e30 / -inf, ids outside the vocabulary", 128256, {0.8f, 0, 0.95f, 0.0f},
       [](const std::vector<float>& raw, SamplingParams& sp, auto&, auto&, auto&) {
         const auto top = top_ids(raw, 5);
         const int v = static_cast<int>(raw.size());
         sp.logit_bias = {{top[0], -100.0f}, {top[1], -100.0f}, {top[2], -100.0f}, {top[3], -1e30f}, {top[4], kNegInf},
                          {v / 2 + 1, 4.0f}, {v, 50.0f}, {-1, 50.0f}, {v + 7, -3.0f}};
       }},
      {"repetition 1.3 on positive and negative logits", 32771, {1.0f, 0, 1.0f, 0.0f}, penalties(1.3f, 0.0f, 0.0f)},
      {"repetition 0.7 (boosts seen tokens), top_k 40", 5003, {0.9f, 40, 1.0f, 0.0f}, penalties(0.7f, 0.0f, 0.0f)},
      {"presence 1.5", 5003, {1.0f, 0, 1.0f, 0.0f}, penalties(1.0f, 1.5f, 0.0f)},
      {"frequency 0.8 over counts 1..4, min_p 0.02", 5003, {1.0f, 0, 1.0f, 0.02f}, penalties(1.0f, 0.0f, 0.8f)},
      {"presence -1, frequency -0.5 (boosts)", 1001, {1.2f, 0, 0.9f, 0.0f}, penalties(1.0f, -1.0f, -0.5f)},
      {"all penalties + bias, top_k 50 top_p 0.9 min_p 0.01", 128256, {0.9f, 50, 0.9f, 0.01f},
       penalties(1.2f, 0.3f, 0.25f, [](const std::vector<float>& raw, SamplingParams& sp) {
         const auto top = top_ids(raw, 20);
         sp.logit_bias = {{top[19], 3.0f}, {top[0], -2.0f}, {17, 1.0f}};
       })},
      {"min_tokens: EOS (the top token) and stop ids masked", 128256, {0.8f, 0, 0.95f, 0.0f},
       [](const std::vector<float>& raw, SamplingParams& sp, auto&, auto& output, auto& eos) {
         const auto top = top_ids(raw, 3);
         eos = {top[0]};
         sp.stop_token_ids = {top[1], top[2], static_cast<int32_t>(raw.size()) + 1};
         output = {5, 6};
         sp.min_tokens = 5;
       }},
      {"min_tokens with ignore_eos: only the stop ids masked", 128256, {0.8f, 0, 0.95f, 0.0f},
       [](const std::vector<float>& raw, SamplingParams& sp, auto&, auto& output, auto& eos) {
         const auto top = top_ids(raw, 3);
         eos = {top[0]};
         sp.stop_token_ids = {top[1], top[2]};
         sp.ignore_eos = true;
         output = {5, 6};
         sp.min_tokens = 3;
       }},
      {"min_tokens over a vocabulary of stop tokens: the raw argmax", 7, {1.0f, 0, 1.0f, 0.0f},
       [](const std::vector<float>&, SamplingParams& sp, auto&, auto&, auto&) {
         sp.stop_token_ids = {0, 1, 2, 3, 4, 5, 6};
         sp.min_tokens = 1;
       }},
      {"long history: 1000 prompt + 1000 output tokens, repetition 1.2 presence 0.2 frequency 0.3", 128256,
       {0.8f, 0, 0.95f, 0.0f},
       [](const std::vector<float>& raw, SamplingParams& sp, auto& prompt, auto& output, auto&) {
         sp.repetition_penalty = 1.2f;
         sp.presence_penalty = 0.2f;
         sp.frequency_penalty = 0.3f;
         const auto top = top_ids(raw, 300);
         std::mt19937 g(3);
         auto token = [&] { return g() % 2 ? top[g() % 300] : static_cast<int32_t>(g() % raw.size()); };
         for (int i = 0; i < 1000; ++i) prompt.push_back(token());
         for (int i = 0; i < 1000; ++i) output.push_back(token());
       }},
      {"262,144 columns (64 KiB index: shared memory opt-in), penalties + bias", 262144, {1.0f, 0, 0.5f, 0.0f},
       penalties(1.3f, 0.0f, 0.4f, [](const std::vector<float>& raw, SamplingParams& sp) {
         sp.logit_bias = {{262143, 6.0f}, {0, 5.0f}, {top_ids(raw, 1)[0], -100.0f}};
       })},
      {"vocab 7, every token adjusted", 7, {1.0f, 3, 0.8f, 0.0f},
       [](const std::vector<float>&, SamplingParams& sp, auto& prompt, auto& output, auto&) {
         sp.repetition_penalty = 1.5f;
         sp.frequency_penalty = 0.1f;
         for (int t = 0; t < 7; ++t) sp.logit_bias[t] = 0.25f * static_cast<float>(t);
         prompt = {0, 1, 2, 3};
         output = {4, 5, 6, 6};
       }},
  };
}

// A case set up over a row: the request and its adjusted row.
struct CaseRow {
  SamplingParams sp;
  std::vector<int32_t> prompt, output, eos;
  Adjusted adj;

  CaseRow(const AdjCase& c, const std::vector<float>& raw) {
    c.setup(raw, sp, prompt, output, eos);
    adj = adjusted_row(raw, sp, prompt, output, eos);
  }
};

// Every case sampled (20,000 draws) and greedy (64 rows): the device picks equal the host's
// for the same u, and the sampled frequencies pass the chi-square. A pick may differ where u
// falls within rounding of a cumulative-mass boundary (the device's expf is not the host's
// std::exp): at most 1 in 1,000 per case (check_distribution) and 1 in 10,000 overall; the
// H200 run gave 2 of 260,832 (repetition 1.3 and presence 1.5, one each).
TEST(CudaSampling, AdjustmentsMatchHostSampler) {
  SKIP_WITHOUT_GPU();
  uint32_t seed = 300;
  int mismatch = 0, total = 0;
  for (const AdjCase& c : adjustment_cases()) {
    const std::vector<float> raw = tie_logits(c.vocab, seed, 2.5f);
    const CaseRow cr(c, raw);
    for (const bool greedy : {false, true}) {
      Params p = c.p;
      if (greedy) p.temperature = 0.0f;
      const int n = greedy ? 64 : 20000;
      mismatch += check_distribution(raw, p, n, seed + 1, std::string(c.name) + (greedy ? " [greedy]" : ""), &cr.adj);
      total += n;
    }
    seed += 11;
  }
  EXPECT_LE(mismatch, total / 10000) << mismatch << " of " << total << " device picks differ from the host Sampler's";
  std::printf("adjusted rows: %d of %d device picks differ from the host Sampler's\n", mismatch, total);
}

// The replica above (HostDist over Sampler::adjust_row) is the real Sampler for adjusted rows.
TEST(CudaSampling, AdjustedReplicaIsTheSampler) {
  for (const AdjCase& c : adjustment_cases()) {
    const int draws = c.vocab > 32771 ? 20 : 100;  // the Sampler per draw is slow on large rows
    const std::vector<float> raw = tie_logits(c.vocab, 5, 2.0f);
    CaseRow cr(c, raw);
    for (const bool greedy : {false, true}) {
      Params p = c.p;
      if (greedy) p.temperature = 0.0f;
      cr.sp.temperature = p.temperature;
      cr.sp.top_k = p.top_k;
      cr.sp.top_p = p.top_p;
      cr.sp.min_p = p.min_p;
      HostDist host(raw, p, &cr.adj.x);
      Sampler sampler(cr.eos);
      std::mt19937_64 rng(91), twin(91);
      for (int i = 0; i < draws; ++i) {
        const SampledToken t = sampler.sample_row(raw, SamplerRow{0, &cr.sp, cr.prompt, cr.output, &rng});
        ASSERT_EQ(t.token_id, greedy ? host.greedy : host.token(uniform01(twin))) << c.name << " draw " << i;
      }
    }
  }
}

// Rows with and without adjustments, greedy and sampled, over 4 logit rows in one launch, each
// with its own list; logprob and rank are the raw row's (compute_logprobs), not the adjusted one's.
TEST(CudaSampling, AdjustedAndPlainRowsInOneLaunch) {
  SKIP_WITHOUT_GPU();
  const int vocab = 128256, n_logit_rows = 4, n = 96;
  std::vector<std::vector<float>> raws;
  std::vector<float> all;
  for (int r = 0; r < n_logit_rows; ++r) {
    raws.push_back(tie_logits(vocab, 70 + r, 2.0f + r));
    all.insert(all.end(), raws.back().begin(), raws.back().end());
  }
  DevTensor dl = dev_floats(all, {n_logit_rows, vocab});
  const std::vector<AdjCase> cases = adjustment_cases();
  std::vector<cuda::DeviceSampleRow> rows;
  std::vector<cuda::DeviceSampleAdj> list;
  std::vector<HostDist> hosts;
  std::mt19937_64 rng(4);
  for (int i = 0; i < n; ++i) {
    const int lr = i % n_logit_rows;
    const std::vector<float>& raw = raws[static_cast<size_t>(lr)];
    Params p{i % 3 == 0 ? 0.0f : 0.8f, i % 5 == 0 ? 30 : 0, i % 2 ? 0.9f : 1.0f, 0.0f};
    cuda::DeviceSampleRow d = device_row(lr, p, uniform01(rng));
    d.want_logprob = 1;
    if (i % 4 == 3) {  // a plain row
      hosts.emplace_back(raw, p);
    } else {
      const CaseRow cr(cases[static_cast<size_t>(i) % cases.size()], raw);
      d = with_adjustments(d, &cr.adj);
      d.adj_begin = static_cast<int32_t>(list.size());
      list.insert(list.end(), cr.adj.list.begin(), cr.adj.list.end());
      hosts.emplace_back(raw, p, &cr.adj.x);
    }
    rows.push_back(d);
  }
  const auto out = run_rows(dl, rows, list);
  ASSERT_EQ(out.size(), rows.size());
  int mismatch = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const cuda::DeviceSampleRow& d = rows[i];
    const cuda::DeviceSampleOut& o = out[i];
    const int want = d.greedy ? hosts[i].greedy : hosts[i].token(d.u);
    EXPECT_EQ(o.token, want) << "row " << i << " (" << d.n_adj << " adjustments)";
    mismatch += o.token != want;
    const SampleLogprobs lp = compute_logprobs(raws[static_cast<size_t>(d.logits_row)], o.token, 0);
    EXPECT_NEAR(o.logprob, lp.logprob, 1e-4) << "row " << i << ": not the raw logprob";
    EXPECT_EQ(o.rank, lp.rank) << "row " << i << ": not the raw rank";
  }
  std::printf("mixed launch: %d rows, %zu adjustments, %d picks differ from the host's\n", n, list.size(), mismatch);
}

// ---- Top logprob alternatives: compute_logprobs' top list (NaN as -inf, value descending,
// id ascending among ties, min(n, vocab) entries) with its raw logprobs.

std::string describe_top(std::span<const cuda::DeviceSampleTop> dev, const std::vector<TokenLogprob>& host) {
  std::ostringstream s;
  s << "device:";
  for (const cuda::DeviceSampleTop& e : dev) s << " " << e.token << " (" << e.logprob << ")";
  s << "\nhost:  ";
  for (const TokenLogprob& e : host) s << " " << e.token_id << " (" << e.logprob << ")";
  return s.str();
}

// Logprobs as the tests above compare them (1e-4), NaN where the host has NaN (a row without
// a value above -inf), -inf where it has -inf.
bool same_logprob(float dev, float host) {
  return (std::isnan(dev) && std::isnan(host)) || dev == host || std::fabs(dev - host) <= 1e-4f;
}

// Row i of a launch against compute_logprobs over its raw row and the device's token: logprob,
// rank and the top list (ids exactly, in order). Returns 1 when anything differs.
int check_top_row(std::span<const float> raw, const cuda::DeviceSampleRow& d, const cuda::DeviceSampleOut& o,
                  const std::vector<cuda::DeviceSampleTop>& top, size_t i, const std::string& what) {
  const SampleLogprobs want = compute_logprobs(raw, o.token, d.n_top);
  const size_t k = want.top.size(), at = i * cuda::kSampleMaxTop;
  EXPECT_EQ(k, std::min(static_cast<size_t>(d.n_top), raw.size())) << what;
  if (k > 0 && top.size() < at + k) {
    ADD_FAILURE() << what << " row " << i << ": " << top.size() << " top slots downloaded, row needs [" << at << ", "
                  << at + k << ")";
    return 1;
  }
  const std::span<const cuda::DeviceSampleTop> got =
      k > 0 ? std::span<const cuda::DeviceSampleTop>(top).subspan(at, k) : std::span<const cuda::DeviceSampleTop>();
  bool ok = same_logprob(o.logprob, want.logprob) && o.rank == want.rank;
  for (size_t j = 0; j < k; ++j)
    ok = ok && got[j].token == want.top[j].token_id && same_logprob(got[j].logprob, want.top[j].logprob);
  EXPECT_TRUE(ok) << what << " row " << i << " (n_top " << d.n_top << ", token " << o.token << ", "
                  << (d.greedy ? "greedy" : "sampled") << ", " << d.n_adj << " adjustments): logprob " << o.logprob
                  << " vs host " << want.logprob << ", rank " << o.rank << " vs " << want.rank << "\n"
                  << describe_top(got, want.top);
  return ok ? 0 : 1;
}

// One launch over raws (same vocab): for each logit row, n_top 1, 5 and 20 on greedy and
// sampled rows, with and without adjustments (bias -100 on the raw top tokens, repetition and
// presence penalties over them: the top list must stay the raw one), beside rows with a logprob
// only and rows without; then the same rows with n_top = 0 must give the same tokens, logprobs
// and ranks. Returns the rows with top lists checked.
int check_top_launch(const std::vector<std::vector<float>>& raws, const std::vector<std::vector<int32_t>>& raw_top,
                     const std::string& what) {
  const int vocab = static_cast<int>(raws[0].size()), n_logit_rows = static_cast<int>(raws.size());
  std::vector<float> all;
  for (const auto& r : raws) all.insert(all.end(), r.begin(), r.end());
  DevTensor dl = dev_floats(all, {n_logit_rows, vocab});
  std::vector<cuda::DeviceSampleRow> rows;
  std::vector<cuda::DeviceSampleAdj> list;
  std::mt19937_64 rng(17);
  for (int lr = 0; lr < n_logit_rows; ++lr) {
    const std::vector<int32_t>& tops = raw_top[static_cast<size_t>(lr)];
    SamplingParams sp;
    sp.repetition_penalty = 1.3f;
    sp.presence_penalty = 0.5f;
    for (size_t j = 0; j < std::min<size_t>(3, tops.size()); ++j) sp.logit_bias[tops[j]] = -100.0f;
    const std::vector<int32_t> prompt(tops.begin(), tops.begin() + static_cast<long>(tops.size() / 2));
    const std::vector<int32_t> output(tops.begin() + static_cast<long>(tops.size() / 2), tops.end());
    const Adjusted adj = adjusted_row(raws[static_cast<size_t>(lr)], sp, prompt, output, {});
    for (const int n_top : {1, 5, 20}) {
      for (int mode = 0; mode < 4; ++mode) {  // greedy, sampled, adjusted greedy, adjusted sampled
        const Params p{mode % 2 == 0 ? 0.0f : 0.8f, 0, mode % 2 == 0 ? 1.0f : 0.95f, 0.0f};
        cuda::DeviceSampleRow d = device_row(lr, p, uniform01(rng));
        if (mode >= 2) {
          d = with_adjustments(d, &adj);
          d.adj_begin = static_cast<int32_t>(list.size());
          list.insert(list.end(), adj.list.begin(), adj.list.end());
        }
        d.want_logprob = 1;
        d.n_top = n_top;
        rows.push_back(d);
      }
    }
    cuda::DeviceSampleRow logprob_only = device_row(lr, Params{0.8f, 0, 1.0f, 0.0f}, uniform01(rng));
    logprob_only.want_logprob = 1;
    rows.push_back(logprob_only);
    rows.push_back(device_row(lr, Params{0.8f, 0, 1.0f, 0.0f}, uniform01(rng)));
  }
  std::vector<cuda::DeviceSampleTop> top;
  const auto out = run_rows(dl, rows, list, &top);
  EXPECT_EQ(out.size(), rows.size()) << what;
  if (out.size() != rows.size()) return 0;
  EXPECT_EQ(top.size(), rows.size() * cuda::kSampleMaxTop) << what << ": top slots downloaded";
  int bad = 0, checked = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!rows[i].want_logprob) continue;
    bad += check_top_row(raws[static_cast<size_t>(rows[i].logits_row)], rows[i], out[i], top, i, what);
    checked += rows[i].n_top > 0;
  }
  // The top lists change nothing else.
  std::vector<cuda::DeviceSampleRow> plain = rows;
  for (auto& d : plain) d.n_top = 0;
  std::vector<cuda::DeviceSampleTop> no_top;
  const auto again = run_rows(dl, plain, list, &no_top);
  EXPECT_TRUE(no_top.empty()) << what << ": top slots downloaded for a launch without top lists";
  for (size_t i = 0; i < rows.size() && i < again.size(); ++i) {
    EXPECT_EQ(again[i].token, out[i].token) << what << " row " << i << ": the pick changed with n_top";
    if (rows[i].want_logprob) {
      EXPECT_TRUE(again[i].logprob == out[i].logprob || (std::isnan(again[i].logprob) && std::isnan(out[i].logprob)))
          << what << " row " << i << ": logprob " << again[i].logprob << " without top, " << out[i].logprob << " with";
      EXPECT_EQ(again[i].rank, out[i].rank) << what << " row " << i;
    }
  }
  std::printf("%s: %d rows with top lists, %d differ from compute_logprobs\n", what.c_str(), checked, bad);
  return checked;
}

TEST(CudaSampling, TopLogprobsMatchComputeLogprobs) {
  SKIP_WITHOUT_GPU();
  {  // Llama-3 vocabulary. [0]: ties (tie_logits' 1/8 grid and its tied large values) with NaN
     // and -inf among the largest; [1]: 25 ids tied at the maximum, the largest id among them
     // (the top 20 are the lowest 20 by id); [2]: nothing above -inf (NaN logprobs on both sides).
    const int vocab = 128256;
    std::vector<std::vector<float>> raws(3);
    std::vector<std::vector<int32_t>> tops(3);
    raws[0] = tie_logits(vocab, 91, 2.5f);
    tops[0] = top_ids(raws[0], 12);
    raws[0][static_cast<size_t>(tops[0][0])] = NAN;
    raws[0][static_cast<size_t>(tops[0][2])] = kNegInf;
    raws[0][static_cast<size_t>(tops[0][5])] = std::numeric_limits<float>::quiet_NaN();
    raws[1] = tie_logits(vocab, 92, 2.0f);
    const float mx = *std::max_element(raws[1].begin(), raws[1].end()) + 1.0f;
    std::mt19937 g(5);
    for (int j = 0; j < 24; ++j) raws[1][g() % static_cast<uint32_t>(vocab)] = mx;
    raws[1][static_cast<size_t>(vocab - 1)] = mx;
    tops[1] = top_ids(raws[1], 12);
    raws[2].assign(static_cast<size_t>(vocab), kNegInf);
    tops[2] = {5, 6, 7, 8};
    raws[2][77] = NAN;
    EXPECT_GT(check_top_launch(raws, tops, "vocab 128256"), 0);
  }
  {  // vocab 7 (fewer ids than 20: every id listed, NaN and -inf ones last by id)
    std::vector<std::vector<float>> raws = {{1.0f, NAN, kNegInf, 1.0f, 2.0f, kNegInf, 0.5f},
                                            {kNegInf, kNegInf, kNegInf, NAN, kNegInf, kNegInf, kNegInf},
                                            {-3.0f, -3.0f, -3.0f, -3.0f, -3.0f, -3.0f, -3.0f}};
    std::vector<std::vector<int32_t>> tops = {{4, 0, 3}, {0, 1}, {2, 5}};
    EXPECT_GT(check_top_launch(raws, tops, "vocab 7"), 0);
  }
}

// Lists the kernel cannot index (ids not ascending, repeated or outside the vocabulary, ranges
// beyond the array) are refused before any launch.
TEST(CudaSampling, MalformedAdjustmentsAreRejected) {
  SKIP_WITHOUT_GPU();
  const int vocab = 1000;
  DevTensor dl = dev_floats(tie_logits(vocab, 1, 1.0f), {1, vocab});
  CudaStep* cs = cuda_step(*backend());
  ASSERT_NE(cs, nullptr);
  cuda::DeviceSampleRow d = device_row(0, Params{}, 0.5);
  auto status = [&](std::vector<int32_t> ids, int begin, int n_adj) {
    std::vector<cuda::DeviceSampleAdj> list;
    for (int32_t t : ids) list.push_back({t, cuda::kSampleAdjBias, 1.0f, 0.0f});
    d.adj_begin = begin;
    d.n_adj = n_adj;
    std::vector<cuda::DeviceSampleOut> out;
    std::vector<cuda::DeviceSampleTop> top;
    return cs->sample_rows(dl.t, {d}, list, out, top);
  };
  EXPECT_TRUE(status({3, 9, 999}, 0, 3).is_ok());
  EXPECT_FALSE(status({9, 3}, 0, 2).is_ok()) << "descending ids";
  EXPECT_FALSE(status({3, 3}, 0, 2).is_ok()) << "a repeated id";
  EXPECT_FALSE(status({3, 1000}, 0, 2).is_ok()) << "an id outside the vocabulary";
  EXPECT_FALSE(status({-1, 3}, 0, 2).is_ok()) << "a negative id";
  EXPECT_FALSE(status({3, 9}, 1, 2).is_ok()) << "a range beyond the list";
  EXPECT_FALSE(status({3, 9}, 0, -1).is_ok()) << "a negative count";
  d.want_logprob = 1;
  d.n_top = cuda::kSampleMaxTop;
  EXPECT_TRUE(status({}, 0, 0).is_ok()) << "kSampleMaxTop alternatives";
  d.n_top = cuda::kSampleMaxTop + 1;
  EXPECT_FALSE(status({}, 0, 0).is_ok()) << "more than kSampleMaxTop alternatives";
  d.n_top = -1;
  EXPECT_FALSE(status({}, 0, 0).is_ok()) << "a negative number of alternatives";
}

// Not a check: the cost of one 256-row step at the Llama-3 vocabulary (printed).
TEST(CudaSampling, TimeOf256Rows) {
  SKIP_WITHOUT_GPU();
  const int vocab = 128256, n = 256;
  std::vector<float> raw;
  for (int r = 0; r < n; ++r) {
    auto row = random_floats(vocab, 500 + r, -4.0f, 12.0f);
    raw.insert(raw.end(), row.begin(), row.end());
  }
  DevTensor dl = dev_floats(raw, {n, vocab});
  std::mt19937_64 rng(1);
  // Milliseconds per call, after a warm-up call (top lists downloaded as the runner does).
  auto ms_per_call = [&](const std::vector<cuda::DeviceSampleRow>& rows, const std::vector<cuda::DeviceSampleAdj>& list) {
    std::vector<cuda::DeviceSampleTop> top;
    run_rows(dl, rows, list, &top);
    const auto t0 = std::chrono::steady_clock::now();
    for (int it = 0; it < 10; ++it) run_rows(dl, rows, list, &top);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 10;
  };
  for (const Params& p : {Params{0.8f, 0, 0.95f, 0.0f}, Params{0.8f, 50, 1.0f, 0.0f}, Params{0.0f, 0, 1.0f, 0.0f}}) {
    std::vector<cuda::DeviceSampleRow> rows;
    for (int i = 0; i < n; ++i) rows.push_back(device_row(i, p, uniform01(rng)));
    std::printf("sample_rows 256 x %d, T %.1f top_k %d top_p %.2f: %.3f ms per call (upload + kernel + ids)\n", vocab,
                p.temperature, p.top_k, p.top_p, ms_per_call(rows, {}));
  }
  for (const int n_top : {0, 1, 5, 20}) {  // every row with a logprob and n_top alternatives
    std::vector<cuda::DeviceSampleRow> rows;
    for (int i = 0; i < n; ++i) {
      rows.push_back(device_row(i, Params{0.8f, 0, 0.95f, 0.0f}, uniform01(rng)));
      rows.back().want_logprob = 1;
      rows.back().n_top = n_top;
    }
    std::printf("sample_rows 256 x %d, T 0.8 top_p 0.95, logprob + %d top alternatives per row: %.3f ms per call\n",
                vocab, n_top, ms_per_call(rows, {}));
  }
  // T 0.8 top_p 0.95 with repetition / presence / frequency penalties over 1000 + 1000 tokens
  // per row (~900 distinct ids each): lists built by the Sampler, timed with the upload.
  SamplingParams sp;
  sp.temperature = 0.8f;
  sp.top_p = 0.95f;
  sp.repetition_penalty = 1.1f;
  sp.presence_penalty = 0.2f;
  sp.frequency_penalty = 0.2f;
  std::vector<std::vector<int32_t>> hist(n);
  std::vector<SamplerRow> srows;
  for (int r = 0; r < n; ++r) {
    for (int i = 0; i < 2000; ++i)
      hist[static_cast<size_t>(r)].push_back(static_cast<int32_t>(rng() % 4 ? rng() % 400 : rng() % vocab));
    const std::span<const int32_t> h(hist[static_cast<size_t>(r)]);
    srows.push_back({r, &sp, h.first(1000), h.subspan(1000), nullptr});
  }
  Sampler sampler({});
  const auto t0 = std::chrono::steady_clock::now();
  const auto lists = sampler.token_adjustments(srows, vocab);
  const double build_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::vector<cuda::DeviceSampleRow> rows;
  std::vector<cuda::DeviceSampleAdj> list;
  for (int i = 0; i < n; ++i) {
    cuda::DeviceSampleRow d = device_row(i, Params{0.8f, 0, 0.95f, 0.0f}, uniform01(rng));
    d.repetition = sp.repetition_penalty;
    d.adj_begin = static_cast<int32_t>(list.size());
    d.n_adj = static_cast<int32_t>(lists[static_cast<size_t>(i)].size());
    for (const TokenAdjust& a : lists[static_cast<size_t>(i)]) list.push_back({a.token, a.flags, a.bias, a.subtract});
    rows.push_back(d);
  }
  const double ms = ms_per_call(rows, list);
  std::printf("sample_rows 256 x %d, T 0.8 top_p 0.95 + penalties over 1000 + 1000 tokens (%zu adjustments, "
              "%.0f KiB): %.3f ms per call (upload + kernel + ids); lists built in %.2f ms on one thread\n",
              vocab, list.size(), list.size() * sizeof(cuda::DeviceSampleAdj) / 1024.0, ms, build_ms);
}

}  // namespace
}  // namespace ember::cuda_test
