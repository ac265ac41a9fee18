#pragma once
// ArgmaxPipeline: the engine's queue of greedy steps on a ModelExecutor. An executor that
// pipelines (can_pipeline_argmax: a GPU runner) queues each step on the device and returns at
// once; for any other executor with execute_argmax (the CPU path, tests) each step runs when
// it is queued and its ids wait here, so the engine's pipelined schedule is the same code on
// every device, with the same results.
#include "core/status.h"
#include "model/forward_batch.h"
#include "runner/model_executor.h"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <vector>

namespace ember {

class ArgmaxPipeline {
 public:
  explicit ArgmaxPipeline(ModelExecutor& executor) : executor_(executor), native_(executor.can_pipeline_argmax()) {}

  // ModelExecutor::enqueue_argmax (feed: see there).
  Status enqueue(const ForwardBatch& batch, std::span<const int32_t> feed);
  // The oldest queued step's ids (one per logit row).
  Status collect(std::vector<int32_t>& token_ids);

 private:
  ModelExecutor& executor_;
  bool native_;
  size_t queued_ = 0;
  std::deque<std::vector<int32_t>> done_;  // not native: the queued steps' ids
  std::vector<int32_t> last_;              // not native: the last queued step's ids (for feeds)
  ForwardBatch fed_;                       // not native: the batch with its fed tokens
};

}  // namespace ember
