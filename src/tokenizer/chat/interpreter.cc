#include "tokenizer/chat/interpreter.h"

#include <cmath>
#include <limits>

#include "tokenizer/chat/builtins.h"
#include "tokenizer/chat/interpreter_ops.h"

namespace strata::tokenizer::chat {

namespace {

constexpr std::string_view kErrorPrefix = "chat template error at ";

// RAII depth counter for evaluator recursion.
class DepthGuard {
 public:
  explicit DepthGuard(int* d) : d_(d) { ++*d_; }
  ~DepthGuard() { --*d_; }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;

 private:
  int* d_;
};

// The `loop` variable of a for loop: one dict per loop, updated in place each iteration (as
// Jinja's LoopContext is).
class LoopVariable {
 public:
  explicit LoopVariable(const ValueList& items)
      : items_(items), n_(static_cast<int64_t>(items.size())) {
    ValueDict& d = loop_.dict();
    for (const char* k : kKeys) d.Set(k, Value());
    // Slots are overwritten in place below; record the deepest item once so depth() stays exact.
    for (const Value& item : items) {
      if (item.depth() > d.max_depth()) d.Set("previtem", item);
    }
    for (int k = 0; k < kNumSlots; ++k) slot_[k] = d.Find(kKeys[k]);
    auto cycle = std::make_shared<Callable>();
    cycle->name = "loop.cycle";
    cycle->native = [index = index_](Interpreter&, CallArgs& args) -> Result<Value> {
      if (args.positional.empty()) {
        return Interpreter::RuntimeError("loop.cycle() needs at least one value");
      }
      return args.positional[static_cast<size_t>(*index) % args.positional.size()];
    };
    *slot_[kLength] = Value::Int(n_);
    *slot_[kDepth] = Value::Int(1);
    *slot_[kDepth0] = Value::Int(0);
    *slot_[kCycle] = Value::Function(std::move(cycle));
  }

  // Sets the fields that change per iteration for item `pos`.
  void Enter(size_t pos) {
    const int64_t i = static_cast<int64_t>(pos);
    *index_ = i;
    *slot_[kIndex] = Value::Int(i + 1);
    *slot_[kIndex0] = Value::Int(i);
    *slot_[kRevIndex] = Value::Int(n_ - i);
    *slot_[kRevIndex0] = Value::Int(n_ - i - 1);
    *slot_[kFirst] = Value::Bool(i == 0);
    *slot_[kLast] = Value::Bool(i == n_ - 1);
    *slot_[kPrevItem] = i > 0 ? items_[pos - 1] : Value::Undefined("there is no previous item");
    *slot_[kNextItem] = i + 1 < n_ ? items_[pos + 1] : Value::Undefined("there is no next item");
  }

  const Value& value() const { return loop_; }

 private:
  enum Slot : uint8_t {
    kIndex,
    kIndex0,
    kRevIndex,
    kRevIndex0,
    kFirst,
    kLast,
    kLength,
    kDepth,
    kDepth0,
    kPrevItem,
    kNextItem,
    kCycle,
    kNumSlots,
  };
  // In Slot order.
  static constexpr const char* kKeys[kNumSlots] = {"index",  "index0",   "revindex", "revindex0",
                                                   "first",  "last",     "length",   "depth",
                                                   "depth0", "previtem", "nextitem", "cycle"};

