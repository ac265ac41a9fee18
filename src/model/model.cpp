#include "model/model.h"

#include "core/check.h"
#include "model/layers.h"

#include <fmt/format.h>

#include <cmath>

namespace ember {

namespace {

std::unique_ptr<Buffer> upload_floats(Backend& be, const std::vector<float>& v) {
  auto buf = be.alloc(v.size() * sizeof(float));
  be.upload(buf->data(), v.data(), v.size() * sizeof(float));
  return buf;
}

}  // namespace

Result<std::unique_ptr<Model>> Model::load(const WeightSource& source, Backend& backend,
                                           const ModelLoadOptions& options) {
  EMBER_ASSIGN_OR_RETURN(ModelConfig config, config_from_source(source));
  std::unique_ptr<Model> model(new Model(std::move(config), backend));
  // The weights are checked against the checkpoint's shapes, then cut to the rank's share.
  EMBER_ASSIGN_OR_RETURN(model->weights_,
                         load_weights(source, model->full_config_, backend, options.progress, options.shard));
  EMBER_ASSIGN_OR_RETURN(model->config_, shard_config(model->full_config_, options.shard));
  model->shard_ = options.shard;
  const ModelConfig& c = model->config_;
  auto global = rope_inv_freq(c.rope, c.head_dim);
  const auto& factors = model->weights_.rope_freq_factors;
  for (size_t i = 0; i < factors.size() && i < global.size(); ++i) global[i] /= factors[i];
  model->rope_global_ = upload_floats(backend, global);
  model->rope_local_ = upload_floats(backend, rope_inv_freq(c.rope_local, c.head_dim));
  return model;
}

size_t Model::kv_bytes_per_block(int block_size, DType kv_dtype) const {
  const size_t per_token = static_cast<size_t>(config_.n_kv_heads) * config_.head_dim;
  size_t bytes = 2 * per_token * dtype_row_bytes(kv_dtype, 1) * static_cast<size_t>(block_size);
  if (kv_dtype == DType::I8)  // one float scale per (slot, kv head) for K and for V
    bytes += 2 * sizeof(float) * static_cast<size_t>(block_size) * config_.n_kv_heads;
  return bytes * static_cast<size_t>(config_.n_layers);
}

Result<KvStorage> Model::allocate_kv(int n_blocks, int block_size, DType kv_dtype) {
  if (n_blocks <= 0 || block_size <= 0)
    return Status::errorf("KV cache needs a positive number of blocks ({}) and block size ({})",
                          n_blocks, block_size);
  KvStorage kv;
  kv.dtype = kv_dtype;
  kv.n_blocks = n_blocks;
  kv.block_size = block_size;
  const auto& c = config_;
  for (int l = 0; l < c.n_layers; ++l) {
    KvLayer layer;
    layer.block_size = block_size;
    for (Tensor* t : {&layer.k, &layer.v}) {
      Tensor shape = make_tensor(nullptr, kv_dtype, {n_blocks, block_size, c.n_kv_heads, c.head_dim},
                                 backend_.device());
      auto buf = backend_.alloc(shape.nbytes());
      if (!buf || buf->data() == nullptr)
        return Status::errorf("cannot allocate {} bytes of KV cache", shape.nbytes());
      shape.data = buf->data();
      *t = shape;
      kv.buffers.push_back(std::move(buf));
    }
    if (kv_dtype == DType::I8) {
      const size_t scale_bytes = sizeof(float) * static_cast<size_t>(n_blocks) * block_size * c.n_kv_heads;
      for (float** s : {&layer.k_scales, &layer.v_scales}) {
        auto buf = backend_.alloc(scale_bytes);
        if (!buf || buf->data() == nullptr)
          return Status::errorf("cannot allocate {} bytes of KV cache scales", scale_bytes);
        *s = static_cast<float*>(buf->data());
        kv.buffers.push_back(std::move(buf));
      }
    }
    kv.layers.push_back(layer);
  }
  return kv;
}

namespace {

// [rows, cols] of each activation buffer, in the order of Model::Activations.
std::vector<std::pair<int64_t, int64_t>> activation_dims(const ModelConfig& c, int64_t n,
                                                         int64_t n_logit_rows) {
  const int64_t q_dim = static_cast<int64_t>(c.n_heads) * c.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(c.n_kv_heads) * c.head_dim;
  return {{n, c.d_model}, {n, c.d_model}, {n, q_dim}, {n, kv_dim}, {n, kv_dim}, {n, q_dim},
          {n, c.d_model}, {n, c.d_ff},    {n, c.d_ff}, {n_logit_rows, c.d_model},
          {n_logit_rows, c.n_vocab}};
}

size_t padded_bytes(int64_t rows, int64_t cols) {
  return (static_cast<size_t>(rows * cols) * sizeof(float) + 63) / 64 * 64;
}

}  // namespace

size_t Model::activation_bytes(int n_tokens, int n_logit_rows) const {
  size_t total = 0;
  for (auto [r, cols] : activation_dims(config_, n_tokens, n_logit_rows)) total += padded_bytes(r, cols);
  return total;
}

Status Model::grow_scratch(size_t total) {
  if (total <= scratch_bytes_) return Status::ok();
  scratch_.reset();  // (free first: on a GPU the old and the new buffer may not both fit)
  scratch_bytes_ = 0;
  ++activation_epoch_;
  scratch_ = backend_.alloc(total);
  if (!scratch_ || !scratch_->data()) return Status::errorf("cannot allocate {} bytes of activations", total);
  scratch_bytes_ = total;
  return Status::ok();
}

Status Model::reserve_activations(int n_tokens, int n_logit_rows) {
  if (n_tokens < 1 || n_logit_rows < 0)
    return Status::errorf("reserve_activations: {} tokens, {} logit rows", n_tokens, n_logit_rows);
  return grow_scratch(activation_bytes(n_tokens, n_logit_rows))
      .with_context(fmt::format("steps of {} tokens", n_tokens));
}

Model::Activations Model::activations(int n_tokens, int n_logit_rows) {
  const auto dims = activation_dims(config_, n_tokens, n_logit_rows);
  const Status grown = grow_scratch(activation_bytes(n_tokens, n_logit_rows));
  EMBER_CHECK(grown.is_ok(), "{}", grown.message());
  auto* base = static_cast<uint8_t*>(scratch_->data());
  std::vector<Tensor> ts;
  size_t off = 0;
  for (auto [r, cols] : dims) {
    ts.push_back(make_tensor(base + off, DType::F32, {r, cols}, backend_.device()));
    off += padded_bytes(r, cols);
  }
  return Activations{ts[0], ts[1], ts[2], ts[3], ts[4], ts[5], ts[6], ts[7], ts[8], ts[9], ts[10]};
}

Status Model::forward(const ForwardBatch& batch, KvStorage& kv, std::vector<float>& logits) {
  EMBER_ASSIGN_OR_RETURN(Tensor out, enqueue_forward(batch, kv));
  if (!out.valid()) {
    logits.clear();
    return Status::ok();
  }
  logits.resize(static_cast<size_t>(out.numel()));
  backend_.download(logits.data(), out.data, logits.size() * sizeof(float));
  return Status::ok();
}

Result<Tensor> Model::enqueue_forward(const ForwardBatch& batch, KvStorage& kv) {
  const auto& c = config_;
  const int n = batch.n_tokens();
  // Under tensor parallelism rank 0 alone computes the logits.
  const int n_out = shard_.rank == 0 ? static_cast<int>(batch.logit_rows.size()) : 0;
  if (n == 0) return Status::error("forward: empty batch");
  for (int32_t id : batch.token_ids)
    if (id < 0 || id >= c.n_vocab) return Status::errorf("forward: token id {} out of range [0, {})", id, c.n_vocab);
  for (int32_t r : batch.logit_rows)
    if (r < 0 || r >= n) return Status::errorf("forward: logit row {} out of range", r);
  EMBER_CHECK(static_cast<int>(batch.positions.size()) == n && static_cast<int>(batch.slot_mapping.size()) == n);
  EMBER_CHECK(static_cast<int>(batch.query_start.size()) == batch.n_seqs() + 1);
  EMBER_CHECK(static_cast<int>(kv.layers.size()) == c.n_layers);

  Activations act = activations(n, n_out);
  backend_.get_rows(weights_.tok_embd, batch.token_ids.data(), n, act.x);
  if (c.embed_scale) {
    // HF rounds the scale to the activation dtype; in f32 that is sqrt(d) itself.
    backend_.scale(act.x, std::sqrt(static_cast<float>(c.d_model)));
  }
  AttentionBatch ab;
  ab.n_seqs = batch.n_seqs();
  ab.query_start = batch.query_start.data();
  ab.seq_lens = batch.seq_lens.data();
  ab.block_tables = batch.block_tables.data();
  ab.max_blocks_per_seq = batch.max_blocks_per_seq;
  LayerContext ctx{backend_, c, batch, ab, act,
                   static_cast<const float*>(rope_global_->data()),
                   static_cast<const float*>(rope_local_->data()), shard_};
  const auto layer_fn = c.arch == Arch::Gemma3 ? gemma3_layer : llama_layer;
  for (int l = 0; l < c.n_layers; ++l)
    layer_fn(ctx, l, weights_.layers[static_cast<size_t>(l)], kv.layers[static_cast<size_t>(l)]);

  if (n_out == 0) return Tensor{};
  // Only the requested rows go through the final norm and the vocabulary projection.
  backend_.get_rows(rows_view(act.x, n, c.d_model), batch.logit_rows.data(), n_out, act.last);
  backend_.rms_norm(act.last, weights_.output_norm, c.norm_eps, act.last);
  backend_.matmul(act.last, weights_.output, nullptr, act.logits);
  Tensor logits = rows_view(act.logits, n_out, c.n_vocab);
  if (c.final_logit_softcap > 0.0f) backend_.softcap(logits, c.final_logit_softcap);
  return logits;
}

}  // namespace ember
