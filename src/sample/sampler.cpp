#include "sample/sampler.h"

#include "core/check.h"
#include "sample/logits_processors.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ember {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr size_t kParallelMinRows = 16;  // fewer rows are not worth a fork/join
}  // namespace

Sampler::Sampler(std::vector<int32_t> eos_token_ids, int n_threads)
    : eos_token_ids_(std::move(eos_token_ids)),
      pool_(n_threads > 1 ? std::make_unique<ThreadPool>(n_threads) : nullptr),
      work_(static_cast<size_t>(std::max(1, n_threads))) {}

Sampler::~Sampler() = default;

std::vector<SampledToken> Sampler::sample(std::span<const float> logits, int vocab_size,
                                          std::span<const SamplerRow> rows) {
  EMBER_CHECK(vocab_size > 0 && logits.size() % static_cast<size_t>(vocab_size) == 0);
  const size_t n_logit_rows = logits.size() / static_cast<size_t>(vocab_size);
  for (const SamplerRow& row : rows)
    EMBER_CHECK(row.logits_row >= 0 && static_cast<size_t>(row.logits_row) < n_logit_rows);
  std::vector<SampledToken> out(rows.size());
  auto run = [&](size_t begin, size_t end, std::vector<float>& work) {
    for (size_t i = begin; i < end; ++i)
      out[i] = sample_row_into(logits.subspan(static_cast<size_t>(rows[i].logits_row) * vocab_size, vocab_size),
                               rows[i], work);
  };
  if (!pool_ || rows.size() < kParallelMinRows) {
    run(0, rows.size(), work_[0]);
  } else {
    pool_->run([&](int ith, int nth) {
      const size_t per = (rows.size() + static_cast<size_t>(nth) - 1) / static_cast<size_t>(nth);
      const size_t begin = std::min(rows.size(), per * static_cast<size_t>(ith));
      run(begin, std::min(rows.size(), begin + per), work_[static_cast<size_t>(ith)]);
    });
  }
  return out;
}

SampledToken Sampler::sample_row(std::span<const float> row_logits, const SamplerRow& row) {
  return sample_row_into(row_logits, row, work_[0]);
}

SampledToken Sampler::sample_row_into(std::span<const float> row_logits, const SamplerRow& row,
                                      std::vector<float>& work) {
  EMBER_CHECK(row.params != nullptr);
  const SamplingParams& p = *row.params;
  if (is_plain_argmax(p, row.output_token_ids.size())) {
    // Nothing modifies the row: pick from it in place (argmax never picks NaN), without
    // the copy and scrub that cost two passes over 262k logits per row in a batched step.
    SampledToken plain;
    plain.token_id = std::max<int32_t>(0, argmax(row_logits));
    return plain;
  }
  work.assign(row_logits.begin(), row_logits.end());
  std::span<float> x(work);
  for (float& v : x)
    if (std::isnan(v)) v = kNegInf;  // a broken logit must never be picked

  if (static_cast<int>(row.output_token_ids.size()) < p.min_tokens) {
    if (!p.ignore_eos) suppress_tokens(x, eos_token_ids_);
    suppress_tokens(x, p.stop_token_ids);
  }
  apply_logit_bias(x, p.logit_bias);
  apply_penalties(x, row.prompt_token_ids, row.output_token_ids, p.repetition_penalty,
                  p.presence_penalty, p.frequency_penalty);

  int32_t token = -1;
  if (p.is_greedy()) {
    token = argmax(x);
  } else {
    EMBER_CHECK(row.rng != nullptr, "non-greedy row without a random stream");
    apply_temperature(x, p.temperature);
    apply_min_p(x, p.min_p);
    apply_top_k(x, p.top_k);
    apply_top_p(x, p.top_p);
    token = draw_from_logits(x, uniform01(*row.rng));
  }
  // Everything masked (e.g. min_tokens over a vocabulary of stop tokens): fall back to the
  // model's own choice rather than failing the request.
  if (token < 0) token = std::max<int32_t>(0, argmax(row_logits));

  SampledToken result;
  result.token_id = token;
  if (p.logprobs) result.logprobs = compute_logprobs(row_logits, token, *p.logprobs);
  return result;
}

bool is_plain_argmax(const SamplingParams& p, size_t n_output_tokens) {
  return p.is_greedy() && !p.logprobs && p.logit_bias.empty() && p.repetition_penalty == 1.0f &&
         p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f &&
         n_output_tokens >= static_cast<size_t>(std::max(0, p.min_tokens));
}

bool is_device_sampleable(const SamplingParams& p, size_t n_output_tokens) {
  return (!p.logprobs || *p.logprobs == 0) && p.logit_bias.empty() && p.repetition_penalty == 1.0f &&
         p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f &&
         n_output_tokens >= static_cast<size_t>(std::max(0, p.min_tokens));
}

SampleLogprobs compute_logprobs(std::span<const float> raw_logits, int32_t token, int n_top) {
  auto val = [&](size_t i) { return std::isnan(raw_logits[i]) ? kNegInf : raw_logits[i]; };
  float m = kNegInf;
  for (size_t i = 0; i < raw_logits.size(); ++i) m = std::max(m, val(i));
  double sum = 0.0;
  for (size_t i = 0; i < raw_logits.size(); ++i)
    if (val(i) > kNegInf) sum += std::exp(static_cast<double>(val(i)) - m);
  const double lse = static_cast<double>(m) + std::log(sum);

  SampleLogprobs lp;
  lp.token_id = token;
  const float tx = val(static_cast<size_t>(token));
  lp.logprob = static_cast<float>(static_cast<double>(tx) - lse);
  int rank = 1;
  for (size_t i = 0; i < raw_logits.size(); ++i) rank += val(i) > tx;
  lp.rank = rank;
  if (n_top > 0) {
    std::vector<int32_t> ids(raw_logits.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    const size_t k = std::min(ids.size(), static_cast<size_t>(n_top));
    std::partial_sort(ids.begin(), ids.begin() + static_cast<long>(k), ids.end(),
                      [&](int32_t a, int32_t b) {
                        const float va = val(static_cast<size_t>(a)), vb = val(static_cast<size_t>(b));
                        return va != vb ? va > vb : a < b;
                      });
    for (size_t i = 0; i < k; ++i)
      lp.top.push_back({ids[i], static_cast<float>(static_cast<double>(val(static_cast<size_t>(ids[i]))) - lse)});
  }
  return lp;
}

}  // namespace ember
