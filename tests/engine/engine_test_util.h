#pragma once
// Helpers for engine tests: building an LlmEngine over a FakeExecutor, an independent greedy
// reference, and a step loop that checks the invariants after every step.
#include "engine/engine.h"
#include "fake_executor.h"
#include "sched/scheduler.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ember::testing {

struct EngineSetup {
  FakeExecutorOptions fake;
  EngineConfig config;
};

inline EngineSetup default_setup() {
  EngineSetup s;
  s.config.n_blocks = 256;
  s.config.scheduler.block_size = 4;
  s.config.scheduler.max_num_batched_tokens = 64;
  s.config.scheduler.max_num_seqs = 16;
  s.config.eos_token_ids = {0};
  s.config.deterministic = true;
  return s;
}

// The engine plus a pointer to its fake executor (owned by the engine).
struct TestEngine {
  std::unique_ptr<LlmEngine> engine;
  FakeExecutor* fake = nullptr;
};

inline TestEngine make_engine(const EngineSetup& s) {
  auto fake = std::make_unique<FakeExecutor>(s.fake);
  FakeExecutor* raw = fake.get();
  auto res = LlmEngine::create(std::move(fake), s.config);
  EXPECT_TRUE(res.is_ok()) << res.message();
  if (!res.is_ok()) return {};
  return {std::move(res).value(), raw};
}

// What a correct engine must produce for a greedy request without penalties: argmax of the
// fake's logits over the true history, until EOS or max_tokens or the context window.
inline std::vector<int32_t> reference_greedy(const std::vector<int32_t>& prompt, int max_tokens,
                                             const std::vector<int32_t>& eos, int vocab,
                                             int max_context, bool ignore_eos = false) {
  std::vector<int32_t> seq = prompt, out;
  std::vector<float> logits(static_cast<size_t>(vocab));
  while (static_cast<int>(out.size()) < max_tokens && static_cast<int>(seq.size()) < max_context) {
    FakeExecutor::logits_for(seq, vocab, logits.data());
    int32_t best = 0;
    for (int v = 1; v < vocab; ++v)
      if (logits[static_cast<size_t>(v)] > logits[static_cast<size_t>(best)]) best = v;
    seq.push_back(best);
    out.push_back(best);
    if (!ignore_eos && std::find(eos.begin(), eos.end(), best) != eos.end()) break;
  }
  return out;
}

struct SampleResult {
  std::vector<int32_t> tokens;
  bool finished = false;
  FinishReason reason = FinishReason::kNone;
  int num_prompt_tokens = 0;
  int num_cached_tokens = 0;
  std::vector<SampleLogprobs> logprobs;
};
using Results = std::map<std::string, std::map<int, SampleResult>>;

// Folds outputs into results, checking that nothing arrives after a sample finished.
inline void collect(const std::vector<RequestOutput>& outs, Results& results) {
  for (const RequestOutput& o : outs) {
    SampleResult& r = results[o.request_id][o.index];
    EXPECT_FALSE(r.finished) << o.request_id << "/" << o.index << " output after finish";
    r.tokens.insert(r.tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    r.logprobs.insert(r.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
    EXPECT_EQ(static_cast<int>(r.tokens.size()), o.num_output_tokens);
    r.finished = o.finished;
    r.reason = o.finish_reason;
    r.num_prompt_tokens = o.num_prompt_tokens;
    r.num_cached_tokens = o.num_cached_tokens;
  }
}

// One step plus the invariants: KV bookkeeping consistent, the fake saw no bad reads.
inline void checked_step(TestEngine& te, Results& results) {
  collect(te.engine->step(), results);
  const Status st = te.engine->scheduler().check_invariants();
  ASSERT_TRUE(st.is_ok()) << st.message();
  ASSERT_TRUE(te.fake->errors().empty()) << te.fake->errors().front();
  const EngineStats s = te.engine->stats();
  ASSERT_LE(s.kv_blocks_used, s.kv_blocks_total);
}

inline void run_all(TestEngine& te, Results& results, int max_steps = 100000) {
  for (int i = 0; i < max_steps && te.engine->has_work(); ++i) {
    checked_step(te, results);
    if (::testing::Test::HasFatalFailure()) break;
  }
  EXPECT_FALSE(te.engine->has_work());
}

inline Results run_all(TestEngine& te) {
  Results results;
  run_all(te, results);
  return results;
}

inline EngineRequest greedy_request(std::string id, std::vector<int32_t> prompt, int max_tokens) {
  EngineRequest r;
  r.request_id = std::move(id);
  r.prompt_token_ids = std::move(prompt);
  r.params.temperature = 0.0f;
  r.params.max_tokens = max_tokens;
  return r;
}

// An executor failure (s.fake.fail_on_step) ends the failed step's request `a` (prompt {1, 2,
// 3}) with kError and frees its blocks; the engine then serves a new request correctly.
inline void expect_failure_ends_the_request(const EngineSetup& s, EngineRequest a) {
  TestEngine te = make_engine(s);
  ASSERT_TRUE(te.engine->add_request(a).is_ok());
  Results res = run_all(te);
  EXPECT_EQ(res[a.request_id][0].reason, FinishReason::kError);
  EXPECT_FALSE(te.engine->last_error().is_ok());
  EXPECT_EQ(te.engine->stats().kv_blocks_used, 0);
  ASSERT_TRUE(te.engine->add_request(greedy_request("after-failure", {1, 2, 3}, 4)).is_ok());
  res = run_all(te);
  EXPECT_EQ(res["after-failure"][0].tokens, reference_greedy({1, 2, 3}, 4, {0}, s.fake.vocab_size, s.fake.max_context));
}

}  // namespace ember::testing
