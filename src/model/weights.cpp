#include "model/weights.h"

#include "quant/quant.h"

#include <fmt/format.h>

#include <cstring>
#include <new>

namespace ember {

namespace {

// Tensor names of one checkpoint format.
struct Naming {
  bool gguf;
  std::string embd() const { return gguf ? "token_embd.weight" : "model.embed_tokens.weight"; }
  std::string out_norm() const { return gguf ? "output_norm.weight" : "model.norm.weight"; }
  std::string output() const { return gguf ? "output.weight" : "lm_head.weight"; }
  std::string layer(int i, const char* gguf_name, const char* hf_name) const {
    return gguf ? fmt::format("blk.{}.{}", i, gguf_name) : fmt::format("model.layers.{}.{}", i, hf_name);
  }
};

// The part of a matrix (rows or columns) or of a vector one tensor-parallel rank keeps.
struct Slice {
  enum class Dim { All, Rows, Cols } dim = Dim::All;
  int64_t begin = 0, count = 0;
  static Slice rows(int64_t begin, int64_t count) { return {Dim::Rows, begin, count}; }
  static Slice cols(int64_t begin, int64_t count) { return {Dim::Cols, begin, count}; }
};

class Loader {
 public:
  Loader(const WeightSource& src, const ModelConfig& cfg, Backend& be, ModelWeights& w)
      : src_(src), cfg_(cfg), be_(be), w_(w) {}

  // A matrix kept in its stored format, shape-checked as [rows, cols]; then its slice.
  Result<Tensor> matrix(const std::string& name, int64_t rows, int64_t cols, Slice slice = {}) {
    EMBER_ASSIGN_OR_RETURN(Tensor t, src_.tensor(name));
    if (t.n_dims != 2 || t.dim(0) != rows || t.dim(1) != cols)
      return Status::errorf("{}: tensor '{}' has shape {}, expected [{}, {}]", src_.path(), name,
                            shape_string(t), rows, cols);
    if (!quant::can_dequantize(t.dtype) || t.dtype == DType::FP8_E4M3 || t.dtype == DType::FP8_E5M2)
      return Status::errorf("{}: tensor '{}' has unsupported dtype {}", src_.path(), name,
                            dtype_name(t.dtype));
    if (slice.dim == Slice::Dim::Rows) {  // whole rows: a view
      t.data = const_cast<uint8_t*>(t.row_ptr(slice.begin));
      t.shape[0] = slice.count;
    } else if (slice.dim == Slice::Dim::Cols) {
      EMBER_ASSIGN_OR_RETURN(t, column_copy(name, t, slice));
    }
    auto prepared = be_.prepare_weight(t);
    if (!prepared.is_ok()) return prepared.status().with_context(src_.path() + ": tensor '" + name + "'");
    return prepared;
  }

  // A vector converted to F32 (plus an optional offset) in backend memory; with a row slice,
  // only elements [begin, begin + count).
  Result<Tensor> vector(const std::string& name, int64_t n, float offset = 0.0f, Slice slice = {}) {
    EMBER_ASSIGN_OR_RETURN(Tensor t, src_.tensor(name));
    if (t.numel() != n || t.n_cols() != n)
      return Status::errorf("{}: tensor '{}' has shape {}, expected [{}]", src_.path(), name,
                            shape_string(t), n);
    if (!quant::can_dequantize(t.dtype) || dtype_block_size(t.dtype) != 1)
      return Status::errorf("{}: tensor '{}' has unsupported dtype {} for a vector", src_.path(),
                            name, dtype_name(t.dtype));
    std::vector<float> host(static_cast<size_t>(n));
    quant::dequantize_row(t.dtype, t.data, host.data(), n);
    for (auto& v : host) v += offset;
    if (slice.dim == Slice::Dim::Rows) {
      host.erase(host.begin() + slice.begin + slice.count, host.end());
      host.erase(host.begin(), host.begin() + slice.begin);
      n = slice.count;
    }
    auto buf = be_.alloc(host.size() * sizeof(float));
    be_.upload(buf->data(), host.data(), host.size() * sizeof(float));
    Tensor out = make_tensor(buf->data(), DType::F32, {n}, be_.device());
    w_.owned.push_back(std::move(buf));
    return out;
  }

  Result<Tensor> optional_vector(const std::string& name, int64_t n, float offset = 0.0f) {
    if (!src_.has_tensor(name)) return Tensor{};
    return vector(name, n, offset);
  }

