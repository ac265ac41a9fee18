#include "server/access_log.h"

#include <fmt/format.h>

namespace ember::server {

namespace {

// logfmt value: bare when it has no spaces, quotes or '='; else quoted with escapes.
std::string logfmt_value(const std::string& v) {
  bool plain = !v.empty();
  for (char c : v)
    if (c == ' ' || c == '"' || c == '=' || c == '\\' || static_cast<unsigned char>(c) < 0x20) plain = false;
  if (plain) return v;
  std::string out = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (c == '\n') out += "\\n";
    else if (static_cast<unsigned char>(c) < 0x20) out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
    else out += c;
  }
  return out + "\"";
}

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

std::string format_access_log(const httplib::Request& req, const httplib::Response& res, const AccessRecord& rec) {
  std::string line = "access";
  auto add = [&](const char* key, const std::string& value) { line += fmt::format(" {}={}", key, logfmt_value(value)); };
  if (!rec.request_id.empty()) add("id", rec.request_id);
  add("method", req.method);
  add("path", req.path);
  add("status", std::to_string(res.status));
  add("remote", fmt::format("{}:{}", req.remote_addr, req.remote_port));
  if (const GenerationJob* job = rec.job.get()) {
    const Usage u = job->usage();
    add("stream", job->options().stream ? "true" : "false");
    add("prompt_tokens", std::to_string(u.prompt_tokens));
    add("completion_tokens", std::to_string(u.completion_tokens));
    add("cached_tokens", std::to_string(u.cached_tokens));
    add("n", std::to_string(job->num_choices()));
    const auto now = Clock::now();
    if (auto t = job->first_token_time()) add("ttft_ms", fmt::format("{:.1f}", ms_between(job->arrival(), *t)));
    add("total_ms", fmt::format("{:.1f}", ms_between(job->arrival(), now)));
    std::string finish;
    for (int i = 0; i < job->num_choices(); ++i) {
      if (i) finish += ',';
      const FinishReason r = job->choice(i).finish_reason();
      finish += r == FinishReason::kNone ? "none" : finish_reason_name(r);
    }
    add("finish", finish);
    if (!job->end_cause().empty()) add("cause", job->end_cause());
    if (!job->options().user.empty()) add("user", job->options().user);
  }
  if (!rec.error.empty()) add("error", rec.error);
  return line;
}

void observe_finished_job(ServerMetrics& metrics, const GenerationJob& job) {
  metrics.e2e_latency.observe(std::chrono::duration<double>(Clock::now() - job.arrival()).count());
  const Usage u = job.usage();
  metrics.prompt_tokens.observe(static_cast<double>(u.prompt_tokens));
  metrics.generation_tokens.observe(static_cast<double>(u.completion_tokens));
}

}  // namespace ember::server
