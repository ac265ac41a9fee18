// Statement parsing (tags) and token-stream helpers; expressions are in parse_expr.cpp.
#include <fmt/format.h>

#include <algorithm>

#include "chat/parser.h"

namespace ember::chat {
namespace {

constexpr int kMaxDepth = 200;

bool contains(const std::vector<std::string>& v, std::string_view s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

std::string join_quoted(const std::vector<std::string>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += i + 1 == v.size() ? " or " : ", ";
    out += "'" + v[i] + "'";
  }
  return out;
}

}  // namespace

Result<Body> parse_template(std::string_view source) {
  EMBER_ASSIGN_OR_RETURN(std::vector<Token> tokens, tokenize(source));
  Parser parser(std::move(tokens));
  return parser.parse_all();
}

Result<Body> Parser::parse_all() {
  EMBER_ASSIGN_OR_RETURN(Body body, subparse({}));
  if (current().type != TokenType::kEof) return fail("unexpected " + describe_current());
  return body;
}

bool Parser::is_op(std::string_view op) const {
  return current().type == TokenType::kOperator && current().text == op;
}
bool Parser::is_name(std::string_view name) const {
  return current().type == TokenType::kName && current().text == name;
}
bool Parser::skip_op(std::string_view op) {
  if (!is_op(op)) return false;
  next();
  return true;
}
bool Parser::skip_name(std::string_view name) {
  if (!is_name(name)) return false;
  next();
  return true;
}

Status Parser::expect_op(std::string_view op) {
  if (skip_op(op)) return Status::ok();
  return fail(fmt::format("expected token '{}', got {}", op, describe_current()));
}

Status Parser::expect_block_end() {
  if (current().type == TokenType::kBlockEnd) {
    next();
    return Status::ok();
  }
  return fail(fmt::format("expected end of statement block, got {}", describe_current()));
}

Result<std::string> Parser::expect_name() {
  if (current().type != TokenType::kName) return fail("expected a name, got " + describe_current());
  std::string name = current().text;
  next();
  return name;
}

bool Parser::is_tuple_end(const std::vector<std::string>& extra_end) const {
  TokenType t = current().type;
  if (t == TokenType::kVarEnd || t == TokenType::kBlockEnd || is_op(")")) return true;
  return current().type == TokenType::kName && contains(extra_end, current().text);
}

std::string Parser::describe_current() const {
  const Token& t = current();
  switch (t.type) {
    case TokenType::kEof: return "end of template";
    case TokenType::kBlockEnd: return "end of statement block";
    case TokenType::kVarEnd: return "end of print statement";
    case TokenType::kBlockBegin: return "begin of statement block";
    case TokenType::kVarBegin: return "begin of print statement";
    case TokenType::kData: return "template data";
    case TokenType::kName: return "'" + t.text + "'";
    case TokenType::kOperator: return "'" + t.text + "'";
    case TokenType::kString: return "string";
    case TokenType::kInteger: return "integer";
    case TokenType::kFloat: return "float";
  }
  return "token";
}

Status Parser::fail(const std::string& message) const { return fail_at(current().line, message); }
Status Parser::fail_at(int line, const std::string& message) const {
  return Status::errorf("line {}: {}", line, message);
}

Status Parser::check_depth() const {
  if (depth_ > kMaxDepth) return fail("template nested too deeply");
  return Status::ok();
}

Result<Body> Parser::subparse(const std::vector<std::string>& end_tokens) {
  Body body;
  while (current().type != TokenType::kEof) {
    const Token& tok = current();
    if (tok.type == TokenType::kData) {
      auto node = std::make_unique<Stmt>();
      node->kind = StmtKind::kData;
      node->line = tok.line;
      node->text = tok.text;
      body.push_back(std::move(node));
      next();
    } else if (tok.type == TokenType::kVarBegin) {
      auto node = std::make_unique<Stmt>();
      node->kind = StmtKind::kOutput;
      node->line = tok.line;
      next();
      EMBER_ASSIGN_OR_RETURN(ExprPtr e, parse_tuple());
      node->exprs.push_back(std::move(e));
      if (current().type != TokenType::kVarEnd)
        return fail("expected end of print statement, got " + describe_current());
      next();
      body.push_back(std::move(node));
    } else if (tok.type == TokenType::kBlockBegin) {
      next();
      if (current().type == TokenType::kName && contains(end_tokens, current().text)) return body;
      EMBER_ASSIGN_OR_RETURN(StmtPtr stmt, parse_statement());
      if (stmt) body.push_back(std::move(stmt));
      EMBER_RETURN_IF_ERROR(expect_block_end());
    } else {
      return fail("unexpected " + describe_current());
    }
  }
  return body;
}

Result<Body> Parser::parse_statements(const std::vector<std::string>& end_tokens, bool drop_needle) {
  skip_op(":");
  EMBER_RETURN_IF_ERROR(expect_block_end());
  EMBER_ASSIGN_OR_RETURN(Body body, subparse(end_tokens));
  if (current().type == TokenType::kEof) {
    std::string msg = "unexpected end of template, expected " + join_quoted(end_tokens);
    if (!tag_stack_.empty()) msg += fmt::format(" to close the '{}' tag", tag_stack_.back());
    return fail(msg);
  }
  if (drop_needle) next();
  return body;
}

Result<StmtPtr> Parser::parse_statement() {
  DepthGuard guard(*this);
  EMBER_RETURN_IF_ERROR(check_depth());
  if (current().type != TokenType::kName) return fail("tag name expected");
  const std::string tag = current().text;
  const int line = current().line;
  tag_stack_.push_back(tag);
  Result<StmtPtr> result = StmtPtr();
  if (tag == "for") result = parse_for(line);
  else if (tag == "if") result = parse_if(line);
  else if (tag == "set") result = parse_set(line);
  else if (tag == "macro") result = parse_macro(line);
  else if (tag == "call") result = parse_call_block(line);
  else if (tag == "with") result = parse_with(line);
  else if (tag == "filter") result = parse_filter_block(line);
  else if (tag == "break" || tag == "continue") {
    next();
    auto node = std::make_unique<Stmt>();
    node->kind = tag == "break" ? StmtKind::kBreak : StmtKind::kContinue;
    node->line = line;
    result = std::move(node);
  } else if (tag == "print") {
    next();
    auto node = std::make_unique<Stmt>();
    node->kind = StmtKind::kOutput;
    node->line = line;
    while (current().type != TokenType::kBlockEnd) {
      if (!node->exprs.empty()) EMBER_RETURN_IF_ERROR(expect_op(","));
      EMBER_ASSIGN_OR_RETURN(ExprPtr e, parse_expression());
      node->exprs.push_back(std::move(e));
    }
    result = std::move(node);
  } else if (tag == "generation") {
    // transformers' AssistantTracker tag: renders its body unchanged.
    next();
    auto node = std::make_unique<Stmt>();
    node->kind = StmtKind::kScope;
    node->line = line;
    EMBER_ASSIGN_OR_RETURN(node->body, parse_statements({"endgeneration"}, true));
    result = std::move(node);
  } else if (tag == "include" || tag == "extends" || tag == "import" || tag == "from" ||
             tag == "block" || tag == "autoescape") {
    result = fail(fmt::format("unsupported tag '{}' (ember renders single self-contained templates)", tag));
  } else {
    std::string msg = fmt::format("encountered unknown tag '{}'", tag);
    if (tag.rfind("end", 0) == 0 || tag == "else" || tag == "elif")
      msg += tag_stack_.size() > 1 ? fmt::format(" inside '{}'", tag_stack_[tag_stack_.size() - 2])
                                   : " outside of any block";
    result = fail(msg);
  }
  tag_stack_.pop_back();
  return result;
}

Result<StmtPtr> Parser::parse_for(int line) {
  next();
  auto node = std::make_unique<Stmt>();
  node->kind = StmtKind::kFor;
  node->line = line;
  EMBER_ASSIGN_OR_RETURN(node->target, parse_assign_target(true, false, {"in"}, false));
  if (!skip_name("in")) return fail("expected 'in', got " + describe_current());
  EMBER_ASSIGN_OR_RETURN(node->expr, parse_tuple(false, false, {"recursive"}));
  if (skip_name("if")) {
    EMBER_ASSIGN_OR_RETURN(node->cond, parse_expression());
  }
  if (is_name("recursive")) return fail("unsupported construct: recursive for loops");
  EMBER_ASSIGN_OR_RETURN(node->body, parse_statements({"endfor", "else"}, false));
  bool has_else = current().text == "else";
  next();
  if (has_else) {
    EMBER_ASSIGN_OR_RETURN(node->else_body, parse_statements({"endfor"}, true));
  }
  return StmtPtr(std::move(node));
}

Result<StmtPtr> Parser::parse_if(int line) {
  next();
  auto node = std::make_unique<Stmt>();
  node->kind = StmtKind::kIf;
  node->line = line;
  while (true) {
    IfBranch branch;
    EMBER_ASSIGN_OR_RETURN(branch.cond, parse_tuple(false, false));
    EMBER_ASSIGN_OR_RETURN(branch.body, parse_statements({"elif", "else", "endif"}, false));
    node->branches.push_back(std::move(branch));
    std::string which = current().text;
    next();
    if (which == "elif") continue;
    if (which == "else") {
      IfBranch else_branch;
      EMBER_ASSIGN_OR_RETURN(else_branch.body, parse_statements({"endif"}, true));
      node->branches.push_back(std::move(else_branch));
    }
    break;
  }
  return StmtPtr(std::move(node));
}

Result<StmtPtr> Parser::parse_set(int line) {
  next();
  auto node = std::make_unique<Stmt>();
  node->line = line;
  EMBER_ASSIGN_OR_RETURN(node->target, parse_assign_target(true, false, {}, true));
  if (skip_op("=")) {
    node->kind = StmtKind::kSet;
    EMBER_ASSIGN_OR_RETURN(node->expr, parse_tuple());
    return StmtPtr(std::move(node));
  }
  node->kind = StmtKind::kSetBlock;
  if (is_op("|")) {
    EMBER_ASSIGN_OR_RETURN(node->expr, parse_filter(nullptr, false));
  }
  EMBER_ASSIGN_OR_RETURN(node->body, parse_statements({"endset"}, true));
  return StmtPtr(std::move(node));
}

Status Parser::parse_signature(Stmt& node) {
  EMBER_RETURN_IF_ERROR(expect_op("("));
  while (!is_op(")")) {
    if (!node.params.empty()) EMBER_RETURN_IF_ERROR(expect_op(","));
    EMBER_ASSIGN_OR_RETURN(std::string param, expect_name());
    if (skip_op("=")) {
      EMBER_ASSIGN_OR_RETURN(ExprPtr def, parse_expression());
      node.defaults.push_back(std::move(def));
    } else if (!node.defaults.empty()) {
      return fail("non-default argument follows default argument");
    }
    node.params.push_back(std::move(param));
  }
  return expect_op(")");
}

Result<StmtPtr> Parser::parse_macro(int line) {
  next();
  auto node = std::make_unique<Stmt>();
  node->kind = StmtKind::kMacro;
  node->line = line;
  EMBER_ASSIGN_OR_RETURN(node->name, expect_name());
  EMBER_RETURN_IF_ERROR(parse_signature(*node));
  EMBER_ASSIGN_OR_RETURN(node->body, parse_statements({"endmacro"}, true));
  return StmtPtr(std::move(node));
}

Result<StmtPtr> Parser::parse_call_block(int line) {
  next();
  auto node = std::make_unique<Stmt>();
  node->kind = StmtKind::kCallBlock;
  node->line = line;
  if (is_op("(")) EMBER_RETURN_IF_ERROR(parse_signature(*node));
  EMBER_ASSIGN_OR_RETURN(node->expr, parse_expression());
  if (node->expr->kind != ExprKind::kCall) return fail_at(line, "expected call");
  EMBER_ASSIGN_OR_RETURN(node->body, parse_statements({"endcall"}, true));
  return StmtPtr(std::move(node));
}

Result<StmtPtr> Parser::parse_with(int line) {
  next();
  auto node = std::make_unique<Stmt>();
  node->kind = StmtKind::kWith;
  node->line = line;
  while (current().type != TokenType::kBlockEnd) {
    if (!node->targets.empty()) EMBER_RETURN_IF_ERROR(expect_op(","));
    EMBER_ASSIGN_OR_RETURN(Target t, parse_assign_target(true, false, {}, false));
    node->targets.push_back(std::move(t));
    EMBER_RETURN_IF_ERROR(expect_op("="));
    EMBER_ASSIGN_OR_RETURN(ExprPtr value, parse_expression());
    node->exprs.push_back(std::move(value));
  }
  EMBER_ASSIGN_OR_RETURN(node->body, parse_statements({"endwith"}, true));
  return StmtPtr(std::move(node));
}

Result<StmtPtr> Parser::parse_filter_block(int line) {
  next();
  auto node = std::make_unique<Stmt>();
  node->kind = StmtKind::kFilterBlock;
  node->line = line;
  EMBER_ASSIGN_OR_RETURN(node->expr, parse_filter(nullptr, true));
  EMBER_ASSIGN_OR_RETURN(node->body, parse_statements({"endfilter"}, true));
  return StmtPtr(std::move(node));
}

Result<Target> Parser::parse_assign_target(bool with_tuple, bool name_only,
                                           const std::vector<std::string>& extra_end,
                                           bool with_namespace) {
  if (name_only) {
    Target t;
    t.line = current().line;
    EMBER_ASSIGN_OR_RETURN(t.name, expect_name());
    return t;
  }
  ExprPtr e;
  if (with_tuple) {
    EMBER_ASSIGN_OR_RETURN(e, parse_tuple(true, true, extra_end));
  } else {
    EMBER_ASSIGN_OR_RETURN(e, parse_primary(with_namespace));
  }
  return expr_to_target(*e, with_namespace);
}

Result<Target> Parser::expr_to_target(const Expr& e, bool with_namespace) {
  Target t;
  t.line = e.line;
  switch (e.kind) {
    case ExprKind::kName:
      if (e.name == "true" || e.name == "false" || e.name == "none" || e.name == "True" ||
          e.name == "False" || e.name == "None")
        return fail_at(e.line, "can't assign to 'const'");
      t.kind = Target::Kind::kName;
      t.name = e.name;
      return t;
    case ExprKind::kNsRef:
      t.kind = Target::Kind::kNsAttr;
      t.name = e.name;
      t.attr = e.attr;
      return t;
    case ExprKind::kTuple:
      t.kind = Target::Kind::kTuple;
      for (const auto& child : e.children) {
        EMBER_ASSIGN_OR_RETURN(Target sub, expr_to_target(*child, with_namespace));
        t.items.push_back(std::move(sub));
      }
      return t;
    default:
      return fail_at(e.line, "can't assign to this expression");
  }
}

}  // namespace ember::chat
