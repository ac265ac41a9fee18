#include "sample/json_schema.h"

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <map>
#include <set>

namespace ember {

using Json = nlohmann::json;

class SchemaCompiler {
 public:
  explicit SchemaCompiler(const Json& doc) : doc_(doc) { out_.nodes_.emplace_back(); }  // node 0: any

  Result<int> node(const Json& s, const std::string& where) {
    // Untrusted input (a request body): bound the recursion and the table.
    if (depth_ >= kMaxNesting) return Status::errorf("the schema nests deeper than {} levels at {}", kMaxNesting, where);
    if (out_.nodes_.size() >= kMaxNodes) return Status::errorf("the schema has more than {} subschemas", kMaxNodes);
    ++depth_;
    auto result = node_at(s, where);
    --depth_;
    return result;
  }

  Result<int> node_at(const Json& s, const std::string& where) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return 0;
      return Status::errorf("the schema at {} is false: nothing matches it", where);
    }
    if (!s.is_object()) return Status::errorf("the schema at {} is not an object or a boolean", where);
    if (auto it = s.find("$ref"); it != s.end()) return ref(s, *it, where);
    static const std::set<std::string> kKeywords = {"type", "properties", "required", "additionalProperties", "items",
                                                   "minItems", "maxItems", "enum", "const"};
    for (const char* key : {"anyOf", "oneOf"})
      if (auto it = s.find(key); it != s.end()) return alternatives(s, key, *it, where);
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (!annotations().count(it.key()) && !kKeywords.count(it.key()))
        return Status::errorf("JSON schema keyword '{}' at {} is not supported (supported: type, properties, "
                              "required, additionalProperties, items, minItems, maxItems, enum, const, anyOf, "
                              "oneOf, $ref)",
                              it.key(), where);
    }
    const int index = static_cast<int>(out_.nodes_.size());
    out_.nodes_.emplace_back();
    SchemaNode n;
    if (auto it = s.find("type"); it != s.end()) {
      auto types = type_mask(*it, where);
      if (!types.is_ok()) return types.status();
      n.types = *types;
    }
    if (auto it = s.find("properties"); it != s.end()) {
      if (!it->is_object()) return Status::errorf("'properties' at {} is not an object", where);
      if (it->size() > static_cast<size_t>(JsonSchema::kMaxProperties))
        return Status::errorf("{} has {} properties; at most {} are supported", where, it->size(), JsonSchema::kMaxProperties);
      for (auto p = it->begin(); p != it->end(); ++p) {
        auto child = node(p.value(), where + ".properties." + p.key());
        if (!child.is_ok()) return child.status();
        n.names.push_back(p.key());
        n.props.push_back(*child);
      }
    }
    if (auto it = s.find("required"); it != s.end()) {
      if (!it->is_array()) return Status::errorf("'required' at {} is not an array", where);
      for (const Json& r : *it) {
        if (!r.is_string()) return Status::errorf("'required' at {} holds {}, not a string", where, r.dump());
        const std::string name = r.get<std::string>();
        size_t i = 0;
        while (i < n.names.size() && n.names[i] != name) ++i;
        if (i == n.names.size()) {  // required but not described: any value
          if (n.names.size() >= static_cast<size_t>(JsonSchema::kMaxProperties))
            return Status::errorf("{} has more than {} properties", where, JsonSchema::kMaxProperties);
          n.names.push_back(name);
          n.props.push_back(0);
        }
        n.required |= uint64_t{1} << i;
      }
    }
    if (auto it = s.find("additionalProperties"); it != s.end()) {
      if (it->is_boolean() && !it->get<bool>()) {
        n.additional = -1;
      } else {
        auto child = node(*it, where + ".additionalProperties");
        if (!child.is_ok()) return child.status();
        n.additional = *child;
      }
    }
    if (auto it = s.find("items"); it != s.end()) {
      auto child = node(*it, where + ".items");
      if (!child.is_ok()) return child.status();
      n.items = *child;
    }
    for (const char* key : {"minItems", "maxItems"}) {
      if (auto it = s.find(key); it != s.end()) {
        if (!it->is_number_unsigned() && !(it->is_number_integer() && it->get<int64_t>() >= 0))
          return Status::errorf("'{}' at {} is not a non-negative integer", key, where);
        const int64_t v = std::min<int64_t>(it->get<int64_t>(), INT_MAX);
        (std::string(key) == "minItems" ? n.min_items : n.max_items) = static_cast<int>(v);
      }
    }
    if (n.min_items > n.max_items) return Status::errorf("minItems > maxItems at {}: nothing matches", where);
    auto add_literal = [&](const Json& v, const char* key) -> Status {
      if (v.is_object() || v.is_array())
        return Status::errorf("'{}' at {} holds {}: only strings, numbers, booleans and null are supported", key,
                              where, v.dump());
      n.literals.push_back(v.dump());
      return Status::ok();
    };
    if (auto it = s.find("enum"); it != s.end()) {
      if (!it->is_array() || it->empty()) return Status::errorf("'enum' at {} is not a non-empty array", where);
      if (it->size() > static_cast<size_t>(JsonSchema::kMaxLiterals))
        return Status::errorf("'enum' at {} has {} values; at most {} are supported", where, it->size(), JsonSchema::kMaxLiterals);
      for (const Json& v : *it) EMBER_RETURN_IF_ERROR(add_literal(v, "enum"));
    }
    if (auto it = s.find("const"); it != s.end()) {
      if (!n.literals.empty()) return Status::errorf("'enum' and 'const' together at {} are not supported", where);
      EMBER_RETURN_IF_ERROR(add_literal(*it, "const"));
    }
    if (!n.literals.empty() && !s.contains("type")) {  // the types the spellings can have
      n.types = 0;
      for (const std::string& lit : n.literals) {
        const char c = lit[0];
        n.types |= c == '"' ? SchemaNode::kString : c == 't' || c == 'f' ? SchemaNode::kBoolean
                   : c == 'n' ? SchemaNode::kNull : SchemaNode::kNumber | SchemaNode::kInteger;
      }
    }
    out_.nodes_[static_cast<size_t>(index)] = std::move(n);
    return index;
  }

  JsonSchema take(int root) {
    out_.root_ = root;
    return std::move(out_);
  }

 private:
  // What a value's first character tells apart: objects, arrays, strings, numbers (integers
  // among them), booleans, null.
  static uint8_t first_char_classes(uint8_t types) {
    return static_cast<uint8_t>((types & ~SchemaNode::kInteger) | (types & SchemaNode::kInteger ? SchemaNode::kNumber : 0));
  }

  Result<int> alternatives(const Json& s, const char* key, const Json& list, const std::string& where) {
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (it.key() != key && !annotations().count(it.key()))
        return Status::errorf("'{}' beside '{}' at {} is not supported", it.key(), key, where);
    }
    if (!list.is_array() || list.empty()) return Status::errorf("'{}' at {} is not a non-empty array", key, where);
    const int index = static_cast<int>(out_.nodes_.size());
    out_.nodes_.emplace_back();
    SchemaNode n;
    n.types = 0;
    uint8_t classes = 0;
    for (size_t i = 0; i < list.size(); ++i) {
      auto alt = node(list[i], fmt::format("{}.{}[{}]", where, key, i));
      if (!alt.is_ok()) return alt.status();
      const uint8_t c = first_char_classes(out_.nodes_[static_cast<size_t>(*alt)].types);
      if (classes & c)
        return Status::errorf("'{}' at {}: alternative {} can start with the same character as an earlier one "
                              "(only alternatives of different types are supported)", key, where, i);
      classes |= c;
      n.types |= out_.nodes_[static_cast<size_t>(*alt)].types;
      n.alts.push_back(*alt);
    }
    out_.nodes_[static_cast<size_t>(index)] = std::move(n);
    return index;
  }

  static constexpr int kMaxNesting = 64;
  static constexpr size_t kMaxNodes = 4096;

  // Keywords that say nothing about the value (and the definitions a $ref points into).
  static const std::set<std::string>& annotations() {
    static const std::set<std::string> kAnnotations = {"title", "description", "default", "examples", "$schema",
                                                      "$id", "$comment", "$defs", "definitions"};
    return kAnnotations;
  }

  Result<uint8_t> type_mask(const Json& t, const std::string& where) {
    static const std::map<std::string, uint8_t> kTypes = {
        {"object", SchemaNode::kObject},   {"array", SchemaNode::kArray},     {"string", SchemaNode::kString},
        {"number", SchemaNode::kNumber},   {"integer", SchemaNode::kInteger}, {"boolean", SchemaNode::kBoolean},
        {"null", SchemaNode::kNull}};
    uint8_t mask = 0;
    const Json list = t.is_array() ? t : Json::array({t});
    for (const Json& one : list) {
      auto it = one.is_string() ? kTypes.find(one.get<std::string>()) : kTypes.end();
      if (it == kTypes.end()) return Status::errorf("'type' at {} holds {}, which is not a JSON type name", where, one.dump());
      mask |= it->second;
    }
    if (mask == 0) return Status::errorf("'type' at {} is empty: nothing matches", where);
    return mask;
  }

  Result<int> ref(const Json& s, const Json& target, const std::string& where) {
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (it.key() != "$ref" && !annotations().count(it.key()))
        return Status::errorf("'{}' beside '$ref' at {} is not supported", it.key(), where);
    }
    if (!target.is_string()) return Status::errorf("'$ref' at {} is not a string", where);
    const std::string r = target.get<std::string>();
    if (auto it = refs_.find(r); it != refs_.end()) return it->second;
    std::string group, name;
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      if (r.rfind(prefix, 0) == 0) {
        group = std::string(prefix).substr(2, std::string(prefix).size() - 3);
        name = r.substr(std::string(prefix).size());
      }
    }
    if (group.empty() || name.find('/') != std::string::npos || name.find('~') != std::string::npos)
      return Status::errorf("'$ref' {} at {} is not supported (only #/$defs/NAME and #/definitions/NAME)", r, where);
    auto g = doc_.find(group);
    if (g == doc_.end() || !g->is_object() || !g->contains(name))
      return Status::errorf("'$ref' {} at {} points at nothing", r, where);
    // A recursive reference meets the placeholder: the node it compiles into is copied there.
    const int slot = static_cast<int>(out_.nodes_.size());
    out_.nodes_.emplace_back();
    refs_[r] = slot;
    auto compiled = node((*g)[name], r.substr(2));
    if (!compiled.is_ok()) return compiled.status();
    out_.nodes_[static_cast<size_t>(slot)] = out_.nodes_[static_cast<size_t>(*compiled)];
    return slot;
  }

  const Json& doc_;
  int depth_ = 0;
  JsonSchema out_;
  std::map<std::string, int> refs_;
};

Result<std::shared_ptr<const JsonSchema>> JsonSchema::compile(const nlohmann::json& schema) {
  SchemaCompiler c(schema);
  auto root = c.node(schema, "the root");
  if (!root.is_ok()) return root.status();
  JsonSchema out = c.take(*root);
  if (!(out.node(out.root()).types & SchemaNode::kObject))
    return Status::error("the schema's root must allow an object (JSON mode writes one object)");
  return std::make_shared<const JsonSchema>(std::move(out));
}

}  // namespace ember
