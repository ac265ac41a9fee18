#include "sample/sampler.h"

#include "core/check.h"
#include "sample/logits_processors.h"

#include <algorithm>
#include <bit>
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
      work_(static_cast<size_t>(std::max(1, n_threads))),
      adjust_marks_(work_.size()),
      adjust_bits_(work_.size()),
      adjust_lists_(work_.size()) {}

Sampler::~Sampler() = default;

std::vector<SampledToken> Sampler::sample(std::span<const float> logits, int vocab_size,
                                          std::span<const SamplerRow> rows) {
  EMBER_CHECK(vocab_size > 0 && logits.size() % static_cast<size_t>(vocab_size) == 0);
  const size_t n_logit_rows = logits.size() / static_cast<size_t>(vocab_size);
  for (const SamplerRow& row : rows)
    EMBER_CHECK(row.logits_row >= 0 && static_cast<size_t>(row.logits_row) < n_logit_rows);
  std::vector<SampledToken> out(rows.size());
  split_rows(rows.size(), [&](size_t begin, size_t end, int task) {
    for (size_t i = begin; i < end; ++i)
      out[i] = sample_row_into(logits.subspan(static_cast<size_t>(rows[i].logits_row) * vocab_size, vocab_size),
                               rows[i], work_[static_cast<size_t>(task)]);
  });
  return out;
}

void Sampler::split_rows(size_t n, const std::function<void(size_t, size_t, int)>& fn) {
  if (!pool_ || n < kParallelMinRows) {
    fn(0, n, 0);
    return;
  }
  pool_->run([&](int ith, int nth) {
    const size_t per = (n + static_cast<size_t>(nth) - 1) / static_cast<size_t>(nth);
    const size_t begin = std::min(n, per * static_cast<size_t>(ith));
    fn(begin, std::min(n, begin + per), ith);
  });
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

  adjust_row(x, row);
  if (p.json_object) {
    EMBER_CHECK(json_vocab_ != nullptr, "a json_object request reached a sampler without a vocabulary");
    std::vector<int32_t> end_ids = eos_token_ids_;
    end_ids.insert(end_ids.end(), p.stop_token_ids.begin(), p.stop_token_ids.end());
    constrain_to_json(x, *json_vocab_, p.json_schema.get(), row.output_token_ids, end_ids, p.is_greedy());
  }
  EMBER_CHECK(p.is_greedy() || row.rng != nullptr, "non-greedy row without a random stream");
  const int32_t token = pick_adjusted(x, row_logits, p, p.is_greedy() ? 0.0 : uniform01(*row.rng));

  SampledToken result;
  result.token_id = token;
  if (p.logprobs) result.logprobs = compute_logprobs(row_logits, token, *p.logprobs);
  return result;
}

void Sampler::adjust_row(std::span<float> x, const SamplerRow& row) const {
  const SamplingParams& p = *row.params;
  if (static_cast<int>(row.output_token_ids.size()) < p.min_tokens) {
    if (!p.ignore_eos) suppress_tokens(x, eos_token_ids_);
    suppress_tokens(x, p.stop_token_ids);
  }
  apply_logit_bias(x, p.logit_bias);
  apply_penalties(x, row.prompt_token_ids, row.output_token_ids, p.repetition_penalty,
                  p.presence_penalty, p.frequency_penalty);
}

