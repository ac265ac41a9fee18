#pragma once
// Logits processors: each edits one row of logits in place ([vocab] floats); masked tokens
// become -inf. The Sampler applies them in vLLM's order:
//   min_tokens suppression, logit_bias -> penalties -> (greedy: argmax here)
//   -> temperature -> min_p -> top_k -> top_p -> draw.
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace ember {

// Sets the given token ids to -inf (ids outside the row are ignored).
void suppress_tokens(std::span<float> logits, std::span<const int32_t> token_ids);
void apply_logit_bias(std::span<float> logits, const std::unordered_map<int32_t, float>& bias);
// Repetition penalty (HF / vLLM) over tokens seen in prompt or output: positive logits are
// divided by `repetition`, negative ones multiplied. Presence / frequency (OpenAI) over output
// tokens only: logit -= presence * [count > 0] + frequency * count.
void apply_penalties(std::span<float> logits, std::span<const int32_t> prompt_token_ids,
                     std::span<const int32_t> output_token_ids, float repetition, float presence,
                     float frequency);
void apply_temperature(std::span<float> logits, float temperature);
// Masks tokens with probability < min_p * max probability.
void apply_min_p(std::span<float> logits, float min_p);
// Keeps the k largest logits (and any tied with the k-th); k <= 0 or >= vocab keeps all.
void apply_top_k(std::span<float> logits, int k);
// Keeps the smallest set of most likely tokens whose probability mass reaches top_p (at least
// one token); ties in probability are broken by lower token id first.
void apply_top_p(std::span<float> logits, float top_p);

// Index of the largest logit (lowest id among ties); -1 when every logit is -inf or NaN.
int32_t argmax(std::span<const float> logits);
// Draws a token from softmax(logits) with u in [0, 1); walks token ids in ascending order.
// -1 when no token is finite.
int32_t draw_from_logits(std::span<const float> logits, double u);

}  // namespace ember
