#pragma once
// Shared layers of the decoder architectures: every architecture file composes these.
#include "backend/backend.h"
#include "model/config.h"
#include "model/forward_batch.h"
#include "model/model.h"
#include "model/shard.h"
#include "model/weights.h"

namespace ember {

struct LayerContext {
  Backend& backend;
  const ModelConfig& config;
  const ForwardBatch& batch;
  const AttentionBatch& attn_batch;
  Model::Activations& act;
  const float* rope_global;  // backend memory, [head_dim / 2]
  const float* rope_local;
  ShardSpec shard;  // tensor parallel: config holds this rank's heads and FFN width
};

// Self-attention of layer `index` on normalized input act.h [n, d_model]; result in act.o.
// Applies biases and q/k norms when the layer has them.
// residual: when given, the block's output projection is added into it (x += o) instead of
// written to act.o, in one pass where the backend can (Backend::matmul_accumulate). Under
// tensor parallelism the out projection's partial sums of all ranks are added up
// (Backend::all_reduce_sum) either way.
void attention_block(LayerContext& ctx, int index, const LayerWeights& w, KvLayer& kv, Tensor* residual = nullptr);
// Gated MLP on act.h; result in act.o.
void mlp_block(LayerContext& ctx, const LayerWeights& w, Tensor* residual = nullptr);
// View of the first rows of a [rows, cols] activation buffer.
Tensor rows_view(const Tensor& t, int64_t rows, int64_t cols);

// Architecture layers (one file each).
void llama_layer(LayerContext& ctx, int index, const LayerWeights& w, KvLayer& kv);
void gemma3_layer(LayerContext& ctx, int index, const LayerWeights& w, KvLayer& kv);

}  // namespace ember
