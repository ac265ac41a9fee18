#include "kv/block_hash.h"
#include "kv/block_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace ember {
namespace {

TEST(BlockPool, AllocateAndFreeCountRefs) {
  BlockPool pool(4);
  EXPECT_EQ(pool.n_free(), 4);
  std::vector<int32_t> ids;
  ASSERT_TRUE(pool.allocate(3, ids));
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(pool.n_free(), 1);
  EXPECT_EQ(pool.n_used(), 3);
  for (int32_t id : ids) EXPECT_EQ(pool.ref_count(id), 1);
  // Too many: fails and changes nothing.
  std::vector<int32_t> more;
  EXPECT_FALSE(pool.allocate(2, more));
  EXPECT_TRUE(more.empty());
  EXPECT_EQ(pool.n_free(), 1);
  pool.touch(std::vector<int32_t>{1});
  EXPECT_EQ(pool.ref_count(1), 2);
  pool.free(ids);
  EXPECT_EQ(pool.ref_count(1), 1);
  EXPECT_EQ(pool.n_free(), 3);
  pool.free(std::vector<int32_t>{1});
  EXPECT_EQ(pool.n_free(), 4);
  EXPECT_TRUE(pool.check_consistency().is_ok());
}

TEST(BlockPool, FreeListIsLruAndEvictsHashes) {
  BlockPool pool(4);
  std::vector<int32_t> ids;
  ASSERT_TRUE(pool.allocate(4, ids));
  ASSERT_TRUE(pool.cache(2, 222));
  ASSERT_TRUE(pool.cache(0, 100));
  // Freed in the order 2, 0, 3, 1: that is the LRU order of the free list.
  pool.free(std::vector<int32_t>{2, 0, 3, 1});
  EXPECT_EQ(pool.free_list(), (std::vector<int32_t>{2, 0, 3, 1}));
  // Cached blocks stay findable while free.
  ASSERT_EQ(pool.lookup(222), std::optional<int32_t>(2));
  // Reviving block 0 takes it off the free list.
  pool.touch(std::vector<int32_t>{0});
  EXPECT_EQ(pool.free_list(), (std::vector<int32_t>{2, 3, 1}));
  EXPECT_EQ(pool.ref_count(0), 1);
  // Allocation takes the least recently freed block (2) and evicts its hash.
  std::vector<int32_t> got;
  ASSERT_TRUE(pool.allocate(1, got));
  EXPECT_EQ(got, std::vector<int32_t>{2});
  EXPECT_FALSE(pool.lookup(222).has_value());
  EXPECT_EQ(pool.lookup(100), std::optional<int32_t>(0));
  EXPECT_EQ(pool.n_evictions(), 1);
  EXPECT_TRUE(pool.check_consistency().is_ok());
}

TEST(BlockPool, DuplicateHashStaysUnhashed) {
  BlockPool pool(2);
  std::vector<int32_t> ids;
  ASSERT_TRUE(pool.allocate(2, ids));
  EXPECT_TRUE(pool.cache(0, 7));
  EXPECT_FALSE(pool.cache(1, 7));
  EXPECT_FALSE(pool.is_cached(1));
  EXPECT_EQ(pool.lookup(7), std::optional<int32_t>(0));
  EXPECT_TRUE(pool.check_consistency().is_ok());
}

TEST(BlockPool, CachingDisabled) {
  BlockPool pool(2, /*enable_caching=*/false);
  std::vector<int32_t> ids;
  ASSERT_TRUE(pool.allocate(1, ids));
  EXPECT_FALSE(pool.cache(ids[0], 5));
  EXPECT_FALSE(pool.lookup(5).has_value());
}

// Random allocate / touch / free / cache against a plain model of ref counts.
TEST(BlockPool, RandomizedAgainstModel) {
  for (uint64_t seed : {1u, 2u, 3u, 4u}) {
    std::mt19937_64 rng(seed);
    const int n = 16;
    BlockPool pool(n);
    std::vector<int> model(n, 0);
    std::vector<int32_t> held;  // one entry per reference we hold
    for (int op = 0; op < 3000; ++op) {
      const int kind = static_cast<int>(rng() % 4);
      if (kind == 0) {
        const int k = static_cast<int>(rng() % 4);
        std::vector<int32_t> got;
        const int n_free = static_cast<int>(std::count(model.begin(), model.end(), 0));
        ASSERT_EQ(pool.allocate(k, got), k <= n_free);
        for (int32_t id : got) {
          ASSERT_EQ(model[id], 0);
          model[id] = 1;
          held.push_back(id);
        }
      } else if (kind == 1 && !held.empty()) {
        const int32_t id = held[rng() % held.size()];
        pool.touch(std::vector<int32_t>{id});
        ++model[id];
        held.push_back(id);
      } else if (kind == 2 && !held.empty()) {
        const size_t i = rng() % held.size();
        pool.free(std::vector<int32_t>{held[i]});
        --model[held[i]];
        held.erase(held.begin() + static_cast<long>(i));
      } else if (kind == 3 && !held.empty()) {
        const int32_t id = held[rng() % held.size()];
        if (!pool.is_cached(id)) pool.cache(id, rng() % 8);
      }
      for (int id = 0; id < n; ++id) ASSERT_EQ(pool.ref_count(id), model[id]);
      const Status st = pool.check_consistency();
      ASSERT_TRUE(st.is_ok()) << st.message();
    }
  }
}

TEST(BlockHash, ChainedOverTokensAndSalt) {
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<BlockHash> ha, hb, hs;
  extend_block_hashes(ha, a, 4, "");
  ASSERT_EQ(ha.size(), 2u);  // the partial third block is not hashed
  std::vector<int32_t> b = a;
  b[1] = 99;  // changes block 0 and, through the chain, block 1
  extend_block_hashes(hb, b, 4, "");
  EXPECT_NE(ha[0], hb[0]);
  EXPECT_NE(ha[1], hb[1]);
  // Same tokens, same hashes; incremental extension gives the same result.
  std::vector<BlockHash> inc;
  extend_block_hashes(inc, std::span<const int32_t>(a).first(5), 4, "");
  extend_block_hashes(inc, a, 4, "");
  EXPECT_EQ(inc, ha);
  extend_block_hashes(hs, a, 4, "tenant-1");
  EXPECT_NE(hs[0], ha[0]);
  EXPECT_NE(hs[1], ha[1]);
  std::vector<BlockHash> hs2;
  extend_block_hashes(hs2, a, 4, "tenant-2");
  EXPECT_NE(hs2[0], hs[0]);
  // A later block with equal tokens but a different parent differs.
  const std::vector<int32_t> c = {5, 6, 7, 8, 5, 6, 7, 8};
  std::vector<BlockHash> hc;
  extend_block_hashes(hc, c, 4, "");
  EXPECT_NE(hc[0], hc[1]);
}

}  // namespace
}  // namespace ember
