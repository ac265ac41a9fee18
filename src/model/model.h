#pragma once
// Model: a decoder-only transformer on a Backend. It never sees requests: it takes a
// ForwardBatch (tokens, positions, slots, block tables) and the paged K/V storage, and
// returns the logits of the rows the batch asks for.
#include "backend/backend.h"
#include "loader/weight_source.h"
#include "model/config.h"
#include "model/forward_batch.h"
#include "model/shard.h"
#include "model/weights.h"

#include <functional>
#include <memory>
#include <vector>

namespace ember {

// K/V storage of all layers: per layer [n_blocks, block_size, n_kv_heads, head_dim].
struct KvStorage {
  std::vector<KvLayer> layers;
  std::vector<std::unique_ptr<Buffer>> buffers;
  DType dtype = DType::F32;
  int n_blocks = 0;
  int block_size = 16;
};

struct ModelLoadOptions {
  std::function<void(int done, int total)> progress;  // called per layer while loading
  ShardSpec shard;  // tensor parallel: the part of the model this backend runs
};

class Model {
 public:
  static Result<std::unique_ptr<Model>> load(const WeightSource& source, Backend& backend,
                                             const ModelLoadOptions& options = {});
  // This rank's config: under tensor parallelism its n_heads, n_kv_heads and d_ff are its
  // share (model/shard.h); full_config() is the checkpoint's.
  const ModelConfig& config() const { return config_; }
  const ModelConfig& full_config() const { return full_config_; }
  const ShardSpec& shard() const { return shard_; }
  Backend& backend() { return backend_; }

  size_t kv_bytes_per_block(int block_size, DType kv_dtype) const;
  Result<KvStorage> allocate_kv(int n_blocks, int block_size, DType kv_dtype);
  // logits: [batch.logit_rows.size(), n_vocab] on the host (tensor parallel: rank 0 only;
  // the other ranks return no rows).
  Status forward(const ForwardBatch& batch, KvStorage& kv, std::vector<float>& logits);
  // The same forward pass, queued on the backend without waiting: returns the logit rows
  // [batch.logit_rows.size(), n_vocab] F32 in backend memory (an invalid tensor when no rows
  // are asked for), final soft-capping applied. (GPU runners capture this part in CUDA graphs.)
  Result<Tensor> enqueue_forward(const ForwardBatch& batch, KvStorage& kv);
  // Bytes of activation buffers a step of n_tokens tokens with n_logit_rows logit rows needs.
  size_t activation_bytes(int n_tokens, int n_logit_rows) const;
  // Grows the activation buffers to fit a step of n_tokens tokens and n_logit_rows logit rows
  // now, so that no step up to that size moves them later.
  Status reserve_activations(int n_tokens, int n_logit_rows);
  // Changes whenever the activation buffers move (device addresses captured earlier are stale).
  uint64_t activation_epoch() const { return activation_epoch_; }

  // Activations of one step, in backend memory.
  struct Activations {
    Tensor x, h, q, k, v, attn, o, gate, up, last, logits;
  };

 private:
  Model(ModelConfig config, Backend& backend) : full_config_(config), config_(std::move(config)), backend_(backend) {}
  Activations activations(int n_tokens, int n_logit_rows);
  // The activation buffer grown to at least total bytes (moving it moves activation_epoch).
  Status grow_scratch(size_t total);

  ModelConfig full_config_;
  ModelConfig config_;
  ShardSpec shard_;
  Backend& backend_;
  ModelWeights weights_;
  std::unique_ptr<Buffer> rope_global_, rope_local_;  // inverse frequencies [head_dim / 2]
  std::unique_ptr<Buffer> scratch_;
  size_t scratch_bytes_ = 0;
  uint64_t activation_epoch_ = 0;
};

}  // namespace ember
