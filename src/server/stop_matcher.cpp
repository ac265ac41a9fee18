#include "server/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace ember::server {

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  // Empty stop strings would match everywhere; the parser rejects them, this keeps the class safe.
  stops_.erase(std::remove_if(stops_.begin(), stops_.end(), [](const std::string& s) { return s.empty(); }),
               stops_.end());
}

size_t StopMatcher::partial_match_length() const {
  size_t best = 0;
  for (const std::string& stop : stops_) {
    // Candidates are suffixes shorter than the stop string (a full match was ruled out).
    const size_t max_len = std::min(stop.size() - 1, pending_.size());
    for (size_t len = max_len; len > best; --len) {
      if (std::string_view(pending_).substr(pending_.size() - len) == std::string_view(stop).substr(0, len)) {
        best = len;
        break;
      }
    }
  }
  return best;
}

std::string StopMatcher::push(std::string_view text) {
  if (stopped_) return {};
  pending_.append(text);
  if (stops_.empty()) return std::exchange(pending_, {});
  // Generation stops at the first stop string to be complete as the text grows, so the match
  // that ends first wins (ties: the longer one). That does not depend on how the text was cut
  // into pieces: one piece may complete several stop strings.
  size_t best_pos = std::string::npos, best_end = std::string::npos;
  const std::string* best = nullptr;
  for (const std::string& stop : stops_) {
    const size_t pos = pending_.find(stop);
    if (pos == std::string::npos) continue;
    const size_t end = pos + stop.size();
    if (end < best_end || (end == best_end && pos < best_pos)) {
      best_pos = pos;
      best_end = end;
      best = &stop;
    }
  }
  if (best != nullptr) {
    stopped_ = true;
    matched_ = *best;
    std::string out = pending_.substr(0, best_pos);
    pending_.clear();
    return out;
  }
  const size_t keep = partial_match_length();
  std::string out = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string StopMatcher::flush() {
  if (stopped_) return {};
  return std::exchange(pending_, {});
}

}  // namespace ember::server
