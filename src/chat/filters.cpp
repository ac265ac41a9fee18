// Text and scalar filters, plus the filter dispatcher. Sequence filters are in
// filters_seq.cpp. Semantics follow jinja2 3.1's filters.py and transformers' tojson.
#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <unordered_map>

#include "chat/filters_impl.h"
#include "chat/string_ops.h"
#include "chat/utf8.h"

namespace ember::chat {
namespace {

constexpr int64_t kMaxWidth = 1 << 24;

Result<int64_t> int_arg(const Value& v, const char* what) {
  if (!v.is_int() && !v.is_bool()) return Status::errorf("TypeError: {} must be an integer, not {}", what, type_name(v));
  return v.as_int();
}

Result<Value> f_trim(Interpreter&, const Value& v, CallArgs& args) {
  ArgReader r("trim", args);
  Value chars = r.get("chars", Value::none());
  EMBER_RETURN_IF_ERROR(r.finish());
  EMBER_ASSIGN_OR_RETURN(std::string s, soft_str(v));
  if (!chars.is_none() && !chars.is_string()) return Status::error("TypeError: strip arg must be None or str");
  return Value(py_strip(s, chars.is_none() ? nullptr : &chars.as_string(), true, true));
}

Result<Value> f_upper(Interpreter&, const Value& v, CallArgs& args) {
  EMBER_RETURN_IF_ERROR(ArgReader("upper", args).finish());
  EMBER_ASSIGN_OR_RETURN(std::string s, soft_str(v));
  return Value(py_upper(s));
}

Result<Value> f_lower(Interpreter&, const Value& v, CallArgs& args) {
  EMBER_RETURN_IF_ERROR(ArgReader("lower", args).finish());
  EMBER_ASSIGN_OR_RETURN(std::string s, soft_str(v));
  return Value(py_lower(s));
}

Result<Value> f_capitalize(Interpreter&, const Value& v, CallArgs& args) {
  EMBER_RETURN_IF_ERROR(ArgReader("capitalize", args).finish());
  EMBER_ASSIGN_OR_RETURN(std::string s, soft_str(v));
  return Value(py_capitalize(s));
}

Result<Value> f_title(Interpreter&, const Value& v, CallArgs& args) {
  EMBER_RETURN_IF_ERROR(ArgReader("title", args).finish());
  EMBER_ASSIGN_OR_RETURN(std::string s, soft_str(v));
  // jinja2 splits at runs of whitespace and -({[< and capitalizes each piece.
  std::u32string cps = utf8_decode(s);
  std::u32string out;
  bool at_start = true;
  for (char32_t c : cps) {
    bool sep = py_isspace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    if (sep) {
      out.push_back(c);
      at_start = true;
    } else if (at_start) {
      if (c == 0xDF) out.append(U"SS");
      else py_append_upper(out, c);
      at_start = false;
    } else {
      py_append_lower(out, c);
    }
  }
  return Value(utf8_encode(out));
}

Result<Value> f_replace(Interpreter& interp, const Value& v, CallArgs& args) {
  ArgReader r("replace", args);
  Value old_v = r.get("old"), new_v = r.get("new"), count = r.get("count", Value::none());
  EMBER_RETURN_IF_ERROR(r.finish());
  EMBER_ASSIGN_OR_RETURN(std::string s, soft_str(v));
  EMBER_ASSIGN_OR_RETURN(std::string o, soft_str(old_v));
  EMBER_ASSIGN_OR_RETURN(std::string n, soft_str(new_v));
  int64_t c = -1;
  if (!count.is_none()) {
    EMBER_ASSIGN_OR_RETURN(c, int_arg(count, "count"));
  }
  std::string out = py_replace(s, o, n, c);
  EMBER_RETURN_IF_ERROR(interp.check_size(out.size()));
  return Value(std::move(out));
}

Result<Value> f_string(Interpreter&, const Value& v, CallArgs& args) {
  EMBER_RETURN_IF_ERROR(ArgReader("string", args).finish());
  EMBER_ASSIGN_OR_RETURN(std::string s, soft_str(v));
  return Value(std::move(s));
}

Result<Value> f_safe(Interpreter& interp, const Value& v, CallArgs& args) { return f_string(interp, v, args); }

Result<Value> f_escape(Interpreter&, const Value& v, CallArgs& args) {
  EMBER_RETURN_IF_ERROR(ArgReader("escape", args).finish());
  EMBER_ASSIGN_OR_RETURN(std::string s, soft_str(v));
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return Value(std::move(out));
}

Result<Value> f_length(Interpreter&, const Value& v, CallArgs& args) {
  EMBER_RETURN_IF_ERROR(ArgReader("length", args).finish());
  EMBER_ASSIGN_OR_RETURN(int64_t n, py_len(v));
  return Value(n);
}

Result<Value> f_default(Interpreter&, const Value& v, CallArgs& args) {
  ArgReader r("default", args);
  Value def = r.get("default_value", Value(""));
  Value boolean = r.get("boolean", Value(false));
  EMBER_RETURN_IF_ERROR(r.finish());
  EMBER_ASSIGN_OR_RETURN(bool use_truth, truthy(boolean));
  if (v.is_undefined() && !v.is_unsupported()) return def;
  if (use_truth) {
    EMBER_ASSIGN_OR_RETURN(bool t, truthy(v));
    if (!t) return def;
  }
  return v;
}

// Python's float() of a string: surrounding whitespace, underscores between digits,
// inf/nan spellings.
std::optional<double> parse_python_float(const std::string& text) {
  std::string s = py_strip(text, nullptr, true, true);
  std::string clean;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (i == 0 || i + 1 >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i - 1])) ||
          !std::isdigit(static_cast<unsigned char>(s[i + 1])))
        return std::nullopt;
      continue;
    }
    clean.push_back(s[i]);
  }
  if (clean.empty()) return std::nullopt;
  std::string lower = py_lower(clean);
  std::string body = (lower[0] == '+' || lower[0] == '-') ? lower.substr(1) : lower;
  double sign = lower[0] == '-' ? -1.0 : 1.0;
  if (body == "inf" || body == "infinity") return sign * HUGE_VAL;
  if (body == "nan") return std::nan("");
  for (char c : body)
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == '+' || c == '-')) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  double d = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return std::nullopt;
  return d;
}

