#pragma once
// GenerationJob: one /v1/completions or /v1/chat/completions request in flight. It submits one
// engine request per prompt (each with n samples), folds the engine's outputs into per-choice
// text (ChoiceDecoder), cancels engine work that is no longer needed (all samples of a prompt
// hit stop strings, the client left, the request timed out) and keeps the numbers for usage,
// metrics and the access log. HTTP-agnostic: the routes turn its updates into bodies or SSE.
#include "engine/async_engine.h"
#include "server/api_error.h"
#include "server/api_request.h"
#include "server/choice_decoder.h"
#include "server/response_format.h"

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ember::server {

class ServerMetrics;

struct JobPrompt {
  std::vector<int32_t> token_ids;
  std::string echo_text;  // completions with echo: the prompt's text, sent first
};

class GenerationJob {
 public:
  struct Update {
    int index = 0;  // choice index: prompt * n + sample
    ChoiceDelta delta;
  };

  GenerationJob(ResponseMeta meta, const Tokenizer& tokenizer, GenerationOptions options,
                std::vector<JobPrompt> prompts, Clock::time_point arrival, ServerMetrics* metrics);
  ~GenerationJob();  // cancels whatever is still running
  GenerationJob(const GenerationJob&) = delete;
  GenerationJob& operator=(const GenerationJob&) = delete;

  // Adds one engine request per prompt. On failure, requests already added are cancelled and
  // the error says why (400 invalid, 429 queue full, 503 shutting down).
  std::optional<ApiError> submit(AsyncEngine& engine, int retry_after_s);

  // Waits up to `wait` for engine outputs and folds in everything that arrived.
  std::vector<Update> poll(std::chrono::milliseconds wait);
  // Ends every unfinished choice now with `reason` and cancels the engine work.
  std::vector<Update> abort(FinishReason reason);
  bool done() const { return n_finished_ == static_cast<int>(choices_.size()); }

  const ResponseMeta& meta() const { return meta_; }
  const GenerationOptions& options() const { return options_; }
  const std::vector<JobPrompt>& prompts() const { return prompts_; }
  int num_choices() const { return static_cast<int>(choices_.size()); }
  const ChoiceDecoder& choice(int index) const { return choices_[static_cast<size_t>(index)].decoder; }
  // logprobs alternatives to report per token, -1 for no logprobs.
  int want_logprobs() const { return options_.params.logprobs.value_or(-1); }

  Usage usage() const;
  Clock::time_point arrival() const { return arrival_; }
  std::optional<Clock::time_point> first_token_time() const { return first_token_; }
  // Why the request ended early, "" if it did not: "client_disconnected", "timeout", ...
  const std::string& end_cause() const { return end_cause_; }
  void set_end_cause(std::string cause) { end_cause_ = std::move(cause); }
  // First engine error message of a choice that finished with kError.
  const std::string& error() const { return error_; }

 private:
  struct Choice {
    ChoiceDecoder decoder;
    std::optional<Clock::time_point> last_token;
  };
  void handle(size_t prompt, const RequestOutput& out, std::vector<Update>& updates);
  // Drops the engine stream of a prompt whose choices are all finished (frees its KV blocks).
  void release_if_finished(size_t prompt);
  void drain(size_t prompt, std::vector<Update>& updates);

  ResponseMeta meta_;
  const Tokenizer& tokenizer_;
  GenerationOptions options_;
  std::vector<JobPrompt> prompts_;
  Clock::time_point arrival_;
  ServerMetrics* metrics_;
  std::vector<RequestStream> streams_;  // per prompt; empty once released
  std::vector<Choice> choices_;
  int n_finished_ = 0;
  std::optional<Clock::time_point> first_token_;
  std::string end_cause_;
  std::string error_;
};

}  // namespace ember::server
