#pragma once
// DraftModel: speculative decoding's drafter from a smaller model of the same vocabulary. For
// every decoding sequence it proposes k tokens, its own greedy continuation: one batched
// forward over each sequence's tokens the draft has not seen yet (after a step, the confirmed
// drafts and the token after them), then k - 1 single-token steps. Its K/V cache is its own
// (blocks of the target's size, no prefix sharing); a sequence keeps the draft's K/V of the
// longest prefix of its tokens that the draft has computed, so rejected drafts cost nothing
// beyond being overwritten. Greedy drafts are deterministic, so the engine's row-by-row check
// (a pick kept while it equals its draft) stays exact for sampled requests too.
#include "core/status.h"
#include "kv/kv_cache_manager.h"
#include "runner/model_executor.h"

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

namespace ember {

class DraftModel {
 public:
  // Allocates the draft's K/V cache (n_blocks x block_size slots) on `executor`.
  static Result<std::unique_ptr<DraftModel>> create(std::shared_ptr<ModelExecutor> executor, int n_blocks,
                                                    int block_size);

  // drafts[i]: up to k tokens after tokens[i] for sequence ids[i] (none for a sequence the
  // draft's context or cache cannot hold). Sequences this call does not name are forgotten
  // (their blocks freed), so pass every sequence that may decode again.
  Status propose(std::span<const int64_t> ids, std::span<const std::span<const int32_t>> tokens, int k,
                 std::vector<std::vector<int32_t>>& drafts);

  int vocab_size() const { return exec_->vocab_size(); }
  int n_free_blocks() const { return kv_.n_free_blocks(); }

 private:
  DraftModel(std::shared_ptr<ModelExecutor> executor, KvManagerConfig kv);
  // One forward over seqs' pending tokens (positions cached.size() .. size of each `want`),
  // appending each sequence's argmax after its last token.
  Status run(std::span<const size_t> which, std::vector<std::vector<int32_t>>& want,
             std::vector<std::vector<int32_t>>& drafts, std::span<const int64_t> ids);

  std::shared_ptr<ModelExecutor> exec_;
  KvCacheManager kv_;
  std::unordered_map<int64_t, std::vector<int32_t>> cached_;  // tokens whose K/V the draft holds, per sequence
  std::vector<float> logits_;
  std::vector<int32_t> argmax_;
};

}  // namespace ember
