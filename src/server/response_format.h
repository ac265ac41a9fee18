#pragma once
// JSON bodies of the OpenAI routes: full responses, streaming chunks (Server-Sent Events),
// usage, logprobs in both of OpenAI's formats, and error objects. Pure functions of their
// inputs; the routes decide what to send when.
#include "server/api_error.h"
#include "server/choice_decoder.h"
#include "server/json_fields.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ember {
class Tokenizer;
}

namespace ember::server {

enum class ApiKind { kCompletion, kChat };

// What every response and chunk of one request repeats.
struct ResponseMeta {
  ApiKind kind = ApiKind::kCompletion;
  std::string id;  // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;  // unix seconds
  std::string model;
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens served from the prefix cache
};

// A finished choice of a non-streaming response.
struct ChoiceResult {
  int index = 0;
  std::string text;
  FinishReason reason = FinishReason::kNone;
  std::vector<TokenRecord> tokens;  // for logprobs
  size_t text_offset_base = 0;      // completions with echo: the echoed prompt's length
};

// JSON text of a value; invalid UTF-8 (which a client can smuggle into nothing we emit, but a
// tokenizer edge case might) is replaced rather than thrown on.
std::string dump_json(const Json& j);
// One SSE event carrying j, and the stream's terminator.
std::string sse_event(const Json& j);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";

Json error_json(const ApiError& e);
Json usage_json(const Usage& u);
// "stop" / "length" / "abort" / "error"; null for kNone.
Json finish_reason_json(FinishReason r);

// logprobs: completions format {"tokens", "token_logprobs", "top_logprobs", "text_offset"} or
// chat format {"content": [{"token", "logprob", "bytes", "top_logprobs"}], "refusal": null}.
// want_top: how many alternatives the client asked for.
Json completion_logprobs_json(const Tokenizer& tok, const std::vector<TokenRecord>& tokens, int want_top,
                              size_t text_offset_base);
Json chat_logprobs_json(const Tokenizer& tok, const std::vector<TokenRecord>& tokens, int want_top);

// Full responses. want_logprobs < 0: no logprobs.
Json full_response_json(const ResponseMeta& meta, const Tokenizer& tok, const std::vector<ChoiceResult>& choices,
                        int want_logprobs, const Usage& usage);

// Streaming chunks. `usage_null`: the client asked for include_usage, so every chunk carries
// "usage": null and the usage comes in a last chunk without choices.
Json chunk_json(const ResponseMeta& meta, Json choice, bool usage_null);
// The choice object of a chunk: text (or chat delta content), optional logprobs, finish reason.
Json chunk_choice_json(const ResponseMeta& meta, const Tokenizer& tok, int index, const ChoiceDelta& delta,
                       int want_logprobs, size_t text_offset_base);
// Chat's first chunk of a choice: {"role": "assistant", "content": ""}.
Json chat_role_choice_json(int index);
Json usage_chunk_json(const ResponseMeta& meta, const Usage& usage);

}  // namespace ember::server
