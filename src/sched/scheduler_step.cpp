// Scheduler::schedule(): which sequences run this step, with how many tokens, and the
// ForwardBatch that describes it to the model.
#include "core/check.h"
#include "sched/scheduler.h"

#include <algorithm>

namespace ember {

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int budget = config_.max_num_batched_tokens;
  schedule_running(out, budget);
  // After a preemption blocks are scarce: admitting new work now would only preempt again.
  if (out.preempted.empty()) schedule_waiting(out, budget);
  build_batch(out);
  return out;
}

SeqId Scheduler::pick_victim() const {
  EMBER_CHECK(!running_.empty());
  if (config_.policy == SchedulerPolicy::kFcfs) return running_.back();
  // Priority: the least important (largest priority value), newest among equals.
  auto worse = [this](SeqId a, SeqId b) {
    const Request& ra = *requests_.at(a);
    const Request& rb = *requests_.at(b);
    if (ra.priority != rb.priority) return ra.priority < rb.priority;
    if (ra.arrival_time != rb.arrival_time) return ra.arrival_time < rb.arrival_time;
    return a < b;
  };
  return *std::max_element(running_.begin(), running_.end(), worse);
}

void Scheduler::preempt(SeqId seq, SchedulerOutput& out) {
  Request& r = req(seq);
  EMBER_CHECK(r.status == RequestStatus::kRunning);
  kv_.free(seq);
  r.status = RequestStatus::kWaiting;
  r.num_computed_tokens = 0;  // recompute from scratch (the prefix cache may shorten that)
  r.draft_ids.clear();
  ++r.num_preemptions;
  ++num_preemptions_;
  running_.erase(std::find(running_.begin(), running_.end(), seq));
  waiting_.push_front(seq);
  out.preempted.push_back(seq);
}

void Scheduler::schedule_running(SchedulerOutput& out, int& budget) {
  // Decodes first, then the next chunks of partly prefilled prompts, each group in admission
  // order: a long prompt in progress must never starve the decodes behind it.
  std::vector<SeqId> order;
  order.reserve(running_.size());
  for (SeqId seq : running_)
    if (req(seq).num_tokens() - req(seq).num_computed_tokens <= 1) order.push_back(seq);
  for (SeqId seq : running_)
    if (req(seq).num_tokens() - req(seq).num_computed_tokens > 1) order.push_back(seq);

  for (SeqId seq : order) {
    if (budget <= 0) break;
    Request& r = req(seq);
    if (r.status != RequestStatus::kRunning) continue;  // preempted earlier in this loop
    int n_new = r.num_tokens() - r.num_computed_tokens;
    if (config_.long_prefill_token_threshold > 0)
      n_new = std::min(n_new, config_.long_prefill_token_threshold);
    n_new = std::min(n_new, budget);
    if (n_new <= 0) continue;
    // A decode with drafts verifies them in the same step: as many as the budget, max_tokens
    // and the context window leave room for (the pick after the last one is a token too). Not
    // the last token of a prompt (a prefill's end, where n > 1 samples fork).
    int n_drafts = 0;
    if (n_new == 1 && r.num_tokens() - r.num_computed_tokens == 1 && r.num_output_tokens() > 0 &&
        !r.draft_ids.empty()) {
      n_drafts = std::min({static_cast<int>(r.draft_ids.size()), budget - 1,
                           r.max_output_tokens - r.num_output_tokens() - 1, config_.max_model_len - r.num_tokens() - 1});
      n_drafts = std::max(n_drafts, 0);
      r.draft_ids.resize(static_cast<size_t>(n_drafts));
      n_new += n_drafts;
    } else {
      r.draft_ids.clear();
    }
    bool allocated = false;
    while (!allocated) {
      allocated = kv_.allocate_slots(seq, r.num_computed_tokens, n_new, nullptr, out.block_copies);
      if (allocated) break;
      const SeqId victim = pick_victim();
      // The victim may already be scheduled this step: undo that. (Block copies recorded for
      // it stay; copying into a block nobody reads is harmless.)
      auto it = std::find_if(out.seqs.begin(), out.seqs.end(),
                              [victim](const ScheduledSeq& s) { return s.seq_id == victim; });
      if (it != out.seqs.end()) {
        budget += it->n_new_tokens;
        out.seqs.erase(it);
      }
      preempt(victim, out);
      if (victim == seq) break;  // nothing less important is left to free blocks for it
    }
    if (!allocated) continue;
    out.seqs.push_back({seq, n_new, r.num_computed_tokens, false, n_drafts});
    budget -= n_new;
  }
}

