#pragma once
// N-gram drafting for speculative decoding ("prompt lookup"): the tokens that followed the most
// recent earlier occurrence of a sequence's last n tokens (prompt and output alike) are
// proposed as its next ones. Costs no model: it pays where outputs repeat their context (code
// edits, quoting, extraction, summaries), and a draft that is wrong costs only its verification
// rows. The engine verifies drafts exactly (LlmEngine: each row's pick against the draft), so
// they never change what is generated, only how many tokens a step yields.
#include <cstdint>
#include <span>
#include <vector>

namespace ember {

struct NgramSpecConfig {
  int num_tokens = 0;  // drafts proposed a step (0: no speculative decoding)
  int ngram_min = 1;   // shortest suffix matched
  int ngram_max = 3;   // longest suffix matched (tried first)
  // The engine caps each sequence's drafts by what its last verified step kept (all kept: one
  // more, up to num_tokens; else one past the kept ones), so a sequence whose drafts fail
  // verifies fewer rows (LlmEngine; off: always up to num_tokens).
  bool adaptive = true;
};

// Up to cfg.num_tokens drafts for the continuation of `tokens`: for n from ngram_max down to
// ngram_min, the last n tokens are looked up among earlier positions (latest first); the first
// match proposes the tokens after it (fewer when the history ends first). Empty when nothing
// matches or num_tokens <= 0. O(len * ngram_max) per call.
std::vector<int32_t> propose_ngram(std::span<const int32_t> tokens, const NgramSpecConfig& cfg);

}  // namespace ember
