// Text forms of values: Python's str(), repr() and json.dumps(), which jinja2 uses
// when it prints a value and transformers' tojson filter uses for JSON.
#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cwctype>

#include "chat/utf8.h"
#include "chat/value.h"

namespace ember::chat {
namespace {

// Python's str.isprintable() for non-ASCII code points: false for separators other than
// space, format and control characters, private use and unassigned code points.
bool py_isprintable(char32_t cp) {
  if (cp < 0x20 || cp == 0x7F) return false;
  if (cp < 0x7F) return true;
  if (cp <= 0xA0 || cp == 0xAD) return false;
  if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F)) return false;
  if ((cp >= 0x205F && cp <= 0x2064) || (cp >= 0x2066 && cp <= 0x206F) || cp == 0x3000) return false;
  if (cp == 0xFEFF || (cp >= 0xFFF9 && cp <= 0xFFFB) || (cp >= 0x600 && cp <= 0x605)) return false;
  if (cp == 0x61C || cp == 0x6DD || cp == 0x70F || cp == 0x180E) return false;
  if ((cp >= 0xD800 && cp <= 0xF8FF) || cp >= 0xF0000 || (cp >= 0xE0000 && cp <= 0xE007F)) return false;
  return true;
}

void append_json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out.push_back('"');
  std::u32string cps = ensure_ascii && !is_ascii(s) ? utf8_decode(s) : std::u32string();
  auto emit_ascii = [&](char32_t c) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        else out.push_back(static_cast<char>(c));
    }
  };
  if (!cps.empty()) {
    for (char32_t c : cps) {
      if (c < 0x80) {
        emit_ascii(c);
      } else if (c < 0x10000) {
        out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
      } else {
        char32_t v = c - 0x10000;
        out += fmt::format("\\u{:04x}\\u{:04x}", static_cast<unsigned>(0xD800 + (v >> 10)),
                           static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
      }
    }
  } else {
    for (char c : s) {
      if (static_cast<unsigned char>(c) < 0x80) emit_ascii(static_cast<unsigned char>(c));
      else out.push_back(c);
    }
  }
  out.push_back('"');
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return format_float(d);
}

Result<std::string> json_key(const Value& k) {
  switch (k.kind()) {
    case Value::Kind::kString: return k.as_string();
    case Value::Kind::kInt: return std::to_string(k.as_int());
    case Value::Kind::kFloat: return json_float(k.as_double());
    case Value::Kind::kBool: return std::string(k.as_bool() ? "true" : "false");
    case Value::Kind::kNone: return std::string("null");
    default:
      return Status::errorf("TypeError: keys must be str, int, float, bool or None, not {}", type_name(k));
  }
}

Status dump(std::string& out, const Value& v, const JsonDumpOptions& o, int depth) {
  if (depth > 2 * static_cast<int>(kMaxValueDepth)) return Status::error("ValueError: value nested too deeply for tojson");
  auto newline = [&](int level) {
    if (!o.has_indent) return;
    out.push_back('\n');
    for (int i = 0; i < level; ++i) out += o.indent;
  };
  switch (v.kind()) {
    case Value::Kind::kNone: out += "null"; return Status::ok();
    case Value::Kind::kBool: out += v.as_bool() ? "true" : "false"; return Status::ok();
    case Value::Kind::kInt: out += std::to_string(v.as_int()); return Status::ok();
    case Value::Kind::kFloat: out += json_float(v.as_double()); return Status::ok();
    case Value::Kind::kString: append_json_string(out, v.as_string(), o.ensure_ascii); return Status::ok();
    case Value::Kind::kSeq: {
      if (!v.is_list_like())
        return Status::errorf("TypeError: Object of type {} is not JSON serializable", type_name(v));
      const auto& items = v.as_seq().items;
      if (items.empty()) { out += "[]"; return Status::ok(); }
      out.push_back('[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += o.item_separator;
        newline(depth + 1);
        EMBER_RETURN_IF_ERROR(dump(out, items[i], o, depth + 1));
      }
      newline(depth);
      out.push_back(']');
      return Status::ok();
    }
    case Value::Kind::kDict: {
      const auto& items = v.as_dict().items;
      if (items.empty()) { out += "{}"; return Status::ok(); }
      std::vector<std::pair<std::string, const Value*>> entries;
      for (const auto& [k, e] : items) {
        EMBER_ASSIGN_OR_RETURN(std::string key, json_key(k));
        entries.emplace_back(std::move(key), &e);
      }
      if (o.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      out.push_back('{');
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += o.item_separator;
        newline(depth + 1);
        append_json_string(out, entries[i].first, o.ensure_ascii);
        out += o.key_separator;
        EMBER_RETURN_IF_ERROR(dump(out, *entries[i].second, o, depth + 1));
      }
      newline(depth);
      out.push_back('}');
      return Status::ok();
    }
    case Value::Kind::kUndefined:
      if (v.is_unsupported()) return undefined_error(v);
      return Status::error("TypeError: Object of type Undefined is not JSON serializable");
    default:
      return Status::errorf("TypeError: Object of type {} is not JSON serializable", type_name(v));
  }
}

Status repr_into(std::string& out, const Value& v, int depth);

Status repr_items(std::string& out, const std::vector<Value>& items, int depth) {
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    EMBER_RETURN_IF_ERROR(repr_into(out, items[i], depth + 1));
  }
  return Status::ok();
}

