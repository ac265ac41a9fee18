#include "sample/json_matcher.h"

namespace ember {

namespace {
bool is_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
bool is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
constexpr std::string_view kLiterals[3] = {"true", "false", "null"};
}  // namespace

bool JsonMatcher::feed(std::string_view bytes) {
  JsonMatcher next = *this;
  for (char ch : bytes)
    if (!next.step(static_cast<uint8_t>(ch))) return false;
  *this = next;
  return true;
}

bool JsonMatcher::open(bool object) {
  if (depth_ >= kMaxDepth) return false;
  if (object) kinds_ |= uint64_t{1} << depth_;
  else kinds_ &= ~(uint64_t{1} << depth_);
  ++depth_;
  state_ = object ? State::kObjectKey : State::kArrayFirst;
  return true;
}

bool JsonMatcher::close(bool object) {
  if (depth_ == 0 || top_is_object() != object) return false;
  --depth_;
  return after_value();
}

bool JsonMatcher::after_value() {
  state_ = depth_ == 0 ? State::kDone : State::kAfterValue;
  return true;
}

bool JsonMatcher::number_end(uint8_t c) {
  after_value();
  return step(c);
}

bool JsonMatcher::step(uint8_t c) {
  // Whitespace between tokens (never inside a string, literal or number's middle).
  const bool between = state_ == State::kStart || state_ == State::kObjectKey || state_ == State::kObjectNextKey ||
                       state_ == State::kColon || state_ == State::kValue || state_ == State::kArrayFirst ||
                       state_ == State::kAfterValue;
  if (between) {
    if (is_ws(c)) {
      if (ws_run_ >= kMaxWhitespaceRun) return false;
      ++ws_run_;
      return true;
    }
    ws_run_ = 0;
  }
  switch (state_) {
    case State::kStart:
      return c == '{' && open(true);
    case State::kObjectKey:
      if (c == '}') return close(true);
      [[fallthrough]];
    case State::kObjectNextKey:
      if (c != '"') return false;
      key_string_ = true;
      state_ = State::kString;
      return true;
    case State::kColon:
      if (c != ':') return false;
      state_ = State::kValue;
      return true;
    case State::kArrayFirst:
      if (c == ']') return close(false);
      [[fallthrough]];
    case State::kValue:
      switch (c) {
        case '{': return open(true);
        case '[': return open(false);
        case '"':
          key_string_ = false;
          state_ = State::kString;
          return true;
        case '-': state_ = State::kNumSign; return true;
        case '0': state_ = State::kNumZero; return true;
        case 't': case 'f': case 'n':
          literal_ = c == 't' ? 0 : c == 'f' ? 1 : 2;
          literal_pos_ = 1;
          state_ = State::kLiteral;
          return true;
        default:
          if (c >= '1' && c <= '9') {
            state_ = State::kNumInt;
            return true;
          }
          return false;
      }
    case State::kAfterValue:
      if (c == ',') {
        state_ = top_is_object() ? State::kObjectNextKey : State::kValue;
        return true;
      }
      if (c == '}') return close(true);
      if (c == ']') return close(false);
      return false;
    case State::kString:
      if (utf8_need_ > 0) {
        if ((c & 0xC0) != 0x80) return false;
        --utf8_need_;
        return true;
      }
      if (c == '"') {
        if (key_string_) {
          state_ = State::kColon;
          return true;
        }
        return after_value();
      }
      if (c == '\\') {
        state_ = State::kEscape;
        return true;
      }
      if (c < 0x20) return false;
      if (c < 0x80) return true;
      if (c >= 0xC2 && c <= 0xDF) utf8_need_ = 1;
      else if (c >= 0xE0 && c <= 0xEF) utf8_need_ = 2;
      else if (c >= 0xF0 && c <= 0xF4) utf8_need_ = 3;
      else return false;
      return true;
    case State::kEscape:
      switch (c) {
        case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
          state_ = State::kString;
          return true;
        case 'u':
          hex_left_ = 4;
          state_ = State::kUnicode;
          return true;
        default: return false;
      }
    case State::kUnicode:
      if (!is_hex(c)) return false;
      if (--hex_left_ == 0) state_ = State::kString;
      return true;
    case State::kLiteral: {
      const std::string_view lit = kLiterals[literal_];
      if (static_cast<uint8_t>(lit[literal_pos_]) != c) return false;
      if (++literal_pos_ == lit.size()) return after_value();
      return true;
    }
    case State::kNumSign:
      if (c == '0') state_ = State::kNumZero;
      else if (c >= '1' && c <= '9') state_ = State::kNumInt;
      else return false;
      return true;
    case State::kNumZero:
    case State::kNumInt:
      if (state_ == State::kNumInt && is_digit(c)) return true;
      if (c == '.') {
        state_ = State::kNumDot;
        return true;
      }
      if (c == 'e' || c == 'E') {
        state_ = State::kNumExp;
        return true;
      }
      return number_end(c);
    case State::kNumDot:
      if (!is_digit(c)) return false;
      state_ = State::kNumFrac;
      return true;
    case State::kNumFrac:
      if (is_digit(c)) return true;
      if (c == 'e' || c == 'E') {
        state_ = State::kNumExp;
        return true;
      }
      return number_end(c);
    case State::kNumExp:
      if (c == '+' || c == '-') {
        state_ = State::kNumExpSign;
        return true;
      }
      [[fallthrough]];
    case State::kNumExpSign:
      if (!is_digit(c)) return false;
      state_ = State::kNumExpDigits;
      return true;
    case State::kNumExpDigits:
      if (is_digit(c)) return true;
      return number_end(c);
    case State::kDone:
      return false;
  }
  return false;
}

}  // namespace ember
