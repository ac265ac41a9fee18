#pragma once
// ThreadPool: runs one function as nth tasks, fn(ith, nth) for ith in [0, nth), and returns
// when every task is done (a fork/join per call, as CPU inference kernels want: each kernel
// splits its rows by ith/nth). Tasks are claimed, not assigned: whichever thread is running
// takes the next unclaimed ith, so when a worker is descheduled (another process holds its
// core) the caller runs that worker's share itself instead of waiting out a time slice.
// Workers spin briefly before sleeping so back-to-back kernels do not pay a wake-up each.
//
// A task may wait at a barrier for the other tasks of the same run: a thread
// claims its next task only after the previous one returned, so the nth tasks of such a run
// always end up on nth different threads.
#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace ember {

class ThreadPool {
 public:
  // n_threads <= 0 means one per hardware core.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // Runs fn(ith, nth) for every ith in [0, nth), nth = size(), each exactly once, on any of
  // the pool's threads (the caller takes part); not re-entrant.
  void run(const std::function<void(int ith, int nth)>& fn);
  // Splits [0, n) into contiguous chunks, one per task: fn(begin, end).
  void parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn);

  static int default_threads();

 private:
  void worker_loop();
  // Claims and runs tasks of run `gen` until none is left (or the run is over).
  void run_tasks(uint32_t gen);

  int n_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int, int)>* job_ = nullptr;
  // (generation << 32) | next unclaimed task: one word, so a claim can never take a task
  // index of one run for the function of another.
  std::atomic<uint64_t> claim_{0};
  std::atomic<uint32_t> generation_{0};
  std::atomic<int> done_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace ember
