#include "model/config.h"

#include <cmath>

namespace ember {

namespace {

using nlohmann::json;

Result<int> get_int(const json& j, const std::string& key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer())
    return Status::errorf("{}: missing or non-integer '{}'", where, key);
  const auto v = it->get<int64_t>();
  if (v < 0 || v > (1 << 30)) return Status::errorf("{}: '{}' = {} is out of range", where, key, v);
  return static_cast<int>(v);
}

int get_int_or(const json& j, const std::string& key, int fallback) {
  auto it = j.find(key);
  return (it != j.end() && it->is_number_integer()) ? it->get<int>() : fallback;
}

float get_float_or(const json& j, const std::string& key, float fallback) {
  auto it = j.find(key);
  return (it != j.end() && it->is_number()) ? it->get<float>() : fallback;
}

std::vector<int> int_list(const json& j) {
  std::vector<int> out;
  if (j.is_number_integer()) out.push_back(j.get<int>());
  if (j.is_array())
    for (const auto& e : j)
      if (e.is_number_integer()) out.push_back(e.get<int>());
  return out;
}

// Reads transformers-4 (`rope_theta`, `rope_scaling`) or transformers-5 (`rope_parameters`)
// rope settings; `params` is the object holding rope_type/factor/... when present.
Result<RopeConfig> parse_rope(const json& params, float default_theta, const std::string& where) {
  RopeConfig rope;
  rope.theta = get_float_or(params, "rope_theta", default_theta);
  std::string type = "default";
  if (params.contains("rope_type") && params["rope_type"].is_string()) type = params["rope_type"];
  else if (params.contains("type") && params["type"].is_string()) type = params["type"];
  if (type == "default") return rope;
  rope.scaling.factor = get_float_or(params, "factor", 1.0f);
  if (type == "linear") {
    rope.scaling.type = RopeScaling::Type::Linear;
  } else if (type == "llama3") {
    rope.scaling.type = RopeScaling::Type::Llama3;
    rope.scaling.low_freq_factor = get_float_or(params, "low_freq_factor", 1.0f);
    rope.scaling.high_freq_factor = get_float_or(params, "high_freq_factor", 4.0f);
    rope.scaling.original_max_position = get_int_or(params, "original_max_position_embeddings", 8192);
  } else {
    return Status::errorf("{}: rope scaling type '{}' is not supported (default, linear, llama3)",
                          where, type);
  }
  if (!(rope.scaling.factor > 0.0f)) return Status::errorf("{}: rope scaling factor must be > 0", where);
  return rope;
}

Status validate(const ModelConfig& c, const std::string& where) {
  if (c.n_layers <= 0 || c.d_model <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 ||
      c.head_dim <= 0 || c.d_ff <= 0)
    return Status::errorf("{}: sizes must be positive (layers {}, hidden {}, heads {}, kv heads {}, "
                          "head_dim {}, ffn {})", where, c.n_layers, c.d_model, c.n_heads,
                          c.n_kv_heads, c.head_dim, c.d_ff);
  if (c.n_heads % c.n_kv_heads != 0)
    return Status::errorf("{}: {} attention heads are not a multiple of {} kv heads", where,
                          c.n_heads, c.n_kv_heads);
  if (c.head_dim % 2 != 0) return Status::errorf("{}: head_dim {} must be even", where, c.head_dim);
  if (static_cast<int>(c.layer_sliding.size()) != c.n_layers)
    return Status::errorf("{}: layer type list has {} entries for {} layers", where,
                          c.layer_sliding.size(), c.n_layers);
  return Status::ok();
}

}  // namespace

std::string supported_architectures() { return "llama, mistral, qwen2, qwen3, gemma3"; }

