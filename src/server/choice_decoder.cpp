#include "server/choice_decoder.h"

namespace ember::server {

ChoiceDecoder::ChoiceDecoder(const Tokenizer& tokenizer, std::vector<std::string> stops)
    : detok_(tokenizer, /*skip_special=*/true), stop_(std::move(stops)) {}

void ChoiceDecoder::end(ChoiceDelta& delta, FinishReason reason) {
  // Text the detokenizer held (an incomplete character) goes through the stop matcher too.
  delta.text += stop_.push(detok_.flush());
  if (!stop_.stopped()) delta.text += stop_.flush();
  else reason = FinishReason::kStop;
  finished_ = true;
  reason_ = reason;
  delta.finished = true;
  delta.reason = reason;
}

ChoiceDelta ChoiceDecoder::consume(const RequestOutput& out) {
  ChoiceDelta delta;
  if (finished_) return delta;
  num_prompt_tokens_ = out.num_prompt_tokens;
  num_cached_tokens_ = out.num_cached_tokens;
  for (size_t i = 0; i < out.new_token_ids.size(); ++i) {
    const int32_t id = out.new_token_ids[i];
    ++num_tokens_;
    // The EOS / stop token that ended generation counts as generated but is not text.
    if (out.stop_token_id && *out.stop_token_id == id && i + 1 == out.new_token_ids.size()) break;
    TokenRecord rec;
    rec.id = id;
    rec.text_offset = text_bytes_;
    if (i < out.logprobs.size()) rec.logprobs = out.logprobs[i];
    const std::string piece = detok_.push(id);
    text_bytes_ += piece.size();
    delta.tokens.push_back(std::move(rec));
    delta.text += stop_.push(piece);
    if (stop_.stopped()) {
      end(delta, FinishReason::kStop);
      return delta;
    }
  }
  if (out.finished) {
    end(delta, out.finish_reason);
    delta.error = out.error;
  }
  return delta;
}

ChoiceDelta ChoiceDecoder::finish(FinishReason reason) {
  ChoiceDelta delta;
  if (!finished_) end(delta, reason);
  return delta;
}

}  // namespace ember::server
