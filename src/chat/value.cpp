#include "chat/value.h"

#include <algorithm>

#include "chat/utf8.h"

namespace ember::chat {

const Value* DictData::find(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.as_string()));
  for (const auto& [k, v] : items)
    if (py_equal(k, key)) return &v;
  return nullptr;
}

const Value* DictData::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k.is_string() && k.as_string() == key) return &v;
  return nullptr;
}

void DictData::set(Value key, Value value) {
  for (auto& [k, v] : items) {
    if (py_equal(k, key)) {
      v = std::move(value);  // Python keeps the first key's position
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

const Value* NamespaceData::find(std::string_view name) const {
  for (const auto& [k, v] : attrs)
    if (k == name) return &v;
  return nullptr;
}

void NamespaceData::set(const std::string& name, Value value) {
  for (auto& [k, v] : attrs) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  attrs.emplace_back(name, std::move(value));
}

Value Value::undefined(std::string hint, bool unsupported) {
  return Value(Storage(std::make_shared<const UndefinedInfo>(UndefinedInfo{std::move(hint), unsupported})));
}

Value Value::seq(std::vector<Value> items, SeqFlavor flavor) {
  SeqData d;
  d.items = std::move(items);
  d.flavor = flavor;
  return seq(std::move(d));
}

uint32_t value_depth(const Value& v) {
  if (v.is_seq()) return v.as_seq().depth;
  if (v.is_dict()) return v.as_dict().depth;
  return 0;
}

Value Value::seq(SeqData data) {
  uint32_t depth = 0;
  for (const auto& item : data.items) depth = std::max(depth, value_depth(item));
  data.depth = depth + 1;
  return Value(Storage(std::make_shared<const SeqData>(std::move(data))));
}

Value Value::dict(DictData data) {
  uint32_t depth = 0;
  for (const auto& [k, v] : data.items) depth = std::max({depth, value_depth(k), value_depth(v)});
  data.depth = depth + 1;
  return Value(Storage(std::make_shared<const DictData>(std::move(data))));
}
Value Value::ns(NamespaceData data) { return Value(Storage(std::make_shared<NamespaceData>(std::move(data)))); }
Value Value::callable(std::string name, NativeFn fn) {
  return Value(Storage(std::make_shared<const CallableData>(CallableData{std::move(name), std::move(fn)})));
}
Value Value::loop(std::shared_ptr<LoopData> data) { return Value(Storage(std::move(data))); }

bool Value::is_list_like() const {
  if (!is_seq()) return false;
  SeqFlavor f = as_seq().flavor;
  return f == SeqFlavor::kList || f == SeqFlavor::kTuple;
}

const void* Value::identity() const {
  switch (kind()) {
    case Kind::kSeq: return seq_ptr().get();
    case Kind::kDict: return &as_dict();
    case Kind::kNamespace: return &as_namespace();
    case Kind::kCallable: return &as_callable();
    case Kind::kLoop: return &as_loop();
    default: return nullptr;
  }
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "Undefined";
    case Value::Kind::kNone: return "NoneType";
    case Value::Kind::kBool: return "bool";
    case Value::Kind::kInt: return "int";
    case Value::Kind::kFloat: return "float";
    case Value::Kind::kString: return "str";
    case Value::Kind::kSeq:
      switch (v.as_seq().flavor) {
        case SeqFlavor::kList: return "list";
        case SeqFlavor::kTuple: return "tuple";
        case SeqFlavor::kGenerator: return "generator";
        case SeqFlavor::kDictKeys: return "dict_keys";
        case SeqFlavor::kDictValues: return "dict_values";
        case SeqFlavor::kDictItems: return "dict_items";
        case SeqFlavor::kRange: return "range";
      }
      return "list";
    case Value::Kind::kDict: return "dict";
    case Value::Kind::kNamespace: return "Namespace";
    case Value::Kind::kCallable: return "function";
    case Value::Kind::kLoop: return "LoopContext";
  }
  return "object";
}

Status undefined_error(const Value& v) {
  const UndefinedInfo* info = v.undefined_info();
  if (info && (info->unsupported || info->hint.rfind("SecurityError", 0) == 0)) return Status::error(info->hint);
  if (info && !info->hint.empty()) return Status::error("UndefinedError: " + info->hint);
  return Status::error("UndefinedError: value is undefined");
}

Result<bool> truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      if (v.is_unsupported()) return undefined_error(v);
      return false;
    case Value::Kind::kNone: return false;
    case Value::Kind::kBool: return v.as_bool();
    case Value::Kind::kInt: return v.as_int() != 0;
    case Value::Kind::kFloat: return v.as_double() != 0.0;
    case Value::Kind::kString: return !v.as_string().empty();
    case Value::Kind::kSeq:
      // Generators are always true in Python, whatever they would yield.
      return v.as_seq().flavor == SeqFlavor::kGenerator || !v.as_seq().items.empty();
    case Value::Kind::kDict: return !v.as_dict().items.empty();
    default: return true;
  }
}

