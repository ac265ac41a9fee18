// Greedy sampling on the GPU (CudaStep::argmax_rows) against the host rule the Sampler applies:
// NaN never wins, the first maximum wins, -inf is never picked, and a row without any value
// above -inf gives token 0.
#include "cuda_test_util.h"

#include <algorithm>
#include <limits>
#include <utility>

namespace ember::cuda_test {
namespace {

int32_t host_argmax(const float* row, int64_t vocab) {
  int32_t best = -1;
  float best_x = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < vocab; ++i)
    if (row[i] > best_x) {  // NaN compares false
      best_x = row[i];
      best = static_cast<int32_t>(i);
    }
  return best < 0 ? 0 : best;
}

TEST(CudaSample, ArgmaxRowsMatchesHostRule) {
  SKIP_WITHOUT_GPU();
  CudaStep* step = cuda_step(*backend());
  ASSERT_NE(step, nullptr);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Up to 64 rows of a large vocabulary take several blocks a row (slices; 100003 is not a
  // multiple of 4: the scalar loads); fewer than 9 rows repeat with every row case, which also
  // checks that each launch leaves the slices' tickets ready for the next, whatever the row
  // counts before it (3 rows of parts, then 1 row: a layout that moved with the row count put
  // the 1-row launch's tickets among the 3-row launch's parts).
  const std::pair<int64_t, int> shapes[] = {{128256, 300}, {128256, 3}, {128256, 1}, {100003, 2},
                                            {50001, 64},   {100003, 1}, {1001, 40},  {7, 40}};
  for (const auto& [vocab, rows] : shapes) {
    for (int rep = 0; rep < (rows < 9 ? 9 : 1); ++rep) {
      std::mt19937 rng(static_cast<uint32_t>(vocab + rep));
      std::uniform_int_distribution<int64_t> pos(0, vocab - 1);
      std::vector<float> x =
          random_floats(static_cast<size_t>(rows * vocab), static_cast<uint32_t>(vocab + rows + rep), -8.0f, 8.0f);
      for (int r = 0; r < rows; ++r) {
        float* row = x.data() + r * vocab;
        switch ((r + rep) % 9) {
          case 0: break;  // plain random row
          case 1: {       // the maximum twice: the lower index wins
            const int64_t a = pos(rng), b = pos(rng);
            row[a] = row[b] = 20.0f + static_cast<float>(r);
            break;
          }
          case 2:  // NaN everywhere but one value, and NaN right before it
            for (int64_t i = 0; i < vocab; ++i) row[i] = nan;
            row[pos(rng)] = -3.0f;
            break;
          case 3:  // nothing above -inf: token 0
            for (int64_t i = 0; i < vocab; ++i) row[i] = (i % 3 == 0) ? nan : -inf;
            break;
          case 4:  // +inf twice
            row[pos(rng)] = inf;
            row[pos(rng)] = inf;
            break;
          case 5:  // the maximum at the last index
            row[vocab - 1] = 100.0f;
            break;
          case 6:  // all negative, many NaN
            for (int64_t i = 0; i < vocab; ++i) row[i] = (i % 5 == 0) ? nan : -std::fabs(row[i]) - 1.0f;
            break;
          case 7:  // every value equal: index 0
            for (int64_t i = 0; i < vocab; ++i) row[i] = 1.5f;
            break;
          default:  // the maximum at index 0 with a NaN after it
            row[0] = 50.0f;
            if (vocab > 1) row[1] = nan;
            break;
        }
      }
      DevTensor dx = dev_floats(x, {rows, vocab});
      std::vector<int32_t> got(static_cast<size_t>(rows), -7);
      ASSERT_TRUE(step->argmax_rows(dx.t, got.data()).is_ok());
      int mismatches = 0;
      for (int r = 0; r < rows; ++r) {
        const int32_t want = host_argmax(x.data() + r * vocab, vocab);
        if (got[static_cast<size_t>(r)] != want && ++mismatches <= 5)
          ADD_FAILURE() << "vocab " << vocab << " rows " << rows << " row " << r << " (case " << (r + rep) % 9
                        << "): got " << got[static_cast<size_t>(r)] << ", want " << want;
      }
      EXPECT_EQ(mismatches, 0) << "vocab " << vocab << " rows " << rows;
    }
  }
}

TEST(CudaSample, ArgmaxRowsAfterQueuedWork) {
  SKIP_WITHOUT_GPU();
  // The result must see ops queued (or deferred) before it: scale the row so the winner moves.
  CudaStep* step = cuda_step(*backend());
  const int64_t vocab = 4096;
  std::vector<float> x = random_floats(2 * vocab, 99, -1.0f, 1.0f);
  x[10] = 5.0f;   // the largest
  x[20] = -6.0f;  // the largest after scaling by -1
  x[vocab + 30] = 3.0f;
  x[vocab + 40] = -4.0f;
  DevTensor dx = dev_floats(x, {2, vocab});
  backend()->scale(dx.t, -1.0f);
  std::vector<int32_t> got(2, -1);
  ASSERT_TRUE(step->argmax_rows(dx.t, got.data()).is_ok());
  EXPECT_EQ(got[0], 20);
  EXPECT_EQ(got[1], 40);
}

// The pipelined form (argmax_rows_async into slot 0 or 1, argmax_rows_wait) gives argmax_rows's
// ids; by default the argmax kernel writes the slot's pinned buffer itself (no download on the
// stream), so both slots queued at once must each keep their own step's ids.
TEST(CudaSample, ArgmaxRowsAsyncSlotsEqualSync) {
  SKIP_WITHOUT_GPU();
  CudaStep* step = cuda_step(*backend());
  ASSERT_NE(step, nullptr);
  const std::pair<int64_t, int> shapes[] = {{128256, 1}, {100003, 3}, {1001, 70}, {7, 1}};
  for (const auto& [vocab, rows] : shapes) {
    const size_t count = static_cast<size_t>(rows * vocab);
    std::vector<float> a = random_floats(count, static_cast<uint32_t>(vocab), -4.0f, 4.0f);
    std::vector<float> b = random_floats(count, static_cast<uint32_t>(vocab + 1), -4.0f, 4.0f);
    DevTensor da = dev_floats(a, {rows, vocab}), db = dev_floats(b, {rows, vocab});
    std::vector<int32_t> want_a(static_cast<size_t>(rows)), want_b(static_cast<size_t>(rows));
    for (int r = 0; r < rows; ++r) {
      want_a[static_cast<size_t>(r)] = host_argmax(a.data() + r * vocab, vocab);
      want_b[static_cast<size_t>(r)] = host_argmax(b.data() + r * vocab, vocab);
    }
    ASSERT_TRUE(step->argmax_rows_async(da.t, 0).is_ok());
    ASSERT_TRUE(step->argmax_rows_async(db.t, 1).is_ok());
    std::vector<int32_t> got_a(static_cast<size_t>(rows), -1), got_b(static_cast<size_t>(rows), -1);
    ASSERT_TRUE(step->argmax_rows_wait(0, got_a.data(), rows).is_ok());
    ASSERT_TRUE(step->argmax_rows_wait(1, got_b.data(), rows).is_ok());
    EXPECT_EQ(got_a, want_a) << "vocab " << vocab << " rows " << rows;
    EXPECT_EQ(got_b, want_b) << "vocab " << vocab << " rows " << rows;
    std::vector<int32_t> sync(static_cast<size_t>(rows), -1);
    ASSERT_TRUE(step->argmax_rows(db.t, sync.data()).is_ok());
    EXPECT_EQ(sync, want_b);
    EXPECT_FALSE(step->argmax_rows_wait(0, got_a.data(), rows + 1).is_ok());  // not what slot 0 holds
  }
}

// Step metadata reaches the device whichever way it is uploaded: a kernel reading the pinned
// staging below 64 KiB (the default), the copy engine above; the ids array sits after another
// array, so its offset is not 0. get_rows given the host ids reads the device copy.
TEST(CudaSample, StepMetadataUploadsOfEverySize) {
  SKIP_WITHOUT_GPU();
  CudaStep* step = cuda_step(*backend());
  ASSERT_NE(step, nullptr);
  const int64_t vocab = 97, d = 8;
  const std::vector<float> table = random_floats(vocab * d, 5);
  DevTensor dt = dev_floats(table, {vocab, d});
  // 64 B to 80 KB in all (48 B before the ids; 16372 ids: exactly 65,536)
  for (int n : {1, 3, 1000, 16000, 16372, 16373, 20000}) {
    std::vector<int32_t> before(9, 1), ids(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>((i * 37 + n) % vocab);
    step->set_step_metadata({HostArray{before.data(), before.size() * sizeof(int32_t)},
                             HostArray{ids.data(), ids.size() * sizeof(int32_t)}});
    // The host array changed after the upload: only the device copy still holds want (an op that
    // uploaded the host array itself would read the zeros).
    const std::vector<int32_t> want = ids;
    std::fill(ids.begin(), ids.end(), 0);
    DevTensor out = dev_tensor(DType::F32, {n, d});
    backend()->get_rows(dt.t, ids.data(), n, out.t);
    const std::vector<float> got = download_floats(out.t);
    int bad = 0;
    for (int i = 0; i < n; ++i) {
      const int64_t row = want[static_cast<size_t>(i)];
      for (int64_t j = 0; j < d; ++j)
        if (got[static_cast<size_t>(i * d + j)] != table[static_cast<size_t>(row * d + j)]) ++bad;
    }
    EXPECT_EQ(bad, 0) << n << " ids";
    step->clear_step_metadata();
  }
}

}  // namespace
}  // namespace ember::cuda_test
