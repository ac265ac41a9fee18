// `ember info -m MODEL`: architecture, sizes, tensor dtypes, memory.
#include "cli/commands.h"
#include "cli/common.h"
#include "model/config.h"

#include <fmt/format.h>

#include <map>

namespace ember {

CommandFn register_info(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "print a model's architecture, sizes, dtypes and memory");
  auto path = std::make_shared<std::string>();
  cmd->add_option("-m,--model", *path, "GGUF file or Hugging Face directory")->required();
  return [cmd, path]() -> int {
    auto source = WeightSource::open(*path);
    if (!source.is_ok()) {
      fmt::print(stderr, "error: {}\n", source.message());
      return 1;
    }
    const WeightSource& s = **source;
    auto config = config_from_source(s);
    fmt::print("file:          {}\n", s.path());
    fmt::print("format:        {}\n", s.format() == CheckpointFormat::GGUF ? "GGUF" : "Hugging Face safetensors");
    if (!config.is_ok()) {
      fmt::print(stderr, "error: {}\n", config.message());
      return 1;
    }
    const ModelConfig& c = *config;
    fmt::print("architecture:  {}\n", c.arch_name);
    fmt::print("layers:        {}\n", c.n_layers);
    fmt::print("d_model:       {}\n", c.d_model);
    fmt::print("heads:         {} (kv heads {}, head_dim {})\n", c.n_heads, c.n_kv_heads, c.head_dim);
    fmt::print("ffn:           {}\n", c.d_ff);
    fmt::print("vocab:         {}\n", c.n_vocab);
    fmt::print("context:       {}\n", c.max_context);
    fmt::print("rope theta:    {}{}\n", c.rope.theta,
               c.rope.scaling.type == RopeScaling::Type::None ? "" : fmt::format(" (scaled x{})", c.rope.scaling.factor));
    if (c.sliding_window > 0) {
      int n_sliding = 0;
      for (bool b : c.layer_sliding) n_sliding += b;
      fmt::print("sliding window:{} tokens on {} of {} layers\n", c.sliding_window, n_sliding, c.n_layers);
    }
    std::map<std::string, std::pair<int, size_t>> by_dtype;
    int64_t n_params = 0;
    for (const auto& name : s.tensor_names()) {
      auto t = s.tensor(name);
      if (!t.is_ok()) continue;
      auto& e = by_dtype[std::string(dtype_name(t->dtype))];
      e.first += 1;
      e.second += t->nbytes();
      n_params += t->numel();
    }
    fmt::print("parameters:    {:.1f} M in {} tensors\n", n_params / 1e6, s.tensor_names().size());
    for (const auto& [dt, e] : by_dtype)
      fmt::print("  {:<10} {:>5} tensors  {:>10.2f} MiB\n", dt, e.first, e.second / 1048576.0);
    fmt::print("weights:       {:.2f} MiB (memory-mapped)\n", s.total_tensor_bytes() / 1048576.0);
    const double kv_token_f16 = 2.0 * c.n_layers * c.n_kv_heads * c.head_dim * 2;
    fmt::print("KV cache:      {:.1f} KiB per token in f16 ({:.1f} MiB for the full {}-token context)\n",
               kv_token_f16 / 1024, kv_token_f16 * c.max_context / 1048576.0, c.max_context);
    return 0;
  };
}

}  // namespace ember
