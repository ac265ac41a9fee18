#include "server/generation.h"

#include "server/metrics.h"

#include <fmt/format.h>

namespace ember::server {

GenerationJob::GenerationJob(ResponseMeta meta, const Tokenizer& tokenizer, GenerationOptions options,
                             std::vector<JobPrompt> prompts, Clock::time_point arrival, ServerMetrics* metrics)
    : meta_(std::move(meta)),
      tokenizer_(tokenizer),
      options_(std::move(options)),
      prompts_(std::move(prompts)),
      arrival_(arrival),
      metrics_(metrics) {
  const int n = options_.params.n;
  choices_.reserve(prompts_.size() * static_cast<size_t>(n));
  for (size_t p = 0; p < prompts_.size(); ++p)
    for (int i = 0; i < n; ++i) choices_.push_back(Choice{ChoiceDecoder(tokenizer_, options_.stop), std::nullopt});
}

GenerationJob::~GenerationJob() {
  for (RequestStream& s : streams_) s.cancel();
}

std::optional<ApiError> GenerationJob::submit(AsyncEngine& engine, int retry_after_s) {
  streams_.clear();
  for (size_t p = 0; p < prompts_.size(); ++p) {
    EngineRequest req;
    req.request_id = prompts_.size() == 1 ? meta_.id : fmt::format("{}-{}", meta_.id, p);
    req.prompt_token_ids = prompts_[p].token_ids;
    req.params = options_.params;
    req.arrival_time = arrival_;
    RejectReason why = RejectReason::kNone;
    auto stream = engine.add_request(std::move(req), &why);
    if (!stream.is_ok()) {
      for (RequestStream& s : streams_) s.cancel();
      streams_.clear();
      switch (why) {
        case RejectReason::kQueueFull: {
          ApiError e;
          e.status = 429;
          e.type = "rate_limit_error";
          e.code = "queue_full";
          e.message = "the server's request queue is full; retry later";
          e.retry_after_s = retry_after_s;
          return e;
        }
        case RejectReason::kShuttingDown:
          return ApiError::unavailable("the server is shutting down", retry_after_s);
        default:
          return ApiError::bad_request(stream.message(), prompts_.size() > 1 ? "prompt" : "");
      }
    }
    streams_.push_back(std::move(stream).value());
  }
  return std::nullopt;
}

void GenerationJob::handle(size_t prompt, const RequestOutput& out, std::vector<Update>& updates) {
  const int n = options_.params.n;
  if (out.index < 0 || out.index >= n) return;
  const int index = static_cast<int>(prompt) * n + out.index;
  Choice& c = choices_[static_cast<size_t>(index)];
  if (c.decoder.finished()) return;
  const auto now = Clock::now();
  if (!out.new_token_ids.empty()) {
    if (!first_token_) {
      first_token_ = now;
      if (metrics_) metrics_->time_to_first_token.observe(std::chrono::duration<double>(now - arrival_).count());
    }
    if (c.last_token && metrics_) {
      // Several tokens in one output (speculative decoding) share the interval evenly.
      const double dt = std::chrono::duration<double>(now - *c.last_token).count() /
                        static_cast<double>(out.new_token_ids.size());
      for (size_t k = 0; k < out.new_token_ids.size(); ++k) metrics_->inter_token_latency.observe(dt);
    }
    c.last_token = now;
  }
  ChoiceDelta delta = c.decoder.consume(out);
  if (delta.finished) {
    ++n_finished_;
    if (metrics_) metrics_->count_finish(delta.reason);
    if (delta.reason == FinishReason::kError && error_.empty()) error_ = delta.error;
  }
  if (!delta.empty()) updates.push_back({index, std::move(delta)});
}

void GenerationJob::release_if_finished(size_t prompt) {
  if (!streams_[prompt]) return;
  const int n = options_.params.n;
  for (int i = 0; i < n; ++i)
    if (!choices_[prompt * static_cast<size_t>(n) + static_cast<size_t>(i)].decoder.finished()) return;
  RequestStream gone = std::move(streams_[prompt]);
  gone.cancel();  // no-op when the engine already finished it
}

void GenerationJob::drain(size_t prompt, std::vector<Update>& updates) {
  RequestOutput out;
  while (streams_[prompt]) {
    const PopStatus st = streams_[prompt].pop_for(std::chrono::milliseconds(0), out);
    if (st == PopStatus::kTimeout) break;
    if (st == PopStatus::kClosed) {
      // Every sample got its final output; anything unfinished here would be an engine bug,
      // which the client should see as an abort rather than a hang.
      RequestStream gone = std::move(streams_[prompt]);
      const int n = options_.params.n;
      for (int i = 0; i < n; ++i) {
        Choice& c = choices_[prompt * static_cast<size_t>(n) + static_cast<size_t>(i)];
        if (c.decoder.finished()) continue;
        ChoiceDelta d = c.decoder.finish(FinishReason::kAbort);
        ++n_finished_;
        if (metrics_) metrics_->count_finish(FinishReason::kAbort);
        updates.push_back({static_cast<int>(prompt) * n + i, std::move(d)});
      }
      break;
    }
    handle(prompt, out, updates);
  }
  release_if_finished(prompt);
}

std::vector<GenerationJob::Update> GenerationJob::poll(std::chrono::milliseconds wait) {
  std::vector<Update> updates;
  for (size_t p = 0; p < streams_.size(); ++p) drain(p, updates);
  if (!updates.empty() || done()) return updates;
  // Nothing yet: block on one open stream. With several prompts, wait in short slices so the
  // others are not starved (a batch of prompts is rare; one prompt is the common case).
  size_t open = 0, first = streams_.size();
  for (size_t p = 0; p < streams_.size(); ++p)
    if (streams_[p]) {
      ++open;
      if (first == streams_.size()) first = p;
    }
  if (open == 0) return updates;
  const auto slice = open == 1 ? wait : std::min(wait, std::chrono::milliseconds(2));
  RequestOutput out;
  const PopStatus st = streams_[first].pop_for(slice, out);
  if (st == PopStatus::kOutput) handle(first, out, updates);
  for (size_t p = 0; p < streams_.size(); ++p) drain(p, updates);
  return updates;
}

std::vector<GenerationJob::Update> GenerationJob::abort(FinishReason reason) {
  std::vector<Update> updates;
  for (RequestStream& s : streams_) s.cancel();
  for (size_t i = 0; i < choices_.size(); ++i) {
    if (choices_[i].decoder.finished()) continue;
    ChoiceDelta d = choices_[i].decoder.finish(reason);
    ++n_finished_;
    if (metrics_) metrics_->count_finish(reason);
    updates.push_back({static_cast<int>(i), std::move(d)});
  }
  streams_.clear();
  return updates;
}

Usage GenerationJob::usage() const {
  Usage u;
  const int n = options_.params.n;
  for (size_t p = 0; p < prompts_.size(); ++p) {
    const ChoiceDecoder& first = choices_[p * static_cast<size_t>(n)].decoder;
    u.prompt_tokens += static_cast<int64_t>(prompts_[p].token_ids.size());
    u.cached_tokens += first.num_cached_tokens();
  }
  for (const Choice& c : choices_) u.completion_tokens += c.decoder.num_tokens();
  return u;
}

}  // namespace ember::server
