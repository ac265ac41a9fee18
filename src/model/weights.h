#pragma once
// ModelWeights: every tensor of a decoder-only model, resolved by name from a WeightSource
// (HF or GGUF naming) and prepared for a Backend. Small vectors (norms, biases) are converted
// to F32 in backend memory; matrices stay in their stored format (quantized or not).
#include "backend/backend.h"
#include "loader/weight_source.h"
#include "model/config.h"
#include "model/shard.h"

#include <functional>
#include <memory>
#include <vector>

namespace ember {

struct LayerWeights {
  Tensor attn_norm;            // [d_model] F32
  Tensor wq, wk, wv, wo;       // [n_heads*head_dim, d_model], ..., [d_model, n_heads*head_dim]
  Tensor bq, bk, bv;           // [n_out] F32 (Qwen2), invalid otherwise
  Tensor q_norm, k_norm;       // [head_dim] F32 (Qwen3, Gemma 3)
  Tensor post_attn_norm;       // [d_model] (Gemma 3)
  Tensor ffn_norm;             // [d_model] pre-FFN norm
  Tensor post_ffn_norm;        // [d_model] (Gemma 3)
  Tensor w_gate, w_up;         // [d_ff, d_model]
  Tensor w_down;               // [d_model, d_ff]
};

struct ModelWeights {
  Tensor tok_embd;              // [n_vocab, d_model]
  std::vector<LayerWeights> layers;
  Tensor output_norm;           // [d_model] F32
  Tensor output;                // [n_vocab, d_model] (tok_embd when tied)
  std::vector<float> rope_freq_factors;  // GGUF llama3 scaling: divides inv_freq, may be empty
  std::vector<std::unique_ptr<Buffer>> owned;  // backend buffers for converted small tensors
  // Host copies of column slices (tensor parallel: o / down) that the backend uses in place.
  std::vector<std::shared_ptr<void>> host_owned;
};

// Resolves and validates every tensor (shape and presence) against the full model's config,
// naming the file and tensor in errors; with an active shard, keeps rank shard.rank's part of
// each layer (model/shard.h). progress(done, total) is called as tensors are prepared.
Result<ModelWeights> load_weights(const WeightSource& source, const ModelConfig& config,
                                  Backend& backend,
                                  const std::function<void(int, int)>& progress = nullptr,
                                  const ShardSpec& shard = {});

}  // namespace ember
