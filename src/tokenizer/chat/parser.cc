#include "tokenizer/chat/parser.h"

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <span>

#include "base/enum_names.h"
#include "tokenizer/chat/builtins.h"

namespace strata::tokenizer::chat {

namespace {

// How a binary operator is written: a name (`and`, `in`) or an operator token (`+`).
struct Spelling {
  TokenType type;
  std::string_view text;
  BinOp op;
};

// One table per precedence level, loosest first (`not in` is matched separately).
constexpr Spelling kOrOps[] = {{TokenType::kName, "or", BinOp::kOr}};
constexpr Spelling kAndOps[] = {{TokenType::kName, "and", BinOp::kAnd}};
constexpr Spelling kCompareOps[] = {
    {TokenType::kOp, "==", BinOp::kEq},  {TokenType::kOp, "!=", BinOp::kNe},
    {TokenType::kOp, "<", BinOp::kLt},   {TokenType::kOp, "<=", BinOp::kLe},
    {TokenType::kOp, ">", BinOp::kGt},   {TokenType::kOp, ">=", BinOp::kGe},
    {TokenType::kName, "in", BinOp::kIn}};
constexpr Spelling kAddOps[] = {{TokenType::kOp, "+", BinOp::kAdd},
                                {TokenType::kOp, "-", BinOp::kSub}};
constexpr Spelling kConcatOps[] = {{TokenType::kOp, "~", BinOp::kConcat}};
constexpr Spelling kMulOps[] = {{TokenType::kOp, "*", BinOp::kMul},
                                {TokenType::kOp, "/", BinOp::kDiv},
                                {TokenType::kOp, "//", BinOp::kFloorDiv},
                                {TokenType::kOp, "%", BinOp::kMod}};
constexpr Spelling kPowOps[] = {{TokenType::kOp, "**", BinOp::kPow}};

class Parser {
 public:
  Parser(const SourceMap& src, const std::vector<Token>& toks, int max_nesting)
      : src_(src), toks_(toks), max_nesting_(max_nesting) {}

  Result<Body> Run() {
    std::string which;
    ASSIGN_OR_RETURN(Body body, ParseUntil({}, &which));
    return body;
  }

 private:
  // RAII nesting counter.
  class Nest {
   public:
    explicit Nest(Parser* p) : p_(p) { ++p_->depth_; }
    ~Nest() { --p_->depth_; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;

   private:
    Parser* p_;
  };

  Status CheckDepth() const {
    if (depth_ > max_nesting_) {
      return Error(Cur().pos,
                   "template nested more than " + std::to_string(max_nesting_) + " levels deep");
    }
    return Status::Ok();
  }

  const Token& Cur() const { return toks_[i_]; }
  const Token& Peek(size_t k = 1) const { return toks_[std::min(i_ + k, toks_.size() - 1)]; }
  void Advance() {
    if (i_ + 1 < toks_.size()) ++i_;
  }
  bool IsOp(std::string_view op) const { return Cur().type == TokenType::kOp && Cur().text == op; }
  bool IsName(std::string_view n) const {
    return Cur().type == TokenType::kName && Cur().text == n;
  }

  Status Error(size_t pos, const std::string& msg) const {
    return Status::InvalidArgument("chat template parse error at " + src_.Describe(pos) + ": " +
                                   msg);
  }

  std::string Describe(const Token& t) const {
    // kName and kOp are quoted as written; the rest by what they are.
    static constexpr auto kNames =
        EnumNames<TokenType::kEof>("template text", "'{{'", "'}}'", "'{%'", "'%}'", "",
                                   "string literal", "number", "number", "", "end of template");
    if (t.type == TokenType::kName || t.type == TokenType::kOp) return "'" + t.text + "'";
    return std::string(EnumName(kNames, t.type, "token"));
  }

