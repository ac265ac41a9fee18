// AsyncEngine: client threads hand requests and aborts to the engine thread through a small
// inbox (AsyncShared); the engine thread owns the LlmEngine and pushes outputs into each
// request's StreamState.
#include "engine/async_engine.h"

#include "core/check.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace ember {
namespace detail {

struct StreamState {
  std::string request_id;
  int n_samples = 1;
  std::weak_ptr<AsyncShared> engine;  // for cancel(); the engine may be gone already

  std::mutex mu;
  std::condition_variable cv;
  std::deque<RequestOutput> queue;
  int n_finished = 0;
  bool closed = false;     // final output of every sample queued
  bool cancelled = false;  // abort already sent
};

struct AsyncShared {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<EngineRequest, std::shared_ptr<StreamState>>> inbox;
  std::vector<std::string> aborts;
  std::unordered_set<std::string> ids_in_flight;  // accepted and not closed
  bool accepting = true;
  bool stop = false;
  std::optional<Clock::time_point> drain_deadline;  // with stop: abort what is left then
  int n_waiting_in_engine = 0;  // the scheduler's admission queue after the latest step
  EngineStats stats;
};

// Queues an output; returns true when it closed the stream.
bool push_output(StreamState& s, RequestOutput out) {
  std::lock_guard<std::mutex> lock(s.mu);
  if (out.finished) ++s.n_finished;
  s.queue.push_back(std::move(out));
  if (s.n_finished >= s.n_samples) s.closed = true;
  s.cv.notify_all();
  return s.closed;
}

void send_abort(StreamState& s) {
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.closed || s.cancelled) return;
    s.cancelled = true;
  }
  if (std::shared_ptr<AsyncShared> shared = s.engine.lock()) {
    std::lock_guard<std::mutex> lock(shared->mu);
    shared->aborts.push_back(s.request_id);
    shared->cv.notify_all();
  }
}

// Final abort outputs for samples that never got one (requests that never reached the engine).
void close_with_abort(StreamState& s, int n_prompt_tokens) {
  std::lock_guard<std::mutex> lock(s.mu);
  std::vector<bool> done(static_cast<size_t>(s.n_samples), false);
  for (const RequestOutput& o : s.queue)
    if (o.finished && o.index >= 0 && o.index < s.n_samples) done[static_cast<size_t>(o.index)] = true;
  for (int i = 0; i < s.n_samples && !s.closed; ++i) {
    if (done[static_cast<size_t>(i)]) continue;
    RequestOutput o;
    o.request_id = s.request_id;
    o.index = i;
    o.finished = true;
    o.finish_reason = FinishReason::kAbort;
    o.num_prompt_tokens = n_prompt_tokens;
    s.queue.push_back(std::move(o));
  }
  s.closed = true;
  s.cv.notify_all();
}

}  // namespace detail

// ---- RequestStream ----

RequestStream::RequestStream(std::shared_ptr<detail::StreamState> state) : state_(std::move(state)) {}
RequestStream::RequestStream(RequestStream&& other) noexcept = default;
RequestStream& RequestStream::operator=(RequestStream&& other) noexcept {
  if (this != &other) {
    cancel();
    state_ = std::move(other.state_);
  }
  return *this;
}
RequestStream::~RequestStream() { cancel(); }

std::optional<RequestOutput> RequestStream::pop() {
  if (!state_) return std::nullopt;
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->cv.wait(lock, [&] { return !state_->queue.empty() || state_->closed; });
  if (state_->queue.empty()) return std::nullopt;
  RequestOutput out = std::move(state_->queue.front());
  state_->queue.pop_front();
  return out;
}

PopStatus RequestStream::pop_for(std::chrono::milliseconds timeout, RequestOutput& out) {
  if (!state_) return PopStatus::kClosed;
  std::unique_lock<std::mutex> lock(state_->mu);
  if (!state_->cv.wait_for(lock, timeout, [&] { return !state_->queue.empty() || state_->closed; }))
    return PopStatus::kTimeout;
  if (state_->queue.empty()) return PopStatus::kClosed;
  out = std::move(state_->queue.front());
  state_->queue.pop_front();
  return PopStatus::kOutput;
}

void RequestStream::cancel() {
  if (state_) detail::send_abort(*state_);
}

bool RequestStream::done() const {
  if (!state_) return true;
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->closed;
}

const std::string& RequestStream::request_id() const {
  static const std::string empty;
  return state_ ? state_->request_id : empty;
}

// ---- AsyncEngine ----

AsyncEngine::AsyncEngine(std::unique_ptr<LlmEngine> engine, AsyncEngineConfig config)
    : shared_(std::make_shared<detail::AsyncShared>()),
      engine_(std::move(engine)),
      config_(config) {
  EMBER_CHECK(engine_ != nullptr);
  vocab_size_ = engine_->vocab_size();
  max_model_len_ = engine_->max_model_len();
  shared_->stats = engine_->stats();
  thread_ = std::thread([this] { run_loop(); });
}

AsyncEngine::~AsyncEngine() { shutdown(std::chrono::milliseconds(0)); }

