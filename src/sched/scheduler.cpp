// Scheduler: admission, step results (update), stop conditions, aborts and invariants.
// schedule() itself is in scheduler_step.cpp.
#include "sched/scheduler.h"

#include "core/check.h"

#include <algorithm>
#include <unordered_set>

namespace ember {

namespace {
bool contains_token(const std::vector<int32_t>& ids, int32_t t) {
  return std::find(ids.begin(), ids.end(), t) != ids.end();
}
int ceil_div(int a, int b) { return (a + b - 1) / b; }
}  // namespace

Scheduler::Scheduler(SchedulerConfig config, std::vector<int32_t> eos_token_ids)
    : config_(config),
      eos_token_ids_(std::move(eos_token_ids)),
      kv_(KvManagerConfig{config.n_blocks, config.block_size, config.enable_prefix_caching}) {
  const Status st = config_.validate();
  EMBER_CHECK(st.is_ok(), "{}", st.message());
}

Request& Scheduler::req(SeqId seq) {
  auto it = requests_.find(seq);
  EMBER_CHECK(it != requests_.end(), "unknown sequence {}", seq);
  return *it->second;
}

const Request* Scheduler::find(SeqId seq) const {
  auto it = requests_.find(seq);
  return it == requests_.end() ? nullptr : it->second.get();
}

Request* Scheduler::find(SeqId seq) {
  auto it = requests_.find(seq);
  return it == requests_.end() ? nullptr : it->second.get();
}

bool Scheduler::contains(const std::string& request_id) const {
  return by_request_id_.count(request_id) > 0;
}

Status Scheduler::check_request(int n_prompt_tokens, const SamplingParams& params) const {
  const int max_len = config_.max_model_len;
  if (n_prompt_tokens < 1) return Status::error("the prompt must hold at least one token");
  if (n_prompt_tokens >= max_len)
    return Status::errorf(
        "the prompt has {} tokens but the context window is {} (one must be left for output)",
        n_prompt_tokens, max_len);
  if (params.max_tokens && n_prompt_tokens + *params.max_tokens > max_len)
    return Status::errorf(
        "the prompt ({} tokens) plus max_tokens ({}) exceeds the context window of {} tokens",
        n_prompt_tokens, *params.max_tokens, max_len);
  if (!config_.enable_chunked_prefill && n_prompt_tokens > config_.max_num_batched_tokens)
    return Status::errorf(
        "the prompt has {} tokens, more than max_num_batched_tokens ({}) without chunked prefill",
        n_prompt_tokens, config_.max_num_batched_tokens);
  if (params.n > config_.max_num_seqs)
    return Status::errorf("n ({}) exceeds max_num_seqs ({})", params.n, config_.max_num_seqs);
  // A sequence that cannot fit in the whole cache would preempt itself forever.
  const int max_out = params.max_tokens ? *params.max_tokens : max_len - n_prompt_tokens;
  const int n_blocks = ceil_div(n_prompt_tokens + max_out, config_.block_size);
  if (n_blocks > config_.n_blocks)
    return Status::errorf("the request needs up to {} KV blocks but the cache has {}", n_blocks,
                          config_.n_blocks);
  return Status::ok();
}

Status Scheduler::add_request(std::vector<Request> samples) {
  EMBER_CHECK(!samples.empty());
  // Copies: the samples are moved from below.
  const std::string request_id = samples.front().request_id;
  const int n_prompt = samples.front().num_prompt_tokens;
  if (contains(request_id)) return Status::errorf("request id '{}' is already in use", request_id);
  EMBER_RETURN_IF_ERROR(check_request(n_prompt, samples.front().params));
  const int max_out = config_.max_model_len - n_prompt;
  std::vector<SeqId>& ids = by_request_id_[request_id];
  std::vector<SeqId> children;
  for (size_t i = 0; i < samples.size(); ++i) {
    Request& r = samples[i];
    EMBER_CHECK(r.num_prompt_tokens == r.num_tokens() && r.request_id == request_id);
    r.seq_id = next_seq_id_++;
    r.sample_index = static_cast<int>(i);
    r.status = i == 0 ? RequestStatus::kWaiting : RequestStatus::kAwaitingFork;
    r.finish_reason = FinishReason::kNone;
    r.num_computed_tokens = 0;
    r.num_cached_tokens = -1;
    r.max_output_tokens = r.params.max_tokens ? std::min(*r.params.max_tokens, max_out) : max_out;
    ids.push_back(r.seq_id);
    if (i > 0) children.push_back(r.seq_id);
    requests_[r.seq_id] = std::make_unique<Request>(std::move(r));
  }
  waiting_.push_back(ids.front());
  if (!children.empty()) fork_children_[ids.front()] = std::move(children);
  return Status::ok();
}

int Scheduler::num_running_seqs() const {
  // Samples awaiting the fork of a running sequence will join it: count them already.
  int n = static_cast<int>(running_.size());
  for (const auto& [parent, children] : fork_children_)
    if (requests_.at(parent)->status == RequestStatus::kRunning) n += static_cast<int>(children.size());
  return n;
}

void Scheduler::fork_children(SeqId parent) {
  auto it = fork_children_.find(parent);
  EMBER_CHECK(it != fork_children_.end());
  const Request& p = req(parent);
  for (SeqId c : it->second) {
    Request& child = req(c);
    kv_.fork(parent, c);
    child.num_computed_tokens = p.num_computed_tokens;
    child.num_cached_tokens = p.num_cached_tokens;
    child.status = RequestStatus::kRunning;
    running_.push_back(c);
  }
  fork_children_.erase(it);
}

void Scheduler::check_stop(Request& r) {
  const int32_t t = r.token_ids.back();
  // The first min_tokens outputs never stop on a token (the sampler suppresses them too).
  if (r.num_output_tokens() > r.params.min_tokens) {
    if ((!r.params.ignore_eos && contains_token(eos_token_ids_, t)) ||
        contains_token(r.params.stop_token_ids, t)) {
      r.finish_reason = FinishReason::kStop;
      r.stop_token_id = t;
      return;
    }
  }
  if (r.num_output_tokens() >= r.max_output_tokens || r.num_tokens() >= config_.max_model_len)
    r.finish_reason = FinishReason::kLength;
}

SeqUpdate Scheduler::make_update(const Request& r) const {
  SeqUpdate u;
  u.seq_id = r.seq_id;
  u.request_id = r.request_id;
  u.sample_index = r.sample_index;
  u.finished = r.is_finished();
  u.finish_reason = r.finish_reason;
  u.stop_token_id = r.stop_token_id;
  u.num_prompt_tokens = r.num_prompt_tokens;
  u.num_cached_tokens = std::max(0, r.num_cached_tokens);
  u.num_output_tokens = r.num_output_tokens();
  return u;
}

void Scheduler::finish(Request& r, FinishReason reason, std::vector<SeqUpdate>& updates) {
  const SeqId seq = r.seq_id;
  kv_.free(seq);
  if (r.status == RequestStatus::kRunning)
    running_.erase(std::find(running_.begin(), running_.end(), seq));
  else if (r.status == RequestStatus::kWaiting)
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), seq));
  r.status = RequestStatus::kFinished;
  r.finish_reason = reason;
  updates.push_back(make_update(r));
  // Samples still waiting for this one's prefill can never fork now: they end with it.
  if (auto it = fork_children_.find(seq); it != fork_children_.end()) {
    const std::vector<SeqId> children = std::move(it->second);
    fork_children_.erase(it);
    for (SeqId c : children) finish(req(c), reason, updates);
  }
  auto ids = by_request_id_.find(r.request_id);
  EMBER_CHECK(ids != by_request_id_.end());
  std::erase(ids->second, seq);
  if (ids->second.empty()) by_request_id_.erase(ids);
  requests_.erase(seq);  // `r` dangles from here on
}

