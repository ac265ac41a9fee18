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
// Tokenizer::token_bytes_table (JSON mode judges tokens by these bytes): every case's ids'
// bytes joined (UTF-8 repaired) are HF's decoded text without special tokens, give or take
// spaces that HF's decoders drop.
void expect_token_bytes_parity(const nlohmann::json& expected, const Tokenizer& tok);

}  // namespace ember::test
