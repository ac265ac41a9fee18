// Python string formatting: printf-style `fmt % args` and `str.format(...)`, for the
// specifiers templates use (s r d i f e g x o c with flags, width and precision).
// Anything else fails by name rather than printing something different.
#include <fmt/format.h>

#include <cmath>

#include "chat/interpreter.h"
#include "chat/utf8.h"

namespace ember::chat {
namespace {

struct Spec {
  char32_t fill = ' ';
  char align = 0;  // '<' '>' '^' '=' or 0 for the type's default
  char sign = '-';
  bool alt = false;
  bool zero = false;
  int width = -1;
  int precision = -1;
  char grouping = 0;
  char type = 0;
};

std::string pad(const std::string& text, const Spec& spec, char default_align) {
  size_t len = count_code_points(text);
  if (spec.width < 0 || len >= static_cast<size_t>(spec.width)) return text;
  size_t total = static_cast<size_t>(spec.width) - len;
  char align = spec.align ? spec.align : default_align;
  std::string fill;
  append_utf8(fill, spec.fill);
  auto repeat = [&](size_t n) {
    std::string r;
    for (size_t i = 0; i < n; ++i) r += fill;
    return r;
  };
  if (align == '<') return text + repeat(total);
  if (align == '^') return repeat(total / 2) + text + repeat(total - total / 2);
  if (align == '=') {
    // Padding goes between the sign and the digits.
    size_t sign_len = (!text.empty() && (text[0] == '-' || text[0] == '+' || text[0] == ' ')) ? 1 : 0;
    return text.substr(0, sign_len) + repeat(total) + text.substr(sign_len);
  }
  return repeat(total) + text;
}

std::string group_digits(const std::string& digits, char sep) {
  std::string out;
  int count = 0;
  for (size_t i = digits.size(); i-- > 0;) {
    out.insert(out.begin(), digits[i]);
    if (++count % 3 == 0 && i > 0) out.insert(out.begin(), sep);
  }
  return out;
}

Result<std::string> format_number(const Value& v, const Spec& spec, bool percent_style) {
  char type = spec.type;
  std::string body;
  bool negative = false;
  if (type == 'd' || type == 'i' || type == 'u' || type == 'x' || type == 'X' || type == 'o' || type == 'b' ||
      (type == 0 && !v.is_float())) {
    if (!v.is_number())
      return Status::errorf("TypeError: %{} format: a real number is required, not {}", type ? type : 'd', type_name(v));
    if (v.is_float() && !percent_style) return Status::errorf("ValueError: Unknown format code '{}' for object of type 'float'", type);
    double d = v.as_double();
    if (v.is_float() && !std::isfinite(d)) return Status::error("OverflowError: cannot convert float infinity or NaN to integer");
    int64_t i = v.is_float() ? static_cast<int64_t>(std::trunc(d)) : v.as_int();
    negative = i < 0;
    uint64_t mag = negative ? static_cast<uint64_t>(0) - static_cast<uint64_t>(i) : static_cast<uint64_t>(i);
    if (type == 'x') body = fmt::format("{:x}", mag);
    else if (type == 'X') body = fmt::format("{:X}", mag);
    else if (type == 'o') body = fmt::format("{:o}", mag);
    else if (type == 'b') body = fmt::format("{:b}", mag);
    else body = std::to_string(mag);
    if (spec.grouping) body = group_digits(body, spec.grouping);
    if (spec.alt && (type == 'x' || type == 'X' || type == 'o' || type == 'b'))
      body = std::string("0") + (type == 'X' ? 'X' : type) + body;
    if (percent_style && spec.precision > static_cast<int>(body.size()))
      body = std::string(static_cast<size_t>(spec.precision) - body.size(), '0') + body;
  } else if (type == 'f' || type == 'F' || type == 'e' || type == 'E' || type == 'g' || type == 'G' || type == '%' ||
             type == 0) {
    if (!v.is_number())
      return Status::errorf("TypeError: must be real number, not {}", type_name(v));
    double d = v.as_double();
    negative = std::signbit(d) && !std::isnan(d);
    double mag = std::fabs(d);
    int prec = spec.precision < 0 ? 6 : spec.precision;
    if (type == 0) {
      if (spec.precision >= 0) return Status::error("unsupported: float format with precision and no type");
      body = format_float(mag);
    } else if (!std::isfinite(mag)) {
      body = std::isnan(mag) ? "nan" : "inf";
      if (type == 'F' || type == 'E' || type == 'G') body = std::isnan(mag) ? "NAN" : "INF";
    } else if (type == 'f' || type == 'F') {
      body = fmt::format("{:.{}f}", mag, prec);
    } else if (type == '%') {
      body = fmt::format("{:.{}f}", mag * 100, prec) + "%";
    } else if (type == 'e' || type == 'E') {
      body = fmt::format("{:.{}e}", mag, prec);
      if (type == 'E') body = py_upper(body);
    } else {
      body = spec.alt ? fmt::format("{:#.{}g}", mag, prec == 0 ? 1 : prec) : fmt::format("{:.{}g}", mag, prec == 0 ? 1 : prec);
      if (type == 'G') body = py_upper(body);
    }
    if (spec.grouping && std::isfinite(mag)) {
      size_t dot = body.find_first_not_of("0123456789");
      body = group_digits(body.substr(0, dot), spec.grouping) + (dot == std::string::npos ? "" : body.substr(dot));
    }
  } else {
    return Status::errorf("unsupported format character '{}'", type);
  }
  std::string sign = negative ? "-" : spec.sign == '+' ? "+" : spec.sign == ' ' ? " " : "";
  Spec padded = spec;
  if (spec.zero && !spec.align) {
    padded.fill = '0';
    padded.align = '=';
  }
  return pad(sign + body, padded, '>');
}

Result<std::string> format_one(const Value& v, const Spec& spec, bool percent_style) {
  char type = spec.type;
  if (type == 's' || type == 'r' || type == 'a' || (type == 0 && !v.is_number())) {
    if (type == 0 && !percent_style && !v.is_string() && spec.width >= 0 && !v.is_none())
      return Status::errorf("unsupported: format spec on a {}", type_name(v));
    EMBER_ASSIGN_OR_RETURN(std::string s, type == 'r' || type == 'a' ? py_repr(v) : py_str(v));
    if (spec.precision >= 0) {
      std::u32string cps = utf8_decode(s);
      if (cps.size() > static_cast<size_t>(spec.precision)) s = utf8_encode(cps.substr(0, static_cast<size_t>(spec.precision)));
    }
    return pad(s, spec, percent_style ? '>' : '<');
  }
  if (type == 'c') {
    if (v.is_string() && count_code_points(v.as_string()) == 1) return pad(v.as_string(), spec, '<');
    if (v.is_int() && v.as_int() >= 0 && v.as_int() <= 0x10FFFF) {
      std::string s;
      append_utf8(s, static_cast<char32_t>(v.as_int()));
      return pad(s, spec, '<');
    }
    return Status::error("TypeError: %c requires an int or a single character");
  }
  return format_number(v, spec, percent_style);
}

}  // namespace

Result<std::string> percent_format(const std::string& fmt_str, const Value& args) {
  std::vector<Value> values;
  const DictData* mapping = nullptr;
  if (args.is_seq() && args.as_seq().flavor == SeqFlavor::kTuple) values = args.as_seq().items;
  else if (args.is_dict()) mapping = &args.as_dict();
  else values.push_back(args);
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmt_str.size(); ++i) {
    if (fmt_str[i] != '%') {
      out.push_back(fmt_str[i]);
      continue;
    }
    if (++i >= fmt_str.size()) return Status::error("ValueError: incomplete format");
    const Value* value = nullptr;
    if (fmt_str[i] == '(') {
      size_t close = fmt_str.find(')', i);
      if (close == std::string::npos || !mapping) return Status::error("TypeError: format requires a mapping");
      value = mapping->find(std::string_view(fmt_str).substr(i + 1, close - i - 1));
      if (!value) return Status::errorf("KeyError: '{}'", fmt_str.substr(i + 1, close - i - 1));
      i = close + 1;
    }
    Spec spec;
    for (; i < fmt_str.size(); ++i) {
      char c = fmt_str[i];
      if (c == '-') spec.align = '<';
      else if (c == '0') spec.zero = true;
      else if (c == '+') spec.sign = '+';
      else if (c == ' ') { if (spec.sign != '+') spec.sign = ' '; }
      else if (c == '#') spec.alt = true;
      else break;
    }
    if (spec.align == '<') spec.zero = false;
    auto read_int = [&]() {
      int n = 0;
      while (i < fmt_str.size() && fmt_str[i] >= '0' && fmt_str[i] <= '9' && n < 100000) n = n * 10 + (fmt_str[i++] - '0');
      return n;
    };
    if (i < fmt_str.size() && fmt_str[i] == '*') return Status::error("unsupported: '*' width in % formatting");
    if (i < fmt_str.size() && fmt_str[i] >= '0' && fmt_str[i] <= '9') spec.width = read_int();
    if (i < fmt_str.size() && fmt_str[i] == '.') {
      ++i;
      spec.precision = read_int();
    }
    while (i < fmt_str.size() && (fmt_str[i] == 'l' || fmt_str[i] == 'h' || fmt_str[i] == 'L')) ++i;
    if (i >= fmt_str.size()) return Status::error("ValueError: incomplete format");
    char type = fmt_str[i];
    if (type == '%') {
      out.push_back('%');
      continue;
    }
    if (!value) {
      if (mapping) value = &args;
      else if (next < values.size()) value = &values[next++];
      else return Status::error("TypeError: not enough arguments for format string");
    }
    spec.type = type == 'i' || type == 'u' ? 'd' : type;
    if (std::string_view("srdfFeEgGxXoc").find(spec.type) == std::string_view::npos && spec.type != 'a')
      return Status::errorf("ValueError: unsupported format character '{}'", type);
    EMBER_ASSIGN_OR_RETURN(std::string piece, format_one(*value, spec, true));
    out += piece;
  }
  if (!mapping && next < values.size()) return Status::error("TypeError: not all arguments converted during string formatting");
  return out;
}