void Scheduler::order_waiting() {
  if (config_.policy != SchedulerPolicy::kPriority) return;
  std::stable_sort(waiting_.begin(), waiting_.end(), [this](SeqId a, SeqId b) {
    const Request& ra = *requests_.at(a);
    const Request& rb = *requests_.at(b);
    if (ra.priority != rb.priority) return ra.priority < rb.priority;
    if (ra.arrival_time != rb.arrival_time) return ra.arrival_time < rb.arrival_time;
    return a < b;
  });
}

void Scheduler::schedule_waiting(SchedulerOutput& out, int& budget) {
  order_waiting();
  while (!waiting_.empty() && budget > 0) {
    const SeqId seq = waiting_.front();
    Request& r = req(seq);
    auto children = fork_children_.find(seq);
    const int n_seqs = 1 + (children == fork_children_.end() ? 0 : static_cast<int>(children->second.size()));
    if (num_running_seqs() + n_seqs > config_.max_num_seqs) break;
    const CachedPrefix prefix = kv_.find_cached_prefix(seq, r.token_ids, r.cache_salt);
    int n_new = r.num_tokens() - prefix.n_tokens;
    if (config_.enable_chunked_prefill) {
      if (config_.long_prefill_token_threshold > 0)
        n_new = std::min(n_new, config_.long_prefill_token_threshold);
      n_new = std::min(n_new, budget);
    } else if (n_new > budget) {
      break;  // keeps FCFS order: later requests do not overtake a big one
    }
    if (!kv_.allocate_slots(seq, 0, n_new, &prefix, out.block_copies)) break;
    waiting_.pop_front();
    running_.push_back(seq);
    r.status = RequestStatus::kRunning;
    r.num_computed_tokens = prefix.n_tokens;
    if (r.num_cached_tokens < 0) r.num_cached_tokens = std::min(prefix.n_tokens, r.num_prompt_tokens);
    out.seqs.push_back({seq, n_new, prefix.n_tokens, false});
    budget -= n_new;
  }
}

void Scheduler::build_batch(SchedulerOutput& out, int pending) {
  ForwardBatch& b = out.batch;
  const int bs = config_.block_size;
  int max_blocks = 0;
  for (const ScheduledSeq& s : out.seqs)
    max_blocks = std::max(max_blocks, static_cast<int>(kv_.block_table(s.seq_id).size()));
  b.max_blocks_per_seq = max_blocks;
  b.query_start.push_back(0);
  for (ScheduledSeq& s : out.seqs) {
    const Request& r = req(s.seq_id);
    std::span<const int32_t> table = kv_.block_table(s.seq_id);
    const int end = s.n_computed_before + s.n_new_tokens;
    EMBER_CHECK(static_cast<int>(table.size()) * bs >= end, "sequence {} lacks slots", s.seq_id);
    for (int pos = s.n_computed_before; pos < end; ++pos) {
      const int draft = pos - r.num_tokens();  // (>= 0: a draft, or with pending a placeholder 0)
      b.token_ids.push_back(draft < 0 ? r.token_ids[static_cast<size_t>(pos)]
                            : draft < s.n_drafts ? r.draft_ids[static_cast<size_t>(draft)]
                                                 : 0);
      b.positions.push_back(pos);
      b.slot_mapping.push_back(table[static_cast<size_t>(pos / bs)] * bs + pos % bs);
    }
    b.query_start.push_back(b.n_tokens());
    b.seq_lens.push_back(end);
    b.block_tables.insert(b.block_tables.end(), table.begin(), table.end());
    b.block_tables.resize(b.block_tables.size() + static_cast<size_t>(max_blocks) - table.size(), 0);
    // Logits only where the chunk reaches the end of the known tokens: mid-prompt chunks
    // have nothing to sample.
    if (end != r.num_tokens() + pending + s.n_drafts) continue;
    const int row = static_cast<int>(b.logit_rows.size());
    for (int d = s.n_drafts; d >= 0; --d) b.logit_rows.push_back(b.n_tokens() - 1 - d);
    out.samples.push_back({row, s.seq_id, s.n_drafts});
    auto children = fork_children_.find(s.seq_id);
    if (children != fork_children_.end()) {
      s.fans_out = true;
      for (SeqId c : children->second) out.samples.push_back({row, c});
    }
  }
}

}  // namespace ember

