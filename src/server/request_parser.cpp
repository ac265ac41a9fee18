// Field by field validation of the OpenAI request bodies. The ranges follow OpenAI's API
// reference where it has one and vLLM's extensions (top_k, min_p, repetition_penalty, min_tokens,
// stop_token_ids, ignore_eos) otherwise; SamplingParams::validate() checks the result once more.
#include "server/request_parser.h"

#include "sample/json_schema.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

namespace ember::server {

namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

// Depth of the deepest array/object nesting of a JSON text (strings skipped), stopping early
// once it passes limit. The parser would find syntax errors; this only guards the depth.
int nesting_depth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

// "stop": a string or a list of strings.
void read_stop(FieldReader& r, const ParseLimits& limits, std::vector<std::string>& out) {
  const Json* v = r.get("stop");
  if (!v) return;
  auto add = [&](const Json& s) {
    if (!s.is_string()) {
      r.fail(fmt::format("'stop' must be a string or a list of strings, found {}", json_type_name(s)), "stop");
      return;
    }
    const auto& str = s.get_ref<const std::string&>();
    if (str.empty()) return r.fail("'stop' strings must not be empty", "stop");
    if (static_cast<int>(str.size()) > limits.max_stop_bytes)
      return r.fail(fmt::format("'stop' strings must be at most {} bytes", limits.max_stop_bytes), "stop");
    out.push_back(str);
  };
  if (v->is_string()) {
    add(*v);
  } else if (v->is_array()) {
    if (static_cast<int>(v->size()) > limits.max_stop)
      return r.fail(fmt::format("'stop' holds at most {} strings, got {}", limits.max_stop, v->size()), "stop");
    for (const Json& s : *v) add(s);
  } else {
    r.fail(fmt::format("'stop' must be a string or a list of strings, got {}", json_type_name(*v)), "stop");
  }
}

// "logit_bias": {"token id": bias in [-100, 100]}.
void read_logit_bias(FieldReader& r, const ParseLimits& limits, SamplingParams& p) {
  const Json* v = r.get("logit_bias");
  if (!v) return;
  if (!v->is_object()) return r.fail("'logit_bias' must be an object mapping token ids to numbers", "logit_bias");
  for (const auto& [key, bias] : v->items()) {
    int64_t id = -1;
    size_t used = 0;
    bool parsed = !key.empty() && key.size() <= 10 && key.find_first_not_of("0123456789") == std::string::npos;
    if (parsed) id = std::stoll(key, &used);
    if (!parsed || id > INT32_MAX || (limits.vocab_size > 0 && id >= limits.vocab_size))
      return r.fail(fmt::format("'logit_bias' key '{}' is not a token id of this model", key), "logit_bias");
    if (!bias.is_number() || !std::isfinite(bias.get<double>()) || bias.get<double>() < -100 ||
        bias.get<double>() > 100)
      return r.fail(fmt::format("'logit_bias' value for token {} must be a number in [-100, 100]", key), "logit_bias");
    p.logit_bias[static_cast<int32_t>(id)] = bias.get<float>();
  }
}

void read_token_list(FieldReader& r, const char* key, const ParseLimits& limits, std::vector<int32_t>& out) {
  const Json* v = r.get(key);
  if (!v) return;
  if (!v->is_array()) return r.fail(fmt::format("'{}' must be a list of token ids", key), key);
  for (const Json& t : *v) {
    int32_t id = 0;
    if (!json_token_id(t, limits.vocab_size, id))
      return r.fail(fmt::format("'{}' holds {}, which is not a token id of this model", key, t.dump()), key);
    out.push_back(id);
  }
}

// Fields that ember does not implement: rejected when set to anything but their neutral value,
// so a client never silently gets a different behaviour than it asked for.
void reject_unsupported(FieldReader& r, bool chat) {
  if (const Json* s = r.get("suffix"); s && !(s->is_string() && s->get_ref<const std::string&>().empty()))
    r.fail("'suffix' is not supported", "suffix");
  if (const Json* t = r.get("tools"); t && !(t->is_array() && t->empty()))
    r.fail("'tools' (function calling) is not supported", "tools");
  if (const Json* f = r.get("functions"); f && !(f->is_array() && f->empty()))
    r.fail("'functions' (function calling) is not supported", "functions");
  if (const Json* tc = r.get("tool_choice"); tc && !(tc->is_string() && (*tc == "none" || *tc == "auto")))
    r.fail("'tool_choice' is not supported", "tool_choice");
  (void)chat;
}

// OpenAI's response_format: {"type": "text"} (the default), {"type": "json_object"}, whose
// output is constrained to one JSON object, or {"type": "json_schema", "json_schema": {"name":
// ..., "schema": {...}}}, an object that also matches the schema (JsonSchema's subset; other
// keywords are refused by name).
void read_response_format(FieldReader& r, SamplingParams& p) {
  const Json* rf = r.get("response_format");
  if (rf == nullptr || rf->is_null()) return;
  const Json* type = nullptr;
  if (rf->is_object())
    if (auto it = rf->find("type"); it != rf->end()) type = &*it;
  if (type == nullptr || !type->is_string()) {
    r.fail("'response_format' must be an object with a string 'type'", "response_format");
  } else if (*type == "json_object") {
    p.json_object = true;
  } else if (*type == "json_schema") {
    const auto js = rf->find("json_schema");
    const Json* schema = nullptr;
    if (js != rf->end() && js->is_object())
      if (auto it = js->find("schema"); it != js->end()) schema = &*it;
    if (schema == nullptr) {
      r.fail("'response_format' of type 'json_schema' needs 'json_schema': {\"name\": ..., \"schema\": {...}}",
             "response_format");
      return;
    }
    auto compiled = JsonSchema::compile(*schema);
    if (!compiled.is_ok()) {
      r.fail("'response_format' json_schema: " + compiled.message(), "response_format");
      return;
    }
    p.json_object = true;
    p.json_schema = std::move(compiled).value();
  } else if (*type != "text") {
    r.fail(fmt::format("'response_format' type {} is not one of 'text', 'json_object', 'json_schema'", type->dump()),
           "response_format");
  }
}

// Everything both routes share; max_tokens defaults differ (16 for completions as in OpenAI's
// legacy API, the context window for chat).
void read_generation_options(FieldReader& r, const ParseLimits& limits, bool chat, GenerationOptions& g) {
  SamplingParams& p = g.params;
  p.max_tokens = chat ? std::optional<int>() : std::optional<int>(16);
  if (auto v = r.integer("max_tokens", 1, INT32_MAX)) p.max_tokens = static_cast<int>(*v);
  if (chat) {
    if (auto v = r.integer("max_completion_tokens", 1, INT32_MAX)) p.max_tokens = static_cast<int>(*v);
  }
  if (auto v = r.number("temperature", 0.0, 2.0)) p.temperature = static_cast<float>(*v);
  if (auto v = r.number("top_p", 0.0, 1.0, /*lo_open=*/true)) p.top_p = static_cast<float>(*v);
  if (auto v = r.integer("top_k", -1, INT32_MAX)) p.top_k = static_cast<int>(*v);
  if (auto v = r.number("min_p", 0.0, 1.0)) p.min_p = static_cast<float>(*v);
  if (auto v = r.number("presence_penalty", -2.0, 2.0)) p.presence_penalty = static_cast<float>(*v);
  if (auto v = r.number("frequency_penalty", -2.0, 2.0)) p.frequency_penalty = static_cast<float>(*v);
  if (auto v = r.number("repetition_penalty", 0.0, 100.0, /*lo_open=*/true)) p.repetition_penalty = static_cast<float>(*v);
  if (auto v = r.integer("n", 1, kMaxSamplesPerRequest)) p.n = static_cast<int>(*v);
  if (auto v = r.integer("best_of", 1, kMaxSamplesPerRequest); v && *v != p.n)
    r.fail("'best_of' other than n is not supported", "best_of");
  // OpenAI documents seed as an integer; any int64 is accepted and reinterpreted as unsigned.
  if (auto v = r.integer("seed", std::numeric_limits<int64_t>::min(), kInt64Max)) p.seed = static_cast<uint64_t>(*v);
  if (auto v = r.integer("min_tokens", 0, INT32_MAX)) p.min_tokens = static_cast<int>(*v);
  if (auto v = r.boolean("ignore_eos")) p.ignore_eos = *v;
  read_logit_bias(r, limits, p);
  read_token_list(r, "stop_token_ids", limits, p.stop_token_ids);
  read_stop(r, limits, g.stop);
  read_response_format(r, p);
  if (auto v = r.string("user")) g.user = *v;
  if (auto v = r.boolean("stream")) g.stream = *v;
  if (const Json* so = r.get("stream_options")) {
    if (!g.stream) {
      r.fail("'stream_options' is only allowed when 'stream' is true", "stream_options");
    } else {
      FieldReader sr(*so, "'stream_options'");
      if (auto v = sr.boolean("include_usage")) g.include_usage = *v;
      if (sr.error()) r.fail(sr.error()->message, "stream_options");
    }
  }
  if (r.ok() && p.max_tokens && p.min_tokens > *p.max_tokens)
    r.fail(fmt::format("'min_tokens' ({}) must not exceed 'max_tokens' ({})", p.min_tokens, *p.max_tokens), "min_tokens");
  reject_unsupported(r, chat);
}

// A prompt of token ids, or nullopt (with an error recorded) when v is not one.
std::optional<std::vector<int32_t>> token_prompt(FieldReader& r, const Json& v, const ParseLimits& limits) {
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (const Json& t : v) {
    int32_t id = 0;
    if (!json_token_id(t, limits.vocab_size, id)) {
      r.fail(fmt::format("'prompt' holds {}, which is not a token id of this model", t.dump()), "prompt");
      return std::nullopt;
    }
    ids.push_back(id);
  }
  return ids;
}

// "prompt": string | [string] | [int] | [[int]].
void read_prompts(FieldReader& r, const ParseLimits& limits, std::vector<PromptSpec>& out) {
  const Json* v = r.get("prompt");
  if (!v) return r.fail("'prompt' is required", "prompt");
  const char* shape = "'prompt' must be a string, a list of strings, a list of token ids or a list of lists of token ids";
  if (v->is_string()) {
    out.push_back({v->get<std::string>(), {}});
    return;
  }
  if (!v->is_array()) return r.fail(shape, "prompt");
  if (v->empty()) return r.fail("'prompt' must not be empty", "prompt");
  const Json& first = v->front();
  if (first.is_number()) {
    auto ids = token_prompt(r, *v, limits);
    if (ids) out.push_back({std::nullopt, std::move(*ids)});
    return;
  }
  if (static_cast<int>(v->size()) > limits.max_prompts)
    return r.fail(fmt::format("'prompt' holds at most {} prompts, got {}", limits.max_prompts, v->size()), "prompt");
  for (const Json& item : *v) {
    if (item.is_string() && first.is_string()) {
      out.push_back({item.get<std::string>(), {}});
    } else if (item.is_array() && first.is_array()) {
      if (item.empty()) return r.fail("'prompt' token lists must not be empty", "prompt");
      auto ids = token_prompt(r, item, limits);
      if (!ids) return;
      out.push_back({std::nullopt, std::move(*ids)});
    } else {
      return r.fail(shape, "prompt");
    }
  }
}

// A message's content as one string: a string as is, text parts joined by newlines.
bool flatten_content(FieldReader& r, const Json& content, size_t index, std::string& out) {
  const std::string param = fmt::format("messages[{}].content", index);
  if (content.is_string()) {
    out = content.get<std::string>();
    return true;
  }
  if (!content.is_array()) {
    r.fail(fmt::format("'{}' must be a string or a list of content parts", param), param);
    return false;
  }
  bool first = true;
  for (const Json& part : content) {
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      r.fail(fmt::format("'{}' parts must be objects with a 'type'", param), param);
      return false;
    }
    if (part["type"] != "text") {
      r.fail(fmt::format("'{}': content parts of type '{}' are not supported (text only)", param,
                         part["type"].get<std::string>()), param);
      return false;
    }
    if (!part.contains("text") || !part["text"].is_string()) {
      r.fail(fmt::format("'{}' text parts need a string 'text'", param), param);
      return false;
    }
    if (!first) out += '\n';
    out += part["text"].get<std::string>();
    first = false;
  }
  return true;
}

