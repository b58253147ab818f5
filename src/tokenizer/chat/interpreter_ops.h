// What the evaluator does to values once their operands are evaluated: attribute and item
// lookup, slicing, unary and binary operators. Errors are runtime errors without a position
// (Interpreter::Eval adds it). Internal to strata_chat.
#pragma once

#include <string>

#include "base/status.h"
#include "tokenizer/chat/ast.h"
#include "tokenizer/chat/value.h"

namespace strata::tokenizer::chat {

// The error for using an undefined value where a defined one is required.
Status UndefinedError(const Value& v);

// `obj.name`: a dict or namespace entry, else an Undefined naming what was missing.
Result<Value> GetAttrOf(const Value& obj, const std::string& name);
// `obj[key]`: a dict entry or a (negative-indexable) list element or character.
Result<Value> GetItemOf(const Value& obj, const Value& key);
// `obj[start:stop:step]` over a list or string (parts may be Undefined = omitted).
Result<Value> SliceOf(Interpreter& in, const Value& obj, const Value (&parts)[3]);
// `-v` (negate) or `+v`.
Result<Value> ApplyUnary(bool negate, const Value& v);
// `a op b` for every operator but the short-circuit `and` / `or` (the evaluator's job).
Result<Value> ApplyBinary(Interpreter& in, BinOp op, const Value& a, const Value& b);

}  // namespace strata::tokenizer::chat
