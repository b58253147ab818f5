// Builtin filters, tests, global functions and methods of str/list/dict. Internal to strata_chat.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "tokenizer/chat/value.h"

namespace strata::tokenizer::chat {

bool IsKnownFilter(std::string_view name);
bool IsKnownTest(std::string_view name);

// Applies filter `name` to `value` (args.positional excludes the value itself).
Result<Value> ApplyFilter(Interpreter& in, std::string_view name, const Value& value,
                          CallArgs& args);
// Evaluates test `name` on `value`.
Result<bool> ApplyTest(Interpreter& in, std::string_view name, const Value& value, CallArgs& args);
// Calls method `name` on a str/list/dict receiver. Sets *found=false when no such method exists.
Result<Value> CallMethod(Interpreter& in, const Value& self, std::string_view name, CallArgs& args,
                         bool* found);
// Global functions visible to every template: range, namespace, dict, raise_exception, ...
Value MakeGlobal(std::string_view name);

// The characters (code points) of `s`, one string each.
ValueList StringChars(const std::string& s);
// Items of an iterable (a list, a dict's keys, a string's characters); Undefined gives none.
// Charges one step per item.
Result<ValueList> Iterate(Interpreter& in, const Value& v);

// Python `x in container`.
Result<bool> Contains(const Value& container, const Value& x);
// Python str.split(sep) / str.split() when sep is empty-optional.
Value SplitString(const std::string& s, const Value& sep, int64_t maxsplit);

}  // namespace strata::tokenizer::chat