  Status Expect(TokenType type, std::string_view what) {
    if (Cur().type != type) {
      return Error(Cur().pos, "expected " + std::string(what) + ", got " + Describe(Cur()));
    }
    Advance();
    return Status::Ok();
  }
  Status ExpectOp(std::string_view op) {
    if (!IsOp(op)) {
      return Error(Cur().pos, "expected '" + std::string(op) + "', got " + Describe(Cur()));
    }
    Advance();
    return Status::Ok();
  }
  Result<std::string> ExpectName() {
    if (Cur().type != TokenType::kName) {
      return Error(Cur().pos, "expected a name, got " + Describe(Cur()));
    }
    std::string n = Cur().text;
    Advance();
    return n;
  }
  Status ExpectBlockEnd() { return Expect(TokenType::kBlockEnd, "'%}'"); }

  static ExprPtr MakeExpr(Expr::Kind kind, size_t pos) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    return e;
  }
  static StmtPtr MakeStmt(Stmt::Kind kind, size_t pos) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->pos = pos;
    return s;
  }

  // Parses statements until a block tag whose name is in `ends` (consumed up to and including the
  // name; the caller parses the rest of that tag). With empty `ends`, parses to end of template.
  Result<Body> ParseUntil(std::initializer_list<std::string_view> ends, std::string* which) {
    Nest nest(this);
    RETURN_IF_ERROR(CheckDepth());
    Body body;
    while (true) {
      const Token& t = Cur();
      switch (t.type) {
        case TokenType::kEof:
          if (ends.size() != 0) {
            std::string want;
            for (std::string_view e : ends) {
              want += (want.empty() ? "{% " : " or {% ") + std::string(e) + " %}";
            }
            return Error(t.pos, "unexpected end of template, expected " + want);
          }
          return body;
        case TokenType::kText: {
          StmtPtr s = MakeStmt(Stmt::Kind::kText, t.pos);
          s->text = t.text;
          body.push_back(std::move(s));
          Advance();
          break;
        }
        case TokenType::kVarBegin: {
          StmtPtr s = MakeStmt(Stmt::Kind::kOutput, t.pos);
          Advance();
          ASSIGN_OR_RETURN(s->expr, ParseExpression());
          RETURN_IF_ERROR(Expect(TokenType::kVarEnd, "'}}'"));
          body.push_back(std::move(s));
          break;
        }
        case TokenType::kBlockBegin: {
          Advance();
          if (Cur().type != TokenType::kName) {
            return Error(Cur().pos, "expected a tag name, got " + Describe(Cur()));
          }
          const std::string& name = Cur().text;
          if (std::find(ends.begin(), ends.end(), name) != ends.end()) {
            *which = name;
            Advance();
            return body;
          }
          ASSIGN_OR_RETURN(StmtPtr s, ParseStatement());
          body.push_back(std::move(s));
          break;
        }
        default:
          return Error(t.pos, "unexpected " + Describe(t));
      }
    }
  }

