#include "server/openai_request.h"

#include <fmt/format.h>

#include <cmath>
#include <random>

#include "http/json_fields.h"
#include "protocol/openai/chat_message.h"
#include "protocol/openai/request_fields.h"
#include "server/openai_fields.h"
#include "tokenizer/chat/builtin_templates.h"

namespace strata::server {
namespace {

// A seed for a request that gave none: a per-thread generator seeded once from std::random_device
// (opening the device per request cost ~2 % of a small model's serving CPU).
uint64_t RandomSeed() {
  thread_local std::mt19937_64 gen = [] {
    std::random_device rd;
    std::seed_seq seq{rd(), rd(), rd(), rd()};
    return std::mt19937_64(seq);
  }();
  return gen();
}

using http::ApiError;
using http::ApiResult;
using nlohmann::json;

ApiError Bad(std::string_view param, std::string_view what) { return ApiError::Param(param, what); }

bool Present(const json& body, const char* key) { return http::Fields(body).Has(key); }

ApiResult<std::vector<int32_t>> TokenArray(const json& v, const char* param, size_t n_vocab) {
  return http::TokenIds(v, param, n_vocab);
}

// One prompt of /v1/completions: a string or an array of token ids. `where` names it in errors
// ("prompt" for a single prompt, "prompt[i]" inside a batch; the error's param is always "prompt").
ApiResult<std::vector<int32_t>> OnePrompt(const json& p, const std::string& where,
                                          const ModelInfo& model) {
  if (p.is_string())  // json-access: is_string checked
    return model.tok->Encode(p.get<std::string>(), /*add_special=*/true, /*parse_special=*/true);
  if (p.is_array()) {
    auto ids = TokenArray(p, where.c_str(), model.tok->n_vocab());
    if (!ids.ok()) return ApiError(ids.error().status(), "prompt");  // the message says which
    return ids;
  }
  return ApiError(Status::InvalidArgument(where + ": must be a string or an array of token ids"),
                  "prompt");
}

// `prompt`: a string, an array of token ids, or a batch (an array of strings or of token-id
// arrays; at most ApiLimits::max_prompts).
ApiResult<std::vector<std::vector<int32_t>>> CompletionPrompts(const json& body,
                                                               const ModelInfo& model) {
  if (!Present(body, "prompt")) return Bad("prompt", "is required");
  const json& p = body["prompt"];
  std::vector<std::vector<int32_t>> out;
  if (p.is_string() || (p.is_array() && !p.empty() && p[0].is_number_integer())) {
    ASSIGN_OR_RETURN_API(std::vector<int32_t> ids, OnePrompt(p, "prompt", model));
    out.push_back(std::move(ids));
    return out;
  }
  if (!p.is_array() || p.empty())
    return Bad("prompt",
               "must be a string, an array of token ids, or a non-empty array of strings or of "
               "token-id arrays");
  if (p.size() > static_cast<size_t>(model.limits.max_prompts))
    return Bad("prompt", fmt::format("a batch holds at most {} prompts, got {}",
                                     model.limits.max_prompts, p.size()));
  for (size_t i = 0; i < p.size(); ++i) {
    const std::string where = p.size() == 1 ? "prompt" : fmt::format("prompt[{}]", i);
    ASSIGN_OR_RETURN_API(std::vector<int32_t> ids, OnePrompt(p[i], where, model));
    out.push_back(std::move(ids));
  }
  return out;
}

ApiResult<std::vector<int32_t>> ChatPrompt(const json& body, const ModelInfo& model,
                                           ParseStamps* stamps) {
  if (!Present(body, "messages")) return Bad("messages", "is required");
  bool add_gen = true;
  RETURN_IF_API_ERROR(http::Fields(body).Bool("add_generation_prompt", &add_gen));
  json extra = Present(body, "chat_template_kwargs") ? body["chat_template_kwargs"] : json(nullptr);
  if (!extra.is_null() && !extra.is_object())
    return Bad("chat_template_kwargs", "must be an object");
  ASSIGN_OR_RETURN_API(std::string text,
                       ApplyChatTemplate(body["messages"], add_gen, model, extra));
  if (stamps != nullptr) stamps->template_end = std::chrono::steady_clock::now();
  return model.tok->Encode(text, /*add_special=*/false, /*parse_special=*/true);
}

// --- Field parsers: each reads one group of OpenAI fields into the request. ---

struct FieldContext {
  const json& body;
  const ModelInfo& model;
  Endpoint endpoint;
  std::string_view priority_header;
};

// echo (completions): the prompt is prepended to each choice's text (and, with logprobs, its
// tokens to the logprobs). Chat has no echo: true is refused by name.
ApiError ParseEcho(const FieldContext& f, GenRequest* g) {
  RETURN_IF_API_ERROR(http::Fields(f.body).Bool("echo", &g->echo));
  if (g->echo && f.endpoint == Endpoint::kChat)
    return Bad("echo", "is not supported for chat completions");
  return {};
}

// Sampling: OpenAI defaults (temperature 1, top_p 1, no top-k / min-p).
ApiError ParseSampling(const FieldContext& f, GenRequest* g) {
  const json& body = f.body;
  auto& sp = g->submit.sampling;
  sp.temperature = 1.0f;
  sp.top_p = 1.0f;
  sp.top_k = 0;
  sp.min_p = 0.0f;
  sp.penalty_last_n = -1;
  const http::Fields fields(body);
  RETURN_IF_API_ERROR(fields.Float("temperature", {0, 100}, &sp.temperature));
  RETURN_IF_API_ERROR(fields.Float("top_p", {.lo = 0, .hi = 1, .lo_open = true}, &sp.top_p));
  RETURN_IF_API_ERROR(fields.Float("min_p", {0, 1}, &sp.min_p));
  std::optional<int64_t> iv;
  RETURN_IF_API_ERROR(fields.Int("top_k", -1, 1 << 30, &iv));
  if (iv) sp.top_k = *iv < 0 ? 0 : static_cast<int>(*iv);
  RETURN_IF_API_ERROR(fields.Float("frequency_penalty", {-2, 2}, &sp.frequency_penalty));
  RETURN_IF_API_ERROR(fields.Float("presence_penalty", {-2, 2}, &sp.presence_penalty));
  RETURN_IF_API_ERROR(fields.Float("repetition_penalty", {.lo = 0, .hi = 10, .lo_open = true},
                                   &sp.repetition_penalty));
  iv.reset();
  RETURN_IF_API_ERROR(fields.Int("seed", INT64_MIN, INT64_MAX, &iv));
  sp.seed = iv ? static_cast<uint64_t>(*iv) : RandomSeed();
  ASSIGN_OR_RETURN_API(sp.logit_bias, ParseLogitBias(body, f.model.tok->n_vocab()));
  return ApiError(sp.Validate());
}

// max_tokens (and chat's max_completion_tokens, which wins), clamped to the room the prompt leaves.
ApiError ParseLengths(const FieldContext& f, GenRequest* g) {
  const auto& limits = f.model.limits;
  // 0 only with echo (the prompt alone comes back).
  ASSIGN_OR_RETURN_API(std::optional<int64_t> max_tokens,
                       protocol::ReadMaxTokens(f.body, f.endpoint == Endpoint::kChat,
                                               {.lo = g->echo ? 0 : 1, .hi = limits.max_tokens}));
  int64_t want =
      max_tokens ? *max_tokens : (f.endpoint == Endpoint::kCompletions ? 16 : limits.max_tokens);
  g->max_tokens = static_cast<int>(want);
  g->submit.max_tokens = g->MaxTokensFor(g->prompts[0].size(), f.model.max_model_len);
  return {};
}

// n and logprobs (completions: `logprobs` is the top count; chat: a boolean plus `top_logprobs`).
ApiError ParseChoices(const FieldContext& f, GenRequest* g) {
  auto& s = g->submit;
  const int max_top = f.model.limits.max_top_logprobs;
  std::optional<int64_t> iv;
  RETURN_IF_API_ERROR(http::Fields(f.body).Int("n", 1, f.model.limits.max_n, &iv));
  if (iv) s.n = static_cast<int>(*iv);
  const size_t choices = g->prompts.size() * static_cast<size_t>(s.n);
  if (choices > static_cast<size_t>(f.model.limits.max_choices))
    return Bad("n", fmt::format("{} prompts x n = {} choices, more than the {} allowed",
                                g->prompts.size(), choices, f.model.limits.max_choices));
  iv.reset();
  if (f.endpoint == Endpoint::kCompletions) {
    RETURN_IF_API_ERROR(http::Fields(f.body).Int("logprobs", 0, max_top, &iv));
    if (iv) {
      s.logprobs = true;
      s.top_logprobs = static_cast<int>(*iv);
    }
    return {};
  }
  RETURN_IF_API_ERROR(http::Fields(f.body).Bool("logprobs", &s.logprobs));
  RETURN_IF_API_ERROR(http::Fields(f.body).Int("top_logprobs", 0, max_top, &iv));
  if (iv) {
    if (!s.logprobs && *iv > 0) return Bad("top_logprobs", "requires logprobs to be true");
    s.top_logprobs = static_cast<int>(*iv);
  }
  return {};
}

ApiError ParseStopStrings(const FieldContext& f, GenRequest* g) {
  if (!Present(f.body, "stop")) return {};
  const auto& limits = f.model.limits;
  const json& st = f.body["stop"];
  if (st.is_string()) {
    g->stop.push_back(st.get<std::string>());  // json-access: is_string checked
  } else if (st.is_array()) {
    for (const json& e : st) {
      if (!e.is_string()) return Bad("stop", "must be a string or an array of strings");
      g->stop.push_back(e.get<std::string>());  // json-access: is_string checked
    }
  } else {
    return Bad("stop", "must be a string or an array of strings");
  }
  if (g->stop.size() > static_cast<size_t>(limits.max_stop))
    return Bad("stop", fmt::format("at most {} stop strings", limits.max_stop));
  for (const auto& x : g->stop) {
    if (x.empty()) return Bad("stop", "stop strings must not be empty");
    if (x.size() > limits.max_stop_bytes)
      return Bad("stop",
                 fmt::format("stop strings are limited to {} bytes", limits.max_stop_bytes));
  }
  return {};
}

// stop_token_ids, ignore_eos, and what the model fixes (EOG ids).
ApiError ParseStopTokens(const FieldContext& f, GenRequest* g) {
  auto& s = g->submit;
  if (Present(f.body, "stop_token_ids")) {
    if (!f.body["stop_token_ids"].is_array())
      return Bad("stop_token_ids", "must be an array of token ids");
    ASSIGN_OR_RETURN_API(s.stop_token_ids, TokenArray(f.body["stop_token_ids"], "stop_token_ids",
                                                      f.model.tok->n_vocab()));
  }
  RETURN_IF_API_ERROR(http::Fields(f.body).Bool("ignore_eos", &s.ignore_eos));
  s.eog_ids = f.model.tok->eog_ids();
  return {};
}

ApiError ParseStreaming(const FieldContext& f, GenRequest* g) {
  RETURN_IF_API_ERROR(http::Fields(f.body).Bool("stream", &g->stream));
  RETURN_IF_API_ERROR(http::Fields(f.body).Bool("return_token_ids", &g->return_token_ids));
  if (!Present(f.body, "stream_options")) return {};
  const json& so = f.body["stream_options"];
  if (!so.is_object()) return Bad("stream_options", "must be an object");
  return http::Fields(so, "stream_options.").Bool("include_usage", &g->include_usage);
}

// Strata extensions: priority (protocol::ReadPriority: the body's `priority` wins over the
// x-strata-tier header) and deadline.
ApiError ParsePriorityAndDeadline(const FieldContext& f, GenRequest* g) {
  ASSIGN_OR_RETURN_API(std::optional<protocol::Priority> priority,
                       protocol::ReadPriority(f.body, f.priority_header));
  if (priority) g->submit.priority = *priority;
  std::optional<int64_t> iv;
  RETURN_IF_API_ERROR(http::Fields(f.body).Int("deadline_ms", 1, protocol::kMaxDeadlineMs, &iv));
  g->deadline_ms = iv;
  return {};
}

using FieldParser = ApiError (*)(const FieldContext&, GenRequest*);
// In this order (the first error wins, as clients see it).
constexpr FieldParser kFieldParsers[] = {
    ParseSampling,    ParseEcho,       ParseLengths,   ParseChoices,
    ParseStopStrings, ParseStopTokens, ParseStreaming, ParsePriorityAndDeadline};

}  // namespace

ApiResult<std::string> ApplyChatTemplate(const json& messages, bool add_generation_prompt,
                                         const ModelInfo& model, const json& extra_vars) {
  if (!model.chat_template)
    return Bad("messages",
               fmt::format("model '{}' has no chat template (tokenizer.chat_template): start the "
                           "server with --chat-template-file FILE (a Jinja template) or "
                           "--chat-template NAME (built-in: {}), or use /v1/completions",
                           model.name, tokenizer::chat::BuiltinTemplateNames()));
  tokenizer::chat::ChatInputs in;
  ASSIGN_OR_RETURN(in.messages, protocol::TemplateMessages(
                                    messages, static_cast<size_t>(model.limits.max_messages)));
  in.add_generation_prompt = add_generation_prompt;
  in.bos_token = model.bos_token;
  in.eos_token = model.eos_token;
  if (extra_vars.is_object()) in.variables = nlohmann::ordered_json::parse(extra_vars.dump());
  auto ctx = tokenizer::chat::BuildChatContext(in);
  if (!ctx.ok()) return ctx.status();
  auto r = model.chat_template->Render(*ctx);
  if (!r.ok()) {
    if (r.status().code() == StatusCode::kInvalidArgument)
      return r.status();  // raise_exception: message as is
    return Status::InvalidArgument("chat template: " + std::string(r.status().message()));
  }
  return std::move(*r);
}

namespace {

ApiResult<std::vector<std::vector<int32_t>>> ParsePromptStamped(Endpoint endpoint, const json& body,
                                                                const ModelInfo& model,
                                                                ParseStamps* stamps) {
  std::vector<std::vector<int32_t>> prompts;
  if (endpoint == Endpoint::kCompletions) {
    ASSIGN_OR_RETURN_API(prompts, CompletionPrompts(body, model));
  } else {
    ASSIGN_OR_RETURN_API(std::vector<int32_t> ids, ChatPrompt(body, model, stamps));
    prompts.push_back(std::move(ids));
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string which = prompts.size() == 1 ? "prompt" : fmt::format("prompt[{}]", i);
    if (prompts[i].empty())
      return ApiError(
          Status::InvalidArgument(which + ": is empty (and the model adds no BOS token)"),
          "prompt");
    const int64_t n_prompt = static_cast<int64_t>(prompts[i].size());
    if (n_prompt >= model.max_model_len)
      return ApiError(
          Status::OutOfRange(fmt::format(
              "{}: the prompt has {} tokens, but the model's context size is {} tokens "
              "(the prompt must be shorter to leave room for at least one generated token)",
              which, n_prompt, model.max_model_len)),
          "prompt");
  }
  return prompts;
}

}  // namespace

ApiResult<std::vector<std::vector<int32_t>>> ParsePrompt(Endpoint endpoint, const json& body,
                                                         const ModelInfo& model) {
  return ParsePromptStamped(endpoint, body, model, nullptr);
}

ApiResult<GenRequest> ParseGenRequest(Endpoint endpoint, const json& body, const ModelInfo& model,
                                      std::string_view priority_header, ParseStamps* stamps) {
  if (!body.is_object()) return Bad("body", "must be a JSON object");
  GenRequest g;
  g.endpoint = endpoint;
  RETURN_IF_API_ERROR(CheckFieldSupport(endpoint, body));
  if (stamps != nullptr) stamps->prompt_start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN_API(g.prompts, ParsePromptStamped(endpoint, body, model, stamps));
  if (stamps != nullptr) stamps->tokenize_end = std::chrono::steady_clock::now();
  g.submit.prompt = g.prompts[0];
  const FieldContext f{body, model, endpoint, priority_header};
  for (FieldParser parse : kFieldParsers) RETURN_IF_API_ERROR(parse(f, &g));
  if (g.echo && g.submit.logprobs) g.submit.prompt_logprobs = g.submit.top_logprobs;
  return g;
}

std::string StopMatcher::Push(std::string_view text) {
  if (matched_) return {};
  held_.append(text);
  size_t best = std::string::npos;
  for (const auto& s : stops_) {
    size_t p = held_.find(s);
    if (p < best) best = p;
  }
  if (best != std::string::npos) {
    matched_ = true;
    std::string out = held_.substr(0, best);
    held_.clear();
    return out;
  }
  // Keep the longest suffix of held_ that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const auto& s : stops_) {
    size_t max_k = std::min(s.size() - 1, held_.size());
    for (size_t k = max_k; k > keep; --k)
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::Flush() {
  if (matched_) return {};
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

}  // namespace strata::server
