// Pipelined greedy decode (EngineConfig::pipeline): the engine queues step n + 1, its tokens
// fed from step n's picks, before it collects step n. The fake either runs a queued step only
// when it is collected (as late as a GPU could: pipeline_argmax) or, forced on, when it is
// queued (ArgmaxPipeline's stand-in for executors that cannot queue); either way every output
// must equal the request run alone, the fake must read back every slot it expects, and the KV
// bookkeeping must hold after every step, through stop tokens (whose wasted row the next step
// still computes), length limits, arrivals, aborts of queued sequences and executor failures.
#include "engine_test_util.h"

#include <gtest/gtest.h>

#include <random>

namespace ember::testing {
namespace {

// A prompt whose greedy continuation (fake logits, EOS 0) stops on EOS within max_tokens.
std::vector<int32_t> prompt_stopping_on_eos(std::mt19937_64& rng, int max_tokens) {
  for (;;) {
    std::vector<int32_t> p(3 + rng() % 6);
    for (auto& t : p) t = 1 + static_cast<int32_t>(rng() % 63);
    const auto ref = reference_greedy(p, max_tokens, {0}, 64, 256);
    if (ref.size() >= 2 && static_cast<int>(ref.size()) < max_tokens && ref.back() == 0) return p;
  }
}

// kQueued: the fake queues steps; kSlowQueue: and says every third continuation is slow to
// queue (the engine holds it back until the tokens before it are out); kForced: the engine's
// stand-in runs each step as it is queued.
enum class Mode { kQueued, kSlowQueue, kForced };

EngineSetup pipelined_setup(Mode mode) {
  EngineSetup s = default_setup();
  s.fake.device_argmax = true;
  s.fake.pipeline_argmax = mode != Mode::kForced;
  s.fake.slow_queue_every = mode == Mode::kSlowQueue ? 3 : 0;
  s.config.pipeline = mode == Mode::kForced ? EngineConfig::Pipeline::kOn : EngineConfig::Pipeline::kAuto;
  return s;
}

class Pipelined : public ::testing::TestWithParam<Mode> {};

TEST_P(Pipelined, GreedyOutputsEqualTheReference) {
  std::mt19937_64 rng(7);
  TestEngine te = make_engine(pipelined_setup(GetParam()));
  std::map<std::string, EngineRequest> reqs;
  auto add = [&](EngineRequest r) {
    ASSERT_TRUE(te.engine->add_request(r).is_ok());
    reqs[r.request_id] = r;
  };
  add(greedy_request("long", {5, 9, 3, 7, 11, 2}, 40));
  add(greedy_request("eos", prompt_stopping_on_eos(rng, 30), 30));
  add(greedy_request("short", {4, 4, 8, 1}, 3));
  add(greedy_request("one", {2, 6}, 1));
  EngineRequest stop = greedy_request("stopid", {9, 9, 1, 3}, 30);
  stop.params.ignore_eos = true;
  const auto free_run = reference_greedy(stop.prompt_token_ids, 30, {}, 64, 256, true);
  stop.params.stop_token_ids = {free_run[5]};
  add(stop);
  Results res;
  for (int i = 0; i < 6; ++i) checked_step(te, res);
  add(greedy_request("late", {3, 1, 4, 1, 5}, 12));  // arrives while a step is queued
  EngineRequest lo = greedy_request("late-eos", prompt_stopping_on_eos(rng, 20), 20);
  lo.params.ignore_eos = true;
  add(lo);
  run_all(te, res);
  for (const auto& [id, r] : reqs) {
    const bool ignore = r.params.ignore_eos;
    const std::vector<int32_t> eos = ignore ? std::vector<int32_t>{} : std::vector<int32_t>{0};
    auto ref = reference_greedy(r.prompt_token_ids, *r.params.max_tokens, eos, 64, 256, ignore);
    if (!r.params.stop_token_ids.empty()) {
      const auto at = std::find(ref.begin(), ref.end(), r.params.stop_token_ids[0]);
      ref.erase(at + 1, ref.end());
    }
    ASSERT_TRUE(res[id][0].finished) << id;
    EXPECT_EQ(res[id][0].tokens, ref) << id;
  }
  EXPECT_EQ(res["eos"][0].reason, FinishReason::kStop);
  EXPECT_EQ(res["stopid"][0].reason, FinishReason::kStop);
  EXPECT_EQ(res["short"][0].reason, FinishReason::kLength);
  EXPECT_EQ(te.engine->stats().kv_blocks_used, 0);
  EXPECT_EQ(te.fake->n_argmax_steps(), te.fake->n_steps());
  if (GetParam() != Mode::kForced) {
    EXPECT_EQ(te.fake->max_queued(), 2) << "no step was ever queued behind another";
  }
}

TEST_P(Pipelined, AbortOfAQueuedSequence) {
  TestEngine te = make_engine(pipelined_setup(GetParam()));
  EngineRequest a = greedy_request("a", std::vector<int32_t>(9, 5), 60);
  a.params.ignore_eos = true;
  EngineRequest b = greedy_request("b", {1, 2, 3}, 25);
  b.params.ignore_eos = true;
  ASSERT_TRUE(te.engine->add_request(a).is_ok());
  ASSERT_TRUE(te.engine->add_request(b).is_ok());
  Results res;
  for (int i = 0; i < 8; ++i) checked_step(te, res);
  ASSERT_TRUE(te.engine->abort("a"));  // a sits in the queued step
  ASSERT_TRUE(te.engine->scheduler().check_invariants().is_ok());
  run_all(te, res);
  ASSERT_TRUE(res["a"][0].finished);
  EXPECT_EQ(res["a"][0].reason, FinishReason::kAbort);
  const auto ref_a = reference_greedy(a.prompt_token_ids, 60, {}, 64, 256, true);
  ASSERT_LE(res["a"][0].tokens.size(), ref_a.size());
  EXPECT_TRUE(std::equal(res["a"][0].tokens.begin(), res["a"][0].tokens.end(), ref_a.begin()));
  EXPECT_EQ(res["b"][0].tokens, reference_greedy(b.prompt_token_ids, 25, {}, 64, 256, true));
  EXPECT_EQ(te.engine->stats().kv_blocks_used, 0);
}

TEST_P(Pipelined, ExecutorFailureEndsTheQueuedStepsRequests) {
  EngineSetup s = pipelined_setup(GetParam());
  s.fake.fail_on_step = 4;  // a decode step with the step behind it queued
  EngineRequest a = greedy_request("a", {1, 2, 3}, 20);
  a.params.ignore_eos = true;
  expect_failure_ends_the_request(s, a);
}

// Requests queued for a sequence slot (max_num_seqs taken) do not stop the pipeline: the next
// schedule() could not admit them either. Each is admitted when a slot frees.
TEST_P(Pipelined, QueueWaitingForASlot) {
  EngineSetup s = pipelined_setup(GetParam());
  s.config.scheduler.max_num_seqs = 2;
  TestEngine te = make_engine(s);
  std::map<std::string, EngineRequest> reqs;
  for (int i = 0; i < 6; ++i) {
    EngineRequest r = greedy_request("q" + std::to_string(i), {3 + i, 7, 1 + 2 * i, 9}, 10 + 3 * i);
    r.params.ignore_eos = true;
    ASSERT_TRUE(te.engine->add_request(r).is_ok());
    reqs[r.request_id] = r;
  }
  int fed_while_waiting = 0;
  Results res;
  while (te.engine->has_work()) {
    const int fed = te.fake->n_fed_steps();
    const bool waiting = te.engine->stats().num_waiting > 0;
    checked_step(te, res);
    if (HasFatalFailure()) return;
    fed_while_waiting += waiting && te.fake->n_fed_steps() > fed;
  }
  for (const auto& [id, r] : reqs)
    EXPECT_EQ(res[id][0].tokens, reference_greedy(r.prompt_token_ids, *r.params.max_tokens, {}, 64, 256, true)) << id;
  if (GetParam() != Mode::kForced) {
    EXPECT_GT(fed_while_waiting, 10) << "no step was queued behind another while requests waited for a slot";
  }
}

// Off: no step is ever queued behind another, whatever the executor offers.
TEST(PipelinedOff, NeverQueuesTwoSteps) {
  EngineSetup s = pipelined_setup(Mode::kQueued);
  s.config.pipeline = EngineConfig::Pipeline::kOff;
  TestEngine te = make_engine(s);
  ASSERT_TRUE(te.engine->add_request(greedy_request("a", {5, 9, 3}, 10)).is_ok());
  Results res = run_all(te);
  EXPECT_EQ(res["a"][0].tokens, reference_greedy({5, 9, 3}, 10, {0}, 64, 256));
  EXPECT_EQ(te.fake->max_queued(), 0);
}

INSTANTIATE_TEST_SUITE_P(Engine, Pipelined, ::testing::Values(Mode::kQueued, Mode::kSlowQueue, Mode::kForced),
                         [](const ::testing::TestParamInfo<Mode>& p) {
                           return p.param == Mode::kQueued      ? std::string("Queued")
                                  : p.param == Mode::kSlowQueue ? std::string("SlowQueue")
                                                                : std::string("Forced");
                         });

}  // namespace
}  // namespace ember::testing
