#include "sample/logits_processors.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace ember {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

bool in_vocab(std::span<const float> logits, int32_t t) {
  return t >= 0 && static_cast<size_t>(t) < logits.size();
}

// Largest finite logit, or -inf.
float max_logit(std::span<const float> logits) {
  float m = kNegInf;
  for (float x : logits) m = std::max(m, x);  // NaN never wins a std::max against -inf
  return m;
}
}  // namespace

void suppress_tokens(std::span<float> logits, std::span<const int32_t> token_ids) {
  for (int32_t t : token_ids)
    if (in_vocab(logits, t)) logits[static_cast<size_t>(t)] = kNegInf;
}

void apply_logit_bias(std::span<float> logits, const std::unordered_map<int32_t, float>& bias) {
  for (const auto& [t, b] : bias)
    if (in_vocab(logits, t)) logits[static_cast<size_t>(t)] += b;
}

void apply_penalties(std::span<float> logits, std::span<const int32_t> prompt_token_ids,
                     std::span<const int32_t> output_token_ids, float repetition, float presence,
                     float frequency) {
  if (repetition != 1.0f) {
    // Each seen token once, however often it occurs.
    std::vector<int32_t> seen(prompt_token_ids.begin(), prompt_token_ids.end());
    seen.insert(seen.end(), output_token_ids.begin(), output_token_ids.end());
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    for (int32_t t : seen) {
      if (!in_vocab(logits, t)) continue;
      float& x = logits[static_cast<size_t>(t)];
      x = x > 0.0f ? x / repetition : x * repetition;
    }
  }
  if (presence != 0.0f || frequency != 0.0f) {
    std::vector<int32_t> out(output_token_ids.begin(), output_token_ids.end());
    std::sort(out.begin(), out.end());
    for (size_t i = 0; i < out.size();) {
      size_t j = i;
      while (j < out.size() && out[j] == out[i]) ++j;
      if (in_vocab(logits, out[i]))
        logits[static_cast<size_t>(out[i])] -= presence + frequency * static_cast<float>(j - i);
      i = j;
    }
  }
}

void apply_temperature(std::span<float> logits, float temperature) {
  if (temperature == 1.0f || temperature <= 0.0f) return;
  const float inv = 1.0f / temperature;
  for (float& x : logits) x *= inv;
}

void apply_min_p(std::span<float> logits, float min_p) {
  if (min_p <= 0.0f) return;
  // p_i < min_p * p_max  <=>  logit_i < logit_max + log(min_p): no softmax needed.
  const float threshold = max_logit(logits) + std::log(min_p);
  for (float& x : logits)
    if (x < threshold) x = kNegInf;
}

void apply_top_k(std::span<float> logits, int k) {
  if (k <= 0 || static_cast<size_t>(k) >= logits.size()) return;
  std::vector<float> sorted(logits.begin(), logits.end());
  std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<float>());
  const float kth = sorted[static_cast<size_t>(k - 1)];
  for (float& x : logits)
    if (x < kth) x = kNegInf;
}

void apply_top_p(std::span<float> logits, float top_p) {
  if (top_p >= 1.0f) return;
  const float m = max_logit(logits);
  if (m == kNegInf) return;
  std::vector<int32_t> ids;
  double total = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] == kNegInf || std::isnan(logits[i])) continue;
    ids.push_back(static_cast<int32_t>(i));
    total += std::exp(static_cast<double>(logits[i]) - m);
  }
  auto before = [&](int32_t a, int32_t b) {
    const float la = logits[static_cast<size_t>(a)], lb = logits[static_cast<size_t>(b)];
    return la != lb ? la > lb : a < b;
  };
  // The kept set is usually a few tokens of a large vocabulary: order only as many of the
  // most likely tokens as the running mass needs, growing the sorted prefix 8x at a time (the
  // prefix is final: everything after it ranks below). Same order and sum as a full sort.
  double cum = 0.0;
  size_t keep = 0, sorted = 0;
  bool reached = false;
  while (!reached && keep < ids.size()) {
    const size_t want = std::min(ids.size(), sorted == 0 ? size_t{64} : sorted * 8);
    std::partial_sort(ids.begin() + static_cast<long>(sorted), ids.begin() + static_cast<long>(want), ids.end(), before);
    sorted = want;
    while (keep < sorted) {
      cum += std::exp(static_cast<double>(logits[static_cast<size_t>(ids[keep])]) - m) / total;
      ++keep;
      if (cum >= static_cast<double>(top_p)) {
        reached = true;
        break;
      }
    }
  }
  for (size_t i = keep; i < ids.size(); ++i) logits[static_cast<size_t>(ids[i])] = kNegInf;
}

int32_t argmax(std::span<const float> logits) {
  int32_t best = -1;
  float best_x = kNegInf;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] > best_x) {
      best_x = logits[i];
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

int32_t draw_from_logits(std::span<const float> logits, double u) {
  const float m = max_logit(logits);
  if (m == kNegInf) return -1;
  double total = 0.0;
  for (float x : logits)
    if (x > kNegInf) total += std::exp(static_cast<double>(x) - m);
  const double target = u * total;
  double cum = 0.0;
  int32_t last = -1;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!(logits[i] > kNegInf)) continue;
    cum += std::exp(static_cast<double>(logits[i]) - m);
    last = static_cast<int32_t>(i);
    if (cum > target) return last;
  }
  return last;  // rounding left u * total at the very end
}

}  // namespace ember
