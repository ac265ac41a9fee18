#include "kv/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>

namespace ember {
namespace {

std::vector<int32_t> iota_tokens(int n, int32_t start = 0) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

void expect_ok(const Status& st) { ASSERT_TRUE(st.is_ok()) << st.message(); }

TEST(KvCacheManager, AllocatesBlocksOnDemand) {
  KvCacheManager kv({.n_blocks = 8, .block_size = 4, .enable_prefix_caching = true});
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(kv.allocate_slots(1, 0, 5, nullptr, copies));  // 5 tokens: 2 blocks
  EXPECT_EQ(kv.block_table(1).size(), 2u);
  ASSERT_TRUE(kv.allocate_slots(1, 5, 3, nullptr, copies));  // 8 tokens: still 2
  EXPECT_EQ(kv.block_table(1).size(), 2u);
  ASSERT_TRUE(kv.allocate_slots(1, 8, 1, nullptr, copies));  // 9: 3
  EXPECT_EQ(kv.block_table(1).size(), 3u);
  EXPECT_TRUE(copies.empty());
  const KvStats s = kv.stats();
  EXPECT_EQ(s.n_used, 3);
  EXPECT_EQ(s.slots_allocated, 12);
  EXPECT_EQ(s.slots_used, 9);
  kv.free(1);
  EXPECT_EQ(kv.n_free_blocks(), 8);
  expect_ok(kv.check_invariants());
}

TEST(KvCacheManager, FailsCleanlyWhenOutOfBlocks) {
  KvCacheManager kv({.n_blocks = 3, .block_size = 4, .enable_prefix_caching = true});
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(kv.allocate_slots(1, 0, 8, nullptr, copies));
  EXPECT_FALSE(kv.allocate_slots(2, 0, 8, nullptr, copies));
  EXPECT_EQ(kv.n_free_blocks(), 1);
  EXPECT_FALSE(kv.has_blocks(2));
  EXPECT_FALSE(kv.allocate_slots(1, 8, 5, nullptr, copies));
  EXPECT_EQ(kv.block_table(1).size(), 2u);
  expect_ok(kv.check_invariants());
}

TEST(KvCacheManager, PrefixHitNeverCoversTheWholePrompt) {
  KvCacheManager kv({.n_blocks = 16, .block_size = 4, .enable_prefix_caching = true});
  const std::vector<int32_t> prompt = iota_tokens(12);  // exactly 3 blocks
  std::vector<BlockCopy> copies;
  CachedPrefix none = kv.find_cached_prefix(1, prompt, "");
  EXPECT_EQ(none.n_tokens, 0);
  ASSERT_TRUE(kv.allocate_slots(1, 0, 12, &none, copies));
  kv.cache_full_blocks(1, prompt, 12, "");
  // Same prompt: all 3 blocks are cached, but only 2 may be used (the last token must run).
  CachedPrefix hit = kv.find_cached_prefix(2, prompt, "");
  EXPECT_EQ(hit.n_tokens, 8);
  EXPECT_EQ(hit.n_query_tokens, 12);
  ASSERT_TRUE(kv.allocate_slots(2, 0, 4, &hit, copies));
  std::span<const int32_t> t1 = kv.block_table(1), t2 = kv.block_table(2);
  EXPECT_EQ(t2[0], t1[0]);
  EXPECT_EQ(t2[1], t1[1]);
  EXPECT_NE(t2[2], t1[2]);
  EXPECT_EQ(kv.pool().ref_count(t1[0]), 2);
  // One token longer: all three blocks hit.
  std::vector<int32_t> longer = prompt;
  longer.push_back(99);
  EXPECT_EQ(kv.find_cached_prefix(3, longer, "").n_tokens, 12);
  // Another salt: nothing.
  EXPECT_EQ(kv.find_cached_prefix(4, longer, "other").n_tokens, 0);
  const KvStats s = kv.stats();
  EXPECT_EQ(s.prefix_queries, 24);
  EXPECT_EQ(s.prefix_hits, 8);
  kv.free(3);
  kv.free(4);
  expect_ok(kv.check_invariants());
}

TEST(KvCacheManager, FreedCachedBlocksAreRevivedThenEvictedLru) {
  KvCacheManager kv({.n_blocks = 4, .block_size = 2, .enable_prefix_caching = true});
  std::vector<BlockCopy> copies;
  const std::vector<int32_t> p = {1, 2, 3, 4, 5};
  CachedPrefix pre = kv.find_cached_prefix(1, p, "");
  ASSERT_TRUE(kv.allocate_slots(1, 0, 5, &pre, copies));
  kv.cache_full_blocks(1, p, 5, "");
  kv.free(1);
  EXPECT_EQ(kv.n_free_blocks(), 4);
  // Revive: the prefix blocks come back from the free list, counted as needed blocks.
  CachedPrefix hit = kv.find_cached_prefix(2, p, "");
  EXPECT_EQ(hit.n_tokens, 4);
  ASSERT_TRUE(kv.allocate_slots(2, 0, 1, &hit, copies));
  EXPECT_EQ(kv.n_free_blocks(), 1);
  kv.free(2);
  // A new unrelated sequence needing all 4 blocks evicts the cached ones.
  const std::vector<int32_t> q = {9, 9, 9, 9, 9, 9, 9, 9};
  CachedPrefix none = kv.find_cached_prefix(3, q, "");
  ASSERT_TRUE(kv.allocate_slots(3, 0, 8, &none, copies));
  EXPECT_EQ(kv.find_cached_prefix(4, p, "").n_tokens, 0);
  EXPECT_GE(kv.stats().n_evictions, 2);
  kv.free(4);
  expect_ok(kv.check_invariants());
}

TEST(KvCacheManager, RevivalCountsAgainstFreeBlocks) {
  // 3 blocks; a cached free prefix of 2 blocks plus 2 new blocks does not fit.
  KvCacheManager kv({.n_blocks = 3, .block_size = 2, .enable_prefix_caching = true});
  std::vector<BlockCopy> copies;
  const std::vector<int32_t> p = {1, 2, 3, 4, 5};
  CachedPrefix pre = kv.find_cached_prefix(1, p, "");
  ASSERT_TRUE(kv.allocate_slots(1, 0, 5, &pre, copies));
  kv.cache_full_blocks(1, p, 5, "");
  kv.free(1);
  std::vector<int32_t> longer = {1, 2, 3, 4, 5, 6, 7, 8};
  CachedPrefix hit = kv.find_cached_prefix(2, longer, "");
  EXPECT_EQ(hit.n_tokens, 4);
  EXPECT_FALSE(kv.allocate_slots(2, 0, 4, &hit, copies));  // needs 2 cached + 2 new > 3
  EXPECT_EQ(kv.n_free_blocks(), 3);
  kv.free(2);
  expect_ok(kv.check_invariants());
}

TEST(KvCacheManager, ForkSharesBlocksAndCopiesOnWrite) {
  KvCacheManager kv({.n_blocks = 8, .block_size = 4, .enable_prefix_caching = true});
  std::vector<BlockCopy> copies;
  const std::vector<int32_t> prompt = iota_tokens(6);  // block 0 full, block 1 half
  CachedPrefix pre = kv.find_cached_prefix(1, prompt, "");
  ASSERT_TRUE(kv.allocate_slots(1, 0, 6, &pre, copies));
  kv.cache_full_blocks(1, prompt, 6, "");
  kv.fork(1, 2);
  kv.fork(1, 3);
  const std::vector<int32_t> t1(kv.block_table(1).begin(), kv.block_table(1).end());
  EXPECT_EQ(kv.pool().ref_count(t1[1]), 3);
  expect_ok(kv.check_invariants());
  // Sample 2 writes position 6 (in the shared half block): copy.
  ASSERT_TRUE(kv.allocate_slots(2, 6, 1, nullptr, copies));
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].first, t1[1]);
  EXPECT_EQ(copies[0].second, kv.block_table(2)[1]);
  EXPECT_EQ(kv.block_table(2)[0], t1[0]);  // the full block stays shared
  EXPECT_EQ(kv.pool().ref_count(t1[1]), 2);
  ASSERT_TRUE(kv.allocate_slots(3, 6, 1, nullptr, copies));
  ASSERT_EQ(copies.size(), 2u);
  // The last holder writes in place.
  ASSERT_TRUE(kv.allocate_slots(1, 6, 1, nullptr, copies));
  EXPECT_EQ(copies.size(), 2u);
  EXPECT_EQ(kv.block_table(1)[1], t1[1]);
  EXPECT_EQ(kv.stats().n_cow_copies, 2);
  expect_ok(kv.check_invariants());
  for (KvSeqId s : {1, 2, 3}) kv.free(s);
  EXPECT_EQ(kv.n_free_blocks(), 8);
  expect_ok(kv.check_invariants());
}

