#include "fake_executor.h"

#include "sample/sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace ember::testing {

namespace {
uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h = (h ^ (h >> 31)) * 0xbf58476d1ce4e5b9ull;
  return h ^ (h >> 29);
}
}  // namespace

Status FakeExecutor::allocate_kv_cache(const KvCacheConfig& cfg) {
  if (cfg.n_blocks < 1 || cfg.block_size < 1) return Status::error("bad KV cache config");
  block_size_ = cfg.block_size;
  slots_.assign(static_cast<size_t>(cfg.n_blocks) * cfg.block_size, Slot{});
  return Status::ok();
}

Status FakeExecutor::warm_up(const WarmUpOptions& options) {
  if (slots_.empty()) error("warm_up before allocate_kv_cache");
  if (n_steps_ > 0) error("warm_up after a step");
  warm_ups_.push_back(options);
  return opt_.fail_warm_up ? Status::error("no device memory for the activations") : Status::ok();
}

void FakeExecutor::error(std::string message) {
  if (errors_.size() < 50) errors_.push_back(std::move(message));
}

uint64_t FakeExecutor::sequence_hash(const std::vector<int32_t>& tokens) {
  uint64_t h = 0x1234567ull;
  for (int32_t t : tokens) h = mix(h, static_cast<uint64_t>(t));
  return h;
}

bool FakeExecutor::saw_sequence(const std::vector<int32_t>& tokens) const {
  return seen_.count(sequence_hash(tokens)) > 0;
}

void FakeExecutor::logits_for(const std::vector<int32_t>& tokens, int vocab_size, float* out) {
  const uint64_t h = sequence_hash(tokens);
  for (int v = 0; v < vocab_size; ++v) {
    const uint64_t r = mix(h, static_cast<uint64_t>(v) + 1000003ull);
    // Spread over [-4, 4): peaked enough that sampling is not uniform, varied enough that
    // every token (EOS included) wins sometimes.
    out[v] = static_cast<float>(static_cast<double>(r >> 11) * 0x1.0p-53 * 8.0 - 4.0);
  }
}

Status FakeExecutor::execute_argmax(const ForwardBatch& b, std::vector<int32_t>& token_ids) {
  if (!opt_.device_argmax) return Status::error("execute_argmax not offered");
  ++n_argmax_steps_;
  std::vector<float> logits;
  EMBER_RETURN_IF_ERROR(execute(b, logits));
  const size_t vocab = static_cast<size_t>(opt_.vocab_size);
  token_ids.assign(logits.size() / vocab, 0);
  for (size_t r = 0; r < token_ids.size(); ++r) {
    float best = -std::numeric_limits<float>::infinity();
    for (size_t v = 0; v < vocab; ++v)
      if (logits[r * vocab + v] > best) {
        best = logits[r * vocab + v];
        token_ids[r] = static_cast<int32_t>(v);
      }
  }
  return Status::ok();
}

Status FakeExecutor::enqueue_argmax(const ForwardBatch& batch, std::span<const int32_t> feed) {
  if (!can_pipeline_argmax()) return Status::error("enqueue_argmax not offered");
  if (queue_.size() >= 2) return Status::error("enqueue_argmax: two steps are queued already");
  if (!feed.empty() && feed.size() != batch.token_ids.size()) return Status::error("enqueue_argmax: feed size");
  queue_.push_back({batch, std::vector<int32_t>(feed.begin(), feed.end())});
  n_fed_steps_ += std::any_of(feed.begin(), feed.end(), [](int32_t f) { return f >= 0; });
  max_queued_ = std::max(max_queued_, static_cast<int>(queue_.size()));
  return Status::ok();
}

Status FakeExecutor::collect_argmax(std::vector<int32_t>& token_ids) {
  if (queue_.empty()) return Status::error("collect_argmax: nothing queued");
  Queued q = std::move(queue_.front());
  queue_.pop_front();
  const bool fed = std::any_of(q.feed.begin(), q.feed.end(), [](int32_t f) { return f >= 0; });
  if (fed && last_failed_) {
    // Its tokens were to come from a step that failed: a GPU would run it on garbage, and the
    // engine ends its sequences; running it here would only read the failed step's missing K/V.
    token_ids.assign(q.batch.logit_rows.size(), 0);
    return Status::ok();
  }
  last_failed_ = false;
  for (size_t i = 0; i < q.feed.size(); ++i) {
    if (q.feed[i] < 0) continue;
    if (static_cast<size_t>(q.feed[i]) >= last_ids_.size()) {
      error("feed row past the previous step's rows");
      return Status::error("collect_argmax: bad feed row");
    }
    q.batch.token_ids[i] = last_ids_[static_cast<size_t>(q.feed[i])];
  }
  const Status st = execute_argmax(q.batch, token_ids);
  if (!st.is_ok()) {
    last_failed_ = true;
    return st;
  }
  last_ids_ = token_ids;
  return Status::ok();
}

