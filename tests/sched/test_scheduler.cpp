#include "sched_test_util.h"

#include <gtest/gtest.h>

namespace ember::testing {
namespace {

int n_tokens_of(const SchedulerOutput& out, SeqId seq) {
  for (const auto& s : out.seqs)
    if (s.seq_id == seq) return s.n_new_tokens;
  return 0;
}

TEST(Scheduler, ChunkedPrefillThenDecodeFirst) {
  SchedulerConfig c = small_config();
  c.max_num_batched_tokens = 10;
  Scheduler s(c, {});
  ASSERT_TRUE(s.add_request(make_samples("a", std::vector<int32_t>(25, 1), max_tokens(5))).is_ok());
  ASSERT_TRUE(s.add_request(make_samples("b", {2, 3, 4}, max_tokens(5))).is_ok());
  SchedulerOutput out;
  step(s, 7, &out);
  EXPECT_EQ(n_tokens_of(out, 0), 10);
  EXPECT_EQ(n_tokens_of(out, 1), 0);
  EXPECT_TRUE(out.samples.empty());  // a mid-prompt chunk has nothing to sample
  step(s, 7, &out);
  EXPECT_EQ(n_tokens_of(out, 0), 10);
  step(s, 7, &out);
  EXPECT_EQ(n_tokens_of(out, 0), 5);
  EXPECT_EQ(n_tokens_of(out, 1), 3);
  EXPECT_EQ(out.samples.size(), 2u);
  step(s, 7, &out);  // both decode
  EXPECT_EQ(n_tokens_of(out, 0), 1);
  EXPECT_EQ(n_tokens_of(out, 1), 1);
}

TEST(Scheduler, DecodesAreNotStarvedByALongPrompt) {
  SchedulerConfig c = small_config();
  c.max_num_batched_tokens = 8;
  Scheduler s(c, {});
  ASSERT_TRUE(s.add_request(make_samples("short", {1, 2}, max_tokens(10))).is_ok());
  step(s);
  ASSERT_TRUE(s.add_request(make_samples("long", std::vector<int32_t>(60, 3), max_tokens(2))).is_ok());
  for (int i = 0; i < 6; ++i) {
    SchedulerOutput out;
    step(s, 7, &out);
    EXPECT_EQ(n_tokens_of(out, 0), 1) << "decode of 'short' in step " << i;
    EXPECT_EQ(n_tokens_of(out, 1), 7) << "prefill chunk of 'long' in step " << i;
  }
}

TEST(Scheduler, LongPrefillThresholdCapsChunks) {
  SchedulerConfig c = small_config();
  c.max_num_batched_tokens = 32;
  c.long_prefill_token_threshold = 5;
  Scheduler s(c, {});
  ASSERT_TRUE(s.add_request(make_samples("a", std::vector<int32_t>(12, 1), max_tokens(3))).is_ok());
  ASSERT_TRUE(s.add_request(make_samples("b", std::vector<int32_t>(12, 2), max_tokens(3))).is_ok());
  SchedulerOutput out;
  step(s, 7, &out);
  EXPECT_EQ(n_tokens_of(out, 0), 5);
  EXPECT_EQ(n_tokens_of(out, 1), 5);
}

TEST(Scheduler, WithoutChunkingAPromptWaitsForRoom) {
  SchedulerConfig c = small_config();
  c.max_num_batched_tokens = 10;
  c.enable_chunked_prefill = false;
  Scheduler s(c, {});
  ASSERT_TRUE(s.add_request(make_samples("a", std::vector<int32_t>(6, 1), max_tokens(3))).is_ok());
  ASSERT_TRUE(s.add_request(make_samples("b", std::vector<int32_t>(6, 2), max_tokens(3))).is_ok());
  SchedulerOutput out;
  step(s, 7, &out);
  EXPECT_EQ(n_tokens_of(out, 0), 6);
  EXPECT_EQ(n_tokens_of(out, 1), 0);  // 6 > 4 left: not split
  step(s, 7, &out);
  EXPECT_EQ(n_tokens_of(out, 1), 6);
  const Status st = s.check_request(11, max_tokens(1));
  EXPECT_NE(st.message().find("max_num_batched_tokens"), std::string::npos) << st.message();
}

TEST(Scheduler, MaxNumSeqsLimitsAdmission) {
  SchedulerConfig c = small_config();
  c.max_num_seqs = 2;
  c.max_num_batched_tokens = 100;
  Scheduler s(c, {});
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(s.add_request(make_samples(fmt::format("r{}", i), {1, 2}, max_tokens(3))).is_ok());
  SchedulerOutput out;
  step(s, 7, &out);
  EXPECT_EQ(out.seqs.size(), 2u);
  EXPECT_EQ(s.stats().num_running, 2);
  EXPECT_EQ(s.stats().num_waiting, 2);
}

TEST(Scheduler, PreemptsTheNewestWhenBlocksRunOut) {
  SchedulerConfig c = small_config();
  c.n_blocks = 6;
  c.max_num_batched_tokens = 64;
  Scheduler s(c, {});
  // Each needs 3 blocks for its prompt; growing past 12 tokens needs a 4th.
  ASSERT_TRUE(s.add_request(make_samples("old", std::vector<int32_t>(12, 1), max_tokens(8))).is_ok());
  ASSERT_TRUE(s.add_request(make_samples("new", std::vector<int32_t>(12, 2), max_tokens(8))).is_ok());
  step(s);  // both prefill: 6 blocks used, each has 1 output token
  EXPECT_EQ(s.kv().n_free_blocks(), 0);
  SchedulerOutput out;
  step(s, 7, &out);  // old needs a block: new is preempted
  ASSERT_EQ(out.preempted, std::vector<SeqId>{1});
  EXPECT_EQ(n_tokens_of(out, 0), 1);
  EXPECT_EQ(s.stats().num_preemptions, 1);
  const Request* preempted = s.find(1);
  EXPECT_EQ(preempted->status, RequestStatus::kWaiting);
  EXPECT_EQ(preempted->num_computed_tokens, 0);
  EXPECT_EQ(preempted->num_output_tokens(), 1);  // its output is kept, its K/V recomputed
  // Once old finishes, new is recomputed over prompt + its output and continues.
  int guard = 0;
  while (s.has_work() && guard++ < 50) step(s);
  EXPECT_FALSE(s.has_work());
  EXPECT_EQ(s.kv().n_free_blocks(), 6);
}

TEST(Scheduler, PreemptsItselfWhenItIsTheNewest) {
  SchedulerConfig c = small_config();
  c.n_blocks = 4;
  Scheduler s(c, {});
  ASSERT_TRUE(s.add_request(make_samples("a", std::vector<int32_t>(8, 1), max_tokens(8))).is_ok());
  ASSERT_TRUE(s.add_request(make_samples("b", std::vector<int32_t>(7, 2), max_tokens(8))).is_ok());
  step(s);  // a: 8 tokens (2 blocks); b: 7 tokens (2 blocks)
  SchedulerOutput out;
  step(s, 7, &out);  // a needs a 3rd block: b (newest) goes
  EXPECT_EQ(out.preempted, std::vector<SeqId>{1});
  int guard = 0;
  while (s.has_work() && guard++ < 100) step(s);
  EXPECT_FALSE(s.has_work());
}

TEST(Scheduler, PriorityPolicyOrdersAdmissionAndPreemption) {
  SchedulerConfig c = small_config();
  c.policy = SchedulerPolicy::kPriority;
  c.max_num_seqs = 1;
  Scheduler s(c, {});
  const auto t0 = Clock::now();
  ASSERT_TRUE(s.add_request(make_samples("low", {1}, max_tokens(1), 5, t0)).is_ok());
  ASSERT_TRUE(s.add_request(make_samples("high", {2}, max_tokens(1), 0, t0 + std::chrono::seconds(1))).is_ok());
  auto updates = step(s);
  ASSERT_EQ(updates.size(), 1u);
  EXPECT_EQ(updates[0].request_id, "high");

  // Preemption picks the least important running sequence, even if it is older.
  SchedulerConfig c2 = small_config();
  c2.policy = SchedulerPolicy::kPriority;
  c2.n_blocks = 6;
  c2.max_num_batched_tokens = 64;
  Scheduler p(c2, {});
  ASSERT_TRUE(p.add_request(make_samples("unimportant", std::vector<int32_t>(12, 1), max_tokens(8), 9, t0)).is_ok());
  ASSERT_TRUE(p.add_request(make_samples("important", std::vector<int32_t>(12, 2), max_tokens(8), 0, t0 + std::chrono::seconds(1))).is_ok());
  step(p);
  SchedulerOutput out;
  step(p, 7, &out);
  ASSERT_EQ(out.preempted.size(), 1u);
  EXPECT_EQ(p.find(out.preempted[0])->request_id, "unimportant");
}

TEST(Scheduler, AbortFreesBlocksInEveryState) {
  SchedulerConfig c = small_config();
  c.max_num_batched_tokens = 6;
  Scheduler s(c, {});
  SamplingParams n3 = max_tokens(5);
  n3.n = 3;
  ASSERT_TRUE(s.add_request(make_samples("multi", std::vector<int32_t>(10, 1), n3)).is_ok());
  ASSERT_TRUE(s.add_request(make_samples("waiting", {1, 2}, max_tokens(5))).is_ok());
  step(s);  // multi: 6 of 10 prompt tokens; its other samples await the fork
  EXPECT_GT(s.kv().pool().n_used(), 0);
  auto updates = s.abort("multi");
  ASSERT_EQ(updates.size(), 3u);
  for (const auto& u : updates) {
    EXPECT_TRUE(u.finished);
    EXPECT_EQ(u.finish_reason, FinishReason::kAbort);
  }
  EXPECT_EQ(s.kv().pool().n_used(), 0);
  EXPECT_TRUE(s.check_invariants().is_ok());
  EXPECT_EQ(s.abort("waiting").size(), 1u);
  EXPECT_TRUE(s.abort("unknown").empty());
  EXPECT_FALSE(s.has_work());
}

TEST(Scheduler, ForkSharesPromptBlocksAndCopiesOnWrite) {
  Scheduler s(small_config(), {});
  SamplingParams n3 = max_tokens(4);
  n3.n = 3;
  ASSERT_TRUE(s.add_request(make_samples("m", {1, 2, 3, 4, 5, 6}, n3)).is_ok());
  SchedulerOutput out;
  auto updates = step(s, 7, &out);
  ASSERT_EQ(out.samples.size(), 3u);  // one logits row, three samples
  EXPECT_EQ(out.samples[0].logits_row, out.samples[1].logits_row);
  EXPECT_EQ(out.batch.logit_rows.size(), 1u);
  ASSERT_EQ(updates.size(), 3u);
  const auto t0 = s.kv().block_table(0);
  const auto t1 = s.kv().block_table(1);
  ASSERT_EQ(t0.size(), 2u);
  EXPECT_TRUE(std::equal(t0.begin(), t0.end(), t1.begin()));
  EXPECT_EQ(s.kv().pool().ref_count(t0[1]), 3);
  step(s, 7, &out);  // each writes position 6 in the shared half block: two copies
  EXPECT_EQ(out.block_copies.size(), 2u);
  EXPECT_EQ(s.kv().pool().ref_count(t0[0]), 3);  // the full block stays shared
}

TEST(Scheduler, StopConditions) {
  Scheduler s(small_config(), {0});
  SamplingParams eos = max_tokens(10);
  eos.ignore_eos = false;
  SamplingParams stop = max_tokens(10);
  stop.stop_token_ids = {9};
  SamplingParams min = eos;
  min.min_tokens = 2;
  ASSERT_TRUE(s.add_request(make_samples("eos", {1}, eos)).is_ok());
  ASSERT_TRUE(s.add_request(make_samples("ignored", {1}, max_tokens(2))).is_ok());
  ASSERT_TRUE(s.add_request(make_samples("stop", {1}, stop)).is_ok());
  ASSERT_TRUE(s.add_request(make_samples("min", {1}, min)).is_ok());
  auto u = step(s, 0);  // everybody samples EOS
  std::map<std::string, SeqUpdate> by_id;
  for (auto& x : u) by_id[x.request_id] = x;
  EXPECT_TRUE(by_id["eos"].finished);
  EXPECT_EQ(by_id["eos"].finish_reason, FinishReason::kStop);
  EXPECT_EQ(by_id["eos"].stop_token_id, std::optional<int32_t>(0));
  EXPECT_FALSE(by_id["ignored"].finished);
  EXPECT_FALSE(by_id["stop"].finished);
  EXPECT_FALSE(by_id["min"].finished);  // within min_tokens
  u = step(s, 9);
  for (auto& x : u) by_id[x.request_id] = x;
  EXPECT_EQ(by_id["ignored"].finish_reason, FinishReason::kLength);
  EXPECT_EQ(by_id["stop"].finish_reason, FinishReason::kStop);
  EXPECT_FALSE(by_id["min"].finished);
  u = step(s, 0);
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].finish_reason, FinishReason::kStop);  // 3rd token may stop
}

