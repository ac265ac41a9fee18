#pragma once
// Scheduler: continuous batching over a paged KV cache. Each step spends one token budget on
// running sequences first (decodes, then the next chunks of partly prefilled prompts), then admits
// waiting ones through the prefix cache, chunking prompts to fit. When blocks run out it
// preempts the newest (FCFS) or least important (priority) running sequence: its blocks are
// freed and it is recomputed later. Single-threaded; the engine drives it:
//   out = schedule(); <copy blocks, run the model, sample out.samples>; update(out, tokens).
#include "core/status.h"
#include "kv/kv_cache_manager.h"
#include "model/forward_batch.h"
#include "sched/request.h"
#include "sched/scheduler_config.h"

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace ember {

struct ScheduledSeq {
  SeqId seq_id = -1;
  int n_new_tokens = 0;          // tokens run this step
  int n_computed_before = 0;     // tokens whose K/V were already cached
  bool fans_out = false;         // prefill of an n > 1 request ends: its samples fork now
  int n_drafts = 0;              // of n_new_tokens, draft tokens to verify (the last ones)
};

// One token to sample: from row `logits_row` of the step's logits (an index into
// batch.logit_rows) for sequence seq_id. The samples of a fanning-out request share a row.
// With n_drafts > 0 (speculative decoding) the sample verifies drafts: rows logits_row ..
// logits_row + n_drafts pick the token after the last known one and after each draft.
struct SampleSlot {
  int logits_row = 0;
  SeqId seq_id = -1;
  int n_drafts = 0;
};

struct SchedulerOutput {
  std::vector<ScheduledSeq> seqs;
  ForwardBatch batch;
  // Copy-on-write: K/V block copies the executor must do before running the batch, in order.
  std::vector<BlockCopy> block_copies;
  std::vector<SampleSlot> samples;
  std::vector<SeqId> preempted;  // sequences preempted while scheduling this step
  bool empty() const { return seqs.empty(); }
};

// What update() / abort() did to one sequence.
struct SeqUpdate {
  SeqId seq_id = -1;
  std::string request_id;
  int sample_index = 0;
  std::vector<int32_t> new_tokens;  // this step's tokens (more than one with accepted drafts)
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  std::optional<int32_t> stop_token_id;
  int num_prompt_tokens = 0;
  int num_cached_tokens = 0;
  int num_output_tokens = 0;
};

struct SchedulerStats {
  int num_running = 0;
  int num_waiting = 0;  // includes samples awaiting their fork
  int num_waiting_requests = 0;  // new or preempted sequences only (the admission queue)
  int64_t num_preemptions = 0;
  KvStats kv;
};

class Scheduler {
 public:
  // eos_token_ids end a sequence unless its params say ignore_eos.
  Scheduler(SchedulerConfig config, std::vector<int32_t> eos_token_ids);

  // Would add_request accept a request with this prompt and params? (context window, chunking
  // limits, n vs max_num_seqs). Does not look at request ids.
  Status check_request(int n_prompt_tokens, const SamplingParams& params) const;
  // Adds the samples of one request (index 0..n-1, same request_id, prompt and params).
  // Sample 0 waits for scheduling; the others wait for its prefill and then fork from it.
  // Assigns seq ids and max_output_tokens. Fails on a duplicate request id or check_request.
  Status add_request(std::vector<Request> samples);
  bool contains(const std::string& request_id) const;

  SchedulerOutput schedule();
  // The decode step that follows `prev` (a step whose tokens are not sampled yet), for an
  // engine that queues it before prev's tokens come back. Possible when no waiting sequence
  // could be admitted (can_admit_waiting), every running sequence ran in prev and reaches the
  // end of its known tokens there (one sample each, no fan-out), and free blocks cover every
  // next slot without a preemption; otherwise nullopt, changing nothing. Each continuing sequence gets the slot of
  // the position prev samples; its token in the batch is a placeholder: feed[i] is the logits
  // row of prev whose pick row i takes. Sequences prev's token ends by length are left out;
  // ones it ends on a stop token cannot be known and run one wasted row (update() of the
  // continuation must skip sequences that are gone: see without_finished).
  std::optional<SchedulerOutput> schedule_continuation(const SchedulerOutput& prev, std::vector<int32_t>& feed);
  // `out` and `sampled` restricted to the sequences still running with the state `out` was
  // scheduled against (an abort or an earlier update may have finished some since).
  void without_finished(SchedulerOutput& out, std::vector<int32_t>& sampled) const;
  // Whether s's sequence still runs with the state s was scheduled against.
  bool still_scheduled(const ScheduledSeq& s) const;
  // Applies a step: sampled[i] is the token for out.samples[i]. Returns one update per sample,
  // in order. Finished sequences are freed and forgotten.
  std::vector<SeqUpdate> update(const SchedulerOutput& out, std::span<const int32_t> sampled);
  // The same with several tokens a sample (speculative decoding): tokens[i] for out.samples[i],
  // its picks in order, from 1 up to n_drafts + 1 of them: the drafts it confirmed and the pick
  // after the last of those. The K/V of the confirmed drafts stays; stop conditions apply token
  // by token (tokens after a stop are dropped).
  std::vector<SeqUpdate> update(const SchedulerOutput& out, std::span<const std::vector<int32_t>> tokens);
  // Finishes every unfinished sample of the request with kAbort and frees its blocks now.
  // Must not be called between schedule() and update(). Empty if the id is unknown.
  std::vector<SeqUpdate> abort(const std::string& request_id);
  // Finishes the sequences of a step whose execution failed with kError (frees their blocks);
  // call instead of update().
  std::vector<SeqUpdate> fail(const SchedulerOutput& out);

  bool has_work() const { return !requests_.empty(); }
  // Whether the next schedule() could admit a waiting sequence (or fork one): some wait and a
  // sequence slot is free (max_num_seqs). With every slot taken, schedule() runs only the
  // running sequences, as a continuation does.
  bool can_admit_waiting() const;
  const Request* find(SeqId seq) const;
  // Mutable access for the engine's sampler (random stream); nullptr if unknown.
  Request* find(SeqId seq);
  SchedulerStats stats() const;
  const std::vector<SeqId>& running() const { return running_; }  // in admission order
  const SchedulerConfig& config() const { return config_; }
  const KvCacheManager& kv() const { return kv_; }
  // KV invariants plus: exactly the running sequences hold blocks, each enough for its
  // computed tokens; waiting and awaiting-fork ones hold none. For tests.
  Status check_invariants() const;

 private:
  Request& req(SeqId seq);
  int num_running_seqs() const;
  void preempt(SeqId seq, SchedulerOutput& out);
  SeqId pick_victim() const;
  void order_waiting();
  void schedule_running(SchedulerOutput& out, int& budget);
  void schedule_waiting(SchedulerOutput& out, int& budget);
  // pending: tokens at the end of each sequence whose ids are not known yet (a continuation's
  // 1): their batch entries are placeholders (0) and they count as known for the samples.
  void build_batch(SchedulerOutput& out, int pending = 0);
  void fork_children(SeqId parent);
  void check_stop(Request& r);
  // Both update()s: tokens[i] for out.samples[i].
  std::vector<SeqUpdate> apply_update(const SchedulerOutput& out, std::span<const std::span<const int32_t>> tokens);
  void finish(Request& r, FinishReason reason, std::vector<SeqUpdate>& updates);
  SeqUpdate make_update(const Request& r) const;


  SchedulerConfig config_;
  std::vector<int32_t> eos_token_ids_;
  KvCacheManager kv_;
  std::unordered_map<SeqId, std::unique_ptr<Request>> requests_;
  std::unordered_map<std::string, std::vector<SeqId>> by_request_id_;
  std::vector<SeqId> running_;  // in admission order (newest last)
  std::deque<SeqId> waiting_;   // FCFS order; preempted sequences go back to the front
  // n > 1: samples of a request waiting for sample 0's prefill, keyed by sample 0's seq id.
  std::unordered_map<SeqId, std::vector<SeqId>> fork_children_;
  SeqId next_seq_id_ = 0;
  int64_t num_preemptions_ = 0;
};

}  // namespace ember
