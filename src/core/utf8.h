#pragma once
// UTF-8 helpers shared by the tokenizer and the chat templates: validation with U+FFFD substitution (the
// "maximal subpart" policy of Unicode 15 §3.9, which Python's errors="replace" and Rust's
// from_utf8_lossy both follow), code point iteration, and the Unicode White_Space property.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ember {

// Length in bytes of the well-formed UTF-8 sequence starting at s[pos], or 0 when the bytes
// there are not a complete, well-formed sequence.
size_t utf8_sequence_length(std::string_view s, size_t pos);

// Length of the maximal subpart of an ill-formed sequence starting at s[pos] (>= 1): the bytes
// that one U+FFFD replaces.
size_t utf8_invalid_length(std::string_view s, size_t pos);

bool is_valid_utf8(std::string_view s);

// s with every maximal ill-formed subsequence replaced by U+FFFD.
std::string sanitize_utf8(std::string_view s);

// Decodes the code point at s[pos] (s must be valid UTF-8 there) and advances pos.
char32_t next_code_point(std::string_view s, size_t& pos);

void append_utf8(std::string& out, char32_t cp);

size_t count_code_points(std::string_view s);

// Unicode White_Space (what Rust's char::is_whitespace and the regex \s of HF tokenizers use).
bool is_unicode_whitespace(char32_t cp);

}  // namespace ember::tok
