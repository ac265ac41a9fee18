// Sequence filters: first, last, join, list, items, map, select/reject(attr), sort,
// unique, reverse, min/max, sum, dictsort, batch. Like jinja2, map/select/reject/unique/
// items/reverse/batch produce single-pass generators.
#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

#include "chat/filters_impl.h"
#include "chat/utf8.h"

namespace ember::chat {
namespace {

Value generator(std::vector<Value> items) { return Value::seq(std::move(items), SeqFlavor::kGenerator); }

Result<Value> f_first(Interpreter&, const Value& v, CallArgs& args) {
  EMBER_RETURN_IF_ERROR(ArgReader("first", args).finish());
  if (v.is_seq() && v.as_seq().flavor == SeqFlavor::kGenerator) {
    const SeqData& d = v.as_seq();
    if (d.cursor < d.items.size()) return d.items[d.cursor++];
    return Value::undefined("No first item, sequence was empty.");
  }
  EMBER_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Result<Value> f_last(Interpreter&, const Value& v, CallArgs& args) {
  EMBER_RETURN_IF_ERROR(ArgReader("last", args).finish());
  if (v.is_seq() && v.as_seq().flavor == SeqFlavor::kGenerator)
    return Status::error("TypeError: 'generator' object is not reversible");
  EMBER_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Result<Value> f_list(Interpreter&, const Value& v, CallArgs& args) {
  EMBER_RETURN_IF_ERROR(ArgReader("list", args).finish());
  EMBER_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
  return Value::seq(std::move(items));
}

Result<Value> f_items(Interpreter&, const Value& v, CallArgs& args) {
  EMBER_RETURN_IF_ERROR(ArgReader("items", args).finish());
  if (v.is_undefined() && !v.is_unsupported()) return generator({});
  if (!v.is_dict()) return Status::error("TypeError: can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, x] : v.as_dict().items) out.push_back(Value::seq({k, x}, SeqFlavor::kTuple));
  return generator(std::move(out));
}

Result<Value> f_join(Interpreter& interp, const Value& v, CallArgs& args) {
  ArgReader r("join", args);
  Value sep = r.get("d", Value(""));
  Value attribute = r.get("attribute", Value::none());
  EMBER_RETURN_IF_ERROR(r.finish());
  EMBER_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
  EMBER_ASSIGN_OR_RETURN(std::string d, soft_str(sep));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    Value item = items[i];
    if (!attribute.is_none()) {
      EMBER_ASSIGN_OR_RETURN(std::string path, soft_str(attribute));
      EMBER_ASSIGN_OR_RETURN(item, get_attribute_path(interp, item, path));
    }
    EMBER_ASSIGN_OR_RETURN(std::string s, soft_str(item));
    if (i) out += d;
    out += s;
    EMBER_RETURN_IF_ERROR(interp.check_size(out.size()));
  }
  return Value(std::move(out));
}

Result<Value> f_map(Interpreter& interp, const Value& v, CallArgs& args) {
  EMBER_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
  std::vector<Value> out;
  // map(attribute='x', default=...) or map('filter', *args, **kwargs).
  const Value* attribute = nullptr;
  const Value* def = nullptr;
  for (const auto& [k, x] : args.kwargs) {
    if (k == "attribute") attribute = &x;
    else if (k == "default") def = &x;
  }
  if (args.args.empty() && attribute) {
    if (args.kwargs.size() > (def ? 2u : 1u)) return Status::error("FilterArgumentError: Unexpected keyword argument");
    EMBER_ASSIGN_OR_RETURN(std::string path, soft_str(*attribute));
    for (const auto& item : items) {
      EMBER_ASSIGN_OR_RETURN(Value x, get_attribute_path(interp, item, path));
      out.push_back(def && x.is_undefined() ? *def : x);
    }
    return generator(std::move(out));
  }
  if (args.args.empty()) return Status::error("FilterArgumentError: map requires a filter argument");
  if (!args.args[0].is_string()) return Status::error("TypeError: map filter name must be a string");
  std::string name = args.args[0].as_string();
  for (const auto& item : items) {
    CallArgs sub;
    sub.args.assign(args.args.begin() + 1, args.args.end());
    sub.kwargs = args.kwargs;
    EMBER_ASSIGN_OR_RETURN(Value x, interp.apply_filter(name, item, sub));
    out.push_back(std::move(x));
  }
  return generator(std::move(out));
}

// select / reject / selectattr / rejectattr.
Result<Value> select_impl(Interpreter& interp, const Value& v, CallArgs& args, bool by_attr, bool keep_if) {
  EMBER_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
  size_t pos = 0;
  std::string path;
  if (by_attr) {
    if (args.args.empty()) return Status::error("FilterArgumentError: Missing parameter for attribute name");
    EMBER_ASSIGN_OR_RETURN(path, soft_str(args.args[0]));
    pos = 1;
  }
  std::string test;
  bool has_test = pos < args.args.size();
  if (has_test) {
    if (!args.args[pos].is_string()) return Status::error("TypeError: test name must be a string");
    test = args.args[pos].as_string();
    ++pos;
  }
  std::vector<Value> out;
  for (const auto& item : items) {
    Value subject = item;
    if (by_attr) {
      EMBER_ASSIGN_OR_RETURN(subject, get_attribute_path(interp, item, path));
    }
    bool result;
    if (has_test) {
      CallArgs sub;
      sub.args.assign(args.args.begin() + static_cast<std::ptrdiff_t>(pos), args.args.end());
      sub.kwargs = args.kwargs;
      EMBER_ASSIGN_OR_RETURN(result, interp.apply_test(test, subject, sub));
    } else {
      EMBER_ASSIGN_OR_RETURN(result, truthy(subject));
    }
    if (result == keep_if) out.push_back(item);
  }
  return generator(std::move(out));
}

Result<Value> f_select(Interpreter& i, const Value& v, CallArgs& a) { return select_impl(i, v, a, false, true); }
Result<Value> f_reject(Interpreter& i, const Value& v, CallArgs& a) { return select_impl(i, v, a, false, false); }
Result<Value> f_selectattr(Interpreter& i, const Value& v, CallArgs& a) { return select_impl(i, v, a, true, true); }
Result<Value> f_rejectattr(Interpreter& i, const Value& v, CallArgs& a) { return select_impl(i, v, a, true, false); }

// jinja2's ignore_case postprocessing for sort keys.
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(py_lower(v.as_string()));
  return v;
}

// Keys of `item` for attribute="a,b.c" (several comma-separated paths).
Result<std::vector<Value>> multi_keys(Interpreter& interp, const Value& item, const Value& attribute, bool case_sensitive) {
  std::vector<Value> keys;
  if (attribute.is_none()) {
    keys.push_back(sort_key(item, case_sensitive));
    return keys;
  }
  EMBER_ASSIGN_OR_RETURN(std::string spec, soft_str(attribute));
  size_t start = 0;
  while (true) {
    size_t comma = spec.find(',', start);
    std::string path = spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    EMBER_ASSIGN_OR_RETURN(Value x, get_attribute_path(interp, item, path));
    keys.push_back(sort_key(x, case_sensitive));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return keys;
}

// Stable sort by precomputed keys with Python's `<`, reporting unorderable pairs.
Status sort_by_keys(std::vector<std::pair<std::vector<Value>, Value>>& rows, bool reverse) {
  Status error;
  auto less = [&](const std::vector<Value>& a, const std::vector<Value>& b) {
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      if (py_equal(a[i], b[i])) continue;
      auto r = py_less(a[i], b[i]);
      if (!r.is_ok()) {
        if (error.is_ok()) error = r.status();
        return false;
      }
      return r.value();
    }
    return false;
  };
  std::stable_sort(rows.begin(), rows.end(), [&](const auto& x, const auto& y) {
    return reverse ? less(y.first, x.first) : less(x.first, y.first);
  });
  return error;
}

Result<Value> f_sort(Interpreter& interp, const Value& v, CallArgs& args) {
  ArgReader r("sort", args);
  Value reverse = r.get("reverse", Value(false));
  Value case_sensitive = r.get("case_sensitive", Value(false));
  Value attribute = r.get("attribute", Value::none());
  EMBER_RETURN_IF_ERROR(r.finish());
  EMBER_ASSIGN_OR_RETURN(bool rev, truthy(reverse));
  EMBER_ASSIGN_OR_RETURN(bool cs, truthy(case_sensitive));
  EMBER_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
  std::vector<std::pair<std::vector<Value>, Value>> rows;
  for (auto& item : items) {
    EMBER_ASSIGN_OR_RETURN(std::vector<Value> keys, multi_keys(interp, item, attribute, cs));
    rows.emplace_back(std::move(keys), std::move(item));
  }
  EMBER_RETURN_IF_ERROR(sort_by_keys(rows, rev));
  std::vector<Value> out;
  for (auto& row : rows) out.push_back(std::move(row.second));
  return Value::seq(std::move(out));
}

Result<Value> f_dictsort(Interpreter&, const Value& v, CallArgs& args) {
  ArgReader r("dictsort", args);
  Value case_sensitive = r.get("case_sensitive", Value(false));
  Value by = r.get("by", Value("key"));
  Value reverse = r.get("reverse", Value(false));
  EMBER_RETURN_IF_ERROR(r.finish());
  if (!v.is_dict()) return Status::error("TypeError: dictsort expects a mapping");
  EMBER_ASSIGN_OR_RETURN(bool cs, truthy(case_sensitive));
  EMBER_ASSIGN_OR_RETURN(bool rev, truthy(reverse));
  if (!by.is_string() || (by.as_string() != "key" && by.as_string() != "value"))
    return Status::error("FilterArgumentError: You can only sort by either \"key\" or \"value\"");
  std::vector<std::pair<std::vector<Value>, Value>> rows;
  for (const auto& [k, x] : v.as_dict().items)
    rows.emplace_back(std::vector<Value>{sort_key(by.as_string() == "key" ? k : x, cs)}, Value::seq({k, x}, SeqFlavor::kTuple));
  EMBER_RETURN_IF_ERROR(sort_by_keys(rows, rev));
  std::vector<Value> out;
  for (auto& row : rows) out.push_back(std::move(row.second));
  return Value::seq(std::move(out));
}

Result<Value> f_unique(Interpreter& interp, const Value& v, CallArgs& args) {
  ArgReader r("unique", args);
  Value case_sensitive = r.get("case_sensitive", Value(false));
  Value attribute = r.get("attribute", Value::none());
  EMBER_RETURN_IF_ERROR(r.finish());
  EMBER_ASSIGN_OR_RETURN(bool cs, truthy(case_sensitive));
  EMBER_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
  std::vector<Value> seen, out;
  for (auto& item : items) {
    EMBER_ASSIGN_OR_RETURN(std::vector<Value> keys, multi_keys(interp, item, attribute, cs));
    Value key = keys[0];
    if (key.is_seq() || key.is_dict()) return Status::errorf("TypeError: unhashable type: '{}'", type_name(key));
    bool dup = false;
    for (const auto& s : seen)
      if (py_equal(s, key)) dup = true;
    if (dup) continue;
    seen.push_back(key);
    out.push_back(item);
  }
  return generator(std::move(out));
}

Result<Value> f_reverse(Interpreter&, const Value& v, CallArgs& args) {
  EMBER_RETURN_IF_ERROR(ArgReader("reverse", args).finish());
  if (v.is_string()) {
    std::u32string cps = utf8_decode(v.as_string());
    std::reverse(cps.begin(), cps.end());
    return Value(utf8_encode(cps));
  }
  EMBER_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
  std::reverse(items.begin(), items.end());
  return generator(std::move(items));
}

Result<Value> min_max(Interpreter& interp, const Value& v, CallArgs& args, bool want_max) {
  ArgReader r(want_max ? "max" : "min", args);
  Value case_sensitive = r.get("case_sensitive", Value(false));
  Value attribute = r.get("attribute", Value::none());
  EMBER_RETURN_IF_ERROR(r.finish());
  EMBER_ASSIGN_OR_RETURN(bool cs, truthy(case_sensitive));
  EMBER_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key;
  for (size_t i = 0; i < items.size(); ++i) {
    EMBER_ASSIGN_OR_RETURN(std::vector<Value> keys, multi_keys(interp, items[i], attribute, cs));
    if (i == 0) {
      best_key = keys[0];
      continue;
    }
    // Python's min/max keep the first of equal items.
    EMBER_ASSIGN_OR_RETURN(bool better, want_max ? py_less(best_key, keys[0]) : py_less(keys[0], best_key));
    if (better) {
      best = i;
      best_key = keys[0];
    }
  }
  return items[best];
}

Result<Value> f_min(Interpreter& i, const Value& v, CallArgs& a) { return min_max(i, v, a, false); }
Result<Value> f_max(Interpreter& i, const Value& v, CallArgs& a) { return min_max(i, v, a, true); }

Result<Value> f_sum(Interpreter& interp, const Value& v, CallArgs& args) {
  ArgReader r("sum", args);
  Value attribute = r.get("attribute", Value::none());
  Value start = r.get("start", Value(0));
  EMBER_RETURN_IF_ERROR(r.finish());
  EMBER_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
  Value total = start;
  for (const auto& item : items) {
    Value x = item;
    if (!attribute.is_none()) {
      EMBER_ASSIGN_OR_RETURN(std::string path, soft_str(attribute));
      EMBER_ASSIGN_OR_RETURN(x, get_attribute_path(interp, item, path));
    }
    if (x.is_string()) return Status::error("TypeError: unsupported operand type(s) for +: 'int' and 'str'");
    EMBER_ASSIGN_OR_RETURN(total, binary_op("+", total, x, interp));
  }
  return total;
}

Result<Value> f_batch(Interpreter&, const Value& v, CallArgs& args) {
  ArgReader r("batch", args);
  Value linecount = r.get("linecount");
  Value fill_with = r.get("fill_with", Value::none());
  EMBER_RETURN_IF_ERROR(r.finish());
  if (!linecount.is_int() || linecount.as_int() <= 0) return Status::error("batch linecount must be a positive integer");
  EMBER_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
  size_t n = static_cast<size_t>(linecount.as_int());
  std::vector<Value> out;
  for (size_t i = 0; i < items.size(); i += n) {
    std::vector<Value> row(items.begin() + static_cast<std::ptrdiff_t>(i),
                           items.begin() + static_cast<std::ptrdiff_t>(std::min(items.size(), i + n)));
    if (row.size() < n && !fill_with.is_none()) row.resize(n, fill_with);
    out.push_back(Value::seq(std::move(row)));
  }
  return generator(std::move(out));
}

const std::unordered_map<std::string_view, FilterFn>& seq_filters() {
  static const std::unordered_map<std::string_view, FilterFn> table = {
      {"first", f_first},   {"last", f_last},         {"list", f_list},           {"items", f_items},
      {"join", f_join},     {"map", f_map},           {"select", f_select},       {"reject", f_reject},
      {"selectattr", f_selectattr}, {"rejectattr", f_rejectattr}, {"sort", f_sort}, {"dictsort", f_dictsort},
      {"unique", f_unique}, {"reverse", f_reverse},   {"min", f_min},             {"max", f_max},
      {"sum", f_sum},       {"batch", f_batch},
  };
  return table;
}

}  // namespace

FilterFn find_seq_filter(std::string_view name) {
  auto it = seq_filters().find(name);
  return it == seq_filters().end() ? nullptr : it->second;
}

Result<Value> get_attribute_path(Interpreter& interp, const Value& v, const std::string& path) {
  Value cur = v;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    // jinja2 turns all-digit parts into integer indices.
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    Value key = digits && part.size() < 18 ? Value(static_cast<int64_t>(std::stoll(part))) : Value(part);
    EMBER_ASSIGN_OR_RETURN(cur, interp.get_item(cur, key));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return cur;
}

}  // namespace ember::chat
