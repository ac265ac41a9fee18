#pragma once
// JsonSchema: the subset of JSON Schema that JSON mode can enforce token by token (OpenAI's
// response_format json_schema), compiled once per request into a table of nodes that
// JsonMatcher walks beside the bytes. Supported: type (one name or a list), properties,
// required, additionalProperties (true / false / a schema; absent means any other key),
// items, minItems, maxItems, enum and const of scalars, anyOf / oneOf of alternatives whose
// types do not overlap (a value's first character picks one), $ref to #/$defs/... or
// #/definitions/... (recursion included), and the annotations title, description, default,
// examples, $schema, $id, $comment. Anything else (pattern, format, minimum, anyOf, ...) is
// refused by name rather than ignored, so a request never gets less checking than it asked for.
//
// What the output must also be, beyond the schema: the root an object, enum values spelled as
// nlohmann::json::dump() writes them (e.g. "\u00e9" is not "é"), integers without a fraction
// or exponent, no key twice, nesting at most JsonMatcher::kMaxSchemaDepth deep.
#include "core/status.h"

#include <nlohmann/json_fwd.hpp>

#include <climits>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ember {

struct SchemaNode {
  enum Type : uint8_t {
    kObject = 1, kArray = 2, kString = 4, kNumber = 8, kInteger = 16, kBoolean = 32, kNull = 64, kAny = 127,
  };
  uint8_t types = kAny;
  // Declared properties (at most 64): names and their nodes; required as a bit per property.
  std::vector<std::string> names;
  std::vector<int> props;
  uint64_t required = 0;
  int additional = 0;  // node of any other key's value; -1: no other key
  int items = 0;       // node of an array's items
  int min_items = 0, max_items = INT_MAX;
  // enum / const: each allowed value's compact text (at most 64); empty: no such constraint.
  std::vector<std::string> literals;
  // anyOf / oneOf: the alternatives, told apart by a value's first character (their types do
  // not overlap, e.g. pydantic's Optional[X] = anyOf [X, null]); empty: none.
  std::vector<int> alts;
};

class JsonSchema {
 public:
  static constexpr int kMaxProperties = 64;
  static constexpr int kMaxLiterals = 64;
  // The error names the keyword and where it is ("properties.age.minimum").
  static Result<std::shared_ptr<const JsonSchema>> compile(const nlohmann::json& schema);
  // Node 0 accepts any value.
  const SchemaNode& node(int i) const { return nodes_[static_cast<size_t>(i)]; }
  int root() const { return root_; }

 private:
  friend class SchemaCompiler;
  std::vector<SchemaNode> nodes_;
  int root_ = 0;
};

}  // namespace ember
