#pragma once
// The ForwardBatch of one sequence's step for the runner tests: tokens at positions start..,
// slots through the block table, logits of every new token (all_logits) or the last.
#include "model/forward_batch.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ember {

inline ForwardBatch one_sequence_batch(const std::vector<int32_t>& table, int block_size, int start,
                                       const std::vector<int32_t>& tokens, bool all_logits) {
  ForwardBatch b;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const int pos = start + static_cast<int>(i);
    b.token_ids.push_back(tokens[i]);
    b.positions.push_back(pos);
    b.slot_mapping.push_back(table[static_cast<std::size_t>(pos / block_size)] * block_size + pos % block_size);
    if (all_logits || i + 1 == tokens.size()) b.logit_rows.push_back(static_cast<int32_t>(i));
  }
  b.query_start = {0, static_cast<int32_t>(tokens.size())};
  b.seq_lens = {start + static_cast<int32_t>(tokens.size())};
  b.block_tables = table;
  b.max_blocks_per_seq = static_cast<int>(table.size());
  return b;
}

}  // namespace ember
