#pragma once
// SamplingParams: how one request picks its tokens and when it stops. Plain data, filled by
// the server / CLI from user input and checked once with validate() before the request enters
// the engine. Names and defaults follow the OpenAI API and vLLM so the server maps 1:1.
#include "core/status.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

namespace ember {

class JsonSchema;  // sample/json_schema.h (compiled by the server; this layer only carries it)

struct SamplingParams {
  // 0 means greedy (argmax); any other value divides the logits.
  float temperature = 1.0f;
  // <= 0 disables top-k; otherwise keep the k most likely tokens.
  int top_k = 0;
  // Keep the smallest set of most likely tokens whose mass reaches top_p; 1 disables.
  float top_p = 1.0f;
  // Drop tokens whose probability is below min_p * (probability of the most likely token).
  float min_p = 0.0f;
  // HF/vLLM repetition penalty over prompt + output tokens: positive logits are divided by it,
  // negative ones multiplied. 1 disables.
  float repetition_penalty = 1.0f;
  // OpenAI penalties over output tokens only: logit -= presence * [count > 0] + frequency * count.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // Added to the logit of a token id before everything but penalties (OpenAI: -100..100).
  std::unordered_map<int32_t, float> logit_bias;
  // Per-request seed: a request's samples then do not depend on its batch neighbours or on the
  // engine's seed. Without it, the engine derives one (fixed in deterministic mode).
  std::optional<uint64_t> seed;
  // Extra token ids that end generation (the token itself is kept in the output ids).
  std::vector<int32_t> stop_token_ids;
  // Upper bound on generated tokens; absent means "up to the context window".
  std::optional<int> max_tokens = 16;
  // Stop and EOS tokens are suppressed until this many tokens were generated.
  int min_tokens = 0;
  // Keep generating past the model's EOS token(s).
  bool ignore_eos = false;
  // Number of samples drawn for this prompt (they share the prompt's KV blocks).
  int n = 1;
  // Return the log-probability of each sampled token plus this many top alternatives;
  // absent means no logprobs at all. See sample/sampler.h for which distribution is reported.
  std::optional<int> logprobs;
  // OpenAI's response_format {"type": "json_object"}: the output is constrained to one JSON
  // object (sample/json_constraint.h); sampled on the host, never by a device argmax.
  bool json_object = false;
  // With json_object: the object must also match this schema (response_format json_schema).
  std::shared_ptr<const JsonSchema> json_schema;

  // Checks ranges; the error names the offending field (e.g. "top_p must be in (0, 1], got 2").
  // vocab_size > 0 also checks token ids in logit_bias / stop_token_ids.
  Status validate(int vocab_size = 0) const;
  bool is_greedy() const { return temperature == 0.0f; }
};

// Limits that validate() enforces (kept public so the server can quote them in errors).
inline constexpr int kMaxSamplesPerRequest = 128;
inline constexpr int kMaxLogprobs = 20;

}  // namespace ember
