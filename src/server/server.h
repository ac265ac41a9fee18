#pragma once
// ember's OpenAI-compatible HTTP server. The Server owns everything it serves with: the HTTP
// listener and its worker threads, the metrics, and (once attached) the model: its AsyncEngine,
// tokenizer and chat template. It listens before the model is loaded so /health can say
// "loading"; attach() makes it ready.
//
//   Server server(config);
//   int port = server.bind().value();
//   server.start();                  // serving (health: loading)
//   server.attach(std::move(model)); // ready
//   ... server.shutdown(drain);      // from another thread, e.g. on SIGTERM
//   server.wait();
#include "chat/chat_template.h"
#include "core/status.h"
#include "engine/async_engine.h"
#include "server/api_request.h"
#include "tokenizer/tokenizer.h"

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ember::server {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (see bind())
  // When non-empty, /v1/*, /tokenize and /detokenize need "Authorization: Bearer <api_key>".
  std::string api_key;
  // Names clients may ask for in "model"; the first is the one reported. Must not be empty
  // by the time the model is attached (attach() falls back to the model file's name).
  std::vector<std::string> model_names;
  // Generation requests running longer are aborted (0: no limit).
  double request_timeout_s = 0;
  // HTTP worker threads: each open connection holds one while it is served.
  size_t http_threads = 256;
  size_t max_body_bytes = size_t{32} << 20;
  // Sent with 429 / 503 answers.
  int retry_after_s = 1;
  ParseLimits limits;  // vocab_size is filled in from the model
  bool access_log = true;
};

// Everything the routes need from the model.
struct ServingModel {
  std::unique_ptr<AsyncEngine> engine;
  std::unique_ptr<Tokenizer> tokenizer;
  std::optional<chat::ChatTemplate> chat_template;  // none: chat requests get a 400
  std::string chat_template_error;                  // why there is none
  std::string model_path;                           // for logs and the default model name
};

struct ServerState;

class Server {
 public:
  explicit Server(ServerConfig config);
  ~Server();  // shutdown(0) if still running
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the listening socket; returns the port (the chosen one when config.port is 0).
  Result<int> bind();
  // Starts serving on a background thread (bind() first).
  Status start();
  // Makes the model available; the server is ready from now on.
  void attach(std::unique_ptr<ServingModel> model);

  // Graceful shutdown: stops accepting connections, answers new requests on open ones with
  // 503, lets in-flight requests finish for up to drain_timeout (nullopt: as long as they need)
  // and aborts the rest, then closes the remaining connections. Thread-safe and idempotent;
  // returns once everything is stopped.
  void shutdown(std::optional<std::chrono::milliseconds> drain_timeout = std::nullopt);
  // Blocks until the server stopped serving (after shutdown()).
  void wait();

  int port() const;
  bool ready() const;

 private:
  std::unique_ptr<ServerState> state_;
};

}  // namespace ember::server
