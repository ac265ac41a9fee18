// Server lifecycle (bind, serve, attach, graceful shutdown) and the hooks every route shares:
// API-key check, JSON error bodies for httplib's own errors, exception safety, access log.
#include "server/server.h"

#include "core/log.h"
#include "server/access_log.h"
#include "server/auth.h"
#include "server/response_format.h"
#include "server/server_state.h"

#include <fmt/format.h>

#include <filesystem>
#include <random>

namespace ember::server {

ServerState::ServerState(ServerConfig c) : config(std::move(c)), http(config.http_threads) {
  std::random_device rd;
  id_salt_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

std::shared_ptr<ServingModel> ServerState::model() const {
  std::lock_guard<std::mutex> lock(mu_);
  return model_;
}

void ServerState::set_model(std::shared_ptr<ServingModel> m, std::vector<std::string> names) {
  std::lock_guard<std::mutex> lock(mu_);
  model_ = std::move(m);
  model_names_ = std::move(names);
}

AccessRecord& ServerState::record() {
  std::lock_guard<std::mutex> lock(mu_);
  return records_[std::this_thread::get_id()];  // node-based map: the reference stays valid
}

AccessRecord ServerState::take_record() {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = records_.find(std::this_thread::get_id());
  if (it == records_.end()) return {};
  AccessRecord r = std::move(it->second);
  records_.erase(it);
  return r;
}

std::string ServerState::new_request_id(const char* prefix) {
  const uint64_t n = id_counter_.fetch_add(1, std::memory_order_relaxed);
  // Unique within the process (counter) and unlikely to repeat across restarts (salt).
  return fmt::format("{}-{:016x}{:08x}", prefix, id_salt_, n);
}

std::string ServerState::model_name() const {
  std::lock_guard<std::mutex> lock(mu_);
  return model_names_.empty() ? std::string() : model_names_.front();
}

std::vector<std::string> ServerState::model_names() const {
  std::lock_guard<std::mutex> lock(mu_);
  return model_names_;
}

std::optional<ApiError> ServerState::check_model(const std::string& requested) const {
  if (requested.empty()) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& name : model_names_)
    if (name == requested) return std::nullopt;
  return ApiError::not_found(fmt::format("The model `{}` does not exist.", requested), "model_not_found");
}

void send_json(httplib::Response& res, const Json& j, int status) {
  res.status = status;
  res.set_content(dump_json(j), "application/json");
}

void send_error(ServerState& s, httplib::Response& res, const ApiError& e) {
  if (e.retry_after_s > 0) res.set_header("Retry-After", std::to_string(e.retry_after_s));
  send_json(res, error_json(e), e.status);
  s.record().error = e.message;
}

namespace {

// Routes that need the API key when one is configured (vLLM's choice: the OpenAI API and the
// tokenizer endpoints; health, metrics and the page stay open for probes and browsers).
bool needs_auth(const std::string& path) {
  return path.rfind("/v1/", 0) == 0 || path == "/tokenize" || path == "/detokenize";
}

// Route label for metrics: known paths as they are, everything else folded together.
std::string route_label(const std::string& path) {
  static constexpr const char* kKnown[] = {"/",         "/health",   "/metrics",         "/v1/models",
                                           "/tokenize", "/detokenize", "/v1/completions", "/v1/chat/completions"};
  for (const char* k : kKnown)
    if (path == k) return path;
  return "other";
}

void install_hooks(ServerState& s) {
  auto& http = s.http;
  // A record left by a request whose answer never reached the logger must not leak into the
  // next request's log line.
  http.on_request_start = [&s] { s.take_record(); };
  http.set_payload_max_length(s.config.max_body_bytes);
  http.set_keep_alive_max_count(100000);
  http.set_tcp_nodelay(true);  // SSE chunks are small and latency-sensitive
  http.set_pre_routing_handler([&s](const httplib::Request& req, httplib::Response& res) {
    if (s.config.api_key.empty() || !needs_auth(req.path)) return httplib::Server::HandlerResponse::Unhandled;
    if (bearer_token_matches(req.get_header_value("Authorization"), s.config.api_key))
      return httplib::Server::HandlerResponse::Unhandled;
    send_error(s, res, ApiError::unauthorized("Incorrect or missing API key (send 'Authorization: Bearer <key>')."));
    // Answered before the body was read: its bytes must not be parsed as the next request.
    if (req.has_header("Content-Length") || req.has_header("Transfer-Encoding")) s.http.close_after_response(res);
    return httplib::Server::HandlerResponse::Handled;
  });
  // httplib's own answers (404 unknown route, 413 body too large, 400 unparsable HTTP) get
  // OpenAI error bodies too.
  http.set_error_handler(httplib::Server::HandlerWithResponse(
      [&s](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty() || res.content_provider_) return httplib::Server::HandlerResponse::Unhandled;
    ApiError e;
    e.status = res.status;
    if (res.status == 404) {
      e.message = fmt::format("no route for {} {}", req.method, req.path);
      e.type = "not_found_error";
    } else if (res.status == 413) {
      e.message = fmt::format("request body is larger than {} bytes", s.config.max_body_bytes);
    } else {
      e.message = fmt::format("bad HTTP request ({})", res.status);
    }
    // httplib answers these before (or instead of) reading the body, and after a malformed
    // request the connection's state is unknown: do not reuse it.
    if (res.status != 404) s.http.close_after_response(res);
    send_error(s, res, e);
    return httplib::Server::HandlerResponse::Handled;
  }));
  http.set_exception_handler([&s](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& ex) {
      what = ex.what();
    } catch (...) {
    }
    EMBER_LOG_ERROR("server: handler failed: {}", what);
    send_error(s, res, ApiError::internal("internal server error: " + what));
  });
  http.set_logger([&s](const httplib::Request& req, const httplib::Response& res) {
    AccessRecord rec = s.take_record();
    s.metrics.count_http(route_label(req.path), res.status);
    if (rec.job) observe_finished_job(s.metrics, *rec.job);
    if (s.config.access_log) EMBER_LOG_INFO("{}", format_access_log(req, res, rec));
  });
}

}  // namespace

