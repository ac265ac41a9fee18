// Response formatting, metrics exposition and the API-key check.
#include "server/auth.h"
#include "server/metrics.h"
#include "server/response_format.h"

#include <gtest/gtest.h>

namespace ember::server {
namespace {

TEST(ResponseFormat, ErrorObjectHasOpenAIShape) {
  ApiError e = ApiError::bad_request("bad temperature", "temperature");
  Json j = error_json(e);
  EXPECT_EQ(j["error"]["message"], "bad temperature");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "temperature");
  EXPECT_TRUE(j["error"]["code"].is_null());
  EXPECT_TRUE(error_json(ApiError::not_found("x", "model_not_found"))["error"]["param"].is_null());
}

TEST(ResponseFormat, UsageAndFinishReasons) {
  Json u = usage_json(Usage{10, 5, 4});
  EXPECT_EQ(u["total_tokens"], 15);
  EXPECT_EQ(u["prompt_tokens_details"]["cached_tokens"], 4);
  EXPECT_EQ(finish_reason_json(FinishReason::kStop), "stop");
  EXPECT_EQ(finish_reason_json(FinishReason::kLength), "length");
  EXPECT_EQ(finish_reason_json(FinishReason::kAbort), "abort");
  EXPECT_TRUE(finish_reason_json(FinishReason::kNone).is_null());
}

TEST(ResponseFormat, SseFramingAndInvalidUtf8) {
  Json j = Json::object();
  j["text"] = std::string("a\xff");
  const std::string ev = sse_event(j);
  EXPECT_EQ(ev.rfind("data: ", 0), 0u);
  EXPECT_EQ(ev.substr(ev.size() - 2), "\n\n");
  EXPECT_NE(ev.find("\xEF\xBF\xBD"), std::string::npos);  // replaced, not thrown
  EXPECT_STREQ(kSseDone, "data: [DONE]\n\n");
}

TEST(Metrics, HistogramIsCumulativeWithInf) {
  Histogram h({0.1, 1.0});
  h.observe(0.05);
  h.observe(0.5);
  h.observe(5);
  std::string out;
  h.render(out, "x_seconds", "help");
  EXPECT_NE(out.find("# TYPE x_seconds histogram"), std::string::npos);
  EXPECT_NE(out.find("x_seconds_bucket{le=\"0.1\"} 1\n"), std::string::npos);
  EXPECT_NE(out.find("x_seconds_bucket{le=\"1\"} 2\n"), std::string::npos);
  EXPECT_NE(out.find("x_seconds_bucket{le=\"+Inf\"} 3\n"), std::string::npos);
  EXPECT_NE(out.find("x_seconds_count 3\n"), std::string::npos);
  EXPECT_NE(out.find("x_seconds_sum 5.55\n"), std::string::npos);
}

TEST(Metrics, ExpositionHasEngineAndRequestMetrics) {
  ServerMetrics m;
  m.count_http("/v1/completions", 200);
  m.count_finish(FinishReason::kStop, 2);
  EngineStats s;
  s.num_running = 3;
  s.kv_blocks_used = 7;
  s.kv_blocks_total = 10;
  const std::string out = m.render(s, "my\"model");
  for (const char* needle :
       {"ember_num_requests_running 3\n", "ember_kv_blocks_used 7\n", "ember_kv_cache_usage_ratio 0.7\n",
        "ember_prefix_cache_hit_rate", "ember_num_preemptions_total", "ember_generation_tokens_total",
        "ember_time_to_first_token_seconds_bucket", "ember_inter_token_latency_seconds_bucket",
        "ember_http_requests_total{route=\"/v1/completions\",status=\"200\"} 1\n",
        "ember_request_finished_total{finish_reason=\"stop\",model_name=\"my\\\"model\"} 2\n"})
    EXPECT_NE(out.find(needle), std::string::npos) << needle;
  // While loading there are no engine numbers.
  const std::string loading = m.render(std::nullopt, "m");
  EXPECT_NE(loading.find("ember_model_loaded 0"), std::string::npos);
  EXPECT_EQ(loading.find("ember_kv_blocks_used"), std::string::npos);
  // Every non-comment line is "name{labels} value" or "name value".
  size_t pos = 0;
  while (pos < out.size()) {
    const size_t end = out.find('\n', pos);
    ASSERT_NE(end, std::string::npos);
    const std::string line = out.substr(pos, end - pos);
    pos = end + 1;
    if (line.rfind("# ", 0) == 0) continue;
    EXPECT_EQ(line.rfind("ember_", 0), 0u) << line;
    EXPECT_NE(line.rfind(' '), std::string::npos) << line;
  }
}

TEST(Auth, BearerToken) {
  EXPECT_TRUE(bearer_token_matches("Bearer sk-1", "sk-1"));
  EXPECT_TRUE(bearer_token_matches("bearer   sk-1 ", "sk-1"));
  EXPECT_FALSE(bearer_token_matches("Bearer sk-2", "sk-1"));
  EXPECT_FALSE(bearer_token_matches("Bearer sk-1x", "sk-1"));
  EXPECT_FALSE(bearer_token_matches("Bearer sk-", "sk-1"));
  EXPECT_FALSE(bearer_token_matches("sk-1", "sk-1"));
  EXPECT_FALSE(bearer_token_matches("Basic sk-1", "sk-1"));
  EXPECT_FALSE(bearer_token_matches("Bearersk-1", "sk-1"));
  EXPECT_FALSE(bearer_token_matches("", "sk-1"));
  EXPECT_FALSE(bearer_token_matches("Bearer ", ""));
}

}  // namespace
}  // namespace ember::server
