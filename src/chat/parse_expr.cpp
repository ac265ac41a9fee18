// Expression parsing, with jinja2's precedence (lowest first): conditional expression,
// or, and, not, comparisons and `in`, + -, ~, * / // %, **, unary - +, then postfix
// (attribute, subscript, call), filters and tests.
#include <fmt/format.h>

#include <iterator>
#include <algorithm>

#include "chat/parser.h"

namespace ember::chat {
namespace {

ExprPtr make(ExprKind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

ExprPtr make2(ExprKind kind, int line, ExprPtr a, ExprPtr b) {
  auto e = make(kind, line);
  e->children.push_back(std::move(a));
  e->children.push_back(std::move(b));
  return e;
}

constexpr std::string_view kJinjaFilters[] = {
    "abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e",
    "escape", "filesizeformat", "first", "float", "forceescape", "format", "groupby", "indent",
    "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min", "pprint",
    "random", "reject", "rejectattr", "replace", "reverse", "round", "safe", "select",
    "selectattr", "slice", "sort", "string", "striptags", "sum", "title", "tojson", "trim",
    "truncate", "unique", "upper", "urlencode", "urlize", "wordcount", "wordwrap", "xmlattr"};

constexpr std::string_view kJinjaTests[] = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "escaped", "even", "false",
    "filter", "float", "ge", "gt", "greaterthan", "in", "integer", "iterable", "le", "lessthan",
    "lower", "lt", "mapping", "ne", "none", "number", "odd", "sameas", "sequence", "string",
    "test", "true", "undefined", "upper", "==", "!=", "<", "<=", ">", ">="};

}  // namespace

bool jinja_has_filter(std::string_view name) {
  return std::find(std::begin(kJinjaFilters), std::end(kJinjaFilters), name) != std::end(kJinjaFilters);
}

bool jinja_has_test(std::string_view name) {
  return std::find(std::begin(kJinjaTests), std::end(kJinjaTests), name) != std::end(kJinjaTests);
}

Result<ExprPtr> Parser::parse_expression(bool with_condexpr) {
  DepthGuard guard(*this);
  EMBER_RETURN_IF_ERROR(check_depth());
  if (with_condexpr) return parse_condexpr();
  return parse_or();
}

Result<ExprPtr> Parser::parse_condexpr() {
  int line = current().line;
  EMBER_ASSIGN_OR_RETURN(ExprPtr expr1, parse_or());
  while (skip_name("if")) {
    EMBER_ASSIGN_OR_RETURN(ExprPtr expr2, parse_or());
    ExprPtr expr3;
    if (skip_name("else")) {
      EMBER_ASSIGN_OR_RETURN(expr3, parse_condexpr());
    }
    auto node = make(ExprKind::kCondExpr, line);
    node->children.push_back(std::move(expr2));
    node->children.push_back(std::move(expr1));
    node->children.push_back(std::move(expr3));
    expr1 = std::move(node);
    line = current().line;
  }
  return expr1;
}

Result<ExprPtr> Parser::parse_or() {
  int line = current().line;
  EMBER_ASSIGN_OR_RETURN(ExprPtr left, parse_and());
  while (skip_name("or")) {
    EMBER_ASSIGN_OR_RETURN(ExprPtr right, parse_and());
    left = make2(ExprKind::kOr, line, std::move(left), std::move(right));
    line = current().line;
  }
  return left;
}

Result<ExprPtr> Parser::parse_and() {
  int line = current().line;
  EMBER_ASSIGN_OR_RETURN(ExprPtr left, parse_not());
  while (skip_name("and")) {
    EMBER_ASSIGN_OR_RETURN(ExprPtr right, parse_not());
    left = make2(ExprKind::kAnd, line, std::move(left), std::move(right));
    line = current().line;
  }
  return left;
}

Result<ExprPtr> Parser::parse_not() {
  if (is_name("not")) {
    int line = current().line;
    next();
    DepthGuard guard(*this);
    EMBER_RETURN_IF_ERROR(check_depth());
    EMBER_ASSIGN_OR_RETURN(ExprPtr operand, parse_not());
    auto node = make(ExprKind::kNot, line);
    node->children.push_back(std::move(operand));
    return node;
  }
  return parse_compare();
}

Result<ExprPtr> Parser::parse_compare() {
  int line = current().line;
  EMBER_ASSIGN_OR_RETURN(ExprPtr expr, parse_math1());
  ExprPtr node;
  while (true) {
    std::string op;
    if (current().type == TokenType::kOperator &&
        (current().text == "==" || current().text == "!=" || current().text == "<" ||
         current().text == "<=" || current().text == ">" || current().text == ">=")) {
      op = current().text;
      next();
    } else if (skip_name("in")) {
      op = "in";
    } else if (is_name("not") && look().type == TokenType::kName && look().text == "in") {
      next();
      next();
      op = "notin";
    } else {
      break;
    }
    if (!node) {
      node = make(ExprKind::kCompare, line);
      node->children.push_back(std::move(expr));
    }
    EMBER_ASSIGN_OR_RETURN(ExprPtr rhs, parse_math1());
    node->ops.push_back(op);
    node->children.push_back(std::move(rhs));
  }
  if (node) return node;
  return expr;
}

Result<ExprPtr> Parser::parse_math1() {
  int line = current().line;
  EMBER_ASSIGN_OR_RETURN(ExprPtr left, parse_concat());
  while (is_op("+") || is_op("-")) {
    std::string op = current().text;
    next();
    EMBER_ASSIGN_OR_RETURN(ExprPtr right, parse_concat());
    left = make2(ExprKind::kBinary, line, std::move(left), std::move(right));
    left->name = op;
    line = current().line;
  }
  return left;
}

Result<ExprPtr> Parser::parse_concat() {
  int line = current().line;
  EMBER_ASSIGN_OR_RETURN(ExprPtr first, parse_math2());
  if (!is_op("~")) return first;
  auto node = make(ExprKind::kConcat, line);
  node->children.push_back(std::move(first));
  while (skip_op("~")) {
    EMBER_ASSIGN_OR_RETURN(ExprPtr next_arg, parse_math2());
    node->children.push_back(std::move(next_arg));
  }
  return node;
}

Result<ExprPtr> Parser::parse_math2() {
  int line = current().line;
  EMBER_ASSIGN_OR_RETURN(ExprPtr left, parse_pow());
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    std::string op = current().text;
    next();
    EMBER_ASSIGN_OR_RETURN(ExprPtr right, parse_pow());
    left = make2(ExprKind::kBinary, line, std::move(left), std::move(right));
    left->name = op;
    line = current().line;
  }
  return left;
}

