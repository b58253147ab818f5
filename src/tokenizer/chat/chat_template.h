// Chat-template engine: renders the Jinja2 chat templates shipped in GGUF files
// (`tokenizer.chat_template`) the way Hugging Face transformers does (sandboxed Jinja2 with
// trim_blocks, lstrip_blocks, loop controls, `tojson` as json.dumps(ensure_ascii=False),
// `raise_exception(msg)` and `strftime_now(fmt)`).
//
// Templates are untrusted (they come from model files). The engine never touches files, supports
// no include/import/extends, exposes nothing but the render context and a fixed set of builtins,
// and bounds every render: total steps, macro call depth, syntactic nesting and output size are
// limited (ChatTemplateLimits); exceeding a limit is an error, never a hang or crash.
//
// Ownership: ChatTemplate owns its parsed tree; Render() borrows the context for the call only.
// Threads: a parsed ChatTemplate is immutable; Render() is const and may run concurrently from
// any number of threads (each render keeps its own state).
//
// Errors:
//   Parse():  kInvalidArgument "chat template parse error at line L, column C: ..." for malformed
//             templates; kUnimplemented for unsupported tags (include, import, extends, block,
//             ...); (including nesting deeper than limits.max_nesting); kOutOfRange when the source
//             exceeds limits.max_source_bytes; kInvalidArgument for invalid limits.
//   Render(): kInvalidArgument ONLY when the template called raise_exception(msg); the message is
//             exactly `msg` (the template rejected the conversation: HTTP 400 with that text).
//             kOutOfRange when a limit (steps, depth, output size) was exceeded.
//             kInternal "chat template error at line L, column C: ..." for runtime errors in the
//             template (type errors, undefined access, unknown function, ...).
//             kUnimplemented for features outside the supported subset found at run time.
#pragma once

#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/status.h"

namespace strata::tokenizer::chat {

struct ChatTemplateLimits {
  // Budget of evaluation steps per render (statements, expression nodes, loop iterations; string
  // and list work is charged per 256 bytes / per element).
  uint64_t max_steps = 1'000'000;
  // Maximum macro call depth (recursion) per render.
  int max_call_depth = 64;
  // Maximum syntactic nesting (blocks inside blocks, parenthesised expressions) at parse time.
  int max_nesting = 256;
  // Maximum size of the rendered text and of any string built while rendering.
  size_t max_output_bytes = 1 << 20;
  // Maximum template source size accepted by Parse().
  size_t max_source_bytes = 1 << 20;

  // Rejects zero or absurd limits with a message naming the field.
  Status Validate() const;
};

// strftime_now(fmt) as seen by templates. Returns the formatted current date/time.
using StrftimeFn = std::function<Result<std::string>(std::string_view format)>;
// The real clock (local time zone).
StrftimeFn SystemClockStrftime();
// A clock fixed at `t` (UTC) — for tests and reproducible renders.
StrftimeFn FixedClockStrftime(std::time_t t);

struct RenderOptions {
  // Backs the template global strftime_now(); SystemClockStrftime() when empty.
  StrftimeFn strftime_now;
};

class ChatTemplate {
 public:
  ~ChatTemplate();
  ChatTemplate(const ChatTemplate&) = delete;
  ChatTemplate& operator=(const ChatTemplate&) = delete;

  // Parses `source` (copied; the caller's buffer may be freed afterwards).
  static Result<std::unique_ptr<ChatTemplate>> Parse(std::string_view source,
                                                     const ChatTemplateLimits& limits = {});

  // Renders with `context` as the template's variables (a JSON object: messages,
  // add_generation_prompt, bos_token, eos_token, tools, any extra variables). Use ordered_json so
  // that dict key order (visible through `tojson` and `items()`) matches the request.
  Result<std::string> Render(const nlohmann::ordered_json& context,
                             const RenderOptions& options = {}) const;
  // Same, for a context built as nlohmann::json (keys then appear in sorted order).
  Result<std::string> Render(const nlohmann::json& context,
                             const RenderOptions& options = {}) const;

  const ChatTemplateLimits& limits() const { return limits_; }

 private:
  ChatTemplate() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  ChatTemplateLimits limits_;
};

// The standard inputs of a chat render, as transformers' apply_chat_template passes them.
struct ChatInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // [{role, content, ...}]
  bool add_generation_prompt = true;
  std::string bos_token;
  std::string eos_token;
  // Tool schemas (a JSON array) or null when the request has none (the template sees `none`).
  nlohmann::ordered_json tools = nullptr;
  // Extra variables (object), e.g. {"date_string": "26 Jul 2024", "enable_thinking": false}.
  // They override the standard names on collision.
  nlohmann::ordered_json variables = nlohmann::ordered_json::object();
};

// Builds the render context: messages, tools, documents (null), add_generation_prompt,
// bos_token, eos_token, then `variables`. Fails when messages is not an array or variables is not
// an object.
Result<nlohmann::ordered_json> BuildChatContext(const ChatInputs& inputs);

}  // namespace strata::tokenizer::chat
