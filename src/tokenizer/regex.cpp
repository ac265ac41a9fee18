#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace ember::tok {

namespace {
// Unicode White_Space: \t..\r, NEL and the separators (Zs, Zl, Zp). PCRE2's own \s leaves NEL out.
constexpr std::string_view kSpaceClassBody = "\\t-\\r\\x{85}\\p{Z}";

pcre2_code* as_code(void* p) { return static_cast<pcre2_code*>(p); }
}  // namespace

std::string translate_oniguruma_pattern(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 32);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char e = p[i + 1];
      ++i;
      if (e == 's') {
        if (in_class) {
          out += kSpaceClassBody;
        } else {
          out += '[';
          out += kSpaceClassBody;
          out += ']';
        }
      } else if (e == 'S' && !in_class) {
        out += "[^";
        out += kSpaceClassBody;
        out += ']';
      } else {
        out += '\\';
        out += e;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

std::string Regex::escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

Result<std::unique_ptr<Regex>> Regex::compile(const std::string& pattern) {
  std::string translated = translate_oniguruma_pattern(pattern);
  int err = 0;
  PCRE2_SIZE err_off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof(buf));
    return Status::errorf("regex '{}' does not compile at offset {}: {}", pattern, err_off,
                          reinterpret_cast<const char*>(buf));
  }
  // JIT is an optimization; without it pcre2_match interprets the same pattern.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  std::unique_ptr<Regex> r(new Regex());
  r->pattern_ = pattern;
  r->code_ = code;
  return r;
}

Regex::~Regex() { pcre2_code_free(as_code(code_)); }

void Regex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(as_code(code_), nullptr);
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos <= text.size()) {
    int rc = pcre2_match(as_code(code_), subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
    // A JIT resource limit (its stack) is not "no match": retry in the interpreter, whose
    // limits are far higher. What still fails is left as a gap (plain text), never dropped.
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH)
      rc = pcre2_match(as_code(code_), subject, text.size(), pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, nullptr);
    if (rc < 0) break;
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    size_t s = ov[0], e = ov[1];
    if (e > s) {
      out.emplace_back(s, e);
      pos = e;
    } else {
      // Empty match: step over one whole character.
      if (s >= text.size()) break;
      pos = s + 1;
      while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
    }
  }
  pcre2_match_data_free(md);
}

}  // namespace ember::tok
