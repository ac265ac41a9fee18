#pragma once
// A compiled PCRE2 pattern (UTF + UCP, JIT when available) that lists all non-overlapping
// matches in a string. Patterns written for Oniguruma (HF tokenizers) are translated so that
// \s and \S mean Unicode White_Space, as they do there.
#include "core/status.h"

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ember::tok {

class Regex {
 public:
  static Result<std::unique_ptr<Regex>> compile(const std::string& pattern);
  // A pattern matching the literal string s.
  static std::string escape(std::string_view s);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends [start, end) byte offsets of all non-overlapping matches (empty matches skipped).
  // text must be valid UTF-8.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;
  const std::string& pattern() const { return pattern_; }

 private:
  Regex() = default;
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*, kept opaque so pcre2.h stays out of headers
};

// Rewrites \s / \S (outside and inside character classes) to explicit White_Space classes.
std::string translate_oniguruma_pattern(std::string_view pattern);

}  // namespace ember::tok
