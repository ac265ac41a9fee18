#include "engine/async_engine.h"
#include "engine_test_util.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace ember::testing {
namespace {

using namespace std::chrono_literals;

// A FakeExecutor whose execute() can be held at a gate, to freeze the engine thread mid-step.
class GatedExecutor : public FakeExecutor {
 public:
  struct Gate {
    std::mutex mu;
    std::condition_variable cv;
    bool open = true;
    int n_waiting = 0;  // execute() calls blocked right now
  };
  GatedExecutor(FakeExecutorOptions o, std::shared_ptr<Gate> gate)
      : FakeExecutor(o), gate_(std::move(gate)) {}
  Status execute(const ForwardBatch& b, std::vector<float>& logits) override {
    {
      std::unique_lock<std::mutex> lock(gate_->mu);
      ++gate_->n_waiting;
      gate_->cv.notify_all();
      gate_->cv.wait(lock, [&] { return gate_->open; });
      --gate_->n_waiting;
    }
    return FakeExecutor::execute(b, logits);
  }

 private:
  std::shared_ptr<Gate> gate_;
};

void set_gate(GatedExecutor::Gate& g, bool open) {
  std::lock_guard<std::mutex> lock(g.mu);
  g.open = open;
  g.cv.notify_all();
}

void wait_blocked(GatedExecutor::Gate& g) {
  std::unique_lock<std::mutex> lock(g.mu);
  g.cv.wait(lock, [&] { return g.n_waiting > 0; });
}

std::unique_ptr<AsyncEngine> make_async(AsyncEngineConfig ac = {},
                                        std::shared_ptr<GatedExecutor::Gate> gate = nullptr) {
  EngineSetup s = default_setup();
  std::unique_ptr<ModelExecutor> exec;
  if (gate) exec = std::make_unique<GatedExecutor>(s.fake, gate);
  else exec = std::make_unique<FakeExecutor>(s.fake);
  auto engine = LlmEngine::create(std::move(exec), s.config);
  EXPECT_TRUE(engine.is_ok()) << engine.message();
  return std::make_unique<AsyncEngine>(std::move(engine).value(), ac);
}

EngineRequest greedy(std::string id, std::vector<int32_t> prompt, int max_tokens, bool ignore_eos = false) {
  EngineRequest r;
  r.request_id = std::move(id);
  r.prompt_token_ids = std::move(prompt);
  r.params.temperature = 0.0f;
  r.params.max_tokens = max_tokens;
  r.params.ignore_eos = ignore_eos;
  return r;
}

// Drains a stream: tokens of sample 0 and the final output.
std::pair<std::vector<int32_t>, RequestOutput> drain(RequestStream& stream) {
  std::vector<int32_t> tokens;
  RequestOutput last;
  while (auto o = stream.pop()) {
    tokens.insert(tokens.end(), o->new_token_ids.begin(), o->new_token_ids.end());
    last = *o;
  }
  return {tokens, last};
}

TEST(AsyncEngine, ConcurrentClientsGetTheirOwnCorrectOutputs) {
  auto engine = make_async();
  std::atomic<int> n_ok{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      std::mt19937_64 rng(static_cast<uint64_t>(c));
      for (int i = 0; i < 10; ++i) {
        std::vector<int32_t> prompt(static_cast<size_t>(2 + rng() % 15));
        for (auto& t : prompt) t = 1 + static_cast<int32_t>(rng() % 63);
        const int max_tokens = 1 + static_cast<int>(rng() % 20);
        auto stream = engine->add_request(greedy(fmt::format("c{}-{}", c, i), prompt, max_tokens));
        ASSERT_TRUE(stream.is_ok()) << stream.message();
        auto [tokens, last] = drain(*stream);
        EXPECT_TRUE(last.finished);
        EXPECT_EQ(tokens, reference_greedy(prompt, max_tokens, {0}, 64, 256));
        if (tokens == reference_greedy(prompt, max_tokens, {0}, 64, 256)) ++n_ok;
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(n_ok.load(), 40);
  // Stats reflect the work once the engine is idle.
  for (int i = 0; i < 100 && engine->stats().num_running > 0; ++i) std::this_thread::sleep_for(5ms);
  const EngineStats st = engine->stats();
  EXPECT_EQ(st.kv_blocks_used, 0);
  EXPECT_GT(st.generation_tokens_total, 0);
  engine->shutdown();
}

TEST(AsyncEngine, CancelAbortsAndFreesBlocks) {
  // The engine is frozen inside its first step of the request while we cancel.
  auto gate = std::make_shared<GatedExecutor::Gate>();
  set_gate(*gate, false);
  auto engine = make_async({}, gate);
  auto stream = engine->add_request(greedy("long", std::vector<int32_t>(20, 3), 200, true));
  ASSERT_TRUE(stream.is_ok());
  wait_blocked(*gate);
  stream->cancel();
  set_gate(*gate, true);
  RequestOutput o;
  auto [tokens, last] = drain(*stream);
  EXPECT_TRUE(last.finished);
  EXPECT_EQ(last.finish_reason, FinishReason::kAbort);
  EXPECT_EQ(tokens.size(), 1u);  // the step that was running when we cancelled
  EXPECT_EQ(stream->pop_for(10ms, o), PopStatus::kClosed);
  for (int i = 0; i < 200 && engine->stats().kv_blocks_used > 0; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(engine->stats().kv_blocks_used, 0);
  // The id is free again once the stream closed.
  auto again = engine->add_request(greedy("long", {1, 2}, 2));
  EXPECT_TRUE(again.is_ok()) << again.message();
}

TEST(AsyncEngine, DroppingTheStreamAborts) {
  auto gate = std::make_shared<GatedExecutor::Gate>();
  set_gate(*gate, false);  // frozen, so the request cannot finish on its own
  auto engine = make_async({}, gate);
  {
    auto stream = engine->add_request(greedy("dropped", std::vector<int32_t>(10, 3), 240, true));
    ASSERT_TRUE(stream.is_ok());
    wait_blocked(*gate);
  }
  set_gate(*gate, true);
  for (int i = 0; i < 400 && engine->stats().requests_aborted == 0; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(engine->stats().requests_aborted, 1);
  EXPECT_EQ(engine->stats().kv_blocks_used, 0);
}

TEST(AsyncEngine, QueueFullAndValidationRejections) {
  auto gate = std::make_shared<GatedExecutor::Gate>();
  set_gate(*gate, false);
  AsyncEngineConfig ac;
  ac.max_waiting_requests = 2;
  auto engine = make_async(ac, gate);
  auto first = engine->add_request(greedy("first", {1, 2, 3}, 5));
  ASSERT_TRUE(first.is_ok());
  wait_blocked(*gate);  // the engine thread is inside execute(); nothing else moves
  auto a = engine->add_request(greedy("a", {1, 2}, 5));
  auto b = engine->add_request(greedy("b", {1, 2}, 5));
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  RejectReason why = RejectReason::kNone;
  auto c = engine->add_request(greedy("c", {1, 2}, 5), &why);
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(why, RejectReason::kQueueFull);
  EXPECT_NE(c.message().find("queue full"), std::string::npos);
  auto bad = engine->add_request(greedy("bad", std::vector<int32_t>(300, 1), 5), &why);
  EXPECT_FALSE(bad.is_ok());
  EXPECT_EQ(why, RejectReason::kInvalidRequest);
  auto dup = engine->add_request(greedy("a", {1}, 5), &why);
  EXPECT_FALSE(dup.is_ok());
  EXPECT_EQ(why, RejectReason::kInvalidRequest);
  set_gate(*gate, true);
  for (RequestStream* s : {&*first, &*a, &*b}) EXPECT_TRUE(drain(*s).second.finished);
  engine->shutdown();
}

TEST(AsyncEngine, GracefulShutdownFinishesInFlight) {
  auto engine = make_async();
  std::vector<RequestStream> streams;
  for (int i = 0; i < 5; ++i) {
    auto s = engine->add_request(greedy(fmt::format("r{}", i), {5, 6, 7, 8}, 20, true));
    ASSERT_TRUE(s.is_ok());
    streams.push_back(std::move(s).value());
  }
  engine->shutdown();  // drain without a deadline
  RejectReason why;
  EXPECT_FALSE(engine->add_request(greedy("late", {1}, 1), &why).is_ok());
  EXPECT_EQ(why, RejectReason::kShuttingDown);
  EXPECT_FALSE(engine->accepting());
  for (auto& s : streams) {
    auto [tokens, last] = drain(s);
    EXPECT_EQ(last.finish_reason, FinishReason::kLength);
    EXPECT_EQ(tokens.size(), 20u);
  }
}

TEST(AsyncEngine, ShutdownWithDeadlineAbortsTheRest) {
  auto gate = std::make_shared<GatedExecutor::Gate>();
  set_gate(*gate, false);
  auto engine = make_async({}, gate);
  std::vector<RequestStream> streams;
  for (int i = 0; i < 3; ++i) {
    auto s = engine->add_request(greedy(fmt::format("r{}", i), {5, 6, 7, 8}, 240, true));
    ASSERT_TRUE(s.is_ok());
    streams.push_back(std::move(s).value());
  }
  wait_blocked(*gate);
  // shutdown() joins the engine thread, so let the gate open only once it has begun.
  std::thread stopper([&] { engine->shutdown(0ms); });
  while (engine->accepting()) std::this_thread::sleep_for(1ms);
  set_gate(*gate, true);
  stopper.join();
  for (auto& s : streams) {
    auto [tokens, last] = drain(s);
    EXPECT_TRUE(last.finished);
    EXPECT_EQ(last.finish_reason, FinishReason::kAbort);
  }
  EXPECT_EQ(engine->stats().kv_blocks_used, 0);
}

TEST(AsyncEngine, ParallelSamplesCloseAfterAllFinish) {
  auto engine = make_async();
  EngineRequest r = greedy("n3", {9, 8, 7}, 6, true);
  r.params.n = 3;
  r.params.temperature = 1.0f;
  auto stream = engine->add_request(r);
  ASSERT_TRUE(stream.is_ok());
  std::map<int, int> n_tokens;
  int n_finished = 0;
  while (auto o = stream->pop()) {
    n_tokens[o->index] += static_cast<int>(o->new_token_ids.size());
    n_finished += o->finished;
  }
  EXPECT_EQ(n_finished, 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(n_tokens[i], 6);
  EXPECT_TRUE(stream->done());
}

TEST(AsyncEngine, StreamsOutliveTheEngine) {
  RequestStream stream;
  {
    auto engine = make_async();
    auto s = engine->add_request(greedy("x", {1, 2, 3}, 200, true));
    ASSERT_TRUE(s.is_ok());
    stream = std::move(s).value();
  }  // destructor: shutdown(0) aborts
  auto [tokens, last] = drain(stream);
  EXPECT_TRUE(last.finished);
  stream.cancel();  // engine gone: a no-op, not a crash
}

}  // namespace
}  // namespace ember::testing