void read_messages(FieldReader& r, const ParseLimits& limits, Json& out) {
  const Json* v = r.get("messages");
  if (!v) return r.fail("'messages' is required", "messages");
  if (!v->is_array()) return r.fail("'messages' must be a list of message objects", "messages");
  if (v->empty()) return r.fail("'messages' must not be empty", "messages");
  if (static_cast<int>(v->size()) > limits.max_messages)
    return r.fail(fmt::format("'messages' holds at most {} messages", limits.max_messages), "messages");
  out = Json::array();
  for (size_t i = 0; i < v->size(); ++i) {
    const Json& m = (*v)[i];
    const std::string param = fmt::format("messages[{}]", i);
    if (!m.is_object()) return r.fail(fmt::format("'{}' must be an object", param), param);
    auto role = m.find("role");
    if (role == m.end() || !role->is_string())
      return r.fail(fmt::format("'{}.role' must be a string", param), param + ".role");
    const std::string& rs = role->get_ref<const std::string&>();
    if (rs != "system" && rs != "user" && rs != "assistant" && rs != "developer" && rs != "tool")
      return r.fail(fmt::format("'{}.role' must be one of system, developer, user, assistant, tool; got '{}'",
                                param, rs), param + ".role");
    Json msg = m;  // other keys (name, ...) stay visible to the template
    auto content = m.find("content");
    std::string text;
    if (content == m.end() || content->is_null()) {
      if (rs != "assistant") return r.fail(fmt::format("'{}.content' is required", param), param + ".content");
    } else if (!flatten_content(r, *content, i, text)) {
      return;
    }
    msg["content"] = std::move(text);
    out.push_back(std::move(msg));
  }
}

}  // namespace

