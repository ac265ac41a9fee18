#include "engine/draft_model.h"

#include <algorithm>
#include <unordered_set>

namespace ember {

Result<std::unique_ptr<DraftModel>> DraftModel::create(std::shared_ptr<ModelExecutor> executor, int n_blocks,
                                                       int block_size) {
  if (!executor) return Status::error("draft model: no executor");
  if (n_blocks < 1 || block_size < 1)
    return Status::errorf("draft model: a K/V cache of {} blocks of {} tokens", n_blocks, block_size);
  EMBER_RETURN_IF_ERROR(executor->allocate_kv_cache(KvCacheConfig{n_blocks, block_size}).with_context("draft model K/V cache"));
  return std::unique_ptr<DraftModel>(new DraftModel(std::move(executor), KvManagerConfig{n_blocks, block_size, false}));
}

DraftModel::DraftModel(std::shared_ptr<ModelExecutor> executor, KvManagerConfig kv)
    : exec_(std::move(executor)), kv_(kv) {}

Status DraftModel::propose(std::span<const int64_t> ids, std::span<const std::span<const int32_t>> tokens, int k,
                           std::vector<std::vector<int32_t>>& drafts) {
  drafts.assign(ids.size(), {});
  // Forget sequences that are gone (finished, preempted or not decoding now).
  const std::unordered_set<int64_t> live(ids.begin(), ids.end());
  for (auto it = cached_.begin(); it != cached_.end();) {
    if (live.count(it->first)) {
      ++it;
    } else {
      kv_.free(it->first);
      it = cached_.erase(it);
    }
  }
  if (k <= 0) return Status::ok();
  std::vector<std::vector<int32_t>> want(ids.size());  // each sequence's tokens, drafts appended as they come
  std::vector<size_t> active;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::span<const int32_t> t = tokens[i];
    // Room for the tokens and k - 1 drafts fed back (the last draft is never fed).
    if (t.empty() || static_cast<int>(t.size()) + k - 1 > exec_->max_context()) continue;
    std::vector<int32_t>& cached = cached_[ids[i]];
    // The draft's K/V stays valid for the prefix its tokens share with the sequence's.
    const size_t keep = static_cast<size_t>(
        std::mismatch(cached.begin(), cached.end(), t.begin(), t.end()).first - cached.begin());
    cached.resize(std::min(keep, t.size() - 1));  // (at least one token to run, for its logits)
    std::vector<BlockCopy> copies;
    const int need = static_cast<int>(t.size()) + k - 1 - static_cast<int>(cached.size());
    if (!kv_.allocate_slots(ids[i], static_cast<int>(cached.size()), need, nullptr, copies)) continue;
    want[i].assign(t.begin(), t.end());
    active.push_back(i);
  }
  for (int j = 0; j < k && !active.empty(); ++j) EMBER_RETURN_IF_ERROR(run(active, want, drafts, ids));
  return Status::ok();
}

Status DraftModel::run(std::span<const size_t> which, std::vector<std::vector<int32_t>>& want,
                       std::vector<std::vector<int32_t>>& drafts, std::span<const int64_t> ids) {
  const int bs = kv_.block_size();
  ForwardBatch b;
  int max_blocks = 0;
  for (size_t i : which) max_blocks = std::max(max_blocks, static_cast<int>(kv_.block_table(ids[i]).size()));
  b.max_blocks_per_seq = max_blocks;
  b.query_start.push_back(0);
  for (size_t i : which) {
    std::vector<int32_t>& cached = cached_[ids[i]];
    const std::vector<int32_t>& w = want[i];
    const std::span<const int32_t> table = kv_.block_table(ids[i]);
    for (size_t pos = cached.size(); pos < w.size(); ++pos) {
      b.token_ids.push_back(w[pos]);
      b.positions.push_back(static_cast<int32_t>(pos));
      b.slot_mapping.push_back(table[pos / static_cast<size_t>(bs)] * bs + static_cast<int32_t>(pos % static_cast<size_t>(bs)));
    }
    b.query_start.push_back(b.n_tokens());
    b.seq_lens.push_back(static_cast<int32_t>(w.size()));
    b.block_tables.insert(b.block_tables.end(), table.begin(), table.end());
    b.block_tables.resize(b.block_tables.size() + static_cast<size_t>(max_blocks) - table.size(), 0);
    b.logit_rows.push_back(b.n_tokens() - 1);
  }
  const int vocab = exec_->vocab_size();
  if (exec_->can_execute_argmax()) {
    EMBER_RETURN_IF_ERROR(exec_->execute_argmax(b, argmax_).with_context("draft model"));
  } else {
    EMBER_RETURN_IF_ERROR(exec_->execute(b, logits_).with_context("draft model"));
    argmax_.resize(b.logit_rows.size());
    for (size_t r = 0; r < argmax_.size(); ++r) {
      const float* row = logits_.data() + r * static_cast<size_t>(vocab);
      argmax_[r] = static_cast<int32_t>(std::max_element(row, row + vocab) - row);  // (the first maximum)
    }
  }
  if (argmax_.size() != which.size()) return Status::errorf("draft model: {} picks for {} sequences", argmax_.size(), which.size());
  for (size_t n = 0; n < which.size(); ++n) {
    const size_t i = which[n];
    std::vector<int32_t>& cached = cached_[ids[i]];
    cached.insert(cached.end(), want[i].begin() + static_cast<std::ptrdiff_t>(cached.size()), want[i].end());  // (K/V written now)
    drafts[i].push_back(argmax_[n]);
    want[i].push_back(argmax_[n]);
  }
  return Status::ok();
}

}  // namespace ember
