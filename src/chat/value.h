#pragma once
// Value: the data model of the template interpreter, mirroring the Python objects that
// jinja2 sees when transformers renders a chat template (str, int, float, bool, None,
// list, tuple, dict, generators, jinja2's Undefined and Namespace, callables).
// Containers are shared and immutable (transformers uses ImmutableSandboxedEnvironment,
// so templates cannot mutate lists or dicts); only namespaces and loop objects mutate.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "core/status.h"

namespace ember::chat {

class Value;
class Interpreter;

struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
};

struct UndefinedInfo {
  std::string hint;          // what jinja2 would name in its UndefinedError
  bool unsupported = false;  // a Python attribute ember does not implement: any use fails
};

// Python distinguishes these sequence-like types in printing, len() and re-iteration.
enum class SeqFlavor : uint8_t {
  kList, kTuple, kGenerator, kDictKeys, kDictValues, kDictItems, kRange
};

struct SeqData {
  std::vector<Value> items;
  SeqFlavor flavor = SeqFlavor::kList;
  int64_t range_start = 0, range_stop = 0, range_step = 1;  // only for kRange printing
  uint32_t depth = 1;  // container nesting, set by Value::seq (bounds recursion on hostile input)
  // Generators are single-pass in Python: iteration resumes where the last one stopped.
  mutable size_t cursor = 0;
};

struct DictData {
  std::vector<std::pair<Value, Value>> items;  // insertion order, like Python dicts
  uint32_t depth = 1;  // container nesting, set by Value::dict
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(Value key, Value value);
};

struct NamespaceData {
  std::vector<std::pair<std::string, Value>> attrs;
  const Value* find(std::string_view name) const;
  void set(const std::string& name, Value value);
};

using NativeFn = std::function<Result<Value>(Interpreter&, CallArgs&)>;
struct CallableData {
  std::string name;
  NativeFn fn;
};

// jinja2's LoopContext, shared by all iterations of one loop.
struct LoopData {
  int64_t index0 = 0;
  int64_t length = 0;
  int64_t depth0 = 0;
  std::shared_ptr<const SeqData> items;
  bool has_changed_value = false;
  std::shared_ptr<Value> changed_value;
};

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined, kNone, kBool, kInt, kFloat, kString, kSeq, kDict, kNamespace, kCallable, kLoop
  };
  struct NoneTag {};

  Value() : v_(std::shared_ptr<const UndefinedInfo>()) {}
  static Value undefined(std::string hint = {}, bool unsupported = false);
  static Value none() { return Value(Storage(NoneTag{})); }
  Value(bool b) : v_(b) {}                            // NOLINT: implicit like Python literals
  Value(int64_t i) : v_(i) {}                         // NOLINT
  Value(int i) : v_(static_cast<int64_t>(i)) {}       // NOLINT
  Value(double d) : v_(d) {}                          // NOLINT
  Value(std::string s) : v_(std::move(s)) {}          // NOLINT
  Value(const char* s) : v_(std::string(s)) {}        // NOLINT
  static Value seq(std::vector<Value> items, SeqFlavor flavor = SeqFlavor::kList);
  static Value seq(SeqData data);
  static Value dict(DictData data);
  static Value ns(NamespaceData data);
  static Value callable(std::string name, NativeFn fn);
  static Value loop(std::shared_ptr<LoopData> data);

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  // Python's bool is an int subclass, so arithmetic and comparisons accept it.
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_seq() const { return kind() == Kind::kSeq; }
  bool is_dict() const { return kind() == Kind::kDict; }
  bool is_namespace() const { return kind() == Kind::kNamespace; }
  bool is_callable() const { return kind() == Kind::kCallable; }
  bool is_loop() const { return kind() == Kind::kLoop; }
  // list or tuple: indexable, sliceable, JSON-serializable sequences.
  bool is_list_like() const;

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return is_bool() ? (as_bool() ? 1 : 0) : std::get<int64_t>(v_); }
  double as_double() const { return is_float() ? std::get<double>(v_) : static_cast<double>(as_int()); }
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const SeqData& as_seq() const { return *std::get<std::shared_ptr<const SeqData>>(v_); }
  const std::shared_ptr<const SeqData>& seq_ptr() const { return std::get<std::shared_ptr<const SeqData>>(v_); }
  const DictData& as_dict() const { return *std::get<std::shared_ptr<const DictData>>(v_); }
  NamespaceData& as_namespace() const { return *std::get<std::shared_ptr<NamespaceData>>(v_); }
  const CallableData& as_callable() const { return *std::get<std::shared_ptr<const CallableData>>(v_); }
  LoopData& as_loop() const { return *std::get<std::shared_ptr<LoopData>>(v_); }
  const std::shared_ptr<NamespaceData>& namespace_ptr() const { return std::get<std::shared_ptr<NamespaceData>>(v_); }
  const std::shared_ptr<LoopData>& loop_ptr() const { return std::get<std::shared_ptr<LoopData>>(v_); }
  const UndefinedInfo* undefined_info() const { return std::get<0>(v_).get(); }
  bool is_unsupported() const { return is_undefined() && undefined_info() && undefined_info()->unsupported; }
  // Identity for jinja2's `sameas` test on shared objects.
  const void* identity() const;

 private:
  using Storage = std::variant<std::shared_ptr<const UndefinedInfo>, NoneTag, bool, int64_t, double,
                               std::string, std::shared_ptr<const SeqData>,
                               std::shared_ptr<const DictData>, std::shared_ptr<NamespaceData>,
                               std::shared_ptr<const CallableData>, std::shared_ptr<LoopData>>;
  explicit Value(Storage s) : v_(std::move(s)) {}
  Storage v_;
};

// Deepest nesting of lists/tuples/dicts a value may have. Deeper values are refused so that
// printing, comparing and freeing them cannot overflow the stack.
constexpr uint32_t kMaxValueDepth = 512;
// Nesting depth of a container (0 for scalars).
uint32_t value_depth(const Value& v);

// Python's type(x).__name__, for error messages that match jinja2's.
std::string type_name(const Value& v);
// The error for using an Undefined where jinja2 raises UndefinedError.
Status undefined_error(const Value& v);
Result<bool> truthy(const Value& v);
// Python ==, where 1 == 1.0 == True and containers compare element-wise.
bool py_equal(const Value& a, const Value& b);
// Python <, for sorting and comparison operators; TypeError for unorderable pairs.
Result<bool> py_less(const Value& a, const Value& b);
Result<int64_t> py_len(const Value& v);
// Items of an iterable the way a Python for loop sees them (dict -> keys, str -> chars).
// Consumes generators.
Result<std::vector<Value>> iterate(const Value& v);

// str(x) and repr(x).
Result<std::string> py_str(const Value& v);
Result<std::string> py_repr(const Value& v);
std::string format_float(double d);   // Python repr(float)
std::string repr_string(std::string_view s);

Result<Value> from_json(const nlohmann::ordered_json& j);
struct JsonDumpOptions {
  bool ensure_ascii = false;
  bool has_indent = false;
  std::string indent;  // the indent unit when has_indent
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
// json.dumps(x, ...) exactly as Python writes it.
Result<std::string> json_dumps(const Value& v, const JsonDumpOptions& options);

}  // namespace ember::chat
