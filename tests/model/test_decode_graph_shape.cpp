// The decode-graph shapes of runner/decode_graph_shape.h: which captured batch size and width
// a decode step runs in.
#include "runner/decode_graph_shape.h"

#include <gtest/gtest.h>

#include <set>

namespace ember {
namespace {

TEST(DecodeGraphShape, SmallBatchesRunInTheirOwnGraph) {
  for (int n = 1; n <= 16; ++n) EXPECT_EQ(padded_decode_seqs(n, 256), n);
}

TEST(DecodeGraphShape, LargerBatchesPadToMultiplesOfEight) {
  EXPECT_EQ(padded_decode_seqs(17, 256), 24);
  EXPECT_EQ(padded_decode_seqs(24, 256), 24);
  EXPECT_EQ(padded_decode_seqs(25, 256), 32);
  EXPECT_EQ(padded_decode_seqs(249, 256), 256);
  EXPECT_EQ(padded_decode_seqs(256, 256), 256);
  for (int n = 1; n <= 512; ++n) {
    const int p = padded_decode_seqs(n, 512);
    EXPECT_GE(p, n);
    EXPECT_LT(p - n, 8) << n;
  }
}

TEST(DecodeGraphShape, PaddingStopsAtTheCap) {
  EXPECT_EQ(padded_decode_seqs(17, 20), 20);  // (24 would pass the buffers' 20 sequences)
  EXPECT_EQ(padded_decode_seqs(20, 20), 20);
  EXPECT_EQ(padded_decode_seqs(30, 20), 30);  // past the cap: never smaller than the batch
  EXPECT_EQ(padded_decode_seqs(17, 0), 17);   // no cap yet (before warm-up): no padding
  EXPECT_EQ(padded_decode_seqs(100, 0), 100);
}

TEST(DecodeGraphShape, SizesCoverEveryBatchOnce) {
  const std::vector<int> sizes = decode_graph_sizes(256, 256);
  ASSERT_EQ(sizes.size(), 16u + 30u);  // 1..16, then 24, 32, ..., 256
  EXPECT_EQ(sizes.front(), 256);
  EXPECT_EQ(sizes.back(), 1);
  const std::set<int> distinct(sizes.begin(), sizes.end());
  EXPECT_EQ(distinct.size(), sizes.size());
  for (int n = 1; n <= 256; ++n) EXPECT_EQ(distinct.count(padded_decode_seqs(n, 256)), 1u) << n;
  // A limit that is not a multiple of 8 is a size of its own; 17..20 run in it.
  EXPECT_EQ(decode_graph_sizes(20, 20), (std::vector<int>{20, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1}));
  // Without a cap every size is its own graph (the old behaviour).
  EXPECT_EQ(decode_graph_sizes(40, 0).size(), 40u);
}

TEST(DecodeGraphShape, WidthsArePowersOfTwoFromSixteen) {
  EXPECT_EQ(decode_width_bucket(1), 16);
  EXPECT_EQ(decode_width_bucket(16), 16);
  EXPECT_EQ(decode_width_bucket(17), 32);
  EXPECT_EQ(decode_width_bucket(100), 128);
  EXPECT_NE(decode_graph_key(24, 16), decode_graph_key(16, 24));
  EXPECT_NE(decode_graph_key(1, 32), decode_graph_key(1, 16));
}

}  // namespace
}  // namespace ember
