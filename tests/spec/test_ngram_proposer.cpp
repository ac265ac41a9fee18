#include "spec/ngram_proposer.h"

#include <gtest/gtest.h>

#include <vector>

namespace ember {
namespace {

using V = std::vector<int32_t>;

V propose(const V& t, int k, int lo = 1, int hi = 3) { return propose_ngram(t, {k, lo, hi}); }

TEST(NgramProposer, ProposesWhatFollowedTheLatestMatchOfTheLongestSuffix) {
  // The suffix 7 8 9 occurred at positions 1-3, followed by 4 5 6.
  EXPECT_EQ(propose({1, 7, 8, 9, 4, 5, 6, 2, 7, 8, 9}, 3), (V{4, 5, 6}));
  // Fewer drafts than asked where the history ends.
  EXPECT_EQ(propose({1, 7, 8, 9, 4, 2, 7, 8, 9}, 5), (V{4, 2, 7, 8, 9}));
  // The latest of two matches wins.
  EXPECT_EQ(propose({7, 8, 1, 1, 7, 8, 2, 2, 7, 8}, 2, 2, 2), (V{2, 2}));
  // A longer suffix beats a later shorter match: 3 9 matches once (followed by 5); 9 alone
  // later (followed by 6).
  EXPECT_EQ(propose({3, 9, 5, 9, 6, 0, 3, 9}, 1, 1, 2), (V{5}));
  EXPECT_EQ(propose({3, 9, 5, 9, 6, 0, 3, 9}, 1, 1, 1), (V{6}));
}

TEST(NgramProposer, EmptyWithoutAMatchOrWhenOff) {
  EXPECT_TRUE(propose({1, 2, 3, 4}, 4).empty());
  EXPECT_TRUE(propose({}, 4).empty());
  EXPECT_TRUE(propose({5}, 4).empty());
  EXPECT_TRUE(propose({5, 5, 5}, 0).empty());
  EXPECT_TRUE(propose({1, 2, 1, 2}, 3, 3, 3).empty());  // no earlier 3-gram 2 1 2
}

TEST(NgramProposer, RepeatsARun) {
  // 5 5 5: the suffix 5 5 matches at 0-1, followed by the third 5.
  EXPECT_EQ(propose({5, 5, 5}, 4), (V{5}));
  EXPECT_EQ(propose({1, 2, 1, 2, 1, 2}, 4, 2, 2), (V{1, 2}));
}

}  // namespace
}  // namespace ember