  Result<StmtPtr> ParseStatement() {
    const Token& t = Cur();
    const std::string name = t.text;
    size_t pos = t.pos;
    if (name == "if") return ParseIf();
    if (name == "for") return ParseFor();
    if (name == "set") return ParseSet();
    if (name == "macro") return ParseMacro();
    if (name == "call") return ParseCallBlock();
    if (name == "filter") return ParseFilterBlock();
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) return Error(pos, "'" + name + "' outside of a loop");
      Advance();
      RETURN_IF_ERROR(ExpectBlockEnd());
      return MakeStmt(name == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue, pos);
    }
    if (name == "generation") {
      Advance();
      RETURN_IF_ERROR(ExpectBlockEnd());
      StmtPtr s = MakeStmt(Stmt::Kind::kScope, pos);
      std::string which;
      ASSIGN_OR_RETURN(s->body, ParseUntil({"endgeneration"}, &which));
      RETURN_IF_ERROR(ExpectBlockEnd());
      return s;
    }
    if (name == "include" || name == "import" || name == "from" || name == "extends" ||
        name == "block") {
      return Status::Unimplemented("chat template error at " + src_.Describe(pos) + ": '{% " +
                                   name + " %}' is not supported (templates are self-contained)");
    }
    return Error(pos, "unknown tag '" + name + "'");
  }

  Result<StmtPtr> ParseIf() {
    StmtPtr s = MakeStmt(Stmt::Kind::kIf, Cur().pos);
    Advance();  // if
    while (true) {
      ASSIGN_OR_RETURN(ExprPtr cond, ParseExpression());
      RETURN_IF_ERROR(ExpectBlockEnd());
      std::string which;
      ASSIGN_OR_RETURN(Body body, ParseUntil({"elif", "else", "endif"}, &which));
      s->branches.emplace_back(std::move(cond), std::move(body));
      if (which == "elif") continue;
      RETURN_IF_ERROR(ExpectBlockEnd());
      if (which == "else") {
        ASSIGN_OR_RETURN(Body else_body, ParseUntil({"endif"}, &which));
        RETURN_IF_ERROR(ExpectBlockEnd());
        s->branches.emplace_back(nullptr, std::move(else_body));
      }
      return s;
    }
  }

  Result<std::vector<std::string>> ParseTargets() {
    std::vector<std::string> targets;
    while (true) {
      ASSIGN_OR_RETURN(std::string n, ExpectName());
      targets.push_back(std::move(n));
      if (!IsOp(",")) break;
      Advance();
    }
    return targets;
  }

  Result<StmtPtr> ParseFor() {
    StmtPtr s = MakeStmt(Stmt::Kind::kFor, Cur().pos);
    Advance();  // for
    bool paren = IsOp("(");
    if (paren) Advance();
    ASSIGN_OR_RETURN(s->targets, ParseTargets());
    if (paren) RETURN_IF_ERROR(ExpectOp(")"));
    if (!IsName("in")) return Error(Cur().pos, "expected 'in', got " + Describe(Cur()));
    Advance();
    ASSIGN_OR_RETURN(s->expr, ParseExpression(/*with_cond=*/false));
    if (IsName("if")) {
      Advance();
      ASSIGN_OR_RETURN(s->filter, ParseExpression());
    }
    if (IsName("recursive")) return Error(Cur().pos, "recursive loops are not supported");
    RETURN_IF_ERROR(ExpectBlockEnd());
    std::string which;
    ++loop_depth_;
    auto body = ParseUntil({"else", "endfor"}, &which);
    --loop_depth_;
    if (!body.ok()) return body.status();
    s->body = std::move(body).value();
    RETURN_IF_ERROR(ExpectBlockEnd());
    if (which == "else") {
      ASSIGN_OR_RETURN(s->else_body, ParseUntil({"endfor"}, &which));
      RETURN_IF_ERROR(ExpectBlockEnd());
    }
    return s;
  }

  Result<StmtPtr> ParseSet() {
    size_t pos = Cur().pos;
    Advance();  // set
    ASSIGN_OR_RETURN(std::string first, ExpectName());
    if (IsOp(".")) {
      Advance();
      StmtPtr s = MakeStmt(Stmt::Kind::kSet, pos);
      s->targets.push_back(std::move(first));
      ASSIGN_OR_RETURN(s->attr, ExpectName());
      RETURN_IF_ERROR(ExpectOp("="));
      ASSIGN_OR_RETURN(s->expr, ParseExpression());
      RETURN_IF_ERROR(ExpectBlockEnd());
      return s;
    }
    std::vector<std::string> targets{std::move(first)};
    while (IsOp(",")) {
      Advance();
      ASSIGN_OR_RETURN(std::string n, ExpectName());
      targets.push_back(std::move(n));
    }
    if (Cur().type == TokenType::kBlockEnd && targets.size() == 1) {
      Advance();
      StmtPtr s = MakeStmt(Stmt::Kind::kSetBlock, pos);
      s->targets = std::move(targets);
      std::string which;
      ASSIGN_OR_RETURN(s->body, ParseUntil({"endset"}, &which));
      RETURN_IF_ERROR(ExpectBlockEnd());
      return s;
    }
    StmtPtr s = MakeStmt(Stmt::Kind::kSet, pos);
    s->targets = std::move(targets);
    RETURN_IF_ERROR(ExpectOp("="));
    ASSIGN_OR_RETURN(s->expr, ParseTupleOrExpression());
    RETURN_IF_ERROR(ExpectBlockEnd());
    return s;
  }

  // `a, b` without brackets (right side of set) → a list literal.
  Result<ExprPtr> ParseTupleOrExpression() {
    size_t pos = Cur().pos;
    ASSIGN_OR_RETURN(ExprPtr first, ParseExpression());
    if (!IsOp(",")) return first;
    ExprPtr list = MakeExpr(Expr::Kind::kList, pos);
    list->args.push_back(std::move(first));
    while (IsOp(",")) {
      Advance();
      ASSIGN_OR_RETURN(ExprPtr e, ParseExpression());
      list->args.push_back(std::move(e));
    }
    return list;
  }

  Status ParseParams(MacroNode* m) {
    RETURN_IF_ERROR(ExpectOp("("));
    while (!IsOp(")")) {
      ASSIGN_OR_RETURN(std::string p, ExpectName());
      ExprPtr def;
      if (IsOp("=")) {
        Advance();
        ASSIGN_OR_RETURN(def, ParseExpression());
      }
      m->params.push_back(std::move(p));
      m->defaults.push_back(std::move(def));
      if (!IsOp(",")) break;
      Advance();
    }
    return ExpectOp(")");
  }

  Result<StmtPtr> ParseMacro() {
    StmtPtr s = MakeStmt(Stmt::Kind::kMacro, Cur().pos);
    Advance();  // macro
    s->macro = std::make_unique<MacroNode>();
    s->macro->pos = s->pos;
    ASSIGN_OR_RETURN(s->macro->name, ExpectName());
    RETURN_IF_ERROR(ParseParams(s->macro.get()));
    RETURN_IF_ERROR(ExpectBlockEnd());
    RETURN_IF_ERROR(ParseMacroBody("endmacro", s->macro.get()));
    if (Cur().type == TokenType::kName && Cur().text == s->macro->name) Advance();
    RETURN_IF_ERROR(ExpectBlockEnd());
    return s;
  }

  Result<StmtPtr> ParseCallBlock() {
    StmtPtr s = MakeStmt(Stmt::Kind::kCallBlock, Cur().pos);
    Advance();  // call
    s->macro = std::make_unique<MacroNode>();
    s->macro->name = "caller";
    s->macro->pos = s->pos;
    if (IsOp("(")) RETURN_IF_ERROR(ParseParams(s->macro.get()));
    ASSIGN_OR_RETURN(s->expr, ParseExpression());
    if (s->expr->kind != Expr::Kind::kCall) {
      return Error(s->pos, "{% call %} needs a macro call expression");
    }
    RETURN_IF_ERROR(ExpectBlockEnd());
    RETURN_IF_ERROR(ParseMacroBody("endcall", s->macro.get()));
    RETURN_IF_ERROR(ExpectBlockEnd());
    return s;
  }

  // The body of a macro or call block, up to `end`: a `break` or `continue` in it does not belong
  // to a loop around the definition.
  Status ParseMacroBody(std::string_view end, MacroNode* m) {
    std::string which;
    int saved = loop_depth_;
    loop_depth_ = 0;
    auto body = ParseUntil({end}, &which);
    loop_depth_ = saved;
    if (!body.ok()) return body.status();
    m->body = std::move(body).value();
    return Status::Ok();
  }

  Result<StmtPtr> ParseFilterBlock() {
    StmtPtr s = MakeStmt(Stmt::Kind::kFilterBlock, Cur().pos);
    Advance();  // filter
    ExprPtr node = MakeExpr(Expr::Kind::kPlaceholder, s->pos);
    while (true) {
      ASSIGN_OR_RETURN(node, ParseFilter(std::move(node)));
      if (!IsOp("|")) break;
      Advance();
    }
    s->expr = std::move(node);
    RETURN_IF_ERROR(ExpectBlockEnd());
    std::string which;
    ASSIGN_OR_RETURN(s->body, ParseUntil({"endfilter"}, &which));
    RETURN_IF_ERROR(ExpectBlockEnd());
    return s;
  }

  // ---- expressions ----

  Result<ExprPtr> ParseExpression(bool with_cond = true) {
    Nest nest(this);
    RETURN_IF_ERROR(CheckDepth());
    ASSIGN_OR_RETURN(ExprPtr e, ParseOr());
    if (!with_cond) return e;
    while (IsName("if")) {
      size_t pos = Cur().pos;
      Advance();
      ASSIGN_OR_RETURN(ExprPtr cond, ParseOr());
      ExprPtr c = MakeExpr(Expr::Kind::kCond, pos);
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(cond));
      if (IsName("else")) {
        Advance();
        ASSIGN_OR_RETURN(ExprPtr other, ParseOr());
        c->args.push_back(std::move(other));
      } else {
        c->args.push_back(nullptr);
      }
      e = std::move(c);
    }
    return e;
  }

  ExprPtr MakeBinary(BinOp op, size_t pos, ExprPtr a, ExprPtr b) {
    ExprPtr e = MakeExpr(Expr::Kind::kBinary, pos);
    e->op = op;
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  // One left-associative level of the grammar: operand (op operand)*, where each op is one of
  // `ops` and each operand is parsed by `operand` (the next level down).
  Result<ExprPtr> ParseLeftAssoc(std::span<const Spelling> ops,
                                 Result<ExprPtr> (Parser::*operand)()) {
    ASSIGN_OR_RETURN(ExprPtr e, (this->*operand)());
    while (const Spelling* op = Match(ops)) {
      size_t pos = Cur().pos;
      Advance();
      ASSIGN_OR_RETURN(ExprPtr r, (this->*operand)());
      e = MakeBinary(op->op, pos, std::move(e), std::move(r));
    }
    return e;
  }

  // The spelling in `ops` that the current token is, or null.
  const Spelling* Match(std::span<const Spelling> ops) const {
    for (const Spelling& op : ops) {
      if (Cur().type == op.type && Cur().text == op.text) return &op;
    }
    return nullptr;
  }

  Result<ExprPtr> ParseOr() { return ParseLeftAssoc(kOrOps, &Parser::ParseAnd); }
  Result<ExprPtr> ParseAnd() { return ParseLeftAssoc(kAndOps, &Parser::ParseNot); }

  Result<ExprPtr> ParseNot() {
    if (IsName("not")) {
      Nest nest(this);
      RETURN_IF_ERROR(CheckDepth());
      size_t pos = Cur().pos;
      Advance();
      ASSIGN_OR_RETURN(ExprPtr inner, ParseNot());
      ExprPtr e = MakeExpr(Expr::Kind::kNot, pos);
      e->args.push_back(std::move(inner));
      return e;
    }
    return ParseCompare();
  }

  Result<ExprPtr> ParseCompare() {
    ASSIGN_OR_RETURN(ExprPtr e, ParseMath1());
    ExprPtr chain;  // conjunction for chained comparisons
    while (true) {
      size_t pos = Cur().pos;
      std::optional<BinOp> op = CompareOpHere();
      if (!op.has_value()) break;
      if (*op == BinOp::kNotIn) Advance();  // `not`
      Advance();
      ASSIGN_OR_RETURN(ExprPtr r, ParseMath1());
      if (chain == nullptr && !IsCompareOp()) {
        return MakeBinary(*op, pos, std::move(e), std::move(r));
      }
      // a < b < c  ==  (a < b) and (b < c); the middle operand is parsed once but re-evaluated.
      ExprPtr left_copy = std::move(e);
      ExprPtr cmp = MakeBinary(*op, pos, std::move(left_copy), std::move(r));
      const Expr* right = cmp->args[1].get();
      chain =
          chain ? MakeBinary(BinOp::kAnd, pos, std::move(chain), std::move(cmp)) : std::move(cmp);
      e = CloneExpr(*right);
      if (!IsCompareOp()) return chain;
    }
    return e;
  }

  // The comparison operator at the current token (`not in` spans two tokens), if any.
  std::optional<BinOp> CompareOpHere() const {
    if (const Spelling* op = Match(kCompareOps)) return op->op;
    if (IsName("not") && Peek().type == TokenType::kName && Peek().text == "in") {
      return BinOp::kNotIn;
    }
    return std::nullopt;
  }
  bool IsCompareOp() const { return CompareOpHere().has_value(); }

  static ExprPtr CloneExpr(const Expr& x) {
    auto e = std::make_unique<Expr>();
    e->kind = x.kind;
    e->pos = x.pos;
    e->literal = x.literal;
    e->name = x.name;
    e->op = x.op;
    e->negated = x.negated;
    for (const auto& a : x.args) e->args.push_back(a ? CloneExpr(*a) : nullptr);
    for (const auto& [k, v] : x.kwargs) e->kwargs.emplace_back(k, v ? CloneExpr(*v) : nullptr);
    for (const auto& [k, v] : x.dict_items)
      e->dict_items.emplace_back(CloneExpr(*k), CloneExpr(*v));
    return e;
  }

  Result<ExprPtr> ParseMath1() { return ParseLeftAssoc(kAddOps, &Parser::ParseConcat); }
  Result<ExprPtr> ParseConcat() { return ParseLeftAssoc(kConcatOps, &Parser::ParseMath2); }
  Result<ExprPtr> ParseMath2() { return ParseLeftAssoc(kMulOps, &Parser::ParsePow); }
  Result<ExprPtr> ParsePow() { return ParseLeftAssoc(kPowOps, &Parser::ParseFilteredUnary); }
  Result<ExprPtr> ParseFilteredUnary() { return ParseUnary(true); }

  Result<ExprPtr> ParseUnary(bool with_filter) {
    Nest nest(this);
    RETURN_IF_ERROR(CheckDepth());
    ExprPtr e;
    if (IsOp("-") || IsOp("+")) {
      Expr::Kind k = IsOp("-") ? Expr::Kind::kNeg : Expr::Kind::kPos;
      size_t pos = Cur().pos;
      Advance();
      ASSIGN_OR_RETURN(ExprPtr inner, ParseUnary(false));
      e = MakeExpr(k, pos);
      e->args.push_back(std::move(inner));
    } else {
      ASSIGN_OR_RETURN(e, ParsePrimary());
      ASSIGN_OR_RETURN(e, ParsePostfix(std::move(e)));
    }
    if (with_filter) {
      ASSIGN_OR_RETURN(e, ParseFilterTests(std::move(e)));
    }
    return e;
  }

  Result<ExprPtr> ParsePrimary() {
    const Token& t = Cur();
    size_t pos = t.pos;
    switch (t.type) {
      case TokenType::kName:
        return ParseNameOrConstant();
      case TokenType::kString: {
        std::string s;  // adjacent literals concatenate: 'a' "b"
        while (Cur().type == TokenType::kString) {
          s += Cur().text;
          Advance();
        }
        return MakeLiteral(pos, Value::String(std::move(s)));
      }
      case TokenType::kInt:
      case TokenType::kFloat: {
        ExprPtr e = MakeLiteral(
            pos, t.type == TokenType::kInt ? Value::Int(t.int_value) : Value::Float(t.float_value));
        Advance();
        return e;
      }
      case TokenType::kOp:
        if (t.text == "(") return ParseParenthesised();
        if (t.text == "[") return ParseCollection(Expr::Kind::kList, "]", &Parser::ParseListItem);
        if (t.text == "{") return ParseCollection(Expr::Kind::kDict, "}", &Parser::ParseDictItem);
        break;
      default:
        break;
    }
    return Error(pos, "unexpected " + Describe(t) + " in expression");
  }

  static ExprPtr MakeLiteral(size_t pos, Value v) {
    ExprPtr e = MakeExpr(Expr::Kind::kLiteral, pos);
    e->literal = std::move(v);
    return e;
  }

  // `true`/`True`, `false`/`False`, `none`/`None`, or a variable name.
  ExprPtr ParseNameOrConstant() {
    const Token& t = Cur();
    ExprPtr e;
    if (t.text == "true" || t.text == "True") {
      e = MakeLiteral(t.pos, Value::Bool(true));
    } else if (t.text == "false" || t.text == "False") {
      e = MakeLiteral(t.pos, Value::Bool(false));
    } else if (t.text == "none" || t.text == "None") {
      e = MakeLiteral(t.pos, Value::None());
    } else {
      e = MakeExpr(Expr::Kind::kName, t.pos);
      e->name = t.text;
    }
    Advance();
    return e;
  }

  // `(e)`, or a tuple (a list here): `()`, `(a,)`, `(a, b)`.
  Result<ExprPtr> ParseParenthesised() {
    size_t pos = Cur().pos;
    Advance();
    if (IsOp(")")) {  // empty tuple
      Advance();
      return MakeExpr(Expr::Kind::kList, pos);
    }
    ASSIGN_OR_RETURN(ExprPtr e, ParseExpression());
    if (IsOp(",")) {
      ExprPtr list = MakeExpr(Expr::Kind::kList, pos);
      list->args.push_back(std::move(e));
      while (IsOp(",")) {
        Advance();
        if (IsOp(")")) break;
        ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
        list->args.push_back(std::move(item));
      }
      e = std::move(list);
    }
    RETURN_IF_ERROR(ExpectOp(")"));
    return e;
  }

  // `[a, b]` or `{k: v}`: a collection of `kind` whose items `item` parses, up to `close`.
  Result<ExprPtr> ParseCollection(Expr::Kind kind, std::string_view close,
                                  Status (Parser::*item)(Expr*)) {
    ExprPtr e = MakeExpr(kind, Cur().pos);
    Advance();
    RETURN_IF_ERROR(ParseCommaSeparated(close, [&] { return (this->*item)(e.get()); }));
    return e;
  }

  Status ParseListItem(Expr* list) {
    ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
    list->args.push_back(std::move(item));
    return Status::Ok();
  }

  Status ParseDictItem(Expr* dict) {
    ASSIGN_OR_RETURN(ExprPtr k, ParseExpression());
    RETURN_IF_ERROR(ExpectOp(":"));
    ASSIGN_OR_RETURN(ExprPtr v, ParseExpression());
    dict->dict_items.emplace_back(std::move(k), std::move(v));
    return Status::Ok();
  }

  // `item, item, ... close` (a trailing comma allowed): calls `item` for each element, then
  // expects `close`.
  template <class ItemFn>
  Status ParseCommaSeparated(std::string_view close, ItemFn item) {
    while (!IsOp(close)) {
      RETURN_IF_ERROR(item());
      if (!IsOp(",")) break;
      Advance();
    }
    return ExpectOp(close);
  }

  Status ParseCallArgs(Expr* call) {
    RETURN_IF_ERROR(ExpectOp("("));
    return ParseCommaSeparated(")", [&]() -> Status {
      if (Cur().type == TokenType::kName && Peek().type == TokenType::kOp && Peek().text == "=") {
        std::string key = Cur().text;
        Advance();
        Advance();
        ASSIGN_OR_RETURN(ExprPtr v, ParseExpression());
        call->kwargs.emplace_back(std::move(key), std::move(v));
        return Status::Ok();
      }
      if (!call->kwargs.empty()) {
        return Error(Cur().pos, "positional argument after keyword argument");
      }
      ASSIGN_OR_RETURN(ExprPtr v, ParseExpression());
      call->args.push_back(std::move(v));
      return Status::Ok();
    });
  }

  Result<ExprPtr> ParsePostfix(ExprPtr e) {
    int chain = 0;
    while (true) {
      if (++chain > 4 * max_nesting_) return Error(Cur().pos, "expression chain too long");
      size_t pos = Cur().pos;
      if (IsOp(".")) {
        Advance();
        ExprPtr g;
        if (Cur().type == TokenType::kInt) {
          g = MakeExpr(Expr::Kind::kGetItem, pos);
          g->args.push_back(std::move(e));
          g->args.push_back(MakeLiteral(Cur().pos, Value::Int(Cur().int_value)));
          Advance();
        } else {
          g = MakeExpr(Expr::Kind::kGetAttr, pos);
          ASSIGN_OR_RETURN(g->name, ExpectName());
          g->args.push_back(std::move(e));
        }
        e = std::move(g);
      } else if (IsOp("[")) {
        Advance();
        ExprPtr parts[3];
        bool is_slice = false;
        if (!IsOp(":")) {
          ASSIGN_OR_RETURN(parts[0], ParseExpression());
        }
        for (int k = 1; k < 3 && IsOp(":"); ++k) {
          is_slice = true;
          Advance();
          if (!IsOp(":") && !IsOp("]")) {
            ASSIGN_OR_RETURN(parts[k], ParseExpression());
          }
        }
        RETURN_IF_ERROR(ExpectOp("]"));
        ExprPtr g = MakeExpr(is_slice ? Expr::Kind::kSlice : Expr::Kind::kGetItem, pos);
        g->args.push_back(std::move(e));
        if (!is_slice && parts[0] == nullptr) return Error(pos, "empty subscript");
        g->args.push_back(std::move(parts[0]));
        if (is_slice) {
          g->args.push_back(std::move(parts[1]));
          g->args.push_back(std::move(parts[2]));
        }
        e = std::move(g);
      } else if (IsOp("(")) {
        ExprPtr c = MakeExpr(Expr::Kind::kCall, pos);
        c->args.push_back(std::move(e));
        RETURN_IF_ERROR(ParseCallArgs(c.get()));
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  Result<ExprPtr> ParseFilter(ExprPtr base) {
    size_t pos = Cur().pos;
    ASSIGN_OR_RETURN(std::string name, ExpectName());
    if (!IsKnownFilter(name)) return Error(pos, "no filter named '" + name + "'");
    ExprPtr f = MakeExpr(Expr::Kind::kFilter, pos);
    f->name = std::move(name);
    f->args.push_back(std::move(base));
    if (IsOp("(")) RETURN_IF_ERROR(ParseCallArgs(f.get()));
    return f;
  }

  Result<ExprPtr> ParseFilterTests(ExprPtr e) {
    int chain = 0;
    while (true) {
      if (++chain > 4 * max_nesting_) return Error(Cur().pos, "filter chain too long");
      if (IsOp("|")) {
        Advance();
        ASSIGN_OR_RETURN(e, ParseFilter(std::move(e)));
      } else if (IsName("is")) {
        size_t pos = Cur().pos;
        Advance();
        bool negated = false;
        if (IsName("not")) {
          negated = true;
          Advance();
        }
        std::string name;
        if (Cur().type == TokenType::kName) {
          name = Cur().text;
          Advance();
        } else {
          return Error(Cur().pos, "expected a test name after 'is', got " + Describe(Cur()));
        }
        if (!IsKnownTest(name)) return Error(pos, "no test named '" + name + "'");
        ExprPtr t = MakeExpr(Expr::Kind::kTest, pos);
        t->name = std::move(name);
        t->negated = negated;
        t->args.push_back(std::move(e));
        if (IsOp("(")) {
          RETURN_IF_ERROR(ParseCallArgs(t.get()));
        } else if (StartsTestArgument()) {
          ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
          ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
          t->args.push_back(std::move(arg));
        }
        e = std::move(t);
      } else if (IsOp("(")) {
        ExprPtr c = MakeExpr(Expr::Kind::kCall, Cur().pos);
        c->args.push_back(std::move(e));
        RETURN_IF_ERROR(ParseCallArgs(c.get()));
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  // Jinja accepts one argument without parentheses: `x is divisibleby 3`, `x is sameas none`.
  bool StartsTestArgument() const {
    const Token& t = Cur();
    if (t.type == TokenType::kName) {
      return t.text != "else" && t.text != "or" && t.text != "and";
    }
    if (t.type == TokenType::kString || t.type == TokenType::kInt || t.type == TokenType::kFloat) {
      return true;
    }
    return t.type == TokenType::kOp && (t.text == "[" || t.text == "{");
  }

  const SourceMap& src_;
  const std::vector<Token>& toks_;
  int max_nesting_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Result<Body> ParseTemplate(const SourceMap& src, const std::vector<Token>& tokens,
                           int max_nesting) {
  return Parser(src, tokens, max_nesting).Run();
}

}  // namespace strata::tokenizer::chat
