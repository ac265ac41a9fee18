#pragma once
// Interpreter: renders a parsed template against a context, with jinja2's scoping
// (a fresh scope per loop iteration, macros closing over their defining scope) and
// hard limits so that hostile templates cannot hang or exhaust memory.
#include <ctime>
#include <memory>
#include <optional>
#include <string>

#include "chat/ast.h"
#include "chat/value.h"

namespace ember::chat {

struct RenderLimits {
  size_t max_output_bytes = 64u << 20;  // any single rendered text or built string/list
  int64_t max_steps = 50'000'000;       // evaluation steps (a hang guard)
  int max_call_depth = 100;             // nested macro calls
};

// A variable scope. Lookups walk parents; assignments stay in the scope they happen in.
struct Frame {
  std::vector<std::pair<std::string, Value>> vars;
  std::shared_ptr<Frame> parent;
  const Value* find(std::string_view name) const;
  void set(const std::string& name, Value value);
};
using FramePtr = std::shared_ptr<Frame>;

enum class Flow : uint8_t { kNormal, kBreak, kContinue };

class Interpreter {
 public:
  Interpreter(RenderLimits limits, std::time_t now) : limits_(limits), now_(now) {}

  // Renders `body` in a new scope above `globals`.
  Result<std::string> render(const Body& body, FramePtr globals);

  // Services for filters, tests, methods and builtins.
  Result<Value> call(const Value& callee, CallArgs& args, int line);
  Result<Value> apply_filter(const std::string& name, const Value& subject, CallArgs& args);
  Result<bool> apply_test(const std::string& name, const Value& subject, CallArgs& args);
  // environment.getattr / getitem of jinja2's sandbox.
  Result<Value> get_attr(const Value& obj, const std::string& name);
  Result<Value> get_item(const Value& obj, const Value& key);
  // Charges `n` evaluation steps against the budget.
  Status charge(int64_t n);
  // Fails when a value about to be built would exceed the size limit.
  Status check_size(size_t bytes) const;
  std::time_t now() const { return now_; }
  // raise_exception() marks its error so that the message reaches the caller unchanged.
  Status raise(const std::string& message);
  bool raised() const { return raised_; }
  // Remembers a namespace or loop object so that reference cycles through it (a
  // namespace holding itself, a macro stored in its own scope) are broken after rendering.
  void track(const Value& v);

 private:
  Result<Flow> exec_body(const Body& body, const FramePtr& frame, std::string& out);
  Result<Flow> exec(const Stmt& stmt, const FramePtr& frame, std::string& out);
  Result<Flow> exec_for(const Stmt& stmt, const FramePtr& frame, std::string& out);
  Status exec_set(const Stmt& stmt, const FramePtr& frame, std::string& out);
  Status assign(const Target& target, const Value& value, const FramePtr& frame);
  // A macro (or the body of a {% call %} block, as `caller`) closing over `frame`.
  Value make_macro(const Stmt& stmt, const FramePtr& frame);
  Result<Value> call_macro(const Stmt& macro, const FramePtr& def_frame, CallArgs& args);
  Status append_output(std::string& out, std::string_view text) const;

  // Expressions (eval_expr.cpp).
 public:
  Result<Value> eval(const Expr& expr, const FramePtr& frame);
 private:
  Result<Value> eval_inner(const Expr& expr, const FramePtr& frame);
  Result<Value> eval_compare(const Expr& expr, const FramePtr& frame);
  Result<Value> eval_slice(const Value& obj, const Expr& slice, const FramePtr& frame);
  Status eval_call_args(const Expr& expr, size_t first_arg, const FramePtr& frame, CallArgs& args);
  Value lookup(const std::string& name, const FramePtr& frame) const;

  RenderLimits limits_;
  std::time_t now_;
  void release_cycles();

  std::vector<std::shared_ptr<NamespaceData>> namespaces_;
  std::vector<std::shared_ptr<LoopData>> loops_;
  std::vector<FramePtr> macro_frames_;
  int64_t steps_ = 0;
  int call_depth_ = 0;
  bool raised_ = false;
};

// Binary operators with Python semantics (operators.cpp).
Result<Value> binary_op(const std::string& op, const Value& a, const Value& b, const Interpreter& interp);
Result<Value> unary_op(ExprKind kind, const Value& a);
Result<bool> contains(const Value& container, const Value& item);
// Python's printf-style "fmt % args".
Result<std::string> percent_format(const std::string& fmt, const Value& args);
// Python's "...".format(*args, **kwargs).
Result<std::string> brace_format(const std::string& fmt, const CallArgs& args);
// Python slicing of str, list, tuple and range.
Result<Value> slice_value(const Value& obj, const Value& start, const Value& stop, const Value& step);

// Filters, tests, methods and global functions (filters.cpp, jinja_tests.cpp, methods.cpp,
// builtins.cpp). A filter or test that jinja2 has and ember lacks is reported by name.
Result<Value> run_filter(Interpreter& interp, const std::string& name, const Value& subject, CallArgs& args);
Result<bool> run_test(Interpreter& interp, const std::string& name, const Value& subject, CallArgs& args);
// Attribute of a str / dict / list / loop / number: bound methods and loop fields.
// Returns nullopt when the type has no attribute of that name.
std::optional<Value> builtin_attribute(const Value& obj, const std::string& name);
// The global names every template sees (range, dict, namespace, raise_exception, ...).
void add_builtin_globals(Frame& frame);

// Argument binding for builtins: positional parameters by position or keyword.
class ArgReader {
 public:
  ArgReader(std::string func, CallArgs& args) : func_(std::move(func)), args_(args) {}
  // The next positional parameter `name`, or `def` when it was not passed.
  Value get(const std::string& name, Value def = Value::undefined());
  bool has(const std::string& name) const;
  // Fails when arguments were left over (as Python's TypeError would).
  Status finish() const;
  std::vector<Value> rest();  // all remaining positional arguments (for *args)

 private:
  std::string func_;
  CallArgs& args_;
  size_t next_positional_ = 0;
  std::vector<std::string> used_kwargs_;
};

}  // namespace ember::chat
