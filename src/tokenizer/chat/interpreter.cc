#include "tokenizer/chat/interpreter.h"

#include <cmath>
#include <limits>

#include "tokenizer/chat/builtins.h"

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

Status UndefinedError(const Value& v) { return Interpreter::RuntimeError(v.UndefinedHint()); }

std::string OperandError(std::string_view op, const Value& a, const Value& b) {
  return "unsupported operand type(s) for " + std::string(op) + ": '" + std::string(a.TypeName()) +
         "' and '" + std::string(b.TypeName()) + "'";
}

bool CheckedMul(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }

// Python slice semantics over `n` elements; fills the selected indices.
Status SliceIndices(int64_t n, const Value& start, const Value& stop, const Value& step,
                    std::vector<int64_t>* out) {
  auto as_opt = [](const Value& v, const char* what, int64_t* dst, bool* present) -> Status {
    *present = false;
    if (v.is_undefined() || v.is_none()) return Status::Ok();
    if (!v.is_int() && !v.is_bool()) {
      return Interpreter::RuntimeError(std::string("slice ") + what + " must be an integer");
    }
    *dst = v.as_int();
    *present = true;
    return Status::Ok();
  };
  int64_t st = 1, a = 0, b = 0;
  bool has_st, has_a, has_b;
  RETURN_IF_ERROR(as_opt(step, "step", &st, &has_st));
  RETURN_IF_ERROR(as_opt(start, "start", &a, &has_a));
  RETURN_IF_ERROR(as_opt(stop, "stop", &b, &has_b));
  if (st == 0) return Interpreter::RuntimeError("slice step cannot be zero");
  auto clamp = [&](int64_t v, int64_t lo, int64_t hi) {
    if (v < 0) v += n;
    return v < lo ? lo : v > hi ? hi : v;
  };
  if (st > 0) {
    a = has_a ? clamp(a, 0, n) : 0;
    b = has_b ? clamp(b, 0, n) : n;
    for (int64_t i = a; i < b; i += st) out->push_back(i);
  } else {
    a = has_a ? clamp(a, -1, n - 1) : n - 1;
    b = has_b ? clamp(b, -1, n - 1) : -1;
    for (int64_t i = a; i > b; i += st) out->push_back(i);
  }
  return Status::Ok();
}

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
    std::vector<size_t> offs = CodePointOffsets(v.str());
    for (size_t i = 0; i + 1 < offs.size(); ++i) {
      items.push_back(Value::String(v.str().substr(offs[i], offs[i + 1] - offs[i])));
    }
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
    case Stmt::Kind::kCallBlock: {
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
    case Stmt::Kind::kFilterBlock: {
      std::string captured;
      RETURN_IF_ERROR(Exec(s.body, captured));
      Value saved = placeholder_;
      placeholder_ = Value::String(std::move(captured));
      auto r = Eval(*s.expr);
      placeholder_ = saved;
      if (!r.ok()) return r.status();
      return Append(out, ToPyStr(r.value()));
    }
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
  ValueList items;
  if (seq.is_list()) {
    items = seq.list();
  } else if (seq.is_dict()) {
    for (const auto& [k, v] : seq.dict().entries()) items.push_back(Value::String(k));
  } else if (seq.is_string()) {
    std::vector<size_t> offs = CodePointOffsets(seq.str());
    for (size_t i = 0; i + 1 < offs.size(); ++i) {
      items.push_back(Value::String(seq.str().substr(offs[i], offs[i + 1] - offs[i])));
    }
  } else if (!seq.is_undefined()) {
    return AtPos(RuntimeError("'" + std::string(seq.TypeName()) + "' object is not iterable"),
                 s.expr->pos);
  }
  RETURN_IF_ERROR(Charge(items.size()));
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
  const int64_t n = static_cast<int64_t>(items.size());
  // One loop object per loop, updated in place each iteration (as Jinja's LoopContext is).
  Value loop = Value::Dict();
  ValueDict& d = loop.dict();
  static constexpr const char* kKeys[] = {"index",  "index0",   "revindex", "revindex0",
                                          "first",  "last",     "length",   "depth",
                                          "depth0", "previtem", "nextitem", "cycle"};
  for (const char* k : kKeys) d.Set(k, Value());
  // Slots are overwritten in place below; record the deepest item once so depth() stays exact.
  for (const Value& item : items) {
    if (item.depth() > d.max_depth()) d.Set("previtem", item);
  }
  Value* slot[12];
  for (int k = 0; k < 12; ++k) slot[k] = d.Find(kKeys[k]);
  auto index = std::make_shared<int64_t>(0);
  auto cycle = std::make_shared<Callable>();
  cycle->name = "loop.cycle";
  cycle->native = [index](Interpreter&, CallArgs& args) -> Result<Value> {
    if (args.positional.empty()) return RuntimeError("loop.cycle() needs at least one value");
    return args.positional[static_cast<size_t>(*index) % args.positional.size()];
  };
  *slot[6] = Value::Int(n);
  *slot[7] = Value::Int(1);
  *slot[8] = Value::Int(0);
  *slot[11] = Value::Function(std::move(cycle));
  for (int64_t i = 0; i < n; ++i) {
    RETURN_IF_ERROR(Charge(1));
    RETURN_IF_ERROR(BindTargets(s.targets, items[i], s.pos));
    *index = i;
    *slot[0] = Value::Int(i + 1);
    *slot[1] = Value::Int(i);
    *slot[2] = Value::Int(n - i);
    *slot[3] = Value::Int(n - i - 1);
    *slot[4] = Value::Bool(i == 0);
    *slot[5] = Value::Bool(i == n - 1);
    *slot[9] = i > 0 ? items[i - 1] : Value::Undefined("there is no previous item");
    *slot[10] = i + 1 < n ? items[i + 1] : Value::Undefined("there is no next item");
    Assign("loop", loop);
    RETURN_IF_ERROR(Exec(s.body, out));
    if (jump_ == Jump::kBreak) {
      jump_ = Jump::kNone;
      break;
    }
    jump_ = Jump::kNone;
  }
  if (n == 0 && !s.else_body.empty()) {
    frames_.pop_back();
    Status st = Exec(s.else_body, out);
    frames_.emplace_back();  // balanced by PopFrame
    return st;
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
    case Expr::Kind::kList: {
      ValueList items;
      for (const ExprPtr& x : e.args) {
        ASSIGN_OR_RETURN(Value v, Eval(*x));
        items.push_back(std::move(v));
      }
      return Value::List(std::move(items));
    }
    case Expr::Kind::kDict: {
      Value d = Value::Dict();
      for (const auto& [kx, vx] : e.dict_items) {
        ASSIGN_OR_RETURN(Value k, Eval(*kx));
        ASSIGN_OR_RETURN(Value v, Eval(*vx));
        if (!k.is_string()) return RuntimeError("dict keys must be strings");
        d.dict().Set(k.str(), std::move(v));
      }
      return d;
    }
    case Expr::Kind::kGetAttr: {
      ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
      if (obj.is_undefined()) return UndefinedError(obj);
      if (obj.is_dict() || obj.is_namespace()) {
        const Value* v = obj.dict().Find(e.name);
        if (v != nullptr) return *v;
      }
      return Value::Undefined("'" + std::string(obj.TypeName()) + " object' has no attribute '" +
                              e.name + "'");
    }
    case Expr::Kind::kGetItem: {
      ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
      ASSIGN_OR_RETURN(Value key, Eval(*e.args[1]));
      if (obj.is_undefined()) return UndefinedError(obj);
      if ((obj.is_dict() || obj.is_namespace()) && key.is_string()) {
        const Value* v = obj.dict().Find(key.str());
        if (v != nullptr) return *v;
      } else if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
        int64_t idx = key.as_int();
        if (obj.is_list()) {
          int64_t n = static_cast<int64_t>(obj.list().size());
          if (idx < 0) idx += n;
          if (idx >= 0 && idx < n) return obj.list()[static_cast<size_t>(idx)];
        } else {
          std::vector<size_t> offs = CodePointOffsets(obj.str());
          int64_t n = static_cast<int64_t>(offs.size()) - 1;
          if (idx < 0) idx += n;
          if (idx >= 0 && idx < n) {
            size_t a = offs[static_cast<size_t>(idx)], b = offs[static_cast<size_t>(idx) + 1];
            return Value::String(obj.str().substr(a, b - a));
          }
        }
      }
      return Value::Undefined("'" + std::string(obj.TypeName()) + " object' has no item " +
                              ToPyRepr(key));
    }
    case Expr::Kind::kSlice: {
      ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
      Value parts[3];
      for (int k = 0; k < 3; ++k) {
        if (e.args[k + 1] != nullptr) {
          ASSIGN_OR_RETURN(parts[k], Eval(*e.args[k + 1]));
        }
      }
      if (obj.is_undefined()) return UndefinedError(obj);
      std::vector<int64_t> idx;
      if (obj.is_list()) {
        RETURN_IF_ERROR(Charge(obj.list().size()));
        RETURN_IF_ERROR(SliceIndices(static_cast<int64_t>(obj.list().size()), parts[0], parts[1],
                                     parts[2], &idx));
        ValueList out;
        out.reserve(idx.size());
        for (int64_t i : idx) out.push_back(obj.list()[static_cast<size_t>(i)]);
        return Value::List(std::move(out));
      }
      if (obj.is_string()) {
        RETURN_IF_ERROR(ChargeBytes(obj.str().size()));
        std::vector<size_t> offs = CodePointOffsets(obj.str());
        RETURN_IF_ERROR(SliceIndices(static_cast<int64_t>(offs.size()) - 1, parts[0], parts[1],
                                     parts[2], &idx));
        std::string out;
        for (int64_t i : idx) {
          size_t a = offs[static_cast<size_t>(i)], b = offs[static_cast<size_t>(i) + 1];
          out.append(obj.str(), a, b - a);
        }
        return Value::String(std::move(out));
      }
      return RuntimeError("'" + std::string(obj.TypeName()) + "' object is not subscriptable");
    }
    case Expr::Kind::kCall:
      return EvalCall(e);
    case Expr::Kind::kFilter: {
      ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
      CallArgs args;
      RETURN_IF_ERROR(EvalArgs(e, 1, &args));
      return ApplyFilter(*this, e.name, v, args);
    }
    case Expr::Kind::kTest: {
      ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
      CallArgs args;
      RETURN_IF_ERROR(EvalArgs(e, 1, &args));
      ASSIGN_OR_RETURN(bool r, ApplyTest(*this, e.name, v, args));
      return Value::Bool(r != e.negated);
    }
    case Expr::Kind::kNeg:
    case Expr::Kind::kPos: {
      ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
      if (v.is_undefined()) return UndefinedError(v);
      if (!v.is_number()) {
        return RuntimeError("bad operand type for unary " +
                            std::string(e.kind == Expr::Kind::kNeg ? "-" : "+") + ": '" +
                            std::string(v.TypeName()) + "'");
      }
      if (e.kind == Expr::Kind::kPos) return v.is_bool() ? Value::Int(v.as_int()) : v;
      if (v.is_float()) return Value::Float(-v.as_float());
      if (v.as_int() == std::numeric_limits<int64_t>::min())
        return RuntimeError("integer overflow");
      return Value::Int(-v.as_int());
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

Result<Value> Interpreter::EvalBinary(const Expr& e) {
  if (e.op == BinOp::kAnd || e.op == BinOp::kOr) {
    ASSIGN_OR_RETURN(Value a, Eval(*e.args[0]));
    bool t = a.Truthy();
    if ((e.op == BinOp::kAnd) ? !t : t) return a;
    return Eval(*e.args[1]);
  }
  ASSIGN_OR_RETURN(Value a, Eval(*e.args[0]));
  ASSIGN_OR_RETURN(Value b, Eval(*e.args[1]));
  switch (e.op) {
    case BinOp::kEq:
      return Value::Bool(Equals(a, b));
    case BinOp::kNe:
      return Value::Bool(!Equals(a, b));
    case BinOp::kLt:
    case BinOp::kLe:
    case BinOp::kGt:
    case BinOp::kGe: {
      if (a.is_undefined()) return UndefinedError(a);
      if (b.is_undefined()) return UndefinedError(b);
      ASSIGN_OR_RETURN(int c, Compare(a, b));
      bool r = e.op == BinOp::kLt   ? c < 0
               : e.op == BinOp::kLe ? c <= 0
               : e.op == BinOp::kGt ? c > 0
                                    : c >= 0;
      return Value::Bool(r);
    }
    case BinOp::kIn:
    case BinOp::kNotIn: {
      ASSIGN_OR_RETURN(bool r, Contains(b, a));
      return Value::Bool(r != (e.op == BinOp::kNotIn));
    }
    case BinOp::kConcat: {
      std::string s = ToPyStr(a);
      s += ToPyStr(b);
      RETURN_IF_ERROR(ChargeBytes(s.size()));
      return Value::String(std::move(s));
    }
    default:
      break;
  }
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  static constexpr std::string_view kOpNames[] = {"+", "-", "*", "/", "//", "%", "**"};
  std::string_view op_name = kOpNames[static_cast<int>(e.op)];
  if (e.op == BinOp::kAdd) {
    if (a.is_string() && b.is_string()) {
      RETURN_IF_ERROR(ChargeBytes(a.str().size() + b.str().size()));
      std::string s;
      s.reserve(a.str().size() + b.str().size());
      s += a.str();
      s += b.str();
      return Value::String(std::move(s));
    }
    if (a.is_list() && b.is_list()) {
      RETURN_IF_ERROR(Charge(a.list().size() + b.list().size()));
      ValueList items = a.list();
      items.insert(items.end(), b.list().begin(), b.list().end());
      return Value::List(std::move(items));
    }
  }
  if (e.op == BinOp::kMul && (a.is_string() || a.is_list() || b.is_string() || b.is_list())) {
    const Value& seq = (a.is_string() || a.is_list()) ? a : b;
    const Value& count = (a.is_string() || a.is_list()) ? b : a;
    if (!count.is_int() && !count.is_bool()) return RuntimeError(OperandError("*", a, b));
    int64_t n = std::max<int64_t>(0, count.as_int());
    size_t unit = seq.is_string() ? seq.str().size() : seq.list().size();
    int64_t total;
    if (!CheckedMul(static_cast<int64_t>(unit), n, &total) ||
        static_cast<uint64_t>(total) > limits_.max_output_bytes) {
      return Status::OutOfRange("chat template repetition result exceeds " +
                                std::to_string(limits_.max_output_bytes) + " elements/bytes");
    }
    RETURN_IF_ERROR(ChargeBytes(static_cast<size_t>(total)));
    if (seq.is_string()) {
      std::string s;
      for (int64_t i = 0; i < n; ++i) s += seq.str();
      return Value::String(std::move(s));
    }
    ValueList items;
    for (int64_t i = 0; i < n; ++i) items.insert(items.end(), seq.list().begin(), seq.list().end());
    return Value::List(std::move(items));
  }
  if (e.op == BinOp::kMod && a.is_string()) {
    CallArgs args;
    args.positional.push_back(b);
    return ApplyFilter(*this, "format", a, args);
  }
  if (!a.is_number() || !b.is_number()) return RuntimeError(OperandError(op_name, a, b));
  bool ints = !a.is_float() && !b.is_float();
  if (ints) {
    int64_t x = a.as_int(), y = b.as_int(), r = 0;
    switch (e.op) {
      case BinOp::kAdd:
        if (__builtin_add_overflow(x, y, &r)) return RuntimeError("integer overflow");
        return Value::Int(r);
      case BinOp::kSub:
        if (__builtin_sub_overflow(x, y, &r)) return RuntimeError("integer overflow");
        return Value::Int(r);
      case BinOp::kMul:
        if (!CheckedMul(x, y, &r)) return RuntimeError("integer overflow");
        return Value::Int(r);
      case BinOp::kFloorDiv:
      case BinOp::kMod: {
        if (y == 0) return RuntimeError("integer division or modulo by zero");
        if (x == std::numeric_limits<int64_t>::min() && y == -1) {
          return RuntimeError("integer overflow");
        }
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
          --q;
          m += y;
        }
        return Value::Int(e.op == BinOp::kFloorDiv ? q : m);
      }
      case BinOp::kPow: {
        if (y < 0) return Value::Float(std::pow(static_cast<double>(x), static_cast<double>(y)));
        if (x == 0) return Value::Int(y == 0 ? 1 : 0);
        if (x == 1) return Value::Int(1);
        if (x == -1) return Value::Int(y % 2 == 0 ? 1 : -1);
        int64_t acc = 1;
        for (int64_t i = 0; i < y; ++i) {  // |x| >= 2: overflows within 63 rounds
          if (!CheckedMul(acc, x, &acc)) return RuntimeError("integer overflow");
        }
        return Value::Int(acc);
      }
      default:
        break;
    }
  }
  double x = a.as_float(), y = b.as_float();
  switch (e.op) {
    case BinOp::kAdd:
      return Value::Float(x + y);
    case BinOp::kSub:
      return Value::Float(x - y);
    case BinOp::kMul:
      return Value::Float(x * y);
    case BinOp::kDiv:
      if (y == 0) return RuntimeError("division by zero");
      return Value::Float(x / y);
    case BinOp::kFloorDiv:
      if (y == 0) return RuntimeError("float floor division by zero");
      return Value::Float(std::floor(x / y));
    case BinOp::kMod: {
      if (y == 0) return RuntimeError("float modulo");
      double m = std::fmod(x, y);
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return Value::Float(m);
    }
    case BinOp::kPow:
      return Value::Float(std::pow(x, y));
    default:
      break;
  }
  return RuntimeError(OperandError(op_name, a, b));
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
