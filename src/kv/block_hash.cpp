#include "kv/block_hash.h"

#include "core/check.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace ember {

BlockHash hash_block(BlockHash parent, std::span<const int32_t> tokens, std::string_view salt) {
  // Streaming state so parent, tokens and salt need no concatenation buffer.
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  XXH3_64bits_update(&state, &parent, sizeof(parent));
  XXH3_64bits_update(&state, tokens.data(), tokens.size_bytes());
  if (!salt.empty()) {
    // Length first: salt "ab" + tokens must never collide with salt "a" + other tokens.
    const uint64_t n = salt.size();
    XXH3_64bits_update(&state, &n, sizeof(n));
    XXH3_64bits_update(&state, salt.data(), salt.size());
  }
  return XXH3_64bits_digest(&state);
}

void extend_block_hashes(std::vector<BlockHash>& hashes, std::span<const int32_t> tokens,
                         int block_size, std::string_view salt) {
  EMBER_CHECK(block_size > 0);
  const size_t n_full = tokens.size() / static_cast<size_t>(block_size);
  for (size_t b = hashes.size(); b < n_full; ++b) {
    const BlockHash parent = b == 0 ? kRootBlockHash : hashes[b - 1];
    // The salt enters only the first block; the chain carries it on.
    hashes.push_back(hash_block(parent, tokens.subspan(b * block_size, block_size),
                                b == 0 ? salt : std::string_view()));
  }
}

}  // namespace ember
