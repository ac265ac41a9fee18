// The whole server in-process, over HTTP: an LlmEngine on the engine tests' FakeExecutor (its
// greedy output is known exactly), the tiny Llama-3-style tokenizer fixture and a ChatML
// template. Covers what the Python suite cannot easily reach: exact KV accounting after
// disconnects, the bounded queue, timeouts and a graceful shutdown during a stream.
#include "engine_test_util.h"
#include "server/server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <future>
#include <thread>

namespace ember::server {
namespace {

using ember::testing::FakeExecutor;
using ember::testing::FakeExecutorOptions;
using namespace std::chrono_literals;

constexpr int kVocab = 1800;  // the tiny tokenizer's vocabulary
constexpr const char* kChatml =
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

// FakeExecutor with a delay per step, so requests last long enough to be interrupted.
class SlowExecutor : public ModelExecutor {
 public:
  SlowExecutor(FakeExecutorOptions o, std::chrono::milliseconds delay) : fake_(o), delay_(delay) {}
  int vocab_size() const override { return fake_.vocab_size(); }
  int max_context() const override { return fake_.max_context(); }
  size_t kv_bytes_per_block(int bs) const override { return fake_.kv_bytes_per_block(bs); }
  Status allocate_kv_cache(const KvCacheConfig& c) override { return fake_.allocate_kv_cache(c); }
  Status execute(const ForwardBatch& b, std::vector<float>& logits) override {
    std::this_thread::sleep_for(delay_);
    return fake_.execute(b, logits);
  }
  Status copy_blocks(const std::vector<std::pair<int32_t, int32_t>>& p) override { return fake_.copy_blocks(p); }

 private:
  FakeExecutor fake_;
  std::chrono::milliseconds delay_;
};

struct Options {
  std::chrono::milliseconds step_delay{0};
  int max_waiting = 256;
  int max_num_seqs = 16;
  ServerConfig config;
  bool attach = true;
};

class TestServer {
 public:
  explicit TestServer(Options o = {}) : opt_(std::move(o)) {
    opt_.config.host = "127.0.0.1";
    opt_.config.port = 0;
    opt_.config.access_log = false;
    if (opt_.config.model_names.empty()) opt_.config.model_names = {"tiny"};
    server_ = std::make_unique<Server>(opt_.config);
    auto port = server_->bind();
    EXPECT_TRUE(port.is_ok());
    port_ = port.is_ok() ? *port : 0;
    EXPECT_TRUE(server_->start().is_ok());
    if (opt_.attach) attach();
  }
  ~TestServer() { server_->shutdown(0ms); }

  void attach() {
    FakeExecutorOptions fo;
    fo.vocab_size = kVocab;
    fo.max_context = 256;
    EngineConfig ec;
    ec.n_blocks = 256;
    ec.scheduler.block_size = 4;
    ec.scheduler.max_num_batched_tokens = 256;
    ec.scheduler.max_num_seqs = opt_.max_num_seqs;
    ec.deterministic = true;
    auto engine = LlmEngine::create(std::make_unique<SlowExecutor>(fo, opt_.step_delay), ec);
    ASSERT_TRUE(engine.is_ok()) << engine.message();
    auto m = std::make_unique<ServingModel>();
    AsyncEngineConfig ac;
    ac.max_waiting_requests = opt_.max_waiting;
    m->engine = std::make_unique<AsyncEngine>(std::move(engine).value(), ac);
    engine_ = m->engine.get();
    auto tok = Tokenizer::from_hf_dir(std::string(EMBER_SOURCE_DIR) + "/tests/fixtures/tokenizer/tiny/bpe_llama3");
    ASSERT_TRUE(tok.is_ok()) << tok.message();
    m->tokenizer = std::move(tok).value();
    tokenizer_ = m->tokenizer.get();
    auto tmpl = chat::ChatTemplate::parse(kChatml);
    ASSERT_TRUE(tmpl.is_ok()) << tmpl.message();
    m->chat_template = std::move(tmpl).value();
    m->model_path = "/models/tiny";
    server_->attach(std::move(m));
  }

  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(30, 0);
    if (!opt_.config.api_key.empty()) c.set_bearer_token_auth(opt_.config.api_key.c_str());
    return c;
  }
  httplib::Result post(const std::string& path, const std::string& body) const {
    return client().Post(path.c_str(), body, "application/json");
  }
  Json post_json(const std::string& path, const Json& body, int expect_status = 200) const {
    auto r = post(path, body.dump());
    EXPECT_TRUE(r) << "no response";
    if (!r) return Json();
    EXPECT_EQ(r->status, expect_status) << r->body;
    return Json::parse(r->body);
  }
  // Streams a request; returns the data lines (without "data: "). Stops reading (closing the
  // connection) after `max_events` events when >= 0.
  std::vector<std::string> stream(const Json& body, int max_events = -1, int* status = nullptr) const {
    std::vector<std::string> events;
    std::string buffer;
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    if (body.contains("messages")) req.path = "/v1/chat/completions";
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
      buffer.append(data, len);
      size_t end;
      while ((end = buffer.find("\n\n")) != std::string::npos) {
        std::string ev = buffer.substr(0, end);
        buffer.erase(0, end + 2);
        if (ev.rfind("data: ", 0) == 0) events.push_back(ev.substr(6));
      }
      return max_events < 0 || static_cast<int>(events.size()) < max_events;
    };
    auto c = client();
    auto res = c.send(req);
    if (status) *status = res ? res->status : -1;
    return events;
  }

