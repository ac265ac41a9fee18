#pragma once
// Log-probabilities reported with sampled tokens (OpenAI `logprobs` / `top_logprobs`).
#include <cstdint>
#include <vector>

namespace ember {

struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0.0f;
};

// The most top alternatives a device sampler returns per token (ModelExecutor::execute_sample;
// OpenAI's top_logprobs maximum, kMaxLogprobs): requests asking for more sample on the host.
inline constexpr int kDeviceMaxTopLogprobs = 20;

// One sampled token: its own logprob and rank (1 = most likely) in the reported distribution,
// plus the top-k alternatives, most likely first. The distribution is the raw model output
// (log-softmax of the logits before penalties, bias, temperature and truncation), as vLLM
// reports by default: it does not change with sampling settings.
struct SampleLogprobs {
  int32_t token_id = 0;
  float logprob = 0.0f;
  int rank = 0;
  std::vector<TokenLogprob> top;
};

}  // namespace ember