  const ValueList& items_;
  const int64_t n_;
  Value loop_ = Value::Dict();
  Value* slot_[kNumSlots];
  std::shared_ptr<int64_t> index_ = std::make_shared<int64_t>(0);
};

}  // namespace

Interpreter::Interpreter(const SourceMap& src, const ChatTemplateLimits& limits,
                         StrftimeFn strftime_now)
    : src_(src), limits_(limits), strftime_(std::move(strftime_now)) {}

Interpreter::~Interpreter() {
  frames_.clear();
  placeholder_ = Value();
  for (Value& ns : namespaces_) ns.dict().Clear();
}

Status Interpreter::Charge(uint64_t n) {
  steps_ += n;
  if (steps_ > limits_.max_steps) {
    return Status::OutOfRange("chat template exceeded its budget of " +
                              std::to_string(limits_.max_steps) + " steps");
  }
  return Status::Ok();
}

Status Interpreter::ChargeBytes(size_t bytes) {
  if (bytes > limits_.max_output_bytes) {
    return Status::OutOfRange("chat template produced a string over " +
                              std::to_string(limits_.max_output_bytes) + " bytes");
  }
  return Charge(bytes / 256);
}

Status Interpreter::AtPos(const Status& s, size_t pos) const {
  if (s.ok() || s.code() != StatusCode::kInternal) return s;
  if (s.message().rfind(kErrorPrefix, 0) == 0) return s;
  return Status::Internal(std::string(kErrorPrefix) + src_.Describe(pos) + ": " + s.message());
}

Result<std::string> Interpreter::Render(const Body& body, const Value& context) {
  frames_.clear();
  frames_.emplace_back();
  for (const auto& [k, v] : context.dict().entries()) frames_[0].vars[k] = v;
  std::string out;
  RETURN_IF_ERROR(Exec(body, out));
  return out;
}

Value Interpreter::Lookup(const std::string& name) const {
  for (size_t i = frames_.size(); i-- > 0;) {
    auto it = frames_[i].vars.find(name);
    if (it != frames_[i].vars.end()) return it->second;
    if (frames_[i].barrier && i > 0) {
      auto g = frames_[0].vars.find(name);
      if (g != frames_[0].vars.end()) return g->second;
      break;
    }
  }
  if (name == "strftime_now") {
    auto c = std::make_shared<Callable>();
    c->name = name;
    c->native = [](Interpreter& in, CallArgs& args) -> Result<Value> {
      if (args.positional.size() != 1 || !args.positional[0].is_string()) {
        return RuntimeError("strftime_now(format) takes one string");
      }
      if (!in.strftime_now()) return RuntimeError("strftime_now is not available");
      ASSIGN_OR_RETURN(std::string s, in.strftime_now()(args.positional[0].str()));
      return Value::String(std::move(s));
    };
    return Value::Function(std::move(c));
  }
  Value g = MakeGlobal(name);
  if (!g.is_undefined()) return g;
  return Value::Undefined("'" + name + "' is undefined");
}

void Interpreter::Assign(const std::string& name, Value v) {
  frames_.back().vars[name] = std::move(v);
}

Status Interpreter::BindTargets(const std::vector<std::string>& targets, const Value& v,
                                size_t pos) {
  if (targets.size() == 1) {
    Assign(targets[0], v);
    return Status::Ok();
  }
  ValueList items;
  if (v.is_list()) {
    items = v.list();
  } else if (v.is_string()) {
    items = StringChars(v.str());
  } else {
    return AtPos(RuntimeError("cannot unpack a " + std::string(v.TypeName())), pos);
  }
  if (items.size() != targets.size()) {
    return AtPos(RuntimeError("expected " + std::to_string(targets.size()) +
                              " values to unpack, got " + std::to_string(items.size())),
                 pos);
  }
  for (size_t i = 0; i < targets.size(); ++i) Assign(targets[i], items[i]);
  return Status::Ok();
}

Status Interpreter::Append(std::string& out, std::string_view text) {
  if (out.size() + text.size() > limits_.max_output_bytes) {
    return Status::OutOfRange("chat template output exceeds " +
                              std::to_string(limits_.max_output_bytes) + " bytes");
  }
  out.append(text);
  return Charge(text.size() / 256);
}

Status Interpreter::Exec(const Body& body, std::string& out) {
  for (const StmtPtr& s : body) {
    RETURN_IF_ERROR(ExecStmt(*s, out));
    if (jump_ != Jump::kNone) return Status::Ok();
  }
  return Status::Ok();
}

Status Interpreter::ExecStmt(const Stmt& s, std::string& out) {
  DepthGuard guard(&eval_depth_);
  if (eval_depth_ > limits_.max_nesting * 4) {
    return Status::OutOfRange("chat template recursion deeper than " +
                              std::to_string(limits_.max_nesting * 4) + " frames");
  }
  RETURN_IF_ERROR(Charge(1));
  switch (s.kind) {
    case Stmt::Kind::kText:
      return Append(out, s.text);
    case Stmt::Kind::kOutput: {
      ASSIGN_OR_RETURN(Value v, Eval(*s.expr));
      if (v.is_string()) return Append(out, v.str());
      return Append(out, ToPyStr(v));
    }
    case Stmt::Kind::kIf:
      for (const auto& [cond, body] : s.branches) {
        if (cond != nullptr) {
          ASSIGN_OR_RETURN(Value c, Eval(*cond));
          if (!c.Truthy()) continue;
        }
        return Exec(body, out);
      }
      return Status::Ok();
    case Stmt::Kind::kFor:
      return ExecFor(s, out);
    case Stmt::Kind::kSet:
      return ExecSet(s);
    case Stmt::Kind::kSetBlock: {
      std::string captured;
      RETURN_IF_ERROR(Exec(s.body, captured));
      Assign(s.targets[0], Value::String(std::move(captured)));
      return Status::Ok();
    }
    case Stmt::Kind::kMacro: {
      auto c = std::make_shared<Callable>();
      c->name = s.macro->name;
      c->macro = s.macro.get();
      Assign(s.macro->name, Value::Function(std::move(c)));
      return Status::Ok();
    }
    case Stmt::Kind::kCallBlock:
      return ExecCallBlock(s, out);
    case Stmt::Kind::kFilterBlock:
      return ExecFilterBlock(s, out);
    case Stmt::Kind::kBreak:
      jump_ = Jump::kBreak;
      return Status::Ok();
    case Stmt::Kind::kContinue:
      jump_ = Jump::kContinue;
      return Status::Ok();
    case Stmt::Kind::kScope:
      return Exec(s.body, out);
  }
  return Status::Ok();
}

Status Interpreter::ExecCallBlock(const Stmt& s, std::string& out) {
  auto caller = std::make_shared<Callable>();
  caller->name = "caller";
  caller->macro = s.macro.get();
  const Expr& call = *s.expr;
  ASSIGN_OR_RETURN(Value fn, Eval(*call.args[0]));
  if (!fn.is_callable() || fn.callable()->macro == nullptr) {
    return AtPos(RuntimeError("{% call %} target is not a macro"), s.pos);
  }
  CallArgs args;
  RETURN_IF_ERROR(EvalArgs(call, 1, &args));
  ASSIGN_OR_RETURN(Value r, CallMacro(*fn.callable()->macro, args, caller));
  return Append(out, r.str());
}

Status Interpreter::ExecFilterBlock(const Stmt& s, std::string& out) {
  std::string captured;
  RETURN_IF_ERROR(Exec(s.body, captured));
  Value saved = placeholder_;
  placeholder_ = Value::String(std::move(captured));
  auto r = Eval(*s.expr);
  placeholder_ = saved;
  if (!r.ok()) return r.status();
  return Append(out, ToPyStr(r.value()));
}

Status Interpreter::ExecSet(const Stmt& s) {
  ASSIGN_OR_RETURN(Value v, Eval(*s.expr));
  if (!s.attr.empty()) {
    Value target = Lookup(s.targets[0]);
    if (!target.is_namespace()) {
      return AtPos(
          RuntimeError("cannot assign attribute on non-namespace object '" + s.targets[0] + "'"),
          s.pos);
    }
    target.dict().Set(s.attr, std::move(v));
    return Status::Ok();
  }
  return BindTargets(s.targets, v, s.pos);
}

Status Interpreter::ExecFor(const Stmt& s, std::string& out) {
  ASSIGN_OR_RETURN(Value seq, Eval(*s.expr));
  Result<ValueList> iterated = Iterate(*this, seq);
  if (!iterated.ok()) return AtPos(iterated.status(), s.expr->pos);
  ValueList items = std::move(iterated).value();
  frames_.emplace_back();
  struct PopFrame {
    std::vector<Frame>* f;
    ~PopFrame() { f->pop_back(); }
  } pop{&frames_};
  if (s.filter != nullptr) {
    ValueList kept;
    for (const Value& item : items) {
      RETURN_IF_ERROR(BindTargets(s.targets, item, s.pos));
      ASSIGN_OR_RETURN(Value keep, Eval(*s.filter));
      if (keep.Truthy()) kept.push_back(item);
    }
    items = std::move(kept);
  }
  RETURN_IF_ERROR(ExecLoopBody(s, items, out));
  if (items.empty() && !s.else_body.empty()) {
    frames_.pop_back();
    Status st = Exec(s.else_body, out);
    frames_.emplace_back();  // balanced by PopFrame
    return st;
  }
  return Status::Ok();
}

Status Interpreter::ExecLoopBody(const Stmt& s, const ValueList& items, std::string& out) {
  LoopVariable loop(items);
  for (size_t i = 0; i < items.size(); ++i) {
    RETURN_IF_ERROR(Charge(1));
    RETURN_IF_ERROR(BindTargets(s.targets, items[i], s.pos));
    loop.Enter(i);
    Assign("loop", loop.value());
    RETURN_IF_ERROR(Exec(s.body, out));
    if (jump_ == Jump::kBreak) {
      jump_ = Jump::kNone;
      break;
    }
    jump_ = Jump::kNone;
  }
  return Status::Ok();
}

Result<Value> Interpreter::Eval(const Expr& e) {
  DepthGuard guard(&eval_depth_);
  if (eval_depth_ > limits_.max_nesting * 4) {
    return Status::OutOfRange("chat template recursion deeper than " +
                              std::to_string(limits_.max_nesting * 4) + " frames");
  }
  RETURN_IF_ERROR(Charge(1));
  auto r = EvalInner(e);
  if (!r.ok()) return AtPos(r.status(), e.pos);
  if (r->depth() > kMaxValueDepth) {
    return Status::OutOfRange("chat template built a value nested deeper than " +
                              std::to_string(kMaxValueDepth) + " levels");
  }
  return r;
}

Status Interpreter::EvalArgs(const Expr& e, size_t first, CallArgs* args) {
  for (size_t i = first; i < e.args.size(); ++i) {
    ASSIGN_OR_RETURN(Value v, Eval(*e.args[i]));
    args->positional.push_back(std::move(v));
  }
  for (const auto& [k, x] : e.kwargs) {
    ASSIGN_OR_RETURN(Value v, Eval(*x));
    args->keyword.emplace_back(k, std::move(v));
  }
  return Status::Ok();
}

Result<Value> Interpreter::EvalInner(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return e.literal;
    case Expr::Kind::kName:
      return Lookup(e.name);
    case Expr::Kind::kPlaceholder:
      return placeholder_;
    case Expr::Kind::kList:
      return EvalList(e);
    case Expr::Kind::kDict:
      return EvalDict(e);
    case Expr::Kind::kGetAttr: {
      ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
      return GetAttrOf(obj, e.name);
    }
    case Expr::Kind::kGetItem: {
      ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
      ASSIGN_OR_RETURN(Value key, Eval(*e.args[1]));
      return GetItemOf(obj, key);
    }
    case Expr::Kind::kSlice:
      return EvalSlice(e);
    case Expr::Kind::kCall:
      return EvalCall(e);
    case Expr::Kind::kFilter: {
      CallArgs args;
      ASSIGN_OR_RETURN(Value v, EvalSubjectAndArgs(e, &args));
      return ApplyFilter(*this, e.name, v, args);
    }
    case Expr::Kind::kTest: {
      CallArgs args;
      ASSIGN_OR_RETURN(Value v, EvalSubjectAndArgs(e, &args));
      ASSIGN_OR_RETURN(bool r, ApplyTest(*this, e.name, v, args));
      return Value::Bool(r != e.negated);
    }
    case Expr::Kind::kNeg:
    case Expr::Kind::kPos: {
      ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
      return ApplyUnary(e.kind == Expr::Kind::kNeg, v);
    }
    case Expr::Kind::kNot: {
      ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
      return Value::Bool(!v.Truthy());
    }
    case Expr::Kind::kBinary:
      return EvalBinary(e);
    case Expr::Kind::kCond: {
      ASSIGN_OR_RETURN(Value c, Eval(*e.args[1]));
      if (c.Truthy()) return Eval(*e.args[0]);
      if (e.args[2] == nullptr)
        return Value::Undefined("conditional expression had no else branch");
      return Eval(*e.args[2]);
    }
  }
  return RuntimeError("unknown expression");
}

