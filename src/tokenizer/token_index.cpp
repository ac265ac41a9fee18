#include "tokenizer/token_index.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace ember::tok {

namespace {
uint64_t make_slot(uint64_t h, size_t entry) { return (h & 0xFFFFFFFF00000000ull) | static_cast<uint32_t>(entry + 1); }
bool slot_empty(uint64_t s) { return static_cast<uint32_t>(s) == 0; }
size_t slot_entry(uint64_t s) { return static_cast<uint32_t>(s) - 1; }
bool slot_tag_matches(uint64_t s, uint64_t h) { return (s >> 32) == (h >> 32); }
}  // namespace

uint64_t TokenIndex::hash(std::string_view s) { return XXH3_64bits(s.data(), s.size()); }

void TokenIndex::reserve(size_t n) {
  tokens_.reserve(n);
  ids_.reserve(n);
  hashes_.reserve(n);
  size_t cap = 16;
  while (cap < n * 2) cap <<= 1;
  if (cap <= slots_.size()) return;
  slots_.assign(cap, 0);
  mask_ = cap - 1;
  for (size_t i = 0; i < tokens_.size(); ++i) {
    size_t s = hashes_[i] & mask_;
    while (!slot_empty(slots_[s])) s = (s + 1) & mask_;
    slots_[s] = make_slot(hashes_[i], i);
  }
}

void TokenIndex::grow() { reserve(slots_.empty() ? 8 : slots_.size()); }

void TokenIndex::put(std::string_view token, int32_t id) {
  if ((tokens_.size() + 1) * 2 > slots_.size()) grow();
  uint64_t h = hash(token);
  size_t s = h & mask_;
  for (; !slot_empty(slots_[s]); s = (s + 1) & mask_) {
    size_t e = slot_entry(slots_[s]);
    if (slot_tag_matches(slots_[s], h) && hashes_[e] == h && tokens_[e] == token) {
      ids_[e] = id;
      return;
    }
  }
  slots_[s] = make_slot(h, tokens_.size());
  tokens_.emplace_back(token);
  ids_.push_back(id);
  hashes_.push_back(h);
}

int32_t TokenIndex::find(std::string_view token) const {
  if (slots_.empty()) return -1;
  uint64_t h = hash(token);
  for (size_t s = h & mask_; !slot_empty(slots_[s]); s = (s + 1) & mask_) {
    if (!slot_tag_matches(slots_[s], h)) continue;
    size_t e = slot_entry(slots_[s]);
    if (tokens_[e] == token) return ids_[e];
  }
  return -1;
}

}  // namespace ember::tok