std::optional<int64_t> parse_python_int(const std::string& text, int64_t base) {
  std::string s = py_strip(text, nullptr, true, true);
  if (s.empty() || base < 2 || base > 36) return std::nullopt;
  bool negative = false;
  size_t i = 0;
  if (s[0] == '+' || s[0] == '-') {
    negative = s[0] == '-';
    ++i;
  }
  if (i >= s.size()) return std::nullopt;
  int64_t v = 0;
  bool prev_digit = false;
  for (; i < s.size(); ++i) {
    char c = s[i];
    if (c == '_') {
      if (!prev_digit || i + 1 >= s.size()) return std::nullopt;
      prev_digit = false;
      continue;
    }
    int d = std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
            : std::isalpha(static_cast<unsigned char>(c)) ? (c | 0x20) - 'a' + 10
                                                          : 99;
    if (d >= base) return std::nullopt;
    if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, d, &v)) return std::nullopt;
    prev_digit = true;
  }
  return negative ? -v : v;
}

Result<Value> f_int(Interpreter&, const Value& v, CallArgs& args) {
  ArgReader r("int", args);
  Value def = r.get("default", Value(0));
  Value base = r.get("base", Value(10));
  EMBER_RETURN_IF_ERROR(r.finish());
  EMBER_ASSIGN_OR_RETURN(int64_t b, int_arg(base, "base"));
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  auto from_float = [&](double d) -> Result<Value> {
    if (!std::isfinite(d)) return def;
    if (std::fabs(d) >= 9.2e18) return Status::error("OverflowError: integer past 64 bits");
    return Value(static_cast<int64_t>(std::trunc(d)));
  };
  if (v.is_float()) return from_float(v.as_double());
  if (v.is_string()) {
    if (auto i = parse_python_int(v.as_string(), b)) return Value(*i);
    // jinja2's quirk: "42.23"|int is 42, through float().
    if (auto d = parse_python_float(v.as_string())) return from_float(*d);
    return def;
  }
  return def;
}

