#pragma once
// Open-addressing hash map from a token-id pair to its merge (rank, merged id): the BPE inner
// loop probes it once per adjacent pair, so it avoids std::unordered_map's node chasing.
#include <cstdint>
#include <vector>

namespace ember::tok {

struct MergeInfo {
  int32_t rank;
  int32_t new_id;
};

class PairMap {
 public:
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    slots_.assign(cap, Slot{kEmpty, MergeInfo{-1, -1}});
    mask_ = cap - 1;
    size_ = 0;
  }
  // Inserts or overwrites (HF keeps the last duplicate merge).
  void put(int32_t a, int32_t b, MergeInfo v) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    uint64_t k = key(a, b);
    size_t i = slot(k);
    while (slots_[i].key != kEmpty && slots_[i].key != k) i = (i + 1) & mask_;
    if (slots_[i].key == kEmpty) ++size_;
    slots_[i] = Slot{k, v};
  }
  const MergeInfo* find(int32_t a, int32_t b) const {
    if (slots_.empty()) return nullptr;
    uint64_t k = key(a, b);
    for (size_t i = slot(k);; i = (i + 1) & mask_) {
      if (slots_[i].key == k) return &slots_[i].value;
      if (slots_[i].key == kEmpty) return nullptr;
    }
  }
  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  size_t slot(uint64_t k) const { return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> 20) & mask_; }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    reserve(old.empty() ? 16 : old.size());
    for (const Slot& s : old)
      if (s.key != kEmpty) put(static_cast<int32_t>(s.key >> 32), static_cast<int32_t>(s.key & 0xffffffffu), s.value);
  }
  // Key and value side by side: one cache line per probe.
  struct Slot {
    uint64_t key;
    MergeInfo value;
  };
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace ember::tok
