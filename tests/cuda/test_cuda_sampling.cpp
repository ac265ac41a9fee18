// Sampling on the GPU (CudaStep::sample_rows, sample.cu) against the host Sampler's definition
// (sample/logits_processors.cpp): for the same uniform draw u the device must pick the token
// the host's inverse-CDF walk picks over the same kept set (temperature, min_p, top_k, top_p
// with ties cut by id), and over many u the device frequencies must match the host
// probabilities (chi-square). Edge cases: top_k = 1 with tied maxima, tiny top_p, NaN / -inf
// logits, rows with nothing finite, greedy rows in the same launch, vocabularies of 7 to
// 262,144 columns; logprobs and ranks vs compute_logprobs; the same launch twice gives the
// same tokens.
#include "backend/cuda/cuda_backend.h"
#include "cuda_test_util.h"
#include "sample/logits_processors.h"
#include "sample/sampler.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <numeric>

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
// order (what draw_from_logits walks).
struct HostDist {
  std::vector<float> x;
  std::vector<double> cum;  // cum[i] = mass of kept tokens <= i
  double total = 0.0;
  int fallback = 0;  // the host's token when nothing is kept

  HostDist(const std::vector<float>& raw, const Params& p) : x(raw) {
    for (float& v : x)
      if (std::isnan(v)) v = kNegInf;
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
    fallback = std::max<int32_t>(0, argmax(raw));
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

std::vector<cuda::DeviceSampleOut> run_rows(const DevTensor& logits, const std::vector<cuda::DeviceSampleRow>& rows) {
  std::vector<cuda::DeviceSampleOut> out;
  CudaStep* cs = cuda_step(*backend());
  EXPECT_NE(cs, nullptr);
  const Status st = cs->sample_rows(logits.t, rows, out);
  EXPECT_TRUE(st.is_ok()) << st.message();
  return out;
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
void check_distribution(const std::vector<float>& raw, const Params& p, int n, uint32_t seed, const std::string& what) {
  const int vocab = static_cast<int>(raw.size());
  DevTensor dl = dev_floats(raw, {1, vocab});
  HostDist host(raw, p);
  std::mt19937_64 rng(seed);
  std::vector<cuda::DeviceSampleRow> rows(static_cast<size_t>(n));
  for (auto& r : rows) r = device_row(0, p, uniform01(rng));
  const auto out = run_rows(dl, rows);
  ASSERT_EQ(out.size(), rows.size());
  int mismatch = 0, outside = 0;
  std::vector<int> count(static_cast<size_t>(vocab), 0);
  for (int i = 0; i < n; ++i) {
    const int t = out[static_cast<size_t>(i)].token;
    ASSERT_TRUE(t >= 0 && t < vocab) << what;
    mismatch += t != host.token(rows[static_cast<size_t>(i)].u);
    outside += host.prob(static_cast<size_t>(t)) == 0.0;
    ++count[static_cast<size_t>(t)];
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
  for (const Params& p : {Params{0.8f, 0, 0.95f, 0.0f}, Params{0.8f, 50, 1.0f, 0.0f}, Params{0.0f, 0, 1.0f, 0.0f}}) {
    std::vector<cuda::DeviceSampleRow> rows;
    for (int i = 0; i < n; ++i) rows.push_back(device_row(i, p, uniform01(rng)));
    run_rows(dl, rows);  // warm-up
    const auto t0 = std::chrono::steady_clock::now();
    for (int it = 0; it < 10; ++it) run_rows(dl, rows);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 10;
    std::printf("sample_rows 256 x %d, T %.1f top_k %d top_p %.2f: %.3f ms per call (upload + kernel + ids)\n", vocab,
                p.temperature, p.top_k, p.top_p, ms);
  }
}

}  // namespace
}  // namespace ember::cuda_test
