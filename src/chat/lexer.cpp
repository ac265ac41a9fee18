#include "chat/lexer.h"

#include <fmt/format.h>

#include <cstring>

#include "chat/utf8.h"

namespace ember::chat {
namespace {

// Length in bytes of the Python whitespace character at `pos`, or 0.
size_t space_at(std::string_view s, size_t pos) {
  if (pos >= s.size()) return 0;
  unsigned char c = static_cast<unsigned char>(s[pos]);
  if (c < 0x80) return py_isspace(c) ? 1 : 0;
  size_t len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : 4;
  if (pos + len > s.size()) return 0;
  std::u32string cp = utf8_decode(s.substr(pos, len));
  return (!cp.empty() && py_isspace(cp[0])) ? len : 0;
}

size_t skip_spaces(std::string_view s, size_t pos) {
  while (size_t n = space_at(s, pos)) pos += n;
  return pos;
}

// Python's str.rstrip() with no arguments.
std::string_view rstrip_spaces(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    if (space_at(s, start) != end - start) break;
    end = start;
  }
  return s.substr(0, end);
}

bool all_spaces(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    size_t n = space_at(s, pos);
    if (n == 0) return false;
    pos += n;
  }
  return true;
}

int count_newlines(std::string_view s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// Matches `(\d+_)*\d+` at pos; returns the end or npos.
size_t match_digits(std::string_view s, size_t pos) {
  if (pos >= s.size() || !is_digit(s[pos])) return std::string_view::npos;
  size_t i = pos;
  while (true) {
    while (i < s.size() && is_digit(s[i])) ++i;
    if (i + 1 < s.size() && s[i] == '_' && is_digit(s[i + 1])) { ++i; continue; }
    return i;
  }
}

std::string strip_underscores(std::string_view s) {
  std::string out;
  for (char c : s)
    if (c != '_') out.push_back(c);
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string_view src) : src_(src) {}

  Result<std::vector<Token>> run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      size_t tag = find_tag(pos_);
      if (tag == std::string_view::npos) {
        emit_data(src_.substr(pos_));
        pos_ = src_.size();
        break;
      }
      char kind = src_[tag + 1];
      size_t after = tag + 2;
      char sign = (after < src_.size() && (src_[after] == '-' || src_[after] == '+')) ? src_[after] : 0;
      size_t raw_end = kind == '%' ? match_raw_begin(tag) : 0;
      std::string_view text = src_.substr(pos_, tag - pos_);
      if (sign == '-') {
        std::string_view kept = rstrip_spaces(text);
        pending_newlines_ = count_newlines(text.substr(kept.size()));
        text = kept;
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: drop the indentation before a block or comment tag that starts a line.
        size_t nl = text.rfind('\n');
        size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size() && all_spaces(text.substr(l_pos)))
          text = text.substr(0, l_pos);
      }
      emit_data(text);
      line_ += pending_newlines_;
      pending_newlines_ = 0;
      if (raw_end) {
        line_ += count_newlines(src_.substr(tag, raw_end - tag));
        pos_ = raw_end;
        EMBER_ASSIGN_OR_RETURN(line_starting, lex_raw_body(src_[raw_end - 1] == '\n'));
        continue;
      }
      pos_ = after + (sign ? 1 : 0);
      if (kind == '#') {
        EMBER_ASSIGN_OR_RETURN(line_starting, lex_comment());
      } else {
        EMBER_ASSIGN_OR_RETURN(line_starting, lex_tag(kind == '%'));
      }
    }
    tokens_.push_back(Token{TokenType::kEof, "", 0, 0, line_});
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string_view::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string_view::npos;
  }

  Status fail(const std::string& what) const { return Status::errorf("line {}: {}", line_, what); }

  void emit_data(std::string_view text) {
    if (text.empty()) return;
    tokens_.push_back(Token{TokenType::kData, std::string(text), 0, 0, line_});
    line_ += count_newlines(text);
  }

  void push(TokenType type, std::string text) { tokens_.push_back(Token{type, std::move(text), 0, 0, line_}); }

  // `{%(-|+|)\s*raw\s*(-%}\s*|%})` at pos; returns the end of the match or 0.
  size_t match_raw_begin(size_t pos) const {
    size_t i = pos + 2;
    if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) ++i;
    i = skip_spaces(src_, i);
    if (src_.substr(i, 3) != "raw") return 0;
    i = skip_spaces(src_, i + 3);
    if (src_.substr(i, 3) == "-%}") return skip_spaces(src_, i + 3);
    if (src_.substr(i, 2) == "%}") return i + 2;
    return 0;
  }

  // Closing `%}` of a block: '+%}' keeps, '-%}' strips all following whitespace and a
  // plain '%}' drops one newline (trim_blocks). Returns the match end or npos.
  size_t match_block_end(size_t i) const {
    if (src_.substr(i, 3) == "+%}") return i + 3;
    if (src_.substr(i, 3) == "-%}") return skip_spaces(src_, i + 3);
    if (src_.substr(i, 2) == "%}") return (i + 2 < src_.size() && src_[i + 2] == '\n') ? i + 3 : i + 2;
    return std::string_view::npos;
  }

  // Advances past a tag end that ended at `end`, reporting whether it ended a line.
  bool consume_to(size_t end) {
    line_ += count_newlines(src_.substr(pos_, end - pos_));
    bool ends_line = end > 0 && src_[end - 1] == '\n';
    pos_ = end;
    return ends_line;
  }

  Result<bool> lex_raw_body(bool line_starting) {
    // Body runs to the first `{%(-|+|)\s*endraw\s*(+%}|-%}\s*|%}\n?)`.
    for (size_t i = src_.find("{%", pos_); i != std::string_view::npos; i = src_.find("{%", i + 1)) {
      size_t j = i + 2;
      char sign = (j < src_.size() && (src_[j] == '-' || src_[j] == '+')) ? src_[j] : 0;
      if (sign) ++j;
      j = skip_spaces(src_, j);
      if (src_.substr(j, 6) != "endraw") continue;
      j = skip_spaces(src_, j + 6);
      size_t end = match_block_end(j);
      if (end == std::string_view::npos) continue;
      std::string_view text = src_.substr(pos_, i - pos_);
      if (sign == '-') {
        text = rstrip_spaces(text);
      } else if (sign != '+') {
        size_t nl = text.rfind('\n');
        size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size() && all_spaces(text.substr(l_pos))) text = text.substr(0, l_pos);
      }
      int body_lines = count_newlines(src_.substr(pos_, i - pos_));
      emit_data(text);
      line_ = line_ - count_newlines(text) + body_lines;
      pos_ = i;
      return consume_to(end);
    }
    return fail("missing end of raw directive");
  }

  Result<bool> lex_comment() {
    for (size_t i = src_.find("#}", pos_); i != std::string_view::npos; i = src_.find("#}", i + 1)) {
      // A '-' or '+' right before "#}" belongs to the closing tag.
      char sign = (i > pos_ && (src_[i - 1] == '-' || src_[i - 1] == '+')) ? src_[i - 1] : 0;
      size_t end = i + 2;
      if (sign == '-') end = skip_spaces(src_, end);
      else if (!sign && end < src_.size() && src_[end] == '\n') ++end;
      return consume_to(end);
    }
    return fail("missing end of comment tag");
  }

  Result<bool> lex_tag(bool block) {
    push(block ? TokenType::kBlockBegin : TokenType::kVarBegin, "");
    std::vector<char> balance;
    while (true) {
      if (pos_ >= src_.size()) return fail(block ? "unexpected end of template inside a {% %} tag"
                                                 : "unexpected end of template inside a {{ }} tag");
      if (balance.empty()) {
        size_t end = std::string_view::npos;
        if (block) {
          end = match_block_end(pos_);
        } else if (src_.substr(pos_, 3) == "-}}") {
          end = skip_spaces(src_, pos_ + 3);
        } else if (src_.substr(pos_, 2) == "}}") {
          end = pos_ + 2;
        }
        if (end != std::string_view::npos) {
          push(block ? TokenType::kBlockEnd : TokenType::kVarEnd, "");
          return consume_to(end);
        }
      }
      if (size_t n = space_at(src_, pos_)) {
        if (src_[pos_] == '\n') ++line_;
        pos_ += n;
        continue;
      }
      EMBER_RETURN_IF_ERROR(lex_expression_token(balance));
    }
  }

  Status lex_expression_token(std::vector<char>& balance) {
    char c = src_[pos_];
    if (is_digit(c)) return lex_number();
    if (is_name_start(c)) {
      size_t end = pos_;
      while (end < src_.size() && is_name_char(src_[end])) ++end;
      if (end < src_.size() && static_cast<unsigned char>(src_[end]) >= 0x80)
        return fail("non-ASCII identifiers are not supported");
      push(TokenType::kName, std::string(src_.substr(pos_, end - pos_)));
      pos_ = end;
      return Status::ok();
    }
    if (c == '\'' || c == '"') return lex_string(c);
    static const char* const kTwoChar[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : kTwoChar) {
      if (src_.substr(pos_, 2) == op) {
        push(TokenType::kOperator, op);
        pos_ += 2;
        return Status::ok();
      }
    }
    if (std::strchr("+-/*%~[](){}><=.:|,;", c) != nullptr) {
      if (c == '(' || c == '[' || c == '{') {
        balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
      } else if (c == ')' || c == ']' || c == '}') {
        if (balance.empty()) return fail(fmt::format("unexpected '{}'", c));
        if (balance.back() != c) return fail(fmt::format("unexpected '{}', expected '{}'", c, balance.back()));
        balance.pop_back();
      }
      push(TokenType::kOperator, std::string(1, c));
      ++pos_;
      return Status::ok();
    }
    if (static_cast<unsigned char>(c) >= 0x80) return fail("non-ASCII identifiers are not supported");
    return fail(fmt::format("unexpected char '{}'", c));
  }

  Status lex_number() {
    // Float first, as jinja2 does: digits with a fraction and/or an exponent.
    size_t int_end = match_digits(src_, pos_);
    bool after_dot = pos_ > 0 && src_[pos_ - 1] == '.';
    if (!after_dot) {
      size_t i = int_end;
      bool has_frac = false;
      if (i < src_.size() && src_[i] == '.') {
        size_t f = match_digits(src_, i + 1);
        if (f != std::string_view::npos) { i = f; has_frac = true; }
      }
      size_t exp_end = std::string_view::npos;
      if (i < src_.size() && (src_[i] == 'e' || src_[i] == 'E')) {
        size_t j = i + 1;
        if (j < src_.size() && (src_[j] == '+' || src_[j] == '-')) ++j;
        exp_end = match_digits(src_, j);
      }
      if (exp_end != std::string_view::npos) i = exp_end;
      if (has_frac || exp_end != std::string_view::npos) {
        std::string text = strip_underscores(src_.substr(pos_, i - pos_));
        Token t{TokenType::kFloat, text, 0, std::strtod(text.c_str(), nullptr), line_};
        tokens_.push_back(std::move(t));
        pos_ = i;
        return Status::ok();
      }
    }
    // Integers: 0b / 0o / 0x prefixes, decimals, and zero.
    char p = pos_ + 1 < src_.size() ? static_cast<char>(src_[pos_ + 1] | 0x20) : 0;
    if (src_[pos_] == '0' && (p == 'b' || p == 'o' || p == 'x')) {
      int base = p == 'b' ? 2 : p == 'o' ? 8 : 16;
      size_t i = pos_ + 2;
      uint64_t v = 0;
      bool any = false;
      while (i < src_.size()) {
        char ch = src_[i];
        if (ch == '_' && i + 1 < src_.size()) { ++i; ch = src_[i]; }
        int d = (ch >= '0' && ch <= '9') ? ch - '0' : ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'f') ? (ch | 0x20) - 'a' + 10 : 99;
        if (d >= base) { if (src_[i - 1] == '_') --i; break; }
        if (v > (static_cast<uint64_t>(INT64_MAX) - static_cast<uint64_t>(d)) / static_cast<uint64_t>(base))
          return fail("integer literal too large");
        v = v * static_cast<uint64_t>(base) + static_cast<uint64_t>(d);
        any = true;
        ++i;
      }
      if (any) {
        tokens_.push_back(Token{TokenType::kInteger, "", static_cast<int64_t>(v), 0, line_});
        pos_ = i;
        return Status::ok();
      }
    }
    size_t end = int_end;
    if (src_[pos_] == '0') {
      // `0(_?0)*`: a leading zero only continues with zeros.
      end = pos_ + 1;
      while (end < src_.size() && (src_[end] == '0' || (src_[end] == '_' && end + 1 < src_.size() && src_[end + 1] == '0')))
        end += src_[end] == '_' ? 2 : 1;
    }
    std::string digits = strip_underscores(src_.substr(pos_, end - pos_));
    uint64_t v = 0;
    for (char ch : digits) {
      if (v > (static_cast<uint64_t>(INT64_MAX) - static_cast<uint64_t>(ch - '0')) / 10)
        return fail("integer literal too large");
      v = v * 10 + static_cast<uint64_t>(ch - '0');
    }
    tokens_.push_back(Token{TokenType::kInteger, "", static_cast<int64_t>(v), 0, line_});
    pos_ = end;
    return Status::ok();
  }

  Status lex_string(char quote) {
    size_t i = pos_ + 1;
    while (i < src_.size() && src_[i] != quote) {
      if (src_[i] == '\\') ++i;
      ++i;
    }
    if (i >= src_.size()) return fail(fmt::format("unexpected char '{}' (unterminated string)", quote));
    std::string_view body = src_.substr(pos_ + 1, i - pos_ - 1);
    auto value = unescape_string_literal(body);
    if (!value.is_ok()) return fail(value.message());
    push(TokenType::kString, std::move(value).value());
    line_ += count_newlines(body);
    pos_ = i + 1;
    return Status::ok();
  }

  std::string_view src_;
  size_t pos_ = 0;
  int line_ = 1;
  int pending_newlines_ = 0;
  std::vector<Token> tokens_;
};

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  c = static_cast<char>(c | 0x20);
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

