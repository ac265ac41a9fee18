#include "tokenizer/loader_common.h"

namespace ember::tok {

std::optional<int32_t> find_token_id(const TokenizerParts& parts, std::string_view token) {
  for (const AddedToken& a : parts.added_tokens)
    if (a.content == token) return a.id;
  if (parts.model) return parts.model->token_to_id(token);
  return std::nullopt;
}

std::vector<int32_t> end_of_turn_ids(const TokenizerParts& parts) {
  static constexpr std::string_view kNames[] = {"<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|eom_id|>",
                                                "<|end|>",    "<|endoftext|>", "<|end_of_text|>"};
  std::vector<int32_t> ids;
  for (std::string_view name : kNames) {
    for (const AddedToken& a : parts.added_tokens)
      if (a.special && a.content == name) ids.push_back(a.id);
  }
  return ids;
}

}  // namespace ember::tok
