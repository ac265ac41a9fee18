// The pieces under tensor parallelism on the CPU: CpuRankGroup's all-reduce (odd sizes,
// 2-5 ranks, out aliasing in, many calls in a row, every rank the same bits as a plain sum in
// rank order) and RankThreads (every rank runs, the first error by rank wins, a group runs
// job after job).
#include "backend/cpu/cpu_rank_group.h"
#include "runner/rank_threads.h"

#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <vector>

namespace ember {
namespace {

TEST(CpuRankGroup, AllReduceMatchesASumInRankOrder) {
  for (int ranks : {2, 3, 5}) {
    cpu::CpuRankGroup group(ranks);
    RankThreads threads(ranks);
    for (int64_t n : {1, 7, 64, 1001, 4099}) {
      SCOPED_TRACE("ranks " + std::to_string(ranks) + ", n " + std::to_string(n));
      std::mt19937 rng(static_cast<uint32_t>(n * 31 + ranks));
      std::uniform_real_distribution<float> u(-1.0f, 1.0f);
      std::vector<std::vector<float>> in(static_cast<size_t>(ranks), std::vector<float>(static_cast<size_t>(n)));
      for (auto& v : in)
        for (auto& x : v) x = u(rng);
      std::vector<float> want(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        float s = in[0][static_cast<size_t>(i)];
        for (int r = 1; r < ranks; ++r) s += in[static_cast<size_t>(r)][static_cast<size_t>(i)];
        want[static_cast<size_t>(i)] = s;
      }
      // Even ranks reduce in place, odd ones into a separate buffer; three calls in a row.
      std::vector<std::vector<float>> out = in;
      for (int call = 0; call < 3; ++call) {
        std::vector<std::vector<float>> src = in;
        ASSERT_TRUE(threads
                        .run([&](int r) {
                          auto& s = src[static_cast<size_t>(r)];
                          float* o = r % 2 == 0 ? s.data() : out[static_cast<size_t>(r)].data();
                          group.all_reduce_sum(r, s.data(), o, n);
                          return Status::ok();
                        })
                        .is_ok());
        for (int r = 0; r < ranks; ++r) {
          const auto& got = r % 2 == 0 ? src[static_cast<size_t>(r)] : out[static_cast<size_t>(r)];
          ASSERT_EQ(got, want) << "rank " << r << ", call " << call;
        }
      }
    }
  }
}

TEST(RankThreads, RunsEveryRankAndReportsTheFirstError) {
  RankThreads threads(4);
  EXPECT_EQ(threads.size(), 4);
  std::vector<std::atomic<int>> runs(4);
  for (int job = 0; job < 100; ++job)
    ASSERT_TRUE(threads.run([&](int r) {
                         runs[static_cast<size_t>(r)].fetch_add(1);
                         return Status::ok();
                       })
                    .is_ok());
  for (auto& n : runs) EXPECT_EQ(n.load(), 100);
  const Status st = threads.run([](int r) { return r >= 2 ? Status::errorf("rank {} failed", r) : Status::ok(); });
  ASSERT_FALSE(st.is_ok());
  EXPECT_EQ(st.message(), "rank 2 failed");
  EXPECT_TRUE(threads.run([](int) { return Status::ok(); }).is_ok());  // still usable

  RankThreads one(1);  // no threads: rank 0 runs here
  int calls = 0;
  EXPECT_TRUE(one.run([&](int r) {
                   calls += r == 0;
                   return Status::ok();
                 })
                  .is_ok());
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace ember
