// Expression evaluation: names, literals, attribute and item access, calls, filters,
// tests, and the operators (whose Python semantics live in operators.cpp).
#include <fmt/format.h>

#include "chat/interpreter.h"

namespace ember::chat {

Value Interpreter::lookup(const std::string& name, const FramePtr& frame) const {
  if (const Value* v = frame->find(name)) return *v;
  return Value::undefined(fmt::format("'{}' is undefined", name));
}

Result<Value> Interpreter::eval(const Expr& expr, const FramePtr& frame) {
  EMBER_RETURN_IF_ERROR(charge(1));
  auto result = eval_inner(expr, frame);
  if (result.is_ok() && value_depth(result.value()) > kMaxValueDepth)
    result = Status::errorf("value nested deeper than {} levels", kMaxValueDepth);
  if (result.is_ok() || raised_) return result;
  const std::string& msg = result.message();
  if (msg.rfind("line ", 0) == 0) return result;
  return Status::errorf("line {}: {}", expr.line, msg);
}

Status Interpreter::eval_call_args(const Expr& expr, size_t first_arg, const FramePtr& frame, CallArgs& args) {
  for (size_t i = first_arg; i < expr.children.size(); ++i) {
    EMBER_ASSIGN_OR_RETURN(Value v, eval(*expr.children[i], frame));
    args.args.push_back(std::move(v));
  }
  for (const auto& kw : expr.kwargs) {
    EMBER_ASSIGN_OR_RETURN(Value v, eval(*kw.value, frame));
    args.kwargs.emplace_back(kw.name, std::move(v));
  }
  if (expr.dyn_args) {
    EMBER_ASSIGN_OR_RETURN(Value v, eval(*expr.dyn_args, frame));
    EMBER_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
    for (auto& item : items) args.args.push_back(std::move(item));
  }
  if (expr.dyn_kwargs) {
    EMBER_ASSIGN_OR_RETURN(Value v, eval(*expr.dyn_kwargs, frame));
    if (!v.is_dict()) return Status::errorf("TypeError: argument after ** must be a mapping, not {}", type_name(v));
    for (const auto& [k, item] : v.as_dict().items) {
      if (!k.is_string()) return Status::error("TypeError: keywords must be strings");
      args.kwargs.emplace_back(k.as_string(), item);
    }
  }
  return Status::ok();
}

Result<Value> Interpreter::eval_inner(const Expr& expr, const FramePtr& frame) {
  switch (expr.kind) {
    case ExprKind::kConst: return expr.constant;
    case ExprKind::kName: return lookup(expr.name, frame);
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      items.reserve(expr.children.size());
      for (const auto& c : expr.children) {
        EMBER_ASSIGN_OR_RETURN(Value v, eval(*c, frame));
        items.push_back(std::move(v));
      }
      return Value::seq(std::move(items), expr.kind == ExprKind::kList ? SeqFlavor::kList : SeqFlavor::kTuple);
    }
    case ExprKind::kDict: {
      DictData d;
      for (size_t i = 0; i + 1 < expr.children.size(); i += 2) {
        EMBER_ASSIGN_OR_RETURN(Value k, eval(*expr.children[i], frame));
        EMBER_ASSIGN_OR_RETURN(Value v, eval(*expr.children[i + 1], frame));
        if (k.is_undefined() || k.is_seq() || k.is_dict() || k.is_namespace())
          return Status::errorf("TypeError: unhashable type: '{}'", type_name(k));
        d.set(std::move(k), std::move(v));
      }
      return Value::dict(std::move(d));
    }
    case ExprKind::kGetAttr: {
      EMBER_ASSIGN_OR_RETURN(Value obj, eval(*expr.children[0], frame));
      return get_attr(obj, expr.name);
    }
    case ExprKind::kGetItem: {
      EMBER_ASSIGN_OR_RETURN(Value obj, eval(*expr.children[0], frame));
      if (expr.children[1]->kind == ExprKind::kSlice) return eval_slice(obj, *expr.children[1], frame);
      EMBER_ASSIGN_OR_RETURN(Value key, eval(*expr.children[1], frame));
      return get_item(obj, key);
    }
    case ExprKind::kSlice: return Status::error("slice outside of a subscript");
    case ExprKind::kCall: {
      EMBER_ASSIGN_OR_RETURN(Value callee, eval(*expr.children[0], frame));
      CallArgs args;
      EMBER_RETURN_IF_ERROR(eval_call_args(expr, 1, frame, args));
      return call(callee, args, expr.line);
    }
    case ExprKind::kFilter: {
      if (!expr.children[0]) return Status::error("filter without a value");
      EMBER_ASSIGN_OR_RETURN(Value subject, eval(*expr.children[0], frame));
      CallArgs args;
      EMBER_RETURN_IF_ERROR(eval_call_args(expr, 1, frame, args));
      return apply_filter(expr.name, subject, args);
    }
    case ExprKind::kTest: {
      EMBER_ASSIGN_OR_RETURN(Value subject, eval(*expr.children[0], frame));
      CallArgs args;
      EMBER_RETURN_IF_ERROR(eval_call_args(expr, 1, frame, args));
      EMBER_ASSIGN_OR_RETURN(bool r, apply_test(expr.name, subject, args));
      return Value(r);
    }
    case ExprKind::kNot: {
      EMBER_ASSIGN_OR_RETURN(Value v, eval(*expr.children[0], frame));
      EMBER_ASSIGN_OR_RETURN(bool t, truthy(v));
      return Value(!t);
    }
    case ExprKind::kNeg:
    case ExprKind::kPos: {
      EMBER_ASSIGN_OR_RETURN(Value v, eval(*expr.children[0], frame));
      return unary_op(expr.kind, v);
    }
    case ExprKind::kBinary: {
      EMBER_ASSIGN_OR_RETURN(Value a, eval(*expr.children[0], frame));
      EMBER_ASSIGN_OR_RETURN(Value b, eval(*expr.children[1], frame));
      EMBER_ASSIGN_OR_RETURN(Value r, binary_op(expr.name, a, b, *this));
      if (r.is_string()) EMBER_RETURN_IF_ERROR(charge(static_cast<int64_t>(r.as_string().size() / 256)));
      return r;
    }
    case ExprKind::kCompare: return eval_compare(expr, frame);
    case ExprKind::kAnd:
    case ExprKind::kOr: {
      // Python's and/or return one of their operands.
      EMBER_ASSIGN_OR_RETURN(Value a, eval(*expr.children[0], frame));
      EMBER_ASSIGN_OR_RETURN(bool t, truthy(a));
      if ((expr.kind == ExprKind::kAnd) != t) return a;
      return eval(*expr.children[1], frame);
    }
    case ExprKind::kCondExpr: {
      EMBER_ASSIGN_OR_RETURN(Value c, eval(*expr.children[0], frame));
      EMBER_ASSIGN_OR_RETURN(bool t, truthy(c));
      if (t) return eval(*expr.children[1], frame);
      if (expr.children[2]) return eval(*expr.children[2], frame);
      return Value::undefined(fmt::format(
          "the inline if-expression on line {} evaluated to false and no else section was defined.", expr.line));
    }
    case ExprKind::kConcat: {
      std::string out;
      for (const auto& c : expr.children) {
        EMBER_ASSIGN_OR_RETURN(Value v, eval(*c, frame));
        EMBER_ASSIGN_OR_RETURN(std::string s, py_str(v));
        EMBER_RETURN_IF_ERROR(check_size(out.size() + s.size()));
        out += s;
      }
      EMBER_RETURN_IF_ERROR(charge(static_cast<int64_t>(out.size() / 256)));
      return Value(std::move(out));
    }
    case ExprKind::kNsRef: return Status::error("namespace reference outside of {% set %}");
  }
  return Status::error("unknown expression");
}

