#pragma once
// Parsing and validation of the JSON bodies of the OpenAI routes and /tokenize, /detokenize.
// Pure functions of (JSON, limits): no engine, no tokenizer, so the fuzz target and unit tests
// drive them directly. Unknown fields are ignored, as OpenAI does; known fields with a wrong
// type or value are a 400 naming the field. Fields ember cannot honour (tools, suffix, ...) are
// rejected rather than silently ignored.
#include "server/api_error.h"
#include "server/api_request.h"

#include <string_view>

namespace ember::server {

// Parses a request body. Rejects bodies nested deeper than max_depth (no client needs more and
// deep nesting is how JSON parsers get hurt).
ApiResult<Json> parse_json_body(std::string_view body, int max_depth = 64);

ApiResult<CompletionRequest> parse_completion_request(const Json& body, const ParseLimits& limits);
ApiResult<ChatRequest> parse_chat_request(const Json& body, const ParseLimits& limits);
ApiResult<TokenizeRequest> parse_tokenize_request(const Json& body, const ParseLimits& limits);
ApiResult<DetokenizeRequest> parse_detokenize_request(const Json& body, const ParseLimits& limits);

}  // namespace ember::server
