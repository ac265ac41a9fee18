// Python semantics of the arithmetic operators, `in`, slicing and printf-style `%`.
#include <fmt/format.h>

#include <cmath>

#include "chat/interpreter.h"
#include "chat/utf8.h"

namespace ember::chat {
namespace {

Status overflow() { return Status::error("OverflowError: integer result past 64 bits (Python would use a big integer)"); }

Status unsupported_operands(const std::string& op, const Value& a, const Value& b) {
  return Status::errorf("TypeError: unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a),
                        type_name(b));
}

Result<Value> repeat(const Value& seq, int64_t times, const Interpreter& interp) {
  if (times < 0) times = 0;
  const size_t unit = seq.is_string() ? seq.as_string().size() : seq.as_seq().items.size() * sizeof(Value);
  if (unit != 0 && static_cast<uint64_t>(times) > SIZE_MAX / unit)
    return Status::error("MemoryError: repeated sequence too large");
  EMBER_RETURN_IF_ERROR(interp.check_size(unit * static_cast<size_t>(times)));
  if (seq.is_string()) {
    std::string out;
    out.reserve(unit * static_cast<size_t>(times));
    for (int64_t i = 0; i < times; ++i) out += seq.as_string();
    return Value(std::move(out));
  }
  const auto& items = seq.as_seq().items;
  std::vector<Value> out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), items.begin(), items.end());
  return Value::seq(std::move(out), seq.as_seq().flavor);
}

// Python's float floor division and modulo (Objects/floatobject.c: float_divmod).
void float_divmod(double vx, double wx, double& floordiv, double& mod) {
  mod = std::fmod(vx, wx);
  double div = (vx - mod) / wx;
  if (mod != 0) {
    if ((wx < 0) != (mod < 0)) {
      mod += wx;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, wx);
  }
  if (div != 0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, vx / wx);
  }
}

Result<Value> int_pow(int64_t base, int64_t exp) {
  int64_t result = 1;
  while (exp > 0) {
    if (exp & 1) {
      if (__builtin_mul_overflow(result, base, &result)) return overflow();
    }
    exp >>= 1;
    if (exp > 0 && __builtin_mul_overflow(base, base, &base)) return overflow();
  }
  return Value(result);
}

Result<Value> arithmetic(const std::string& op, const Value& a, const Value& b) {
  const bool floats = a.is_float() || b.is_float();
  if (op == "+" || op == "-" || op == "*") {
    if (floats) {
      double x = a.as_double(), y = b.as_double();
      return Value(op == "+" ? x + y : op == "-" ? x - y : x * y);
    }
    int64_t r;
    bool bad = op == "+"   ? __builtin_add_overflow(a.as_int(), b.as_int(), &r)
               : op == "-" ? __builtin_sub_overflow(a.as_int(), b.as_int(), &r)
                           : __builtin_mul_overflow(a.as_int(), b.as_int(), &r);
    if (bad) return overflow();
    return Value(r);
  }
  if (op == "/") {
    if (b.as_double() == 0) return Status::error("ZeroDivisionError: division by zero");
    return Value(a.as_double() / b.as_double());
  }
  if (op == "//" || op == "%") {
    if (floats) {
      if (b.as_double() == 0)
        return Status::error(op == "%" ? "ZeroDivisionError: float modulo" : "ZeroDivisionError: float floor division by zero");
      double fd, md;
      float_divmod(a.as_double(), b.as_double(), fd, md);
      return Value(op == "//" ? fd : md);
    }
    int64_t x = a.as_int(), y = b.as_int();
    if (y == 0)
      return Status::error(op == "%" ? "ZeroDivisionError: integer modulo by zero"
                                     : "ZeroDivisionError: integer division or modulo by zero");
    if (x == INT64_MIN && y == -1) return op == "%" ? Result<Value>(Value(int64_t{0})) : Result<Value>(overflow());
    int64_t q = x / y, m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) {
      q -= 1;
      m += y;
    }
    return Value(op == "//" ? q : m);
  }
  if (op == "**") {
    if (!floats && b.as_int() >= 0) return int_pow(a.as_int(), b.as_int());
    double x = a.as_double(), y = b.as_double();
    if (x == 0 && y < 0) return Status::error("ZeroDivisionError: 0.0 cannot be raised to a negative power");
    if (x < 0 && y != std::floor(y)) return Status::error("unsupported: complex result of a fractional power");
    return Value(std::pow(x, y));
  }
  return Status::errorf("unknown operator '{}'", op);
}

}  // namespace

