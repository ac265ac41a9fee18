#include "tokenizer/tokenizer.h"

namespace ember {

namespace {
// How far back a decode window may start (bounds the cost of a push).
constexpr size_t kMaxLookback = 32;

// U+FFFD at the end of decoded text means an incomplete sequence that later ids may complete.
bool ends_incomplete(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}
}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {}

std::string IncrementalDetokenizer::push(int32_t id) {
  ids_.push_back(id);
  // Byte fallback decodes a run of <0xNN> tokens as one byte string, all U+FFFD if any part is
  // ill-formed, so a later byte can still change text that looks complete: wait for the run to end.
  if (tokenizer_.is_byte_fallback_token(id)) return {};
  // Decode a window that starts a few ids before the unemitted ones, so that decoders which
  // treat the first token specially (a stripped leading space) see the same context as a full
  // decode, and diff it against the same window without the new ids.
  std::vector<int32_t> prefix(ids_.begin() + static_cast<std::ptrdiff_t>(prefix_offset_),
                              ids_.begin() + static_cast<std::ptrdiff_t>(read_offset_));
  std::vector<int32_t> window(ids_.begin() + static_cast<std::ptrdiff_t>(prefix_offset_), ids_.end());
  std::string before = tokenizer_.decode(prefix, skip_special_);
  std::string now = tokenizer_.decode(window, skip_special_);
  if (now.size() <= before.size() || ends_incomplete(now) || now.compare(0, before.size(), before) != 0) return {};
  std::string out = now.substr(before.size());
  // Next window: start a little before the new read offset, at an id that decodes on its own to
  // whole characters and to some text (so a first-token rule, like a stripped leading space,
  // applies to it and not to later ids) and is not a byte-fallback token (whose run would be cut).
  // Found none close enough: keep the current start, which is such an id (or 0).
  size_t start = ids_.size();
  bool found = false;
  for (size_t steps = 0; start > prefix_offset_ && steps < kMaxLookback; ++steps) {
    --start;
    if (tokenizer_.is_byte_fallback_token(ids_[start])) continue;
    std::string solo = tokenizer_.decode({ids_[start]}, skip_special_);
    if (!solo.empty() && solo.find("\xEF\xBF\xBD") == std::string::npos) {
      found = true;
      break;
    }
  }
  if (!found) start = prefix_offset_;
  prefix_offset_ = start;
  read_offset_ = ids_.size();
  return out;
}

std::string IncrementalDetokenizer::flush() {
  std::vector<int32_t> prefix(ids_.begin() + static_cast<std::ptrdiff_t>(prefix_offset_),
                              ids_.begin() + static_cast<std::ptrdiff_t>(read_offset_));
  std::vector<int32_t> window(ids_.begin() + static_cast<std::ptrdiff_t>(prefix_offset_), ids_.end());
  std::string before = tokenizer_.decode(prefix, skip_special_);
  std::string now = tokenizer_.decode(window, skip_special_);
  prefix_offset_ = read_offset_ = ids_.size();
  if (now.size() <= before.size() || now.compare(0, before.size(), before) != 0) return {};
  return now.substr(before.size());
}

}  // namespace ember
