#include "sched/scheduler_config.h"

namespace ember {


Status SchedulerConfig::validate() const {
  if (max_num_batched_tokens < 1)
    return Status::errorf("max_num_batched_tokens must be >= 1, got {}", max_num_batched_tokens);
  if (max_num_seqs < 1) return Status::errorf("max_num_seqs must be >= 1, got {}", max_num_seqs);
  if (block_size < 1) return Status::errorf("block_size must be >= 1, got {}", block_size);
  if (n_blocks < 1) return Status::errorf("the KV cache needs at least one block, got {}", n_blocks);
  if (max_model_len < 1) return Status::errorf("max_model_len must be >= 1, got {}", max_model_len);
  if (long_prefill_token_threshold < 0)
    return Status::errorf("long_prefill_token_threshold must be >= 0, got {}",
                          long_prefill_token_threshold);
  return Status::ok();
}

}  // namespace ember
