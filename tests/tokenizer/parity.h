#pragma once
// Checks a tokenizer against the HF expectations of one expected/*.json file.
#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

namespace ember::test {

// ids, ids without specials, parse_special=false ids, decoded text (with and without special
// tokens), vocabulary size, pieces and special flags, for every corpus string.
void expect_parity(const nlohmann::json& expected, const Tokenizer& tok);
// Streams every case's ids through IncrementalDetokenizer: every chunk is valid UTF-8 and the
// chunks add up to HF's decoded text.
void expect_incremental_parity(const nlohmann::json& expected, const Tokenizer& tok);

}  // namespace ember::test
