#pragma once
// JsonMatcher: an incremental recognizer of one JSON object (RFC 8259, strict: no NaN, no
// comments, no control characters in strings, UTF-8 inside strings), fed bytes as they are
// generated. It answers the question constrained decoding asks each step: can these bytes
// still be continued into a complete object? The state is a trivially copyable value (~300
// bytes, most of them the schema frames), so trying a candidate token is a copy and a walk
// over the token's bytes.
//
// Bounds keep a constrained model from running away (what OpenAI's json mode warns of, a stream
// of whitespace until the token limit; a small model asked for JSON without saying so in its
// prompt does exactly that): at most kMaxWhitespaceRun whitespace bytes in a row outside
// strings (a newline and 20 of indentation is llama.cpp's JSON grammar's bound), nothing after
// the closing brace (the end-of-sequence token comes next), nesting at most kMaxDepth deep.
// Documents beyond them are rejected.
//
// With a JsonSchema the object must also match it (json_schema.h says which keywords): each
// open container keeps a frame (its schema node, the properties seen, the items counted), keys
// and enum values are matched against their allowed spellings as they are typed, and a
// container may close only when its required keys / minItems are there.
#include "sample/json_schema.h"

#include <array>
#include <cstdint>
#include <string_view>

namespace ember {

class JsonMatcher {
 public:
  static constexpr int kMaxDepth = 64;
  static constexpr int kMaxSchemaDepth = 16;
  static constexpr int kMaxWhitespaceRun = 24;

  JsonMatcher() = default;
  // schema (may be null: any object) must outlive the matcher.
  explicit JsonMatcher(const JsonSchema* schema) : schema_(schema), value_node_(schema ? schema->root() : 0) {}

  // Feeds bytes; false (and the state unchanged) when they cannot be part of a valid object.
  bool feed(std::string_view bytes);
  // Whether these bytes could come next (the state unchanged either way).
  bool accepts(std::string_view bytes) const {
    JsonMatcher m = *this;  // (one copy: the trial runs on it, feed() would copy again)
    for (char c : bytes)
      if (!m.step(static_cast<uint8_t>(c))) return false;
    return true;
  }
  // The top-level object has been closed: nothing may follow.
  bool complete() const { return state_ == State::kDone; }
  // Inside a string with no escape or UTF-8 sequence pending and nothing to match (not a schema's
  // key or enum value): whole UTF-8 characters without '"', '\\' or a control character leave
  // the state exactly as it was.
  bool in_plain_string() const { return state_ == State::kString && utf8_need_ == 0 && !tracking_; }

 private:
  enum class State : uint8_t {
    kStart,        // before the top-level object: whitespace, then '{'
    kObjectKey,    // after '{': whitespace, a key's '"' or '}'
    kObjectNextKey,  // after ',' in an object: whitespace, then a key's '"'
    kColon,        // after a key: whitespace, then ':'
    kValue,        // a value starts (after ':' or '[' or ',' in an array)
    kArrayFirst,   // after '[': a value or ']'
    kAfterValue,   // after a value: whitespace, ',' or the container's close
    kString,       // inside a string
    kEscape,       // after a backslash
    kUnicode,      // \u and hex_left_ hex digits to go
    kLiteral,      // inside true / false / null
    kNumSign,      // after '-'
    kNumZero,      // a leading 0
    kNumInt,       // integer digits
    kNumDot,       // after '.'
    kNumFrac,      // fraction digits
    kNumExp,       // after 'e' / 'E'
    kNumExpSign,   // after the exponent's sign
    kNumExpDigits, // exponent digits
    kDone,         // the top-level object closed
  };
  struct Frame {
    int32_t node = 0;
    uint32_t count = 0;  // items of an array
    uint64_t seen = 0;   // properties of an object, a bit per declared name
  };
  bool step(uint8_t c);
  bool open(bool object);
  bool close(bool object);
  bool after_value();    // a value just ended
  bool number_end(uint8_t c);  // a number ended at c: continue in kAfterValue with c
  bool top_is_object() const { return (kinds_ >> (depth_ - 1)) & 1u; }
  // Schema checks (all true without a schema).
  const SchemaNode* top_node() const { return schema_ ? &schema_->node(frames_[depth_ - 1].node) : nullptr; }
  bool value_starts(uint8_t c);   // the first byte of a value of node value_node_
  bool key_starts();              // a key's opening quote in the top object
  bool key_ends();                // its closing quote: which property (or another key) it is
  bool may_close() const;         // required keys / minItems there
  bool may_continue() const;      // ',': another key or item may come
  bool track(uint8_t c);          // a byte of a tracked key or enum value (true when untracked)
  bool literal_ends() const;      // a tracked enum value ends here: one spelling matched whole
  bool number_char_ok(uint8_t c) const {  // integers take no fraction or exponent
    return !integer_only_ || (c != '.' && c != 'e' && c != 'E');
  }

  State state_ = State::kStart;
  bool key_string_ = false;  // the string being read is a key
  uint8_t depth_ = 0;        // open containers
  uint8_t utf8_need_ = 0;    // continuation bytes still owed inside a string
  uint8_t hex_left_ = 0;     // kUnicode
  uint8_t literal_ = 0;      // kLiteral: which of true / false / null
  uint8_t literal_pos_ = 0;  // kLiteral: bytes matched
  uint8_t ws_run_ = 0;       // whitespace bytes in a row outside strings
  uint64_t kinds_ = 0;       // bit d: container d is an object (else an array)

  const JsonSchema* schema_ = nullptr;
  bool tracking_ = false;      // the bytes being read are matched against cand_ (a key or an enum)
  bool tracking_key_ = false;  // ... and they are a key's (else an enum value's)
  bool integer_only_ = false;  // the number being read must be an integer
  uint16_t lit_len_ = 0;       // bytes of the tracked key / value so far
  int32_t value_node_ = 0;     // node of the value that comes next (after a key, or an item)
  uint64_t cand_ = 0;          // declared names / enum spellings the tracked bytes still match
  std::array<Frame, kMaxSchemaDepth> frames_{};
};

}  // namespace ember
