// The routes around generation: the chat page, health, model list, metrics, tokenizer access.
#include "server/chat_page.h"
#include "server/request_parser.h"
#include "server/response_format.h"
#include "server/server_state.h"

#include <chrono>

namespace ember::server {

namespace {

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void health(ServerState& s, httplib::Response& res) {
  if (s.draining) return send_json(res, Json{{"status", "shutting_down"}}, 503);
  if (!s.model()) {
    res.set_header("Retry-After", std::to_string(s.config.retry_after_s));
    return send_json(res, Json{{"status", "loading"}}, 503);
  }
  send_json(res, Json{{"status", "ok"}});
}

void models(ServerState& s, httplib::Response& res, int64_t started) {
  Json data = Json::array();
  if (auto m = s.model()) {
    for (const std::string& name : s.model_names()) {
      Json e = Json::object();
      e["id"] = name;
      e["object"] = "model";
      e["created"] = started;
      e["owned_by"] = "ember";
      e["root"] = m->model_path;
      e["max_model_len"] = m->engine->max_model_len();
      data.push_back(std::move(e));
    }
  }
  send_json(res, Json{{"object", "list"}, {"data", std::move(data)}});
}

// Shared start of /tokenize and /detokenize: the model and the parsed body.
template <typename Req>
std::optional<std::pair<std::shared_ptr<ServingModel>, Req>> begin(ServerState& s, const httplib::Request& http_req,
                                                                   httplib::Response& res,
                                                                   ApiResult<Req> (*parse)(const Json&, const ParseLimits&)) {
  auto model = s.model();
  if (!model) {
    send_error(s, res, ApiError::unavailable("the model is still loading", s.config.retry_after_s));
    return std::nullopt;
  }
  auto body = parse_json_body(http_req.body);
  if (!body) {
    send_error(s, res, body.error());
    return std::nullopt;
  }
  ParseLimits limits = s.config.limits;
  limits.vocab_size = model->engine->vocab_size();
  auto req = parse(*body, limits);
  if (!req) {
    send_error(s, res, req.error());
    return std::nullopt;
  }
  if (auto e = s.check_model(req->model)) {
    send_error(s, res, *e);
    return std::nullopt;
  }
  return std::make_pair(std::move(model), std::move(req).value());
}

void tokenize(ServerState& s, const httplib::Request& http_req, httplib::Response& res) {
  auto got = begin<TokenizeRequest>(s, http_req, res, &parse_tokenize_request);
  if (!got) return;
  auto& [model, req] = *got;
  std::string text;
  if (req.prompt) {
    text = *req.prompt;
  } else {
    if (!model->chat_template)
      return send_error(s, res, ApiError::bad_request("this model has no chat template (" + model->chat_template_error + ")"));
    chat::ChatTemplateOptions opt;
    opt.add_generation_prompt = req.add_generation_prompt;
    opt.bos_token = model->tokenizer->bos_token();
    opt.eos_token = model->tokenizer->eos_token();
    auto rendered = model->chat_template->render(req.messages, opt);
    if (!rendered.is_ok()) return send_error(s, res, ApiError::bad_request(rendered.message(), "messages"));
    text = std::move(*rendered);
  }
  const std::vector<int32_t> ids = model->tokenizer->encode(text, req.add_special_tokens, /*parse_special=*/true);
  Json j = Json::object();
  j["count"] = ids.size();
  j["max_model_len"] = model->engine->max_model_len();
  j["tokens"] = ids;
  if (req.return_token_strs) {
    Json strs = Json::array();
    for (int32_t id : ids) strs.push_back(model->tokenizer->token_piece(id));
    j["token_strs"] = std::move(strs);
  }
  send_json(res, j);
}

void detokenize(ServerState& s, const httplib::Request& http_req, httplib::Response& res) {
  auto got = begin<DetokenizeRequest>(s, http_req, res, &parse_detokenize_request);
  if (!got) return;
  auto& [model, req] = *got;
  send_json(res, Json{{"prompt", model->tokenizer->decode(req.tokens, /*skip_special=*/false)}});
}

}  // namespace

void register_info_routes(ServerState& s) {
  const int64_t started = unix_now();
  s.http.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_header("Cache-Control", "no-cache");
    res.set_content(std::string(chat_page_html()), "text/html; charset=utf-8");
  });
  s.http.Get("/health", [&s](const httplib::Request&, httplib::Response& res) { health(s, res); });
  s.http.Get("/v1/models", [&s, started](const httplib::Request&, httplib::Response& res) { models(s, res, started); });
  s.http.Get("/metrics", [&s](const httplib::Request&, httplib::Response& res) {
    std::optional<EngineStats> stats;
    if (auto m = s.model()) stats = m->engine->stats();
    res.set_content(s.metrics.render(stats, s.model_name()), "text/plain; version=0.0.4; charset=utf-8");
  });
  s.http.Post("/tokenize", [&s](const httplib::Request& req, httplib::Response& res) { tokenize(s, req, res); });
  s.http.Post("/detokenize", [&s](const httplib::Request& req, httplib::Response& res) { detokenize(s, req, res); });
}

}  // namespace ember::server
