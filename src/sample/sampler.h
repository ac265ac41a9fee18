#pragma once
// Sampler: picks one token per row from host logits [n_logit_rows, vocab], each row with its
// own SamplingParams, token history and random stream. Rows are processed independently (no
// batch-wide reductions), so a row's result never depends on its neighbours.
//
// Logprobs, when asked for, come from the raw model distribution: log_softmax of the logits
// as the model returned them, before min_tokens, bias, penalties, temperature and truncation
// (vLLM's default "raw_logprobs"). They therefore describe the model, not the sampler settings,
// and a greedy token's logprob is the model's.
#include "core/thread_pool.h"
#include "sample/json_constraint.h"
#include "sample/logprobs.h"
#include "sample/token_adjust.h"
#include "sched/sampling_params.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <memory>
#include <random>
#include <span>
#include <vector>

namespace ember {

struct SamplerRow {
  int logits_row = 0;  // which row of the logits (rows may be shared, e.g. n > 1 fan-out)
  const SamplingParams* params = nullptr;
  std::span<const int32_t> prompt_token_ids;
  std::span<const int32_t> output_token_ids;
  std::mt19937_64* rng = nullptr;  // advanced once per non-greedy draw
};

struct SampledToken {
  int32_t token_id = 0;
  std::optional<SampleLogprobs> logprobs;
};

class Sampler {
 public:
  // eos_token_ids are suppressed (with the request's stop_token_ids) until min_tokens
  // outputs exist, unless the request ignores EOS.
  // n_threads > 1: sample() spreads batches of many rows over a pool of that many threads
  // (worth it where rows are many and the vocabulary large, e.g. a GPU step of 256 sequences;
  // each row draws from its own request's rng, so results do not depend on the split).
  explicit Sampler(std::vector<int32_t> eos_token_ids, int n_threads = 1);
  ~Sampler();

  // The token texts that SamplingParams::json_object requests are constrained with.
  void set_json_vocab(std::shared_ptr<const JsonVocab> vocab) { json_vocab_ = std::move(vocab); }
  bool has_json_vocab() const { return json_vocab_ != nullptr; }

  // logits: [n_logit_rows, vocab_size] row-major.
  std::vector<SampledToken> sample(std::span<const float> logits, int vocab_size,
                                   std::span<const SamplerRow> rows);
  // One row (what sample() does per row).
  SampledToken sample_row(std::span<const float> row_logits, const SamplerRow& row);

  // What sample_row does to a row's logits x (NaN already -inf) before temperature / greedy:
  // min_tokens suppression, logit_bias, penalties.
  void adjust_row(std::span<float> x, const SamplerRow& row) const;

  // The same edits as token lists for a device sampler (ModelExecutor::execute_sample):
  // result[i] for rows[i], sorted by token id, distinct, only ids in [0, vocab_size) (the host
  // skips others); apply_token_adjustments(x, result[i], repetition_penalty) == adjust_row(x,
  // rows[i]) bit for bit. Views into this Sampler's storage, valid until the next call. Cost per
  // row: what it touches (prompt + output with a repetition penalty, output with presence /
  // frequency, bias and stop ids) plus a vocab / 64-word scan when it touches anything; many
  // rows are spread over the pool.
  std::vector<std::span<const TokenAdjust>> token_adjustments(std::span<const SamplerRow> rows, int vocab_size);

 private:
  SampledToken sample_row_into(std::span<const float> row_logits, const SamplerRow& row, std::vector<float>& work);
  // fn(begin, end, task) over contiguous ranges of [0, n), one per pool thread (one range on
  // the calling thread, task 0, when single-threaded or n is small).
  void split_rows(size_t n, const std::function<void(size_t, size_t, int)>& fn);

  std::vector<int32_t> eos_token_ids_;
  std::shared_ptr<const JsonVocab> json_vocab_;
  std::unique_ptr<ThreadPool> pool_;   // null when single-threaded
  std::vector<std::vector<float>> work_;  // scratch row per pool task
  // token_adjustments, per pool task: per-id marks and bitmap (zero between rows), the lists.
  std::vector<std::vector<uint32_t>> adjust_marks_;
  std::vector<std::vector<uint64_t>> adjust_bits_;
  std::vector<std::vector<TokenAdjust>> adjust_lists_;
};

// sample_row's pick from a row x after Sampler::adjust_row (NaN already -inf; x is clobbered):
// greedy: the first maximum; otherwise temperature, min_p, top_k, top_p and the draw with u in
// [0, 1). Nothing left above -inf: the first maximum of raw_logits, 0 without one.
int32_t pick_adjusted(std::span<float> x, std::span<const float> raw_logits, const SamplingParams& p, double u);

// Whether sample_row's pick for this request is the plain argmax of the unmodified logits (greedy,
// no logprobs, bias or penalties, min_tokens reached): then an executor may compute it where
// the logits are (ModelExecutor::execute_argmax) and the result is the same token.
bool is_plain_argmax(const SamplingParams& p, size_t n_output_tokens);

// Whether a device sampler (ModelExecutor::execute_sample) implements this request's pick:
// temperature or greedy, top_k, top_p, min_p, a logprob with up to kDeviceMaxTopLogprobs top
// alternatives, and logit_bias / penalties / min_tokens through Sampler::token_adjustments
// (everything validate() accepts; more top alternatives stay on the host).
bool is_device_sampleable(const SamplingParams& p);

// Raw-distribution logprobs of `token` with the top `n_top` alternatives (most likely first,
// lower id first among ties). NaN logits count as -inf.
SampleLogprobs compute_logprobs(std::span<const float> raw_logits, int32_t token, int n_top);

// Uniform double in [0, 1) from 53 random bits (portable, unlike std::uniform_real_distribution).
inline double uniform01(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

}  // namespace ember