Result<ModelConfig> config_from_hf(const json& config_in) {
  const std::string where = "config.json";
  if (!config_in.is_object()) return Status::errorf("{}: not a JSON object", where);
  // Multimodal Gemma 3 checkpoints keep the language model's settings in text_config.
  const json& j = config_in.contains("text_config") ? config_in["text_config"] : config_in;
  std::string model_type = j.value("model_type", config_in.value("model_type", std::string()));
  ModelConfig c;
  c.arch_name = model_type;
  if (model_type == "llama" || model_type == "mistral") c.arch = Arch::Llama;
  else if (model_type == "qwen2") c.arch = Arch::Qwen2;
  else if (model_type == "qwen3") c.arch = Arch::Qwen3;
  else if (model_type == "gemma3_text" || model_type == "gemma3") c.arch = Arch::Gemma3;
  else
    return Status::errorf("{}: unsupported architecture '{}' (supported: {})", where,
                          model_type.empty() ? "<missing model_type>" : model_type,
                          supported_architectures());
  EMBER_ASSIGN_OR_RETURN(c.n_vocab, get_int(j, "vocab_size", where));
  EMBER_ASSIGN_OR_RETURN(c.d_model, get_int(j, "hidden_size", where));
  EMBER_ASSIGN_OR_RETURN(c.n_layers, get_int(j, "num_hidden_layers", where));
  EMBER_ASSIGN_OR_RETURN(c.n_heads, get_int(j, "num_attention_heads", where));
  EMBER_ASSIGN_OR_RETURN(c.d_ff, get_int(j, "intermediate_size", where));
  c.n_kv_heads = get_int_or(j, "num_key_value_heads", c.n_heads);
  c.head_dim = (j.contains("head_dim") && j["head_dim"].is_number_integer())
                   ? j["head_dim"].get<int>()
                   : (c.n_heads > 0 ? c.d_model / c.n_heads : 0);
  c.max_context = get_int_or(j, "max_position_embeddings", 4096);
  c.norm_eps = get_float_or(j, "rms_norm_eps", 1e-6f);
  c.tie_embeddings = j.value("tie_word_embeddings", config_in.value("tie_word_embeddings", false));
  c.attn_bias = c.arch == Arch::Qwen2 || (j.contains("attention_bias") && j["attention_bias"].is_boolean() &&
                                          j["attention_bias"].get<bool>());
  c.qk_norm = c.arch == Arch::Qwen3 || c.arch == Arch::Gemma3;
  c.eos_token_ids = int_list(j.value("eos_token_id", json()));
  c.bos_token_ids = int_list(j.value("bos_token_id", json()));

  const float default_theta = get_float_or(j, "rope_theta", c.arch == Arch::Gemma3 ? 1e6f : 10000.0f);
  const json rope_params = j.contains("rope_parameters") && j["rope_parameters"].is_object()
                               ? j["rope_parameters"]
                               : (j.contains("rope_scaling") && j["rope_scaling"].is_object()
                                      ? j["rope_scaling"] : json::object());
  c.layer_sliding.assign(static_cast<size_t>(c.n_layers), false);
  if (c.arch == Arch::Gemma3) {
    c.tie_embeddings = true;
    c.sandwich_norms = true;
    c.gelu_tanh = true;
    c.embed_scale = true;
    c.norm_weight_plus_one = true;
    c.sliding_window = get_int_or(j, "sliding_window", 4096);
    c.attn_scale = 1.0f / std::sqrt(get_float_or(j, "query_pre_attn_scalar",
                                                 static_cast<float>(c.head_dim)));
    c.final_logit_softcap = get_float_or(j, "final_logit_softcapping", 0.0f);
    c.attn_logit_softcap = get_float_or(j, "attn_logit_softcapping", 0.0f);
    const int pattern = get_int_or(j, "sliding_window_pattern", get_int_or(j, "_sliding_window_pattern", 6));
    if (j.contains("layer_types") && j["layer_types"].is_array()) {
      if (j["layer_types"].size() != static_cast<size_t>(c.n_layers))
        return Status::errorf("{}: layer_types has {} entries for {} layers", where,
                              j["layer_types"].size(), c.n_layers);
      for (int i = 0; i < c.n_layers; ++i)
        c.layer_sliding[static_cast<size_t>(i)] = j["layer_types"][static_cast<size_t>(i)] == "sliding_attention";
    } else {
      for (int i = 0; i < c.n_layers; ++i)
        c.layer_sliding[static_cast<size_t>(i)] = pattern <= 0 || (i + 1) % pattern != 0;
    }
    const bool per_type = rope_params.contains("full_attention") || rope_params.contains("sliding_attention");
    const json full = per_type ? rope_params.value("full_attention", json::object()) : rope_params;
    EMBER_ASSIGN_OR_RETURN(c.rope, parse_rope(full, default_theta, where));
    if (per_type) {
      EMBER_ASSIGN_OR_RETURN(c.rope_local, parse_rope(rope_params.value("sliding_attention", json::object()),
                                                      10000.0f, where));
    } else {
      c.rope_local.theta = get_float_or(j, "rope_local_base_freq", 10000.0f);
    }
  } else {
    EMBER_ASSIGN_OR_RETURN(c.rope, parse_rope(rope_params, default_theta, where));
    c.rope_local = c.rope;
    if (j.value("use_sliding_window", false) && j.contains("sliding_window") &&
        j["sliding_window"].is_number_integer()) {
      // Mistral-style windows apply to every layer (Qwen2 below max_window_layers only).
      c.sliding_window = j["sliding_window"].get<int>();
      const int max_window_layers = get_int_or(j, "max_window_layers", c.n_layers);
      for (int i = 0; i < c.n_layers; ++i)
        c.layer_sliding[static_cast<size_t>(i)] = c.arch != Arch::Qwen2 || i >= max_window_layers;
    } else if (model_type == "mistral" && j.contains("sliding_window") && j["sliding_window"].is_number_integer()) {
      c.sliding_window = j["sliding_window"].get<int>();
      c.layer_sliding.assign(static_cast<size_t>(c.n_layers), true);
    }
  }
  if (c.attn_scale == 0.0f) c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  EMBER_RETURN_IF_ERROR(validate(c, where));
  return c;
}

