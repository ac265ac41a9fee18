#pragma once
// Lexer for the Jinja2 template language, configured as transformers configures jinja2
// for chat templates: trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False.
// Whitespace control ({%- -%} {{- -}} {#- -#}, and '+' to keep whitespace), comments and
// {% raw %} blocks are resolved here, so the parser only sees data and tag tokens.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ember::chat {

enum class TokenType : uint8_t {
  kData,        // literal template text
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kVarBegin,    // {{
  kVarEnd,      // }}
  kName,
  kString,      // text holds the unescaped value
  kInteger,
  kFloat,
  kOperator,    // text holds the operator, e.g. "//" or "("
  kEof,
};

struct Token {
  TokenType type = TokenType::kEof;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
};

// Splits template source into tokens; errors name the line and the problem.
Result<std::vector<Token>> tokenize(std::string_view source);

// Python's str.encode('ascii', 'backslashreplace').decode('unicode-escape'), which
// jinja2 applies to string literals.
Result<std::string> unescape_string_literal(std::string_view body);

}  // namespace ember::chat
