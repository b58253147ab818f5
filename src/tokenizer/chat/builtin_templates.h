// Built-in chat templates: Jinja sources for a few common chat formats, selected by name with
// `strata serve --chat-template NAME` for models whose GGUF carries no `tokenizer.chat_template`
// (or one to replace). They are ordinary templates for our interpreter (ChatTemplate::Parse),
// written here from the formats' published conventions — not copies of any model's file — and
// tested against the renderings in shared/golden/chat of the model family each one is named after
// (builtin_templates_test.cc).
//
//   chatml       <|im_start|>role\ncontent<|im_end|>\n ... (Qwen 2/2.5/3, SmolLM, many fine-tunes)
//   llama3       Llama 3.1 / 3.2: header ids, a system turn with the knowledge cutoff and
//                today's date (`date_string` variable, else strftime_now), <|eot_id|>
//   mistral      Mistral Nemo / v3-tekken: [INST]...[/INST] without spaces; the system message is
//                prepended to the last user turn
//   gemma        Gemma 2: <start_of_turn>user|model ... <end_of_turn>; no system role
//   phi3         Phi-3 / 3.5: <|system|> <|user|> <|assistant|> ... <|end|>
//   deepseek-r1  DeepSeek-R1 (and its distills): <｜User｜> <｜Assistant｜>, a <think> opener
//
// Thread contract: immutable data, safe from any thread. Errors: none (lookups return nullptr).
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace strata::tokenizer::chat {

struct BuiltinTemplate {
  std::string_view name;    // what --chat-template takes
  std::string_view format;  // one line for --help and the docs
  std::string_view source;  // Jinja
};

std::span<const BuiltinTemplate> BuiltinTemplates();
// nullptr when `name` is not a built-in template.
const BuiltinTemplate* FindBuiltinTemplate(std::string_view name);
// "chatml, llama3, mistral, gemma, phi3, deepseek-r1".
std::string BuiltinTemplateNames();

}  // namespace strata::tokenizer::chat
