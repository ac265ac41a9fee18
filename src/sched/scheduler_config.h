#pragma once
// SchedulerConfig: the knobs of continuous batching (vLLM's names where they exist).
#include "core/status.h"

namespace ember {

enum class SchedulerPolicy {
  kFcfs,      // first come, first served; preempt the newest running request
  kPriority,  // lowest Request::priority value first, ties by arrival; preempt the lowest
};

struct SchedulerConfig {
  // Token budget of one step (prefill chunks + decode tokens).
  int max_num_batched_tokens = 2048;
  // Sequences in the running set at once (an n-sample request counts n).
  int max_num_seqs = 64;
  int block_size = 16;
  // Total KV blocks (normally from the memory budget; see kv/kv_sizing.h).
  int n_blocks = 0;
  // Context window: prompt + output tokens of one sequence. The engine fills it in from the
  // executor when 0; the Scheduler itself needs it > 0.
  int max_model_len = 0;
  bool enable_prefix_caching = true;
  // Split prompts that do not fit the step's remaining budget into chunks.
  bool enable_chunked_prefill = true;
  // With chunked prefill: cap on a single request's prefill chunk (0 = only the budget), so one
  // long prompt cannot take a whole step from the others.
  int long_prefill_token_threshold = 0;
  SchedulerPolicy policy = SchedulerPolicy::kFcfs;

  Status validate() const;
};

}  // namespace ember
