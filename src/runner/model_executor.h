#pragma once
// ModelExecutor: what the engine needs from a model on a device. The engine decides which
// tokens run and where their K/V live (block ids); the executor owns the K/V storage and
// returns logits. Implemented by runner/ (a real model on a Backend) and by fakes in tests.
#include "core/status.h"
#include "model/forward_batch.h"
#include "sample/logprobs.h"
#include "sample/token_adjust.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace ember {

// One logit row sampled where the logits are (ModelExecutor::execute_sample): the host
// Sampler's rules (sample/sampler.cpp) for requests with at most kDeviceMaxTopLogprobs top
// logprob alternatives (is_device_sampleable). u: the uniform draw in [0, 1) the host took from the request's random
// stream (greedy rows take none). adjust: the row's min_tokens suppression, logit_bias and
// penalties as Sampler::token_adjustments lists them (sorted distinct ids in the vocabulary),
// applied to the logits before the pick; a view the caller keeps alive through the call.
struct DeviceSampleSpec {
  int logits_row = 0;
  bool greedy = false;
  float temperature = 1.0f;
  int top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  bool logprob = false;  // the raw log-softmax of the token and its rank (before any adjustment)
  int n_top = 0;         // with logprob: this many top alternatives, [0, kDeviceMaxTopLogprobs]
  double u = 0.0;
  float repetition_penalty = 1.0f;  // for adjust's kAdjustRepeat entries
  std::span<const TokenAdjust> adjust;

  // The spec of a request's SamplingParams (a template: this layer does not depend on sched/);
  // u is the host Sampler's one draw per non-greedy pick, drawn by the caller from the
  // request's generator (ignored for greedy rows).
  template <class Params>
  static DeviceSampleSpec of(const Params& p, int logits_row, double u) {
    DeviceSampleSpec s;
    s.logits_row = logits_row;
    s.greedy = p.is_greedy();
    s.temperature = p.temperature;
    s.top_k = p.top_k;
    s.top_p = p.top_p;
    s.min_p = p.min_p;
    s.logprob = p.logprobs.has_value();
    s.n_top = p.logprobs && *p.logprobs > 0 ? *p.logprobs : 0;
    s.u = s.greedy ? 0.0 : u;
    s.repetition_penalty = p.repetition_penalty;
    return s;
  }
};

struct DeviceSampled {
  int32_t token_id = 0;
  float logprob = 0.0f;
  int rank = 0;
  // spec.n_top > 0: compute_logprobs(raw row, token_id, n_top).top (min(n_top, vocab) entries,
  // most likely first, lower id first among ties); empty otherwise.
  std::vector<TokenLogprob> top;
};

struct KvCacheConfig {
  int n_blocks = 0;
  int block_size = 16;
};

// What ModelExecutor::warm_up prepares for: the engine's step limits.
struct WarmUpOptions {
  int max_tokens = 0;  // tokens a step may carry (the scheduler's token budget)
  int max_seqs = 0;    // sequences (and so decode logit rows) a step may carry
  // Decode graphs to capture: batches of 1..graph_seqs sequences (-1: up to 16; 0: none).
  // Each graph holds ~5 MB of device memory at Llama-3-8B shapes and serves block tables of
  // up to 16 blocks only, so larger batches (long contexts, mostly) keep capturing lazily.
  int graph_seqs = -1;
  std::function<void(int done, int total)> progress;  // called per warm-up decode step
};

class ModelExecutor {
 public:
  virtual ~ModelExecutor() = default;
  virtual int vocab_size() const = 0;
  virtual int max_context() const = 0;
  // Bytes of K/V storage one block of block_size tokens takes over all layers.
  virtual size_t kv_bytes_per_block(int block_size) const = 0;
  // Allocates K/V storage for cfg.n_blocks blocks (call once, before execute).
  virtual Status allocate_kv_cache(const KvCacheConfig& cfg) = 0;
  // Pays a device's one-time costs before the first request instead of during it (call after
  // allocate_kv_cache, before any step: it writes garbage into K/V blocks). A GPU runner sizes
  // its activation buffers for the largest step (a larger step later would move them and
  // invalidate every captured graph), runs one step of max_tokens prompt tokens (sizing the
  // prefill workspaces) and captures the decode graphs of 1..graph_seqs sequences. Others
  // have nothing to prepare.
  virtual Status warm_up(const WarmUpOptions& options) {
    (void)options;
    return Status::ok();
  }
  // Runs one step. logits: [batch.logit_rows.size(), vocab_size()] float32, row-major.
  virtual Status execute(const ForwardBatch& batch, std::vector<float>& logits) = 0;
  // Greedy steps without the logits: whether execute_argmax is available (a GPU runner
  // returns the argmax of each logit row instead of downloading the whole vocabulary).
  virtual bool can_execute_argmax() const { return false; }
  // Runs one step like execute; token_ids[i] = the index of the largest logit of logit row i
  // (exactly what the Sampler's greedy pick on the unmodified row gives: NaN never wins, the
  // lowest index wins ties, 0 when no logit is above -inf).
  virtual Status execute_argmax(const ForwardBatch& batch, std::vector<int32_t>& token_ids) {
    (void)batch;
    (void)token_ids;
    return Status::error("this executor has no execute_argmax");
  }
  // Pipelined greedy steps (the engine queues step n + 1 before step n's tokens reach the
  // host, so host work overlaps the device's): enqueue_argmax queues a step like
  // execute_argmax and returns without waiting; collect_argmax waits for the oldest queued
  // step and returns its ids. feed is empty or has one entry per batch token: where feed[i] >=
  // 0, token i's id is the one the previously queued step picked for its logit row feed[i]
  // (batch.token_ids[i] is ignored there). At most two steps are queued at once.
  virtual bool can_pipeline_argmax() const { return false; }
  virtual Status enqueue_argmax(const ForwardBatch& batch, std::span<const int32_t> feed) {
    (void)batch;
    (void)feed;
    return Status::error("this executor has no enqueue_argmax");
  }
  virtual Status collect_argmax(std::vector<int32_t>& token_ids) {
    (void)token_ids;
    return Status::error("this executor has no collect_argmax");
  }
  // Whether queuing this batch is quick host work (a GPU runner: a captured graph to replay)
  // rather than a long one (eager launches, a graph capture), which the engine then does only
  // after handing out the tokens it has.
  virtual bool queues_quickly(const ForwardBatch& batch) const {
    (void)batch;
    return true;
  }
  // Steps without the logits: execute_sample runs one step like execute and samples each
  // spec's row on the device; out[i] is rows[i]'s token (the host Sampler's pick for the same
  // u; see DeviceSampleSpec), with its raw logprob, rank and top alternatives when asked.
  virtual bool can_execute_sample() const { return false; }
  virtual Status execute_sample(const ForwardBatch& batch, const std::vector<DeviceSampleSpec>& rows,
                                std::vector<DeviceSampled>& out) {
    (void)batch;
    (void)rows;
    (void)out;
    return Status::error("this executor has no execute_sample");
  }
  // Copies K/V of whole blocks (copy-on-write for forked sequences): pairs (src, dst).
  virtual Status copy_blocks(const std::vector<std::pair<int32_t, int32_t>>& src_dst) = 0;
};

}  // namespace ember