 private:
  // Columns [begin, begin + count) of every row, copied to host memory the weights keep
  // (quantized rows are cut at block boundaries only).
  Result<Tensor> column_copy(const std::string& name, const Tensor& t, const Slice& slice) {
    const int64_t block = dtype_block_size(t.dtype);
    if (slice.begin % block != 0 || slice.count % block != 0)
      return Status::errorf("{}: tensor '{}' ({}, blocks of {}) cannot be split for tensor parallelism: a "
                            "rank's columns [{}, {}) are not whole blocks", src_.path(), name, dtype_name(t.dtype),
                            block, slice.begin, slice.begin + slice.count);
    const size_t skip = dtype_row_bytes(t.dtype, slice.begin), row = dtype_row_bytes(t.dtype, slice.count);
    const size_t bytes = row * static_cast<size_t>(t.dim(0));
    std::shared_ptr<void> mem(::operator new[](bytes, std::align_val_t{64}),
                              [](void* p) { ::operator delete[](p, std::align_val_t{64}); });
    auto* dst = static_cast<uint8_t*>(mem.get());
    for (int64_t r = 0; r < t.dim(0); ++r) std::memcpy(dst + row * static_cast<size_t>(r), t.row_ptr(r) + skip, row);
    w_.host_owned.push_back(mem);
    Tensor out = t;
    out.data = dst;
    out.shape[1] = slice.count;
    return out;
  }

