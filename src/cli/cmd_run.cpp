// `ember run -m MODEL -p PROMPT`: generates through the engine (as the server does), streams
// text to stdout and reports load time, prompt and decode speed on stderr.
#include "cli/commands.h"
#include "cli/common.h"

#include "sample/json_schema.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>

namespace ember {

namespace {

struct RunOptions {
  ModelOptions model;
  std::string prompt;
  std::string prompt_ids;
  int n_predict = 128;
  float temperature = 0.8f;
  int top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.0f;
  float repeat_penalty = 1.0f;
  int64_t seed = -1;
  bool print_ids = false;
  bool ignore_eos = false;
  bool json_object = false;
  std::string json_schema;
  bool no_special = false;
};

// --json-schema: the schema's text, or a file that holds it.
Result<std::shared_ptr<const JsonSchema>> read_json_schema(const std::string& arg) {
  std::ifstream file;
  if (arg.find('{') == std::string::npos) file.open(arg, std::ios::binary);
  const auto j = file.is_open() ? nlohmann::json::parse(file, nullptr, /*allow_exceptions=*/false)
                                : nlohmann::json::parse(arg, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::errorf("'{}' is neither valid JSON nor a readable file of it", arg);
  return JsonSchema::compile(j);
}

int run(const RunOptions& o) {
  using Clock = std::chrono::steady_clock;
  if (o.prompt.empty() == o.prompt_ids.empty()) {
    fmt::print(stderr, "error: give exactly one of -p/--prompt and --prompt-ids\n");
    return 2;
  }
  const auto t_load = Clock::now();
  auto runner = load_runner(o.model);
  if (!runner.is_ok()) {
    fmt::print(stderr, "error: {}\n", runner.message());
    return 1;
  }
  const double load_s = std::chrono::duration<double>(Clock::now() - t_load).count();
  std::unique_ptr<Tokenizer> tokenizer;
  if (auto tk = load_tokenizer((*runner)->source()); tk.is_ok()) {
    tokenizer = std::move(*tk);
  } else if (!o.prompt.empty()) {
    fmt::print(stderr, "error: -p needs the model's tokenizer: {} (use --prompt-ids)\n", tk.message());
    return 1;
  }
  if (Status st = finish_model_load(**runner, o.model); !st.is_ok()) {
    fmt::print(stderr, "error: {}\n", st.message());
    return 1;
  }
  std::vector<int32_t> prompt;
  if (!o.prompt.empty()) {
    prompt = tokenizer->encode(o.prompt, !o.no_special);
  } else {
    auto ids = parse_ids(o.prompt_ids);
    if (!ids.is_ok()) {
      fmt::print(stderr, "error: {}\n", ids.message());
      return 2;
    }
    prompt = std::move(*ids);
  }
  auto eos = stop_token_ids((*runner)->config(), tokenizer.get());
  ModelOptions mo = o.model;
  if (mo.warmup_graphs < 0) mo.warmup_graphs = 1;  // one request: the batch-1 graph is all it uses
  auto engine = make_engine(std::move(*runner), mo, eos, tokenizer.get());
  if (!engine.is_ok()) {
    fmt::print(stderr, "error: {}\n", engine.message());
    return 1;
  }
  EngineRequest req;
  req.request_id = "run-0";
  req.prompt_token_ids = prompt;
  req.params.temperature = o.temperature;
  req.params.top_k = o.top_k;
  req.params.top_p = o.top_p;
  req.params.min_p = o.min_p;
  req.params.repetition_penalty = o.repeat_penalty;
  req.params.max_tokens = o.n_predict;
  req.params.ignore_eos = o.ignore_eos;
  req.params.json_object = o.json_object;
  if (!o.json_schema.empty()) {
    auto schema = read_json_schema(o.json_schema);
    if (!schema.is_ok()) {
      fmt::print(stderr, "error: --json-schema: {}\n", schema.message());
      return 2;
    }
    req.params.json_object = true;
    req.params.json_schema = std::move(schema).value();
  }
  if (o.seed >= 0) req.params.seed = static_cast<uint64_t>(o.seed);
  if (auto st = (*engine)->add_request(req); !st.is_ok()) {
    fmt::print(stderr, "error: {}\n", st.message());
    return 2;
  }
  std::unique_ptr<IncrementalDetokenizer> detok;
  if (tokenizer && !o.print_ids) detok = std::make_unique<IncrementalDetokenizer>(*tokenizer, true);
  const auto t_start = Clock::now();
  Clock::time_point t_first;
  int n_generated = 0;
  std::vector<int32_t> generated;
  std::string error;
  FinishReason reason = FinishReason::kNone;
  while ((*engine)->has_work()) {
    for (const auto& out : (*engine)->step()) {
      for (int32_t id : out.new_token_ids) {
        if (n_generated++ == 0) t_first = Clock::now();
        if (out.stop_token_id && id == *out.stop_token_id) continue;
        generated.push_back(id);
        if (detok) std::fputs(detok->push(id).c_str(), stdout);
        std::fflush(stdout);
      }
      if (out.finished) {
        reason = out.finish_reason;
        error = out.error;
      }
    }
  }
  if (detok) std::fputs(detok->flush().c_str(), stdout);
  if (o.print_ids || !detok) {
    std::string line;
    for (size_t i = 0; i < generated.size(); ++i) line += (i ? "," : "") + std::to_string(generated[i]);
    std::fputs(line.c_str(), stdout);
  }
  std::fputs("\n", stdout);
  std::fflush(stdout);
  if (!error.empty()) {
    fmt::print(stderr, "error: {}\n", error);
    return 1;
  }
  const auto t_end = Clock::now();
  const double prompt_s = std::chrono::duration<double>((n_generated ? t_first : t_end) - t_start).count();
  const double decode_s = std::chrono::duration<double>(t_end - (n_generated ? t_first : t_end)).count();
  fmt::print(stderr, "load: {:.2f} s\n", load_s);
  fmt::print(stderr, "prompt: {} tokens, {:.1f} tok/s\n", prompt.size(), prompt.size() / std::max(prompt_s, 1e-9));
  fmt::print(stderr, "decode: {} tokens, {:.1f} tok/s (finish: {})\n", n_generated,
             n_generated > 1 ? (n_generated - 1) / std::max(decode_s, 1e-9) : 0.0,
             reason == FinishReason::kStop ? "stop" : reason == FinishReason::kLength ? "length" : "other");
  if (const EngineStats st = (*engine)->stats(); st.spec_draft_tokens > 0)
    fmt::print(stderr, "speculative: {} drafts, {} kept ({:.0f}%), {} steps for {} tokens\n", st.spec_draft_tokens,
               st.spec_accepted_tokens, 100.0 * static_cast<double>(st.spec_accepted_tokens) / static_cast<double>(st.spec_draft_tokens),
               st.num_steps, n_generated);
  return 0;
}

}  // namespace

CommandFn register_run(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "generate text from a prompt");
  auto o = std::make_shared<RunOptions>();
  add_model_options(*cmd, o->model);
  cmd->add_option("-p,--prompt", o->prompt, "prompt text");
  cmd->add_option("--prompt-ids", o->prompt_ids, "prompt as comma-separated token ids");
  cmd->add_option("-n,--n-predict", o->n_predict, "tokens to generate")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--temp", o->temperature, "temperature (0 = greedy)")->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--top-k", o->top_k, "top-k (0 = off)")->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--top-p", o->top_p, "top-p")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--min-p", o->min_p, "min-p")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--repeat-penalty", o->repeat_penalty, "repetition penalty (1 = off)");
  cmd->add_option("--seed", o->seed, "sampling seed (-1 = random)");
  cmd->add_flag("--ids", o->print_ids, "print generated token ids instead of text");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "keep generating past end-of-sequence tokens");
  cmd->add_flag("--json", o->json_object,
                "constrain the output to one JSON object (the API's response_format json_object)");
  cmd->add_option("--json-schema", o->json_schema,
                  "constrain the output to one JSON object matching this schema (inline JSON or a file)");
  cmd->add_flag("--no-special", o->no_special, "do not add BOS/special tokens to the prompt");
  return [o]() { return run(*o); };
}

}  // namespace ember
