#include "kv/block_pool.h"

#include "core/check.h"

namespace ember {

BlockPool::BlockPool(int n_blocks, bool enable_caching)
    : enable_caching_(enable_caching),
      ref_count_(static_cast<size_t>(n_blocks), 0),
      hash_(static_cast<size_t>(n_blocks), 0),
      has_hash_(static_cast<size_t>(n_blocks), 0),
      prev_(static_cast<size_t>(n_blocks), -1),
      next_(static_cast<size_t>(n_blocks), -1),
      on_free_list_(static_cast<size_t>(n_blocks), 0) {
  EMBER_CHECK(n_blocks >= 0);
  for (int32_t i = 0; i < n_blocks; ++i) list_push_back(i);
}

void BlockPool::list_remove(int32_t id) {
  const size_t i = static_cast<size_t>(id);
  EMBER_CHECK(on_free_list_[i], "block {} not on the free list", id);
  if (prev_[i] >= 0) next_[static_cast<size_t>(prev_[i])] = next_[i]; else head_ = next_[i];
  if (next_[i] >= 0) prev_[static_cast<size_t>(next_[i])] = prev_[i]; else tail_ = prev_[i];
  prev_[i] = next_[i] = -1;
  on_free_list_[i] = 0;
  --n_free_;
}

void BlockPool::list_push_back(int32_t id) {
  const size_t i = static_cast<size_t>(id);
  EMBER_CHECK(!on_free_list_[i], "block {} already free", id);
  prev_[i] = tail_;
  next_[i] = -1;
  if (tail_ >= 0) next_[static_cast<size_t>(tail_)] = id; else head_ = id;
  tail_ = id;
  on_free_list_[i] = 1;
  ++n_free_;
}

void BlockPool::evict_hash(int32_t id) {
  const size_t i = static_cast<size_t>(id);
  if (!has_hash_[i]) return;
  auto it = hash_to_block_.find(hash_[i]);
  EMBER_CHECK(it != hash_to_block_.end() && it->second == id);
  hash_to_block_.erase(it);
  has_hash_[i] = 0;
  ++n_evictions_;
}

bool BlockPool::allocate(int n, std::vector<int32_t>& out) {
  EMBER_CHECK(n >= 0);
  if (n > n_free_) return false;
  for (int k = 0; k < n; ++k) {
    const int32_t id = head_;
    list_remove(id);
    evict_hash(id);
    ref_count_[static_cast<size_t>(id)] = 1;
    out.push_back(id);
  }
  return true;
}

void BlockPool::touch(std::span<const int32_t> ids) {
  for (int32_t id : ids) {
    int32_t& rc = ref_count_[static_cast<size_t>(id)];
    if (rc == 0) list_remove(id);
    ++rc;
  }
}

void BlockPool::free(std::span<const int32_t> ids) {
  for (int32_t id : ids) {
    int32_t& rc = ref_count_[static_cast<size_t>(id)];
    EMBER_CHECK(rc > 0, "double free of block {}", id);
    if (--rc == 0) list_push_back(id);
  }
}

std::optional<int32_t> BlockPool::lookup(BlockHash hash) const {
  if (!enable_caching_) return std::nullopt;
  auto it = hash_to_block_.find(hash);
  if (it == hash_to_block_.end()) return std::nullopt;
  return it->second;
}

bool BlockPool::cache(int32_t id, BlockHash hash) {
  if (!enable_caching_) return false;
  const size_t i = static_cast<size_t>(id);
  EMBER_CHECK(ref_count_[i] > 0, "caching free block {}", id);
  if (has_hash_[i]) {
    EMBER_CHECK(hash_[i] == hash, "block {} re-cached with another hash", id);
    return true;
  }
  auto [it, inserted] = hash_to_block_.emplace(hash, id);
  if (!inserted) return it->second == id;
  hash_[i] = hash;
  has_hash_[i] = 1;
  return true;
}

std::vector<int32_t> BlockPool::free_list() const {
  std::vector<int32_t> ids;
  for (int32_t id = head_; id >= 0; id = next_[static_cast<size_t>(id)]) ids.push_back(id);
  return ids;
}

Status BlockPool::check_consistency() const {
  int n_listed = 0;
  int32_t prev = -1;
  for (int32_t id = head_; id >= 0; id = next_[static_cast<size_t>(id)]) {
    const size_t i = static_cast<size_t>(id);
    if (ref_count_[i] != 0) return Status::errorf("block {} on free list with ref {}", id, ref_count_[i]);
    if (prev_[i] != prev) return Status::errorf("free list back link broken at block {}", id);
    if (!on_free_list_[i]) return Status::errorf("block {} listed but not flagged free", id);
    if (++n_listed > n_blocks()) return Status::error("free list has a cycle");
    prev = id;
  }
  if (prev != tail_) return Status::error("free list tail mismatch");
  if (n_listed != n_free_) return Status::errorf("free list holds {} blocks, count says {}", n_listed, n_free_);
  int n_zero = 0, n_hashed = 0;
  for (int32_t id = 0; id < n_blocks(); ++id) {
    const size_t i = static_cast<size_t>(id);
    if (ref_count_[i] < 0) return Status::errorf("block {} has ref {}", id, ref_count_[i]);
    if (ref_count_[i] == 0) ++n_zero;
    if ((ref_count_[i] == 0) != static_cast<bool>(on_free_list_[i]))
      return Status::errorf("block {}: ref {} but free flag {}", id, ref_count_[i], on_free_list_[i]);
    if (has_hash_[i]) {
      ++n_hashed;
      auto it = hash_to_block_.find(hash_[i]);
      if (it == hash_to_block_.end() || it->second != id)
        return Status::errorf("hashed block {} missing from the hash map", id);
    }
  }
  if (n_zero != n_free_) return Status::errorf("{} blocks with ref 0, {} free", n_zero, n_free_);
  if (n_hashed != static_cast<int>(hash_to_block_.size()))
    return Status::errorf("{} hashed blocks, hash map holds {}", n_hashed, hash_to_block_.size());
  return Status::ok();
}

}  // namespace ember
