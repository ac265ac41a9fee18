// Randomized engine workloads: staggered arrivals, aborts, n > 1, shared prefixes and salts,
// chunked prefill with tiny budgets and KV caches small enough to force preemption. After
// every step the KV bookkeeping must be consistent (no leaked or wrongly shared block, free +
// used == total) and the fake executor must have read back every sequence correctly; at the
// end every greedy output equals its solo reference and every sampled token was drawn from
// logits over its sample's true history.
#include "engine_test_util.h"

#include <gtest/gtest.h>

#include <random>

namespace ember::testing {
namespace {

struct WorkloadConfig {
  uint64_t seed;
  int n_blocks;
  int budget;
  int threshold;
  int max_num_seqs;
  bool prefix_caching;
  SchedulerPolicy policy;
  // Pipelined greedy decode with a fake that runs queued steps when collected; most requests
  // greedy then, so that whole steps of greedy rows (the pipelined ones) are common.
  bool pipeline = false;
  // Speculative decoding: drafts a step, from the fake's greedy continuation with every third
  // token wrong (so steps keep some drafts and reject others).
  int spec = 0;
  // With spec: the drafts from a draft model instead (DraftModel over a fake of 48 tokens,
  // right where the target's pick is among them).
  bool draft_model = false;
};

class RandomWorkload : public ::testing::TestWithParam<WorkloadConfig> {};

TEST_P(RandomWorkload, InvariantsHoldAfterEveryStep) {
  const WorkloadConfig w = GetParam();
  std::mt19937_64 rng(w.seed);
  EngineSetup s = default_setup();
  s.fake.max_context = 96;
  s.config.n_blocks = w.n_blocks;
  s.config.scheduler.max_num_batched_tokens = w.budget;
  s.config.scheduler.long_prefill_token_threshold = w.threshold;
  s.config.scheduler.max_num_seqs = w.max_num_seqs;
  s.config.scheduler.enable_prefix_caching = w.prefix_caching;
  s.config.scheduler.policy = w.policy;
  s.fake.device_argmax = w.pipeline;
  s.fake.pipeline_argmax = w.pipeline;
  s.fake.slow_queue_every = w.pipeline && w.seed % 2 == 1 ? 4 : 0;  // some continuations held back
  s.config.spec.num_tokens = w.spec;
  std::shared_ptr<FakeExecutor> draft;
  if (w.spec > 0 && w.draft_model) {
    FakeExecutorOptions dopt;
    dopt.vocab_size = 48;
    dopt.max_context = 96;
    draft = std::make_shared<FakeExecutor>(dopt);
    s.config.spec_draft_model = draft;
  } else if (w.spec > 0) {
    s.config.propose_drafts = [k = w.spec](std::span<const int32_t> t) {
      std::vector<int32_t> d = reference_greedy({t.begin(), t.end()}, k, {}, 64, 1 << 20, /*ignore_eos=*/true);
      for (size_t i = 0; i < d.size(); ++i)
        if ((t.size() + i) % 3 == 0) d[i] = (d[i] + 1) % 64;
      return d;
    };
  }
  TestEngine te = make_engine(s);
  ASSERT_TRUE(te.engine);

  std::vector<std::vector<int32_t>> prefixes;
  for (int i = 0; i < 3; ++i) {
    std::vector<int32_t> p(static_cast<size_t>(3 + rng() % 14));
    for (auto& t : p) t = 1 + static_cast<int32_t>(rng() % 63);
    prefixes.push_back(p);
  }
  std::map<std::string, EngineRequest> added;
  std::set<std::string> aborted;
  Results res;
  int next_id = 0;
  int64_t n_copies_seen = 0;
  for (int step = 0; step < 3000; ++step) {
    // Arrivals: bursts early, a trickle later.
    // (Pipelined workloads: sparser arrivals, since a step is queued behind another only
    // while nothing waits for admission.)
    const int n_new = w.pipeline ? (step < 400 && rng() % 5 == 0 ? 1 : 0)
                                 : step < 200 ? static_cast<int>(rng() % 3) : 0;
    for (int k = 0; k < n_new; ++k) {
      EngineRequest r;
      r.request_id = fmt::format("q{}", next_id++);
      if (rng() % 3 != 0) r.prompt_token_ids = prefixes[rng() % prefixes.size()];
      const int tail = 1 + static_cast<int>(rng() % 12);
      for (int i = 0; i < tail; ++i) r.prompt_token_ids.push_back(1 + static_cast<int32_t>(rng() % 63));
      r.params.max_tokens = 1 + static_cast<int>(rng() % 24);
      r.params.n = rng() % 4 == 0 ? 2 + static_cast<int>(rng() % 2) : 1;
      if (w.pipeline ? rng() % 8 != 0 : rng() % 2 != 0) {
        r.params.temperature = 0.0f;
      } else {
        r.params.temperature = 0.7f + 0.1f * static_cast<float>(rng() % 5);
        r.params.top_k = static_cast<int>(rng() % 10);
        if (rng() % 2) r.params.seed = rng();
      }
      if (rng() % 8 == 0) r.cache_salt = fmt::format("s{}", rng() % 2);
      r.priority = static_cast<int>(rng() % 4);
      ASSERT_TRUE(te.engine->add_request(r).is_ok()) << r.request_id;
      added[r.request_id] = r;
    }
    // Aborts of random live requests.
    if (!added.empty() && rng() % 9 == 0) {
      auto it = std::next(added.begin(), static_cast<long>(rng() % added.size()));
      if (te.engine->abort(it->first)) aborted.insert(it->first);
      const Status st = te.engine->scheduler().check_invariants();
      ASSERT_TRUE(st.is_ok()) << st.message();
    }
    if (step >= (w.pipeline ? 400 : 200) && !te.engine->has_work()) break;
    checked_step(te, res);
    if (HasFatalFailure()) return;
    n_copies_seen = te.fake->n_block_copies();
  }
  ASSERT_FALSE(te.engine->has_work());
  const EngineStats st = te.engine->stats();
  EXPECT_EQ(st.kv_blocks_used, 0);
  EXPECT_EQ(st.num_running + st.num_waiting, 0);
  EXPECT_GT(st.num_preemptions, 0);
  EXPECT_GT(n_copies_seen, 0);
  if (w.spec > 0) {  // drafts kept and drafts rejected both happened
    EXPECT_GT(st.spec_accepted_tokens, 0);
    EXPECT_LT(st.spec_accepted_tokens, st.spec_draft_tokens);
  }
  if (draft) {
    EXPECT_TRUE(draft->errors().empty()) << draft->errors().front();
  }
  if (w.prefix_caching) {
    EXPECT_GT(st.prefix_cache_hits, 0);
  }
  if (w.pipeline) {
    EXPECT_EQ(te.fake->max_queued(), 2) << "no step was ever queued behind another";
    EXPECT_GT(te.fake->n_fed_steps(), te.fake->n_steps() / 10);
  }

  for (const auto& [id, r] : added) {
    ASSERT_EQ(res[id].size(), static_cast<size_t>(r.params.n)) << id;
    for (const auto& [index, sample] : res[id]) {
      ASSERT_TRUE(sample.finished) << id;
      const bool was_aborted = aborted.count(id) > 0;
      if (!was_aborted) {
        EXPECT_NE(sample.reason, FinishReason::kAbort);
      }
      if (r.params.temperature == 0.0f) {
        const auto ref = reference_greedy(r.prompt_token_ids, *r.params.max_tokens, {0}, 64, 96);
        if (was_aborted) {
          ASSERT_LE(sample.tokens.size(), ref.size());
          EXPECT_TRUE(std::equal(sample.tokens.begin(), sample.tokens.end(), ref.begin())) << id;
        } else {
          EXPECT_EQ(sample.tokens, ref) << id << "/" << index;
        }
      }
      std::vector<int32_t> hist = r.prompt_token_ids;
      for (int32_t t : sample.tokens) {
        ASSERT_TRUE(te.fake->saw_sequence(hist)) << id << "/" << index;
        hist.push_back(t);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Engine, RandomWorkload,
    ::testing::Values(WorkloadConfig{1, 24, 16, 0, 8, true, SchedulerPolicy::kFcfs},
                      WorkloadConfig{2, 30, 7, 0, 12, true, SchedulerPolicy::kFcfs},
                      WorkloadConfig{3, 26, 32, 5, 6, true, SchedulerPolicy::kPriority},
                      WorkloadConfig{4, 28, 12, 3, 16, false, SchedulerPolicy::kFcfs},
                      WorkloadConfig{5, 40, 64, 0, 16, true, SchedulerPolicy::kPriority},
                      WorkloadConfig{6, 25, 5, 2, 4, true, SchedulerPolicy::kFcfs},
                      WorkloadConfig{7, 24, 16, 0, 8, true, SchedulerPolicy::kFcfs, true},
                      WorkloadConfig{8, 18, 64, 0, 16, true, SchedulerPolicy::kPriority, true},
                      WorkloadConfig{9, 28, 12, 3, 16, false, SchedulerPolicy::kFcfs, true},
                      WorkloadConfig{10, 24, 16, 0, 8, true, SchedulerPolicy::kFcfs, false, 3},
                      WorkloadConfig{11, 16, 7, 2, 6, true, SchedulerPolicy::kPriority, false, 4},
                      WorkloadConfig{12, 20, 32, 0, 16, false, SchedulerPolicy::kFcfs, false, 2},
                      WorkloadConfig{13, 24, 16, 0, 8, true, SchedulerPolicy::kFcfs, false, 3, true},
                      WorkloadConfig{14, 16, 7, 2, 6, true, SchedulerPolicy::kPriority, false, 2, true}),
    [](const ::testing::TestParamInfo<WorkloadConfig>& p) { return fmt::format("seed{}", p.param.seed); });

}  // namespace
}  // namespace ember::testing
