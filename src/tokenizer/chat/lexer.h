// Lexer of the Jinja2 subset: splits a template into text and tag tokens, applying the whitespace
// rules transformers configures (trim_blocks, lstrip_blocks, `-`/`+` markers, newline
// normalisation, one trailing newline dropped). Internal to strata_chat.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace strata::tokenizer::chat {

enum class TokenType : uint8_t {
  kText,        // raw template text (already whitespace-processed)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,  // text holds the decoded literal
  kInt,
  kFloat,
  kOp,  // text holds the operator
  kEof,
};

struct Token {
  TokenType type;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
  size_t pos = 0;  // byte offset in the normalised source
};

// Source text after newline normalisation plus a position → "line L, column C" mapping.
class SourceMap {
 public:
  explicit SourceMap(std::string normalised);
  const std::string& text() const { return text_; }
  // "line L, column C" (1-based; columns count code points).
  std::string Describe(size_t pos) const;

 private:
  std::string text_;
  std::vector<size_t> line_starts_;
};

// Applies Jinja's newline normalisation (\r\n and \r → \n) and drops one trailing newline.
std::string NormaliseSource(std::string_view source);

// Tokenises `src.text()`. Errors name the position; at most `max_tokens` tokens.
Result<std::vector<Token>> Lex(const SourceMap& src, size_t max_tokens);

}  // namespace strata::tokenizer::chat
