#pragma once
// Constrained decoding to one JSON object (OpenAI's response_format json_object / json_schema):
// before a token is picked, every token whose bytes cannot continue the output into a valid
// object is masked, as vLLM's guided decoding does (the mask comes before temperature and
// truncation, so top-p / top-k act on the allowed tokens only). End-of-sequence and stop
// tokens are allowed once the object is closed, and only then.
#include "sample/json_matcher.h"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ember {

// The bytes each token id adds to a text (in its middle: a SentencePiece "▁x" is " x", a byte
// token <0x0A> is "\n"); special tokens and ids without text have "" and are never allowed.
class JsonVocab {
 public:
  explicit JsonVocab(std::vector<std::string> token_bytes);
  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  // Whether token `id` can follow the bytes that brought the matcher to `m`.
  bool allows(const JsonMatcher& m, int32_t id) const;

 private:
  std::vector<std::string> bytes_;
  // 1: non-empty, whole UTF-8 characters, no control character, '"' or '\\': inside a string
  // such a token keeps the matcher's state, so it is allowed there without a walk over it.
  std::vector<uint8_t> plain_;
};

// The matcher (of schema, null for any object) after the output so far; false when those bytes
// are not the start of such an object (a request that came without the constraint, or ids
// outside the vocabulary).
bool json_state_of(const JsonVocab& vocab, const JsonSchema* schema, std::span<const int32_t> output_ids,
                   JsonMatcher& m);

// Masks (-inf) the tokens of logits row x (already adjusted: bias, penalties) that cannot
// continue `output_ids` into one JSON object (matching schema, if not null). end_ids (EOS and
// the request's stop ids) stay only when the object is complete. Greedy rows stop at the first
// allowed maximum (the larger ones are masked, the rest left alone: argmax(x) is then that
// token); other rows get the full mask. If nothing is left, the first end id is allowed, so a request ends rather than picking
// an unconstrained token.
void constrain_to_json(std::span<float> x, const JsonVocab& vocab, const JsonSchema* schema,
                       std::span<const int32_t> output_ids, std::span<const int32_t> end_ids, bool greedy);

}  // namespace ember
