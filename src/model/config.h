#pragma once
// ModelConfig: the hyper-parameters a forward pass needs, read from an HF config.json
// (transformers 4 `rope_theta`/`rope_scaling` or transformers 5 `rope_parameters`) or from
// GGUF metadata. One struct for every supported architecture; flags say what differs.
#include "core/status.h"
#include "loader/weight_source.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace ember {

enum class Arch { Llama, Qwen2, Qwen3, Gemma3 };

struct RopeScaling {
  enum class Type { None, Linear, Llama3 } type = Type::None;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position = 8192;
};

struct RopeConfig {
  float theta = 10000.0f;
  RopeScaling scaling;
};

struct ModelConfig {
  Arch arch = Arch::Llama;
  std::string arch_name;  // as written in the checkpoint ("llama", "qwen2", "gemma3_text", ...)
  int n_vocab = 0;
  int d_model = 0;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int d_ff = 0;
  int max_context = 4096;
  float norm_eps = 1e-5f;
  RopeConfig rope;          // global (full-attention) layers
  RopeConfig rope_local;    // sliding-window layers (Gemma 3)
  bool rope_neox = true;    // false for GGUF llama files, whose Q/K rows are permuted
  bool tie_embeddings = false;
  bool attn_bias = false;   // Qwen2: biases on q/k/v projections
  bool qk_norm = false;     // Qwen3, Gemma 3: RMSNorm over head_dim on q and k
  bool sandwich_norms = false;  // Gemma 3: post-attention and pre/post-FFN norms
  bool gelu_tanh = false;   // GeGLU instead of SwiGLU
  bool embed_scale = false; // multiply embeddings by sqrt(d_model)
  bool norm_weight_plus_one = false;  // HF Gemma stores w where the norm uses (1 + w)
  float attn_scale = 0.0f;  // softmax scale; 1/sqrt(head_dim) unless the model says otherwise
  float final_logit_softcap = 0.0f;
  float attn_logit_softcap = 0.0f;
  int sliding_window = 0;
  std::vector<bool> layer_sliding;  // [n_layers] true where the layer uses the window
  std::vector<int> eos_token_ids;   // from generation_config / GGUF, may be empty
  std::vector<int> bos_token_ids;
};

// Names accepted for error messages: "llama, mistral, qwen2, qwen3, gemma3".
std::string supported_architectures();
Result<ModelConfig> config_from_hf(const nlohmann::json& config);
Result<ModelConfig> config_from_gguf(const nlohmann::json& metadata);
Result<ModelConfig> config_from_source(const WeightSource& source);
// Inverse frequencies [rotary_dim / 2] with the scaling applied.
std::vector<float> rope_inv_freq(const RopeConfig& rope, int rotary_dim);

}  // namespace ember