Result<RequestStream> AsyncEngine::add_request(EngineRequest request, RejectReason* why) {
  auto reject = [why](RejectReason reason, Status st) -> Result<RequestStream> {
    if (why) *why = reason;
    return st;
  };
  // validate() only reads configuration fixed at construction: safe off the engine thread.
  if (Status st = engine_->validate(request); !st.is_ok())
    return reject(RejectReason::kInvalidRequest, st);
  auto state = std::make_shared<detail::StreamState>();
  state->request_id = request.request_id;
  state->n_samples = request.params.n;
  state->engine = shared_;
  if (!request.arrival_time) request.arrival_time = Clock::now();
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    if (!shared_->accepting)
      return reject(RejectReason::kShuttingDown, Status::error("the engine is shutting down"));
    if (shared_->ids_in_flight.count(request.request_id))
      return reject(RejectReason::kInvalidRequest,
                    Status::errorf("request id '{}' is already in use", request.request_id));
    const int n_waiting = static_cast<int>(shared_->inbox.size()) + shared_->n_waiting_in_engine;
    if (n_waiting >= config_.max_waiting_requests)
      return reject(RejectReason::kQueueFull,
                    Status::errorf("queue full: {} requests are waiting", n_waiting));
    shared_->ids_in_flight.insert(request.request_id);
    shared_->inbox.emplace_back(std::move(request), state);
    shared_->cv.notify_all();
  }
  if (why) *why = RejectReason::kNone;
  return RequestStream(std::move(state));
}

void AsyncEngine::abort(const std::string& request_id) {
  std::lock_guard<std::mutex> lock(shared_->mu);
  shared_->aborts.push_back(request_id);
  shared_->cv.notify_all();
}

void AsyncEngine::shutdown(std::optional<std::chrono::milliseconds> drain_timeout) {
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->accepting = false;
    // A later, shorter deadline wins (e.g. a second SIGTERM asking to hurry).
    std::optional<Clock::time_point> deadline;
    if (drain_timeout) deadline = Clock::now() + *drain_timeout;
    if (!shared_->stop || (deadline && (!shared_->drain_deadline || *deadline < *shared_->drain_deadline)))
      shared_->drain_deadline = deadline;
    shared_->stop = true;
    shared_->cv.notify_all();
  }
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

bool AsyncEngine::accepting() const {
  std::lock_guard<std::mutex> lock(shared_->mu);
  return shared_->accepting;
}

EngineStats AsyncEngine::stats() const {
  std::lock_guard<std::mutex> lock(shared_->mu);
  return shared_->stats;
}

void AsyncEngine::run_loop() {
  // Streams of requests inside the engine, by request id (engine thread only).
  std::unordered_map<std::string, std::shared_ptr<detail::StreamState>> streams;
  auto close_stream = [&](const std::string& id) {
    streams.erase(id);
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->ids_in_flight.erase(id);
  };
  while (true) {
    std::vector<std::pair<EngineRequest, std::shared_ptr<detail::StreamState>>> inbox;
    std::vector<std::string> aborts;
    bool stop = false, abort_all = false;
    {
      std::unique_lock<std::mutex> lock(shared_->mu);
      auto ready = [&] { return !shared_->inbox.empty() || !shared_->aborts.empty() || shared_->stop; };
      // Idle: sleep until a client needs us (stop counts, so a stopping engine never sleeps).
      if (!engine_->has_work()) shared_->cv.wait(lock, ready);
      inbox.swap(shared_->inbox);
      aborts.swap(shared_->aborts);
      stop = shared_->stop;
      abort_all = stop && shared_->drain_deadline && Clock::now() >= *shared_->drain_deadline;
    }
    for (auto& [request, state] : inbox) {
      const std::string id = request.request_id;
      const int n_prompt = static_cast<int>(request.prompt_token_ids.size());
      Status st = engine_->add_request(std::move(request));
      if (!st.is_ok()) {
        // Validated at add time, so this is a race (e.g. an id reused within one inbox).
        RequestOutput o;
        o.request_id = id;
        o.finished = true;
        o.finish_reason = FinishReason::kError;
        o.error = st.message();
        o.num_prompt_tokens = n_prompt;
        for (int i = 0; i < state->n_samples; ++i) {
          o.index = i;
          detail::push_output(*state, o);
        }
        std::lock_guard<std::mutex> lock(shared_->mu);
        if (!streams.count(id)) shared_->ids_in_flight.erase(id);
        continue;
      }
      streams[id] = state;
    }
    for (const std::string& id : aborts) engine_->abort(id);
    if (abort_all) {
      for (const auto& [id, state] : streams) engine_->abort(id);
    }
    if (engine_->has_work()) {
      for (RequestOutput& o : engine_->step()) {
        auto it = streams.find(o.request_id);
        if (it == streams.end()) continue;
        const std::string id = o.request_id;
        if (detail::push_output(*it->second, std::move(o))) close_stream(id);
      }
    }
    const EngineStats stats = engine_->stats();
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      shared_->stats = stats;
      shared_->n_waiting_in_engine = stats.num_waiting_requests;
    }
    if (stop && !engine_->has_work()) {
      std::lock_guard<std::mutex> lock(shared_->mu);
      if (shared_->inbox.empty()) break;
    }
  }
  // Nothing should be left; close any stream defensively so no client waits forever.
  for (auto& [id, state] : streams) detail::close_with_abort(*state, 0);
  std::lock_guard<std::mutex> lock(shared_->mu);
  for (auto& [request, state] : shared_->inbox)
    detail::close_with_abort(*state, static_cast<int>(request.prompt_token_ids.size()));
  shared_->inbox.clear();
  shared_->ids_in_flight.clear();
}

}  // namespace ember
