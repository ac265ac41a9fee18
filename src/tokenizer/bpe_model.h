#pragma once
// The BPE model of HF tokenizers: a word's characters (or bytes, for byte-level vocabularies)
// become symbols that are merged, lowest merge rank first, over a linked list of symbols with a
// priority queue; unknown characters fall back to <0xNN> byte tokens or to the unk token.
#include "core/status.h"
#include "tokenizer/pair_map.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/token_index.h"

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ember::tok {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// A merge of two tokens into a third, by id.
struct MergeIds {
  int32_t left, right, merged;
};

struct BpeOptions {
  std::optional<std::string> unk_token;
  bool byte_fallback = false;
  bool fuse_unk = false;
  bool ignore_merges = false;
};

class BpeModel {
 public:
  static constexpr int32_t kMaxTokenId = 1 << 24;  // far above any real vocabulary
  // vocab: token -> id; merges in rank order (rank = index). Errors when a merge names a token
  // that is not in the vocabulary, as HF does.
  static Result<std::unique_ptr<BpeModel>> create(TokenIndex vocab,
                                                  const std::vector<std::pair<std::string, std::string>>& merges,
                                                  BpeOptions options);
  static Result<std::unique_ptr<BpeModel>> create(TokenIndex vocab, const std::vector<MergeIds>& merges,
                                                  BpeOptions options);

  // Appends the ids of one pre-tokenized word.
  void encode_word(const Piece& word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // nullptr for ids the vocabulary does not have.
  const std::string* id_to_token(int32_t id) const;
  // 1 + the largest id in the vocabulary.
  int32_t size() const { return static_cast<int32_t>(id_to_token_.size()); }
  size_t num_merges() const { return merges_.size(); }

 private:
  BpeModel() = default;
  void initial_symbols(const Piece& word, std::vector<int32_t>& ids, std::vector<uint32_t>& lens) const;
  void merge(std::vector<int32_t>& ids, std::vector<uint32_t>& lens) const;

  TokenIndex vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  PairMap merges_;
  BpeOptions options_;
  std::optional<int32_t> unk_id_;
  std::vector<int32_t> bmp_char_ids_;                // single-code-point tokens below U+10000, or -1
  std::unordered_map<char32_t, int32_t> char_ids_;  // the others
  std::array<int32_t, 256> byte_char_ids_{};        // byte-level character of each byte, or -1
  std::array<int32_t, 256> byte_fallback_ids_{};    // <0xNN>, or -1

  // Words seen before -> their ids, for words of characters [0] and byte-level words [1] (the
  // same text gives different symbols). Bounded; encode() is const and may run on many threads.
  static constexpr size_t kCacheCapacity = 1 << 16;
  static constexpr size_t kMaxCachedWordBytes = 256;  // as HF's BPE cache
  struct WordCache {
    TokenIndex index;                      // word -> slot in ids
    std::vector<std::vector<int32_t>> ids;
  };
  mutable std::shared_mutex cache_mutex_;
  mutable WordCache cache_[2];
};

}  // namespace ember::tok