TEST(Scheduler, ContextWindowEndsGenerationWithoutMaxTokens) {
  SchedulerConfig c = small_config();
  c.max_model_len = 10;
  Scheduler s(c, {});
  SamplingParams p = max_tokens(1);
  p.max_tokens.reset();
  ASSERT_TRUE(s.add_request(make_samples("a", {1, 2, 3}, p)).is_ok());
  std::vector<SeqUpdate> last;
  for (int i = 0; i < 20 && s.has_work(); ++i) last = step(s);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].finish_reason, FinishReason::kLength);
  EXPECT_EQ(last[0].num_output_tokens, 7);
}

TEST(Scheduler, RejectsRequestsThatCannotFit) {
  SchedulerConfig c = small_config();
  c.max_model_len = 50;
  c.n_blocks = 8;  // 32 tokens
  Scheduler s(c, {});
  EXPECT_NE(s.check_request(50, max_tokens(1)).message().find("context window"), std::string::npos);
  EXPECT_NE(s.check_request(40, max_tokens(11)).message().find("plus max_tokens (11)"), std::string::npos);
  EXPECT_NE(s.check_request(20, max_tokens(20)).message().find("KV blocks"), std::string::npos);
  SamplingParams many = max_tokens(1);
  many.n = 9;
  EXPECT_NE(s.check_request(2, many).message().find("max_num_seqs"), std::string::npos);
  EXPECT_FALSE(s.check_request(0, max_tokens(1)).is_ok());
  ASSERT_TRUE(s.add_request(make_samples("x", {1}, max_tokens(1))).is_ok());
  EXPECT_NE(s.add_request(make_samples("x", {1}, max_tokens(1))).message().find("already in use"), std::string::npos);
}

TEST(Scheduler, PrefixCacheHitSkipsCachedBlocks) {
  Scheduler s(small_config(), {});
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  ASSERT_TRUE(s.add_request(make_samples("a", prompt, max_tokens(1))).is_ok());
  step(s);
  ASSERT_TRUE(s.add_request(make_samples("b", prompt, max_tokens(1))).is_ok());
  SchedulerOutput out;
  step(s, 7, &out);
  ASSERT_EQ(out.seqs.size(), 1u);
  EXPECT_EQ(out.seqs[0].n_computed_before, 8);
  EXPECT_EQ(out.seqs[0].n_new_tokens, 1);
}

}  // namespace
}  // namespace ember::testing
