// ember: LLM inference engine and OpenAI-compatible server.
#include "cli/commands.h"
#include "core/log.h"

#include <fmt/format.h>

#include <vector>

int main(int argc, char** argv) {
  CLI::App app{"ember: LLM inference engine and OpenAI-compatible server"};
  app.require_subcommand(1);
  bool verbose = false;
  app.add_flag("-v,--verbose", verbose, "debug logging");
  std::vector<std::pair<CLI::App*, ember::CommandFn>> commands;
  auto add = [&](ember::CommandFn fn) { commands.emplace_back(app.get_subcommands({}).back(), std::move(fn)); };
  add(ember::register_run(app));
  add(ember::register_info(app));
  add(ember::register_logits(app));
  add(ember::register_tokenize(app));
  add(ember::register_detokenize(app));
  add(ember::register_perplexity(app));
  add(ember::register_bench(app));
  add(ember::register_serve(app));
  add(ember::register_quantize(app));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  ember::init_logging(verbose);
  for (auto& [sub, fn] : commands)
    if (sub->parsed()) return fn();
  fmt::print(stderr, "error: no command\n");
  return 2;
}
