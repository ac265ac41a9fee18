#include "sample/json_matcher.h"

namespace ember {

namespace {
bool is_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
bool is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
constexpr std::string_view kLiterals[3] = {"true", "false", "null"};
uint64_t first_n_bits(size_t n) { return n >= 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1; }
}  // namespace

bool JsonMatcher::feed(std::string_view bytes) {
  JsonMatcher next = *this;
  for (char ch : bytes)
    if (!next.step(static_cast<uint8_t>(ch))) return false;
  *this = next;
  return true;
}

bool JsonMatcher::open(bool object) {
  if (depth_ >= (schema_ ? kMaxSchemaDepth : kMaxDepth)) return false;
  if (schema_) frames_[depth_] = Frame{value_node_, 0, 0};
  if (object) kinds_ |= uint64_t{1} << depth_;
  else kinds_ &= ~(uint64_t{1} << depth_);
  ++depth_;
  state_ = object ? State::kObjectKey : State::kArrayFirst;
  return true;
}

bool JsonMatcher::close(bool object) {
  if (depth_ == 0 || top_is_object() != object || !may_close()) return false;
  --depth_;
  return after_value();
}

bool JsonMatcher::after_value() {
  if (schema_ && depth_ > 0 && !top_is_object()) ++frames_[depth_ - 1].count;
  state_ = depth_ == 0 ? State::kDone : State::kAfterValue;
  return true;
}

bool JsonMatcher::number_end(uint8_t c) {
  if (!literal_ends()) return false;
  tracking_ = false;
  after_value();
  return step(c);
}

bool JsonMatcher::may_close() const {
  if (!schema_) return true;
  const Frame& f = frames_[depth_ - 1];
  const SchemaNode& n = schema_->node(f.node);
  return top_is_object() ? (f.seen & n.required) == n.required : static_cast<int64_t>(f.count) >= n.min_items;
}

bool JsonMatcher::may_continue() const {
  if (!schema_) return true;
  const Frame& f = frames_[depth_ - 1];
  const SchemaNode& n = schema_->node(f.node);
  if (top_is_object()) return n.additional >= 0 || (first_n_bits(n.names.size()) & ~f.seen) != 0;
  return static_cast<int64_t>(f.count) < n.max_items;
}

bool JsonMatcher::value_starts(uint8_t c) {
  integer_only_ = false;
  tracking_ = tracking_key_ = false;
  if (!schema_) return true;
  if (depth_ > 0 && !top_is_object()) {  // an array item
    const Frame& f = frames_[depth_ - 1];
    const SchemaNode& arr = schema_->node(f.node);
    if (static_cast<int64_t>(f.count) >= arr.max_items) return false;
    value_node_ = arr.items;
  }
  uint8_t need = 0;
  switch (c) {
    case '{': need = SchemaNode::kObject; break;
    case '[': need = SchemaNode::kArray; break;
    case '"': need = SchemaNode::kString; break;
    case 't': case 'f': need = SchemaNode::kBoolean; break;
    case 'n': need = SchemaNode::kNull; break;
    default: need = SchemaNode::kNumber | SchemaNode::kInteger; break;
  }
  // anyOf: the first character picks the one alternative of its type. (A schema whose
  // alternatives lead back to themselves, {"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}]}}},
  // would pick forever: a bounded number of picks, then the value is refused.)
  int picks = 0;
  for (const SchemaNode* a = &schema_->node(value_node_); !a->alts.empty(); a = &schema_->node(value_node_)) {
    if (++picks > kMaxSchemaDepth) return false;
    size_t i = 0;
    while (i < a->alts.size() && !(schema_->node(a->alts[i]).types & need)) ++i;
    if (i == a->alts.size()) return false;
    value_node_ = a->alts[i];
  }
  const SchemaNode& n = schema_->node(value_node_);
  if (!(n.types & need)) return false;
  integer_only_ = need == (SchemaNode::kNumber | SchemaNode::kInteger) && !(n.types & SchemaNode::kNumber);
  if (!n.literals.empty()) {
    tracking_ = true;
    lit_len_ = 0;
    cand_ = first_n_bits(n.literals.size());
    return track(c);
  }
  return true;
}

bool JsonMatcher::key_starts() {
  key_string_ = true;
  state_ = State::kString;
  tracking_ = false;
  if (!schema_) return true;
  const SchemaNode& n = *top_node();
  tracking_ = tracking_key_ = true;
  lit_len_ = 0;
  cand_ = first_n_bits(n.names.size());
  return n.additional >= 0 || (cand_ & ~frames_[depth_ - 1].seen) != 0;
}

bool JsonMatcher::track(uint8_t c) {
  if (!tracking_) return true;
  const bool key = tracking_key_;
  const SchemaNode& n = key ? *top_node() : schema_->node(value_node_);
  const auto& words = key ? n.names : n.literals;
  for (uint64_t m = cand_; m != 0; m &= m - 1) {
    const size_t i = static_cast<size_t>(__builtin_ctzll(m));
    if (words[i].size() <= lit_len_ || static_cast<uint8_t>(words[i][lit_len_]) != c) cand_ &= ~(uint64_t{1} << i);
  }
  ++lit_len_;
  if (key) return n.additional >= 0 || (cand_ & ~frames_[depth_ - 1].seen) != 0;
  return cand_ != 0;
}

bool JsonMatcher::literal_ends() const {
  if (!tracking_) return true;
  const SchemaNode& n = schema_->node(value_node_);
  for (uint64_t m = cand_; m != 0; m &= m - 1)
    if (n.literals[static_cast<size_t>(__builtin_ctzll(m))].size() == lit_len_) return true;
  return false;
}

bool JsonMatcher::key_ends() {
  tracking_ = tracking_key_ = false;
  if (!schema_) return true;
  Frame& f = frames_[depth_ - 1];
  const SchemaNode& n = schema_->node(f.node);
  for (uint64_t m = cand_; m != 0; m &= m - 1) {
    const size_t i = static_cast<size_t>(__builtin_ctzll(m));
    if (n.names[i].size() != lit_len_) continue;
    if (f.seen & (uint64_t{1} << i)) return false;  // a key twice
    f.seen |= uint64_t{1} << i;
    value_node_ = n.props[i];
    return true;
  }
  if (n.additional < 0) return false;
  value_node_ = n.additional;
  return true;
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
      return c == '{' && value_starts(c) && open(true);
    case State::kObjectKey:
      if (c == '}') return close(true);
      [[fallthrough]];
    case State::kObjectNextKey:
      return c == '"' && key_starts();
    case State::kColon:
      if (c != ':') return false;
      state_ = State::kValue;
      return true;
    case State::kArrayFirst:
      if (c == ']') return close(false);
      [[fallthrough]];
    case State::kValue:
      switch (c) {
        case '{': return value_starts(c) && open(true);
        case '[': return value_starts(c) && open(false);
        case '"':
          if (!value_starts(c)) return false;
          key_string_ = false;
          state_ = State::kString;
          return true;
        case '-':
          if (!value_starts(c)) return false;
          state_ = State::kNumSign;
          return true;
        case '0':
          if (!value_starts(c)) return false;
          state_ = State::kNumZero;
          return true;
        case 't': case 'f': case 'n':
          if (!value_starts(c)) return false;
          literal_ = c == 't' ? 0 : c == 'f' ? 1 : 2;
          literal_pos_ = 1;
          state_ = State::kLiteral;
          return true;
        default:
          if (c >= '1' && c <= '9' && value_starts(c)) {
            state_ = State::kNumInt;
            return true;
          }
          return false;
      }
    case State::kAfterValue:
      if (c == ',') {
        if (!may_continue()) return false;
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
        return track(c);
      }
      if (c == '"') {
        if (key_string_) {
          if (!key_ends()) return false;
          state_ = State::kColon;
          return true;
        }
        if (!(track(c) && literal_ends())) return false;
        tracking_ = false;
        return after_value();
      }
      if (c == '\\') {
        state_ = State::kEscape;
        return track(c);
      }
      if (c < 0x20) return false;
      if (c >= 0x80) {
        if (c >= 0xC2 && c <= 0xDF) utf8_need_ = 1;
        else if (c >= 0xE0 && c <= 0xEF) utf8_need_ = 2;
        else if (c >= 0xF0 && c <= 0xF4) utf8_need_ = 3;
        else return false;
      }
      return track(c);
    case State::kEscape:
      switch (c) {
        case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
          state_ = State::kString;
          break;
        case 'u':
          hex_left_ = 4;
          state_ = State::kUnicode;
          break;
        default: return false;
      }
      return track(c);
    case State::kUnicode:
      if (!is_hex(c)) return false;
      if (--hex_left_ == 0) state_ = State::kString;
      return track(c);
    case State::kLiteral: {
      const std::string_view lit = kLiterals[literal_];
      if (static_cast<uint8_t>(lit[literal_pos_]) != c) return false;
      if (!track(c)) return false;
      if (++literal_pos_ == lit.size()) {
        if (!literal_ends()) return false;
        tracking_ = false;
        return after_value();
      }
      return true;
    }
    case State::kNumSign:
      if (c == '0') state_ = State::kNumZero;
      else if (c >= '1' && c <= '9') state_ = State::kNumInt;
      else return false;
      return track(c);
    case State::kNumZero:
    case State::kNumInt:
      if (state_ == State::kNumInt && is_digit(c)) return track(c);
      if (c == '.' || c == 'e' || c == 'E') {
        if (!number_char_ok(c)) return false;
        state_ = c == '.' ? State::kNumDot : State::kNumExp;
        return track(c);
      }
      return number_end(c);
    case State::kNumDot:
      if (!is_digit(c)) return false;
      state_ = State::kNumFrac;
      return track(c);
    case State::kNumFrac:
      if (is_digit(c)) return track(c);
      if (c == 'e' || c == 'E') {
        state_ = State::kNumExp;
        return track(c);
      }
      return number_end(c);
    case State::kNumExp:
      if (c == '+' || c == '-') {
        state_ = State::kNumExpSign;
        return track(c);
      }
      [[fallthrough]];
    case State::kNumExpSign:
      if (!is_digit(c)) return false;
      state_ = State::kNumExpDigits;
      return track(c);
    case State::kNumExpDigits:
      if (is_digit(c)) return track(c);
      return number_end(c);
    case State::kDone:
      return false;
  }
  return false;
}

}  // namespace ember
