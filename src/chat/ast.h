#pragma once
// Syntax tree of a parsed template: the node set of jinja2's parser that chat
// templates use. Nodes are immutable once parsed; rendering walks them.
#include <memory>
#include <string>
#include <vector>

#include "chat/value.h"

namespace ember::chat {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind : uint8_t {
  kConst,     // constant
  kName,      // name
  kList,      // children: items
  kTuple,     // children: items
  kDict,      // children: key0, value0, key1, value1, ...
  kGetAttr,   // children[0].name
  kGetItem,   // children[0][children[1]]
  kSlice,     // children: start, stop, step (each may be null)
  kCall,      // children[0](children[1:], kwargs, *dyn_args, **dyn_kwargs)
  kFilter,    // children[0] | name(children[1:], kwargs); children[0] null in {% filter %}
  kTest,      // children[0] is name(children[1:], kwargs)
  kNeg, kPos, kNot,
  kBinary,    // name is the operator: + - * / // % **
  kCompare,   // children[0] ops[0] children[1] ops[1] children[2] ...
  kAnd, kOr,
  kCondExpr,  // children: test, value if true, value if false (may be null)
  kConcat,    // children joined with ~
  kNsRef,     // name.attr as an assignment target of {% set %}
};

struct Keyword {
  std::string name;
  ExprPtr value;
};

struct Expr {
  ExprKind kind = ExprKind::kConst;
  int line = 0;
  Value constant;
  std::string name;
  std::string attr;  // kNsRef
  std::vector<ExprPtr> children;
  std::vector<Keyword> kwargs;
  ExprPtr dyn_args, dyn_kwargs;
  std::vector<std::string> ops;
};

struct Target {
  enum class Kind : uint8_t { kName, kNsAttr, kTuple };
  Kind kind = Kind::kName;
  std::string name;  // variable, or the namespace variable for kNsAttr
  std::string attr;  // kNsAttr: the attribute
  std::vector<Target> items;
  int line = 0;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class StmtKind : uint8_t {
  kData,         // text
  kOutput,       // {{ exprs[0] }}
  kIf,           // branches; a branch with a null cond is the else
  kFor,          // for target in expr [if cond] body [else else_body]
  kSet,          // set target = expr
  kSetBlock,     // set target [| filter] body endset; expr is the filter (subject null) or null
  kMacro,        // macro name(params=defaults) body
  kCallBlock,    // call [(params)] expr body endcall
  kBreak,
  kContinue,
  kWith,         // with targets = exprs body
  kFilterBlock,  // filter expr body endfilter
  kScope,        // generation ... endgeneration: renders its body
};

struct IfBranch {
  ExprPtr cond;
  Body body;
};

struct Stmt {
  StmtKind kind = StmtKind::kData;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;
  Target target;
  std::vector<Target> targets;
  std::vector<ExprPtr> exprs;
  std::vector<IfBranch> branches;
  Body body, else_body;
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // aligned to the last params
};

}  // namespace ember::chat