Status repr_into(std::string& out, const Value& v, int depth) {
  if (depth > 2 * static_cast<int>(kMaxValueDepth)) return Status::error("RecursionError: value nested too deeply to print");
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      if (v.is_unsupported()) return undefined_error(v);
      out += "Undefined";
      return Status::ok();
    case Value::Kind::kString: out += repr_string(v.as_string()); return Status::ok();
    case Value::Kind::kSeq: {
      const SeqData& d = v.as_seq();
      switch (d.flavor) {
        case SeqFlavor::kList:
          out.push_back('[');
          EMBER_RETURN_IF_ERROR(repr_items(out, d.items, depth));
          out.push_back(']');
          return Status::ok();
        case SeqFlavor::kTuple:
          out.push_back('(');
          EMBER_RETURN_IF_ERROR(repr_items(out, d.items, depth));
          if (d.items.size() == 1) out.push_back(',');
          out.push_back(')');
          return Status::ok();
        case SeqFlavor::kDictKeys:
        case SeqFlavor::kDictValues:
        case SeqFlavor::kDictItems:
          out += type_name(v) + "([";
          EMBER_RETURN_IF_ERROR(repr_items(out, d.items, depth));
          out += "])";
          return Status::ok();
        case SeqFlavor::kRange:
          out += fmt::format("range({}, {}", d.range_start, d.range_stop);
          if (d.range_step != 1) out += fmt::format(", {}", d.range_step);
          out.push_back(')');
          return Status::ok();
        case SeqFlavor::kGenerator:
          return Status::error(
              "cannot print a generator: jinja2 would print its Python object address (add |list)");
      }
      return Status::ok();
    }
    case Value::Kind::kDict: {
      out.push_back('{');
      bool first = true;
      for (const auto& [k, e] : v.as_dict().items) {
        if (!first) out += ", ";
        first = false;
        EMBER_RETURN_IF_ERROR(repr_into(out, k, depth + 1));
        out += ": ";
        EMBER_RETURN_IF_ERROR(repr_into(out, e, depth + 1));
      }
      out.push_back('}');
      return Status::ok();
    }
    case Value::Kind::kNamespace: {
      out += "<Namespace {";
      bool first = true;
      for (const auto& [k, e] : v.as_namespace().attrs) {
        if (!first) out += ", ";
        first = false;
        out += repr_string(k) + ": ";
        EMBER_RETURN_IF_ERROR(repr_into(out, e, depth + 1));
      }
      out += "}>";
      return Status::ok();
    }
    case Value::Kind::kCallable:
      return Status::errorf("cannot print function '{}': jinja2 would print its Python object address",
                            v.as_callable().name);
    case Value::Kind::kLoop:
      return Status::error("cannot print the loop object: jinja2 would print its Python object address");
    default: {
      EMBER_ASSIGN_OR_RETURN(std::string s, py_str(v));
      out += s;
      return Status::ok();
    }
  }
}

}  // namespace

std::string format_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  // Shortest round-trip digits, then Python's repr layout: fixed notation for
  // decimal exponents in [-4, 16), scientific with a two-digit exponent otherwise.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  size_t e_pos = sci.find('e');
  std::string mantissa = sci.substr(0, e_pos);
  int exp10 = std::stoi(sci.substr(e_pos + 1));
  std::string digits;
  for (char c : mantissa)
    if (c != '.') digits.push_back(c);
  int n = static_cast<int>(digits.size());
  int decpt = exp10 + 1;  // value = 0.DIGITS * 10^decpt
  std::string out = negative ? "-" : "";
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out.append("0.");
      out.append(static_cast<size_t>(-decpt), '0');
      out.append(digits);
    } else if (decpt >= n) {
      out.append(digits);
      out.append(static_cast<size_t>(decpt - n), '0');
      out.append(".0");
    } else {
      out.append(digits, 0, static_cast<size_t>(decpt));
      out.push_back('.');
      out.append(digits, static_cast<size_t>(decpt), std::string::npos);
    }
  } else {
    out += digits.substr(0, 1);
    if (n > 1) {
      out.push_back('.');
      out.append(digits, 1, std::string::npos);
    }
    int e = decpt - 1;
    out += fmt::format("e{}{:02d}", e < 0 ? '-' : '+', e < 0 ? -e : e);
  }
  return out;
}

std::string repr_string(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t cp : utf8_decode(s)) {
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (py_isprintable(cp)) {
      append_utf8(out, cp);
    } else if (cp < 0x100) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned>(cp));
    } else if (cp < 0x10000) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(cp));
    } else {
      out += fmt::format("\\U{:08x}", static_cast<unsigned>(cp));
    }
  }
  out.push_back(quote);
  return out;
}

Result<std::string> py_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      if (v.is_unsupported()) return undefined_error(v);
      return std::string();
    case Value::Kind::kNone: return std::string("None");
    case Value::Kind::kBool: return std::string(v.as_bool() ? "True" : "False");
    case Value::Kind::kInt: return std::to_string(v.as_int());
    case Value::Kind::kFloat: return format_float(v.as_double());
    case Value::Kind::kString: return v.as_string();
    default: {
      std::string out;
      EMBER_RETURN_IF_ERROR(repr_into(out, v, 0));
      return out;
    }
  }
}

Result<std::string> py_repr(const Value& v) {
  std::string out;
  EMBER_RETURN_IF_ERROR(repr_into(out, v, 0));
  return out;
}

Result<std::string> json_dumps(const Value& v, const JsonDumpOptions& options) {
  std::string out;
  EMBER_RETURN_IF_ERROR(dump(out, v, options, 0));
  return out;
}

}  // namespace ember::chat
