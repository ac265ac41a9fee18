#include "backend/cpu/cpu_rank_group.h"

#include "core/spin_wait.h"

#include <algorithm>

namespace ember::cpu {

CpuRankGroup::CpuRankGroup(int size) : size_(size), in_(static_cast<size_t>(size)), out_(static_cast<size_t>(size)) {}

void CpuRankGroup::arrive_and_wait() {
  const uint32_t phase = phase_.load(std::memory_order_acquire);
  if (arrived_.fetch_add(1, std::memory_order_acq_rel) == size_ - 1) {
    arrived_.store(0, std::memory_order_relaxed);  // (nobody arrives again before the phase moves)
    phase_.fetch_add(1, std::memory_order_release);
    phase_.notify_all();
    return;
  }
  wait_while_equal(phase_, phase);
}

void CpuRankGroup::all_reduce_sum(int rank, const float* in, float* out, int64_t n) {
  in_[static_cast<size_t>(rank)] = in;
  out_[static_cast<size_t>(rank)] = out;
  arrive_and_wait();  // every rank's buffers are published
  // Rank r sums its chunk of the elements and writes it to every rank's out. The chunks are
  // disjoint, and each element is read from every in before it is written to any out, so an
  // out that aliases its in is fine.
  const int64_t chunk = (n + size_ - 1) / size_;
  const int64_t begin = std::min(n, chunk * rank), end = std::min(n, begin + chunk);
  for (int64_t i = begin; i < end; ++i) {
    float s = in_[0][i];
    for (int r = 1; r < size_; ++r) s += in_[static_cast<size_t>(r)][i];
    for (int r = 0; r < size_; ++r) out_[static_cast<size_t>(r)][i] = s;
  }
  arrive_and_wait();  // every chunk is written (and nobody reads an in any more)
}

}  // namespace ember::cpu