Result<ExprPtr> Parser::parse_pow() {
  int line = current().line;
  EMBER_ASSIGN_OR_RETURN(ExprPtr left, parse_unary(true));
  while (skip_op("**")) {
    EMBER_ASSIGN_OR_RETURN(ExprPtr right, parse_unary(true));
    left = make2(ExprKind::kBinary, line, std::move(left), std::move(right));
    left->name = "**";
    line = current().line;
  }
  return left;
}

Result<ExprPtr> Parser::parse_unary(bool with_filter) {
  DepthGuard guard(*this);
  EMBER_RETURN_IF_ERROR(check_depth());
  int line = current().line;
  ExprPtr node;
  if (is_op("-") || is_op("+")) {
    ExprKind kind = is_op("-") ? ExprKind::kNeg : ExprKind::kPos;
    next();
    EMBER_ASSIGN_OR_RETURN(ExprPtr operand, parse_unary(false));
    node = make(kind, line);
    node->children.push_back(std::move(operand));
  } else {
    EMBER_ASSIGN_OR_RETURN(node, parse_primary());
  }
  EMBER_ASSIGN_OR_RETURN(node, parse_postfix(std::move(node)));
  if (with_filter) {
    EMBER_ASSIGN_OR_RETURN(node, parse_filter_expr(std::move(node)));
  }
  return node;
}