Result<Value> Interpreter::EvalSubjectAndArgs(const Expr& e, CallArgs* args) {
  ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
  RETURN_IF_ERROR(EvalArgs(e, 1, args));
  return v;
}

Result<Value> Interpreter::EvalList(const Expr& e) {
  ValueList items;
  for (const ExprPtr& x : e.args) {
    ASSIGN_OR_RETURN(Value v, Eval(*x));
    items.push_back(std::move(v));
  }
  return Value::List(std::move(items));
}

Result<Value> Interpreter::EvalDict(const Expr& e) {
  Value d = Value::Dict();
  for (const auto& [kx, vx] : e.dict_items) {
    ASSIGN_OR_RETURN(Value k, Eval(*kx));
    ASSIGN_OR_RETURN(Value v, Eval(*vx));
    if (!k.is_string()) return RuntimeError("dict keys must be strings");
    d.dict().Set(k.str(), std::move(v));
  }
  return d;
}

Result<Value> Interpreter::EvalSlice(const Expr& e) {
  ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
  Value parts[3];
  for (int k = 0; k < 3; ++k) {
    if (e.args[k + 1] != nullptr) {
      ASSIGN_OR_RETURN(parts[k], Eval(*e.args[k + 1]));
    }
  }
  return SliceOf(*this, obj, parts);
}

