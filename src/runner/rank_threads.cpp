#include "runner/rank_threads.h"

#include "core/spin_wait.h"

namespace ember {

RankThreads::RankThreads(int n_ranks) : results_(static_cast<size_t>(n_ranks > 1 ? n_ranks : 1)) {
  for (int r = 1; r < n_ranks; ++r) threads_.emplace_back([this, r] { loop(r); });
}

RankThreads::~RankThreads() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& t : threads_) t.join();
}

void RankThreads::loop(int rank) {
  uint32_t seen = 0;
  for (;;) {
    wait_while_equal(generation_, seen);
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire)) return;
    results_[static_cast<size_t>(rank)] = (*job_)(rank);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

Status RankThreads::run(const std::function<Status(int)>& job) {
  job_ = &job;
  pending_.store(static_cast<int>(threads_.size()), std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_acq_rel);  // publishes job_ and pending_
  generation_.notify_all();
  results_[0] = job(0);
  for (int left = pending_.load(std::memory_order_acquire); left != 0; left = pending_.load(std::memory_order_acquire))
    wait_while_equal(pending_, left);
  job_ = nullptr;
  for (const Status& st : results_)
    if (!st.is_ok()) return st;
  return Status::ok();
}

}  // namespace ember