Result<ExprPtr> Parser::parse_primary(bool with_namespace) {
  DepthGuard guard(*this);
  EMBER_RETURN_IF_ERROR(check_depth());
  const Token& tok = current();
  int line = tok.line;
  if (tok.type == TokenType::kName) {
    std::string name = tok.text;
    next();
    if (name == "true" || name == "True" || name == "false" || name == "False") {
      auto node = make(ExprKind::kConst, line);
      node->constant = Value(name == "true" || name == "True");
      return node;
    }
    if (name == "none" || name == "None") {
      auto node = make(ExprKind::kConst, line);
      node->constant = Value::none();
      return node;
    }
    if (with_namespace && is_op(".")) {
      next();
      auto node = make(ExprKind::kNsRef, line);
      node->name = name;
      EMBER_ASSIGN_OR_RETURN(node->attr, expect_name());
      return node;
    }
    auto node = make(ExprKind::kName, line);
    node->name = name;
    return node;
  }
  if (tok.type == TokenType::kString) {
    std::string value;
    while (current().type == TokenType::kString) {  // adjacent literals concatenate
      value += current().text;
      next();
    }
    auto node = make(ExprKind::kConst, line);
    node->constant = Value(std::move(value));
    return node;
  }
  if (tok.type == TokenType::kInteger || tok.type == TokenType::kFloat) {
    auto node = make(ExprKind::kConst, line);
    node->constant = tok.type == TokenType::kInteger ? Value(tok.int_value) : Value(tok.float_value);
    next();
    return node;
  }
  if (is_op("(")) {
    next();
    EMBER_ASSIGN_OR_RETURN(ExprPtr node, parse_tuple(false, true, {}, true));
    EMBER_RETURN_IF_ERROR(expect_op(")"));
    return node;
  }
  if (is_op("[")) return parse_list();
  if (is_op("{")) return parse_dict();
  return fail("unexpected " + describe_current());
}

Result<ExprPtr> Parser::parse_tuple(bool simplified, bool with_condexpr,
                                    const std::vector<std::string>& extra_end,
                                    bool explicit_parentheses) {
  int line = current().line;
  std::vector<ExprPtr> args;
  bool is_tuple = false;
  while (true) {
    if (!args.empty()) EMBER_RETURN_IF_ERROR(expect_op(","));
    if (is_tuple_end(extra_end)) break;
    ExprPtr item;
    if (simplified) {
      EMBER_ASSIGN_OR_RETURN(item, parse_primary(true));
    } else {
      EMBER_ASSIGN_OR_RETURN(item, parse_expression(with_condexpr));
    }
    args.push_back(std::move(item));
    if (is_op(",")) {
      is_tuple = true;
    } else {
      break;
    }
    line = current().line;
  }
  if (!is_tuple) {
    if (!args.empty()) return std::move(args[0]);
    if (!explicit_parentheses) return fail("expected an expression, got " + describe_current());
  }
  auto node = make(ExprKind::kTuple, line);
  node->children = std::move(args);
  return node;
}

Result<ExprPtr> Parser::parse_list() {
  auto node = make(ExprKind::kList, current().line);
  EMBER_RETURN_IF_ERROR(expect_op("["));
  while (!is_op("]")) {
    if (!node->children.empty()) EMBER_RETURN_IF_ERROR(expect_op(","));
    if (is_op("]")) break;
    EMBER_ASSIGN_OR_RETURN(ExprPtr item, parse_expression());
    node->children.push_back(std::move(item));
  }
  EMBER_RETURN_IF_ERROR(expect_op("]"));
  return node;
}