TEST(KvCacheManager, CowFailsCleanlyWithoutAFreeBlock) {
  KvCacheManager kv({.n_blocks = 2, .block_size = 4, .enable_prefix_caching = false});
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(kv.allocate_slots(1, 0, 6, nullptr, copies));
  kv.fork(1, 2);
  EXPECT_FALSE(kv.allocate_slots(2, 6, 1, nullptr, copies));
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(kv.pool().ref_count(kv.block_table(1)[1]), 2);
  expect_ok(kv.check_invariants());
}

TEST(KvSizing, BlocksForBudget) {
  EXPECT_EQ(kv_blocks_for_budget(1000, 100), 10);
  EXPECT_EQ(kv_blocks_for_budget(999, 100), 9);
  EXPECT_EQ(kv_blocks_for_budget(99, 100), 0);
  EXPECT_EQ(kv_blocks_for_budget(size_t{1} << 40, 1), INT32_MAX);
}

// Random sequences drawn from a few shared prefixes: allocate in random chunks, cache, fork,
// free; the invariants (ref counts == holders, sharing only by hashed prefix or fork, free +
// used == total) hold after every operation, and a cached block's tokens always match.
TEST(KvCacheManager, RandomizedInvariants) {
  for (uint64_t seed : {11u, 12u, 13u}) {
    std::mt19937_64 rng(seed);
    const int bs = 4;
    KvCacheManager kv({.n_blocks = 24, .block_size = bs, .enable_prefix_caching = true});
    struct Seq {
      std::vector<int32_t> tokens;
      int computed = 0;
    };
    std::map<KvSeqId, Seq> live;
    std::map<int32_t, std::vector<int32_t>> block_content;  // block -> tokens cached in it
    KvSeqId next = 0;
    std::vector<std::vector<int32_t>> prefixes;
    for (int i = 0; i < 3; ++i) {
      std::vector<int32_t> p(static_cast<size_t>(4 + rng() % 10));
      for (auto& t : p) t = static_cast<int32_t>(rng() % 5);
      prefixes.push_back(p);
    }
    for (int op = 0; op < 2000; ++op) {
      const int kind = static_cast<int>(rng() % 10);
      if (kind < 3 && live.size() < 6) {  // new sequence with a prefix lookup
        Seq s;
        s.tokens = prefixes[rng() % prefixes.size()];
        const int extra = static_cast<int>(rng() % 9);
        for (int i = 0; i < extra; ++i) s.tokens.push_back(static_cast<int32_t>(rng() % 5));
        const KvSeqId id = next++;
        CachedPrefix pre = kv.find_cached_prefix(id, s.tokens, "");
        ASSERT_LT(pre.n_tokens, static_cast<int>(s.tokens.size()));
        for (size_t b = 0; b < pre.blocks.size(); ++b) {
          auto it = block_content.find(pre.blocks[b]);
          ASSERT_NE(it, block_content.end());
          ASSERT_TRUE(std::equal(it->second.begin(), it->second.end(), s.tokens.begin() + static_cast<long>(b) * bs));
        }
        const int n_new = 1 + static_cast<int>(rng() % (s.tokens.size() - pre.n_tokens));
        std::vector<BlockCopy> copies;
        if (kv.allocate_slots(id, 0, n_new, &pre, copies)) {
          s.computed = pre.n_tokens + n_new;
          kv.cache_full_blocks(id, s.tokens, s.computed, "");
          live[id] = s;
        } else {
          kv.free(id);
        }
      } else if (kind < 6 && !live.empty()) {  // extend a sequence
        auto it = std::next(live.begin(), static_cast<long>(rng() % live.size()));
        Seq& s = it->second;
        if (s.computed == static_cast<int>(s.tokens.size())) s.tokens.push_back(static_cast<int32_t>(rng() % 5));
        const int n_new = 1 + static_cast<int>(rng() % (s.tokens.size() - s.computed));
        std::vector<BlockCopy> copies;
        if (kv.allocate_slots(it->first, s.computed, n_new, nullptr, copies)) {
          // A copied block takes over the source's content (what the executor does).
          for (auto [src, dst] : copies) block_content.erase(dst);
          s.computed += n_new;
          kv.cache_full_blocks(it->first, s.tokens, s.computed, "");
        }
      } else if (kind < 7 && !live.empty() && live.size() < 6) {  // fork
        auto it = std::next(live.begin(), static_cast<long>(rng() % live.size()));
        if (it->second.computed == static_cast<int>(it->second.tokens.size())) {
          const KvSeqId id = next++;
          kv.fork(it->first, id);
          live[id] = it->second;
        }
      } else if (!live.empty()) {  // free
        auto it = std::next(live.begin(), static_cast<long>(rng() % live.size()));
        kv.free(it->first);
        live.erase(it);
      }
      // Record the content of newly cached blocks; blocks evicted from the cache forget it.
      for (const auto& [id, s] : live) {
        std::span<const int32_t> table = kv.block_table(id);
        for (int b = 0; b < s.computed / bs; ++b) {
          const int32_t blk = table[static_cast<size_t>(b)];
          if (kv.pool().is_cached(blk))
            block_content[blk] = std::vector<int32_t>(s.tokens.begin() + b * bs, s.tokens.begin() + (b + 1) * bs);
        }
      }
      for (auto it = block_content.begin(); it != block_content.end();)
        it = kv.pool().is_cached(it->first) ? std::next(it) : block_content.erase(it);
      const Status st = kv.check_invariants();
      ASSERT_TRUE(st.is_ok()) << "seed " << seed << " op " << op << ": " << st.message();
      const KvStats stats = kv.stats();
      ASSERT_EQ(stats.n_free + stats.n_used, stats.n_blocks);
      ASSERT_LE(stats.slots_used, stats.slots_allocated);
    }
    for (const auto& [id, s] : live) kv.free(id);
    EXPECT_EQ(kv.n_free_blocks(), 24);
  }
}

}  // namespace
}  // namespace ember
