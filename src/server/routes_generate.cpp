// POST /v1/completions and /v1/chat/completions: parse, prepare the prompt(s), submit a
// GenerationJob and answer with one JSON body or a Server-Sent Events stream.
#include "server/request_parser.h"
#include "server/response_format.h"
#include "server/server_state.h"

#include <fmt/format.h>

#include <chrono>

namespace ember::server {

namespace {

using std::chrono::milliseconds;

// Keeps a request counted as in flight (the graceful drain waits for zero) for as long as the
// guard lives: the handler for plain answers, the stream's content provider for SSE.
class InFlight {
 public:
  explicit InFlight(std::atomic<int>& n) : n_(&n) { n_->fetch_add(1); }
  ~InFlight() {
    if (n_) n_->fetch_sub(1);
  }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

 private:
  std::atomic<int>* n_;
};

// How long handlers wait for engine output before checking the client and the deadline.
constexpr milliseconds kPollInterval{50};

// prompt_param: the field that holds the prompt ("prompt" or "messages").
std::optional<ApiError> check_context(const std::vector<int32_t>& ids, const SamplingParams& p, int max_model_len,
                                      size_t prompt_index, size_t n_prompts, const char* prompt_param) {
  const std::string which = n_prompts > 1 ? fmt::format("prompt {}", prompt_index) : std::string("prompt");
  if (ids.empty()) return ApiError::bad_request(fmt::format("the {} is empty", which), prompt_param);
  const int64_t n = static_cast<int64_t>(ids.size());
  if (n >= max_model_len) {
    ApiError e = ApiError::bad_request(
        fmt::format("This model's maximum context length is {} tokens. However, your {} has {} tokens, which leaves "
                    "no room for the completion. Please shorten it.", max_model_len, which, n), prompt_param);
    e.code = "context_length_exceeded";
    return e;
  }
  if (p.max_tokens && n + *p.max_tokens > max_model_len) {
    ApiError e = ApiError::bad_request(
        fmt::format("This model's maximum context length is {} tokens. However, you requested {} tokens ({} in the "
                    "{}, {} for the completion). Please reduce the prompt or max_tokens.",
                    max_model_len, n + *p.max_tokens, n, which, *p.max_tokens), "max_tokens");
    e.code = "context_length_exceeded";
    return e;
  }
  return std::nullopt;
}

ApiResult<std::vector<JobPrompt>> prepare_completion(const ServingModel& m, const CompletionRequest& req) {
  std::vector<JobPrompt> prompts;
  prompts.reserve(req.prompts.size());
  for (size_t i = 0; i < req.prompts.size(); ++i) {
    const PromptSpec& spec = req.prompts[i];
    JobPrompt jp;
    if (spec.text) {
      jp.token_ids = m.tokenizer->encode(*spec.text, /*add_special=*/true, /*parse_special=*/true);
      if (req.echo) jp.echo_text = *spec.text;
    } else {
      jp.token_ids = spec.token_ids;
      if (req.echo) jp.echo_text = m.tokenizer->decode(spec.token_ids, /*skip_special=*/true);
    }
    if (auto e = check_context(jp.token_ids, req.gen.params, m.engine->max_model_len(), i, req.prompts.size(), "prompt"))
      return *e;
    prompts.push_back(std::move(jp));
  }
  return prompts;
}

ApiResult<std::vector<JobPrompt>> prepare_chat(const ServingModel& m, const ChatRequest& req) {
  if (!m.chat_template)
    return ApiError::bad_request("this model has no chat template (" + m.chat_template_error +
                                 "); use /v1/completions or start the server with --chat-template");
  chat::ChatTemplateOptions opt;
  opt.add_generation_prompt = req.add_generation_prompt;
  opt.bos_token = m.tokenizer->bos_token();
  opt.eos_token = m.tokenizer->eos_token();
  opt.extra_context = req.template_kwargs;
  auto text = m.chat_template->render(req.messages, opt);
  if (!text.is_ok()) return ApiError::bad_request(text.message(), "messages");
  JobPrompt jp;
  // The template writes BOS and the turn markers itself.
  jp.token_ids = m.tokenizer->encode(*text, /*add_special=*/false, /*parse_special=*/true);
  if (auto e = check_context(jp.token_ids, req.gen.params, m.engine->max_model_len(), 0, 1, "messages")) return *e;
  return std::vector<JobPrompt>{std::move(jp)};
}

// Everything both routes do once the prompts are ready.
struct JobSetup {
  std::shared_ptr<ServingModel> model;
  std::shared_ptr<GenerationJob> job;
  std::optional<Clock::time_point> deadline;
  size_t echo_offset(int choice) const {
    return job->prompts()[static_cast<size_t>(choice / job->options().params.n)].echo_text.size();
  }
};

void respond_full(ServerState& s, JobSetup& setup, httplib::Response& res) {
  GenerationJob& job = *setup.job;
  std::vector<ChoiceResult> results(static_cast<size_t>(job.num_choices()));
  for (int i = 0; i < job.num_choices(); ++i) {
    results[static_cast<size_t>(i)].index = i;
    results[static_cast<size_t>(i)].text = job.prompts()[static_cast<size_t>(i / job.options().params.n)].echo_text;
    results[static_cast<size_t>(i)].text_offset_base = setup.echo_offset(i);
  }
  auto fold = [&](std::vector<GenerationJob::Update> updates) {
    for (auto& u : updates) {
      ChoiceResult& r = results[static_cast<size_t>(u.index)];
      r.text += u.delta.text;
      for (auto& t : u.delta.tokens) r.tokens.push_back(std::move(t));
      if (u.delta.finished) r.reason = u.delta.reason;
    }
  };
  while (!job.done()) {
    fold(job.poll(kPollInterval));
    if (job.done()) break;
    if (s.http.client_gone()) {
      fold(job.abort(FinishReason::kAbort));
      job.set_end_cause("client_disconnected");
      s.metrics.count_disconnect();
      res.status = 499;  // nginx's "client closed request": nobody reads it, the log does
      return;
    }
    if (setup.deadline && Clock::now() >= *setup.deadline) {
      fold(job.abort(FinishReason::kAbort));
      job.set_end_cause("timeout");
      s.metrics.count_timeout();
      send_error(s, res, ApiError::request_timeout(s.config.request_timeout_s));
      return;
    }
  }
  if (!job.error().empty()) return send_error(s, res, ApiError::internal("generation failed: " + job.error()));
  send_json(res, full_response_json(job.meta(), *setup.model->tokenizer, results, job.want_logprobs(), job.usage()));
}

// The state of one SSE response between calls of httplib's content provider.
struct StreamState {
  JobSetup setup;
  std::unique_ptr<InFlight> in_flight;
  bool started = false;
};

void append_updates(std::string& out, const StreamState& st, const std::vector<GenerationJob::Update>& updates) {
  const GenerationJob& job = *st.setup.job;
  const Tokenizer& tok = *st.setup.model->tokenizer;
  const bool usage_null = job.options().include_usage;
  for (const auto& u : updates) {
    const ChoiceDelta& d = u.delta;
    // Tokens that produced no text yet (held back for a stop string, or half a character) are
    // sent with their text later, unless the client wants their logprobs now.
    if (d.text.empty() && !d.finished && (job.want_logprobs() < 0 || d.tokens.empty())) continue;
    out += sse_event(chunk_json(job.meta(),
                                chunk_choice_json(job.meta(), tok, u.index, d, job.want_logprobs(), st.setup.echo_offset(u.index)),
                                usage_null));
  }
}

std::string stream_start(const StreamState& st) {
  const GenerationJob& job = *st.setup.job;
  const bool usage_null = job.options().include_usage;
  std::string out;
  for (int i = 0; i < job.num_choices(); ++i) {
    if (job.meta().kind == ApiKind::kChat) {
      out += sse_event(chunk_json(job.meta(), chat_role_choice_json(i), usage_null));
    } else if (const std::string& echo = job.prompts()[static_cast<size_t>(i / job.options().params.n)].echo_text;
               !echo.empty()) {
      ChoiceDelta d;
      d.text = echo;
      out += sse_event(chunk_json(job.meta(), chunk_choice_json(job.meta(), *st.setup.model->tokenizer, i, d, -1, 0),
                                  usage_null));
    }
  }
  return out;
}

// One call of the content provider: waits briefly for output and writes what there is.
// Returns false to drop the connection (the client is gone).
bool stream_step(ServerState& s, StreamState& st, httplib::DataSink& sink) {
  GenerationJob& job = *st.setup.job;
  std::string out;
  if (!st.started) {
    out = stream_start(st);
    st.started = true;
  }
  append_updates(out, st, job.poll(kPollInterval));
  bool end = job.done();
  if (!end && s.http.client_gone()) {
    job.abort(FinishReason::kAbort);
    job.set_end_cause("client_disconnected");
    s.metrics.count_disconnect();
    return false;
  }
  if (!end && st.setup.deadline && Clock::now() >= *st.setup.deadline) {
    append_updates(out, st, job.abort(FinishReason::kAbort));
    job.set_end_cause("timeout");
    s.metrics.count_timeout();
    out += sse_event(error_json(ApiError::request_timeout(s.config.request_timeout_s)));
    end = true;
  }
  if (end && job.error().size() && job.end_cause().empty())
    out += sse_event(error_json(ApiError::internal("generation failed: " + job.error())));
  if (end) {
    if (job.options().include_usage) out += sse_event(usage_chunk_json(job.meta(), job.usage()));
    out += kSseDone;
  }
  if (!out.empty() && !sink.write(out.data(), out.size())) {
    job.abort(FinishReason::kAbort);
    job.set_end_cause("client_disconnected");
    s.metrics.count_disconnect();
    return false;
  }
  if (end) sink.done();
  return true;
}

void respond_stream(ServerState& s, JobSetup setup, std::unique_ptr<InFlight> in_flight, httplib::Response& res) {
  auto st = std::make_shared<StreamState>();
  st->setup = std::move(setup);
  st->in_flight = std::move(in_flight);
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");  // reverse proxies must not buffer the stream
  res.set_chunked_content_provider("text/event-stream",
                                   [&s, st](size_t, httplib::DataSink& sink) { return stream_step(s, *st, sink); });
}

// The part of both handlers after parsing: model checks, prompt preparation, submission.
template <typename Req, typename Prepare>
void serve_generation(ServerState& s, const httplib::Request& http_req, httplib::Response& res, ApiKind kind,
                      ApiResult<Req> (*parse)(const Json&, const ParseLimits&), Prepare prepare) {
  const auto arrival = Clock::now();
  auto in_flight = std::make_unique<InFlight>(s.metrics.requests_in_flight);
  if (s.draining) {
    s.http.close_after_response(res);  // let the client reconnect elsewhere
    return send_error(s, res, ApiError::unavailable("the server is shutting down", s.config.retry_after_s));
  }
  std::shared_ptr<ServingModel> model = s.model();
  if (!model) return send_error(s, res, ApiError::unavailable("the model is still loading", s.config.retry_after_s));
  auto body = parse_json_body(http_req.body);
  if (!body) return send_error(s, res, body.error());
  ParseLimits limits = s.config.limits;
  limits.vocab_size = model->engine->vocab_size();
  auto req = parse(*body, limits);
  if (!req) return send_error(s, res, req.error());
  if (auto e = s.check_model(req->model)) return send_error(s, res, *e);
  auto prompts = prepare(*model, *req);
  if (!prompts) return send_error(s, res, prompts.error());

  ResponseMeta meta;
  meta.kind = kind;
  meta.id = s.new_request_id(kind == ApiKind::kChat ? "chatcmpl" : "cmpl");
  meta.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  meta.model = req->model.empty() ? s.model_name() : req->model;
  s.record().request_id = meta.id;

  JobSetup setup;
  setup.model = model;
  setup.job = std::make_shared<GenerationJob>(std::move(meta), *model->tokenizer, req->gen, std::move(prompts).value(),
                                              arrival, &s.metrics);
  if (s.config.request_timeout_s > 0)
    setup.deadline = arrival + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(s.config.request_timeout_s));
  if (auto e = setup.job->submit(*model->engine, s.config.retry_after_s)) {
    if (e->status == 429) s.metrics.count_rejected();
    return send_error(s, res, *e);
  }
  s.record().job = setup.job;
  if (req->gen.stream) return respond_stream(s, std::move(setup), std::move(in_flight), res);
  respond_full(s, setup, res);
}

}  // namespace

void register_generate_routes(ServerState& s) {
  s.http.Post("/v1/completions", [&s](const httplib::Request& req, httplib::Response& res) {
    serve_generation<CompletionRequest>(s, req, res, ApiKind::kCompletion, &parse_completion_request,
                                        &prepare_completion);
  });
  s.http.Post("/v1/chat/completions", [&s](const httplib::Request& req, httplib::Response& res) {
    serve_generation<ChatRequest>(s, req, res, ApiKind::kChat, &parse_chat_request, &prepare_chat);
  });
}

}  // namespace ember::server