namespace {

// adjust_row's edits of one row as a list, appended to `out` in id order. Each id the row
// touches gets a bit in `bits` (one per vocabulary id) and its kinds and output count in
// `mark` (count << 3 | kind bits); a scan of the bitmap then emits the ids in ascending order
// without sorting (a 2,000-token history costs ~2,000 scattered updates plus vocab / 64 words)
// and leaves both arrays zero again.
constexpr uint32_t kMarkSeen = 1, kMarkBiased = 2, kMarkSuppressed = 4, kMarkOutputOne = 8;

void build_adjustments(const SamplerRow& row, std::span<const int32_t> eos_token_ids, int vocab_size,
                       std::vector<uint32_t>& mark, std::vector<uint64_t>& bits, std::vector<TokenAdjust>& out) {
  const SamplingParams& p = *row.params;
  const bool repeat = p.repetition_penalty != 1.0f;
  const bool subtract = p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
  const bool suppress = static_cast<int>(row.output_token_ids.size()) < p.min_tokens;
  if (!repeat && !subtract && !suppress && p.logit_bias.empty()) return;  // nothing to list
  if (mark.size() != static_cast<size_t>(vocab_size)) {
    mark.assign(static_cast<size_t>(vocab_size), 0);
    bits.assign((static_cast<size_t>(vocab_size) + 63) / 64, 0);
  }
  bool any = false;
  auto add = [&](int32_t t, uint32_t kind, uint32_t plus) {
    if (t < 0 || t >= vocab_size) return;  // the host's processors skip such ids
    const size_t i = static_cast<size_t>(t);
    mark[i] = (mark[i] | kind) + plus;
    bits[i / 64] |= uint64_t{1} << (i % 64);
    any = true;
  };
  if (repeat)
    for (int32_t t : row.prompt_token_ids) add(t, kMarkSeen, 0);
  if (repeat || subtract)
    for (int32_t t : row.output_token_ids) add(t, kMarkSeen, kMarkOutputOne);
  for (const auto& [t, b] : p.logit_bias) add(t, kMarkBiased, 0);
  if (suppress) {
    if (!p.ignore_eos)
      for (int32_t t : eos_token_ids) add(t, kMarkSuppressed, 0);
    for (int32_t t : p.stop_token_ids) add(t, kMarkSuppressed, 0);
  }
  if (!any) return;
  for (size_t w = 0; w < bits.size(); ++w) {
    for (uint64_t b = bits[w]; b != 0; b &= b - 1) {
      const size_t i = w * 64 + static_cast<size_t>(std::countr_zero(b));
      const uint32_t m = mark[i];
      mark[i] = 0;
      TokenAdjust a;
      a.token = static_cast<int32_t>(i);
      if (m & kMarkSuppressed) a.flags |= kAdjustSuppress;
      if (m & kMarkBiased) {
        a.flags |= kAdjustBias;
        a.bias = p.logit_bias.find(a.token)->second;
      }
      if (repeat && (m & kMarkSeen)) a.flags |= kAdjustRepeat;
      const uint32_t n_output = m / kMarkOutputOne;
      if (subtract && n_output > 0) {
        a.flags |= kAdjustSubtract;
        // apply_penalties' expression (logits_processors.cpp), so the same float.
        a.subtract = p.presence_penalty + p.frequency_penalty * static_cast<float>(n_output);
      }
      out.push_back(a);
    }
    bits[w] = 0;
  }
}

}  // namespace

std::vector<std::span<const TokenAdjust>> Sampler::token_adjustments(std::span<const SamplerRow> rows,
                                                                      int vocab_size) {
  std::vector<std::span<const TokenAdjust>> result(rows.size());
  std::vector<size_t> first(rows.size());  // where row i's list starts in its task's storage
  split_rows(rows.size(), [&](size_t begin, size_t end, int task) {
    std::vector<TokenAdjust>& lists = adjust_lists_[static_cast<size_t>(task)];
    lists.clear();
    for (size_t i = begin; i < end; ++i) {
      EMBER_CHECK(rows[i].params != nullptr);
      first[i] = lists.size();
      build_adjustments(rows[i], eos_token_ids_, vocab_size, adjust_marks_[static_cast<size_t>(task)],
                        adjust_bits_[static_cast<size_t>(task)], lists);
    }
    for (size_t i = begin; i < end; ++i) {  // the storage no longer grows: take the views
      const size_t n = (i + 1 < end ? first[i + 1] : lists.size()) - first[i];
      result[i] = std::span<const TokenAdjust>(lists).subspan(first[i], n);
    }
  });
  return result;
}

int32_t pick_adjusted(std::span<float> x, std::span<const float> raw_logits, const SamplingParams& p, double u) {
  int32_t token = -1;
  if (p.is_greedy()) {
    token = argmax(x);
  } else {
    apply_temperature(x, p.temperature);
    apply_min_p(x, p.min_p);
    apply_top_k(x, p.top_k);
    apply_top_p(x, p.top_p);
    token = draw_from_logits(x, u);
  }
  // Everything masked (e.g. min_tokens over a vocabulary of stop tokens): fall back to the
  // model's own choice rather than failing the request.
  if (token < 0) token = std::max<int32_t>(0, argmax(raw_logits));
  return token;
}

bool is_plain_argmax(const SamplingParams& p, size_t n_output_tokens) {
  return p.is_greedy() && !p.logprobs && !p.json_object && p.logit_bias.empty() && p.repetition_penalty == 1.0f &&
         p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f &&
         n_output_tokens >= static_cast<size_t>(std::max(0, p.min_tokens));
}

static_assert(kDeviceMaxTopLogprobs == kMaxLogprobs, "every request validate() accepts samples on the device");

bool is_device_sampleable(const SamplingParams& p) {
  return !p.json_object && (!p.logprobs || *p.logprobs <= kDeviceMaxTopLogprobs);
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
