#pragma once
// KvCacheManager: per-sequence block tables over a BlockPool, with prefix caching (reuse of
// cached full blocks), copy-on-write for forked sequences and usage statistics. It knows
// token ids and block ids only; the scheduler decides which sequence gets slots, and the
// executor stores the K/V bytes at the slots.
#include "core/status.h"
#include "kv/block_hash.h"
#include "kv/block_pool.h"

#include <cstdint>
#include <span>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ember {

using KvSeqId = int64_t;
// (src, dst) block ids: the executor copies src's K/V into dst before the step runs.
using BlockCopy = std::pair<int32_t, int32_t>;

struct KvManagerConfig {
  int n_blocks = 0;
  int block_size = 16;
  bool enable_prefix_caching = true;
};

// Cached full blocks that can stand for the first n_tokens of a sequence.
struct CachedPrefix {
  std::vector<int32_t> blocks;
  int n_tokens = 0;
  int n_query_tokens = 0;  // the sequence's length at lookup (hit-rate denominator)
};

struct KvStats {
  int n_blocks = 0;
  int n_free = 0;   // includes free-but-cached blocks
  int n_used = 0;
  int n_cached = 0;  // blocks holding a hash (used or free)
  int64_t prefix_queries = 0;  // tokens looked up in the prefix cache by admitted sequences
  int64_t prefix_hits = 0;     // tokens found
  int64_t n_evictions = 0;
  int64_t n_cow_copies = 0;
  // Slots of blocks held by sequences vs slots holding a token (a shared block counts once).
  int64_t slots_allocated = 0;
  int64_t slots_used = 0;
};

class KvCacheManager {
 public:
  explicit KvCacheManager(KvManagerConfig config);

  int block_size() const { return config_.block_size; }
  int n_blocks() const { return pool_.n_blocks(); }
  int n_free_blocks() const { return pool_.n_free(); }

  // Longest run of cached full blocks at the start of `tokens` (hashes chained with `salt`),
  // leaving at least the last token uncovered: a sequence must compute one token to get
  // logits. Changes nothing but a per-sequence hash memo.
  CachedPrefix find_cached_prefix(KvSeqId seq, std::span<const int32_t> tokens,
                                  std::string_view salt);
  // Gives `seq` slots for n_new_tokens more tokens after its first n_computed_tokens (which,
  // with `prefix`, must already be backed by its table). `prefix` (from find_cached_prefix,
  // only for a sequence with no blocks yet and n_computed_tokens == 0) is taken over first.
  // When the first new token lands in a partly filled block shared with a fork, the block is
  // copied first and (src, dst) appended to `copies`. Returns false, changing nothing, when
  // the free blocks do not suffice.
  bool allocate_slots(KvSeqId seq, int n_computed_tokens, int n_new_tokens,
                      const CachedPrefix* prefix, std::vector<BlockCopy>& copies);
  // Hashes and caches the full blocks among seq's first n_computed_tokens tokens (which must
  // equal `tokens`' prefix and have their K/V written).
  void cache_full_blocks(KvSeqId seq, std::span<const int32_t> tokens, int n_computed_tokens,
                         std::string_view salt);
  // Releases seq's blocks (tail first, so its last blocks are evicted first) and forgets it.
  // Unknown ids are fine.
  void free(KvSeqId seq);
  // `child` gets `parent`'s block table; every block gains a reference.
  void fork(KvSeqId parent, KvSeqId child);

  bool has_blocks(KvSeqId seq) const;
  // Sequences holding at least one block (tests: compare with the scheduler's running set).
  std::vector<KvSeqId> seqs_with_blocks() const;
  std::span<const int32_t> block_table(KvSeqId seq) const;

  KvStats stats() const;
  const BlockPool& pool() const { return pool_; }
  // Pool consistency plus: every block's ref count equals the number of tables holding it,
  // and a block shared by two tables is either cached (same hashed prefix) or shared at the
  // same position (a fork). The first failure is described.
  Status check_invariants() const;

 private:
  struct SeqState {
    std::vector<int32_t> blocks;
    std::vector<BlockHash> hashes;  // memo of full-block hashes of the sequence's tokens
    int n_cached_blocks = 0;        // leading blocks already offered to the cache
    int n_tokens = 0;               // tokens with slots (for usage stats)
  };
  int cow_blocks_needed(const SeqState& st, int n_computed_tokens, int n_new_tokens) const;

  KvManagerConfig config_;
  BlockPool pool_;
  std::unordered_map<KvSeqId, SeqState> seqs_;
  int64_t prefix_queries_ = 0;
  int64_t prefix_hits_ = 0;
  int64_t n_cow_copies_ = 0;
};

// KV cache sizing: how many blocks fit in `budget_bytes` (0 when even one does not).
int kv_blocks_for_budget(size_t budget_bytes, size_t kv_bytes_per_block);

}  // namespace ember
