#include "sample/json_constraint.h"

#include "core/utf8.h"
#include "sample/logits_processors.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ember {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Greedy rows try this many maxima before masking the whole row.
constexpr int kGreedyTries = 16;
}  // namespace

JsonVocab::JsonVocab(std::vector<std::string> token_bytes) : bytes_(std::move(token_bytes)), plain_(bytes_.size(), 0) {
  for (size_t i = 0; i < bytes_.size(); ++i) {
    const std::string& b = bytes_[i];
    plain_[i] = !b.empty() && is_valid_utf8(b) && std::all_of(b.begin(), b.end(), [](char ch) {
      const auto c = static_cast<unsigned char>(ch);
      return c >= 0x20 && c != '"' && c != '\\';
    });
  }
}

bool JsonVocab::allows(const JsonMatcher& m, int32_t id) const {
  if (id < 0 || id >= size()) return false;
  if (plain_[static_cast<size_t>(id)] && m.in_plain_string()) return true;
  const std::string& b = bytes_[static_cast<size_t>(id)];
  return !b.empty() && m.accepts(b);
}

bool json_state_of(const JsonVocab& vocab, const JsonSchema* schema, std::span<const int32_t> output_ids,
                   JsonMatcher& m) {
  m = JsonMatcher(schema);
  for (int32_t id : output_ids) {
    if (id < 0 || id >= vocab.size() || vocab.bytes(id).empty() || !m.feed(vocab.bytes(id))) return false;
  }
  return true;
}

void constrain_to_json(std::span<float> x, const JsonVocab& vocab, const JsonSchema* schema,
                       std::span<const int32_t> output_ids, std::span<const int32_t> end_ids, bool greedy) {
  JsonMatcher m;
  const bool valid = json_state_of(vocab, schema, output_ids, m);
  // A broken prefix (not produced under this constraint) can only end.
  const bool end_ok = !valid || m.complete();
  auto in_row = [&](int32_t id) { return id >= 0 && static_cast<size_t>(id) < x.size(); };
  auto is_end = [&](int32_t id) { return std::find(end_ids.begin(), end_ids.end(), id) != end_ids.end(); };
  // Most tokens fail on their first byte: judge the 256 first bytes once (a token whose first
  // byte cannot come next is out without a walk over its bytes).
  bool first_ok[256];
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    first_ok[b] = valid && m.accepts(std::string_view(&c, 1));
  }
  // Whether a token that is not an end id may come next.
  auto text_ok = [&](int32_t id) {
    if (id >= vocab.size() || vocab.bytes(id).empty() || !first_ok[static_cast<uint8_t>(vocab.bytes(id)[0])]) return false;
    return vocab.allows(m, id);
  };
  if (greedy) {
    for (int i = 0; i < kGreedyTries; ++i) {
      const int32_t t = argmax(x);
      if (t < 0) break;
      if (is_end(t) ? end_ok : text_ok(t)) return;
      x[static_cast<size_t>(t)] = kNegInf;
    }
  }
  // The end ids are few: set aside, so the pass over the vocabulary never looks them up.
  std::vector<float> end_logits(end_ids.size(), kNegInf);
  for (size_t e = 0; e < end_ids.size(); ++e)
    if (in_row(end_ids[e])) end_logits[e] = x[static_cast<size_t>(end_ids[e])];
  int64_t n_allowed = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] == kNegInf) continue;
    if (text_ok(static_cast<int32_t>(i))) ++n_allowed;
    else x[i] = kNegInf;
  }
  for (size_t e = 0; e < end_ids.size(); ++e) {  // (a stop id may have text the pass allowed)
    if (!in_row(end_ids[e])) continue;
    float& v = x[static_cast<size_t>(end_ids[e])];
    n_allowed -= v != kNegInf;
    v = end_ok ? end_logits[e] : kNegInf;
    n_allowed += v != kNegInf;
  }
  if (n_allowed == 0 && !end_ids.empty() && in_row(end_ids[0])) x[static_cast<size_t>(end_ids[0])] = 0.0f;
}

}  // namespace ember
