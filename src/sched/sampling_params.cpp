#include "sched/sampling_params.h"

#include <cmath>

namespace ember {

namespace {
bool finite(float x) { return std::isfinite(x); }
}  // namespace

Status SamplingParams::validate(int vocab_size) const {
  if (!finite(temperature) || temperature < 0.0f)
    return Status::errorf("temperature must be >= 0, got {}", temperature);
  if (top_k < -1) return Status::errorf("top_k must be -1, 0 (disabled) or positive, got {}", top_k);
  if (!finite(top_p) || top_p <= 0.0f || top_p > 1.0f)
    return Status::errorf("top_p must be in (0, 1], got {}", top_p);
  if (!finite(min_p) || min_p < 0.0f || min_p > 1.0f)
    return Status::errorf("min_p must be in [0, 1], got {}", min_p);
  if (!finite(repetition_penalty) || repetition_penalty <= 0.0f)
    return Status::errorf("repetition_penalty must be > 0, got {}", repetition_penalty);
  if (!finite(presence_penalty) || presence_penalty < -2.0f || presence_penalty > 2.0f)
    return Status::errorf("presence_penalty must be in [-2, 2], got {}", presence_penalty);
  if (!finite(frequency_penalty) || frequency_penalty < -2.0f || frequency_penalty > 2.0f)
    return Status::errorf("frequency_penalty must be in [-2, 2], got {}", frequency_penalty);
  for (const auto& [token, bias] : logit_bias) {
    if (!finite(bias) || bias < -100.0f || bias > 100.0f)
      return Status::errorf("logit_bias for token {} must be in [-100, 100], got {}", token, bias);
    if (token < 0 || (vocab_size > 0 && token >= vocab_size))
      return Status::errorf("logit_bias token id {} is outside the vocabulary", token);
  }
  for (int32_t token : stop_token_ids) {
    if (token < 0 || (vocab_size > 0 && token >= vocab_size))
      return Status::errorf("stop_token_ids holds {}, outside the vocabulary", token);
  }
  if (max_tokens && *max_tokens < 1)
    return Status::errorf("max_tokens must be >= 1, got {}", *max_tokens);
  if (min_tokens < 0) return Status::errorf("min_tokens must be >= 0, got {}", min_tokens);
  if (max_tokens && min_tokens > *max_tokens)
    return Status::errorf("min_tokens ({}) must not exceed max_tokens ({})", min_tokens, *max_tokens);
  if (n < 1 || n > kMaxSamplesPerRequest)
    return Status::errorf("n must be in [1, {}], got {}", kMaxSamplesPerRequest, n);
  if (logprobs && (*logprobs < 0 || *logprobs > kMaxLogprobs))
    return Status::errorf("logprobs must be in [0, {}], got {}", kMaxLogprobs, *logprobs);
  return Status::ok();
}

}  // namespace ember
