#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace ember::server {

namespace {

std::vector<double> latency_buckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
}
std::vector<double> token_buckets() {
  return {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768};
}

std::string fmt_value(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);
}

void header(std::string& out, const std::string& name, const char* type, const std::string& help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void gauge(std::string& out, const std::string& name, const std::string& help, double v) {
  header(out, name, "gauge", help);
  out += fmt::format("{} {}\n", name, fmt_value(v));
}

void counter(std::string& out, const std::string& name, const std::string& help, double v) {
  header(out, name, "counter", help);
  out += fmt::format("{} {}\n", name, fmt_value(v));
}

// Label values escape backslash, quote and newline (Prometheus text format).
std::string label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\', out += c;
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), buckets_(bounds_.size() + 1) {
  std::sort(bounds_.begin(), bounds_.end());
}

void Histogram::observe(double value) {
  if (!std::isfinite(value) || value < 0) value = 0;
  const size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_micros_.fetch_add(static_cast<uint64_t>(std::llround(value * 1e6)), std::memory_order_relaxed);
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help) const {
  header(out, name, "histogram", help);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += buckets_[i].load(std::memory_order_relaxed);
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, fmt_value(bounds_[i]), cumulative);
  }
  cumulative += buckets_.back().load(std::memory_order_relaxed);
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n", name, cumulative);
  out += fmt::format("{}_sum {}\n", name, static_cast<double>(sum_micros_.load(std::memory_order_relaxed)) / 1e6);
  out += fmt::format("{}_count {}\n", name, cumulative);
}

ServerMetrics::ServerMetrics()
    : time_to_first_token(latency_buckets()),
      inter_token_latency(latency_buckets()),
      e2e_latency(latency_buckets()),
      prompt_tokens(token_buckets()),
      generation_tokens(token_buckets()) {}

void ServerMetrics::count_http(const std::string& route, int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++http_[{route, status}];
}

void ServerMetrics::count_finish(FinishReason reason, int n) {
  const size_t i = static_cast<size_t>(reason);
  if (i < finish_.size()) finish_[i].fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
}

std::string ServerMetrics::render(const std::optional<EngineStats>& stats, const std::string& model_name) const {
  std::string out;
  gauge(out, "ember_model_loaded", "1 once the model is loaded and serving", stats ? 1 : 0);
  if (stats) {
    const EngineStats& s = *stats;
    gauge(out, "ember_num_requests_running", "Sequences holding KV blocks (running)", s.num_running);
    gauge(out, "ember_num_requests_waiting", "Sequences waiting to be scheduled", s.num_waiting);
    gauge(out, "ember_kv_blocks_used", "KV cache blocks in use by live sequences", s.kv_blocks_used);
    gauge(out, "ember_kv_blocks_total", "KV cache blocks in the pool", s.kv_blocks_total);
    gauge(out, "ember_kv_cache_usage_ratio", "Fraction of KV cache blocks in use",
          s.kv_blocks_total > 0 ? static_cast<double>(s.kv_blocks_used) / s.kv_blocks_total : 0.0);
    counter(out, "ember_prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache",
            static_cast<double>(s.prefix_cache_queries));
    counter(out, "ember_prefix_cache_hits_total", "Prompt tokens found in the prefix cache",
            static_cast<double>(s.prefix_cache_hits));
    gauge(out, "ember_prefix_cache_hit_rate", "Prefix cache hits / queries since start", s.prefix_cache_hit_rate);
    counter(out, "ember_prompt_tokens_total", "Prompt tokens of admitted requests",
            static_cast<double>(s.prompt_tokens_total));
    counter(out, "ember_prompt_tokens_computed_total", "Prompt tokens run through the model",
            static_cast<double>(s.prompt_tokens_computed));
    counter(out, "ember_generation_tokens_total", "Generated tokens", static_cast<double>(s.generation_tokens_total));
    counter(out, "ember_num_preemptions_total", "Sequences preempted for lack of KV blocks",
            static_cast<double>(s.num_preemptions));
    counter(out, "ember_engine_steps_total", "Engine steps", static_cast<double>(s.num_steps));
    counter(out, "ember_spec_draft_tokens_total", "Speculative decoding: draft tokens verified",
            static_cast<double>(s.spec_draft_tokens));
    counter(out, "ember_spec_accepted_tokens_total", "Speculative decoding: draft tokens the model confirmed",
            static_cast<double>(s.spec_accepted_tokens));
  }
  gauge(out, "ember_http_requests_in_flight", "Generation requests being served",
        requests_in_flight.load(std::memory_order_relaxed));
  time_to_first_token.render(out, "ember_time_to_first_token_seconds", "Time from arrival to the first generated token");
  inter_token_latency.render(out, "ember_inter_token_latency_seconds", "Time between consecutive generated tokens of a choice");
  e2e_latency.render(out, "ember_e2e_request_latency_seconds", "Time from arrival to the end of the response");
  prompt_tokens.render(out, "ember_request_prompt_tokens", "Prompt tokens per request");
  generation_tokens.render(out, "ember_request_generation_tokens", "Generated tokens per request");

  header(out, "ember_request_finished_total", "counter", "Finished choices by finish reason");
  for (FinishReason r : {FinishReason::kStop, FinishReason::kLength, FinishReason::kAbort, FinishReason::kError})
    out += fmt::format("ember_request_finished_total{{finish_reason=\"{}\",model_name=\"{}\"}} {}\n",
                       finish_reason_name(r), label(model_name),
                       finish_[static_cast<size_t>(r)].load(std::memory_order_relaxed));
  counter(out, "ember_client_disconnects_total", "Requests aborted because the client went away",
          static_cast<double>(disconnects_.load(std::memory_order_relaxed)));
  counter(out, "ember_request_timeouts_total", "Requests aborted by --request-timeout",
          static_cast<double>(timeouts_.load(std::memory_order_relaxed)));
  counter(out, "ember_requests_rejected_total", "Requests rejected because the queue was full",
          static_cast<double>(rejected_.load(std::memory_order_relaxed)));
  header(out, "ember_http_requests_total", "counter", "HTTP requests by route and status");
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [key, n] : http_)
    out += fmt::format("ember_http_requests_total{{route=\"{}\",status=\"{}\"}} {}\n", label(key.first), key.second, n);
  return out;
}

}  // namespace ember::server
