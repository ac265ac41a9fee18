#pragma once
#include "sched/scheduler.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ember::testing {

inline SchedulerConfig small_config() {
  SchedulerConfig c;
  c.max_num_batched_tokens = 16;
  c.max_num_seqs = 8;
  c.block_size = 4;
  c.n_blocks = 64;
  c.max_model_len = 128;
  return c;
}

inline std::vector<Request> make_samples(const std::string& id, std::vector<int32_t> prompt,
                                         SamplingParams params, int priority = 0,
                                         Clock::time_point arrival = Clock::now()) {
  std::vector<Request> v(static_cast<size_t>(params.n));
  for (auto& r : v) {
    r.request_id = id;
    r.token_ids = prompt;
    r.num_prompt_tokens = static_cast<int>(prompt.size());
    r.params = params;
    r.priority = priority;
    r.arrival_time = arrival;
  }
  return v;
}

inline SamplingParams max_tokens(int n) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = n;
  p.ignore_eos = true;
  return p;
}

// The ForwardBatch must describe exactly the scheduled chunks through the block tables.
inline void validate_batch(const Scheduler& s, const SchedulerOutput& out) {
  const ForwardBatch& b = out.batch;
  const int bs = s.config().block_size;
  ASSERT_EQ(b.n_seqs(), static_cast<int>(out.seqs.size()));
  ASSERT_EQ(b.query_start.size(), out.seqs.size() + 1);
  ASSERT_LE(b.n_tokens(), s.config().max_num_batched_tokens);
  size_t row = 0;
  for (size_t i = 0; i < out.seqs.size(); ++i) {
    const ScheduledSeq& seq = out.seqs[i];
    const Request* r = s.find(seq.seq_id);
    ASSERT_NE(r, nullptr);
    ASSERT_EQ(b.query_start[i + 1] - b.query_start[i], seq.n_new_tokens);
    ASSERT_GT(seq.n_new_tokens, 0);
    ASSERT_EQ(seq.n_computed_before, r->num_computed_tokens);
    ASSERT_EQ(b.seq_lens[i], seq.n_computed_before + seq.n_new_tokens);
    std::span<const int32_t> table = s.kv().block_table(seq.seq_id);
    for (int k = 0; k < static_cast<int>(table.size()); ++k)
      ASSERT_EQ(b.block_tables[i * b.max_blocks_per_seq + k], table[static_cast<size_t>(k)]);
    for (int t = b.query_start[i]; t < b.query_start[i + 1]; ++t) {
      const int pos = seq.n_computed_before + (t - b.query_start[i]);
      ASSERT_EQ(b.positions[static_cast<size_t>(t)], pos);
      ASSERT_EQ(b.token_ids[static_cast<size_t>(t)], r->token_ids[static_cast<size_t>(pos)]);
      ASSERT_EQ(b.slot_mapping[static_cast<size_t>(t)], table[static_cast<size_t>(pos / bs)] * bs + pos % bs);
    }
    const bool wants_logits = b.seq_lens[i] == r->num_tokens();
    if (wants_logits) {
      ASSERT_LT(row, b.logit_rows.size());
      ASSERT_EQ(b.logit_rows[row], b.query_start[i + 1] - 1);
      ++row;
    }
  }
  ASSERT_EQ(row, b.logit_rows.size());
  for (const SampleSlot& slot : out.samples) ASSERT_LT(slot.logits_row, static_cast<int>(b.logit_rows.size()));
}

// Samples a fixed token for every slot (schedulers do not care what was sampled).
inline std::vector<SeqUpdate> step(Scheduler& s, int32_t token = 7, SchedulerOutput* out_copy = nullptr) {
  SchedulerOutput out = s.schedule();
  validate_batch(s, out);
  std::vector<int32_t> sampled(out.samples.size(), token);
  auto updates = s.update(out, sampled);
  const Status st = s.check_invariants();
  EXPECT_TRUE(st.is_ok()) << st.message();
  if (out_copy) *out_copy = std::move(out);
  return updates;
}

}  // namespace ember::testing
