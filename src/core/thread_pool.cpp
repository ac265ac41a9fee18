#include "core/thread_pool.h"

#include <algorithm>

#if defined(__x86_64__)
#include <immintrin.h>
#define EMBER_PAUSE() _mm_pause()
#else
#define EMBER_PAUSE() ((void)0)
#endif

namespace ember {

namespace {
constexpr int kSpinIterations = 20000;  // a worker's spin before it sleeps on the futex
constexpr int kWaitSpins = 2048;        // the caller's spin before it yields its core
}  // namespace

int ThreadPool::default_threads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads > 0 ? n_threads : default_threads()) {
  workers_.reserve(static_cast<size_t>(n_threads_ - 1));
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::run_tasks(uint32_t gen) {
  uint64_t cur = claim_.load(std::memory_order_acquire);
  for (;;) {
    if (static_cast<uint32_t>(cur >> 32) != gen) return;  // a later run: ours is finished
    const int ith = static_cast<int>(cur & 0xffffffffu);
    if (ith >= n_threads_) return;
    if (!claim_.compare_exchange_weak(cur, cur + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
    // The run cannot end (and job_ cannot change) before this claimed task reports done.
    (*job_)(ith, n_threads_);
    done_.fetch_add(1, std::memory_order_acq_rel);
    cur = claim_.load(std::memory_order_acquire);
  }
}

void ThreadPool::worker_loop() {
  uint32_t seen = 0;
  for (;;) {
    uint32_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < kSpinIterations; ++spin) {
      EMBER_PAUSE();
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      continue;
    }
    seen = gen;
    if (stop_.load(std::memory_order_acquire)) return;
    run_tasks(gen);
  }
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  const uint32_t gen = generation_.load(std::memory_order_relaxed) + 1;
  job_ = &fn;
  done_.store(0, std::memory_order_relaxed);
  claim_.store(static_cast<uint64_t>(gen) << 32, std::memory_order_release);
  generation_.store(gen, std::memory_order_release);
  generation_.notify_all();
  run_tasks(gen);
  // Tasks still running elsewhere: spin, then give the core away (a descheduled worker may
  // be waiting for exactly this one).
  for (int spin = 0; done_.load(std::memory_order_acquire) != n_threads_; ++spin) {
    EMBER_PAUSE();
    if (spin > kWaitSpins) std::this_thread::yield();
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  run([&](int ith, int nth) {
    const int64_t chunk = (n + nth - 1) / nth;
    const int64_t begin = std::min<int64_t>(n, chunk * ith);
    const int64_t end = std::min<int64_t>(n, begin + chunk);
    if (begin < end) fn(begin, end);
  });
}

}  // namespace ember
