#pragma once
// Helpers shared by the tokenizer.json and GGUF loaders.
#include "tokenizer/tokenizer.h"

#include <optional>
#include <string_view>
#include <vector>

namespace ember::tok {

// Id of a token string: an added token first, then the model vocabulary.
std::optional<int32_t> find_token_id(const TokenizerParts& parts, std::string_view token);

// Special tokens that end a turn in the chat formats of the model families ember runs
// (<|im_end|>, <end_of_turn>, <|eot_id|>, ...), where the vocabulary has them.
std::vector<int32_t> end_of_turn_ids(const TokenizerParts& parts);

}  // namespace ember::tok
