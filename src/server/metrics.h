#pragma once
// Server metrics in the Prometheus text exposition format (GET /metrics). Request-level numbers
// (latency histograms, HTTP status counts, finish reasons) are observed by the HTTP handlers;
// engine-level numbers (queue, KV blocks, prefix cache, tokens, preemptions) come from
// EngineStats at scrape time. Lock-free on the observation path: handlers of many concurrent
// requests record every token's latency.
#include "engine/outputs.h"

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace ember::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  // Appends the _bucket/_sum/_count lines (cumulative buckets, +Inf last).
  void render(std::string& out, const std::string& name, const std::string& help) const;
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }

 private:
  std::vector<double> bounds_;
  std::vector<std::atomic<uint64_t>> buckets_;  // non-cumulative; last one is +Inf
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_micros_{0};  // sum in millionths, to add atomically
};

class ServerMetrics {
 public:
  ServerMetrics();

  Histogram time_to_first_token;  // seconds from arrival to the first generated token
  Histogram inter_token_latency;  // seconds between consecutive tokens of a choice
  Histogram e2e_latency;          // seconds from arrival to the last byte of the response
  Histogram prompt_tokens;        // per request
  Histogram generation_tokens;    // per request

  void count_http(const std::string& route, int status);
  void count_finish(FinishReason reason, int n = 1);
  void count_disconnect() { disconnects_.fetch_add(1, std::memory_order_relaxed); }
  void count_timeout() { timeouts_.fetch_add(1, std::memory_order_relaxed); }
  void count_rejected() { rejected_.fetch_add(1, std::memory_order_relaxed); }
  std::atomic<int> requests_in_flight{0};

  // The whole exposition; stats is absent while the model is loading.
  std::string render(const std::optional<EngineStats>& stats, const std::string& model_name) const;

 private:
  mutable std::mutex mu_;  // guards the labelled counters
  std::map<std::pair<std::string, int>, uint64_t> http_;
  std::array<std::atomic<uint64_t>, 5> finish_{};  // by FinishReason
  std::atomic<uint64_t> disconnects_{0}, timeouts_{0}, rejected_{0};
};

}  // namespace ember::server
