#pragma once
// Tensor parallelism (Megatron-style): rank r of `size` holds 1/size of each layer's heads and
// FFN width. q/k/v and gate/up are split by output rows (whole heads, FFN columns), o and
// down by input columns, so each rank computes partial sums of the out / down projections
// and one all-reduce a block adds them up (Backend::all_reduce_sum). Embeddings, norms and
// the vocabulary projection are whole on every rank; only rank 0 computes the logits.
// K/V heads are split too, or replicated when there are fewer of them than ranks (MQA / GQA
// with n_kv_heads < size, as vLLM does).
#include "core/status.h"
#include "model/config.h"

namespace ember {

struct ShardSpec {
  int rank = 0;
  int size = 1;
  bool active() const { return size > 1; }
};

// The config one rank computes with: its n_heads, n_kv_heads and d_ff. Errors name what does
// not divide by the number of ranks.
Result<ModelConfig> shard_config(const ModelConfig& full, const ShardSpec& shard);
// The first of the full model's K/V heads that rank `shard.rank` holds.
int shard_first_kv_head(const ModelConfig& full, const ShardSpec& shard);

}  // namespace ember