std::vector<SeqUpdate> Scheduler::update(const SchedulerOutput& out,
                                         std::span<const int32_t> sampled) {
  // (views of one token each: no copy a sample on this every-step path)
  std::vector<std::span<const int32_t>> tokens(sampled.size());
  for (size_t i = 0; i < sampled.size(); ++i) tokens[i] = sampled.subspan(i, 1);
  return apply_update(out, tokens);
}

std::vector<SeqUpdate> Scheduler::update(const SchedulerOutput& out, std::span<const std::vector<int32_t>> tokens) {
  const std::vector<std::span<const int32_t>> views(tokens.begin(), tokens.end());
  return apply_update(out, views);
}

std::vector<SeqUpdate> Scheduler::apply_update(const SchedulerOutput& out, std::span<const std::span<const int32_t>> tokens) {
  EMBER_CHECK(tokens.size() == out.samples.size());
  for (const ScheduledSeq& s : out.seqs) {
    Request& r = req(s.seq_id);
    EMBER_CHECK(r.status == RequestStatus::kRunning && r.num_computed_tokens == s.n_computed_before,
                "sequence {} changed between schedule and update", s.seq_id);
    r.draft_ids.clear();
    EMBER_CHECK(s.n_drafts == 0 || !s.fans_out, "sequence {}: drafts at a prefill's end", s.seq_id);
    if (s.n_drafts > 0) continue;  // (its K/V count depends on the drafts kept: below)
    r.num_computed_tokens += s.n_new_tokens;
    kv_.cache_full_blocks(s.seq_id, r.token_ids, r.num_computed_tokens, r.cache_salt);
    if (s.fans_out) fork_children(s.seq_id);
  }
  std::vector<SeqUpdate> updates;
  updates.reserve(out.samples.size());
  for (size_t i = 0; i < out.samples.size(); ++i) {
    const SampleSlot& slot = out.samples[i];
    Request& r = req(slot.seq_id);
    EMBER_CHECK(!tokens[i].empty() && static_cast<int>(tokens[i].size()) <= slot.n_drafts + 1,
                "sequence {}: {} tokens for {} drafts", slot.seq_id, tokens[i].size(), slot.n_drafts);
    const size_t at = updates.size();
    std::vector<int32_t> kept;
    for (const int32_t t : tokens[i]) {
      r.token_ids.push_back(t);
      kept.push_back(t);
      check_stop(r);
      if (r.finish_reason != FinishReason::kNone) break;
    }
    if (slot.n_drafts > 0) {
      // The step computed the K/V of the last known token and of every draft; those of the
      // drafts this sample confirmed (all kept tokens but the last) are valid, the rest are
      // overwritten when their positions are computed again.
      r.num_computed_tokens += static_cast<int>(kept.size());
      kv_.cache_full_blocks(slot.seq_id, r.token_ids, r.num_computed_tokens, r.cache_salt);
    }
    if (r.finish_reason != FinishReason::kNone) {
      finish(r, r.finish_reason, updates);
    } else {
      updates.push_back(make_update(r));
    }
    updates[at].new_tokens = std::move(kept);  // (what was appended: tokens[i] up to a stop)
  }
  return updates;
}

