#pragma once
// A barrier inside one ThreadPool::run (every thread of the run must arrive). Spins briefly,
// then yields: on a busy machine a descheduled peer would otherwise eat our time slice.
#include <atomic>
#include <thread>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ember::cpu {

class SpinBarrier {
 public:
  explicit SpinBarrier(int n) : n_(n) {}
  void arrive_and_wait() {
    arrived_.fetch_add(1, std::memory_order_acq_rel);
    for (int spin = 0; arrived_.load(std::memory_order_acquire) < n_; ++spin) {
#if defined(__x86_64__)
      _mm_pause();
#endif
      if (spin > 4096) std::this_thread::yield();
    }
  }

 private:
  int n_;
  std::atomic<int> arrived_{0};
};

}  // namespace ember::cpu
