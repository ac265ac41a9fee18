#pragma once
// ForwardBatch: everything a model's forward pass needs about one step, and nothing about
// requests. Tokens are grouped by sequence; each sequence contributes a chunk of new tokens
// (a whole prompt, a prefill chunk, one decode token, or draft tokens to verify).
#include <cstdint>
#include <vector>

namespace ember {

struct ForwardBatch {
  std::vector<int32_t> token_ids;     // [n_tokens]
  std::vector<int32_t> positions;     // [n_tokens]
  std::vector<int32_t> slot_mapping;  // [n_tokens] cache slot = block * block_size + offset
  std::vector<int32_t> query_start;   // [n_seqs + 1]
  std::vector<int32_t> seq_lens;      // [n_seqs] K/V length after this step
  std::vector<int32_t> block_tables;  // [n_seqs, max_blocks_per_seq], padded with 0
  int max_blocks_per_seq = 0;
  // Rows of the batch whose logits are wanted (e.g. the last token of each sequence, or
  // every token for `ember logits` / speculative verification), ascending.
  std::vector<int32_t> logit_rows;

  int n_tokens() const { return static_cast<int>(token_ids.size()); }
  int n_seqs() const { return static_cast<int>(seq_lens.size()); }
};

}  // namespace ember
