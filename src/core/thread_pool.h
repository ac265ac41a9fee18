#pragma once
// ThreadPool: runs one function on all threads at once, fn(ith, nth), and returns when every
// thread is done (a fork/join barrier per call, as CPU inference kernels want: each kernel
// splits its rows by ith/nth). Workers spin briefly before sleeping so back-to-back kernels
// of one forward pass do not pay a wake-up each.
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
  // Runs fn(ith, nth) on every thread (the caller is thread 0); not re-entrant.
  void run(const std::function<void(int ith, int nth)>& fn);
  // Splits [0, n) into contiguous chunks, one per thread: fn(begin, end).
  void parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn);

  static int default_threads();

 private:
  void worker_loop(int ith);

  int n_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<uint32_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace ember