Result<Value> binary_op(const std::string& op, const Value& a, const Value& b, const Interpreter& interp) {
  if (a.is_undefined()) return undefined_error(a);
  if (b.is_undefined() && !(op == "%" && a.is_string())) return undefined_error(b);
  if (a.is_number() && b.is_number()) return arithmetic(op, a, b);
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      EMBER_RETURN_IF_ERROR(interp.check_size(a.as_string().size() + b.as_string().size()));
      return Value(a.as_string() + b.as_string());
    }
    if (a.is_list_like() && b.is_list_like() && a.as_seq().flavor == b.as_seq().flavor) {
      std::vector<Value> items = a.as_seq().items;
      items.insert(items.end(), b.as_seq().items.begin(), b.as_seq().items.end());
      EMBER_RETURN_IF_ERROR(interp.check_size(items.size() * sizeof(Value)));
      return Value::seq(std::move(items), a.as_seq().flavor);
    }
    if (a.is_string())
      return Status::errorf("TypeError: can only concatenate str (not \"{}\") to str", type_name(b));
    if (a.is_list_like())
      return Status::errorf("TypeError: can only concatenate {} (not \"{}\") to {}", type_name(a), type_name(b),
                            type_name(a));
    return unsupported_operands(op, a, b);
  }
  if (op == "*") {
    if ((a.is_string() || a.is_list_like()) && (b.is_int() || b.is_bool())) return repeat(a, b.as_int(), interp);
    if ((b.is_string() || b.is_list_like()) && (a.is_int() || a.is_bool())) return repeat(b, a.as_int(), interp);
    if (a.is_string() || a.is_list_like() || b.is_string() || b.is_list_like())
      return Status::errorf("TypeError: can't multiply sequence by non-int of type '{}'",
                            type_name(a.is_string() || a.is_list_like() ? b : a));
    return unsupported_operands(op, a, b);
  }
  if (op == "%" && a.is_string()) {
    EMBER_ASSIGN_OR_RETURN(std::string s, percent_format(a.as_string(), b));
    return Value(std::move(s));
  }
  return unsupported_operands(op, a, b);
}

Result<Value> unary_op(ExprKind kind, const Value& a) {
  if (a.is_undefined()) return undefined_error(a);
  if (!a.is_number())
    return Status::errorf("TypeError: bad operand type for unary {}: '{}'", kind == ExprKind::kNeg ? '-' : '+',
                          type_name(a));
  if (a.is_float()) return Value(kind == ExprKind::kNeg ? -a.as_double() : a.as_double());
  if (kind == ExprKind::kPos) return Value(a.as_int());
  if (a.as_int() == INT64_MIN) return overflow();
  return Value(-a.as_int());
}

Result<bool> contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kString:
      if (!item.is_string())
        return Status::errorf("TypeError: 'in <string>' requires string as left operand, not {}", type_name(item));
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kDict: return container.as_dict().find(item) != nullptr;
    case Value::Kind::kSeq: {
      const SeqData& d = container.as_seq();
      if (d.flavor == SeqFlavor::kGenerator) {
        // Python consumes a generator up to the first match.
        while (d.cursor < d.items.size()) {
          if (py_equal(d.items[d.cursor++], item)) return true;
        }
        return false;
      }
      for (const auto& v : d.items)
        if (py_equal(v, item)) return true;
      return false;
    }
    case Value::Kind::kUndefined:
      if (container.is_unsupported()) return undefined_error(container);
      return false;
    default: return Status::errorf("TypeError: argument of type '{}' is not iterable", type_name(container));
  }
}

Result<Value> slice_value(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  if (obj.is_undefined()) return undefined_error(obj);
  const bool is_str = obj.is_string();
  const bool is_seq = obj.is_seq() && (obj.is_list_like() || obj.as_seq().flavor == SeqFlavor::kRange);
  auto valid_index = [](const Value& v) { return v.is_none() || v.is_int() || v.is_bool(); };
  // jinja2 turns the TypeError of an unsliceable object into an Undefined.
  if ((!is_str && !is_seq) || !valid_index(start_v) || !valid_index(stop_v) || !valid_index(step_v))
    return Value::undefined(fmt::format("'{}' object cannot be sliced like that", type_name(obj)));
  int64_t step = step_v.is_none() ? 1 : step_v.as_int();
  if (step == 0) return Status::error("ValueError: slice step cannot be zero");
  std::u32string cps;
  const bool ascii = is_str && is_ascii(obj.as_string());
  if (is_str && !ascii) cps = utf8_decode(obj.as_string());
  const int64_t len = is_str ? (ascii ? static_cast<int64_t>(obj.as_string().size()) : static_cast<int64_t>(cps.size()))
                             : static_cast<int64_t>(obj.as_seq().items.size());
  // PySlice_AdjustIndices.
  auto adjust = [&](const Value& v, int64_t def, int64_t lo, int64_t hi) {
    if (v.is_none()) return def;
    int64_t i = v.as_int();
    if (i < 0) {
      i = i < -len ? lo : i + len;
      if (i < lo) i = lo;
    } else if (i > hi) {
      i = hi;
    }
    return i;
  };
  int64_t start, stop;
  if (step > 0) {
    start = adjust(start_v, 0, 0, len);
    stop = adjust(stop_v, len, 0, len);
  } else {
    start = adjust(start_v, len - 1, -1, len - 1);
    stop = adjust(stop_v, -1, -1, len - 1);
  }
  std::vector<int64_t> idx;
  if (step > 0) {
    for (int64_t i = start; i < stop; i += step) idx.push_back(i);
  } else {
    for (int64_t i = start; i > stop; i += step) idx.push_back(i);
  }
  if (is_str) {
    std::string out;
    for (int64_t i : idx) {
      if (ascii) out.push_back(obj.as_string()[static_cast<size_t>(i)]);
      else append_utf8(out, cps[static_cast<size_t>(i)]);
    }
    return Value(std::move(out));
  }
  const SeqData& d = obj.as_seq();
  SeqData out;
  out.flavor = d.flavor;
  for (int64_t i : idx) out.items.push_back(d.items[static_cast<size_t>(i)]);
  if (d.flavor == SeqFlavor::kRange) {
    // range(a, b, s)[i:j:k] == range(a + i*s, a + j*s, s*k), as Python computes it.
    out.range_step = d.range_step * step;
    out.range_start = d.range_start + start * d.range_step;
    out.range_stop = d.range_start + stop * d.range_step;
  }
  return Value::seq(std::move(out));
}

}  // namespace ember::chat