ApiResult<Json> parse_json_body(std::string_view body, int max_depth) {
  if (nesting_depth(body, max_depth) > max_depth)
    return ApiError::bad_request(fmt::format("request body is nested deeper than {} levels", max_depth));
  try {
    return Json::parse(body.begin(), body.end());
  } catch (const Json::exception& e) {
    // parse_error for syntax, but also out_of_range for numbers beyond double (1e309): the
    // fuzz target found that one.
    return ApiError::bad_request(fmt::format("request body is not valid JSON: {}", e.what()));
  }
}

ApiResult<CompletionRequest> parse_completion_request(const Json& body, const ParseLimits& limits) {
  CompletionRequest req;
  FieldReader r(body);
  if (auto v = r.string("model")) req.model = *v;
  read_prompts(r, limits, req.prompts);
  read_generation_options(r, limits, /*chat=*/false, req.gen);
  if (auto v = r.boolean("echo")) req.echo = *v;
  if (auto v = r.integer("logprobs", 0, kMaxLogprobs)) req.gen.params.logprobs = static_cast<int>(*v);
  if (r.ok() && req.echo && req.gen.params.logprobs)
    r.fail("'echo' together with 'logprobs' is not supported (ember does not compute prompt logprobs)", "echo");
  if (r.ok() && static_cast<int64_t>(req.prompts.size()) * req.gen.params.n > limits.max_choices)
    r.fail(fmt::format("prompts x n must be at most {}", limits.max_choices), "n");
  if (r.error()) return *r.error();
  return req;
}

