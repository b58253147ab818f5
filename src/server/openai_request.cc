#include "server/openai_request.h"

#include <cmath>
#include <random>

#include <fmt/format.h>

namespace strata::server {
namespace {

using nlohmann::json;

Status Bad(std::string_view param, std::string_view what) {
  return Status::InvalidArgument(fmt::format("{}: {}", param, what));
}

bool Present(const json& body, const char* key) { return body.contains(key) && !body[key].is_null(); }

Status GetFloat(const json& body, const char* key, float* out) {
  if (!Present(body, key)) return Status::Ok();
  const json& v = body[key];
  if (!v.is_number()) return Bad(key, "must be a number");
  double d = v.get<double>();
  if (!std::isfinite(d)) return Bad(key, "must be finite");
  *out = static_cast<float>(d);
  return Status::Ok();
}

Status GetInt(const json& body, const char* key, int64_t lo, int64_t hi, std::optional<int64_t>* out) {
  if (!Present(body, key)) return Status::Ok();
  const json& v = body[key];
  if (!v.is_number_integer()) return Bad(key, "must be an integer");
  int64_t x = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX
                                                                                               : v.get<int64_t>();
  if (x < lo || x > hi) return Bad(key, fmt::format("must be in [{}, {}], got {}", lo, hi, x));
  *out = x;
  return Status::Ok();
}

Status GetBool(const json& body, const char* key, bool* out) {
  if (!Present(body, key)) return Status::Ok();
  if (!body[key].is_boolean()) return Bad(key, "must be a boolean");
  *out = body[key].get<bool>();
  return Status::Ok();
}

Result<std::vector<int32_t>> TokenArray(const json& v, const char* param, size_t n_vocab) {
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (const json& e : v) {
    if (!e.is_number_integer()) return Bad(param, "token ids must be integers");
    int64_t id = e.get<int64_t>();
    if (id < 0 || static_cast<uint64_t>(id) >= n_vocab)
      return Bad(param, fmt::format("token id {} is outside the vocabulary [0, {})", id, n_vocab));
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

}  // namespace

Result<std::string> ApplyChatTemplate(const json& messages, bool add_generation_prompt, const ModelInfo& model,
                                      const json& extra_vars) {
  if (!model.chat_template)
    return Status::InvalidArgument(
        fmt::format("messages: model '{}' has no chat template (tokenizer.chat_template); use /v1/completions", model.name));
  if (!messages.is_array()) return Bad("messages", "must be an array");
  if (messages.empty()) return Bad("messages", "must contain at least one message");
  if (messages.size() > static_cast<size_t>(model.limits.max_messages))
    return Bad("messages", fmt::format("more than {} messages", model.limits.max_messages));
  chat::ChatInputs in;
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object()) return Bad(where, "must be an object");
    if (!m.contains("role") || !m["role"].is_string()) return Bad(where + ".role", "must be a string");
    nlohmann::ordered_json om = nlohmann::ordered_json::parse(m.dump());
    if (m.contains("content")) {
      const json& c = m["content"];
      if (c.is_array()) {  // content parts: text only
        std::string text;
        for (const json& part : c) {
          if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
            return Bad(where + ".content", "only text content parts are supported");
          text += part["text"].get<std::string>();
        }
        om["content"] = text;
      } else if (!c.is_string() && !c.is_null()) {
        return Bad(where + ".content", "must be a string, an array of text parts or null");
      }
    }
    in.messages.push_back(std::move(om));
  }
  in.add_generation_prompt = add_generation_prompt;
  in.bos_token = model.bos_token;
  in.eos_token = model.eos_token;
  if (extra_vars.is_object()) in.variables = nlohmann::ordered_json::parse(extra_vars.dump());
  ASSIGN_OR_RETURN(auto ctx, chat::BuildChatContext(in));
  auto r = model.chat_template->Render(ctx);
  if (!r.ok()) {
    if (r.status().code() == StatusCode::kInvalidArgument) return r.status();  // raise_exception: message as is
    return Status::InvalidArgument("chat template: " + std::string(r.status().message()));
  }
  return r;
}

Result<GenRequest> ParseGenRequest(Endpoint endpoint, const json& body, const ModelInfo& model,
                                   std::string_view tier_header) {
  if (!body.is_object()) return Status::InvalidArgument("body: must be a JSON object");
  GenRequest g;
  g.endpoint = endpoint;
  auto& s = g.submit;
  const size_t n_vocab = model.tok->n_vocab();

  // Prompt.
  if (endpoint == Endpoint::kCompletions) {
    if (!Present(body, "prompt")) return Bad("prompt", "is required");
    const json& p = body["prompt"];
    if (p.is_string()) {
      s.prompt = model.tok->Encode(p.get<std::string>(), /*add_special=*/true, /*parse_special=*/true);
    } else if (p.is_array() && !p.empty() && p[0].is_number_integer()) {
      ASSIGN_OR_RETURN(s.prompt, TokenArray(p, "prompt", n_vocab));
    } else if (p.is_array() && p.size() == 1 && p[0].is_string()) {
      s.prompt = model.tok->Encode(p[0].get<std::string>(), true, true);
    } else if (p.is_array() && p.size() == 1 && p[0].is_array()) {
      ASSIGN_OR_RETURN(s.prompt, TokenArray(p[0], "prompt", n_vocab));
    } else {
      return Bad("prompt", "must be a string, an array of token ids, or a one-element array of either (batches are not supported)");
    }
  } else {
    if (!Present(body, "messages")) return Bad("messages", "is required");
    bool add_gen = true;
    RETURN_IF_ERROR(GetBool(body, "add_generation_prompt", &add_gen));
    json extra = Present(body, "chat_template_kwargs") ? body["chat_template_kwargs"] : json(nullptr);
    if (!extra.is_null() && !extra.is_object()) return Bad("chat_template_kwargs", "must be an object");
    ASSIGN_OR_RETURN(std::string text, ApplyChatTemplate(body["messages"], add_gen, model, extra));
    s.prompt = model.tok->Encode(text, /*add_special=*/false, /*parse_special=*/true);
  }
  if (s.prompt.empty()) return Bad("prompt", "is empty (and the model adds no BOS token)");
  const int64_t n_prompt = static_cast<int64_t>(s.prompt.size());
  if (n_prompt >= model.max_model_len)
    return Status::OutOfRange(fmt::format(
        "prompt: the prompt has {} tokens, but the model's context size is {} tokens (the prompt must be shorter "
        "to leave room for at least one generated token)", n_prompt, model.max_model_len));

  // Sampling: OpenAI defaults (temperature 1, top_p 1, no top-k / min-p).
  auto& sp = s.sampling;
  sp.temperature = 1.0f;
  sp.top_p = 1.0f;
  sp.top_k = 0;
  sp.min_p = 0.0f;
  sp.penalty_last_n = -1;
  RETURN_IF_ERROR(GetFloat(body, "temperature", &sp.temperature));
  if (sp.temperature < 0 || sp.temperature > 100) return Bad("temperature", "must be in [0, 100]");
  RETURN_IF_ERROR(GetFloat(body, "top_p", &sp.top_p));
  if (!(sp.top_p > 0 && sp.top_p <= 1)) return Bad("top_p", "must be in (0, 1]");
  RETURN_IF_ERROR(GetFloat(body, "min_p", &sp.min_p));
  if (!(sp.min_p >= 0 && sp.min_p <= 1)) return Bad("min_p", "must be in [0, 1]");
  std::optional<int64_t> iv;
  RETURN_IF_ERROR(GetInt(body, "top_k", -1, 1 << 30, &iv));
  if (iv) sp.top_k = *iv < 0 ? 0 : static_cast<int>(*iv);
  RETURN_IF_ERROR(GetFloat(body, "frequency_penalty", &sp.frequency_penalty));
  if (sp.frequency_penalty < -2 || sp.frequency_penalty > 2) return Bad("frequency_penalty", "must be in [-2, 2]");
  RETURN_IF_ERROR(GetFloat(body, "presence_penalty", &sp.presence_penalty));
  if (sp.presence_penalty < -2 || sp.presence_penalty > 2) return Bad("presence_penalty", "must be in [-2, 2]");
  RETURN_IF_ERROR(GetFloat(body, "repetition_penalty", &sp.repetition_penalty));
  if (!(sp.repetition_penalty > 0 && sp.repetition_penalty <= 10)) return Bad("repetition_penalty", "must be in (0, 10]");
  iv.reset();
  RETURN_IF_ERROR(GetInt(body, "seed", INT64_MIN, INT64_MAX, &iv));
  sp.seed = iv ? static_cast<uint64_t>(*iv) : std::random_device{}() * 0x9E3779B97F4A7C15ull + std::random_device{}();
  RETURN_IF_ERROR(sp.Validate());

  // Lengths.
  std::optional<int64_t> max_tokens;
  RETURN_IF_ERROR(GetInt(body, "max_tokens", 1, model.limits.max_tokens, &max_tokens));
  if (endpoint == Endpoint::kChat) {
    std::optional<int64_t> mct;
    RETURN_IF_ERROR(GetInt(body, "max_completion_tokens", 1, model.limits.max_tokens, &mct));
    if (mct) max_tokens = mct;
  }
  const int64_t room = model.max_model_len - n_prompt;
  int64_t want = max_tokens ? *max_tokens : (endpoint == Endpoint::kCompletions ? 16 : model.limits.max_tokens);
  s.max_tokens = static_cast<int>(std::min(want, room));

  // n, logprobs.
  iv.reset();
  RETURN_IF_ERROR(GetInt(body, "n", 1, model.limits.max_n, &iv));
  if (iv) s.n = static_cast<int>(*iv);
  if (endpoint == Endpoint::kCompletions) {
    iv.reset();
    RETURN_IF_ERROR(GetInt(body, "logprobs", 0, model.limits.max_top_logprobs, &iv));
    if (iv) {
      s.logprobs = true;
      s.top_logprobs = static_cast<int>(*iv);
    }
  } else {
    RETURN_IF_ERROR(GetBool(body, "logprobs", &s.logprobs));
    iv.reset();
    RETURN_IF_ERROR(GetInt(body, "top_logprobs", 0, model.limits.max_top_logprobs, &iv));
    if (iv) {
      if (!s.logprobs && *iv > 0) return Bad("top_logprobs", "requires logprobs to be true");
      s.top_logprobs = static_cast<int>(*iv);
    }
  }

  // Stops.
  if (Present(body, "stop")) {
    const json& st = body["stop"];
    if (st.is_string()) {
      g.stop.push_back(st.get<std::string>());
    } else if (st.is_array()) {
      for (const json& e : st) {
        if (!e.is_string()) return Bad("stop", "must be a string or an array of strings");
        g.stop.push_back(e.get<std::string>());
      }
    } else {
      return Bad("stop", "must be a string or an array of strings");
    }
    if (g.stop.size() > static_cast<size_t>(model.limits.max_stop))
      return Bad("stop", fmt::format("at most {} stop strings", model.limits.max_stop));
    for (const auto& x : g.stop) {
      if (x.empty()) return Bad("stop", "stop strings must not be empty");
      if (x.size() > model.limits.max_stop_bytes)
        return Bad("stop", fmt::format("stop strings are limited to {} bytes", model.limits.max_stop_bytes));
    }
  }
  if (Present(body, "stop_token_ids")) {
    if (!body["stop_token_ids"].is_array()) return Bad("stop_token_ids", "must be an array of token ids");
    ASSIGN_OR_RETURN(s.stop_token_ids, TokenArray(body["stop_token_ids"], "stop_token_ids", n_vocab));
  }
  RETURN_IF_ERROR(GetBool(body, "ignore_eos", &s.ignore_eos));
  s.eog_ids = model.tok->eog_ids();

  // Streaming.
  RETURN_IF_ERROR(GetBool(body, "stream", &g.stream));
  if (Present(body, "stream_options")) {
    const json& so = body["stream_options"];
    if (!so.is_object()) return Bad("stream_options", "must be an object");
    RETURN_IF_ERROR(GetBool(so, "include_usage", &g.include_usage));
  }

  // Strata extensions: tier and deadline.
  std::string tier_name(tier_header);
  if (Present(body, "priority")) {
    if (!body["priority"].is_string()) return Bad("priority", "must be one of gold, silver, bronze");
    tier_name = body["priority"].get<std::string>();
  }
  if (!tier_name.empty()) {
    auto t = engine::sched::ParsePriority(tier_name);
    if (!t.ok()) return Bad("priority", fmt::format("must be one of gold, silver, bronze, got '{}'", tier_name));
    s.priority = *t;
  }
  iv.reset();
  RETURN_IF_ERROR(GetInt(body, "deadline_ms", 1, int64_t{1} << 40, &iv));
  g.deadline_ms = iv;
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