Server::Server(ServerConfig config) : state_(std::make_unique<ServerState>(std::move(config))) {
  install_hooks(*state_);
  register_generate_routes(*state_);
  register_info_routes(*state_);
}

Server::~Server() { shutdown(std::chrono::milliseconds(0)); }

Result<int> Server::bind() {
  EMBER_ASSIGN_OR_RETURN(state_->port, state_->http.bind(state_->config.host, state_->config.port));
  return state_->port;
}

Status Server::start() {
  if (state_->port < 0) return Status::error("Server::start: bind() first");
  if (state_->serve_thread.joinable()) return Status::error("Server::start: already started");
  state_->serve_thread = std::thread([s = state_.get()] { s->http.serve(); });
  EMBER_LOG_INFO("server: listening on http://{}:{}", state_->config.host, state_->port);
  return Status::ok();
}

void Server::attach(std::unique_ptr<ServingModel> model) {
  ServerState& s = *state_;
  std::vector<std::string> names = s.config.model_names;
  if (names.empty()) {
    // The file or directory name, as llama-server and vLLM report a model without an alias.
    std::filesystem::path p(model->model_path);
    names.push_back(p.has_filename() ? p.filename().string() : p.parent_path().filename().string());
  }
  s.set_model(std::shared_ptr<ServingModel>(std::move(model)), std::move(names));
  EMBER_LOG_INFO("server: ready, serving model '{}'", s.model_name());
}

void Server::shutdown(std::optional<std::chrono::milliseconds> drain_timeout) {
  ServerState& s = *state_;
  {
    std::unique_lock<std::mutex> lock(s.shutdown_mu);
    if (s.shutdown_started) {
      s.shutdown_cv.wait(lock, [&] { return s.shutdown_done; });
      return;
    }
    s.shutdown_started = true;
  }
  EMBER_LOG_INFO("server: shutting down (in flight: {})", s.metrics.requests_in_flight.load());
  s.draining = true;
  s.http.stop_accepting();
  if (auto m = s.model()) m->engine->shutdown(drain_timeout);
  // Engine streams are all closed now; wait for the handlers to write their last bytes. A
  // client that stopped reading cannot hold us longer than the write timeout.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (s.metrics.requests_in_flight.load() > 0 && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  s.http.close_connections();
  if (s.serve_thread.joinable()) s.serve_thread.join();
  EMBER_LOG_INFO("server: stopped");
  std::lock_guard<std::mutex> lock(s.shutdown_mu);
  s.shutdown_done = true;
  s.shutdown_cv.notify_all();
}

void Server::wait() {
  ServerState& s = *state_;
  std::unique_lock<std::mutex> lock(s.shutdown_mu);
  s.shutdown_cv.wait(lock, [&] { return s.shutdown_done; });
}

int Server::port() const { return state_->port; }

bool Server::ready() const { return state_->model() != nullptr && !state_->draining; }

}  // namespace ember::server
