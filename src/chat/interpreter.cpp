// Statement execution: output, control flow, assignments, macros and call blocks.
#include "chat/interpreter.h"

#include <fmt/format.h>

namespace ember::chat {

const Value* Frame::find(std::string_view name) const {
  for (const Frame* f = this; f; f = f->parent.get()) {
    for (const auto& [k, v] : f->vars)
      if (k == name) return &v;
  }
  return nullptr;
}

void Frame::set(const std::string& name, Value value) {
  for (auto& [k, v] : vars) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  vars.emplace_back(name, std::move(value));
}

namespace {

FramePtr child_frame(const FramePtr& parent) {
  auto f = std::make_shared<Frame>();
  f->parent = parent;
  return f;
}

bool expr_references(const Expr* e, std::string_view name);

bool body_references(const Body& body, std::string_view name);

bool stmt_references(const Stmt& s, std::string_view name) {
  if (expr_references(s.expr.get(), name) || expr_references(s.cond.get(), name)) return true;
  for (const auto& e : s.exprs)
    if (expr_references(e.get(), name)) return true;
  for (const auto& e : s.defaults)
    if (expr_references(e.get(), name)) return true;
  for (const auto& b : s.branches)
    if (expr_references(b.cond.get(), name) || body_references(b.body, name)) return true;
  // A nested macro has its own varargs/kwargs, so it does not count.
  if (s.kind == StmtKind::kMacro) return false;
  return body_references(s.body, name) || body_references(s.else_body, name);
}

bool body_references(const Body& body, std::string_view name) {
  for (const auto& s : body)
    if (stmt_references(*s, name)) return true;
  return false;
}

bool expr_references(const Expr* e, std::string_view name) {
  if (!e) return false;
  if (e->kind == ExprKind::kName && e->name == name) return true;
  for (const auto& c : e->children)
    if (expr_references(c.get(), name)) return true;
  for (const auto& k : e->kwargs)
    if (expr_references(k.value.get(), name)) return true;
  return expr_references(e->dyn_args.get(), name) || expr_references(e->dyn_kwargs.get(), name);
}

}  // namespace

Status Interpreter::charge(int64_t n) {
  steps_ += n;
  if (steps_ > limits_.max_steps)
    return Status::errorf("template exceeded its evaluation budget of {} steps", limits_.max_steps);
  return Status::ok();
}

Status Interpreter::check_size(size_t bytes) const {
  if (bytes > limits_.max_output_bytes)
    return Status::errorf("template built a value of {} bytes, over the limit of {}", bytes,
                          limits_.max_output_bytes);
  return Status::ok();
}

Status Interpreter::raise(const std::string& message) {
  raised_ = true;
  return Status::error(message);
}

Status Interpreter::append_output(std::string& out, std::string_view text) const {
  EMBER_RETURN_IF_ERROR(check_size(out.size() + text.size()));
  out.append(text);
  return Status::ok();
}

Result<std::string> Interpreter::render(const Body& body, FramePtr globals) {
  FramePtr root = child_frame(globals);
  std::string out;
  auto flow = exec_body(body, root, out);
  release_cycles();
  if (!flow.is_ok()) return flow.status();
  if (flow.value() != Flow::kNormal) return Status::error("'break' or 'continue' outside of a loop");
  return out;
}

void Interpreter::track(const Value& v) {
  if (v.is_namespace()) namespaces_.push_back(v.namespace_ptr());
  else if (v.is_loop()) loops_.push_back(v.loop_ptr());
}

void Interpreter::release_cycles() {
  // No value outlives a render (only text leaves it), so emptying every mutable object
  // and every scope that holds a macro frees whatever cycles the template built.
  for (auto& ns : namespaces_) ns->attrs.clear();
  for (auto& loop : loops_) {
    loop->changed_value.reset();
    loop->items.reset();
  }
  for (auto& frame : macro_frames_) {
    frame->vars.clear();
    frame->parent.reset();
  }
  namespaces_.clear();
  loops_.clear();
  macro_frames_.clear();
}

Result<Flow> Interpreter::exec_body(const Body& body, const FramePtr& frame, std::string& out) {
  for (const auto& stmt : body) {
    EMBER_ASSIGN_OR_RETURN(Flow flow, exec(*stmt, frame, out));
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Result<Flow> Interpreter::exec(const Stmt& stmt, const FramePtr& frame, std::string& out) {
  EMBER_RETURN_IF_ERROR(charge(1));
  auto at_line = [&](Status st) -> Status {
    if (st.is_ok() || raised_ || st.message().rfind("line ", 0) == 0) return st;
    return Status::errorf("line {}: {}", stmt.line, st.message());
  };
  switch (stmt.kind) {
    case StmtKind::kData:
      EMBER_RETURN_IF_ERROR(append_output(out, stmt.text));
      return Flow::kNormal;
    case StmtKind::kOutput: {
      for (const auto& e : stmt.exprs) {
        EMBER_ASSIGN_OR_RETURN(Value v, eval(*e, frame));
        auto text = py_str(v);
        if (!text.is_ok()) return at_line(text.status());
        EMBER_RETURN_IF_ERROR(at_line(append_output(out, text.value())));
      }
      return Flow::kNormal;
    }
    case StmtKind::kIf:
      for (const auto& branch : stmt.branches) {
        bool take = true;
        if (branch.cond) {
          EMBER_ASSIGN_OR_RETURN(Value c, eval(*branch.cond, frame));
          auto t = truthy(c);
          if (!t.is_ok()) return at_line(t.status());
          take = t.value();
        }
        if (take) return exec_body(branch.body, frame, out);
      }
      return Flow::kNormal;
    case StmtKind::kFor: return exec_for(stmt, frame, out);
    case StmtKind::kSet:
    case StmtKind::kSetBlock:
      EMBER_RETURN_IF_ERROR(at_line(exec_set(stmt, frame, out)));
      return Flow::kNormal;
    case StmtKind::kMacro:
      frame->set(stmt.name, make_macro(stmt, frame));
      return Flow::kNormal;
    case StmtKind::kCallBlock: {
      // The call's body becomes the `caller` macro of the called one.
      Value caller = make_macro(stmt, frame);
      const Expr& call = *stmt.expr;
      EMBER_ASSIGN_OR_RETURN(Value callee, eval(*call.children[0], frame));
      CallArgs args;
      EMBER_RETURN_IF_ERROR(eval_call_args(call, 1, frame, args));
      args.kwargs.emplace_back("caller", caller);
      auto result = this->call(callee, args, stmt.line);
      if (!result.is_ok()) return at_line(result.status());
      auto text = py_str(result.value());
      if (!text.is_ok()) return at_line(text.status());
      EMBER_RETURN_IF_ERROR(at_line(append_output(out, text.value())));
      return Flow::kNormal;
    }
    case StmtKind::kBreak: return Flow::kBreak;
    case StmtKind::kContinue: return Flow::kContinue;
    case StmtKind::kWith: {
      FramePtr inner = child_frame(frame);
      for (size_t i = 0; i < stmt.targets.size(); ++i) {
        // Values see the outer scope, as in jinja2.
        EMBER_ASSIGN_OR_RETURN(Value v, eval(*stmt.exprs[i], frame));
        EMBER_RETURN_IF_ERROR(at_line(assign(stmt.targets[i], v, inner)));
      }
      return exec_body(stmt.body, inner, out);
    }
    case StmtKind::kFilterBlock: {
      std::string captured;
      EMBER_ASSIGN_OR_RETURN(Flow flow, exec_body(stmt.body, child_frame(frame), captured));
      if (flow != Flow::kNormal) return flow;
      // Apply the filter chain, innermost first, to the captured text.
      std::vector<const Expr*> chain;
      for (const Expr* f = stmt.expr.get(); f; f = f->children[0].get()) chain.push_back(f);
      Value v(std::move(captured));
      for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
        CallArgs args;
        EMBER_RETURN_IF_ERROR(eval_call_args(**it, 1, frame, args));
        auto r = apply_filter((*it)->name, v, args);
        if (!r.is_ok()) return at_line(r.status());
        v = std::move(r).value();
      }
      auto text = py_str(v);
      if (!text.is_ok()) return at_line(text.status());
      EMBER_RETURN_IF_ERROR(at_line(append_output(out, text.value())));
      return Flow::kNormal;
    }
    case StmtKind::kScope: {
      // transformers renders {% generation %} bodies as a call block: a scope of its own,
      // and break/continue cannot cross it.
      EMBER_ASSIGN_OR_RETURN(Flow flow, exec_body(stmt.body, child_frame(frame), out));
      if (flow != Flow::kNormal) return at_line(Status::error("'break' or 'continue' inside {% generation %}"));
      return Flow::kNormal;
    }
  }
  return Flow::kNormal;
}

Result<Flow> Interpreter::exec_for(const Stmt& stmt, const FramePtr& frame, std::string& out) {
  auto at_line = [&](Status st) -> Status {
    if (st.is_ok() || raised_ || st.message().rfind("line ", 0) == 0) return st;
    return Status::errorf("line {}: {}", stmt.line, st.message());
  };
  EMBER_ASSIGN_OR_RETURN(Value iterable, eval(*stmt.expr, frame));
  auto items_or = iterate(iterable);
  if (!items_or.is_ok()) return at_line(items_or.status());
  std::vector<Value> items = std::move(items_or).value();
  if (stmt.cond) {
    // `for x in xs if cond`: the filter sees the target but not `loop`.
    std::vector<Value> kept;
    for (auto& item : items) {
      FramePtr probe = child_frame(frame);
      EMBER_RETURN_IF_ERROR(at_line(assign(stmt.target, item, probe)));
      EMBER_ASSIGN_OR_RETURN(Value c, eval(*stmt.cond, probe));
      auto t = truthy(c);
      if (!t.is_ok()) return at_line(t.status());
      if (t.value()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    if (stmt.else_body.empty()) return Flow::kNormal;
    EMBER_ASSIGN_OR_RETURN(Flow flow, exec_body(stmt.else_body, child_frame(frame), out));
    return flow;
  }
  auto loop = std::make_shared<LoopData>();
  loop->length = static_cast<int64_t>(items.size());
  SeqData seq;
  seq.items = std::move(items);
  loop->items = std::make_shared<const SeqData>(std::move(seq));
  // depth counts recursive loop() calls only, which ember does not support: always 1.
  loop->depth0 = 0;
  Value loop_value = Value::loop(loop);
  track(loop_value);
  for (size_t i = 0; i < loop->items->items.size(); ++i) {
    EMBER_RETURN_IF_ERROR(charge(1));
    loop->index0 = static_cast<int64_t>(i);
    FramePtr iter_frame = child_frame(frame);
    iter_frame->vars.emplace_back("loop", loop_value);
    EMBER_RETURN_IF_ERROR(at_line(assign(stmt.target, loop->items->items[i], iter_frame)));
    EMBER_ASSIGN_OR_RETURN(Flow flow, exec_body(stmt.body, iter_frame, out));
    if (flow == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

Status Interpreter::exec_set(const Stmt& stmt, const FramePtr& frame, std::string& out) {
  if (stmt.kind == StmtKind::kSet) {
    EMBER_ASSIGN_OR_RETURN(Value v, eval(*stmt.expr, frame));
    return assign(stmt.target, v, frame);
  }
  std::string captured;
  EMBER_ASSIGN_OR_RETURN(Flow flow, exec_body(stmt.body, frame, captured));
  if (flow != Flow::kNormal) return Status::error("'break' or 'continue' inside {% set %} block");
  Value v(std::move(captured));
  if (stmt.expr) {
    std::vector<const Expr*> chain;
    for (const Expr* f = stmt.expr.get(); f; f = f->children[0].get()) chain.push_back(f);
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      CallArgs args;
      EMBER_RETURN_IF_ERROR(eval_call_args(**it, 1, frame, args));
      EMBER_ASSIGN_OR_RETURN(v, apply_filter((*it)->name, v, args));
    }
  }
  return assign(stmt.target, v, frame);
}

Status Interpreter::assign(const Target& target, const Value& value, const FramePtr& frame) {
  switch (target.kind) {
    case Target::Kind::kName:
      frame->set(target.name, value);
      return Status::ok();
    case Target::Kind::kNsAttr: {
      const Value* ns = frame->find(target.name);
      if (!ns || !ns->is_namespace())
        return Status::error("TemplateRuntimeError: cannot assign attribute on non-namespace object");
      if (!target.attr.empty() && target.attr[0] == '_')
        return Status::errorf(
            "SecurityError: Chat templates cannot store underscore-prefixed attributes on a namespace, but got "
            "'{}'. Please rename the attribute.",
            target.attr);
      ns->as_namespace().set(target.attr, value);
      return Status::ok();
    }
    case Target::Kind::kTuple: {
      EMBER_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(value));
      if (items.size() != target.items.size()) {
        if (items.size() > target.items.size())
          return Status::errorf("ValueError: too many values to unpack (expected {})", target.items.size());
        return Status::errorf("ValueError: not enough values to unpack (expected {}, got {})",
                              target.items.size(), items.size());
      }
      for (size_t i = 0; i < items.size(); ++i) EMBER_RETURN_IF_ERROR(assign(target.items[i], items[i], frame));
      return Status::ok();
    }
  }
  return Status::ok();
}

Value Interpreter::make_macro(const Stmt& stmt, const FramePtr& frame) {
  const Stmt* macro = &stmt;
  std::string name = stmt.kind == StmtKind::kCallBlock ? "caller" : stmt.name;
  macro_frames_.push_back(frame);
  // The macro closes over its defining scope; names resolve when it runs, as in jinja2.
  return Value::callable(name, [macro, frame](Interpreter& interp, CallArgs& args) -> Result<Value> {
    return interp.call_macro(*macro, frame, args);
  });
}

Result<Value> Interpreter::call_macro(const Stmt& macro, const FramePtr& def_frame, CallArgs& args) {
  const bool is_caller = macro.kind == StmtKind::kCallBlock;
  const std::string name = is_caller ? "caller" : macro.name;
  if (call_depth_ >= limits_.max_call_depth)
    return Status::errorf("macro '{}' nested more than {} calls deep", name, limits_.max_call_depth);
  FramePtr frame = child_frame(def_frame);
  const size_t n_params = macro.params.size();
  const size_t first_default = n_params - macro.defaults.size();
  const bool wants_varargs = body_references(macro.body, "varargs");
  const bool wants_kwargs = body_references(macro.body, "kwargs");
  const bool wants_caller = body_references(macro.body, "caller");
  std::vector<bool> bound(n_params, false);
  for (size_t i = 0; i < args.args.size() && i < n_params; ++i) {
    frame->set(macro.params[i], args.args[i]);
    bound[i] = true;
  }
  std::vector<Value> extra_positional;
  for (size_t i = n_params; i < args.args.size(); ++i) extra_positional.push_back(args.args[i]);
  if (!extra_positional.empty() && !wants_varargs)
    return Status::errorf("TypeError: macro '{}' takes not more than {} argument(s)", name, n_params);
  DictData extra_kwargs;
  Value caller = Value::undefined("'caller' is undefined");
  for (auto& [key, value] : args.kwargs) {
    bool matched = false;
    for (size_t i = 0; i < n_params; ++i) {
      if (macro.params[i] == key) {
        if (bound[i]) return Status::errorf("TypeError: macro '{}' got multiple values for argument '{}'", name, key);
        frame->set(key, value);
        bound[i] = true;
        matched = true;
      }
    }
    if (matched) continue;
    if (key == "caller" && (wants_caller || !wants_kwargs)) {
      caller = value;
      continue;
    }
    if (!wants_kwargs) return Status::errorf("TypeError: macro '{}' takes no keyword argument '{}'", name, key);
    extra_kwargs.set(Value(key), value);
  }
  for (size_t i = 0; i < n_params; ++i) {
    if (bound[i]) continue;
    if (i >= first_default) {
      // Defaults are evaluated at call time, seeing the parameters bound so far.
      EMBER_ASSIGN_OR_RETURN(Value def, eval(*macro.defaults[i - first_default], frame));
      frame->set(macro.params[i], def);
    } else {
      frame->set(macro.params[i], Value::undefined(fmt::format("parameter '{}' was not provided", macro.params[i])));
    }
  }
  frame->set("varargs", Value::seq(std::move(extra_positional), SeqFlavor::kTuple));
  frame->set("kwargs", Value::dict(std::move(extra_kwargs)));
  if (!is_caller) frame->set("caller", caller);
  ++call_depth_;
  std::string out;
  auto flow = exec_body(macro.body, frame, out);
  --call_depth_;
  if (!flow.is_ok()) return flow.status();
  if (flow.value() != Flow::kNormal) return Status::error("'break' or 'continue' outside of a loop");
  return Value(std::move(out));
}

}  // namespace ember::chat