  EngineStats stats() const { return engine_->stats(); }
  // Polls until the engine holds no KV blocks and runs nothing.
  bool wait_idle(std::chrono::milliseconds limit = 5000ms) const {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      const EngineStats s = stats();
      if (s.kv_blocks_used == 0 && s.num_running == 0 && s.num_waiting == 0) return true;
      std::this_thread::sleep_for(5ms);
    }
    return false;
  }

  Server& server() { return *server_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  int port() const { return port_; }

 private:
  Options opt_;
  std::unique_ptr<Server> server_;
  int port_ = 0;
  AsyncEngine* engine_ = nullptr;
  const Tokenizer* tokenizer_ = nullptr;
};

std::vector<int32_t> greedy(const std::vector<int32_t>& prompt, int max_tokens) {
  return ember::testing::reference_greedy(prompt, max_tokens, {}, kVocab, 256, /*ignore_eos=*/true);
}

Json completion(std::vector<int32_t> prompt, int max_tokens) {
  return Json{{"model", "tiny"}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}};
}

TEST(ServerHttp, HealthIsLoadingUntilAttached) {
  Options o;
  o.attach = false;
  TestServer ts(o);
  auto c = ts.client();
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 503);
  EXPECT_EQ(Json::parse(h->body)["status"], "loading");
  auto r = ts.post("/v1/completions", R"({"prompt": "x"})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_TRUE(r->has_header("Retry-After"));
  ts.attach();
  h = c.Get("/health");
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(Json::parse(h->body)["status"], "ok");
}

TEST(ServerHttp, CompletionEqualsOfflineGreedy) {
  TestServer ts;
  const std::vector<int32_t> prompt = {17, 300, 42, 999, 5};
  Json r = ts.post_json("/v1/completions", completion(prompt, 12));
  const auto expected = greedy(prompt, 12);
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_EQ(r["model"], "tiny");
  EXPECT_EQ(r["choices"][0]["text"], ts.tokenizer().decode(expected, true));
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(r["usage"]["completion_tokens"], 12);
  EXPECT_EQ(r["usage"]["total_tokens"], 17);
  EXPECT_EQ(r["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_TRUE(ts.wait_idle());
}

TEST(ServerHttp, StreamConcatenatesToTheSameTextWithUsageLast) {
  TestServer ts;
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5, 9, 2, 6};
  Json body = completion(prompt, 20);
  body["stream"] = true;
  body["stream_options"] = Json{{"include_usage", true}};
  auto events = ts.stream(body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text;
  std::string finish;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    Json c = Json::parse(events[i]);
    EXPECT_EQ(c["object"], "text_completion");
    EXPECT_TRUE(c.contains("usage") && c["usage"].is_null());
    text += c["choices"][0]["text"].get<std::string>();
    if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
  }
  Json usage = Json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 20);
  EXPECT_EQ(text, ts.tokenizer().decode(greedy(prompt, 20), true));
  EXPECT_EQ(finish, "length");
}

