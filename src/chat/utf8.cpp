#include "chat/utf8.h"

#include <clocale>
#include <cwctype>
#include <locale.h>

namespace ember::chat {
namespace {

// The C.UTF-8 locale gives Unicode case tables without touching the process locale.
// Created once and never modified, so sharing it across threads is safe.
locale_t utf8_locale() {
  static const locale_t loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(0));
  return loc;
}

char32_t simple_upper(char32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') ? cp - 32 : cp;
  locale_t loc = utf8_locale();
  return loc ? static_cast<char32_t>(towupper_l(static_cast<wint_t>(cp), loc)) : cp;
}

char32_t simple_lower(char32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  locale_t loc = utf8_locale();
  return loc ? static_cast<char32_t>(towlower_l(static_cast<wint_t>(cp), loc)) : cp;
}

// Title case differs from upper case only for the Latin digraphs.
char32_t simple_title(char32_t cp) {
  switch (cp) {
    case 0x01C4: case 0x01C5: case 0x01C6: return 0x01C5;
    case 0x01C7: case 0x01C8: case 0x01C9: return 0x01C8;
    case 0x01CA: case 0x01CB: case 0x01CC: return 0x01CB;
    case 0x01F1: case 0x01F2: case 0x01F3: return 0x01F2;
    default: return simple_upper(cp);
  }
}

bool is_titlecase(char32_t cp) {
  return cp == 0x01C5 || cp == 0x01C8 || cp == 0x01CB || cp == 0x01F2;
}

bool is_cased(char32_t cp) { return py_islower(cp) || py_isupper(cp) || is_titlecase(cp); }

}  // namespace

bool is_ascii(std::string_view s) {
  for (unsigned char c : s)
    if (c >= 0x80) return false;
  return true;
}

bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) { ++i; continue; }
    int len = 0;
    char32_t cp = 0;
    if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
    else return false;
    if (i + len > n) return false;
    for (int k = 1; k < len; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Reject overlong forms, surrogates and values past U+10FFFF.
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000)) return false;
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

std::u32string utf8_decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    char32_t cp;
    int len;
    if (c < 0x80) { cp = c; len = 1; }
    else if ((c & 0xE0) == 0xC0) { cp = c & 0x1F; len = 2; }
    else if ((c & 0xF0) == 0xE0) { cp = c & 0x0F; len = 3; }
    else { cp = c & 0x07; len = 4; }
    for (int k = 1; k < len && i + k < s.size(); ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += len;
  }
  return out;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string utf8_encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : s) utf8_append(out, cp);
  return out;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) ++n;
  return n;
}

bool py_isspace(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F);
  switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

bool py_isdigit(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  locale_t loc = utf8_locale();
  return loc && iswdigit_l(static_cast<wint_t>(cp), loc);
}

bool py_isalpha(char32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
  locale_t loc = utf8_locale();
  return loc && iswalpha_l(static_cast<wint_t>(cp), loc);
}

bool py_islower(char32_t cp) {
  if (cp < 0x80) return cp >= 'a' && cp <= 'z';
  if (cp == 0xDF) return true;  // ß has no single-code-point upper case but is lower case
  return simple_upper(cp) != cp && !is_titlecase(cp);
}

bool py_isupper(char32_t cp) {
  if (cp < 0x80) return cp >= 'A' && cp <= 'Z';
  return simple_lower(cp) != cp && !is_titlecase(cp);
}

void py_append_upper(std::u32string& out, char32_t cp) {
  if (cp == 0xDF) {  // ß -> SS: the one full mapping common in real text
    out.append(U"SS");
    return;
  }
  out.push_back(simple_upper(cp));
}

void py_append_lower(std::u32string& out, char32_t cp) {
  if (cp == 0x130) {  // İ -> i + combining dot above
    out.append(U"i\u0307");
    return;
  }
  out.push_back(simple_lower(cp));
}

std::string py_upper(std::string_view s) {
  if (is_ascii(s)) {
    std::string r(s);
    for (char& c : r)
      if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
    return r;
  }
  std::u32string out;
  for (char32_t cp : utf8_decode(s)) py_append_upper(out, cp);
  return utf8_encode(out);
}

std::string py_lower(std::string_view s) {
  if (is_ascii(s)) {
    std::string r(s);
    for (char& c : r)
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
    return r;
  }
  std::u32string out;
  for (char32_t cp : utf8_decode(s)) py_append_lower(out, cp);
  return utf8_encode(out);
}

std::string py_title(std::string_view s) {
  std::u32string out;
  bool prev_cased = false;
  for (char32_t cp : utf8_decode(s)) {
    if (prev_cased) {
      py_append_lower(out, cp);
    } else if (cp == 0xDF) {
      out.append(U"Ss");
    } else {
      out.push_back(simple_title(cp));
    }
    prev_cased = is_cased(cp);
  }
  return utf8_encode(out);
}

std::string py_capitalize(std::string_view s) {
  std::u32string in = utf8_decode(s);
  std::u32string out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (i == 0) {
      if (in[0] == 0xDF) out.append(U"Ss");
      else out.push_back(simple_title(in[0]));
    } else {
      py_append_lower(out, in[i]);
    }
  }
  return utf8_encode(out);
}

}  // namespace ember::chat
