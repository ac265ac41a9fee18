#include "spec/ngram_proposer.h"

#include <algorithm>

namespace ember {

std::vector<int32_t> propose_ngram(std::span<const int32_t> tokens, const NgramSpecConfig& cfg) {
  const int len = static_cast<int>(tokens.size());
  if (cfg.num_tokens <= 0 || cfg.ngram_min < 1) return {};
  for (int n = std::min(cfg.ngram_max, len - 1); n >= cfg.ngram_min; --n) {
    const std::span<const int32_t> suffix = tokens.subspan(static_cast<size_t>(len - n));
    // Latest match first: the match's end e (exclusive) is before the suffix's own start, and
    // e < len so at least one token follows it.
    for (int e = len - 1; e >= n; --e) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + (e - n))) continue;
      const int k = std::min(cfg.num_tokens, len - e);
      return {tokens.begin() + e, tokens.begin() + e + k};
    }
  }
  return {};
}

}  // namespace ember
