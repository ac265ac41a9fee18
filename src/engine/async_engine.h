#pragma once
// AsyncEngine: runs LlmEngine's step loop on its own thread. Client threads (HTTP handlers, the
// CLI) call add_request and read their RequestStream; everything else is the engine thread's.
#include "core/status.h"
#include "engine/engine.h"
#include "engine/outputs.h"

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>

namespace ember {

namespace detail {
struct StreamState;
struct AsyncShared;
}  // namespace detail

enum class PopStatus {
  kOutput,   // an output was returned
  kTimeout,  // nothing arrived in time; the stream is still open
  kClosed,   // every output was consumed and the request is done (or the stream was moved from)
};

// The outputs of one request, in order. Move-only; destroying or cancel()ing a stream whose
// request is still running aborts it (a client disconnect frees its KV blocks at once).
// pop / pop_for / cancel may be called from any one thread at a time.
class RequestStream {
 public:
  RequestStream() = default;
  RequestStream(RequestStream&&) noexcept;
  RequestStream& operator=(RequestStream&&) noexcept;
  ~RequestStream();

  // Blocks until an output arrives; nullopt once the request is done and drained.
  std::optional<RequestOutput> pop();
  PopStatus pop_for(std::chrono::milliseconds timeout, RequestOutput& out);
  // Aborts the request (no-op when already finished). Outputs already queued stay poppable and
  // a final one with FinishReason::kAbort follows for every unfinished sample.
  void cancel();
  // True once the final output of every sample has been queued (maybe not yet popped).
  bool done() const;
  const std::string& request_id() const;
  explicit operator bool() const { return state_ != nullptr; }

 private:
  friend class AsyncEngine;
  explicit RequestStream(std::shared_ptr<detail::StreamState> state);
  std::shared_ptr<detail::StreamState> state_;
};

struct AsyncEngineConfig {
  // Requests accepted but not yet running (queued for the engine thread or waiting in the
  // scheduler); add_request beyond this fails with RejectReason::kQueueFull.
  int max_waiting_requests = 256;
};

enum class RejectReason {
  kNone,
  kInvalidRequest,  // bad params, prompt too long, duplicate id: HTTP 400
  kQueueFull,       // HTTP 429 / 503 with Retry-After
  kShuttingDown,    // HTTP 503
};

class AsyncEngine {
 public:
  // Starts the engine thread.
  AsyncEngine(std::unique_ptr<LlmEngine> engine, AsyncEngineConfig config = {});
  // shutdown(0): aborts what is in flight.
  ~AsyncEngine();
  AsyncEngine(const AsyncEngine&) = delete;
  AsyncEngine& operator=(const AsyncEngine&) = delete;

  // Validates on the calling thread and queues the request. On failure *why (if given) says
  // which kind of failure it was.
  Result<RequestStream> add_request(EngineRequest request, RejectReason* why = nullptr);
  // Same as cancel() on the request's stream.
  void abort(const std::string& request_id);

  // Stops accepting requests, lets in-flight ones finish for up to drain_timeout (nullopt:
  // as long as they need; 0: not at all), aborts the rest, and joins the engine thread.
  // Every stream gets its final output. Idempotent.
  void shutdown(std::optional<std::chrono::milliseconds> drain_timeout = std::nullopt);
  bool accepting() const;

  // Snapshot taken after the latest step (safe from any thread).
  EngineStats stats() const;
  // Constant facts about the engine (safe from any thread).
  int vocab_size() const { return vocab_size_; }
  int max_model_len() const { return max_model_len_; }

 private:
  void run_loop();

  std::shared_ptr<detail::AsyncShared> shared_;
  std::unique_ptr<LlmEngine> engine_;
  AsyncEngineConfig config_;
  int vocab_size_ = 0;
  int max_model_len_ = 0;
  std::thread thread_;
};

}  // namespace ember
