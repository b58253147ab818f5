// Parser of the Jinja2 subset: tokens → statement tree. Errors name line and column. Syntactic
// nesting (blocks and expressions) is bounded by `max_nesting` so hostile input cannot exhaust the
// stack. Internal to strata_chat.
#pragma once

#include <vector>

#include "base/status.h"
#include "tokenizer/chat/ast.h"
#include "tokenizer/chat/lexer.h"

namespace strata::tokenizer::chat {

Result<Body> ParseTemplate(const SourceMap& src, const std::vector<Token>& tokens, int max_nesting);

}  // namespace strata::tokenizer::chat
