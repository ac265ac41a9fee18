// Python attributes of values that templates call: str methods (strip, split, ...),
// dict methods (get, items, ...), list methods, and the fields of jinja2's loop object.
// Mutating methods are refused as ImmutableSandboxedEnvironment refuses them; Python
// methods ember does not implement fail by name when used.
#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

#include "chat/interpreter.h"
#include "chat/string_ops.h"
#include "chat/utf8.h"

namespace ember::chat {
namespace {

using StrMethod = Result<Value> (*)(const std::string& self, CallArgs& args);

// Padding past this is refused rather than allocated (hostile templates).
constexpr int64_t kMaxPadWidth = 1 << 24;

Result<std::string> string_arg(const Value& v, const char* func) {
  if (!v.is_string()) return Status::errorf("TypeError: {}() argument must be str, not {}", func, type_name(v));
  return v.as_string();
}

Result<Value> strip_method(const std::string& self, CallArgs& args, bool left, bool right, const char* name) {
  ArgReader r(name, args);
  Value chars = r.get("chars", Value::none());
  EMBER_RETURN_IF_ERROR(r.finish());
  if (!chars.is_none() && !chars.is_string())
    return Status::errorf("TypeError: {} arg must be None or str", name);
  return Value(py_strip(self, chars.is_none() ? nullptr : &chars.as_string(), left, right));
}

Result<Value> affix_method(const std::string& self, CallArgs& args, bool prefix) {
  const char* name = prefix ? "startswith" : "endswith";
  ArgReader r(name, args);
  Value affix = r.get("prefix");
  Value start = r.get("start", Value::none());
  Value end = r.get("end", Value::none());
  EMBER_RETURN_IF_ERROR(r.finish());
  std::string subject = self;
  if (!start.is_none() || !end.is_none()) {
    EMBER_ASSIGN_OR_RETURN(Value sliced, slice_value(Value(self), start, end, Value::none()));
    subject = sliced.as_string();
  }
  auto test = [&](const std::string& a) {
    if (a.size() > subject.size()) return false;
    return prefix ? subject.compare(0, a.size(), a) == 0 : subject.compare(subject.size() - a.size(), a.size(), a) == 0;
  };
  if (affix.is_string()) return Value(test(affix.as_string()));
  if (affix.is_seq() && affix.as_seq().flavor == SeqFlavor::kTuple) {
    for (const auto& a : affix.as_seq().items) {
      if (!a.is_string()) return Status::errorf("TypeError: tuple for {} must only contain str, not {}", name, type_name(a));
      if (test(a.as_string())) return Value(true);
    }
    return Value(false);
  }
  return Status::errorf("TypeError: {} first arg must be str or a tuple of str, not {}", name, type_name(affix));
}

Result<Value> split_method(const std::string& self, CallArgs& args, bool from_right) {
  ArgReader r(from_right ? "rsplit" : "split", args);
  Value sep = r.get("sep", Value::none());
  Value maxsplit = r.get("maxsplit", Value(-1));
  EMBER_RETURN_IF_ERROR(r.finish());
  if (!sep.is_none() && !sep.is_string()) return Status::errorf("TypeError: must be str or None, not {}", type_name(sep));
  if (!maxsplit.is_int() && !maxsplit.is_bool()) return Status::error("TypeError: maxsplit must be an integer");
  if (sep.is_string() && sep.as_string().empty()) return Status::error("ValueError: empty separator");
  std::vector<std::string> parts = py_split(self, sep.is_none() ? nullptr : &sep.as_string(), maxsplit.as_int(), from_right);
  std::vector<Value> out;
  out.reserve(parts.size());
  for (auto& p : parts) out.emplace_back(std::move(p));
  return Value::seq(std::move(out));
}

Result<Value> find_method(const std::string& self, CallArgs& args, bool from_right, bool raise, const char* name) {
  ArgReader r(name, args);
  Value sub = r.get("sub");
  EMBER_RETURN_IF_ERROR(r.finish());
  EMBER_ASSIGN_OR_RETURN(std::string needle, string_arg(sub, name));
  size_t pos = from_right ? self.rfind(needle) : self.find(needle);
  if (pos == std::string::npos) {
    if (raise) return Status::error("ValueError: substring not found");
    return Value(-1);
  }
  return Value(static_cast<int64_t>(count_code_points(std::string_view(self).substr(0, pos))));
}

Result<Value> justify_method(const std::string& self, CallArgs& args, char how, const char* name) {
  ArgReader r(name, args);
  Value width = r.get("width");
  Value fill = r.get("fillchar", Value(" "));
  EMBER_RETURN_IF_ERROR(r.finish());
  if (!width.is_int() && !width.is_bool()) return Status::error("TypeError: width must be an integer");
  if (!fill.is_string() || count_code_points(fill.as_string()) != 1)
    return Status::error("TypeError: The fill character must be exactly one character long");
  if (width.as_int() > kMaxPadWidth) return Status::error("MemoryError: width too large");
  return Value(py_justify(self, width.as_int(), fill.as_string(), how));
}

Result<Value> predicate(const std::string& self, bool (*pred)(char32_t)) {
  if (self.empty()) return Value(false);
  for (char32_t cp : utf8_decode(self))
    if (!pred(cp)) return Value(false);
  return Value(true);
}

Result<Value> case_predicate(const std::string& self, bool upper) {
  bool any_cased = false;
  for (char32_t cp : utf8_decode(self)) {
    if (upper ? py_islower(cp) : py_isupper(cp)) return Value(false);
    if (py_islower(cp) || py_isupper(cp)) any_cased = true;
  }
  return Value(any_cased);
}

Result<Value> no_args(CallArgs& args, const char* name, Value v) {
  ArgReader r(name, args);
  EMBER_RETURN_IF_ERROR(r.finish());
  return v;
}

const std::unordered_map<std::string_view, StrMethod>& str_methods() {
  static const std::unordered_map<std::string_view, StrMethod> table = {
      {"strip", [](const std::string& s, CallArgs& a) { return strip_method(s, a, true, true, "strip"); }},
      {"lstrip", [](const std::string& s, CallArgs& a) { return strip_method(s, a, true, false, "lstrip"); }},
      {"rstrip", [](const std::string& s, CallArgs& a) { return strip_method(s, a, false, true, "rstrip"); }},
      {"startswith", [](const std::string& s, CallArgs& a) { return affix_method(s, a, true); }},
      {"endswith", [](const std::string& s, CallArgs& a) { return affix_method(s, a, false); }},
      {"split", [](const std::string& s, CallArgs& a) { return split_method(s, a, false); }},
      {"rsplit", [](const std::string& s, CallArgs& a) { return split_method(s, a, true); }},
      {"splitlines",
       [](const std::string& s, CallArgs& a) -> Result<Value> {
         ArgReader r("splitlines", a);
         Value keep = r.get("keepends", Value(false));
         EMBER_RETURN_IF_ERROR(r.finish());
         EMBER_ASSIGN_OR_RETURN(bool keepends, truthy(keep));
         std::vector<Value> out;
         for (auto& line : py_splitlines(s, keepends)) out.emplace_back(std::move(line));
         return Value::seq(std::move(out));
       }},
      {"replace",
       [](const std::string& s, CallArgs& a) -> Result<Value> {
         ArgReader r("replace", a);
         Value old_v = r.get("old"), new_v = r.get("new"), count = r.get("count", Value(-1));
         EMBER_RETURN_IF_ERROR(r.finish());
         EMBER_ASSIGN_OR_RETURN(std::string o, string_arg(old_v, "replace"));
         EMBER_ASSIGN_OR_RETURN(std::string n, string_arg(new_v, "replace"));
         if (!count.is_int() && !count.is_bool()) return Status::error("TypeError: count must be an integer");
         return Value(py_replace(s, o, n, count.as_int()));
       }},
      {"upper", [](const std::string& s, CallArgs& a) { return no_args(a, "upper", Value(py_upper(s))); }},
      {"lower", [](const std::string& s, CallArgs& a) { return no_args(a, "lower", Value(py_lower(s))); }},
      {"casefold", [](const std::string& s, CallArgs& a) { return no_args(a, "casefold", Value(py_lower(s))); }},
      {"title", [](const std::string& s, CallArgs& a) { return no_args(a, "title", Value(py_title(s))); }},
      {"capitalize", [](const std::string& s, CallArgs& a) { return no_args(a, "capitalize", Value(py_capitalize(s))); }},
      {"find", [](const std::string& s, CallArgs& a) { return find_method(s, a, false, false, "find"); }},
      {"rfind", [](const std::string& s, CallArgs& a) { return find_method(s, a, true, false, "rfind"); }},
      {"index", [](const std::string& s, CallArgs& a) { return find_method(s, a, false, true, "index"); }},
      {"rindex", [](const std::string& s, CallArgs& a) { return find_method(s, a, true, true, "rindex"); }},
      {"count",
       [](const std::string& s, CallArgs& a) -> Result<Value> {
         ArgReader r("count", a);
         Value sub = r.get("sub");
         EMBER_RETURN_IF_ERROR(r.finish());
         EMBER_ASSIGN_OR_RETURN(std::string needle, string_arg(sub, "count"));
         return Value(py_count(s, needle));
       }},
      {"join",
       [](const std::string& s, CallArgs& a) -> Result<Value> {
         ArgReader r("join", a);
         Value items = r.get("iterable");
         EMBER_RETURN_IF_ERROR(r.finish());
         EMBER_ASSIGN_OR_RETURN(std::vector<Value> parts, iterate(items));
         std::string out;
         for (size_t i = 0; i < parts.size(); ++i) {
           if (!parts[i].is_string())
             return Status::errorf("TypeError: sequence item {}: expected str instance, {} found", i, type_name(parts[i]));
           if (i) out += s;
           out += parts[i].as_string();
         }
         return Value(std::move(out));
       }},
      {"format",
       [](const std::string& s, CallArgs& a) -> Result<Value> {
         EMBER_ASSIGN_OR_RETURN(std::string out, brace_format(s, a));
         return Value(std::move(out));
       }},
      {"isdigit", [](const std::string& s, CallArgs& a) { return no_args(a, "isdigit", predicate(s, py_isdigit).value()); }},
      {"isdecimal", [](const std::string& s, CallArgs& a) { return no_args(a, "isdecimal", predicate(s, py_isdigit).value()); }},
      {"isnumeric", [](const std::string& s, CallArgs& a) { return no_args(a, "isnumeric", predicate(s, py_isdigit).value()); }},
      {"isalpha", [](const std::string& s, CallArgs& a) { return no_args(a, "isalpha", predicate(s, py_isalpha).value()); }},
      {"isalnum",
       [](const std::string& s, CallArgs& a) {
         return no_args(a, "isalnum", predicate(s, [](char32_t c) { return py_isalpha(c) || py_isdigit(c); }).value());
       }},
      {"isspace", [](const std::string& s, CallArgs& a) { return no_args(a, "isspace", predicate(s, py_isspace).value()); }},
      {"isascii", [](const std::string& s, CallArgs& a) { return no_args(a, "isascii", Value(is_ascii(s))); }},
      {"islower", [](const std::string& s, CallArgs& a) { return no_args(a, "islower", case_predicate(s, false).value()); }},
      {"isupper", [](const std::string& s, CallArgs& a) { return no_args(a, "isupper", case_predicate(s, true).value()); }},
      {"center", [](const std::string& s, CallArgs& a) { return justify_method(s, a, '^', "center"); }},
      {"ljust", [](const std::string& s, CallArgs& a) { return justify_method(s, a, '<', "ljust"); }},
      {"rjust", [](const std::string& s, CallArgs& a) { return justify_method(s, a, '>', "rjust"); }},
      {"zfill",
       [](const std::string& s, CallArgs& a) -> Result<Value> {
         ArgReader r("zfill", a);
         Value width = r.get("width");
         EMBER_RETURN_IF_ERROR(r.finish());
         if (!width.is_int() && !width.is_bool()) return Status::error("TypeError: width must be an integer");
         if (width.as_int() > kMaxPadWidth) return Status::error("MemoryError: width too large");
         return Value(py_zfill(s, width.as_int()));
       }},
      {"removeprefix",
       [](const std::string& s, CallArgs& a) -> Result<Value> {
         ArgReader r("removeprefix", a);
         Value p = r.get("prefix");
         EMBER_RETURN_IF_ERROR(r.finish());
         EMBER_ASSIGN_OR_RETURN(std::string pre, string_arg(p, "removeprefix"));
         return Value(s.compare(0, pre.size(), pre) == 0 ? s.substr(pre.size()) : s);
       }},
      {"removesuffix",
       [](const std::string& s, CallArgs& a) -> Result<Value> {
         ArgReader r("removesuffix", a);
         Value p = r.get("suffix");
         EMBER_RETURN_IF_ERROR(r.finish());
         EMBER_ASSIGN_OR_RETURN(std::string suf, string_arg(p, "removesuffix"));
         bool has = !suf.empty() && s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
         return Value(has ? s.substr(0, s.size() - suf.size()) : s);
       }},
      {"partition",
       [](const std::string& s, CallArgs& a) -> Result<Value> {
         ArgReader r("partition", a);
         Value sep = r.get("sep");
         EMBER_RETURN_IF_ERROR(r.finish());
         EMBER_ASSIGN_OR_RETURN(std::string p, string_arg(sep, "partition"));
         if (p.empty()) return Status::error("ValueError: empty separator");
         size_t pos = s.find(p);
         if (pos == std::string::npos) return Value::seq({Value(s), Value(""), Value("")}, SeqFlavor::kTuple);
         return Value::seq({Value(s.substr(0, pos)), Value(p), Value(s.substr(pos + p.size()))}, SeqFlavor::kTuple);
       }},
      {"rpartition",
       [](const std::string& s, CallArgs& a) -> Result<Value> {
         ArgReader r("rpartition", a);
         Value sep = r.get("sep");
         EMBER_RETURN_IF_ERROR(r.finish());
         EMBER_ASSIGN_OR_RETURN(std::string p, string_arg(sep, "rpartition"));
         if (p.empty()) return Status::error("ValueError: empty separator");
         size_t pos = s.rfind(p);
         if (pos == std::string::npos) return Value::seq({Value(""), Value(""), Value(s)}, SeqFlavor::kTuple);
         return Value::seq({Value(s.substr(0, pos)), Value(p), Value(s.substr(pos + p.size()))}, SeqFlavor::kTuple);
       }},
  };
  return table;
}

bool is_python_str_method(std::string_view name) {
  static constexpr std::string_view kAll[] = {
      "encode", "expandtabs", "format_map", "isidentifier", "isprintable", "istitle", "maketrans",
      "swapcase", "translate"};
  return std::find(std::begin(kAll), std::end(kAll), name) != std::end(kAll);
}

Value unsupported(const std::string& type, const std::string& name) {
  return Value::undefined(fmt::format("unsupported: Python method {}.{}() is not implemented by ember", type, name), true);
}

Value unsafe(const std::string& type, const std::string& name) {
  return Value::undefined(fmt::format("SecurityError: access to attribute '{}' of '{}' object is unsafe.", name, type));
}

Value bind_method(const std::string& name, std::function<Result<Value>(CallArgs&)> fn) {
  return Value::callable(name, [fn = std::move(fn)](Interpreter&, CallArgs& args) { return fn(args); });
}

std::optional<Value> dict_attribute(const Value& obj, const std::string& name) {
  auto view = [obj](SeqFlavor flavor) {
    std::vector<Value> items;
    for (const auto& [k, v] : obj.as_dict().items) {
      if (flavor == SeqFlavor::kDictKeys) items.push_back(k);
      else if (flavor == SeqFlavor::kDictValues) items.push_back(v);
      else items.push_back(Value::seq({k, v}, SeqFlavor::kTuple));
    }
    return Value::seq(std::move(items), flavor);
  };
  if (name == "get") {
    return bind_method("get", [obj](CallArgs& args) -> Result<Value> {
      ArgReader r("get", args);
      Value key = r.get("key");
      Value def = r.get("default", Value::none());
      EMBER_RETURN_IF_ERROR(r.finish());
      if (const Value* v = obj.as_dict().find(key)) return *v;
      return def;
    });
  }
  if (name == "items" || name == "keys" || name == "values") {
    SeqFlavor flavor = name == "items" ? SeqFlavor::kDictItems : name == "keys" ? SeqFlavor::kDictKeys : SeqFlavor::kDictValues;
    return bind_method(name, [view, flavor, name](CallArgs& args) -> Result<Value> {
      ArgReader r(name, args);
      EMBER_RETURN_IF_ERROR(r.finish());
      return view(flavor);
    });
  }
  if (name == "copy") {
    return bind_method("copy", [obj](CallArgs& args) -> Result<Value> {
      ArgReader r("copy", args);
      EMBER_RETURN_IF_ERROR(r.finish());
      return Value::dict(obj.as_dict());
    });
  }
  if (name == "pop" || name == "popitem" || name == "setdefault" || name == "update" || name == "clear")
    return unsafe("dict", name);
  if (name == "fromkeys") return unsupported("dict", name);
  return std::nullopt;
}

std::optional<Value> seq_attribute(const Value& obj, const std::string& name) {
  const SeqData& d = obj.as_seq();
  const bool list_like = d.flavor == SeqFlavor::kList || d.flavor == SeqFlavor::kTuple || d.flavor == SeqFlavor::kRange;
  if (!list_like) return std::nullopt;
  if (name == "index" || name == "count") {
    return bind_method(name, [obj, name](CallArgs& args) -> Result<Value> {
      ArgReader r(name, args);
      Value x = r.get("value");
      EMBER_RETURN_IF_ERROR(r.finish());
      const auto& items = obj.as_seq().items;
      int64_t count = 0;
      for (size_t i = 0; i < items.size(); ++i) {
        if (!py_equal(items[i], x)) continue;
        if (name == "index") return Value(static_cast<int64_t>(i));
        ++count;
      }
      if (name == "index") return Status::errorf("ValueError: value is not in {}", type_name(obj));
      return Value(count);
    });
  }
  if (d.flavor == SeqFlavor::kRange && (name == "start" || name == "stop" || name == "step"))
    return Value(name == "start" ? d.range_start : name == "stop" ? d.range_stop : d.range_step);
  if (d.flavor == SeqFlavor::kList) {
    if (name == "copy") {
      return bind_method("copy", [obj](CallArgs& args) -> Result<Value> {
        ArgReader r("copy", args);
        EMBER_RETURN_IF_ERROR(r.finish());
        return Value::seq(obj.as_seq().items);
      });
    }
    if (name == "append" || name == "extend" || name == "insert" || name == "pop" || name == "remove" ||
        name == "reverse" || name == "sort" || name == "clear")
      return unsafe("list", name);
  }
  return std::nullopt;
}

std::optional<Value> loop_attribute(const Value& obj, const std::string& name) {
  LoopData& l = obj.as_loop();
  const auto& items = l.items->items;
  if (name == "index") return Value(l.index0 + 1);
  if (name == "index0") return Value(l.index0);
  if (name == "revindex") return Value(l.length - l.index0);
  if (name == "revindex0") return Value(l.length - l.index0 - 1);
  if (name == "first") return Value(l.index0 == 0);
  if (name == "last") return Value(l.index0 + 1 == l.length);
  if (name == "length") return Value(l.length);
  if (name == "depth") return Value(l.depth0 + 1);
  if (name == "depth0") return Value(l.depth0);
  if (name == "previtem") {
    if (l.index0 == 0) return Value::undefined("there is no previous item");
    return items[static_cast<size_t>(l.index0 - 1)];
  }
  if (name == "nextitem") {
    if (l.index0 + 1 >= l.length) return Value::undefined("there is no next item");
    return items[static_cast<size_t>(l.index0 + 1)];
  }
  if (name == "cycle") {
    return Value::callable("cycle", [obj](Interpreter&, CallArgs& args) -> Result<Value> {
      if (args.args.empty()) return Status::error("TypeError: no items for cycling given");
      return args.args[static_cast<size_t>(obj.as_loop().index0) % args.args.size()];
    });
  }
  if (name == "changed") {
    return Value::callable("changed", [obj](Interpreter&, CallArgs& args) -> Result<Value> {
      LoopData& loop = obj.as_loop();
      Value current = Value::seq(args.args, SeqFlavor::kTuple);
      if (loop.has_changed_value && py_equal(*loop.changed_value, current)) return Value(false);
      loop.has_changed_value = true;
      loop.changed_value = std::make_shared<Value>(current);
      return Value(true);
    });
  }
  return std::nullopt;
}

}  // namespace

std::optional<Value> builtin_attribute(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::kString: {
      const auto& table = str_methods();
      auto it = table.find(name);
      if (it != table.end()) {
        StrMethod fn = it->second;
        std::string self = obj.as_string();
        return Value::callable(name, [fn, self](Interpreter&, CallArgs& args) { return fn(self, args); });
      }
      if (is_python_str_method(name)) return unsupported("str", name);
      return std::nullopt;
    }
    case Value::Kind::kDict: return dict_attribute(obj, name);
    case Value::Kind::kSeq: return seq_attribute(obj, name);
    case Value::Kind::kLoop: return loop_attribute(obj, name);
    case Value::Kind::kInt:
    case Value::Kind::kBool:
    case Value::Kind::kFloat:
      if (name == "real" || name == "imag" || name == "numerator" || name == "denominator" || name == "conjugate" ||
          name == "bit_length" || name == "to_bytes" || name == "as_integer_ratio" || name == "is_integer" ||
          name == "hex" || name == "bit_count")
        return unsupported(type_name(obj), name);
      return std::nullopt;
    default: return std::nullopt;
  }
}

}  // namespace ember::chat