Result<Value> Interpreter::EvalBinary(const Expr& e) {
  ASSIGN_OR_RETURN(Value a, Eval(*e.args[0]));
  if (e.op == BinOp::kAnd || e.op == BinOp::kOr) {  // short-circuit: b only when it decides
    if (a.Truthy() != (e.op == BinOp::kAnd)) return a;
    return Eval(*e.args[1]);
  }
  ASSIGN_OR_RETURN(Value b, Eval(*e.args[1]));
  return ApplyBinary(*this, e.op, a, b);
}

Result<Value> Interpreter::EvalCall(const Expr& e) {
  const Expr& callee = *e.args[0];
  CallArgs args;
  if (callee.kind == Expr::Kind::kGetAttr) {
    ASSIGN_OR_RETURN(Value obj, Eval(*callee.args[0]));
    if (obj.is_undefined()) return UndefinedError(obj);
    RETURN_IF_ERROR(EvalArgs(e, 1, &args));
    if (obj.is_string() || obj.is_list() || obj.is_dict()) {
      bool found = false;
      auto r = CallMethod(*this, obj, callee.name, args, &found);
      if (found) return r;
    }
    if (obj.is_dict() || obj.is_namespace()) {
      const Value* f = obj.dict().Find(callee.name);
      if (f != nullptr && f->is_callable()) return CallValue(*f, args);
    }
    return RuntimeError("'" + std::string(obj.TypeName()) + "' object has no method '" +
                        callee.name + "'");
  }
  ASSIGN_OR_RETURN(Value fn, Eval(callee));
  if (fn.is_undefined()) return UndefinedError(fn);
  RETURN_IF_ERROR(EvalArgs(e, 1, &args));
  return CallValue(fn, args);
}