Result<std::string> brace_format(const std::string& f, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  bool used_auto = false, used_manual = false;
  for (size_t i = 0; i < f.size(); ++i) {
    char c = f[i];
    if (c == '}') {
      if (i + 1 < f.size() && f[i + 1] == '}') { out.push_back('}'); ++i; continue; }
      return Status::error("ValueError: Single '}' encountered in format string");
    }
    if (c != '{') { out.push_back(c); continue; }
    if (i + 1 < f.size() && f[i + 1] == '{') { out.push_back('{'); ++i; continue; }
    size_t close = f.find('}', i);
    if (close == std::string::npos) return Status::error("ValueError: Single '{' encountered in format string");
    std::string field = f.substr(i + 1, close - i - 1);
    i = close;
    if (field.find('{') != std::string::npos) return Status::error("unsupported: nested replacement fields in str.format");
    std::string spec_text, conversion;
    if (size_t colon = field.find(':'); colon != std::string::npos) {
      spec_text = field.substr(colon + 1);
      field = field.substr(0, colon);
    }
    if (size_t bang = field.find('!'); bang != std::string::npos) {
      conversion = field.substr(bang + 1);
      field = field.substr(0, bang);
    }
    if (field.find_first_of(".[") != std::string::npos) return Status::error("unsupported: attribute or index in str.format field");
    const Value* value = nullptr;
    if (field.empty()) {
      if (used_manual) return Status::error("ValueError: cannot switch from manual field specification to automatic field numbering");
      used_auto = true;
      if (auto_index >= args.args.size()) return Status::errorf("IndexError: Replacement index {} out of range", auto_index);
      value = &args.args[auto_index++];
    } else if (field[0] >= '0' && field[0] <= '9') {
      if (used_auto) return Status::error("ValueError: cannot switch from automatic field numbering to manual field specification");
      used_manual = true;
      size_t idx = std::stoul(field.substr(0, 6));
      if (idx >= args.args.size()) return Status::errorf("IndexError: Replacement index {} out of range", idx);
      value = &args.args[idx];
    } else {
      for (const auto& [k, v] : args.kwargs)
        if (k == field) value = &v;
      if (!value) return Status::errorf("KeyError: '{}'", field);
    }
    Value converted = *value;
    if (conversion == "r" || conversion == "s" || conversion == "a") {
      EMBER_ASSIGN_OR_RETURN(std::string s, conversion == "s" ? py_str(*value) : py_repr(*value));
      converted = Value(std::move(s));
    } else if (!conversion.empty()) {
      return Status::errorf("ValueError: Unknown conversion specifier {}", conversion);
    }
    // [[fill]align][sign][#][0][width][,|_][.precision][type]
    Spec spec;
    std::u32string st = utf8_decode(spec_text);
    size_t p = 0;
    auto is_align = [](char32_t a) { return a == '<' || a == '>' || a == '^' || a == '='; };
    if (st.size() >= 2 && is_align(st[1])) { spec.fill = st[0]; spec.align = static_cast<char>(st[1]); p = 2; }
    else if (!st.empty() && is_align(st[0])) { spec.align = static_cast<char>(st[0]); p = 1; }
    if (p < st.size() && (st[p] == '+' || st[p] == '-' || st[p] == ' ')) spec.sign = static_cast<char>(st[p++]);
    if (p < st.size() && st[p] == '#') { spec.alt = true; ++p; }
    if (p < st.size() && st[p] == '0') { spec.zero = true; ++p; }
    auto read_int = [&]() {
      int n = 0;
      while (p < st.size() && st[p] >= '0' && st[p] <= '9' && n < 100000) n = n * 10 + static_cast<int>(st[p++] - '0');
      return n;
    };
    if (p < st.size() && st[p] >= '0' && st[p] <= '9') spec.width = read_int();
    if (p < st.size() && (st[p] == ',' || st[p] == '_')) spec.grouping = static_cast<char>(st[p++]);
    if (p < st.size() && st[p] == '.') { ++p; spec.precision = read_int(); }
    if (p < st.size()) spec.type = static_cast<char>(st[p++]);
    if (p < st.size()) return Status::error("ValueError: Invalid format specifier");
    if (spec.zero && !spec.align && converted.is_string()) { spec.fill = '0'; spec.align = '<'; spec.zero = false; }
    if (spec.type == 'd' && converted.is_float())
      return Status::error("ValueError: Unknown format code 'd' for object of type 'float'");
    if (converted.is_string() && spec.type && spec.type != 's')
      return Status::errorf("ValueError: Unknown format code '{}' for object of type 'str'", spec.type);
    if (converted.is_bool() && !spec.type && spec_text.empty()) {
      out += converted.as_bool() ? "True" : "False";
      continue;
    }
    if (spec_text.empty()) {
      EMBER_ASSIGN_OR_RETURN(std::string s, py_str(converted));
      out += s;
      continue;
    }
    EMBER_ASSIGN_OR_RETURN(std::string piece, format_one(converted, spec, false));
    out += piece;
  }
  return out;
}

}  // namespace ember::chat