ApiResult<ChatRequest> parse_chat_request(const Json& body, const ParseLimits& limits) {
  ChatRequest req;
  FieldReader r(body);
  if (auto v = r.string("model")) req.model = *v;
  read_messages(r, limits, req.messages);
  read_generation_options(r, limits, /*chat=*/true, req.gen);
  const bool logprobs = r.boolean("logprobs").value_or(false);
  auto top = r.integer("top_logprobs", 0, kMaxLogprobs);
  if (top && !logprobs) r.fail("'top_logprobs' requires 'logprobs' to be true", "top_logprobs");
  if (logprobs) req.gen.params.logprobs = static_cast<int>(top.value_or(0));
  if (auto v = r.boolean("add_generation_prompt")) req.add_generation_prompt = *v;
  if (const Json* kw = r.get("chat_template_kwargs")) {
    if (!kw->is_object()) r.fail("'chat_template_kwargs' must be an object", "chat_template_kwargs");
    else req.template_kwargs = *kw;
  }
  if (r.ok() && req.gen.params.n > limits.max_choices)
    r.fail(fmt::format("'n' must be at most {}", limits.max_choices), "n");
  if (r.error()) return *r.error();
  return req;
}

ApiResult<TokenizeRequest> parse_tokenize_request(const Json& body, const ParseLimits& limits) {
  TokenizeRequest req;
  FieldReader r(body);
  if (auto v = r.string("model")) req.model = *v;
  // "content" is llama.cpp's name for the same field.
  req.prompt = r.string("prompt");
  if (!req.prompt) req.prompt = r.string("content");
  if (r.has("messages")) {
    read_messages(r, limits, req.messages);
    req.add_special_tokens = false;  // the chat template writes the special tokens itself
  }
  if (r.ok() && req.prompt.has_value() == !req.messages.is_null())
    r.fail("give exactly one of 'prompt' and 'messages'", req.prompt ? "messages" : "prompt");
  if (auto v = r.boolean("add_special_tokens")) req.add_special_tokens = *v;
  if (auto v = r.boolean("add_generation_prompt")) req.add_generation_prompt = *v;
  if (auto v = r.boolean("return_token_strs")) req.return_token_strs = *v;
  if (r.error()) return *r.error();
  return req;
}

ApiResult<DetokenizeRequest> parse_detokenize_request(const Json& body, const ParseLimits& limits) {
  DetokenizeRequest req;
  FieldReader r(body);
  if (auto v = r.string("model")) req.model = *v;
  if (!r.has("tokens")) r.fail("'tokens' is required", "tokens");
  read_token_list(r, "tokens", limits, req.tokens);
  if (r.error()) return *r.error();
  return req;
}

}  // namespace ember::server