Result<ModelConfig> config_from_gguf(const json& md) {
  const std::string where = "GGUF metadata";
  if (!md.contains("general.architecture") || !md["general.architecture"].is_string())
    return Status::errorf("{}: missing general.architecture", where);
  const std::string arch = md["general.architecture"];
  ModelConfig c;
  c.arch_name = arch;
  if (arch == "llama") c.arch = Arch::Llama;
  else if (arch == "qwen2") c.arch = Arch::Qwen2;
  else if (arch == "qwen3") c.arch = Arch::Qwen3;
  else if (arch == "gemma3") c.arch = Arch::Gemma3;
  else
    return Status::errorf("{}: unsupported architecture '{}' (supported: {})", where, arch,
                          supported_architectures());
  const std::string p = arch + ".";
  EMBER_ASSIGN_OR_RETURN(c.d_model, get_int(md, p + "embedding_length", where));
  EMBER_ASSIGN_OR_RETURN(c.n_layers, get_int(md, p + "block_count", where));
  EMBER_ASSIGN_OR_RETURN(c.n_heads, get_int(md, p + "attention.head_count", where));
  EMBER_ASSIGN_OR_RETURN(c.d_ff, get_int(md, p + "feed_forward_length", where));
  c.n_kv_heads = get_int_or(md, p + "attention.head_count_kv", c.n_heads);
  c.head_dim = get_int_or(md, p + "attention.key_length", c.n_heads > 0 ? c.d_model / c.n_heads : 0);
  c.max_context = get_int_or(md, p + "context_length", 4096);
  c.norm_eps = get_float_or(md, p + "attention.layer_norm_rms_epsilon", 1e-5f);
  c.rope.theta = get_float_or(md, p + "rope.freq_base", 10000.0f);
  const std::string scaling = md.value(p + "rope.scaling.type", std::string("none"));
  if (scaling == "linear") {
    c.rope.scaling.type = RopeScaling::Type::Linear;
    c.rope.scaling.factor = get_float_or(md, p + "rope.scaling.factor", 1.0f);
  } else if (scaling != "none" && scaling != "") {
    return Status::errorf("{}: rope scaling type '{}' is not supported", where, scaling);
  }
  // llama3-style scaling arrives as per-frequency factors in the rope_freqs tensor (handled
  // by the weight loader), not as metadata.
  c.rope_local = c.rope;
  c.rope_neox = c.arch != Arch::Llama;
  c.attn_bias = c.arch == Arch::Qwen2;
  c.qk_norm = c.arch == Arch::Qwen3 || c.arch == Arch::Gemma3;
  if (md.contains("tokenizer.ggml.tokens") && md["tokenizer.ggml.tokens"].is_array())
    c.n_vocab = static_cast<int>(md["tokenizer.ggml.tokens"].size());
  c.n_vocab = get_int_or(md, p + "vocab_size", c.n_vocab);
  if (md.contains("tokenizer.ggml.eos_token_id")) c.eos_token_ids = int_list(md["tokenizer.ggml.eos_token_id"]);
  if (md.contains("tokenizer.ggml.bos_token_id")) c.bos_token_ids = int_list(md["tokenizer.ggml.bos_token_id"]);
  c.layer_sliding.assign(static_cast<size_t>(c.n_layers), false);
  if (c.arch == Arch::Gemma3) {
    c.sandwich_norms = true;
    c.gelu_tanh = true;
    c.embed_scale = true;
    c.norm_weight_plus_one = false;  // the GGUF converter already folded the +1 in
    c.sliding_window = get_int_or(md, p + "attention.sliding_window", 512);
    // GGUF does not store the layer pattern; Gemma 3 makes every 6th layer global.
    for (int i = 0; i < c.n_layers; ++i) c.layer_sliding[static_cast<size_t>(i)] = (i + 1) % 6 != 0;
    c.rope_local.theta = 10000.0f;
    c.rope_local.scaling = RopeScaling{};
    c.final_logit_softcap = get_float_or(md, p + "final_logit_softcapping", 0.0f);
    c.attn_logit_softcap = get_float_or(md, p + "attn_logit_softcapping", 0.0f);
  }
  c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  EMBER_RETURN_IF_ERROR(validate(c, where));
  return c;
}

