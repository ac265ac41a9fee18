#pragma once
// The threads of a tensor-parallel group in one process: rank 0 runs on the caller's thread,
// ranks 1..n-1 each on a thread of their own that lives as long as the group, so that a rank's
// work always runs on the same thread (a CUDA rank's device stays current there). Hand-offs
// spin briefly before sleeping (core/spin_wait.h).
#include "core/status.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace ember {

class RankThreads {
 public:
  explicit RankThreads(int n_ranks);
  ~RankThreads();
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  int size() const { return static_cast<int>(threads_.size()) + 1; }
  // Runs job(r) for every rank r, r = 0 here and the others on their threads, and returns
  // when all have returned: the first error by rank, else ok. One caller at a time.
  Status run(const std::function<Status(int rank)>& job);

 private:
  void loop(int rank);

  const std::function<Status(int)>* job_ = nullptr;  // published by generation_
  std::atomic<uint32_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::vector<Status> results_;
  std::vector<std::thread> threads_;
};

}  // namespace ember