  const WeightSource& src_;
  const ModelConfig& cfg_;
  Backend& be_;
  ModelWeights& w_;
};

// The slices of one rank's layer (all whole without tensor parallelism).
struct LayerSlices {
  Slice q_rows, kv_rows, ffn_rows;  // of wq (and bq); wk, wv (and biases); w_gate, w_up
  Slice q_cols, ffn_cols;           // of wo; w_down
};

// full: the checkpoint's config; rank: shard_config's (the rank's heads and FFN width).
LayerSlices layer_slices(const ModelConfig& full, const ModelConfig& rank, const ShardSpec& s) {
  if (!s.active()) return {};
  const int64_t hd = full.head_dim, q_heads = rank.n_heads, kv_heads = rank.n_kv_heads, f = rank.d_ff;
  LayerSlices ls;
  ls.q_rows = Slice::rows(s.rank * q_heads * hd, q_heads * hd);
  ls.kv_rows = Slice::rows(shard_first_kv_head(full, s) * hd, kv_heads * hd);
  ls.ffn_rows = Slice::rows(s.rank * f, f);
  ls.q_cols = Slice::cols(s.rank * q_heads * hd, q_heads * hd);
  ls.ffn_cols = Slice::cols(s.rank * f, f);
  return ls;
}

Status load_layer(Loader& ld, const Naming& nm, const ModelConfig& c, int i, const LayerSlices& sl, LayerWeights& L) {
  const int64_t d = c.d_model, q_out = static_cast<int64_t>(c.n_heads) * c.head_dim,
                kv_out = static_cast<int64_t>(c.n_kv_heads) * c.head_dim, f = c.d_ff;
  const float norm_off = c.norm_weight_plus_one ? 1.0f : 0.0f;
  EMBER_ASSIGN_OR_RETURN(L.attn_norm, ld.vector(nm.layer(i, "attn_norm.weight", "input_layernorm.weight"), d, norm_off));
  EMBER_ASSIGN_OR_RETURN(L.wq, ld.matrix(nm.layer(i, "attn_q.weight", "self_attn.q_proj.weight"), q_out, d, sl.q_rows));
  EMBER_ASSIGN_OR_RETURN(L.wk, ld.matrix(nm.layer(i, "attn_k.weight", "self_attn.k_proj.weight"), kv_out, d, sl.kv_rows));
  EMBER_ASSIGN_OR_RETURN(L.wv, ld.matrix(nm.layer(i, "attn_v.weight", "self_attn.v_proj.weight"), kv_out, d, sl.kv_rows));
  EMBER_ASSIGN_OR_RETURN(L.wo, ld.matrix(nm.layer(i, "attn_output.weight", "self_attn.o_proj.weight"), d, q_out, sl.q_cols));
  if (c.attn_bias) {
    EMBER_ASSIGN_OR_RETURN(L.bq, ld.vector(nm.layer(i, "attn_q.bias", "self_attn.q_proj.bias"), q_out, 0.0f, sl.q_rows));
    EMBER_ASSIGN_OR_RETURN(L.bk, ld.vector(nm.layer(i, "attn_k.bias", "self_attn.k_proj.bias"), kv_out, 0.0f, sl.kv_rows));
    EMBER_ASSIGN_OR_RETURN(L.bv, ld.vector(nm.layer(i, "attn_v.bias", "self_attn.v_proj.bias"), kv_out, 0.0f, sl.kv_rows));
  }
  if (c.qk_norm) {
    EMBER_ASSIGN_OR_RETURN(L.q_norm, ld.vector(nm.layer(i, "attn_q_norm.weight", "self_attn.q_norm.weight"), c.head_dim, norm_off));
    EMBER_ASSIGN_OR_RETURN(L.k_norm, ld.vector(nm.layer(i, "attn_k_norm.weight", "self_attn.k_norm.weight"), c.head_dim, norm_off));
  }
  if (c.sandwich_norms) {
    EMBER_ASSIGN_OR_RETURN(L.post_attn_norm, ld.vector(nm.layer(i, "post_attention_norm.weight", "post_attention_layernorm.weight"), d, norm_off));
    EMBER_ASSIGN_OR_RETURN(L.ffn_norm, ld.vector(nm.layer(i, "ffn_norm.weight", "pre_feedforward_layernorm.weight"), d, norm_off));
    EMBER_ASSIGN_OR_RETURN(L.post_ffn_norm, ld.vector(nm.layer(i, "post_ffw_norm.weight", "post_feedforward_layernorm.weight"), d, norm_off));
  } else {
    EMBER_ASSIGN_OR_RETURN(L.ffn_norm, ld.vector(nm.layer(i, "ffn_norm.weight", "post_attention_layernorm.weight"), d, norm_off));
  }
  EMBER_ASSIGN_OR_RETURN(L.w_gate, ld.matrix(nm.layer(i, "ffn_gate.weight", "mlp.gate_proj.weight"), f, d, sl.ffn_rows));
  EMBER_ASSIGN_OR_RETURN(L.w_up, ld.matrix(nm.layer(i, "ffn_up.weight", "mlp.up_proj.weight"), f, d, sl.ffn_rows));
  EMBER_ASSIGN_OR_RETURN(L.w_down, ld.matrix(nm.layer(i, "ffn_down.weight", "mlp.down_proj.weight"), d, f, sl.ffn_cols));
  return Status::ok();
}

}  // namespace

Result<ModelWeights> load_weights(const WeightSource& source, const ModelConfig& c, Backend& backend,
                                  const std::function<void(int, int)>& progress, const ShardSpec& shard) {
  EMBER_ASSIGN_OR_RETURN(const ModelConfig rank_config, shard_config(c, shard));
  const LayerSlices slices = layer_slices(c, rank_config, shard);
  ModelWeights w;
  Naming nm{source.format() == CheckpointFormat::GGUF};
  Loader ld(source, c, backend, w);
  EMBER_ASSIGN_OR_RETURN(w.tok_embd, ld.matrix(nm.embd(), c.n_vocab, c.d_model));
  w.layers.resize(static_cast<size_t>(c.n_layers));
  for (int i = 0; i < c.n_layers; ++i) {
    EMBER_RETURN_IF_ERROR(load_layer(ld, nm, c, i, slices, w.layers[static_cast<size_t>(i)]));
    if (progress) progress(i + 1, c.n_layers);
  }
  EMBER_ASSIGN_OR_RETURN(w.output_norm, ld.vector(nm.out_norm(), c.d_model, c.norm_weight_plus_one ? 1.0f : 0.0f));
  const bool has_output = source.has_tensor(nm.output());
  if (has_output && (nm.gguf || !c.tie_embeddings)) {
    EMBER_ASSIGN_OR_RETURN(w.output, ld.matrix(nm.output(), c.n_vocab, c.d_model));
  } else if (!has_output && !nm.gguf && !c.tie_embeddings) {
    return Status::errorf("{}: missing tensor '{}' (embeddings are not tied)", source.path(), nm.output());
  } else {
    w.output = w.tok_embd;  // tied embeddings, with or without an lm_head copy in the file
  }
  if (nm.gguf && source.has_tensor("rope_freqs.weight")) {
    EMBER_ASSIGN_OR_RETURN(Tensor rf, source.tensor("rope_freqs.weight"));
    if (rf.dtype != DType::F32 || rf.numel() != c.head_dim / 2)
      return Status::errorf("{}: tensor 'rope_freqs.weight' must be F32 [{}], got {} {}",
                            source.path(), c.head_dim / 2, dtype_name(rf.dtype), shape_string(rf));
    w.rope_freq_factors.assign(rf.as<float>(), rf.as<float>() + rf.numel());
  }
  // Other backends have copied the column slices into their own memory.
  if (backend.device() != Device::CPU) w.host_owned.clear();
  return w;
}

}  // namespace ember
