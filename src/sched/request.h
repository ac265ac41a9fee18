#pragma once
// Request: one sequence as the scheduler tracks it. A user request with n > 1 samples becomes n
// Requests sharing a request_id (sample_index 0..n-1); index 0 computes the prompt, the others
// wait (kAwaitingFork) and are forked from it, sharing its KV blocks, when its prefill ends.
#include "sched/sampling_params.h"

#include <chrono>
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace ember {

using SeqId = int64_t;
using Clock = std::chrono::steady_clock;

enum class RequestStatus {
  kWaiting,       // never scheduled, or preempted and waiting for recompute
  kRunning,       // holds KV blocks
  kAwaitingFork,  // n > 1 sample waiting for sample 0's prefill to end
  kFinished,
};

enum class FinishReason {
  kNone,    // still running
  kStop,    // EOS or a stop token id (stop strings are the server's business)
  kLength,  // max_tokens or the context window
  kAbort,   // abort() / client went away / shutdown
  kError,   // the executor failed on a step this request was in
};

// "stop" / "length" / "abort" / "error", or "" for kNone: the OpenAI finish_reason strings.
const char* finish_reason_name(FinishReason reason);

struct Request {
  SeqId seq_id = -1;
  std::string request_id;
  int sample_index = 0;
  // Prompt followed by generated tokens (one vector, so block hashing sees a contiguous run).
  std::vector<int32_t> token_ids;
  int num_prompt_tokens = 0;
  SamplingParams params;
  Clock::time_point arrival_time{};
  int priority = 0;  // lower value = served first under the priority policy (as in vLLM)
  std::string cache_salt;

  RequestStatus status = RequestStatus::kWaiting;
  FinishReason finish_reason = FinishReason::kNone;
  // Set when generation ended on a stop / EOS token (the last output token).
  std::optional<int32_t> stop_token_id;
  // Tokens whose K/V are in the cache (and so need no compute this step).
  int num_computed_tokens = 0;
  // Prompt tokens served from the prefix cache the first time this request was scheduled;
  // -1 until then.
  int num_cached_tokens = -1;
  int num_preemptions = 0;
  // max_tokens with the context window applied (set at add time).
  int max_output_tokens = 0;
  // Draft tokens to verify in the next step (speculative decoding), set by the engine before
  // schedule(): a decode step then runs them after the last token, and update() keeps those its
  // picks confirm. The scheduler may shorten them (budget, max_tokens, context window) and clears
  // them once applied or on preemption.
  std::vector<int32_t> draft_ids;
  // The engine's cap on draft_ids for this sequence (-1: none yet): it follows how many drafts
  // the sequence's recent steps kept, so a sequence whose drafts keep failing verifies fewer.
  int draft_limit = -1;
  // Per-sequence random stream (seeded from params.seed or the engine), so sampling does not
  // depend on batch neighbours.
  std::mt19937_64 rng;

  int num_tokens() const { return static_cast<int>(token_ids.size()); }
  int num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
  std::span<const int32_t> prompt() const {
    return {token_ids.data(), static_cast<size_t>(num_prompt_tokens)};
  }
  std::span<const int32_t> output() const {
    return {token_ids.data() + num_prompt_tokens, static_cast<size_t>(num_output_tokens())};
  }
  bool is_finished() const { return status == RequestStatus::kFinished; }
};

}  // namespace ember
