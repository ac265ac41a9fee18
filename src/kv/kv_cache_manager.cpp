#include "kv/kv_cache_manager.h"

#include "core/check.h"

#include <algorithm>

namespace ember {

namespace {
int ceil_div(int a, int b) { return (a + b - 1) / b; }
}  // namespace

KvCacheManager::KvCacheManager(KvManagerConfig config)
    : config_(config), pool_(config.n_blocks, config.enable_prefix_caching) {
  EMBER_CHECK(config.block_size > 0);
}

CachedPrefix KvCacheManager::find_cached_prefix(KvSeqId seq, std::span<const int32_t> tokens,
                                                std::string_view salt) {
  CachedPrefix prefix;
  prefix.n_query_tokens = static_cast<int>(tokens.size());
  if (!config_.enable_prefix_caching || tokens.empty()) return prefix;
  SeqState& st = seqs_[seq];
  extend_block_hashes(st.hashes, tokens, config_.block_size, salt);
  // Never the whole sequence: the last token must run through the model to give logits.
  const size_t max_blocks = (tokens.size() - 1) / static_cast<size_t>(config_.block_size);
  for (size_t b = 0; b < max_blocks; ++b) {
    std::optional<int32_t> id = pool_.lookup(st.hashes[b]);
    if (!id) break;
    prefix.blocks.push_back(*id);
  }
  prefix.n_tokens = static_cast<int>(prefix.blocks.size()) * config_.block_size;
  return prefix;
}

int KvCacheManager::cow_blocks_needed(const SeqState& st, int n_computed_tokens,
                                      int n_new_tokens) const {
  if (n_new_tokens == 0) return 0;
  // Only the block receiving the first new token can be both shared and written: forks
  // share whole tables, and every later block is allocated fresh for this sequence.
  const size_t b = static_cast<size_t>(n_computed_tokens / config_.block_size);
  return b < st.blocks.size() && pool_.ref_count(st.blocks[b]) > 1 ? 1 : 0;
}

bool KvCacheManager::allocate_slots(KvSeqId seq, int n_computed_tokens, int n_new_tokens,
                                    const CachedPrefix* prefix, std::vector<BlockCopy>& copies) {
  EMBER_CHECK(n_computed_tokens >= 0 && n_new_tokens >= 0);
  SeqState& st = seqs_[seq];
  const int n_prefix_blocks = prefix ? static_cast<int>(prefix->blocks.size()) : 0;
  const int n_prefix_tokens = prefix ? prefix->n_tokens : 0;
  if (n_prefix_blocks > 0) {
    EMBER_CHECK(st.blocks.empty() && n_computed_tokens == 0,
                "prefix offered to sequence {} that already has blocks", seq);
  }
  const int n_total = n_computed_tokens + n_prefix_tokens + n_new_tokens;
  const int n_have = static_cast<int>(st.blocks.size()) + n_prefix_blocks;
  const int n_alloc = std::max(0, ceil_div(n_total, config_.block_size) - n_have);
  const int n_cow = cow_blocks_needed(st, n_computed_tokens + n_prefix_tokens, n_new_tokens);
  // Prefix blocks on the free list stop being free once we take them over.
  int n_revived = 0;
  for (int i = 0; i < n_prefix_blocks; ++i) n_revived += pool_.ref_count(prefix->blocks[i]) == 0;
  if (n_alloc + n_cow > pool_.n_free() - n_revived) return false;

  if (prefix) {
    pool_.touch(prefix->blocks);
    st.blocks = prefix->blocks;
    st.n_cached_blocks = n_prefix_blocks;
    prefix_queries_ += prefix->n_query_tokens;
    prefix_hits_ += prefix->n_tokens;
  }
  if (n_cow) {
    const size_t b = static_cast<size_t>((n_computed_tokens + n_prefix_tokens) / config_.block_size);
    std::vector<int32_t> fresh;
    EMBER_CHECK(pool_.allocate(1, fresh));
    const int32_t shared = st.blocks[b];
    copies.emplace_back(shared, fresh[0]);
    pool_.free(std::span<const int32_t>(&shared, 1));
    st.blocks[b] = fresh[0];
    ++n_cow_copies_;
  }
  EMBER_CHECK(pool_.allocate(n_alloc, st.blocks));
  st.n_tokens = std::max(st.n_tokens, n_total);
  return true;
}

void KvCacheManager::cache_full_blocks(KvSeqId seq, std::span<const int32_t> tokens,
                                       int n_computed_tokens, std::string_view salt) {
  if (!config_.enable_prefix_caching) return;
  auto it = seqs_.find(seq);
  EMBER_CHECK(it != seqs_.end(), "caching blocks of unknown sequence {}", seq);
  SeqState& st = it->second;
  EMBER_CHECK(n_computed_tokens <= static_cast<int>(tokens.size()));
  const int n_full = n_computed_tokens / config_.block_size;
  EMBER_CHECK(n_full <= static_cast<int>(st.blocks.size()));
  if (n_full <= st.n_cached_blocks) return;
  extend_block_hashes(st.hashes, tokens.first(static_cast<size_t>(n_full) * config_.block_size),
                      config_.block_size, salt);
  for (int b = st.n_cached_blocks; b < n_full; ++b) {
    pool_.cache(st.blocks[static_cast<size_t>(b)], st.hashes[static_cast<size_t>(b)]);
  }
  st.n_cached_blocks = n_full;
}

void KvCacheManager::free(KvSeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  std::vector<int32_t>& blocks = it->second.blocks;
  std::reverse(blocks.begin(), blocks.end());
  pool_.free(blocks);
  seqs_.erase(it);
}

void KvCacheManager::fork(KvSeqId parent, KvSeqId child) {
  auto it = seqs_.find(parent);
  EMBER_CHECK(it != seqs_.end(), "fork of unknown sequence {}", parent);
  EMBER_CHECK(!has_blocks(child), "fork into sequence {} that has blocks", child);
  const SeqState& p = it->second;
  SeqState c;
  c.blocks = p.blocks;
  // Only hashes of cached blocks are certainly shared: later ones may cover tokens the
  // parent has and the child has not.
  c.hashes.assign(p.hashes.begin(),
                  p.hashes.begin() + std::min<size_t>(p.hashes.size(), p.n_cached_blocks));
  c.n_cached_blocks = p.n_cached_blocks;
  c.n_tokens = p.n_tokens;
  pool_.touch(c.blocks);
  seqs_[child] = std::move(c);
}

bool KvCacheManager::has_blocks(KvSeqId seq) const {
  auto it = seqs_.find(seq);
  return it != seqs_.end() && !it->second.blocks.empty();
}

std::vector<KvSeqId> KvCacheManager::seqs_with_blocks() const {
  std::vector<KvSeqId> ids;
  for (const auto& [id, st] : seqs_)
    if (!st.blocks.empty()) ids.push_back(id);
  return ids;
}

std::span<const int32_t> KvCacheManager::block_table(KvSeqId seq) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return {};
  return it->second.blocks;
}