Result<ExprPtr> Parser::parse_dict() {
  auto node = make(ExprKind::kDict, current().line);
  EMBER_RETURN_IF_ERROR(expect_op("{"));
  while (!is_op("}")) {
    if (!node->children.empty()) EMBER_RETURN_IF_ERROR(expect_op(","));
    if (is_op("}")) break;
    EMBER_ASSIGN_OR_RETURN(ExprPtr key, parse_expression());
    EMBER_RETURN_IF_ERROR(expect_op(":"));
    EMBER_ASSIGN_OR_RETURN(ExprPtr value, parse_expression());
    node->children.push_back(std::move(key));
    node->children.push_back(std::move(value));
  }
  EMBER_RETURN_IF_ERROR(expect_op("}"));
  return node;
}

Result<ExprPtr> Parser::parse_postfix(ExprPtr node) {
  while (true) {
    if (is_op(".") || is_op("[")) {
      EMBER_ASSIGN_OR_RETURN(node, parse_subscript(std::move(node)));
    } else if (is_op("(")) {
      auto call = make(ExprKind::kCall, current().line);
      call->children.push_back(std::move(node));
      EMBER_RETURN_IF_ERROR(parse_call_args(*call));
      node = std::move(call);
    } else {
      return node;
    }
  }
}

Result<ExprPtr> Parser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (is_op("|")) {
      EMBER_ASSIGN_OR_RETURN(node, parse_filter(std::move(node), false));
    } else if (is_name("is")) {
      EMBER_ASSIGN_OR_RETURN(node, parse_test(std::move(node)));
    } else if (is_op("(")) {
      auto call = make(ExprKind::kCall, current().line);
      call->children.push_back(std::move(node));
      EMBER_RETURN_IF_ERROR(parse_call_args(*call));
      node = std::move(call);
    } else {
      return node;
    }
  }
}

Result<ExprPtr> Parser::parse_subscript(ExprPtr node) {
  DepthGuard guard(*this);
  EMBER_RETURN_IF_ERROR(check_depth());
  int line = current().line;
  bool dot = is_op(".");
  next();
  if (dot) {
    if (current().type == TokenType::kName) {
      auto attr = make(ExprKind::kGetAttr, line);
      attr->name = current().text;
      attr->children.push_back(std::move(node));
      next();
      return attr;
    }
    if (current().type != TokenType::kInteger) return fail("expected name or number");
    auto index = make(ExprKind::kConst, current().line);
    index->constant = Value(current().int_value);
    next();
    return make2(ExprKind::kGetItem, line, std::move(node), std::move(index));
  }
  std::vector<ExprPtr> args;
  while (!is_op("]")) {
    if (!args.empty()) EMBER_RETURN_IF_ERROR(expect_op(","));
    EMBER_ASSIGN_OR_RETURN(ExprPtr arg, parse_subscribed());
    args.push_back(std::move(arg));
  }
  EMBER_RETURN_IF_ERROR(expect_op("]"));
  ExprPtr arg;
  if (args.size() == 1) {
    arg = std::move(args[0]);
  } else {
    arg = make(ExprKind::kTuple, line);
    arg->children = std::move(args);
  }
  return make2(ExprKind::kGetItem, line, std::move(node), std::move(arg));
}

Result<ExprPtr> Parser::parse_subscribed() {
  int line = current().line;
  std::vector<ExprPtr> parts;
  if (is_op(":")) {
    next();
    parts.push_back(nullptr);
  } else {
    EMBER_ASSIGN_OR_RETURN(ExprPtr node, parse_expression());
    if (!is_op(":")) return node;
    next();
    parts.push_back(std::move(node));
  }
  if (is_op(":") || is_op("]") || is_op(",")) {
    parts.push_back(nullptr);
  } else {
    EMBER_ASSIGN_OR_RETURN(ExprPtr stop, parse_expression());
    parts.push_back(std::move(stop));
  }
  if (skip_op(":")) {
    if (is_op("]") || is_op(",")) {
      parts.push_back(nullptr);
    } else {
      EMBER_ASSIGN_OR_RETURN(ExprPtr step, parse_expression());
      parts.push_back(std::move(step));
    }
  } else {
    parts.push_back(nullptr);
  }
  auto node = make(ExprKind::kSlice, line);
  node->children = std::move(parts);
  return node;
}

