#pragma once
// ChoiceDecoder: turns the token outputs of one sample ("choice") into OpenAI choice text:
// incremental UTF-8-safe detokenization, stop strings across token boundaries (held back while
// they might still match), and the per-token records that logprobs are built from.
#include "engine/outputs.h"
#include "server/stop_matcher.h"
#include "tokenizer/tokenizer.h"

#include <optional>
#include <string>
#include <vector>

namespace ember::server {

struct TokenRecord {
  int32_t id = 0;
  std::optional<SampleLogprobs> logprobs;  // when the request asked for logprobs
  size_t text_offset = 0;                  // bytes of choice text before this token's text
};

// What one engine output (or the end of the choice) adds to the choice.
struct ChoiceDelta {
  std::string text;
  std::vector<TokenRecord> tokens;  // tokens that produced text (stop / EOS tokens excluded)
  bool finished = false;            // this delta ends the choice
  FinishReason reason = FinishReason::kNone;
  std::string error;  // with FinishReason::kError
  bool empty() const { return text.empty() && tokens.empty() && !finished; }
};

class ChoiceDecoder {
 public:
  ChoiceDecoder(const Tokenizer& tokenizer, std::vector<std::string> stops);

  // Folds in one output of this choice. After the choice finished (a stop string, or the
  // engine's final output) everything is ignored and an empty delta returned.
  ChoiceDelta consume(const RequestOutput& out);
  // Ends the choice now (timeouts, shutdown): flushes held text and finishes with `reason`.
  ChoiceDelta finish(FinishReason reason);

  bool finished() const { return finished_; }
  FinishReason finish_reason() const { return reason_; }
  // Tokens the model generated for this choice up to where it ended (stop / EOS token included,
  // tokens after a matched stop string excluded): usage.completion_tokens.
  int num_tokens() const { return num_tokens_; }
  int num_prompt_tokens() const { return num_prompt_tokens_; }
  int num_cached_tokens() const { return num_cached_tokens_; }

 private:
  void end(ChoiceDelta& delta, FinishReason reason);

  IncrementalDetokenizer detok_;
  StopMatcher stop_;
  size_t text_bytes_ = 0;  // detokenized bytes so far (before stop trimming)
  int num_tokens_ = 0;
  int num_prompt_tokens_ = 0;
  int num_cached_tokens_ = 0;
  bool finished_ = false;
  FinishReason reason_ = FinishReason::kNone;
};

}  // namespace ember::server
