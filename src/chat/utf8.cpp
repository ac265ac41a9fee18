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

std::u32string utf8_decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out.push_back(next_code_point(s, i));
  return out;
}

std::string utf8_encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : s) append_utf8(out, cp);
  return out;
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
