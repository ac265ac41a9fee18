#pragma once
// Token adjustments: what the host Sampler does to a row's logits between the NaN scrub and
// temperature (min_tokens suppression, then logit_bias, then the repetition and presence /
// frequency penalties; sample/sampler.cpp), written as a list of the tokens those steps touch.
// A device sampler applies the list to logits it never downloads (ModelExecutor::execute_sample;
// Sampler::token_adjustments builds the lists), with the same float operations, so its row equals
// the host's bit for bit.
#include <cstdint>
#include <limits>
#include <span>

namespace ember {

inline constexpr uint32_t kAdjustSuppress = 1u;  // min_tokens pending and an EOS / stop token: -inf
inline constexpr uint32_t kAdjustBias = 2u;      // x += bias (logit_bias)
inline constexpr uint32_t kAdjustRepeat = 4u;    // seen in prompt or output, repetition_penalty != 1
inline constexpr uint32_t kAdjustSubtract = 8u;  // in the output, presence / frequency penalty: x -= subtract

struct TokenAdjust {
  int32_t token = 0;
  uint32_t flags = 0;     // kAdjust*
  float bias = 0.0f;      // kAdjustBias
  float subtract = 0.0f;  // kAdjustSubtract: presence + frequency * (occurrences in the output)
};

// One token's logit x (NaN already -inf) after its adjustments, in the host's order:
// suppress_tokens, apply_logit_bias, apply_penalties (sample/logits_processors.cpp).
inline float adjust_logit(float x, const TokenAdjust& a, float repetition_penalty) {
  if (a.flags & kAdjustSuppress) x = -std::numeric_limits<float>::infinity();
  if (a.flags & kAdjustBias) x += a.bias;
  if (a.flags & kAdjustRepeat) x = x > 0.0f ? x / repetition_penalty : x * repetition_penalty;
  if (a.flags & kAdjustSubtract) x -= a.subtract;
  return x;
}

// A row's list applied to its logits (ids outside the row are skipped, as the host does).
inline void apply_token_adjustments(std::span<float> x, std::span<const TokenAdjust> list,
                                    float repetition_penalty) {
  for (const TokenAdjust& a : list)
    if (a.token >= 0 && static_cast<size_t>(a.token) < x.size())
      x[static_cast<size_t>(a.token)] = adjust_logit(x[static_cast<size_t>(a.token)], a, repetition_penalty);
}

}  // namespace ember