namespace ember {

bool Scheduler::can_admit_waiting() const {
  return !fork_children_.empty() || (!waiting_.empty() && num_running_seqs() < config_.max_num_seqs);
}

std::optional<SchedulerOutput> Scheduler::schedule_continuation(const SchedulerOutput& prev,
                                                                std::vector<int32_t>& feed) {
  feed.clear();
  if (can_admit_waiting() || prev.seqs.empty()) return std::nullopt;
  if (static_cast<int>(prev.seqs.size()) > config_.max_num_batched_tokens) return std::nullopt;
  // Every running sequence must be in prev (else it would wait a step for nothing), sampled
  // once there, and still be where prev left it.
  std::unordered_map<SeqId, int> row_of;
  for (const SampleSlot& s : prev.samples) {
    if (row_of.count(s.seq_id)) return std::nullopt;
    row_of[s.seq_id] = s.logits_row;
  }
  int n_running_in_prev = 0;
  for (const ScheduledSeq& s : prev.seqs) {
    const Request* r = find(s.seq_id);
    if (r == nullptr) continue;  // aborted since
    if (s.fans_out || s.n_drafts > 0 || !row_of.count(s.seq_id) || r->status != RequestStatus::kRunning ||
        r->num_computed_tokens != s.n_computed_before || s.n_computed_before + s.n_new_tokens != r->num_tokens())
      return std::nullopt;
    ++n_running_in_prev;
  }
  if (n_running_in_prev != static_cast<int>(running_.size())) return std::nullopt;

  // Who continues: not those prev's token ends by length (check_stop's rule one token on).
  const int bs = config_.block_size;
  std::vector<SeqId> next;
  int new_blocks = 0;
  for (const ScheduledSeq& s : prev.seqs) {
    const Request* r = find(s.seq_id);
    if (r == nullptr) continue;
    if (r->num_output_tokens() + 1 >= r->max_output_tokens || r->num_tokens() + 1 >= config_.max_model_len) continue;
    next.push_back(s.seq_id);
    new_blocks += r->num_tokens() % bs == 0;  // the slot of position num_tokens() opens a block
  }
  if (next.empty() || new_blocks > kv_.n_free_blocks()) return std::nullopt;

  SchedulerOutput out;
  for (SeqId seq : next) {
    const Request& r = req(seq);
    std::vector<BlockCopy> copies;
    EMBER_CHECK(kv_.allocate_slots(seq, r.num_tokens(), 1, nullptr, copies) && copies.empty(),
                "sequence {}: the continuation's slot", seq);
    out.seqs.push_back({seq, 1, r.num_tokens(), false});
  }
  build_batch(out, /*pending=*/1);
  for (const SampleSlot& slot : out.samples) feed.push_back(row_of.at(slot.seq_id));  // (one token a sequence)
  return out;
}

bool Scheduler::still_scheduled(const ScheduledSeq& s) const {
  const Request* r = find(s.seq_id);
  return r != nullptr && r->status == RequestStatus::kRunning && r->num_computed_tokens == s.n_computed_before;
}

void Scheduler::without_finished(SchedulerOutput& out, std::vector<int32_t>& sampled) const {
  EMBER_CHECK(sampled.size() == out.samples.size());
  // A logits row is kept with the sequence that produced it (a fan-out's samples share it).
  std::unordered_map<SeqId, bool> keep;
  for (const ScheduledSeq& s : out.seqs) keep[s.seq_id] = still_scheduled(s);
  std::unordered_map<int, bool> keep_row;
  for (const SampleSlot& slot : out.samples)
    if (auto it = keep.find(slot.seq_id); it != keep.end()) keep_row[slot.logits_row] = it->second;
  std::erase_if(out.seqs, [&](const ScheduledSeq& s) { return !keep[s.seq_id]; });
  size_t w = 0;
  for (size_t i = 0; i < out.samples.size(); ++i) {
    auto it = keep_row.find(out.samples[i].logits_row);
    if (it == keep_row.end() || !it->second) continue;
    out.samples[w] = out.samples[i];
    sampled[w++] = sampled[i];
  }
  out.samples.resize(w);
  sampled.resize(w);
}

}  // namespace ember
