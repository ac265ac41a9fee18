#pragma once
// TokenIndex: token string -> id for vocabularies of a few hundred thousand entries. A flat
// open-addressing table of (hash, entry) with the strings stored once; loading a 262k vocabulary
// does millions of lookups (merge recovery), where std::unordered_map's node chasing dominated.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ember::tok {

class TokenIndex {
 public:
  void reserve(size_t n);
  // Maps token to id; a token already present takes the new id (the last duplicate wins, as in
  // a Python dict or serde map).
  void put(std::string_view token, int32_t id);
  // The id of token, or -1.
  int32_t find(std::string_view token) const;
  bool contains(std::string_view token) const { return find(token) >= 0; }
  size_t size() const { return tokens_.size(); }
  // Entries in insertion order of their first occurrence.
  const std::string& token_at(size_t i) const { return tokens_[i]; }
  int32_t id_at(size_t i) const { return ids_[i]; }

 private:
  static uint64_t hash(std::string_view s);
  void grow();
  std::vector<std::string> tokens_;
  std::vector<int32_t> ids_;
  std::vector<uint64_t> hashes_;
  // Each slot: high 32 bits of the hash (a tag that rejects most probes without touching the
  // strings) and 1 + the index into tokens_ (0: empty).
  std::vector<uint64_t> slots_;
  size_t mask_ = 0;
};

}  // namespace ember::tok
