#pragma once
// Python-like string semantics on UTF-8 (the codec itself is core/utf8.h): Jinja templates index, slice and
// measure strings in code points, and classify whitespace and case the way Python's
// str methods do.
#include "core/utf8.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ember::chat {

// True when every byte is ASCII (fast paths skip decoding).
bool is_ascii(std::string_view s);
// Decodes well-formed UTF-8 (callers validate input at the boundary).
std::u32string utf8_decode(std::string_view s);
std::string utf8_encode(std::u32string_view s);

// Python's str.isspace() for one code point.
bool py_isspace(char32_t cp);
bool py_isdigit(char32_t cp);
bool py_isalpha(char32_t cp);
bool py_islower(char32_t cp);
bool py_isupper(char32_t cp);
// Python's full case mappings (a code point may map to several, e.g. "ß".upper() == "SS").
void py_append_upper(std::u32string& out, char32_t cp);
void py_append_lower(std::u32string& out, char32_t cp);
// Python str.upper() / str.lower() / str.title() / str.capitalize() / str.swapcase().
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_title(std::string_view s);
std::string py_capitalize(std::string_view s);

}  // namespace ember::chat
