#include "engine/argmax_pipeline.h"

namespace ember {

Status ArgmaxPipeline::enqueue(const ForwardBatch& batch, std::span<const int32_t> feed) {
  if (queued_ >= 2) return Status::error("argmax pipeline: two steps are queued already");
  if (!feed.empty() && feed.size() != batch.token_ids.size())
    return Status::errorf("argmax pipeline: {} feed entries for {} tokens", feed.size(), batch.token_ids.size());
  if (native_) {
    EMBER_RETURN_IF_ERROR(executor_.enqueue_argmax(batch, feed));
    ++queued_;
    return Status::ok();
  }
  const ForwardBatch* run = &batch;
  if (!feed.empty()) {
    fed_ = batch;
    for (size_t i = 0; i < feed.size(); ++i) {
      if (feed[i] < 0) continue;
      if (static_cast<size_t>(feed[i]) >= last_.size())
        return Status::errorf("argmax pipeline: feed row {} of a step with {} rows", feed[i], last_.size());
      fed_.token_ids[i] = last_[static_cast<size_t>(feed[i])];
    }
    run = &fed_;
  }
  std::vector<int32_t> ids;
  EMBER_RETURN_IF_ERROR(executor_.execute_argmax(*run, ids));
  last_ = ids;
  done_.push_back(std::move(ids));
  ++queued_;
  return Status::ok();
}

Status ArgmaxPipeline::collect(std::vector<int32_t>& token_ids) {
  if (queued_ == 0) return Status::error("argmax pipeline: no step is queued");
  --queued_;
  if (native_) return executor_.collect_argmax(token_ids);
  token_ids = std::move(done_.front());
  done_.pop_front();
  return Status::ok();
}

}  // namespace ember
