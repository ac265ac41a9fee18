#pragma once
// HttpServer: cpp-httplib's Server (routing, HTTP parsing, chunked responses) with connection
// handling of our own, which an inference server needs:
//  - handlers can ask whether their client went away while they wait for the engine (so the
//    request is aborted and its KV blocks freed at once);
//  - sends never raise SIGPIPE (MSG_NOSIGNAL), reads are buffered;
//  - a listen backlog of 1024 rather than the library's 5, so bursts of connections are not
//    dropped;
//  - a graceful stop: stop accepting, let in-flight responses finish, then close idle
//    keep-alive connections (httplib's own stop() cuts streaming responses short).
// Internal to src/server: only the server's .cpp files include httplib.h.
#include "core/status.h"

#include <httplib.h>

#include <atomic>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>

namespace ember::server {

class HttpServer : public httplib::Server {
 public:
  explicit HttpServer(size_t n_threads);
  ~HttpServer() override;

  // Binds host:port (port 0: any free port) and returns the port.
  Result<int> bind(const std::string& host, int port);
  // Serves until stopped (blocks; call from the thread that runs the server).
  bool serve();

  // Whether the client of the calling handler thread closed its connection. False outside a
  // handler thread.
  bool client_gone() const;
  // Closes the calling handler's connection once the response is written (and says so in a
  // "Connection: close" header): for answers given without reading the request body, whose
  // bytes would otherwise be taken for the next request.
  void close_after_response(httplib::Response& res);

  // Graceful stop, step 1: no new connections (the accept loop ends; requests on open
  // connections still reach the handlers).
  void stop_accepting();
  // Step 2, once in-flight generation requests are done: closes idle connections (busy ones
  // finish the response they are writing, then close) so serve() returns.
  void close_connections();

  // Called on the worker thread before each request is routed.
  std::function<void()> on_request_start;

 private:
  // Replaces httplib's per-connection loop (keep-alive, one request after the other).
  bool process_and_close_socket(socket_t sock) override;
  // Waits until the next request's first bytes arrive (false: timeout, EOF or closing).
  bool wait_for_request(socket_t sock) const;

  mutable std::mutex mu_;
  struct Connection {
    socket_t sock;
    bool busy = false;  // inside a request (reading it, handling it or writing the answer)
    bool close_after_response = false;
  };
  // Connections by the worker thread serving them (a worker serves one at a time).
  std::unordered_map<std::thread::id, Connection> connections_;
  std::atomic<bool> closing_{false};
};

}  // namespace ember::server
