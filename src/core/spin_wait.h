#pragma once
// Waiting for another thread of a tensor-parallel group: it usually arrives within
// microseconds, far sooner than a futex wake-up (tens of microseconds, ~80 us measured on a
// 2-core VM), so spin briefly, then yield (more threads than cores: let the one we wait for
// run), then sleep.
#include <atomic>
#include <thread>

namespace ember {

template <typename T>
void wait_while_equal(const std::atomic<T>& a, T old) {
  for (int i = 0; i < 256; ++i) {
    if (a.load(std::memory_order_acquire) != old) return;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  for (int i = 0; i < 64; ++i) {
    if (a.load(std::memory_order_acquire) != old) return;
    std::this_thread::yield();
  }
  while (a.load(std::memory_order_acquire) == old) a.wait(old, std::memory_order_acquire);
}

}  // namespace ember