Result<ModelConfig> config_from_source(const WeightSource& source) {
  auto r = source.format() == CheckpointFormat::GGUF ? config_from_gguf(source.metadata())
                                                     : config_from_hf(source.metadata());
  if (!r.is_ok()) return r.status().with_context(source.path());
  return r;
}

std::vector<float> rope_inv_freq(const RopeConfig& rope, int rotary_dim) {
  std::vector<float> inv(static_cast<size_t>(rotary_dim / 2));
  const auto& s = rope.scaling;
  for (int i = 0; i < rotary_dim / 2; ++i) {
    double f = 1.0 / std::pow(static_cast<double>(rope.theta), 2.0 * i / rotary_dim);
    if (s.type == RopeScaling::Type::Linear) {
      f /= s.factor;
    } else if (s.type == RopeScaling::Type::Llama3) {
      const double low_wavelen = s.original_max_position / s.low_freq_factor;
      const double high_wavelen = s.original_max_position / s.high_freq_factor;
      const double wavelen = 2.0 * M_PI / f;
      if (wavelen > low_wavelen) {
        f /= s.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (s.original_max_position / wavelen - s.low_freq_factor) /
                              (s.high_freq_factor - s.low_freq_factor);
        f = (1.0 - smooth) * f / s.factor + smooth * f;
      }
    }
    inv[static_cast<size_t>(i)] = static_cast<float>(f);
  }
  return inv;
}

}  // namespace ember