KvStats KvCacheManager::stats() const {
  KvStats s;
  s.n_blocks = pool_.n_blocks();
  s.n_free = pool_.n_free();
  s.n_used = pool_.n_used();
  s.n_cached = pool_.n_cached();
  s.prefix_queries = prefix_queries_;
  s.prefix_hits = prefix_hits_;
  s.n_evictions = pool_.n_evictions();
  s.n_cow_copies = n_cow_copies_;
  s.slots_allocated = static_cast<int64_t>(s.n_used) * config_.block_size;
  // A block shared by several sequences counts once, as full as its fullest user has it.
  std::vector<int> fill(static_cast<size_t>(pool_.n_blocks()), 0);
  for (const auto& [id, st] : seqs_) {
    for (size_t b = 0; b < st.blocks.size(); ++b) {
      const int n = std::clamp(st.n_tokens - static_cast<int>(b) * config_.block_size, 0,
                               config_.block_size);
      int& f = fill[static_cast<size_t>(st.blocks[b])];
      f = std::max(f, n);
    }
  }
  for (int f : fill) s.slots_used += f;
  return s;
}

Status KvCacheManager::check_invariants() const {
  EMBER_RETURN_IF_ERROR(pool_.check_consistency());
  std::vector<int> refs(static_cast<size_t>(pool_.n_blocks()), 0);
  // First (sequence, position) seen for each block, to check how shared blocks are shared.
  std::vector<std::pair<KvSeqId, int>> first_user(static_cast<size_t>(pool_.n_blocks()), {-1, -1});
  for (const auto& [id, st] : seqs_) {
    for (size_t b = 0; b < st.blocks.size(); ++b) {
      const int32_t blk = st.blocks[b];
      if (blk < 0 || blk >= pool_.n_blocks())
        return Status::errorf("sequence {} holds invalid block {}", id, blk);
      ++refs[static_cast<size_t>(blk)];
      auto& first = first_user[static_cast<size_t>(blk)];
      if (first.first < 0) {
        first = {id, static_cast<int>(b)};
        continue;
      }
      if (first.first == id)
        return Status::errorf("sequence {} holds block {} twice", id, blk);
      if (first.second != static_cast<int>(b))
        return Status::errorf("block {} shared at positions {} and {} (sequences {}, {})", blk,
                              first.second, b, first.first, id);
      if (pool_.is_cached(blk)) continue;  // same hashed prefix
      // Not cached: only a fork may share it, and a fork shares everything before it too.
      std::span<const int32_t> other = seqs_.at(first.first).blocks;
      if (!std::equal(st.blocks.begin(), st.blocks.begin() + static_cast<long>(b), other.begin()))
        return Status::errorf("uncached block {} shared by sequences {} and {} that are no fork",
                              blk, first.first, id);
    }
  }
  for (int32_t blk = 0; blk < pool_.n_blocks(); ++blk) {
    if (refs[static_cast<size_t>(blk)] != pool_.ref_count(blk))
      return Status::errorf("block {} has ref count {} but {} holders", blk, pool_.ref_count(blk),
                            refs[static_cast<size_t>(blk)]);
  }
  return Status::ok();
}

int kv_blocks_for_budget(size_t budget_bytes, size_t kv_bytes_per_block) {
  EMBER_CHECK(kv_bytes_per_block > 0);
  const size_t n = budget_bytes / kv_bytes_per_block;
  return static_cast<int>(std::min<size_t>(n, static_cast<size_t>(INT32_MAX)));
}

}  // namespace ember
