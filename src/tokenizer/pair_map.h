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
    keys_.assign(cap, kEmpty);
    vals_.assign(cap, MergeInfo{-1, -1});
    mask_ = cap - 1;
    size_ = 0;
  }
  // Inserts or overwrites (HF keeps the last duplicate merge).
  void put(int32_t a, int32_t b, MergeInfo v) {
    if ((size_ + 1) * 2 > keys_.size()) grow();
    uint64_t k = key(a, b);
    size_t i = slot(k);
    while (keys_[i] != kEmpty && keys_[i] != k) i = (i + 1) & mask_;
    if (keys_[i] == kEmpty) ++size_;
    keys_[i] = k;
    vals_[i] = v;
  }
  const MergeInfo* find(int32_t a, int32_t b) const {
    if (keys_.empty()) return nullptr;
    uint64_t k = key(a, b);
    for (size_t i = slot(k);; i = (i + 1) & mask_) {
      if (keys_[i] == k) return &vals_[i];
      if (keys_[i] == kEmpty) return nullptr;
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
    std::vector<uint64_t> old_keys = std::move(keys_);
    std::vector<MergeInfo> old_vals = std::move(vals_);
    reserve(old_keys.empty() ? 16 : old_keys.size());
    for (size_t i = 0; i < old_keys.size(); ++i)
      if (old_keys[i] != kEmpty)
        put(static_cast<int32_t>(old_keys[i] >> 32), static_cast<int32_t>(old_keys[i] & 0xffffffffu), old_vals[i]);
  }
  std::vector<uint64_t> keys_;
  std::vector<MergeInfo> vals_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace ember::tok
