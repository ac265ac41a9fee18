#pragma once
// The server's requests after parsing and validation: every field typed, ranges checked,
// defaults applied. Built by request_parser.h from the client's JSON; consumed by the routes.
#include "sched/sampling_params.h"
#include "server/json_fields.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ember::server {

// One prompt of a completion request, as the client sent it: text or token ids.
struct PromptSpec {
  std::optional<std::string> text;
  std::vector<int32_t> token_ids;  // when text is empty
};

// What /v1/completions and /v1/chat/completions share.
struct GenerationOptions {
  SamplingParams params;  // max_tokens, n, logprobs, penalties, seed, ...
  std::vector<std::string> stop;  // stop strings, matched on text
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::string user;            // logged, otherwise unused
};

struct CompletionRequest {
  std::string model;  // "" when the client left it out: the served model
  std::vector<PromptSpec> prompts;  // a batch: choices index prompt * n + sample
  GenerationOptions gen;
  bool echo = false;
};

struct ChatRequest {
  std::string model;
  // The conversation with every message's content reduced to a string (text parts joined).
  Json messages = Json::array();
  bool add_generation_prompt = true;
  Json template_kwargs = Json::object();  // chat_template_kwargs
  GenerationOptions gen;
};

// POST /tokenize: either a prompt or messages.
struct TokenizeRequest {
  std::string model;
  std::optional<std::string> prompt;
  Json messages;  // null unless given
  bool add_special_tokens = true;
  bool add_generation_prompt = true;
  bool return_token_strs = false;
};

struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;
};

// Bounds the parser enforces beyond SamplingParams' own ranges (they keep a request from costing
// far more than it looks like it should).
struct ParseLimits {
  int vocab_size = 0;        // token ids must be below it (0: unchecked)
  int max_prompts = 256;     // prompts in one completion request
  int max_choices = 1024;    // prompts * n
  int max_stop = 16;         // stop strings
  int max_stop_bytes = 1024; // bytes per stop string
  int max_messages = 4096;
};

}  // namespace ember::server
