#pragma once
// FakeExecutor: a ModelExecutor whose "K/V" per cache slot is the (token id, position) that was
// written there, and whose logits are a deterministic function of the token sequence it reads
// back through the block table. Any wrong slot mapping, block table, copy-on-write or prefix
// reuse therefore shows up as different logits (and so different greedy outputs) than the
// same request run alone, and reads of unwritten or misplaced slots are counted as errors.
#include "runner/model_executor.h"

#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

namespace ember::testing {

struct FakeExecutorOptions {
  int vocab_size = 64;
  int max_context = 256;
  size_t bytes_per_token = 64;  // for kv_bytes_per_block
  // Make execute() fail on this call number (0-based); -1 never.
  int fail_on_step = -1;
  // Offer execute_argmax (what a GPU runner does for greedy steps).
  bool device_argmax = false;
  // Offer execute_sample (what a GPU runner does for sampled steps).
  bool device_sample = false;
  // Offer enqueue_argmax / collect_argmax (with device_argmax). A queued step runs only when
  // it is collected, as late as a GPU could run it, so an engine that needed its results (or
  // its K/V writes) earlier would see wrong logits.
  bool pipeline_argmax = false;
  // queues_quickly() answers false on every k-th call (0: never), as a GPU runner does for a
  // batch shape it has no graph of yet.
  int slow_queue_every = 0;
  // warm_up() fails (a device that cannot reserve its buffers).
  bool fail_warm_up = false;
};

// One row of an execute_sample call as the fake received it (the adjustment list copied).
struct RecordedSampleRow {
  DeviceSampleSpec spec;  // spec.adjust is cleared (the view dies with the call)
  std::vector<TokenAdjust> adjust;
};

class FakeExecutor : public ModelExecutor {
 public:
  explicit FakeExecutor(FakeExecutorOptions options = {}) : opt_(options) {}

  int vocab_size() const override { return opt_.vocab_size; }
  int max_context() const override { return opt_.max_context; }
  size_t kv_bytes_per_block(int block_size) const override {
    return opt_.bytes_per_token * static_cast<size_t>(block_size);
  }
  Status allocate_kv_cache(const KvCacheConfig& cfg) override;
  // Records the call (after allocate_kv_cache, before any step, or it fails).
  Status warm_up(const WarmUpOptions& options) override;
  const std::vector<WarmUpOptions>& warm_ups() const { return warm_ups_; }
  Status execute(const ForwardBatch& batch, std::vector<float>& logits) override;
  Status copy_blocks(const std::vector<std::pair<int32_t, int32_t>>& src_dst) override;
  bool can_execute_argmax() const override { return opt_.device_argmax; }
  // execute(), then the first maximum of each logit row (0 when none is above -inf).
  Status execute_argmax(const ForwardBatch& batch, std::vector<int32_t>& token_ids) override;
  bool can_pipeline_argmax() const override { return opt_.device_argmax && opt_.pipeline_argmax; }
  Status enqueue_argmax(const ForwardBatch& batch, std::span<const int32_t> feed) override;
  // Runs the oldest queued step now (its fed tokens from the step run before it).
  Status collect_argmax(std::vector<int32_t>& token_ids) override;
  bool queues_quickly(const ForwardBatch&) const override {
    return opt_.slow_queue_every <= 0 || ++n_queue_questions_ % opt_.slow_queue_every != 0;
  }
  int max_queued() const { return max_queued_; }
  // Queued steps whose tokens were fed from the step before them.
  int n_fed_steps() const { return n_fed_steps_; }
  bool can_execute_sample() const override { return opt_.device_sample; }
  // execute(), then each spec's pick as a device sampler defines it: the row's adjustment
  // list applied to the NaN-scrubbed logits, then pick_adjusted with the spec's u (raw
  // logprob, rank and spec.n_top alternatives from compute_logprobs). Records every call's rows.
  Status execute_sample(const ForwardBatch& batch, const std::vector<DeviceSampleSpec>& rows,
                        std::vector<DeviceSampled>& out) override;

  // The logits the fake returns after reading back exactly `tokens` (what a correct engine
  // makes it see): [vocab_size].
  static void logits_for(const std::vector<int32_t>& tokens, int vocab_size, float* out);

  // Whether some logits row was computed from exactly this token sequence read back.
  bool saw_sequence(const std::vector<int32_t>& tokens) const;
  static uint64_t sequence_hash(const std::vector<int32_t>& tokens);

  // Problems seen so far (unwritten slots read, position mismatches, bad batch shapes).
  const std::vector<std::string>& errors() const { return errors_; }
  int n_steps() const { return n_steps_; }
  int n_argmax_steps() const { return n_argmax_steps_; }
  int n_sample_steps() const { return static_cast<int>(sample_calls_.size()); }
  // Rows of every execute_sample call, in call order.
  const std::vector<std::vector<RecordedSampleRow>>& sample_calls() const { return sample_calls_; }
  int64_t n_tokens_computed() const { return n_tokens_computed_; }
  int64_t n_block_copies() const { return n_block_copies_; }

 private:
  struct Slot {
    int32_t token = -1;
    int32_t position = -1;
  };
  void error(std::string message);

  FakeExecutorOptions opt_;
  int block_size_ = 0;
  std::vector<Slot> slots_;
  std::vector<std::string> errors_;
  std::unordered_set<uint64_t> seen_;
  int n_steps_ = 0;
  int n_argmax_steps_ = 0;
  std::vector<std::vector<RecordedSampleRow>> sample_calls_;
  int64_t n_tokens_computed_ = 0;
  int64_t n_block_copies_ = 0;
  struct Queued {
    ForwardBatch batch;
    std::vector<int32_t> feed;
  };
  std::deque<Queued> queue_;
  std::vector<int32_t> last_ids_;  // the last collected step's picks
  bool last_failed_ = false;       // the last collected step failed
  int max_queued_ = 0;
  int n_fed_steps_ = 0;
  mutable int n_queue_questions_ = 0;
  std::vector<WarmUpOptions> warm_ups_;
};

}  // namespace ember::testing
