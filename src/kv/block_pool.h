#pragma once
// BlockPool: the KV cache's blocks as ids 0..n_blocks-1 with reference counts. Blocks with
// ref count 0 sit on a free list in LRU order (least recently freed first). A freed block
// that holds a full, hashed block of tokens keeps its hash while on the free list, so a later
// request with the same prefix can revive it (touch); allocation takes blocks from the LRU end
// and evicts their hash then. Host-only bookkeeping: the K/V bytes live in the executor.
#include "core/status.h"
#include "kv/block_hash.h"

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace ember {

class BlockPool {
 public:
  explicit BlockPool(int n_blocks, bool enable_caching = true);

  int n_blocks() const { return static_cast<int>(ref_count_.size()); }
  // Blocks with ref count 0, cached or not (all of them can be allocated).
  int n_free() const { return n_free_; }
  int n_used() const { return n_blocks() - n_free_; }

  // Takes n blocks from the LRU end of the free list (evicting any cached hash), sets their
  // ref count to 1 and appends their ids to `out`. Returns false (and changes nothing) when
  // fewer than n blocks are free.
  bool allocate(int n, std::vector<int32_t>& out);
  // Adds a reference to each block; a free (cached) block leaves the free list: a prefix-cache
  // hit revives it.
  void touch(std::span<const int32_t> ids);
  // Drops a reference from each block, in order; blocks reaching 0 join the MRU end of the
  // free list in that order (callers pass a sequence's tail first so it is evicted first).
  void free(std::span<const int32_t> ids);

  // The block holding the tokens with this hash, if cached (in use or on the free list).
  std::optional<int32_t> lookup(BlockHash hash) const;
  // Records that full block `id` (in use) holds the tokens with this hash. Returns false when
  // another block already holds them; `id` then stays unhashed (a duplicate, freed normally).
  bool cache(int32_t id, BlockHash hash);

  int ref_count(int32_t id) const { return ref_count_[static_cast<size_t>(id)]; }
  bool is_cached(int32_t id) const { return has_hash_[static_cast<size_t>(id)]; }
  int n_cached() const { return static_cast<int>(hash_to_block_.size()); }
  int64_t n_evictions() const { return n_evictions_; }
  bool caching_enabled() const { return enable_caching_; }
  // Free block ids from LRU to MRU (tests).
  std::vector<int32_t> free_list() const;
  // Checks the free list against the ref counts and the hash map against the blocks; a
  // failure names the first inconsistency. For tests and debug builds.
  Status check_consistency() const;

 private:
  void list_remove(int32_t id);
  void list_push_back(int32_t id);
  void evict_hash(int32_t id);

  bool enable_caching_;
  std::vector<int32_t> ref_count_;
  std::vector<BlockHash> hash_;
  std::vector<uint8_t> has_hash_;
  // Intrusive doubly linked free list over block ids; -1 ends it.
  std::vector<int32_t> prev_, next_;
  std::vector<uint8_t> on_free_list_;
  int32_t head_ = -1, tail_ = -1;
  int n_free_ = 0;
  std::unordered_map<BlockHash, int32_t> hash_to_block_;
  int64_t n_evictions_ = 0;
};

}  // namespace ember
