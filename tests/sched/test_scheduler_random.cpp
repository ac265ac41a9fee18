// Randomized scheduler workloads without a model: arrivals, aborts, random tokens (EOS among
// them), n > 1, shared prefixes, tiny KV caches and budgets. After every step the batch must
// match the block tables, the KV bookkeeping must be consistent, running decodes must not be
// starved, and at the end every block is free.
#include "sched_test_util.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

namespace ember::testing {
namespace {

struct Case {
  uint64_t seed;
  int n_blocks;
  int budget;
  int threshold;
  bool chunked;
  bool prefix_caching;
  SchedulerPolicy policy;
};

class SchedulerRandom : public ::testing::TestWithParam<Case> {};

TEST_P(SchedulerRandom, InvariantsAfterEveryStep) {
  const Case k = GetParam();
  std::mt19937_64 rng(k.seed);
  SchedulerConfig c = small_config();
  c.n_blocks = k.n_blocks;
  c.max_num_batched_tokens = k.budget;
  c.long_prefill_token_threshold = k.threshold;
  c.enable_chunked_prefill = k.chunked;
  c.enable_prefix_caching = k.prefix_caching;
  c.policy = k.policy;
  c.max_num_seqs = 6;
  c.max_model_len = 64;
  Scheduler s(c, {0});
  std::vector<std::vector<int32_t>> prefixes = {{5, 6, 7, 8, 9, 10}, {11, 12, 13, 14, 15, 16, 17, 18, 19}};
  std::set<std::string> live;
  int next = 0, n_finished = 0, n_preempted = 0;
  for (int step_i = 0; step_i < 4000; ++step_i) {
    if (step_i < 400 && rng() % 3 == 0) {
      std::vector<int32_t> prompt;
      if (rng() % 2) prompt = prefixes[rng() % 2];
      const int tail = 1 + static_cast<int>(rng() % (k.chunked ? 20 : 8));
      for (int i = 0; i < tail; ++i) prompt.push_back(1 + static_cast<int32_t>(rng() % 30));
      SamplingParams p = max_tokens(1 + static_cast<int>(rng() % 16));
      p.ignore_eos = rng() % 2;
      p.n = rng() % 5 == 0 ? 2 + static_cast<int>(rng() % 2) : 1;
      const std::string id = fmt::format("r{}", next++);
      const Status st = s.add_request(make_samples(id, prompt, p, static_cast<int>(rng() % 3)));
      if (st.is_ok()) live.insert(id);
    }
    if (!live.empty() && rng() % 11 == 0) {
      auto it = std::next(live.begin(), static_cast<long>(rng() % live.size()));
      for (const auto& u : s.abort(*it)) EXPECT_EQ(u.finish_reason, FinishReason::kAbort);
      live.erase(it);
      ASSERT_TRUE(s.check_invariants().is_ok());
    }
    if (!s.has_work()) {
      if (step_i >= 400) break;
      continue;
    }
    // Decodes running before the step: each must be scheduled or preempted (budget >= seqs).
    std::vector<SeqId> decodes;
    for (SeqId id = 0; id < 10000; ++id) {
      const Request* r = s.find(id);
      if (r && r->status == RequestStatus::kRunning && r->num_tokens() - r->num_computed_tokens == 1)
        decodes.push_back(id);
    }
    SchedulerOutput out = s.schedule();
    validate_batch(s, out);
    if (HasFatalFailure()) return;
    if (k.budget >= c.max_num_seqs) {
      for (SeqId d : decodes) {
        const bool scheduled = std::any_of(out.seqs.begin(), out.seqs.end(), [&](const ScheduledSeq& x) { return x.seq_id == d; });
        const bool preempted = std::count(out.preempted.begin(), out.preempted.end(), d) > 0;
        ASSERT_TRUE(scheduled || preempted) << "decode of sequence " << d << " starved";
      }
    }
    n_preempted += static_cast<int>(out.preempted.size());
    std::vector<int32_t> sampled(out.samples.size());
    for (auto& t : sampled) t = static_cast<int32_t>(rng() % 24);  // token 0 (EOS) now and then
    for (const SeqUpdate& u : s.update(out, sampled)) {
      if (u.finished) {
        ++n_finished;
        EXPECT_LE(u.num_output_tokens, 16);
      }
    }
    const Status st = s.check_invariants();
    ASSERT_TRUE(st.is_ok()) << "step " << step_i << ": " << st.message();
    const SchedulerStats stats = s.stats();
    ASSERT_EQ(stats.kv.n_free + stats.kv.n_used, stats.kv.n_blocks);
    ASSERT_LE(stats.num_running, c.max_num_seqs);
  }
  EXPECT_FALSE(s.has_work());
  EXPECT_EQ(s.kv().pool().n_used(), 0);
  EXPECT_GT(n_finished, 50);
  if (k.n_blocks < 20) {
    EXPECT_GT(n_preempted, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Sched, SchedulerRandom,
                         ::testing::Values(Case{1, 12, 16, 0, true, true, SchedulerPolicy::kFcfs},
                                           Case{2, 16, 6, 0, true, true, SchedulerPolicy::kFcfs},
                                           Case{3, 14, 24, 4, true, false, SchedulerPolicy::kPriority},
                                           Case{4, 18, 32, 0, false, true, SchedulerPolicy::kFcfs},
                                           Case{5, 40, 64, 0, true, true, SchedulerPolicy::kPriority},
                                           Case{6, 11, 3, 1, true, true, SchedulerPolicy::kFcfs}),
                         [](const ::testing::TestParamInfo<Case>& p) { return fmt::format("seed{}", p.param.seed); });

}  // namespace
}  // namespace ember::testing
