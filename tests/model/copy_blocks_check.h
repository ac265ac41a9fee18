#pragma once
// ModelRunner::copy_blocks on a real runner (the copy-on-write of a shared, partly filled block):
// a 20-token prompt fills block 2 and 4 slots of block 5; block 5 is copied to block 6. The next
// token then decoded on the table {2, 5} and on {2, 6} sees the same context, so its logits
// must agree; on {2, 7} (block 7 never written) they must not (the check can fail). Bad pairs
// are refused before anything is copied. Shared by the CPU (tests/model) and CUDA tests.
#include "one_sequence_batch.h"
#include "runner/model_runner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace ember::copy_blocks_check {

inline double rel(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// One sequence's step: tokens at positions start.. on the block table (block size 16).
inline Status step(ModelRunner& r, const std::vector<int32_t>& table, int start, const std::vector<int32_t>& tokens,
                   std::vector<float>& logits) {
  return r.execute(one_sequence_batch(table, 16, start, tokens, false), logits);
}

// r: a runner with a K/V cache of >= 8 blocks of 16. tol: logits of the copy against the
// original (the same kernels read the same bytes: exact in practice).
inline void run(ModelRunner& r, double tol) {
  const int vocab = r.vocab_size();
  std::vector<int32_t> prompt;
  for (int i = 0; i < 20; ++i) prompt.push_back((i * 37 + 11) % vocab);
  std::vector<float> la, lb, lc;
  ASSERT_TRUE(step(r, {2, 5}, 0, prompt, la).is_ok());
  ASSERT_TRUE(r.copy_blocks({{5, 6}}).is_ok());
  const std::vector<int32_t> next = {(20 * 37 + 11) % vocab};
  ASSERT_TRUE(step(r, {2, 5}, 20, next, la).is_ok());
  ASSERT_TRUE(step(r, {2, 6}, 20, next, lb).is_ok());
  ASSERT_TRUE(step(r, {2, 7}, 20, next, lc).is_ok());
  ASSERT_EQ(la.size(), static_cast<size_t>(vocab));
  EXPECT_LE(rel(lb, la), tol) << "decode on the copied block";
  EXPECT_GT(rel(lc, la), 1e-3) << "control: a block never written gave the same logits";
  EXPECT_FALSE(r.copy_blocks({{1, 3}, {0, 1 << 20}}).is_ok());
  EXPECT_FALSE(r.copy_blocks({{4, 4}}).is_ok());
  EXPECT_FALSE(r.copy_blocks({{-1, 3}}).is_ok());
}

}  // namespace ember::copy_blocks_check