Result<Value> f_float(Interpreter&, const Value& v, CallArgs& args) {
  ArgReader r("float", args);
  Value def = r.get("default", Value(0.0));
  EMBER_RETURN_IF_ERROR(r.finish());
  if (v.is_number()) return Value(v.as_double());
  if (v.is_string()) {
    if (auto d = parse_python_float(v.as_string())) return Value(*d);
  }
  return def;
}

Result<Value> f_abs(Interpreter&, const Value& v, CallArgs& args) {
  EMBER_RETURN_IF_ERROR(ArgReader("abs", args).finish());
  if (v.is_float()) return Value(std::fabs(v.as_double()));
  if (v.is_number()) {
    if (v.as_int() == INT64_MIN) return Status::error("OverflowError: integer past 64 bits");
    return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
  }
  return Status::errorf("TypeError: bad operand type for abs(): '{}'", type_name(v));
}

Result<Value> f_round(Interpreter&, const Value& v, CallArgs& args) {
  ArgReader r("round", args);
  Value precision = r.get("precision", Value(0));
  Value method = r.get("method", Value("common"));
  EMBER_RETURN_IF_ERROR(r.finish());
  EMBER_ASSIGN_OR_RETURN(int64_t p, int_arg(precision, "precision"));
  if (!method.is_string() || (method.as_string() != "common" && method.as_string() != "ceil" &&
                              method.as_string() != "floor"))
    return Status::error("FilterArgumentError: method must be common, ceil or floor");
  if (!v.is_number()) return Status::errorf("TypeError: type {} doesn't define __round__ method", type_name(v));
  double d = v.as_double();
  if (method.as_string() != "common") {
    double scale = std::pow(10.0, static_cast<double>(p));
    double r2 = method.as_string() == "ceil" ? std::ceil(d * scale) : std::floor(d * scale);
    return Value(r2 / scale);
  }
  if (!v.is_float()) return Value(v.as_int());  // round(int, n) stays an int (n >= 0)
  if (!std::isfinite(d)) return Value(d);
  if (p < 0 || p > 300) return Status::error("unsupported: round() precision outside 0..300");
  // Python rounds the exact binary value half-to-even at `p` decimals; formatting with
  // correctly rounded %.*f and reading back gives the same double.
  std::string text = fmt::format("{:.{}f}", d, p);
  return Value(std::strtod(text.c_str(), nullptr));
}

Result<Value> f_center(Interpreter&, const Value& v, CallArgs& args) {
  ArgReader r("center", args);
  Value width = r.get("width", Value(80));
  EMBER_RETURN_IF_ERROR(r.finish());
  EMBER_ASSIGN_OR_RETURN(int64_t w, int_arg(width, "width"));
  if (w > kMaxWidth) return Status::error("MemoryError: width too large");
  EMBER_ASSIGN_OR_RETURN(std::string s, soft_str(v));
  return Value(py_justify(s, w, " ", '^'));
}

