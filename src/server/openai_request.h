// OpenAI request schema -> native engine types, at the edge (I/O threads), plus the stop-string
// matcher used while streaming text back.
//
// Errors: every parse function returns an http::ApiError: InvalidArgument (or OutOfRange for a
// prompt longer than the context) whose message starts with the offending parameter's name and a
// colon ("max_tokens: ..."), with that parameter carried as the error's `param` field (the server
// writes it into the OpenAI error body as is). Unknown fields are ignored; OpenAI fields Strata
// does not implement are refused by name (openai_fields.h has the table of every field).
// Shape: ParseGenRequest = unsupported fields (CheckFieldSupport) -> prompt (template + tokenize)
// -> a table of field parsers over the body (one small function per group of OpenAI fields) -> the
// engine request.
// Thread contract: free functions, no shared state; StopMatcher is one-per-completion.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/sched/request.h"
#include "http/openai_error.h"
#include "tokenizer/chat/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace strata::server {

enum class Endpoint { kCompletions, kChat };

struct ApiLimits {
  int max_n = 16;
  int max_tokens = 4096;        // cap on max_tokens / max_completion_tokens
  int max_stop = 16;            // stop strings
  size_t max_stop_bytes = 256;  // per stop string
  int max_top_logprobs = 20;
  int max_messages = 4096;
  int max_prompts = 64;   // prompts in one /v1/completions batch
  int max_choices = 128;  // prompts x n
};

// What the parser needs to know about the served model.
struct ModelInfo {
  std::string name;
  const tokenizer::Tokenizer* tok = nullptr;
  // null: the model has none (chat -> 400)
  const tokenizer::chat::ChatTemplate* chat_template = nullptr;
  std::string bos_token, eos_token;  // passed to the template
  int max_model_len = 0;
  ApiLimits limits;
};

struct GenRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  // The engine request of prompts[0]; a batch's other prompts are submitted as copies of it with
  // their own prompt and max_tokens (MaxTokensFor). prompt_logprobs is set for echo + logprobs.
  engine::sched::SubmitRequest submit;  // prompt, sampling, max_tokens, ids, priority, n, logprobs
  // Every prompt's ids: one for chat and a single completions prompt; a batch in order (choice
  // index of prompt p, sample j = p * n + j).
  std::vector<std::vector<int32_t>> prompts;
  int max_tokens = 16;  // as asked (0 only with echo), before clamping to each prompt's room
  bool echo = false;    // completions: prompt text (and logprobs) first in every choice
  std::vector<std::string> stop;  // stop strings (not included in the output)
  bool stream = false;
  bool include_usage = false;          // stream_options.include_usage
  bool return_token_ids = false;       // vLLM's extension: prompt_token_ids + each choice's ids
  std::optional<int64_t> deadline_ms;  // relative deadline; the caller turns it into a TimePoint

  // The engine's max_tokens for a prompt of `prompt_size` tokens: what was asked, clamped to the
  // room the context leaves; at least 1 (max_tokens 0 with echo runs one step for the prompt's
  // logprobs; its token is dropped).
  int MaxTokensFor(size_t prompt_size, int max_model_len) const {
    const int64_t room = max_model_len - static_cast<int64_t>(prompt_size);
    return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(max_tokens, room)));
  }
};

// Parses a /v1/completions or /v1/chat/completions body. `priority_header` is the x-strata-tier
// header (may be empty); the body's `priority` wins over it. `priority` is a class name (gold,
// silver, bronze) or an integer as vLLM's (lower runs first): < 0 gold, 0 silver, > 0 bronze.
// When a request is traced: the steady-clock times its parse reached the prompt, the chat template
// was rendered (chat) and the prompt was tokenized (request_spans.h).
struct ParseStamps {
  std::chrono::steady_clock::time_point prompt_start{}, template_end{}, tokenize_end{};
};

// `stamps` (null: none taken) records the phase times of a traced request.
http::ApiResult<GenRequest> ParseGenRequest(Endpoint endpoint, const nlohmann::json& body,
                                            const ModelInfo& model,
                                            std::string_view priority_header = {},
                                            ParseStamps* stamps = nullptr);

// Renders `messages` (the request's JSON array) with the model's chat template.
// InvalidArgument "messages: ..." for malformed messages; "model has no chat template" when absent;
// the template's raise_exception message as is.
http::ApiResult<std::string> ApplyChatTemplate(const nlohmann::json& messages,
                                               bool add_generation_prompt, const ModelInfo& model,
                                               const nlohmann::json& extra_vars = nullptr);

// The prompts' token ids: /v1/completions `prompt` (a string, token ids, or a batch: an array of
// strings or of token-id arrays, at most ApiLimits::max_prompts) or the chat `messages` rendered
// with the template and tokenized (one prompt). Each is checked (non-empty, shorter than the
// context, ids in the vocabulary); errors name `prompt` (the message says which: "prompt[2]: ...").
http::ApiResult<std::vector<std::vector<int32_t>>> ParsePrompt(Endpoint endpoint,
                                                               const nlohmann::json& body,
                                                               const ModelInfo& model);

// Holds back text that could still become a stop string. Push() returns the text that can be
// released now; once a stop string is found, the text before it is returned and matched() is true
// (later pushes return nothing). Flush() releases what was held back (end of the completion).
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  std::string Push(std::string_view text);
  std::string Flush();
  bool matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool matched_ = false;
};

}  // namespace strata::server
