#include "tokenizer/bpe_model.h"

#include "tokenizer/byte_level.h"
#include "core/utf8.h"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>

namespace ember::tok {

Result<std::unique_ptr<BpeModel>> BpeModel::create(TokenIndex vocab,
                                                   const std::vector<std::pair<std::string, std::string>>& merges,
                                                   BpeOptions options) {
  std::vector<MergeIds> ids;
  ids.reserve(merges.size());
  std::string joined;
  for (size_t i = 0; i < merges.size(); ++i) {
    const auto& [a, b] = merges[i];
    int32_t ia = vocab.find(a), ib = vocab.find(b);
    if (ia < 0 || ib < 0)
      return Status::errorf("merge {} ('{}' '{}') names a token that is not in the vocabulary", i, a, b);
    joined = a;
    joined += b;
    int32_t in = vocab.find(joined);
    if (in < 0) return Status::errorf("merge {} ('{}' '{}') makes '{}', which is not in the vocabulary", i, a, b, joined);
    ids.push_back({ia, ib, in});
  }
  return create(std::move(vocab), ids, std::move(options));
}

Result<std::unique_ptr<BpeModel>> BpeModel::create(TokenIndex vocab, const std::vector<MergeIds>& merges,
                                                   BpeOptions options) {
  std::unique_ptr<BpeModel> m(new BpeModel());
  int32_t max_id = -1;
  for (size_t i = 0; i < vocab.size(); ++i) {
    if (vocab.id_at(i) < 0) return Status::errorf("negative id {} for token '{}'", vocab.id_at(i), vocab.token_at(i));
    max_id = std::max(max_id, vocab.id_at(i));
  }
  // Ids index dense tables; a stray huge id in a malformed file must not allocate gigabytes.
  if (max_id >= kMaxTokenId) return Status::errorf("token id {} is out of range (max {})", max_id, kMaxTokenId - 1);
  m->id_to_token_.resize(static_cast<size_t>(max_id + 1));
  m->has_id_.assign(static_cast<size_t>(max_id + 1), false);
  m->bmp_char_ids_.assign(0x10000, -1);
  for (size_t i = 0; i < vocab.size(); ++i) {
    const std::string& tok = vocab.token_at(i);
    const int32_t id = vocab.id_at(i);
    m->id_to_token_[id] = tok;
    m->has_id_[id] = true;
    size_t pos = 0;
    if (!tok.empty() && is_valid_utf8(tok)) {
      char32_t cp = next_code_point(tok, pos);
      if (pos == tok.size()) {
        if (cp < 0x10000) {
          m->bmp_char_ids_[cp] = id;
        } else {
          m->char_ids_[cp] = id;
        }
      }
    }
  }
  m->vocab_ = std::move(vocab);
  const ByteLevelMap& bl = ByteLevelMap::get();
  for (int b = 0; b < 256; ++b) {
    m->byte_char_ids_[b] = m->vocab_.find(bl.encode_byte(static_cast<unsigned char>(b)));
    m->byte_fallback_ids_[b] = m->vocab_.find(fmt::format("<0x{:02X}>", b));
  }
  m->merges_.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const MergeIds& g = merges[i];
    if (g.left < 0 || g.right < 0 || g.merged < 0) return Status::errorf("merge {} has a negative id", i);
    m->merges_.put(g.left, g.right, MergeInfo{static_cast<int32_t>(i), g.merged});
  }
  if (options.unk_token) {
    int32_t u = m->vocab_.find(*options.unk_token);
    if (u >= 0) m->unk_id_ = u;
  }
  m->options_ = std::move(options);
  return m;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  int32_t id = vocab_.find(token);
  if (id < 0) return std::nullopt;
  return id;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || id >= size() || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

void BpeModel::initial_symbols(const Piece& word, std::vector<int32_t>& ids, std::vector<uint32_t>& lens) const {
  const std::string& t = word.text;
  bool prev_unk = false;
  // An unknown character: its <0xNN> tokens when all exist, else unk (fused with a previous unk).
  auto unknown = [&](size_t begin, size_t len) {
    if (options_.byte_fallback) {
      bool all = true;
      for (size_t i = 0; i < len; ++i) all = all && byte_fallback_ids_[static_cast<unsigned char>(t[begin + i])] >= 0;
      if (all) {
        for (size_t i = 0; i < len; ++i) {
          ids.push_back(byte_fallback_ids_[static_cast<unsigned char>(t[begin + i])]);
          lens.push_back(1);
        }
        prev_unk = false;
        return;
      }
    }
    if (!unk_id_) return;  // no unk token: HF drops the character
    if (options_.fuse_unk && prev_unk) {
      lens.back() += static_cast<uint32_t>(len);
    } else {
      ids.push_back(*unk_id_);
      lens.push_back(static_cast<uint32_t>(len));
    }
    prev_unk = true;
  };
  if (word.byte_level) {
    for (size_t i = 0; i < t.size(); ++i) {
      int32_t id = byte_char_ids_[static_cast<unsigned char>(t[i])];
      if (id >= 0) {
        ids.push_back(id);
        lens.push_back(1);
        prev_unk = false;
      } else {
        unknown(i, 1);
      }
    }
    return;
  }
  size_t pos = 0;
  while (pos < t.size()) {
    size_t begin = pos;
    char32_t cp = next_code_point(t, pos);
    int32_t id = -1;
    if (cp < 0x10000) {
      id = bmp_char_ids_[cp];
    } else if (auto it = char_ids_.find(cp); it != char_ids_.end()) {
      id = it->second;
    }
    if (id >= 0) {
      ids.push_back(id);
      lens.push_back(static_cast<uint32_t>(pos - begin));
      prev_unk = false;
    } else {
      unknown(begin, pos - begin);
    }
  }
}

void BpeModel::merge(std::vector<int32_t>& ids, std::vector<uint32_t>& lens) const {
  const size_t n = ids.size();
  if (n < 2) return;
  std::vector<int32_t> prev(n), next(n);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }
  struct Cand {
    int32_t rank, pos, left, right, new_id;
  };
  // Min-heap on (rank, pos): the lowest rank first, leftmost among equals (as HF's BinaryHeap).
  auto worse = [](const Cand& a, const Cand& b) { return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos; };
  std::vector<Cand> heap;
  heap.reserve(n);
  for (size_t i = 0; i + 1 < n; ++i) {
    if (const MergeInfo* m = merges_.find(ids[i], ids[i + 1]))
      heap.push_back({m->rank, static_cast<int32_t>(i), ids[i], ids[i + 1], m->new_id});
  }
  std::make_heap(heap.begin(), heap.end(), worse);
  auto push = [&](int32_t pos, int32_t left, int32_t right) {
    if (const MergeInfo* m = merges_.find(left, right)) {
      heap.push_back({m->rank, pos, left, right, m->new_id});
      std::push_heap(heap.begin(), heap.end(), worse);
    }
  };
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), worse);
    Cand c = heap.back();
    heap.pop_back();
    int32_t p = c.pos;
    if (lens[p] == 0 || next[p] < 0) continue;  // symbol merged away, or nothing to its right
    int32_t q = next[p];
    // HF re-looks up the pair and skips when its merge differs. A pair that changed since it
    // was queued covers a longer span of text, so its merged token differs too: comparing the
    // pair is the same test without a hash probe.
    if (ids[p] != c.left || ids[q] != c.right) continue;
    ids[p] = c.new_id;
    lens[p] += lens[q];
    lens[q] = 0;
    next[p] = next[q];
    if (next[q] >= 0) prev[next[q]] = p;
    if (prev[p] >= 0) push(prev[p], ids[prev[p]], ids[p]);
    if (next[p] >= 0) push(p, ids[p], ids[next[p]]);
  }
  size_t w = 0;
  for (size_t i = 0; i < n; ++i)
    if (lens[i] != 0) ids[w++] = ids[i];
  ids.resize(w);
}