Result<Value> f_indent(Interpreter& interp, const Value& v, CallArgs& args) {
  ArgReader r("indent", args);
  Value width = r.get("width", Value(4));
  Value first = r.get("first", Value(false));
  Value blank = r.get("blank", Value(false));
  EMBER_RETURN_IF_ERROR(r.finish());
  std::string indention;
  if (width.is_string()) {
    indention = width.as_string();
  } else {
    EMBER_ASSIGN_OR_RETURN(int64_t w, int_arg(width, "width"));
    if (w > kMaxWidth) return Status::error("MemoryError: width too large");
    indention = std::string(static_cast<size_t>(std::max<int64_t>(w, 0)), ' ');
  }
  EMBER_ASSIGN_OR_RETURN(bool indent_first, truthy(first));
  EMBER_ASSIGN_OR_RETURN(bool indent_blank, truthy(blank));
  EMBER_ASSIGN_OR_RETURN(std::string s, soft_str(v));
  s += "\n";  // jinja2's quirk so that splitlines keeps a trailing empty line
  std::vector<std::string> lines = py_splitlines(s, false);
  std::string out;
  if (indent_blank) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) out += "\n" + indention;
      out += lines[i];
    }
  } else {
    out = lines.empty() ? std::string() : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      out += "\n";
      if (!lines[i].empty()) out += indention;
      out += lines[i];
      EMBER_RETURN_IF_ERROR(interp.check_size(out.size()));
    }
  }
  if (indent_first) out = indention + out;
  return Value(std::move(out));
}

Result<Value> f_truncate(Interpreter&, const Value& v, CallArgs& args) {
  ArgReader r("truncate", args);
  Value length = r.get("length", Value(255));
  Value killwords = r.get("killwords", Value(false));
  Value end = r.get("end", Value("..."));
  Value leeway = r.get("leeway", Value::none());
  EMBER_RETURN_IF_ERROR(r.finish());
  EMBER_ASSIGN_OR_RETURN(int64_t n, int_arg(length, "length"));
  int64_t lee = 5;
  if (!leeway.is_none()) {
    EMBER_ASSIGN_OR_RETURN(lee, int_arg(leeway, "leeway"));
  }
  EMBER_ASSIGN_OR_RETURN(std::string s, soft_str(v));
  EMBER_ASSIGN_OR_RETURN(std::string e, soft_str(end));
  EMBER_ASSIGN_OR_RETURN(bool kill, truthy(killwords));
  int64_t end_len = static_cast<int64_t>(count_code_points(e));
  if (n < end_len) return Status::error("AssertionError: expected length >= len(end)");
  if (lee < 0) return Status::error("AssertionError: expected leeway >= 0");
  std::u32string cps = utf8_decode(s);
  if (static_cast<int64_t>(cps.size()) <= n + lee) return Value(s);
  std::string head = utf8_encode(std::u32string_view(cps).substr(0, static_cast<size_t>(n - end_len)));
  if (kill) return Value(head + e);
  const std::string space = " ";
  std::vector<std::string> parts = py_split(head, &space, 1, true);
  return Value(parts[0] + e);
}

Result<Value> f_wordcount(Interpreter&, const Value& v, CallArgs& args) {
  EMBER_RETURN_IF_ERROR(ArgReader("wordcount", args).finish());
  EMBER_ASSIGN_OR_RETURN(std::string s, soft_str(v));
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : utf8_decode(s)) {
    bool word = c == '_' || py_isalpha(c) || py_isdigit(c);
    if (word && !in_word) ++n;
    in_word = word;
  }
  return Value(n);
}

Result<Value> f_format(Interpreter&, const Value& v, CallArgs& args) {
  EMBER_ASSIGN_OR_RETURN(std::string s, soft_str(v));
  if (!args.args.empty() && !args.kwargs.empty())
    return Status::error("FilterArgumentError: can't handle positional and keyword arguments at the same time");
  Value fmt_args;
  if (!args.kwargs.empty()) {
    DictData d;
    for (auto& [k, x] : args.kwargs) d.set(Value(k), x);
    fmt_args = Value::dict(std::move(d));
  } else {
    fmt_args = Value::seq(args.args, SeqFlavor::kTuple);
  }
  EMBER_ASSIGN_OR_RETURN(std::string out, percent_format(s, fmt_args));
  return Value(std::move(out));
}