Result<Value> Interpreter::eval_compare(const Expr& expr, const FramePtr& frame) {
  EMBER_ASSIGN_OR_RETURN(Value left, eval(*expr.children[0], frame));
  for (size_t i = 0; i < expr.ops.size(); ++i) {
    EMBER_ASSIGN_OR_RETURN(Value right, eval(*expr.children[i + 1], frame));
    const std::string& op = expr.ops[i];
    bool r = false;
    if (op == "==") {
      r = py_equal(left, right);
    } else if (op == "!=") {
      r = !py_equal(left, right);
    } else if (op == "<") {
      EMBER_ASSIGN_OR_RETURN(r, py_less(left, right));
    } else if (op == ">") {
      EMBER_ASSIGN_OR_RETURN(r, py_less(right, left));
    } else if (op == "<=") {
      EMBER_ASSIGN_OR_RETURN(bool gt, py_less(right, left));
      r = !gt;
      if (r && !py_equal(left, right)) {
        EMBER_ASSIGN_OR_RETURN(r, py_less(left, right));
      }
    } else if (op == ">=") {
      EMBER_ASSIGN_OR_RETURN(bool lt, py_less(left, right));
      r = !lt;
      if (r && !py_equal(left, right)) {
        EMBER_ASSIGN_OR_RETURN(r, py_less(right, left));
      }
    } else if (op == "in") {
      EMBER_ASSIGN_OR_RETURN(r, contains(right, left));
    } else {
      EMBER_ASSIGN_OR_RETURN(bool in, contains(right, left));
      r = !in;
    }
    // Chained comparisons stop at the first false link, like Python's.
    if (!r) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

Result<Value> Interpreter::eval_slice(const Value& obj, const Expr& slice, const FramePtr& frame) {
  Value parts[3] = {Value::none(), Value::none(), Value::none()};
  for (int i = 0; i < 3; ++i) {
    if (slice.children[static_cast<size_t>(i)]) {
      EMBER_ASSIGN_OR_RETURN(parts[i], eval(*slice.children[static_cast<size_t>(i)], frame));
    }
  }
  return slice_value(obj, parts[0], parts[1], parts[2]);
}

Result<Value> Interpreter::call(const Value& callee, CallArgs& args, int line) {
  if (callee.is_callable()) return callee.as_callable().fn(*this, args);
  if (callee.is_undefined()) return undefined_error(callee);
  return Status::errorf("TypeError: '{}' object is not callable", type_name(callee));
}

Result<Value> Interpreter::apply_filter(const std::string& name, const Value& subject, CallArgs& args) {
  EMBER_RETURN_IF_ERROR(charge(1));
  return run_filter(*this, name, subject, args);
}

Result<bool> Interpreter::apply_test(const std::string& name, const Value& subject, CallArgs& args) {
  EMBER_RETURN_IF_ERROR(charge(1));
  return run_test(*this, name, subject, args);
}

Result<Value> Interpreter::get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined: return undefined_error(obj);
    case Value::Kind::kNamespace:
      if (const Value* v = obj.as_namespace().find(name)) return *v;
      return Value::undefined(fmt::format("'Namespace' object has no attribute '{}'", name));
    case Value::Kind::kDict: {
      // Python attributes (the dict methods) win over keys, as in jinja2's getattr.
      if (auto method = builtin_attribute(obj, name)) return *method;
      if (const Value* v = obj.as_dict().find(std::string_view(name))) return *v;
      return Value::undefined(fmt::format("'dict object' has no attribute '{}'", name));
    }
    default:
      if (auto attr = builtin_attribute(obj, name)) return *attr;
      return Value::undefined(fmt::format("'{}' has no attribute '{}'",
                                          obj.is_none() ? std::string("None") : type_name(obj) + " object", name));
  }
}