TEST(ServerHttp, ChatUsesTheTemplate) {
  TestServer ts;
  Json body = {{"messages", {{{"role", "user"}, {"content", "hello there"}}}}, {"max_tokens", 6}, {"temperature", 0},
               {"ignore_eos", true}};
  Json r = ts.post_json("/v1/chat/completions", body);
  const std::string rendered = "<|im_start|>user\nhello there<|im_end|>\n<|im_start|>assistant\n";
  const auto prompt = ts.tokenizer().encode(rendered, false, true);
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(r["choices"][0]["message"]["content"], ts.tokenizer().decode(greedy(prompt, 6), true));
  EXPECT_EQ(r["usage"]["prompt_tokens"], prompt.size());
  // /tokenize with messages renders the same prompt.
  Json tk = ts.post_json("/tokenize", Json{{"messages", body["messages"]}});
  EXPECT_EQ(tk["tokens"].get<std::vector<int32_t>>(), prompt);
}

TEST(ServerHttp, StopStringIsTrimmedAndEndsTheChoice) {
  TestServer ts;
  const std::vector<int32_t> prompt = {11, 22, 33};
  const std::string full = ts.tokenizer().decode(greedy(prompt, 30), true);
  ASSERT_GE(full.size(), 12u);
  const std::string stop = full.substr(full.size() / 2, 3);
  const std::string expected = full.substr(0, full.find(stop));
  Json body = completion(prompt, 30);
  body["stop"] = stop;
  Json r = ts.post_json("/v1/completions", body);
  EXPECT_EQ(r["choices"][0]["text"], expected);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  EXPECT_LT(r["usage"]["completion_tokens"].get<int>(), 30);
  body["stream"] = true;
  std::string text;
  for (const auto& ev : ts.stream(body))
    if (ev != "[DONE]") text += Json::parse(ev)["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(text, expected);
  EXPECT_TRUE(ts.wait_idle());
}

TEST(ServerHttp, ErrorsAreOpenAIObjects) {
  Options o;
  o.config.max_body_bytes = 4096;
  TestServer ts(o);
  auto check = [&](const std::string& path, const std::string& body, int status, const char* param = nullptr) {
    auto r = ts.post(path, body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, status) << body << " -> " << r->body;
    Json j = Json::parse(r->body);
    ASSERT_TRUE(j.contains("error")) << r->body;
    EXPECT_TRUE(j["error"]["message"].is_string());
    EXPECT_TRUE(j["error"]["type"].is_string());
    if (param) {
      EXPECT_EQ(j["error"]["param"], std::string(param));
    }
  };
  check("/v1/completions", "{not json", 400);
  check("/v1/completions", R"({"prompt": "x", "temperature": "hot"})", 400, "temperature");
  check("/v1/completions", R"({"prompt": "x", "model": "gpt-9"})", 404);
  check("/v1/completions", R"({"prompt": [1, 2, 99999]})", 400, "prompt");
  check("/v1/completions", std::string(R"({"prompt": ")") + std::string(5000, 'a') + "\"}", 413);
  check("/v1/nothing", "{}", 404);
  // Prompt longer than the context window (256).
  std::vector<int32_t> long_prompt(300, 7);
  check("/v1/completions", Json{{"prompt", long_prompt}}.dump(), 400);
  std::vector<int32_t> near(250, 7);
  check("/v1/completions", Json{{"prompt", near}, {"max_tokens", 10}}.dump(), 400, "max_tokens");
  EXPECT_TRUE(ts.wait_idle());
}

TEST(ServerHttp, ApiKey) {
  Options o;
  o.config.api_key = "sekrit";
  TestServer ts(o);
  httplib::Client anon("127.0.0.1", ts.port());
  auto r = anon.Post("/v1/completions", R"({"prompt": [1], "max_tokens": 1})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(Json::parse(r->body)["error"]["code"], "invalid_api_key");
  EXPECT_EQ(anon.Get("/v1/models")->status, 401);
  EXPECT_EQ(anon.Get("/health")->status, 200);  // probes need no key
  httplib::Client wrong("127.0.0.1", ts.port());
  wrong.set_bearer_token_auth("nope");
  EXPECT_EQ(wrong.Get("/v1/models")->status, 401);
  Json models = Json::parse(ts.client().Get("/v1/models")->body);
  EXPECT_EQ(models["data"][0]["id"], "tiny");
}

TEST(ServerHttp, NAndLogprobs) {
  TestServer ts;
  Json body = completion({5, 6, 7}, 5);
  body["n"] = 3;
  body["logprobs"] = 2;
  Json r = ts.post_json("/v1/completions", body);
  ASSERT_EQ(r["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const Json& c = r["choices"][i];
    EXPECT_EQ(c["index"], i);
    EXPECT_EQ(c["text"], r["choices"][0]["text"]);  // greedy: all samples agree
    ASSERT_EQ(c["logprobs"]["tokens"].size(), 5u);
    ASSERT_EQ(c["logprobs"]["top_logprobs"][0].size(), 2u);
    EXPECT_LE(c["logprobs"]["token_logprobs"][0].get<double>(), 0.0);
  }
  EXPECT_EQ(r["usage"]["completion_tokens"], 15);
  Json chat = {{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"max_tokens", 4}, {"logprobs", true},
               {"top_logprobs", 3}, {"temperature", 0}, {"ignore_eos", true}};
  Json cr = ts.post_json("/v1/chat/completions", chat);
  const Json& content = cr["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 4u);
  EXPECT_EQ(content[0]["top_logprobs"].size(), 3u);
  EXPECT_TRUE(content[0]["bytes"].is_array());
}

TEST(ServerHttp, DisconnectMidStreamAbortsAndFreesBlocks) {
  Options o;
  o.step_delay = 5ms;
  TestServer ts(o);
  Json body = completion({1, 2, 3, 4, 5, 6, 7, 8, 9}, 200);
  body["stream"] = true;
  auto events = ts.stream(body, /*max_events=*/3);  // hangs up after 3 events
  EXPECT_EQ(events.size(), 3u);
  EXPECT_TRUE(ts.wait_idle(2000ms)) << "KV blocks still held after the client left";
  EXPECT_GE(ts.stats().requests_aborted, 1);
  auto metrics = ts.client().Get("/metrics");
  EXPECT_NE(metrics->body.find("ember_client_disconnects_total 1"), std::string::npos);
  EXPECT_NE(metrics->body.find("ember_kv_blocks_used 0"), std::string::npos);
}

TEST(ServerHttp, QueueFullGets429WithRetryAfter) {
  Options o;
  o.step_delay = 20ms;
  o.max_waiting = 1;
  o.max_num_seqs = 1;
  TestServer ts(o);
  std::vector<std::future<int>> results;
  for (int i = 0; i < 6; ++i)
    results.push_back(std::async(std::launch::async, [&ts, i] {
      auto r = ts.post("/v1/completions", completion({static_cast<int32_t>(i + 1), 2, 3}, 10).dump());
      if (r && r->status == 429) {
        EXPECT_EQ(r->get_header_value("Retry-After"), "1");
      }
      return r ? r->status : -1;
    }));
  int ok = 0, rejected = 0;
  for (auto& f : results) {
    const int s = f.get();
    ok += s == 200;
    rejected += s == 429;
  }
  EXPECT_EQ(ok + rejected, 6);
  EXPECT_GE(rejected, 1);
  EXPECT_GE(ok, 1);
  EXPECT_TRUE(ts.wait_idle());
}

TEST(ServerHttp, RequestTimeout) {
  Options o;
  o.step_delay = 10ms;
  o.config.request_timeout_s = 0.2;
  TestServer ts(o);
  auto r = ts.post("/v1/completions", completion({1, 2}, 200).dump());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 408);
  EXPECT_EQ(Json::parse(r->body)["error"]["type"], "timeout_error");
  Json body = completion({1, 2}, 200);
  body["stream"] = true;
  auto events = ts.stream(body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_TRUE(Json::parse(events[events.size() - 2]).contains("error"));
  EXPECT_TRUE(ts.wait_idle());
}

TEST(ServerHttp, GracefulShutdownFinishesInFlightStreams) {
  Options o;
  o.step_delay = 5ms;
  TestServer ts(o);
  Json body = completion({4, 4, 4}, 60);
  body["stream"] = true;
  auto fut = std::async(std::launch::async, [&] { return ts.stream(body); });
  // Wait until the request is running, then shut down while it streams.
  for (int i = 0; i < 400 && ts.stats().num_running == 0; ++i) std::this_thread::sleep_for(5ms);
  ASSERT_GT(ts.stats().num_running, 0);
  ts.server().shutdown();  // no drain timeout: let it finish
  auto events = fut.get();
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text, finish;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    Json c = Json::parse(events[i]);
    text += c["choices"][0]["text"].get<std::string>();
    if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(finish, "length");
  EXPECT_EQ(text, ts.tokenizer().decode(greedy({4, 4, 4}, 60), true));
  // Nothing listens any more.
  httplib::Client c("127.0.0.1", ts.port());
  c.set_connection_timeout(1, 0);
  EXPECT_FALSE(c.Get("/health"));
}

}  // namespace
}  // namespace ember::server