Result<Value> f_tojson(Interpreter& interp, const Value& v, CallArgs& args) {
  // transformers replaces jinja2's tojson with json.dumps(x, ensure_ascii=False,
  // indent=None, separators=None, sort_keys=False), without HTML escaping.
  ArgReader r("tojson", args);
  Value ensure_ascii = r.get("ensure_ascii", Value(false));
  Value indent = r.get("indent", Value::none());
  Value separators = r.get("separators", Value::none());
  Value sort_keys = r.get("sort_keys", Value(false));
  EMBER_RETURN_IF_ERROR(r.finish());
  JsonDumpOptions o;
  EMBER_ASSIGN_OR_RETURN(o.ensure_ascii, truthy(ensure_ascii));
  EMBER_ASSIGN_OR_RETURN(o.sort_keys, truthy(sort_keys));
  if (!indent.is_none()) {
    o.has_indent = true;
    if (indent.is_string()) {
      o.indent = indent.as_string();
    } else {
      EMBER_ASSIGN_OR_RETURN(int64_t n, int_arg(indent, "indent"));
      if (n > 1024) return Status::error("unsupported: tojson indent over 1024");
      o.indent = std::string(static_cast<size_t>(std::max<int64_t>(n, 0)), ' ');
    }
    o.item_separator.assign(1, ',');  // (assign: GCC 12 warns falsely on = ",")
  }
  if (!separators.is_none()) {
    if (!separators.is_list_like() || separators.as_seq().items.size() != 2 ||
        !separators.as_seq().items[0].is_string() || !separators.as_seq().items[1].is_string())
      return Status::error("TypeError: tojson separators must be a pair of strings");
    o.item_separator = separators.as_seq().items[0].as_string();
    o.key_separator = separators.as_seq().items[1].as_string();
  }
  EMBER_ASSIGN_OR_RETURN(std::string out, json_dumps(v, o));
  EMBER_RETURN_IF_ERROR(interp.check_size(out.size()));
  return Value(std::move(out));
}

Result<Value> f_attr(Interpreter&, const Value& v, CallArgs& args) {
  ArgReader r("attr", args);
  Value name = r.get("name");
  EMBER_RETURN_IF_ERROR(r.finish());
  if (!name.is_string()) return Status::error("TypeError: attribute name must be a string");
  if (v.is_undefined()) return undefined_error(v);
  if (v.is_namespace()) {
    if (const Value* x = v.as_namespace().find(name.as_string())) return *x;
  } else if (auto a = builtin_attribute(v, name.as_string())) {
    return *a;
  }
  return Value::undefined(fmt::format("'{}' object has no attribute '{}'", type_name(v), name.as_string()));
}

const std::unordered_map<std::string_view, FilterFn>& text_filters() {
  static const std::unordered_map<std::string_view, FilterFn> table = {
      {"trim", f_trim},         {"upper", f_upper},     {"lower", f_lower},       {"capitalize", f_capitalize},
      {"title", f_title},       {"replace", f_replace}, {"string", f_string},     {"safe", f_safe},
      {"escape", f_escape},     {"e", f_escape},        {"forceescape", f_escape}, {"length", f_length},
      {"count", f_length},      {"default", f_default}, {"d", f_default},         {"int", f_int},
      {"float", f_float},       {"abs", f_abs},         {"round", f_round},       {"center", f_center},
      {"indent", f_indent},     {"truncate", f_truncate}, {"wordcount", f_wordcount}, {"format", f_format},
      {"tojson", f_tojson},     {"attr", f_attr},
  };
  return table;
}

}  // namespace

FilterFn find_text_filter(std::string_view name) {
  auto it = text_filters().find(name);
  return it == text_filters().end() ? nullptr : it->second;
}

Result<std::string> soft_str(const Value& v) { return py_str(v); }

Result<Value> run_filter(Interpreter& interp, const std::string& name, const Value& subject, CallArgs& args) {
  FilterFn fn = find_text_filter(name);
  if (!fn) fn = find_seq_filter(name);
  if (!fn) return Status::errorf("unsupported filter '{}' (jinja2 has it; ember does not implement it)", name);
  return fn(interp, subject, args);
}

}  // namespace ember::chat
