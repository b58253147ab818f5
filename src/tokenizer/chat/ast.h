// Syntax tree of a parsed chat template. Immutable after parsing; owned by ChatTemplate.
// Internal to strata_chat.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/chat/value.h"

namespace strata::tokenizer::chat {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class BinOp : uint8_t {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kFloorDiv,
  kMod,
  kPow,
  kConcat,
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
  kIn,
  kNotIn,
  kAnd,
  kOr,
};

struct Expr {
  enum class Kind : uint8_t {
    kLiteral,      // literal
    kName,         // name
    kList,         // args = items
    kDict,         // kwargs-like pairs in dict_items
    kGetAttr,      // args[0].name
    kGetItem,      // args[0][args[1]]
    kSlice,        // args[0][args[1]:args[2]:args[3]] (null = omitted)
    kCall,         // args[0](args[1..], kwargs)
    kFilter,       // args[0] | name(args[1..], kwargs)
    kTest,         // args[0] is [not] name(args[1..])
    kNeg,          // -args[0]
    kPos,          // +args[0]
    kNot,          // not args[0]
    kBinary,       // args[0] op args[1]
    kCond,         // args[0] if args[1] else args[2] (args[2] may be null)
    kPlaceholder,  // the body text of a {% filter %} block
  };
  Kind kind;
  size_t pos = 0;
  Value literal;
  std::string name;
  BinOp op = BinOp::kAdd;
  bool negated = false;  // `is not`
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::pair<ExprPtr, ExprPtr>> dict_items;
};

struct MacroNode {
  std::string name;
  size_t pos = 0;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // parallel to params; null = no default
  Body body;
};

struct Stmt {
  enum class Kind : uint8_t {
    kText,         // text
    kOutput,       // {{ expr }}
    kIf,           // branches (cond null for else)
    kFor,          // targets in expr [if filter] body [else else_body]
    kSet,          // targets = expr  (attr non-empty: targets[0].attr = expr)
    kSetBlock,     // {% set targets[0] %}body{% endset %}
    kMacro,        // macro
    kCallBlock,    // {% call(macro->params) expr %}macro->body{% endcall %}
    kFilterBlock,  // expr (a filter chain over a kPlaceholder) applied to body
    kBreak,
    kContinue,
    kScope,  // body (e.g. {% generation %}): rendered in place
  };
  Kind kind;
  size_t pos = 0;
  std::string text;
  std::string attr;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<std::string> targets;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::unique_ptr<MacroNode> macro;
};

}  // namespace strata::tokenizer::chat
