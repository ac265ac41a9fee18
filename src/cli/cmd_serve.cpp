// `ember serve -m MODEL`: the OpenAI-compatible HTTP server. Listens first (so /health answers
// "loading" while the model loads), then attaches the model. SIGTERM / SIGINT shut it down
// gracefully: stop accepting, finish in-flight requests (or abort them after --drain-timeout),
// exit 0. A second signal exits at once.
#include "cli/commands.h"
#include "cli/common.h"
#include "core/log.h"
#include "server/chat_template_source.h"
#include "server/server.h"

#include <fmt/format.h>
#include <pthread.h>

#include <csignal>
#include <cstdlib>
#include <thread>

namespace ember {

namespace {

struct ServeOptions {
  ModelOptions model;
  server::ServerConfig server;
  int max_queue = 256;
  std::string chat_template;
  double drain_timeout_s = -1;  // < 0: wait for in-flight requests as long as they need
  bool no_access_log = false;
};

// Attaches the model: runner, tokenizer, chat template, engine. Errors are fatal for serve.
Result<std::unique_ptr<server::ServingModel>> load_model(const ServeOptions& o) {
  auto m = std::make_unique<server::ServingModel>();
  m->model_path = o.model.model;
  EMBER_ASSIGN_OR_RETURN(auto runner, load_runner(o.model));
  auto tok = load_tokenizer(runner->source());
  if (!tok.is_ok()) return tok.status().with_context("the server needs the model's tokenizer");
  m->tokenizer = std::move(tok).value();
  auto source = o.chat_template.empty() ? server::find_chat_template(runner->source())
                                        : server::read_chat_template_file(o.chat_template);
  if (source.is_ok()) {
    auto parsed = chat::ChatTemplate::parse(*source);
    if (parsed.is_ok()) m->chat_template = std::move(parsed).value();
    else m->chat_template_error = parsed.message();
  } else {
    m->chat_template_error = source.message();
  }
  if (!o.chat_template.empty() && !m->chat_template)
    return Status::errorf("--chat-template {}: {}", o.chat_template, m->chat_template_error);
  if (!m->chat_template) EMBER_LOG_WARN("chat completions disabled: {}", m->chat_template_error);
  EMBER_RETURN_IF_ERROR(finish_model_load(*runner, o.model));
  auto eos = stop_token_ids(runner->config(), m->tokenizer.get());
  EMBER_ASSIGN_OR_RETURN(auto engine, make_engine(std::move(runner), o.model, eos, m->tokenizer.get()));
  AsyncEngineConfig ac;
  ac.max_waiting_requests = o.max_queue;
  m->engine = std::make_unique<AsyncEngine>(std::move(engine), ac);
  return m;
}

int serve(ServeOptions o) {
  // Signals go to one thread that waits for them; every other thread (started below) inherits
  // the blocked mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGUSR2);  // our own "stop waiting" signal
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  o.server.access_log = !o.no_access_log;
  server::Server srv(o.server);
  auto port = srv.bind();
  if (!port.is_ok()) {
    fmt::print(stderr, "error: {}\n", port.message());
    return 1;
  }
  if (auto st = srv.start(); !st.is_ok()) {
    fmt::print(stderr, "error: {}\n", st.message());
    return 1;
  }
  std::optional<std::chrono::milliseconds> drain;
  if (o.drain_timeout_s >= 0) drain = std::chrono::milliseconds(static_cast<int64_t>(o.drain_timeout_s * 1000));
  std::atomic<bool> stopping{false};
  std::thread shutdown_thread;
  std::thread signal_thread([&] {
    for (;;) {
      int sig = 0;
      if (sigwait(&signals, &sig) != 0 || sig == SIGUSR2) return;
      if (stopping.exchange(true)) {
        EMBER_LOG_WARN("second signal: exiting now");
        std::_Exit(1);
      }
      EMBER_LOG_INFO("received {}, shutting down gracefully", sig == SIGTERM ? "SIGTERM" : "SIGINT");
      shutdown_thread = std::thread([&] { srv.shutdown(drain); });
    }
  });

  int rc = 0;
  auto model = load_model(o);
  if (!model.is_ok()) {
    fmt::print(stderr, "error: {}\n", model.message());
    rc = 1;
    if (!stopping.exchange(true)) shutdown_thread = std::thread([&] { srv.shutdown(std::chrono::milliseconds(0)); });
  } else if (!stopping) {
    srv.attach(std::move(model).value());
  }
  srv.wait();
  pthread_kill(signal_thread.native_handle(), SIGUSR2);
  signal_thread.join();
  if (shutdown_thread.joinable()) shutdown_thread.join();
  return rc;
}

}  // namespace

CommandFn register_serve(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server");
  auto o = std::make_shared<ServeOptions>();
  add_model_options(*cmd, o->model);
  cmd->add_option("--host", o->server.host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", o->server.port, "port (0: any free port)")->check(CLI::Range(0, 65535))->capture_default_str();
  cmd->add_option("--api-key", o->server.api_key, "require 'Authorization: Bearer KEY' on the API routes");
  cmd->add_option("--served-model-name", o->server.model_names,
                  "model name(s) clients use (default: the model file's name)");
  cmd->add_option("--max-queue", o->max_queue, "requests waiting for the engine before answering 429")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  cmd->add_option("--request-timeout", o->server.request_timeout_s, "abort generation requests after S seconds (0: never)")
      ->check(CLI::Range(0.0, 1e9));
  cmd->add_option("--drain-timeout", o->drain_timeout_s,
                  "on SIGTERM, abort requests still running after S seconds (default: let them finish)");
  cmd->add_option("--chat-template", o->chat_template, "chat template file (.jinja, or JSON with \"chat_template\")");
  cmd->add_option("--http-threads", o->server.http_threads, "HTTP worker threads (one per open connection)")
      ->check(CLI::Range(4, 65536))->capture_default_str();
  cmd->add_flag("--no-access-log", o->no_access_log, "do not log a line per request");
  return [o]() { return serve(*o); };
}

}  // namespace ember
