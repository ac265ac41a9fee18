// `ember tokenize` / `ember detokenize`: the model's own tokenizer from the command line.
#include "cli/commands.h"
#include "cli/common.h"

#include <fmt/format.h>

namespace ember {

CommandFn register_tokenize(CLI::App& app) {
  auto* cmd = app.add_subcommand("tokenize", "print the token ids (and pieces) of a text");
  struct Opts {
    std::string model, text;
    bool ids_only = false, no_special = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("-m,--model", o->model, "GGUF file or Hugging Face directory")->required();
  cmd->add_option("text", o->text, "text to tokenize")->required();
  cmd->add_flag("--ids", o->ids_only, "print only the ids, space-separated");
  cmd->add_flag("--no-special", o->no_special, "do not add BOS/special tokens");
  return [o]() -> int {
    auto tok = load_tokenizer(o->model);
    if (!tok.is_ok()) {
      fmt::print(stderr, "error: {}\n", tok.message());
      return 1;
    }
    const auto ids = (*tok)->encode(o->text, !o->no_special);
    if (o->ids_only) {
      std::string line;
      for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
      fmt::print("{}\n", line);
    } else {
      for (int32_t id : ids) fmt::print("{:>8} -> '{}'\n", id, (*tok)->token_piece(id));
      fmt::print(stderr, "{} tokens\n", ids.size());
    }
    return 0;
  };
}

CommandFn register_detokenize(CLI::App& app) {
  auto* cmd = app.add_subcommand("detokenize", "print the text of token ids");
  struct Opts {
    std::string model;
    std::vector<std::string> ids;
    bool skip_special = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("-m,--model", o->model, "GGUF file or Hugging Face directory")->required();
  cmd->add_option("ids", o->ids, "token ids (space or comma separated)")->required();
  cmd->add_flag("--skip-special", o->skip_special, "drop special tokens");
  return [o]() -> int {
    std::string joined;
    for (const auto& s : o->ids) joined += s + " ";
    auto ids = parse_ids(joined);
    if (!ids.is_ok()) {
      fmt::print(stderr, "error: {}\n", ids.message());
      return 2;
    }
    auto tok = load_tokenizer(o->model);
    if (!tok.is_ok()) {
      fmt::print(stderr, "error: {}\n", tok.message());
      return 1;
    }
    for (int32_t id : *ids)
      if (id >= (*tok)->vocab_size()) {
        fmt::print(stderr, "error: token id {} is outside the vocabulary of {}\n", id, (*tok)->vocab_size());
        return 2;
      }
    fmt::print("{}\n", (*tok)->decode(*ids, o->skip_special));
    return 0;
  };
}

}  // namespace ember
