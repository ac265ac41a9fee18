#pragma once
// What goes into and comes out of the engine: EngineRequest (one user request), RequestOutput
// (an increment of generated tokens for one sample of it) and EngineStats (for /metrics).
#include "sample/logprobs.h"
#include "sched/request.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ember {

struct EngineRequest {
  // Unique among requests in flight (the server's "cmpl-..." id); reused ids are rejected.
  std::string request_id;
  std::vector<int32_t> prompt_token_ids;
  SamplingParams params;
  int priority = 0;        // only used with SchedulerPolicy::kPriority; lower runs first
  std::string cache_salt;  // prefix-cache isolation: requests only share blocks with equal salt
  // Defaults to the time add_request is called.
  std::optional<Clock::time_point> arrival_time;
};

// One increment for one sample of a request. Each step produces at most one RequestOutput per
// live sample; a request with n samples produces outputs with index 0..n-1 and is done when all
// n have had finished == true.
struct RequestOutput {
  std::string request_id;
  int index = 0;  // sample index in [0, n)
  // Tokens generated since the previous output of this sample (one per step for now; more with
  // speculative decoding). A stop / EOS token that ended generation is included as the last
  // one, with stop_token_id set, so the detokenizer can skip it.
  std::vector<int32_t> new_token_ids;
  // Parallel to new_token_ids when the request asked for logprobs, else empty.
  std::vector<SampleLogprobs> logprobs;
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  std::optional<int32_t> stop_token_id;
  // Non-empty with FinishReason::kError: what failed.
  std::string error;
  int num_prompt_tokens = 0;
  // Prompt tokens whose K/V came from the prefix cache (OpenAI usage.prompt_tokens_details).
  int num_cached_tokens = 0;
  // Output tokens of this sample so far, including new_token_ids.
  int num_output_tokens = 0;
};

struct EngineStats {
  int num_running = 0;   // sequences holding KV blocks
  int num_waiting = 0;   // sequences waiting (new, preempted or awaiting fork)
  int num_waiting_requests = 0;  // new or preempted sequences: the admission queue
  int kv_blocks_used = 0;
  int kv_blocks_total = 0;
  int block_size = 0;
  // Prefix cache, in tokens, since start: looked-up tokens and tokens found.
  int64_t prefix_cache_queries = 0;
  int64_t prefix_cache_hits = 0;
  double prefix_cache_hit_rate = 0.0;  // hits / queries, 0 when no queries
  // KV slots in blocks held by live sequences vs slots holding a token, right now.
  int64_t kv_slots_allocated = 0;
  int64_t kv_slots_used = 0;
  double kv_unused_fraction = 0.0;  // 1 - used / allocated, 0 when nothing allocated
  int64_t num_preemptions = 0;
  int64_t prompt_tokens_total = 0;      // prompt tokens of admitted requests
  int64_t prompt_tokens_computed = 0;   // tokens actually run through the model for prefill
  int64_t generation_tokens_total = 0;  // sampled tokens
  int64_t num_steps = 0;
  int64_t requests_finished = 0;  // finished samples, any reason (n samples count n)
  int64_t requests_aborted = 0;   // abort() calls that found a live request
  // Speculative decoding: drafts verified, and those confirmed (each saved a step's token).
  int64_t spec_draft_tokens = 0;
  int64_t spec_accepted_tokens = 0;
};

}  // namespace ember