Result<Value> Interpreter::CallValue(const Value& fn, CallArgs& args) {
  if (!fn.is_callable()) {
    return RuntimeError("'" + std::string(fn.TypeName()) + "' object is not callable");
  }
  const Callable& c = *fn.callable();
  if (c.macro != nullptr) return CallMacro(*c.macro, args, c.caller);
  return c.native(*this, args);
}

Result<Value> Interpreter::CallMacro(const MacroNode& m, CallArgs& args,
                                     const std::shared_ptr<Callable>& caller) {
  if (call_depth_ >= limits_.max_call_depth) {
    return Status::OutOfRange("chat template macro calls nested deeper than " +
                              std::to_string(limits_.max_call_depth));
  }
  ++call_depth_;
  frames_.emplace_back();
  frames_.back().barrier = true;
  struct Restore {
    Interpreter* in;
    Jump saved;
    ~Restore() {
      in->frames_.pop_back();
      --in->call_depth_;
      in->jump_ = saved;
    }
  } restore{this, jump_};
  jump_ = Jump::kNone;
  size_t n = m.params.size();
  std::vector<bool> bound(n, false);
  ValueList varargs;
  for (size_t i = 0; i < args.positional.size(); ++i) {
    if (i < n) {
      Assign(m.params[i], args.positional[i]);
      bound[i] = true;
    } else {
      varargs.push_back(args.positional[i]);
    }
  }
  Value kwargs = Value::Dict();
  for (auto& [k, v] : args.keyword) {
    bool matched = false;
    for (size_t i = 0; i < n; ++i) {
      if (m.params[i] == k) {
        if (bound[i]) {
          return RuntimeError("macro '" + m.name + "' got multiple values for argument '" + k +
                              "'");
        }
        Assign(k, v);
        bound[i] = true;
        matched = true;
        break;
      }
    }
    if (!matched) kwargs.dict().Set(k, v);
  }
  for (size_t i = 0; i < n; ++i) {
    if (bound[i]) continue;
    if (m.defaults[i] != nullptr) {
      ASSIGN_OR_RETURN(Value d, Eval(*m.defaults[i]));
      Assign(m.params[i], std::move(d));
    } else {
      Assign(m.params[i], Value::Undefined("parameter '" + m.params[i] + "' was not provided"));
    }
  }
  Assign("varargs", Value::List(std::move(varargs)));
  Assign("kwargs", kwargs);
  if (caller != nullptr) Assign("caller", Value::Function(caller));
  std::string out;
  RETURN_IF_ERROR(Exec(m.body, out));
  return Value::String(std::move(out));
}

}  // namespace strata::tokenizer::chat
