#pragma once
// Merges recovered from a vocabulary that stores none (SentencePiece GGUF files): every split
// of a token into two tokens is a merge, ordered as transformers' generate_merges orders them,
// so that the BPE built from them is the HF oracle's.
#include "tokenizer/bpe_model.h"

#include <string>
#include <utility>
#include <vector>

namespace ember::tok {

// tokens[i] with scores[i] (a later duplicate token keeps its first position and takes the later
// score, as a Python dict does); vocab maps token -> id. Merges are sorted by (score, length of
// the left part, length of the right part), descending or ascending, ties kept in vocabulary
// order and then by (left id, right id).
std::vector<MergeIds> generate_merges(const std::vector<std::string>& tokens, const std::vector<double>& scores,
                                      const TokenIndex& vocab, bool descending);

}  // namespace ember::tok
