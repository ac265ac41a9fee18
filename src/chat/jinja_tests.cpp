// jinja2's tests (`x is defined`, `x is string`, ...), used by `is` and select/reject.
#include <fmt/format.h>

#include <unordered_map>

#include "chat/interpreter.h"
#include "chat/parser.h"
#include "chat/utf8.h"

namespace ember::chat {
namespace {

using TestFn = Result<bool> (*)(Interpreter&, const Value&, CallArgs&);

Result<Value> one_arg(CallArgs& args, const char* name) {
  ArgReader r(name, args);
  Value other = r.get("other");
  EMBER_RETURN_IF_ERROR(r.finish());
  if (other.is_undefined() && args.args.empty() && args.kwargs.empty())
    return Status::errorf("TypeError: test '{}' missing an argument", name);
  return other;
}

Status no_args(CallArgs& args, const char* name) { return ArgReader(name, args).finish(); }

Result<bool> compare_test(const Value& v, CallArgs& args, const char* name, const std::string& op) {
  EMBER_ASSIGN_OR_RETURN(Value other, one_arg(args, name));
  if (op == "==") return py_equal(v, other);
  if (op == "!=") return !py_equal(v, other);
  if (op == "<") return py_less(v, other);
  if (op == ">") return py_less(other, v);
  EMBER_ASSIGN_OR_RETURN(bool strict, op == "<=" ? py_less(other, v) : py_less(v, other));
  return !strict;
}

Result<bool> parity(const Value& v, bool want_odd) {
  if (v.is_undefined()) return undefined_error(v);
  if (v.is_float()) {
    double m = std::fmod(v.as_double(), 2.0);
    if (m < 0) m += 2.0;
    return want_odd ? m == 1.0 : m == 0.0;
  }
  if (!v.is_number()) return Status::errorf("TypeError: not all arguments converted during string formatting ({})", type_name(v));
  int64_t m = v.as_int() % 2;
  return want_odd ? m != 0 : m == 0;
}

const std::unordered_map<std::string_view, TestFn>& tests() {
  static const std::unordered_map<std::string_view, TestFn> table = {
      {"defined", [](Interpreter&, const Value& v, CallArgs& a) -> Result<bool> {
         EMBER_RETURN_IF_ERROR(no_args(a, "defined"));
         return !v.is_undefined() || v.is_unsupported();
       }},
      {"undefined", [](Interpreter&, const Value& v, CallArgs& a) -> Result<bool> {
         EMBER_RETURN_IF_ERROR(no_args(a, "undefined"));
         return v.is_undefined() && !v.is_unsupported();
       }},
      {"none", [](Interpreter&, const Value& v, CallArgs& a) -> Result<bool> {
         EMBER_RETURN_IF_ERROR(no_args(a, "none"));
         return v.is_none();
       }},
      {"boolean", [](Interpreter&, const Value& v, CallArgs& a) -> Result<bool> {
         EMBER_RETURN_IF_ERROR(no_args(a, "boolean"));
         return v.is_bool();
       }},
      {"true", [](Interpreter&, const Value& v, CallArgs& a) -> Result<bool> {
         EMBER_RETURN_IF_ERROR(no_args(a, "true"));
         return v.is_bool() && v.as_bool();
       }},
      {"false", [](Interpreter&, const Value& v, CallArgs& a) -> Result<bool> {
         EMBER_RETURN_IF_ERROR(no_args(a, "false"));
         return v.is_bool() && !v.as_bool();
       }},
      {"integer", [](Interpreter&, const Value& v, CallArgs& a) -> Result<bool> {
         EMBER_RETURN_IF_ERROR(no_args(a, "integer"));
         return v.is_int();
       }},
      {"float", [](Interpreter&, const Value& v, CallArgs& a) -> Result<bool> {
         EMBER_RETURN_IF_ERROR(no_args(a, "float"));
         return v.is_float();
       }},
      {"number", [](Interpreter&, const Value& v, CallArgs& a) -> Result<bool> {
         EMBER_RETURN_IF_ERROR(no_args(a, "number"));
         return v.is_number();
       }},
      {"string", [](Interpreter&, const Value& v, CallArgs& a) -> Result<bool> {
         EMBER_RETURN_IF_ERROR(no_args(a, "string"));
         return v.is_string();
       }},
      {"mapping", [](Interpreter&, const Value& v, CallArgs& a) -> Result<bool> {
         EMBER_RETURN_IF_ERROR(no_args(a, "mapping"));
         return v.is_dict();
       }},
      {"iterable", [](Interpreter&, const Value& v, CallArgs& a) -> Result<bool> {
         EMBER_RETURN_IF_ERROR(no_args(a, "iterable"));
         return v.is_string() || v.is_seq() || v.is_dict() || v.is_loop() || (v.is_undefined() && !v.is_unsupported());
       }},
      {"sequence", [](Interpreter&, const Value& v, CallArgs& a) -> Result<bool> {
         EMBER_RETURN_IF_ERROR(no_args(a, "sequence"));
         // Python: has len() and __getitem__.
         if (v.is_seq()) {
           SeqFlavor f = v.as_seq().flavor;
           return f == SeqFlavor::kList || f == SeqFlavor::kTuple || f == SeqFlavor::kRange;
         }
         return v.is_string() || v.is_dict() || (v.is_undefined() && !v.is_unsupported());
       }},
      {"callable", [](Interpreter&, const Value& v, CallArgs& a) -> Result<bool> {
         EMBER_RETURN_IF_ERROR(no_args(a, "callable"));
         return v.is_callable();
       }},
      {"odd", [](Interpreter&, const Value& v, CallArgs& a) -> Result<bool> {
         EMBER_RETURN_IF_ERROR(no_args(a, "odd"));
         return parity(v, true);
       }},
      {"even", [](Interpreter&, const Value& v, CallArgs& a) -> Result<bool> {
         EMBER_RETURN_IF_ERROR(no_args(a, "even"));
         return parity(v, false);
       }},
      {"divisibleby", [](Interpreter& interp, const Value& v, CallArgs& a) -> Result<bool> {
         ArgReader r("divisibleby", a);
         Value num = r.get("num");
         EMBER_RETURN_IF_ERROR(r.finish());
         EMBER_ASSIGN_OR_RETURN(Value m, binary_op("%", v, num, interp));
         return py_equal(m, Value(0));
       }},
      {"lower", [](Interpreter&, const Value& v, CallArgs& a) -> Result<bool> {
         EMBER_RETURN_IF_ERROR(no_args(a, "lower"));
         EMBER_ASSIGN_OR_RETURN(std::string s, py_str(v));
         return !s.empty() && py_lower(s) == s && py_upper(s) != s;
       }},
      {"upper", [](Interpreter&, const Value& v, CallArgs& a) -> Result<bool> {
         EMBER_RETURN_IF_ERROR(no_args(a, "upper"));
         EMBER_ASSIGN_OR_RETURN(std::string s, py_str(v));
         return !s.empty() && py_upper(s) == s && py_lower(s) != s;
       }},
      {"in", [](Interpreter&, const Value& v, CallArgs& a) -> Result<bool> {
         ArgReader r("in", a);
         Value seq = r.get("seq");
         EMBER_RETURN_IF_ERROR(r.finish());
         return contains(seq, v);
       }},
      {"sameas", [](Interpreter&, const Value& v, CallArgs& a) -> Result<bool> {
         EMBER_ASSIGN_OR_RETURN(Value other, one_arg(a, "sameas"));
         if (v.is_none() || other.is_none()) return v.is_none() && other.is_none();
         if (v.is_bool() || other.is_bool()) return v.is_bool() && other.is_bool() && v.as_bool() == other.as_bool();
         if (v.identity() && other.identity()) return v.identity() == other.identity();
         return Status::error("unsupported: 'sameas' on values without a stable identity");
       }},
      {"filter", [](Interpreter&, const Value& v, CallArgs& a) -> Result<bool> {
         EMBER_RETURN_IF_ERROR(no_args(a, "filter"));
         return v.is_string() && jinja_has_filter(v.as_string());
       }},
      {"test", [](Interpreter&, const Value& v, CallArgs& a) -> Result<bool> {
         EMBER_RETURN_IF_ERROR(no_args(a, "test"));
         return v.is_string() && jinja_has_test(v.as_string());
       }},
      {"eq", [](Interpreter&, const Value& v, CallArgs& a) { return compare_test(v, a, "eq", "=="); }},
      {"equalto", [](Interpreter&, const Value& v, CallArgs& a) { return compare_test(v, a, "equalto", "=="); }},
      {"==", [](Interpreter&, const Value& v, CallArgs& a) { return compare_test(v, a, "==", "=="); }},
      {"ne", [](Interpreter&, const Value& v, CallArgs& a) { return compare_test(v, a, "ne", "!="); }},
      {"!=", [](Interpreter&, const Value& v, CallArgs& a) { return compare_test(v, a, "!=", "!="); }},
      {"lt", [](Interpreter&, const Value& v, CallArgs& a) { return compare_test(v, a, "lt", "<"); }},
      {"lessthan", [](Interpreter&, const Value& v, CallArgs& a) { return compare_test(v, a, "lessthan", "<"); }},
      {"<", [](Interpreter&, const Value& v, CallArgs& a) { return compare_test(v, a, "<", "<"); }},
      {"le", [](Interpreter&, const Value& v, CallArgs& a) { return compare_test(v, a, "le", "<="); }},
      {"<=", [](Interpreter&, const Value& v, CallArgs& a) { return compare_test(v, a, "<=", "<="); }},
      {"gt", [](Interpreter&, const Value& v, CallArgs& a) { return compare_test(v, a, "gt", ">"); }},
      {"greaterthan", [](Interpreter&, const Value& v, CallArgs& a) { return compare_test(v, a, "greaterthan", ">"); }},
      {">", [](Interpreter&, const Value& v, CallArgs& a) { return compare_test(v, a, ">", ">"); }},
      {"ge", [](Interpreter&, const Value& v, CallArgs& a) { return compare_test(v, a, "ge", ">="); }},
      {">=", [](Interpreter&, const Value& v, CallArgs& a) { return compare_test(v, a, ">=", ">="); }},
  };
  return table;
}

}  // namespace

Result<bool> run_test(Interpreter& interp, const std::string& name, const Value& subject, CallArgs& args) {
  auto it = tests().find(name);
  if (it == tests().end()) {
    if (jinja_has_test(name)) return Status::errorf("unsupported test '{}' (jinja2 has it; ember does not implement it)", name);
    return Status::errorf("TemplateRuntimeError: no test named '{}'", name);
  }
  return it->second(interp, subject, args);
}

}  // namespace ember::chat
