#pragma once
// Each `ember` subcommand registers its options and returns the function that runs it
// (returning the process exit code).
#include <CLI/CLI.hpp>

#include <functional>

namespace ember {

using CommandFn = std::function<int()>;

CommandFn register_info(CLI::App& app);
CommandFn register_logits(CLI::App& app);
CommandFn register_run(CLI::App& app);
CommandFn register_tokenize(CLI::App& app);
CommandFn register_detokenize(CLI::App& app);
CommandFn register_perplexity(CLI::App& app);
CommandFn register_bench(CLI::App& app);
CommandFn register_serve(CLI::App& app);
CommandFn register_quantize(CLI::App& app);

}  // namespace ember
