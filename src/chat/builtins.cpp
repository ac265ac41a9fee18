// Global functions of the template environment: jinja2's range, dict, namespace,
// and transformers' raise_exception and strftime_now; plus argument binding.
#include <fmt/format.h>

#include <clocale>
#include <ctime>
#include <locale.h>

#include "chat/interpreter.h"

namespace ember::chat {

Value ArgReader::get(const std::string& name, Value def) {
  if (next_positional_ < args_.args.size()) return args_.args[next_positional_++];
  for (const auto& [k, v] : args_.kwargs) {
    if (k == name) {
      used_kwargs_.push_back(name);
      return v;
    }
  }
  return def;
}

bool ArgReader::has(const std::string& name) const {
  for (const auto& kv : args_.kwargs)
    if (kv.first == name) return true;
  return false;
}

std::vector<Value> ArgReader::rest() {
  std::vector<Value> out(args_.args.begin() + static_cast<std::ptrdiff_t>(std::min(next_positional_, args_.args.size())),
                         args_.args.end());
  next_positional_ = args_.args.size();
  return out;
}

Status ArgReader::finish() const {
  if (next_positional_ < args_.args.size())
    return Status::errorf("TypeError: {}() takes at most {} positional argument(s) ({} given)", func_,
                          next_positional_, args_.args.size());
  for (const auto& kv : args_.kwargs) {
    if (std::find(used_kwargs_.begin(), used_kwargs_.end(), kv.first) == used_kwargs_.end())
      return Status::errorf("TypeError: {}() got an unexpected keyword argument '{}'", func_, kv.first);
  }
  return Status::ok();
}

namespace {

constexpr int64_t kMaxRange = 100000;  // jinja2's sandbox MAX_RANGE

Result<Value> builtin_range(Interpreter& interp, CallArgs& args) {
  if (!args.kwargs.empty()) return Status::error("TypeError: range() takes no keyword arguments");
  if (args.args.empty() || args.args.size() > 3)
    return Status::errorf("TypeError: range expected 1 to 3 arguments, got {}", args.args.size());
  for (const auto& a : args.args)
    if (!a.is_int() && !a.is_bool())
      return Status::errorf("TypeError: '{}' object cannot be interpreted as an integer", type_name(a));
  int64_t start = 0, stop, step = 1;
  if (args.args.size() == 1) {
    stop = args.args[0].as_int();
  } else {
    start = args.args[0].as_int();
    stop = args.args[1].as_int();
    if (args.args.size() == 3) step = args.args[2].as_int();
  }
  if (step == 0) return Status::error("ValueError: range() arg 3 must not be zero");
  __int128 count = 0;
  if (step > 0 && stop > start) count = (static_cast<__int128>(stop) - start + step - 1) / step;
  if (step < 0 && stop < start) count = (static_cast<__int128>(start) - stop - step - 1) / -static_cast<__int128>(step);
  if (count > kMaxRange)
    return Status::error("OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  EMBER_RETURN_IF_ERROR(interp.charge(static_cast<int64_t>(count)));
  SeqData d;
  d.flavor = SeqFlavor::kRange;
  d.range_start = start;
  d.range_stop = stop;
  d.range_step = step;
  for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) d.items.emplace_back(start + i * step);
  return Value::seq(std::move(d));
}

// dict(...) and namespace(...) both take an optional mapping (or pairs) plus keywords.
Result<DictData> mapping_args(CallArgs& args, const char* func) {
  if (args.args.size() > 1) return Status::errorf("TypeError: {} expected at most 1 argument, got {}", func, args.args.size());
  DictData d;
  if (!args.args.empty()) {
    const Value& src = args.args[0];
    if (src.is_dict()) {
      d = src.as_dict();
    } else {
      EMBER_ASSIGN_OR_RETURN(std::vector<Value> pairs, iterate(src));
      for (const auto& p : pairs) {
        EMBER_ASSIGN_OR_RETURN(std::vector<Value> kv, iterate(p));
        if (kv.size() != 2) return Status::errorf("ValueError: {} update sequence element has length {}; 2 is required", func, kv.size());
        d.set(kv[0], kv[1]);
      }
    }
  }
  for (auto& [k, v] : args.kwargs) d.set(Value(k), v);
  return d;
}

Result<Value> builtin_dict(Interpreter&, CallArgs& args) {
  EMBER_ASSIGN_OR_RETURN(DictData d, mapping_args(args, "dict"));
  return Value::dict(std::move(d));
}

Result<Value> builtin_namespace(Interpreter& interp, CallArgs& args) {
  EMBER_ASSIGN_OR_RETURN(DictData d, mapping_args(args, "namespace"));
  NamespaceData ns;
  for (auto& [k, v] : d.items) {
    if (!k.is_string()) return Status::error("TypeError: namespace keywords must be strings");
    if (!k.as_string().empty() && k.as_string()[0] == '_')
      return Status::errorf(
          "SecurityError: Chat templates cannot store underscore-prefixed attributes on a namespace, but got '{}'. "
          "Please rename the attribute.",
          k.as_string());
    ns.set(k.as_string(), v);
  }
  Value out = Value::ns(std::move(ns));
  interp.track(out);
  return out;
}

Result<Value> builtin_raise_exception(Interpreter& interp, CallArgs& args) {
  ArgReader r("raise_exception", args);
  Value message = r.get("message");
  EMBER_RETURN_IF_ERROR(r.finish());
  EMBER_ASSIGN_OR_RETURN(std::string text, py_str(message));
  return interp.raise(text);
}

Result<Value> builtin_strftime_now(Interpreter& interp, CallArgs& args) {
  ArgReader r("strftime_now", args);
  Value format = r.get("format");
  EMBER_RETURN_IF_ERROR(r.finish());
  if (!format.is_string()) return Status::error("TypeError: strftime() argument 1 must be str");
  const std::string& f = format.as_string();
  // Python handles %f, %z and %Z itself; ember supports the C-library codes only.
  for (size_t i = 0; i + 1 < f.size(); ++i) {
    if (f[i] != '%') continue;
    char c = f[++i];
    if (c == 'f' || c == 'z' || c == 'Z' || c == ':')
      return Status::errorf("unsupported: strftime code %{}", c);
  }
  if (f.size() > 4096) return Status::error("unsupported: strftime format longer than 4096 bytes");
  std::time_t now = interp.now();
  std::tm tm{};
  localtime_r(&now, &tm);
  // The "C" locale gives Python's English month and day names whatever the process locale.
  locale_t c_locale = newlocale(LC_ALL_MASK, "C", static_cast<locale_t>(0));
  std::string out(f.size() * 16 + 64, '\0');
  size_t n = strftime_l(out.data(), out.size(), f.c_str(), &tm, c_locale);
  if (c_locale) freelocale(c_locale);
  if (n == 0 && !f.empty()) return Status::error("unsupported: strftime format produced no output");
  out.resize(n);
  return Value(std::move(out));
}

Result<Value> unsupported_global(const char* name) {
  return Status::errorf("unsupported: global function '{}' is not implemented by ember", name);
}

}  // namespace

void add_builtin_globals(Frame& frame) {
  frame.set("range", Value::callable("range", builtin_range));
  frame.set("dict", Value::callable("dict", builtin_dict));
  frame.set("namespace", Value::callable("namespace", builtin_namespace));
  frame.set("raise_exception", Value::callable("raise_exception", builtin_raise_exception));
  frame.set("strftime_now", Value::callable("strftime_now", builtin_strftime_now));
  frame.set("lipsum", Value::callable("lipsum", [](Interpreter&, CallArgs&) { return unsupported_global("lipsum"); }));
  frame.set("cycler", Value::callable("cycler", [](Interpreter&, CallArgs&) { return unsupported_global("cycler"); }));
  frame.set("joiner", Value::callable("joiner", [](Interpreter&, CallArgs&) { return unsupported_global("joiner"); }));
}

}  // namespace ember::chat
