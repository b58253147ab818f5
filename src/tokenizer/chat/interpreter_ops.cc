#include "tokenizer/chat/interpreter_ops.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <string_view>
#include <vector>

#include "tokenizer/chat/builtins.h"
#include "tokenizer/chat/interpreter.h"

namespace strata::tokenizer::chat {

namespace {

Status Err(std::string msg) { return Interpreter::RuntimeError(std::move(msg)); }

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

// ---- binary operators: one small function each, dispatched through kBinaryOps ----

using BinaryFn = Result<Value> (*)(Interpreter& in, const Value& a, const Value& b);
using IntFn = Result<Value> (*)(int64_t x, int64_t y);
using FloatFn = Result<Value> (*)(double x, double y);

// Arithmetic once the string/list forms are ruled out: integers stay exact (`ints` null: the
// result is always a float, as for `/`), anything with a float is computed in floats.
Result<Value> Numeric(std::string_view op_name, const Value& a, const Value& b, IntFn ints,
                      FloatFn floats) {
  if (!a.is_number() || !b.is_number()) return Err(OperandError(op_name, a, b));
  if (ints != nullptr && !a.is_float() && !b.is_float()) return ints(a.as_int(), b.as_int());
  return floats(a.as_float(), b.as_float());
}

Result<Value> IntAdd(int64_t x, int64_t y) {
  int64_t r = 0;
  if (__builtin_add_overflow(x, y, &r)) return Err("integer overflow");
  return Value::Int(r);
}

Result<Value> IntSub(int64_t x, int64_t y) {
  int64_t r = 0;
  if (__builtin_sub_overflow(x, y, &r)) return Err("integer overflow");
  return Value::Int(r);
}

Result<Value> IntMul(int64_t x, int64_t y) {
  int64_t r = 0;
  if (!CheckedMul(x, y, &r)) return Err("integer overflow");
  return Value::Int(r);
}

// Python's floored division: the quotient rounds down and the remainder takes the divisor's sign.
Result<Value> IntFloorDivMod(int64_t x, int64_t y, bool want_mod) {
  if (y == 0) return Err("integer division or modulo by zero");
  if (x == std::numeric_limits<int64_t>::min() && y == -1) return Err("integer overflow");
  int64_t q = x / y, m = x % y;
  if (m != 0 && ((m < 0) != (y < 0))) {
    --q;
    m += y;
  }
  return Value::Int(want_mod ? m : q);
}

Result<Value> IntPow(int64_t x, int64_t y) {
  if (y < 0) return Value::Float(std::pow(static_cast<double>(x), static_cast<double>(y)));
  if (x == 0) return Value::Int(y == 0 ? 1 : 0);
  if (x == 1) return Value::Int(1);
  if (x == -1) return Value::Int(y % 2 == 0 ? 1 : -1);
  int64_t acc = 1;
  for (int64_t i = 0; i < y; ++i) {  // |x| >= 2: overflows within 63 rounds
    if (!CheckedMul(acc, x, &acc)) return Err("integer overflow");
  }
  return Value::Int(acc);
}

Result<Value> Add(Interpreter& in, const Value& a, const Value& b) {
  if (a.is_string() && b.is_string()) {
    RETURN_IF_ERROR(in.ChargeBytes(a.str().size() + b.str().size()));
    std::string s;
    s.reserve(a.str().size() + b.str().size());
    s += a.str();
    s += b.str();
    return Value::String(std::move(s));
  }
  if (a.is_list() && b.is_list()) {
    RETURN_IF_ERROR(in.Charge(a.list().size() + b.list().size()));
    ValueList items = a.list();
    items.insert(items.end(), b.list().begin(), b.list().end());
    return Value::List(std::move(items));
  }
  return Numeric("+", a, b, IntAdd,
                 [](double x, double y) -> Result<Value> { return Value::Float(x + y); });
}

Result<Value> Sub(Interpreter&, const Value& a, const Value& b) {
  return Numeric("-", a, b, IntSub,
                 [](double x, double y) -> Result<Value> { return Value::Float(x - y); });
}

// `seq * n` / `n * seq` for a string or list.
Result<Value> Repeat(Interpreter& in, const Value& a, const Value& b) {
  const Value& seq = (a.is_string() || a.is_list()) ? a : b;
  const Value& count = (a.is_string() || a.is_list()) ? b : a;
  if (!count.is_int() && !count.is_bool()) return Err(OperandError("*", a, b));
  size_t unit = seq.is_string() ? seq.str().size() : seq.list().size();
  // An empty sequence repeated stays empty: no loop over a count the size bound cannot limit.
  int64_t n = unit == 0 ? 0 : std::max<int64_t>(0, count.as_int());
  int64_t total;
  if (!CheckedMul(static_cast<int64_t>(unit), n, &total) ||
      static_cast<uint64_t>(total) > in.max_bytes()) {
    return Status::OutOfRange("chat template repetition result exceeds " +
                              std::to_string(in.max_bytes()) + " elements/bytes");
  }
  RETURN_IF_ERROR(in.ChargeBytes(static_cast<size_t>(total)));
  if (seq.is_string()) {
    std::string s;
    for (int64_t i = 0; i < n; ++i) s += seq.str();
    return Value::String(std::move(s));
  }
  ValueList items;
  for (int64_t i = 0; i < n; ++i) items.insert(items.end(), seq.list().begin(), seq.list().end());
  return Value::List(std::move(items));
}

Result<Value> Mul(Interpreter& in, const Value& a, const Value& b) {
  if (a.is_string() || a.is_list() || b.is_string() || b.is_list()) return Repeat(in, a, b);
  return Numeric("*", a, b, IntMul,
                 [](double x, double y) -> Result<Value> { return Value::Float(x * y); });
}

Result<Value> Div(Interpreter&, const Value& a, const Value& b) {
  return Numeric("/", a, b, nullptr, [](double x, double y) -> Result<Value> {
    if (y == 0) return Err("division by zero");
    return Value::Float(x / y);
  });
}

Result<Value> FloorDiv(Interpreter&, const Value& a, const Value& b) {
  return Numeric(
      "//", a, b, [](int64_t x, int64_t y) { return IntFloorDivMod(x, y, false); },
      [](double x, double y) -> Result<Value> {
        if (y == 0) return Err("float floor division by zero");
        return Value::Float(std::floor(x / y));
      });
}

Result<Value> Mod(Interpreter& in, const Value& a, const Value& b) {
  if (a.is_string()) {  // `'%s' % x`: Python %-formatting
    CallArgs args;
    args.positional.push_back(b);
    return ApplyFilter(in, "format", a, args);
  }
  return Numeric(
      "%", a, b, [](int64_t x, int64_t y) { return IntFloorDivMod(x, y, true); },
      [](double x, double y) -> Result<Value> {
        if (y == 0) return Err("float modulo");
        double m = std::fmod(x, y);
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        return Value::Float(m);
      });
}

Result<Value> Pow(Interpreter&, const Value& a, const Value& b) {
  return Numeric("**", a, b, IntPow,
                 [](double x, double y) -> Result<Value> { return Value::Float(std::pow(x, y)); });
}

Result<Value> Concat(Interpreter& in, const Value& a, const Value& b) {
  std::string s = ToPyStr(a);
  s += ToPyStr(b);
  RETURN_IF_ERROR(in.ChargeBytes(s.size()));
  return Value::String(std::move(s));
}

// `<`, `<=`, `>`, `>=`: Python ordering, `holds` reads the three-way result.
Result<Value> Ordered(const Value& a, const Value& b, bool (*holds)(int)) {
  ASSIGN_OR_RETURN(int c, Compare(a, b));
  return Value::Bool(holds(c));
}

struct BinaryOpEntry {
  BinOp op;
  bool needs_defined;  // an Undefined operand is an error (a first, then b)
  BinaryFn fn;         // null for the short-circuit `and` / `or`
};

// Indexed by BinOp (checked below).
constexpr BinaryOpEntry kBinaryOps[] = {
    {BinOp::kAdd, true, Add},
    {BinOp::kSub, true, Sub},
    {BinOp::kMul, true, Mul},
    {BinOp::kDiv, true, Div},
    {BinOp::kFloorDiv, true, FloorDiv},
    {BinOp::kMod, true, Mod},
    {BinOp::kPow, true, Pow},
    {BinOp::kConcat, false, Concat},
    {BinOp::kEq, false,
     [](Interpreter&, const Value& a, const Value& b) -> Result<Value> {
       return Value::Bool(Equals(a, b));
     }},
    {BinOp::kNe, false,
     [](Interpreter&, const Value& a, const Value& b) -> Result<Value> {
       return Value::Bool(!Equals(a, b));
     }},
    {BinOp::kLt, true,
     [](Interpreter&, const Value& a, const Value& b) {
       return Ordered(a, b, [](int c) { return c < 0; });
     }},
    {BinOp::kLe, true,
     [](Interpreter&, const Value& a, const Value& b) {
       return Ordered(a, b, [](int c) { return c <= 0; });
     }},
    {BinOp::kGt, true,
     [](Interpreter&, const Value& a, const Value& b) {
       return Ordered(a, b, [](int c) { return c > 0; });
     }},
    {BinOp::kGe, true,
     [](Interpreter&, const Value& a, const Value& b) {
       return Ordered(a, b, [](int c) { return c >= 0; });
     }},
    {BinOp::kIn, false,
     [](Interpreter&, const Value& a, const Value& b) -> Result<Value> {
       ASSIGN_OR_RETURN(bool r, Contains(b, a));
       return Value::Bool(r);
     }},
    {BinOp::kNotIn, false,
     [](Interpreter&, const Value& a, const Value& b) -> Result<Value> {
       ASSIGN_OR_RETURN(bool r, Contains(b, a));
       return Value::Bool(!r);
     }},
    {BinOp::kAnd, false, nullptr},
    {BinOp::kOr, false, nullptr},
};

constexpr bool InBinOpOrder() {
  for (size_t i = 0; i < std::size(kBinaryOps); ++i) {
    if (kBinaryOps[i].op != static_cast<BinOp>(i)) return false;
  }
  return std::size(kBinaryOps) == static_cast<size_t>(BinOp::kOr) + 1;
}
static_assert(InBinOpOrder(), "kBinaryOps must list every BinOp in declaration order");

}  // namespace

Status UndefinedError(const Value& v) { return Interpreter::RuntimeError(v.UndefinedHint()); }

Result<Value> GetAttrOf(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if (obj.is_dict() || obj.is_namespace()) {
    const Value* v = obj.dict().Find(name);
    if (v != nullptr) return *v;
  }
  return Value::Undefined("'" + std::string(obj.TypeName()) + " object' has no attribute '" + name +
                          "'");
}

Result<Value> GetItemOf(const Value& obj, const Value& key) {
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

Result<Value> SliceOf(Interpreter& in, const Value& obj, const Value (&parts)[3]) {
  if (obj.is_undefined()) return UndefinedError(obj);
  std::vector<int64_t> idx;
  if (obj.is_list()) {
    RETURN_IF_ERROR(in.Charge(obj.list().size()));
    RETURN_IF_ERROR(
        SliceIndices(static_cast<int64_t>(obj.list().size()), parts[0], parts[1], parts[2], &idx));
    ValueList out;
    out.reserve(idx.size());
    for (int64_t i : idx) out.push_back(obj.list()[static_cast<size_t>(i)]);
    return Value::List(std::move(out));
  }
  if (obj.is_string()) {
    RETURN_IF_ERROR(in.ChargeBytes(obj.str().size()));
    std::vector<size_t> offs = CodePointOffsets(obj.str());
    RETURN_IF_ERROR(
        SliceIndices(static_cast<int64_t>(offs.size()) - 1, parts[0], parts[1], parts[2], &idx));
    std::string out;
    for (int64_t i : idx) {
      size_t a = offs[static_cast<size_t>(i)], b = offs[static_cast<size_t>(i) + 1];
      out.append(obj.str(), a, b - a);
    }
    return Value::String(std::move(out));
  }
  return Err("'" + std::string(obj.TypeName()) + "' object is not subscriptable");
}

Result<Value> ApplyUnary(bool negate, const Value& v) {
  if (v.is_undefined()) return UndefinedError(v);
  if (!v.is_number()) {
    return Err("bad operand type for unary " + std::string(negate ? "-" : "+") + ": '" +
               std::string(v.TypeName()) + "'");
  }
  if (!negate) return v.is_bool() ? Value::Int(v.as_int()) : v;
  if (v.is_float()) return Value::Float(-v.as_float());
  if (v.as_int() == std::numeric_limits<int64_t>::min()) return Err("integer overflow");
  return Value::Int(-v.as_int());
}

Result<Value> ApplyBinary(Interpreter& in, BinOp op, const Value& a, const Value& b) {
  const BinaryOpEntry& entry = kBinaryOps[static_cast<size_t>(op)];
  if (entry.fn == nullptr) return Err("unknown expression");
  if (entry.needs_defined) {
    if (a.is_undefined()) return UndefinedError(a);
    if (b.is_undefined()) return UndefinedError(b);
  }
  return entry.fn(in, a, b);
}

}  // namespace strata::tokenizer::chat
