// Runtime values of the chat-template interpreter: a small model of the Python objects that Jinja2
// templates see (None, bool, int, float, str, list, dict, namespace, callables, Undefined).
//
// Contract: lists, dicts and namespaces have reference semantics (copies share the container), like
// Python objects; everything else is copied by value. Dicts keep insertion order (Python 3.7+) and
// only take string keys. Values are not thread-safe; one render owns all values it creates.
// Internal to strata_chat: not part of the public API.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status.h"

namespace strata::tokenizer::chat {

class Value;
class Interpreter;
struct MacroNode;

using ValueList = std::vector<Value>;

// Insertion-ordered string-keyed map.
class ValueDict {
 public:
  const Value* Find(std::string_view key) const;
  Value* Find(std::string_view key);
  void Set(std::string key, Value value);
  void Clear();
  // Deepest container nesting among the values (ever) stored here.
  uint32_t max_depth() const { return max_depth_; }
  size_t size() const;  // defined below Value (clang needs the complete type here)
  const std::vector<std::pair<std::string, Value>>& entries() const { return entries_; }

 private:
  std::vector<std::pair<std::string, Value>> entries_;
  std::unordered_map<std::string, size_t> index_;
  uint32_t max_depth_ = 0;
};

// Containers nested deeper than this are refused (keeps recursion in printing, comparison and
// destruction bounded).
inline constexpr uint32_t kMaxValueDepth = 256;

// Arguments of a call as written: positional then keyword.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// Something callable from a template: a native builtin or a macro.
struct Callable {
  std::string name;
  // Native implementation; empty for macros.
  std::function<Result<Value>(Interpreter&, CallArgs&)> native;
  // Macro definition (owned by the parsed template, which outlives every render).
  const MacroNode* macro = nullptr;
  // For `{% call %}` blocks: the callable bound as `caller` inside the macro.
  std::shared_ptr<Callable> caller;
};

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kCallable
  };

  Value() = default;  // Undefined
  // Undefined that remembers what was looked up, for error messages ("'x' is undefined").
  static Value Undefined(std::string hint) {
    Value v;
    v.str_ = std::make_shared<const std::string>(std::move(hint));
    return v;
  }
  static Value None() {
    Value v;
    v.kind_ = Kind::kNone;
    return v;
  }
  static Value Bool(bool b) {
    Value v;
    v.kind_ = Kind::kBool;
    v.int_ = b ? 1 : 0;
    return v;
  }
  static Value Int(int64_t i) {
    Value v;
    v.kind_ = Kind::kInt;
    v.int_ = i;
    return v;
  }
  static Value Float(double f) {
    Value v;
    v.kind_ = Kind::kFloat;
    v.float_ = f;
    return v;
  }
  static Value String(std::string s) {
    Value v;
    v.kind_ = Kind::kString;
    v.str_ = std::make_shared<const std::string>(std::move(s));
    return v;
  }
  static Value List(ValueList items = {}) {
    Value v;
    v.kind_ = Kind::kList;
    uint32_t d = 0;
    for (const Value& e : items) d = e.depth() > d ? e.depth() : d;
    v.depth_ = d + 1;
    v.list_ = std::make_shared<ValueList>(std::move(items));
    return v;
  }
  static Value Dict() {
    Value v;
    v.kind_ = Kind::kDict;
    v.dict_ = std::make_shared<ValueDict>();
    return v;
  }
  static Value Namespace() {
    Value v;
    v.kind_ = Kind::kNamespace;
    v.dict_ = std::make_shared<ValueDict>();
    return v;
  }
  static Value Function(std::shared_ptr<Callable> c) {
    Value v;
    v.kind_ = Kind::kCallable;
    v.callable_ = std::move(c);
    return v;
  }
  // Converts JSON (strings, numbers, bools, null, arrays, objects) into a Value. Fails when the
  // JSON nests deeper than kMaxValueDepth.
  static Result<Value> FromJson(const nlohmann::ordered_json& j);
  static Result<Value> FromJson(const nlohmann::json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const {
    return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool;
  }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return int_; }  // int or bool
  double as_float() const { return kind_ == Kind::kFloat ? float_ : static_cast<double>(int_); }
  const std::string& str() const { return *str_; }
  std::string UndefinedHint() const { return str_ ? *str_ : "value is undefined"; }
  ValueList& list() const { return *list_; }
  ValueDict& dict() const { return *dict_; }  // dict or namespace
  const std::shared_ptr<Callable>& callable() const { return callable_; }

  // Container nesting: 0 for scalars and namespaces (opaque), 1 + deepest element otherwise.
  uint32_t depth() const {
    return kind_ == Kind::kList ? depth_ : kind_ == Kind::kDict ? 1 + dict_->max_depth() : 0;
  }

  // Python truthiness.
  bool Truthy() const;
  // Python type name for error messages ("str", "dict", "NoneType", "undefined", ...).
  std::string_view TypeName() const;

 private:
  Kind kind_ = Kind::kUndefined;
  uint32_t depth_ = 0;
  int64_t int_ = 0;
  double float_ = 0;
  std::shared_ptr<const std::string> str_;
  std::shared_ptr<ValueList> list_;
  std::shared_ptr<ValueDict> dict_;
  std::shared_ptr<Callable> callable_;
};

// Python str(v) (Undefined renders as ""). Lists and dicts render as Python repr.
std::string ToPyStr(const Value& v);
// Python repr(v).
std::string ToPyRepr(const Value& v);
// Python float repr (shortest round-trip, "1.0", "1e+16", "inf", "nan").
std::string FloatRepr(double f);

struct JsonDumpOptions {
  int indent = -1;  // < 0: single line
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};
// Python json.dumps(v, ...) as transformers' tojson calls it. Fails on Undefined or callables.
Result<std::string> ToJson(const Value& v, const JsonDumpOptions& opts, size_t max_bytes);

// Python ==.
inline size_t ValueDict::size() const { return entries_.size(); }

bool Equals(const Value& a, const Value& b);
// Python <, ==, > for numbers and strings (and lists lexicographically); error for other types.
Result<int> Compare(const Value& a, const Value& b);

// UTF-8 helpers (strings are sequences of code points, as in Python).
// Byte offsets of each code point start, plus a final entry = s.size().
std::vector<size_t> CodePointOffsets(std::string_view s);
size_t CodePointCount(std::string_view s);
// Decodes the code point at s[*i] and advances *i (invalid bytes decode as themselves).
uint32_t DecodeUtf8At(std::string_view s, size_t* i);
void AppendUtf8(std::string& out, uint32_t cp);

}  // namespace strata::tokenizer::chat
