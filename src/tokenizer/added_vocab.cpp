#include "tokenizer/added_vocab.h"

#include "core/utf8.h"

#include <unicode/uchar.h>

#include <algorithm>

namespace ember::tok {

namespace {
// Rust regex \w (HF's single_word test): Alphabetic, marks, decimal digits, connector
// punctuation, join controls.
bool is_word_char(char32_t cp) {
  if (cp < 0x80) return std::isalnum(static_cast<int>(cp)) || cp == '_';
  if (cp == 0x200C || cp == 0x200D) return true;
  auto c = static_cast<UChar32>(cp);
  int8_t cat = u_charType(c);
  return u_hasBinaryProperty(c, UCHAR_ALPHABETIC) || cat == U_NON_SPACING_MARK || cat == U_ENCLOSING_MARK ||
         cat == U_COMBINING_SPACING_MARK || cat == U_DECIMAL_DIGIT_NUMBER || cat == U_CONNECTOR_PUNCTUATION;
}

size_t prev_char_start(std::string_view s, size_t end) {
  size_t p = end - 1;
  while (p > 0 && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
  return p;
}

bool ends_with_word(std::string_view s, size_t end) {
  if (end == 0) return false;
  size_t p = prev_char_start(s, end);
  return is_word_char(next_code_point(s, p));
}

bool starts_with_word(std::string_view s, size_t begin) {
  if (begin >= s.size()) return false;
  size_t p = begin;
  return is_word_char(next_code_point(s, p));
}

// Start of the run of whitespace that ends at `end`.
size_t whitespace_run_start(std::string_view s, size_t end) {
  while (end > 0) {
    size_t p = prev_char_start(s, end);
    size_t q = p;
    if (!is_unicode_whitespace(next_code_point(s, q))) break;
    end = p;
  }
  return end;
}

// End of the run of whitespace that starts at `begin`.
size_t whitespace_run_end(std::string_view s, size_t begin) {
  while (begin < s.size()) {
    size_t q = begin;
    if (!is_unicode_whitespace(next_code_point(s, q))) break;
    begin = q;
  }
  return begin;
}
}  // namespace

void AddedTokenMatcher::build(const std::vector<AddedToken>& tokens, const std::vector<std::string>& patterns) {
  tokens_ = tokens;
  nodes_.clear();
  nodes_.push_back(Node{});
  root_.assign(256, -1);
  for (size_t i = 0; i < patterns.size(); ++i) {
    const std::string& p = patterns[i];
    if (p.empty()) continue;
    int32_t node = 0;
    for (size_t k = 0; k < p.size(); ++k) {
      auto b = static_cast<unsigned char>(p[k]);
      int32_t c = k == 0 ? root_[b] : child(node, b);
      if (c < 0) {
        c = static_cast<int32_t>(nodes_.size());
        nodes_.push_back(Node{});
        if (k == 0) {
          root_[b] = c;
        } else {
          auto& ch = nodes_[node].children;
          ch.insert(std::lower_bound(ch.begin(), ch.end(), std::make_pair(b, int32_t{-1})), {b, c});
        }
      }
      node = c;
    }
    // The first token with a given pattern wins, as the first pattern does in aho-corasick.
    if (nodes_[node].token < 0) nodes_[node].token = static_cast<int32_t>(i);
  }
}

int32_t AddedTokenMatcher::child(int32_t node, unsigned char b) const {
  const auto& ch = nodes_[node].children;
  auto it = std::lower_bound(ch.begin(), ch.end(), std::make_pair(b, int32_t{-1}));
  return (it != ch.end() && it->first == b) ? it->second : -1;
}

void AddedTokenMatcher::split(std::string_view text, bool skip_special, std::vector<Span>& out) const {
  size_t plain_start = 0;  // end of the last emitted span
  size_t pos = 0;
  while (pos < text.size()) {
    int32_t node = root_.empty() ? -1 : root_[static_cast<unsigned char>(text[pos])];
    int32_t best = -1;
    size_t best_end = 0;
    for (size_t k = pos + 1; node >= 0; ++k) {
      if (nodes_[node].token >= 0) {
        best = nodes_[node].token;
        best_end = k;
      }
      if (k >= text.size()) break;
      node = child(node, static_cast<unsigned char>(text[k]));
    }
    if (best < 0) {
      ++pos;
      continue;
    }
    // A match is consumed even when its flags then reject it (HF iterates the matches once).
    const AddedToken& t = tokens_[best];
    size_t start = pos, stop = best_end;
    pos = best_end;
    if (skip_special && t.special) continue;
    if (t.single_word && (ends_with_word(text, start) || starts_with_word(text, stop))) continue;
    if (t.lstrip) start = std::max(whitespace_run_start(text, start), plain_start);
    if (t.rstrip) stop = whitespace_run_end(text, stop);
    if (plain_start < start) out.push_back({plain_start, start, -1});
    out.push_back({start, stop, t.id});
    plain_start = stop;
    pos = std::max(pos, stop);
  }
  if (plain_start < text.size()) out.push_back({plain_start, text.size(), -1});
}

}  // namespace ember::tok
