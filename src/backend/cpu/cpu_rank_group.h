#pragma once
// The in-process tensor-parallel group of CPU backends: each rank's backend runs on its own
// thread, and all_reduce_sum meets the other ranks at a barrier. (A process per rank and MPI
// would be the way across machines; on one machine threads share the memory anyway.)
#include <atomic>
#include <cstdint>
#include <vector>

namespace ember::cpu {

class CpuRankGroup {
 public:
  explicit CpuRankGroup(int size);
  int size() const { return size_; }
  // out = the sum over the ranks of their `in` (n floats each); called by every rank, from
  // its own thread, with the same n. out may alias in. The sum runs over the ranks in order
  // 0, 1, ..., so every rank gets the same bits.
  void all_reduce_sum(int rank, const float* in, float* out, int64_t n);

 private:
  // Waits until every rank has arrived (spinning first: core/spin_wait.h).
  void arrive_and_wait();

  int size_;
  std::atomic<int> arrived_{0};
  std::atomic<uint32_t> phase_{0};
  std::vector<const float*> in_;
  std::vector<float*> out_;
};

}  // namespace ember::cpu