std::vector<SeqUpdate> Scheduler::abort(const std::string& request_id) {
  std::vector<SeqUpdate> updates;
  auto it = by_request_id_.find(request_id);
  if (it == by_request_id_.end()) return updates;
  const std::vector<SeqId> seqs = it->second;  // finish() edits the original
  for (SeqId seq : seqs) {
    if (requests_.count(seq)) finish(req(seq), FinishReason::kAbort, updates);
  }
  return updates;
}

std::vector<SeqUpdate> Scheduler::fail(const SchedulerOutput& out) {
  std::vector<SeqUpdate> updates;
  for (const ScheduledSeq& s : out.seqs) {
    if (requests_.count(s.seq_id)) finish(req(s.seq_id), FinishReason::kError, updates);
  }
  return updates;
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats s;
  s.num_running = static_cast<int>(running_.size());
  s.num_waiting = static_cast<int>(waiting_.size());
  s.num_waiting_requests = s.num_waiting;
  for (const auto& [parent, children] : fork_children_) s.num_waiting += static_cast<int>(children.size());
  s.num_preemptions = num_preemptions_;
  s.kv = kv_.stats();
  return s;
}

Status Scheduler::check_invariants() const {
  EMBER_RETURN_IF_ERROR(kv_.check_invariants());
  const int bs = config_.block_size;
  std::unordered_set<SeqId> running(running_.begin(), running_.end());
  if (running.size() != running_.size()) return Status::error("a sequence is listed twice as running");
  for (SeqId seq : running_) {
    const Request& r = *requests_.at(seq);
    if (r.status != RequestStatus::kRunning) return Status::errorf("running sequence {} has status {}", seq, static_cast<int>(r.status));
    const int n_slots = static_cast<int>(kv_.block_table(seq).size()) * bs;
    if (n_slots < r.num_computed_tokens)
      return Status::errorf("sequence {} computed {} tokens but has {} slots", seq, r.num_computed_tokens, n_slots);
    if (r.num_computed_tokens > r.num_tokens() || r.num_tokens() > config_.max_model_len)
      return Status::errorf("sequence {}: {} computed of {} tokens", seq, r.num_computed_tokens, r.num_tokens());
  }
  for (KvSeqId seq : kv_.seqs_with_blocks())
    if (!running.count(seq)) return Status::errorf("sequence {} holds blocks but is not running", seq);
  size_t n_children = 0;
  for (SeqId seq : waiting_) {
    const Request& r = *requests_.at(seq);
    if (r.status != RequestStatus::kWaiting || r.num_computed_tokens != 0)
      return Status::errorf("waiting sequence {} is in state {} with {} computed", seq, static_cast<int>(r.status), r.num_computed_tokens);
  }
  for (const auto& [parent, children] : fork_children_) {
    n_children += children.size();
    for (SeqId c : children)
      if (requests_.at(c)->status != RequestStatus::kAwaitingFork)
        return Status::errorf("sample {} awaiting fork has the wrong status", c);
  }
  if (requests_.size() != running_.size() + waiting_.size() + n_children)
    return Status::errorf("{} sequences known, {} running + {} waiting + {} awaiting fork",
                          requests_.size(), running_.size(), waiting_.size(), n_children);
  return Status::ok();
}

}  // namespace ember
