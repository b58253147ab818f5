// Tree-walking evaluator for one render. Created per Render() call; owns all per-render state
// (variable frames, step counter, call depth), so concurrent renders of one template never share
// mutable state. Internal to strata_chat.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "tokenizer/chat/ast.h"
#include "tokenizer/chat/chat_template.h"
#include "tokenizer/chat/lexer.h"
#include "tokenizer/chat/value.h"

namespace strata::tokenizer::chat {

class Interpreter {
 public:
  Interpreter(const SourceMap& src, const ChatTemplateLimits& limits, StrftimeFn strftime_now);
  // Breaks reference cycles through namespaces (`{% set ns.self = ns %}`) so nothing leaks.
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // Renders `body` with the variables of `context` (a dict Value).
  Result<std::string> Render(const Body& body, const Value& context);

  // ---- used by builtins ----
  // Charges `n` steps against the budget.
  Status Charge(uint64_t n);
  // Charges for producing/copying `bytes` bytes and checks them against the output limit.
  Status ChargeBytes(size_t bytes);
  size_t max_bytes() const { return limits_.max_output_bytes; }
  // Calls a callable value (macro or native).
  Result<Value> CallValue(const Value& fn, CallArgs& args);
  const StrftimeFn& strftime_now() const { return strftime_; }
  // Registers a namespace created during this render (cleared when the render ends).
  void TrackNamespace(const Value& ns) { namespaces_.push_back(ns); }

  // Error for a template runtime problem (no position; call sites add it).
  static Status RuntimeError(std::string msg) { return Status::Internal(std::move(msg)); }

 private:
  enum class Jump : uint8_t { kNone, kBreak, kContinue };
  struct Frame {
    std::unordered_map<std::string, Value> vars;
    bool barrier = false;  // macro frame: lookups skip to the globals frame after it
  };

  Status Exec(const Body& body, std::string& out);
  Status ExecStmt(const Stmt& s, std::string& out);
  Status ExecFor(const Stmt& s, std::string& out);
  // Runs the body once per item (after the loop's `if` filter), with `loop` bound.
  Status ExecLoopBody(const Stmt& s, const ValueList& items, std::string& out);
  Status ExecCallBlock(const Stmt& s, std::string& out);
  Status ExecFilterBlock(const Stmt& s, std::string& out);
  Status ExecSet(const Stmt& s);
  Status Append(std::string& out, std::string_view text);

  Result<Value> Eval(const Expr& e);
  Result<Value> EvalInner(const Expr& e);
  Result<Value> EvalList(const Expr& e);
  Result<Value> EvalDict(const Expr& e);
  Result<Value> EvalSlice(const Expr& e);
  Result<Value> EvalBinary(const Expr& e);
  Result<Value> EvalCall(const Expr& e);
  Status EvalArgs(const Expr& e, size_t first, CallArgs* args);
  // Evaluates a filter's or test's subject (args[0]), then its arguments into *args.
  Result<Value> EvalSubjectAndArgs(const Expr& e, CallArgs* args);
  Result<Value> CallMacro(const MacroNode& m, CallArgs& args,
                          const std::shared_ptr<Callable>& caller);

  Value Lookup(const std::string& name) const;
  void Assign(const std::string& name, Value v);
  Status BindTargets(const std::vector<std::string>& targets, const Value& v, size_t pos);

  // Adds "chat template error at line L, column C: " to runtime errors that lack a position.
  Status AtPos(const Status& s, size_t pos) const;

  const SourceMap& src_;
  ChatTemplateLimits limits_;
  StrftimeFn strftime_;
  std::vector<Frame> frames_;
  uint64_t steps_ = 0;
  int call_depth_ = 0;
  int eval_depth_ = 0;
  Jump jump_ = Jump::kNone;
  Value placeholder_;  // body text of the innermost {% filter %} block
  std::vector<Value> namespaces_;
};

}  // namespace strata::tokenizer::chat
