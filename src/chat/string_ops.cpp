#include "chat/string_ops.h"

#include <algorithm>

#include "chat/utf8.h"

namespace ember::chat {
namespace {

bool is_line_break(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 ||
         c == 0x2028 || c == 0x2029;
}

}  // namespace

std::string py_strip(const std::string& s, const std::string* chars, bool left, bool right) {
  std::u32string cps = utf8_decode(s);
  std::u32string set = chars ? utf8_decode(*chars) : std::u32string();
  auto strip_it = [&](char32_t c) {
    return chars ? set.find(c) != std::u32string::npos : py_isspace(c);
  };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip_it(cps[b])) ++b;
  if (right)
    while (e > b && strip_it(cps[e - 1])) --e;
  return utf8_encode(std::u32string_view(cps).substr(b, e - b));
}

std::vector<std::string> py_split(const std::string& s, const std::string* sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> out;
  if (maxsplit < 0) maxsplit = INT64_MAX;
  if (sep) {
    if (!from_right) {
      size_t start = 0;
      while (maxsplit-- > 0) {
        size_t pos = s.find(*sep, start);
        if (pos == std::string::npos) break;
        out.push_back(s.substr(start, pos - start));
        start = pos + sep->size();
      }
      out.push_back(s.substr(start));
    } else {
      size_t end = s.size();
      while (maxsplit-- > 0 && end >= sep->size()) {
        size_t pos = s.rfind(*sep, end - sep->size());
        if (pos == std::string::npos) break;
        out.push_back(s.substr(pos + sep->size(), end - pos - sep->size()));
        end = pos;
      }
      out.push_back(s.substr(0, end));
      std::reverse(out.begin(), out.end());
    }
    return out;
  }
  std::u32string cps = utf8_decode(s);
  const size_t n = cps.size();
  if (!from_right) {
    size_t i = 0;
    while (true) {
      while (i < n && py_isspace(cps[i])) ++i;
      if (i >= n) break;
      if (maxsplit-- <= 0) {
        out.push_back(utf8_encode(std::u32string_view(cps).substr(i)));
        break;
      }
      size_t j = i;
      while (j < n && !py_isspace(cps[j])) ++j;
      out.push_back(utf8_encode(std::u32string_view(cps).substr(i, j - i)));
      i = j;
    }
  } else {
    size_t e = n;
    while (true) {
      while (e > 0 && py_isspace(cps[e - 1])) --e;
      if (e == 0) break;
      if (maxsplit-- <= 0) {
        out.push_back(utf8_encode(std::u32string_view(cps).substr(0, e)));
        break;
      }
      size_t b = e;
      while (b > 0 && !py_isspace(cps[b - 1])) --b;
      out.push_back(utf8_encode(std::u32string_view(cps).substr(b, e - b)));
      e = b;
    }
    std::reverse(out.begin(), out.end());
  }
  return out;
}

std::vector<std::string> py_splitlines(const std::string& s, bool keepends) {
  std::u32string cps = utf8_decode(s);
  std::vector<std::string> out;
  size_t i = 0, start = 0;
  while (i < cps.size()) {
    if (!is_line_break(cps[i])) {
      ++i;
      continue;
    }
    size_t eol = i + ((cps[i] == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ? 2 : 1);
    out.push_back(utf8_encode(std::u32string_view(cps).substr(start, (keepends ? eol : i) - start)));
    start = i = eol;
  }
  if (start < cps.size()) out.push_back(utf8_encode(std::u32string_view(cps).substr(start)));
  return out;
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& replacement, int64_t count) {
  if (count < 0) count = INT64_MAX;
  std::string out;
  if (old.empty()) {
    // Python inserts the replacement before every character and at the end.
    std::u32string cps = utf8_decode(s);
    for (char32_t c : cps) {
      if (count-- > 0) out += replacement;
      append_utf8(out, c);
    }
    if (count-- > 0) out += replacement;
    return out;
  }
  size_t start = 0;
  while (count-- > 0) {
    size_t pos = s.find(old, start);
    if (pos == std::string::npos) break;
    out.append(s, start, pos - start);
    out += replacement;
    start = pos + old.size();
  }
  out.append(s, start, std::string::npos);
  return out;
}

int64_t py_count(const std::string& s, const std::string& sub) {
  if (sub.empty()) return static_cast<int64_t>(count_code_points(s)) + 1;
  int64_t n = 0;
  for (size_t pos = s.find(sub); pos != std::string::npos; pos = s.find(sub, pos + sub.size())) ++n;
  return n;
}

std::string py_justify(const std::string& s, int64_t width, const std::string& fill, char how) {
  int64_t len = static_cast<int64_t>(count_code_points(s));
  if (width <= len) return s;
  int64_t marg = width - len;
  int64_t left = how == '<' ? 0 : how == '>' ? marg : marg / 2 + (marg & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = 0; i < marg - left; ++i) out += fill;
  return out;
}

std::string py_zfill(const std::string& s, int64_t width) {
  int64_t len = static_cast<int64_t>(count_code_points(s));
  if (width <= len) return s;
  std::string zeros(static_cast<size_t>(width - len), '0');
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) return s.substr(0, 1) + zeros + s.substr(1);
  return zeros + s;
}

}  // namespace ember::chat