void BpeModel::encode_word(const Piece& word, std::vector<int32_t>& out) const {
  WordCache& cache = cache_[word.byte_level ? 1 : 0];
  const bool cacheable = word.text.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    std::shared_lock lock(cache_mutex_);
    int32_t slot = cache.index.find(word.text);
    if (slot >= 0) {
      const auto& hit = cache.ids[static_cast<size_t>(slot)];
      out.insert(out.end(), hit.begin(), hit.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  if (options_.ignore_merges) {
    // A word that is itself a token is taken whole (Llama 3), merges or not.
    int32_t id = word.byte_level ? vocab_.find(ByteLevelMap::get().encode(word.text)) : vocab_.find(word.text);
    if (id >= 0) ids.push_back(id);
  }
  if (ids.empty()) {
    std::vector<uint32_t> lens;
    ids.reserve(word.text.size());
    lens.reserve(word.text.size());
    initial_symbols(word, ids, lens);
    merge(ids, lens);
  }
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::unique_lock lock(cache_mutex_);
    if (cache.ids.size() < kCacheCapacity && !cache.index.contains(word.text)) {
      cache.index.put(word.text, static_cast<int32_t>(cache.ids.size()));
      cache.ids.push_back(std::move(ids));
    }
  }
}

}  // namespace ember::tok
