// `ember logits -m MODEL --prompt-ids IDS -o FILE.npy`: float32 logits of every prompt
// position, [n_tokens, n_vocab], for fidelity work against other implementations.
#include "cli/commands.h"
#include "cli/common.h"
#include "core/npy.h"

#include <fmt/format.h>

namespace ember {

CommandFn register_logits(CLI::App& app) {
  auto* cmd = app.add_subcommand("logits", "write the logits of every prompt position as .npy");
  auto o = std::make_shared<ModelOptions>();
  auto ids_text = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  add_model_options(*cmd, *o, false);
  cmd->add_option("--prompt-ids", *ids_text, "comma-separated token ids")->required();
  cmd->add_option("-o,--output", *out, "output .npy file")->required();
  return [o, ids_text, out]() -> int {
    auto ids = parse_ids(*ids_text);
    if (!ids.is_ok()) {
      fmt::print(stderr, "error: {}\n", ids.message());
      return 2;
    }
    if (o->kv_dtype == "auto") o->kv_dtype = "f32";  // exact unless asked otherwise
    auto runner = load_runner(*o);
    if (!runner.is_ok()) {
      fmt::print(stderr, "error: {}\n", runner.message());
      return 1;
    }
    const int n = static_cast<int>(ids->size());
    if (n > (*runner)->max_context()) {
      fmt::print(stderr, "error: {} prompt tokens exceed the context window of {}\n", n, (*runner)->max_context());
      return 2;
    }
    const int block_size = 16;
    const int n_blocks = (n + block_size - 1) / block_size;
    if (auto st = (*runner)->allocate_kv_cache({n_blocks, block_size}); !st.is_ok()) {
      fmt::print(stderr, "error: {}\n", st.message());
      return 1;
    }
    ForwardBatch b;
    b.token_ids = *ids;
    for (int i = 0; i < n; ++i) {
      b.positions.push_back(i);
      b.slot_mapping.push_back(i);
      b.logit_rows.push_back(i);
    }
    for (int i = 0; i < n_blocks; ++i) b.block_tables.push_back(i);
    b.max_blocks_per_seq = n_blocks;
    b.query_start = {0, n};
    b.seq_lens = {n};
    std::vector<float> logits;
    if (auto st = (*runner)->execute(b, logits); !st.is_ok()) {
      fmt::print(stderr, "error: {}\n", st.message());
      return 2;
    }
    if (auto st = write_npy_f32(*out, logits.data(), {n, (*runner)->vocab_size()}); !st.is_ok()) {
      fmt::print(stderr, "error: {}\n", st.message());
      return 1;
    }
    fmt::print(stderr, "wrote {} x {} logits to {}\n", n, (*runner)->vocab_size(), *out);
    return 0;
  };
}

}  // namespace ember
