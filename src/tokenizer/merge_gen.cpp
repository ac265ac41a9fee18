#include "tokenizer/merge_gen.h"

#include "core/utf8.h"

#include <algorithm>
#include <unordered_map>

namespace ember::tok {

std::vector<MergeIds> generate_merges(const std::vector<std::string>& tokens, const std::vector<double>& scores,
                                      const TokenIndex& vocab, bool descending) {
  // Python dict(zip(tokens, scores)): first position, last score. Without duplicates (the
  // vocabulary has as many entries as there are tokens) that is every token with its own score.
  std::vector<size_t> order;
  std::vector<double> score_of(scores.begin(), scores.end());
  if (vocab.size() == tokens.size()) {
    order.resize(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) order[i] = i;
  } else {
    std::unordered_map<std::string_view, size_t> first;
    for (size_t i = 0; i < tokens.size(); ++i) {
      auto [it, fresh] = first.emplace(tokens[i], i);
      if (fresh) order.push_back(i);
      score_of[it->second] = scores[i];
    }
  }

  struct Merge {
    int32_t left_id, right_id;
    double score;
    uint32_t left_len, right_len;  // in code points
    int32_t merged_id;
  };
  std::vector<Merge> merges;
  std::vector<Merge> local;
  std::vector<size_t> bounds;
  for (size_t idx : order) {
    const std::string& t = tokens[idx];
    if (!is_valid_utf8(t)) continue;
    bounds.clear();
    for (size_t pos = 0; pos < t.size();) {
      next_code_point(t, pos);
      bounds.push_back(pos);
    }
    const uint32_t n_cp = static_cast<uint32_t>(bounds.size());
    const int32_t merged = vocab.find(t);
    local.clear();
    for (uint32_t k = 0; k + 1 < n_cp; ++k) {
      size_t cut = bounds[k];
      int32_t l = vocab.find(std::string_view(t).substr(0, cut));
      if (l < 0) continue;
      int32_t r = vocab.find(std::string_view(t).substr(cut));
      if (r < 0) continue;
      local.push_back({l, r, score_of[idx], k + 1, n_cp - k - 1, merged});
    }
    std::sort(local.begin(), local.end(), [](const Merge& a, const Merge& b) {
      return a.left_id != b.left_id ? a.left_id < b.left_id : a.right_id < b.right_id;
    });
    merges.insert(merges.end(), local.begin(), local.end());
  }
  // Python's sorted(..., reverse=True) is stable too: equal keys keep their order.
  std::stable_sort(merges.begin(), merges.end(), [descending](const Merge& a, const Merge& b) {
    if (a.score != b.score) return descending ? a.score > b.score : a.score < b.score;
    if (a.left_len != b.left_len) return descending ? a.left_len > b.left_len : a.left_len < b.left_len;
    if (a.right_len != b.right_len) return descending ? a.right_len > b.right_len : a.right_len < b.right_len;
    return false;
  });
  std::vector<MergeIds> out;
  out.reserve(merges.size());
  for (const Merge& g : merges) out.push_back({g.left_id, g.right_id, g.merged_id});
  return out;
}

}  // namespace ember::tok
