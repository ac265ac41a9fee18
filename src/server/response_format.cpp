#include "server/response_format.h"

#include "tokenizer/tokenizer.h"

namespace ember::server {

namespace {

const char* object_name(ApiKind kind, bool chunk) {
  if (kind == ApiKind::kChat) return chunk ? "chat.completion.chunk" : "chat.completion";
  return "text_completion";
}

// A token's own text, special tokens included (logprobs show what the model produced).
std::string token_text(const Tokenizer& tok, int32_t id) { return tok.decode({id}, /*skip_special=*/false); }

Json bytes_json(const std::string& s) {
  Json b = Json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

Json base_json(const ResponseMeta& meta, bool chunk) {
  Json j = Json::object();
  j["id"] = meta.id;
  j["object"] = object_name(meta.kind, chunk);
  j["created"] = meta.created;
  j["model"] = meta.model;
  j["system_fingerprint"] = nullptr;
  return j;
}

}  // namespace

std::string dump_json(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string sse_event(const Json& j) { return "data: " + dump_json(j) + "\n\n"; }

Json error_json(const ApiError& e) {
  Json err = Json::object();
  err["message"] = e.message;
  err["type"] = e.type;
  err["param"] = e.param.empty() ? Json(nullptr) : Json(e.param);
  err["code"] = e.code.empty() ? Json(nullptr) : Json(e.code);
  Json j = Json::object();
  j["error"] = std::move(err);
  return j;
}

Json usage_json(const Usage& u) {
  Json j = Json::object();
  j["prompt_tokens"] = u.prompt_tokens;
  j["completion_tokens"] = u.completion_tokens;
  j["total_tokens"] = u.prompt_tokens + u.completion_tokens;
  j["prompt_tokens_details"] = Json{{"cached_tokens", u.cached_tokens}};
  return j;
}

Json finish_reason_json(FinishReason r) {
  if (r == FinishReason::kNone) return nullptr;
  return finish_reason_name(r);
}

Json completion_logprobs_json(const Tokenizer& tok, const std::vector<TokenRecord>& tokens, int want_top,
                              size_t text_offset_base) {
  Json toks = Json::array(), lps = Json::array(), tops = Json::array(), offsets = Json::array();
  for (const TokenRecord& t : tokens) {
    toks.push_back(token_text(tok, t.id));
    offsets.push_back(text_offset_base + t.text_offset);
    if (!t.logprobs) {
      lps.push_back(nullptr);
      tops.push_back(nullptr);
      continue;
    }
    lps.push_back(t.logprobs->logprob);
    Json top = Json::object();
    int n = 0;
    for (const TokenLogprob& alt : t.logprobs->top) {
      if (n++ >= want_top) break;
      const std::string s = token_text(tok, alt.token_id);
      if (!top.contains(s)) top[s] = alt.logprob;  // equal strings of different ids: keep the likelier
    }
    tops.push_back(std::move(top));
  }
  Json j = Json::object();
  j["tokens"] = std::move(toks);
  j["token_logprobs"] = std::move(lps);
  j["top_logprobs"] = std::move(tops);
  j["text_offset"] = std::move(offsets);
  return j;
}

Json chat_logprobs_json(const Tokenizer& tok, const std::vector<TokenRecord>& tokens, int want_top) {
  Json content = Json::array();
  for (const TokenRecord& t : tokens) {
    const std::string s = token_text(tok, t.id);
    Json e = Json::object();
    e["token"] = s;
    e["logprob"] = t.logprobs ? Json(t.logprobs->logprob) : Json(nullptr);
    e["bytes"] = bytes_json(s);
    Json top = Json::array();
    if (t.logprobs) {
      int n = 0;
      for (const TokenLogprob& alt : t.logprobs->top) {
        if (n++ >= want_top) break;
        const std::string a = token_text(tok, alt.token_id);
        top.push_back(Json{{"token", a}, {"logprob", alt.logprob}, {"bytes", bytes_json(a)}});
      }
    }
    e["top_logprobs"] = std::move(top);
    content.push_back(std::move(e));
  }
  Json j = Json::object();
  j["content"] = std::move(content);
  j["refusal"] = nullptr;
  return j;
}

Json full_response_json(const ResponseMeta& meta, const Tokenizer& tok, const std::vector<ChoiceResult>& choices,
                        int want_logprobs, const Usage& usage) {
  Json j = base_json(meta, /*chunk=*/false);
  Json arr = Json::array();
  for (const ChoiceResult& c : choices) {
    Json choice = Json::object();
    choice["index"] = c.index;
    if (meta.kind == ApiKind::kChat) {
      choice["message"] = Json{{"role", "assistant"}, {"content", c.text}};
      choice["logprobs"] = want_logprobs >= 0 ? chat_logprobs_json(tok, c.tokens, want_logprobs) : Json(nullptr);
    } else {
      choice["text"] = c.text;
      choice["logprobs"] =
          want_logprobs >= 0 ? completion_logprobs_json(tok, c.tokens, want_logprobs, c.text_offset_base) : Json(nullptr);
    }
    choice["finish_reason"] = finish_reason_json(c.reason);
    arr.push_back(std::move(choice));
  }
  j["choices"] = std::move(arr);
  j["usage"] = usage_json(usage);
  return j;
}

Json chunk_json(const ResponseMeta& meta, Json choice, bool usage_null) {
  Json j = base_json(meta, /*chunk=*/true);
  j["choices"] = Json::array({std::move(choice)});
  if (usage_null) j["usage"] = nullptr;
  return j;
}

Json chunk_choice_json(const ResponseMeta& meta, const Tokenizer& tok, int index, const ChoiceDelta& delta,
                       int want_logprobs, size_t text_offset_base) {
  Json choice = Json::object();
  choice["index"] = index;
  if (meta.kind == ApiKind::kChat) {
    Json d = Json::object();
    if (!delta.text.empty() || !delta.finished) d["content"] = delta.text;
    choice["delta"] = std::move(d);
    choice["logprobs"] =
        want_logprobs >= 0 && !delta.tokens.empty() ? chat_logprobs_json(tok, delta.tokens, want_logprobs) : Json(nullptr);
  } else {
    choice["text"] = delta.text;
    choice["logprobs"] = want_logprobs >= 0 && !delta.tokens.empty()
                             ? completion_logprobs_json(tok, delta.tokens, want_logprobs, text_offset_base)
                             : Json(nullptr);
  }
  choice["finish_reason"] = delta.finished ? finish_reason_json(delta.reason) : Json(nullptr);
  return choice;
}

Json chat_role_choice_json(int index) {
  Json choice = Json::object();
  choice["index"] = index;
  choice["delta"] = Json{{"role", "assistant"}, {"content", ""}};
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = nullptr;
  return choice;
}

Json usage_chunk_json(const ResponseMeta& meta, const Usage& usage) {
  Json j = base_json(meta, /*chunk=*/true);
  j["choices"] = Json::array();
  j["usage"] = usage_json(usage);
  return j;
}

}  // namespace ember::server
