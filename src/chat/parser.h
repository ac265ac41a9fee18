#pragma once
// Parser: tokens -> syntax tree, following jinja2's grammar and precedence.
// Constructs outside the supported subset fail here with the tag or operator and line.
#include <string_view>
#include <vector>

#include "chat/ast.h"
#include "chat/lexer.h"
#include "core/status.h"

namespace ember::chat {

Result<Body> parse_template(std::string_view source);

// Whether jinja2 has a filter / test of this name (unknown names fail at parse time,
// as in jinja2; known ones that ember lacks fail when they are reached).
bool jinja_has_filter(std::string_view name);
bool jinja_has_test(std::string_view name);

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}
  Result<Body> parse_all();

  // Expressions (parse_expr.cpp).
  Result<ExprPtr> parse_expression(bool with_condexpr = true);
  Result<ExprPtr> parse_tuple(bool simplified = false, bool with_condexpr = true,
                              const std::vector<std::string>& extra_end = {},
                              bool explicit_parentheses = false);

 private:
  // Statements (parser.cpp).
  Result<Body> subparse(const std::vector<std::string>& end_tokens);
  Result<Body> parse_statements(const std::vector<std::string>& end_tokens, bool drop_needle);
  Result<StmtPtr> parse_statement();
  Result<StmtPtr> parse_for(int line);
  Result<StmtPtr> parse_if(int line);
  Result<StmtPtr> parse_set(int line);
  Result<StmtPtr> parse_macro(int line);
  Result<StmtPtr> parse_call_block(int line);
  Result<StmtPtr> parse_with(int line);
  Result<StmtPtr> parse_filter_block(int line);
  Status parse_signature(Stmt& node);
  Result<Target> parse_assign_target(bool with_tuple, bool name_only,
                                     const std::vector<std::string>& extra_end, bool with_namespace);
  Result<Target> expr_to_target(const Expr& e, bool with_namespace);

  Result<ExprPtr> parse_condexpr();
  Result<ExprPtr> parse_or();
  Result<ExprPtr> parse_and();
  Result<ExprPtr> parse_not();
  Result<ExprPtr> parse_compare();
  Result<ExprPtr> parse_math1();
  Result<ExprPtr> parse_concat();
  Result<ExprPtr> parse_math2();
  Result<ExprPtr> parse_pow();
  Result<ExprPtr> parse_unary(bool with_filter);
  Result<ExprPtr> parse_primary(bool with_namespace = false);
  Result<ExprPtr> parse_list();
  Result<ExprPtr> parse_dict();
  Result<ExprPtr> parse_postfix(ExprPtr node);
  Result<ExprPtr> parse_filter_expr(ExprPtr node);
  Result<ExprPtr> parse_subscript(ExprPtr node);
  Result<ExprPtr> parse_subscribed();
  Status parse_call_args(Expr& call);
  Result<ExprPtr> parse_filter(ExprPtr node, bool start_inline);
  Result<ExprPtr> parse_test(ExprPtr node);

  // Token stream helpers.
  const Token& current() const { return tokens_[pos_]; }
  const Token& look() const { return tokens_[pos_ + 1 < tokens_.size() ? pos_ + 1 : pos_]; }
  void next() { if (pos_ + 1 < tokens_.size()) ++pos_; }
  bool is_op(std::string_view op) const;
  bool is_name(std::string_view name) const;
  bool skip_op(std::string_view op);
  bool skip_name(std::string_view name);
  Status expect_op(std::string_view op);
  Status expect_block_end();
  Result<std::string> expect_name();
  bool is_tuple_end(const std::vector<std::string>& extra_end) const;
  Status fail(const std::string& message) const;
  Status fail_at(int line, const std::string& message) const;
  std::string describe_current() const;
  // Bounds recursion on hostile input (deeply nested brackets or blocks).
  struct DepthGuard {
    explicit DepthGuard(Parser& p) : p_(p) { ++p_.depth_; }
    ~DepthGuard() { --p_.depth_; }
    Parser& p_;
  };
  Status check_depth() const;

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  std::vector<std::string> tag_stack_;
};

}  // namespace ember::chat