Result<std::string> unescape_string_literal(std::string_view body) {
  std::string out;
  out.reserve(body.size());
  for (size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (c != '\\') {
      out.push_back(c);
      continue;
    }
    if (i + 1 >= body.size()) return Status::error("\\ at end of string");
    char e = body[++i];
    switch (e) {
      case '\n': break;  // line continuation
      case '\\': out.push_back('\\'); break;
      case '\'': out.push_back('\''); break;
      case '"': out.push_back('"'); break;
      case 'a': out.push_back('\a'); break;
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\f'); break;
      case 'n': out.push_back('\n'); break;
      case 'r': out.push_back('\r'); break;
      case 't': out.push_back('\t'); break;
      case 'v': out.push_back('\v'); break;
      case 'x': case 'u': case 'U': {
        int width = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        uint32_t cp = 0;
        for (int k = 0; k < width; ++k) {
          int h = i + 1 + static_cast<size_t>(k) < body.size() ? hex_value(body[i + 1 + static_cast<size_t>(k)]) : -1;
          if (h < 0) return Status::errorf("truncated \\{}{} escape", e, std::string(static_cast<size_t>(width), 'X'));
          cp = cp * 16 + static_cast<uint32_t>(h);
        }
        i += static_cast<size_t>(width);
        if (cp > 0x10FFFF) return Status::error("illegal Unicode character");
        if (cp >= 0xD800 && cp <= 0xDFFF) return Status::error("surrogate code points are not supported in strings");
        append_utf8(out, cp);
        break;
      }
      case 'N': return Status::error("\\N{...} escapes are not supported");
      default:
        if (e >= '0' && e <= '7') {
          uint32_t cp = static_cast<uint32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k)
            cp = cp * 8 + static_cast<uint32_t>(body[++i] - '0');
          append_utf8(out, cp);
        } else if (static_cast<unsigned char>(e) >= 0x80) {
          // jinja2 first turns the non-ASCII character into a \x / \u / \U escape, whose
          // backslash this one then escapes: the escape's text survives literally.
          size_t len = (static_cast<unsigned char>(e) & 0xE0) == 0xC0 ? 2 : (static_cast<unsigned char>(e) & 0xF0) == 0xE0 ? 3 : 4;
          std::u32string cp = utf8_decode(body.substr(i, len));
          uint32_t v = cp.empty() ? 0 : static_cast<uint32_t>(cp[0]);
          out += v < 0x100 ? fmt::format("\\x{:02x}", v) : v < 0x10000 ? fmt::format("\\u{:04x}", v) : fmt::format("\\U{:08x}", v);
          i += len - 1;
        } else {
          out.push_back('\\');  // unknown escapes stay as written
          out.push_back(e);
        }
    }
  }
  return out;
}

Result<std::vector<Token>> tokenize(std::string_view source) {
  if (!is_valid_utf8(source)) return Status::error("template source is not valid UTF-8");
  // jinja2 normalizes \r\n and \r to \n everywhere and drops one trailing newline.
  std::string normalized;
  normalized.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      normalized.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      normalized.push_back(source[i]);
    }
  }
  if (!normalized.empty() && normalized.back() == '\n') normalized.pop_back();
  Lexer lexer(normalized);
  return lexer.run();
}

}  // namespace ember::chat
