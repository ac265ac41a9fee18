// ThreadPool: every task index runs exactly once per run, across many back-to-back runs; runs
// whose tasks meet at a barrier complete; tasks of one run never see another run's function
// (checked under contention from more pools than cores).
#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace ember {
namespace {

TEST(ThreadPool, EveryTaskRunsExactlyOncePerRun) {
  for (int n : {1, 2, 3, 5, 8}) {
    ThreadPool pool(n);
    ASSERT_EQ(pool.size(), n);
    for (int run = 0; run < 2000; ++run) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.run([&](int ith, int nth) {
        ASSERT_EQ(nth, n);
        ASSERT_GE(ith, 0);
        ASSERT_LT(ith, n);
        hits[static_cast<size_t>(ith)].fetch_add(1);
      });
      for (int i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "n " << n << " run " << run;
    }
  }
}

TEST(ThreadPool, ParallelForCoversTheRangeOnce) {
  ThreadPool pool(3);
  for (int64_t n : {0, 1, 2, 7, 1000, 1001}) {
    std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) seen[static_cast<size_t>(i)].fetch_add(1);
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[static_cast<size_t>(i)].load(), 1);
  }
}

// A barrier inside a run must see all nth tasks on distinct threads, or it would deadlock.
TEST(ThreadPool, TasksMeetingAtABarrierComplete) {
  ThreadPool pool(4);
  for (int run = 0; run < 500; ++run) {
    std::atomic<int> arrived{0}, after{0};
    pool.run([&](int, int nth) {
      arrived.fetch_add(1);
      while (arrived.load() < nth) std::this_thread::yield();
      after.fetch_add(1);
    });
    ASSERT_EQ(after.load(), 4);
  }
}

// More busy threads than cores: workers get descheduled, the caller claims their tasks, and
// late workers wake into later runs. Each run's tasks must write only that run's slots.
TEST(ThreadPool, OversubscribedPoolsStayCorrect) {
  const int n_pools = static_cast<int>(std::thread::hardware_concurrency()) + 2;
  std::atomic<bool> failed{false};
  std::vector<std::thread> drivers;
  for (int d = 0; d < n_pools; ++d) {
    drivers.emplace_back([&failed] {
      ThreadPool pool(3);
      for (int run = 0; run < 300; ++run) {
        std::vector<int> slots(3, -1);
        pool.run([&](int ith, int) { slots[static_cast<size_t>(ith)] = run; });
        for (int s : slots)
          if (s != run) failed.store(true);
      }
    });
  }
  for (auto& t : drivers) t.join();
  EXPECT_FALSE(failed.load());
}

}  // namespace
}  // namespace ember