namespace {

bool seq_comparable(const SeqData& a, const SeqData& b) {
  auto norm = [](SeqFlavor f) { return f == SeqFlavor::kRange ? SeqFlavor::kList : f; };
  return norm(a.flavor) == norm(b.flavor) && a.flavor != SeqFlavor::kGenerator;
}

Status type_error_compare(const char* op, const Value& a, const Value& b) {
  return Status::errorf("TypeError: '{}' not supported between instances of '{}' and '{}'", op,
                        type_name(a), type_name(b));
}

}  // namespace

bool py_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined: return true;  // jinja2: Undefined == Undefined
    case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.as_string() == b.as_string();
    case Value::Kind::kSeq: {
      const SeqData& x = a.as_seq();
      const SeqData& y = b.as_seq();
      if (&x == &y) return true;
      bool ranges = x.flavor == SeqFlavor::kRange && y.flavor == SeqFlavor::kRange;
      if (!ranges && (x.flavor != y.flavor || x.flavor == SeqFlavor::kGenerator)) return false;
      if (x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i)
        if (!py_equal(x.items[i], y.items[i])) return false;
      return true;
    }
    case Value::Kind::kDict: {
      const DictData& x = a.as_dict();
      const DictData& y = b.as_dict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* other = y.find(k);
        if (!other || !py_equal(v, *other)) return false;
      }
      return true;
    }
    default: return a.identity() == b.identity();
  }
}

Result<bool> py_less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();  // UTF-8 order == code point order
  if (a.is_seq() && b.is_seq() && seq_comparable(a.as_seq(), b.as_seq()) &&
      a.as_seq().flavor != SeqFlavor::kRange) {
    const auto& x = a.as_seq().items;
    const auto& y = b.as_seq().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!py_equal(x[i], y[i])) return py_less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  if (a.is_undefined()) return undefined_error(a);
  if (b.is_undefined()) return undefined_error(b);
  return type_error_compare("<", a, b);
}

Result<int64_t> py_len(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      if (v.is_unsupported()) return undefined_error(v);
      return int64_t{0};
    case Value::Kind::kString: return static_cast<int64_t>(count_code_points(v.as_string()));
    case Value::Kind::kSeq:
      if (v.as_seq().flavor == SeqFlavor::kGenerator)
        return Status::error("TypeError: object of type 'generator' has no len()");
      return static_cast<int64_t>(v.as_seq().items.size());
    case Value::Kind::kDict: return static_cast<int64_t>(v.as_dict().items.size());
    case Value::Kind::kNamespace: return Status::error("TypeError: object of type 'Namespace' has no len()");
    default: return Status::errorf("TypeError: object of type '{}' has no len()", type_name(v));
  }
}

Result<std::vector<Value>> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      if (v.is_unsupported()) return undefined_error(v);
      return std::vector<Value>{};
    case Value::Kind::kString: {
      std::vector<Value> out;
      const std::string& s = v.as_string();
      for (size_t i = 0; i < s.size();) {
        size_t j = i + 1;
        while (j < s.size() && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) ++j;
        out.emplace_back(s.substr(i, j - i));
        i = j;
      }
      return out;
    }
    case Value::Kind::kSeq: {
      const SeqData& d = v.as_seq();
      if (d.flavor != SeqFlavor::kGenerator) return d.items;
      std::vector<Value> out(d.items.begin() + static_cast<std::ptrdiff_t>(std::min(d.cursor, d.items.size())),
                             d.items.end());
      d.cursor = d.items.size();
      return out;
    }
    case Value::Kind::kDict: {
      std::vector<Value> out;
      out.reserve(v.as_dict().items.size());
      for (const auto& kv : v.as_dict().items) out.push_back(kv.first);
      return out;
    }
    default:
      return Status::errorf("TypeError: '{}' object is not iterable", type_name(v));
  }
}

namespace {

Result<Value> from_json_at(const nlohmann::ordered_json& j, uint32_t depth) {
  using T = nlohmann::ordered_json::value_t;
  if (depth > kMaxValueDepth) return Status::errorf("template input nested deeper than {} levels", kMaxValueDepth);
  switch (j.type()) {
    case T::null: return Value::none();
    case T::boolean: return Value(j.get<bool>());
    case T::number_integer: return Value(j.get<int64_t>());
    case T::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      // Past int64 Python keeps an exact big int, which ember cannot print the same way.
      if (u > static_cast<uint64_t>(INT64_MAX))
        return Status::errorf("integer {} in the template input is past the supported range", u);
      return Value(static_cast<int64_t>(u));
    }
    case T::number_float: return Value(j.get<double>());
    case T::string: return Value(j.get<std::string>());
    case T::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) {
        EMBER_ASSIGN_OR_RETURN(Value item, from_json_at(e, depth + 1));
        items.push_back(std::move(item));
      }
      return Value::seq(std::move(items));
    }
    case T::object: {
      DictData d;
      d.items.reserve(j.size());
      for (const auto& [k, e] : j.items()) {
        EMBER_ASSIGN_OR_RETURN(Value item, from_json_at(e, depth + 1));
        d.items.emplace_back(Value(k), std::move(item));
      }
      return Value::dict(std::move(d));
    }
    default: return Value::none();
  }
}

}  // namespace

Result<Value> from_json(const nlohmann::ordered_json& j) { return from_json_at(j, 1); }

}  // namespace ember::chat