Status FakeExecutor::execute_sample(const ForwardBatch& b, const std::vector<DeviceSampleSpec>& rows,
                                    std::vector<DeviceSampled>& out) {
  if (!opt_.device_sample) return Status::error("execute_sample not offered");
  std::vector<RecordedSampleRow>& call = sample_calls_.emplace_back();
  for (const DeviceSampleSpec& spec : rows) {
    RecordedSampleRow& r = call.emplace_back();
    r.spec = spec;
    r.spec.adjust = {};
    r.adjust.assign(spec.adjust.begin(), spec.adjust.end());
  }
  std::vector<float> logits;
  EMBER_RETURN_IF_ERROR(execute(b, logits));
  const size_t vocab = static_cast<size_t>(opt_.vocab_size);
  out.clear();
  for (const DeviceSampleSpec& spec : rows) {
    if (spec.logits_row < 0 || static_cast<size_t>(spec.logits_row) >= logits.size() / vocab)
      return Status::errorf("execute_sample: logits row {}", spec.logits_row);
    const std::span<const float> raw(logits.data() + static_cast<size_t>(spec.logits_row) * vocab, vocab);
    std::vector<float> x(raw.begin(), raw.end());
    for (float& v : x)
      if (std::isnan(v)) v = -std::numeric_limits<float>::infinity();
    apply_token_adjustments(x, spec.adjust, spec.repetition_penalty);
    SamplingParams p;
    p.temperature = spec.greedy ? 0.0f : spec.temperature;
    p.top_k = spec.top_k;
    p.top_p = spec.top_p;
    p.min_p = spec.min_p;
    DeviceSampled& d = out.emplace_back();
    d.token_id = pick_adjusted(x, raw, p, spec.u);
    if (spec.logprob) {
      SampleLogprobs lp = compute_logprobs(raw, d.token_id, spec.n_top);
      d.logprob = lp.logprob;
      d.rank = lp.rank;
      d.top = std::move(lp.top);
    }
  }
  return Status::ok();
}

Status FakeExecutor::execute(const ForwardBatch& b, std::vector<float>& logits) {
  const int step = n_steps_++;
  if (step == opt_.fail_on_step) return Status::error("injected executor failure");
  if (block_size_ == 0) return Status::error("KV cache not allocated");
  const int n_seqs = b.n_seqs();
  if (b.positions.size() != b.token_ids.size() || b.slot_mapping.size() != b.token_ids.size() ||
      b.query_start.size() != static_cast<size_t>(n_seqs) + 1 ||
      b.block_tables.size() != static_cast<size_t>(n_seqs) * b.max_blocks_per_seq ||
      b.query_start.back() != b.n_tokens())
    return Status::error("malformed ForwardBatch");
  // Write this step's K/V first: tokens of a chunk attend to each other.
  for (int t = 0; t < b.n_tokens(); ++t) {
    const int32_t slot = b.slot_mapping[static_cast<size_t>(t)];
    if (slot < 0 || static_cast<size_t>(slot) >= slots_.size()) {
      error(fmt::format("step {}: slot {} out of range", step, slot));
      continue;
    }
    slots_[static_cast<size_t>(slot)] = {b.token_ids[static_cast<size_t>(t)],
                                         b.positions[static_cast<size_t>(t)]};
  }
  n_tokens_computed_ += b.n_tokens();
  logits.assign(b.logit_rows.size() * static_cast<size_t>(opt_.vocab_size), 0.0f);
  // Each logits row sees its sequence up to its own position (causal), read back through the
  // block table as attention would: a sequence's end, or a draft being verified inside it.
  size_t row = 0;
  int prev_row = -1;
  for (int s = 0; s < n_seqs && row < b.logit_rows.size(); ++s) {
    const int first = b.query_start[static_cast<size_t>(s)];
    const int last = b.query_start[static_cast<size_t>(s) + 1] - 1;
    const int len = b.seq_lens[static_cast<size_t>(s)];
    if (b.positions[static_cast<size_t>(last)] != len - 1)
      error(fmt::format("step {}: seq {} last position {} but seq_len {}", step, s,
                        b.positions[static_cast<size_t>(last)], len));
    for (; row < b.logit_rows.size() && b.logit_rows[row] <= last; ++row) {
      const int r = b.logit_rows[row];
      if (r < first || r <= prev_row) return Status::error("logit_rows are not ascending rows of the batch");
      prev_row = r;
      const int end = b.positions[static_cast<size_t>(r)] + 1;
      std::vector<int32_t> tokens;
      tokens.reserve(static_cast<size_t>(end));
      for (int p = 0; p < end; ++p) {
        const int bi = p / block_size_;
        if (bi >= b.max_blocks_per_seq) {
          error(fmt::format("step {}: seq {} position {} beyond its block table", step, s, p));
          break;
        }
        const int32_t block = b.block_tables[static_cast<size_t>(s) * b.max_blocks_per_seq + bi];
        const Slot& slot = slots_[static_cast<size_t>(block) * block_size_ + p % block_size_];
        if (slot.position != p)
          error(fmt::format("step {}: seq {} position {} reads a slot holding position {}", step, s,
                            p, slot.position));
        tokens.push_back(slot.token);
      }
      seen_.insert(sequence_hash(tokens));
      logits_for(tokens, opt_.vocab_size, logits.data() + row * opt_.vocab_size);
    }
  }
  if (row != b.logit_rows.size()) return Status::error("logit_rows past the batch");
  return Status::ok();
}

Status FakeExecutor::copy_blocks(const std::vector<std::pair<int32_t, int32_t>>& src_dst) {
  for (const auto& [src, dst] : src_dst) {
    for (int i = 0; i < block_size_; ++i)
      slots_[static_cast<size_t>(dst) * block_size_ + i] = slots_[static_cast<size_t>(src) * block_size_ + i];
    ++n_block_copies_;
  }
  return Status::ok();
}

}  // namespace ember::testing
