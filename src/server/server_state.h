#pragma once
// What a Server owns, shared by its route files. Internal to src/server.
#include "server/api_error.h"
#include "server/generation.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/server.h"

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

namespace ember::server {

// What the access log line and the request metrics of one HTTP request are made of. Filled by
// the handler (and, for streams, the content provider) and consumed by the logger hook, which
// httplib runs on the same worker thread once the response has been written.
struct AccessRecord {
  std::string request_id;
  std::shared_ptr<GenerationJob> job;
  std::string error;  // message of an error answer
};

struct ServerState {
  explicit ServerState(ServerConfig c);

  ServerConfig config;
  HttpServer http;
  ServerMetrics metrics;
  std::thread serve_thread;
  int port = -1;

  std::atomic<bool> draining{false};

  // The model, once attached. Handlers take their own reference for the request's lifetime.
  std::shared_ptr<ServingModel> model() const;
  // Attaches the model and the names clients may call it by (first: the reported one).
  void set_model(std::shared_ptr<ServingModel> m, std::vector<std::string> names);

  // The access record of the request the calling worker thread serves.
  AccessRecord& record();
  AccessRecord take_record();

  std::string new_request_id(const char* prefix);
  // The name to report for the model ("" until one is known).
  std::string model_name() const;
  std::vector<std::string> model_names() const;
  // 404 unless `requested` is empty or one of the served names.
  std::optional<ApiError> check_model(const std::string& requested) const;

  // Shutdown bookkeeping.
  std::mutex shutdown_mu;
  bool shutdown_started = false;
  bool shutdown_done = false;
  std::condition_variable shutdown_cv;

 private:
  mutable std::mutex mu_;
  std::shared_ptr<ServingModel> model_;
  std::vector<std::string> model_names_;
  std::unordered_map<std::thread::id, AccessRecord> records_;
  uint64_t id_salt_ = 0;
  std::atomic<uint64_t> id_counter_{0};
};

// Answer helpers (they also note the error for the access log).
void send_error(ServerState& s, httplib::Response& res, const ApiError& e);
void send_json(httplib::Response& res, const Json& j, int status = 200);

void register_generate_routes(ServerState& s);
void register_info_routes(ServerState& s);

}  // namespace ember::server