Status Parser::parse_call_args(Expr& call) {
  int line = current().line;
  EMBER_RETURN_IF_ERROR(expect_op("("));
  bool require_comma = false;
  auto ensure = [&](bool ok) -> Status {
    return ok ? Status::ok() : fail_at(line, "invalid syntax for function call expression");
  };
  while (!is_op(")")) {
    if (require_comma) {
      EMBER_RETURN_IF_ERROR(expect_op(","));
      if (is_op(")")) break;
    }
    if (is_op("*")) {
      EMBER_RETURN_IF_ERROR(ensure(!call.dyn_args && !call.dyn_kwargs));
      next();
      EMBER_ASSIGN_OR_RETURN(call.dyn_args, parse_expression());
    } else if (is_op("**")) {
      EMBER_RETURN_IF_ERROR(ensure(!call.dyn_kwargs));
      next();
      EMBER_ASSIGN_OR_RETURN(call.dyn_kwargs, parse_expression());
    } else if (current().type == TokenType::kName && look().type == TokenType::kOperator &&
               look().text == "=") {
      EMBER_RETURN_IF_ERROR(ensure(!call.dyn_kwargs));
      std::string key = current().text;
      next();
      next();
      EMBER_ASSIGN_OR_RETURN(ExprPtr value, parse_expression());
      call.kwargs.push_back(Keyword{std::move(key), std::move(value)});
    } else {
      EMBER_RETURN_IF_ERROR(ensure(!call.dyn_args && !call.dyn_kwargs && call.kwargs.empty()));
      EMBER_ASSIGN_OR_RETURN(ExprPtr arg, parse_expression());
      call.children.push_back(std::move(arg));
    }
    require_comma = true;
  }
  return expect_op(")");
}

Result<ExprPtr> Parser::parse_filter(ExprPtr node, bool start_inline) {
  while (is_op("|") || start_inline) {
    if (!start_inline) next();
    start_inline = false;
    int line = current().line;
    EMBER_ASSIGN_OR_RETURN(std::string name, expect_name());
    while (skip_op(".")) {
      EMBER_ASSIGN_OR_RETURN(std::string part, expect_name());
      name += "." + part;
    }
    if (!jinja_has_filter(name)) return fail_at(line, fmt::format("no filter named '{}'", name));
    auto filter = make(ExprKind::kFilter, line);
    filter->name = std::move(name);
    filter->children.push_back(std::move(node));
    if (is_op("(")) EMBER_RETURN_IF_ERROR(parse_call_args(*filter));
    node = std::move(filter);
  }
  return node;
}

Result<ExprPtr> Parser::parse_test(ExprPtr node) {
  int line = current().line;
  next();  // 'is'
  bool negated = skip_name("not");
  EMBER_ASSIGN_OR_RETURN(std::string name, expect_name());
  while (skip_op(".")) {
    EMBER_ASSIGN_OR_RETURN(std::string part, expect_name());
    name += "." + part;
  }
  if (!jinja_has_test(name)) return fail_at(line, fmt::format("no test named '{}'", name));
  auto test = make(ExprKind::kTest, line);
  test->name = std::move(name);
  test->children.push_back(std::move(node));
  TokenType t = current().type;
  if (is_op("(")) {
    EMBER_RETURN_IF_ERROR(parse_call_args(*test));
  } else if ((t == TokenType::kName || t == TokenType::kString || t == TokenType::kInteger ||
              t == TokenType::kFloat || is_op("[") || is_op("{")) &&
             !is_name("else") && !is_name("or") && !is_name("and")) {
    if (is_name("is")) return fail("you cannot chain multiple tests with is");
    EMBER_ASSIGN_OR_RETURN(ExprPtr arg, parse_primary());
    EMBER_ASSIGN_OR_RETURN(arg, parse_postfix(std::move(arg)));
    test->children.push_back(std::move(arg));
  }
  if (!negated) return test;
  auto not_node = make(ExprKind::kNot, line);
  not_node->children.push_back(std::move(test));
  return not_node;
}

}  // namespace ember::chat
