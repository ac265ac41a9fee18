#pragma once
// Block hashes for prefix caching: a full block of tokens is named by a hash chained over its
// parent block's hash and its own token ids, so equal hashes mean equal whole prefixes. The
// cache salt enters the first block's hash and, through the chain, every later one, so
// requests with different salts never share blocks.
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace ember {

using BlockHash = uint64_t;

// Hash of the block after `parent` (kRootBlockHash for the first block) holding `tokens`;
// `salt` is given for the first block only (empty: none).
BlockHash hash_block(BlockHash parent, std::span<const int32_t> tokens, std::string_view salt);

inline constexpr BlockHash kRootBlockHash = 0x9e3779b97f4a7c15ull;

// Appends to `hashes` the hashes of the full blocks of `tokens` not hashed yet (hashes.size()
// blocks are assumed done, and must have been computed from the same tokens and salt).
void extend_block_hashes(std::vector<BlockHash>& hashes, std::span<const int32_t> tokens,
                         int block_size, std::string_view salt);

}  // namespace ember