Result<Value> Interpreter::get_item(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined: return undefined_error(obj);
    case Value::Kind::kDict:
      if (const Value* v = obj.as_dict().find(key)) return *v;
      break;
    case Value::Kind::kString:
      if ((key.is_int() || key.is_bool()) && key.as_int() != INT64_MAX) {
        Value one = Value(key.as_int() + 1);
        if (key.as_int() == -1) one = Value::none();
        EMBER_ASSIGN_OR_RETURN(Value s, slice_value(obj, key, one, Value::none()));
        if (!s.as_string().empty()) return s;
      }
      break;
    case Value::Kind::kSeq: {
      SeqFlavor f = obj.as_seq().flavor;
      bool indexable = f == SeqFlavor::kList || f == SeqFlavor::kTuple || f == SeqFlavor::kRange;
      if ((key.is_int() || key.is_bool()) && indexable) {
        const auto& items = obj.as_seq().items;
        int64_t i = key.as_int();
        int64_t n = static_cast<int64_t>(items.size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return items[static_cast<size_t>(i)];
      }
      break;
    }
    default: break;
  }
  // jinja2 falls back to an attribute of the same name for string keys.
  if (key.is_string()) {
    if (obj.is_namespace()) {
      if (const Value* v = obj.as_namespace().find(key.as_string())) return *v;
    } else if (auto attr = builtin_attribute(obj, key.as_string())) {
      return *attr;
    }
  }
  if (obj.is_dict() && key.is_string())
    return Value::undefined(fmt::format("'dict object' has no attribute '{}'", key.as_string()));
  auto key_text = py_repr(key);
  return Value::undefined(fmt::format("'{}' has no item {}", type_name(obj) + " object",
                                      key_text.is_ok() ? key_text.value() : std::string("?")));
}

}  // namespace ember::chat
