#include "server/openai_fields.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "base/enum_names.h"

namespace strata::server {
namespace {

using http::ApiError;
using http::Fields;
using nlohmann::json;

constexpr const char* kStructuredLater =
    "not supported yet (tool calls and structured output are not implemented)";

const json& Value(const Fields& f, std::string_view key) { return *f.Find(key); }

ApiError NotSupported(const Fields& f, std::string_view key, std::string_view why) {
  return f.Error(key, fmt::format("not supported{}{}", why.empty() ? "" : " ", why));
}

// --- Ignored (metadata) fields: type-checked only. ---

ApiError IgnoredString(const Fields& f, std::string_view key) {
  std::string unused;
  return f.String(key, &unused);
}

ApiError IgnoredObject(const Fields& f, std::string_view key) {
  const json* unused = nullptr;
  return f.Object(key, &unused);
}

ApiError IgnoredBool(const Fields& f, std::string_view key) {
  bool unused = false;
  return f.Bool(key, &unused);
}

// --- Unsupported unless default-equivalent. ---

ApiError RefuseAny(const Fields& f, std::string_view key) { return NotSupported(f, key, ""); }

ApiError StoreFalseOnly(const Fields& f, std::string_view key) {
  bool store = false;
  RETURN_IF_API_ERROR(f.Bool(key, &store));
  return store ? NotSupported(f, key, "(Strata does not store completions; only false)")
               : ApiError();
}

ApiError ServiceTierAutoOrDefault(const Fields& f, std::string_view key) {
  std::string tier;
  RETURN_IF_API_ERROR(f.String(key, &tier));
  if (tier == "auto" || tier == "default") return {};
  return NotSupported(f, key, fmt::format("('{}'; only auto or default)", tier));
}

ApiError CacheRetentionInMemory(const Fields& f, std::string_view key) {
  std::string v;
  RETURN_IF_API_ERROR(f.String(key, &v));
  if (v == "in_memory") return {};
  return NotSupported(f, key, fmt::format("('{}'; only in_memory)", v));
}

ApiError TextModalityOnly(const Fields& f, std::string_view key) {
  const json& v = Value(f, key);
  if (v.is_array() && v.size() == 1 && v[0].is_string() &&
      // json-access: is_string checked
      v[0].get_ref<const std::string&>() == "text")
    return {};
  return NotSupported(f, key, "(only [\"text\"])");
}

ApiError SuffixEmptyOnly(const Fields& f, std::string_view key) {
  std::string suffix;
  RETURN_IF_API_ERROR(f.String(key, &suffix));
  return suffix.empty() ? ApiError() : NotSupported(f, key, "(insertion is not implemented)");
}

// best_of == n is the plain request (each choice is its own best); more candidates than choices
// would need server-side ranking, which Strata does not do.
ApiError BestOfEqualToN(const Fields& f, std::string_view key) {
  int64_t best_of = 1, n = 1;
  RETURN_IF_API_ERROR(f.Int(key, 1, int64_t{1} << 20, &best_of));
  // n itself is checked by the choices parser; a malformed n counts as the default here.
  if (const json* nv = f.Find("n"); nv && nv->is_number_integer()) n = nv->get<int64_t>();
  if (best_of < n) return f.Error(key, "must be >= n");
  if (best_of > n) return NotSupported(f, key, "when greater than n (only best_of == n)");
  return {};
}

// --- Not supported yet (structured output / tools). ---

ApiError EmptyArrayOnly(const Fields& f, std::string_view key) {
  const json& v = Value(f, key);
  if (v.is_array() && v.empty()) return {};
  return f.Error(key, kStructuredLater);
}

ApiError NoneOrAutoOnly(const Fields& f, std::string_view key) {
  const json& v = Value(f, key);
  if (v.is_string() && (v == "none" || v == "auto")) return {};
  return f.Error(key, kStructuredLater);
}

ApiError TextFormatOnly(const Fields& f, std::string_view key) {
  const json& v = Value(f, key);
  if (v.is_object() && v.size() == 1 && v.contains("type") && v["type"] == "text") return {};
  return f.Error(key, kStructuredLater);
}

using FS = FieldSupport;
constexpr unsigned kC = kOnCompletions, kH = kOnChat, kB = kOnBoth;

// An implemented field: read by openai_request.cc's field parsers.
constexpr FieldSpec Impl(std::string_view name, unsigned endpoints) {
  return {name, endpoints, FS::kImplemented, nullptr, "", ""};
}

// Per endpoint: the OpenAI reference's fields (completions, then chat), then the extensions.
constexpr FieldSpec kFields[] = {
    // Both endpoints.
    Impl("model", kB),  // the served model or a LoRA adapter (404 otherwise, Api::CheckModel)
    Impl("max_tokens", kB),
    Impl("temperature", kB),
    Impl("top_p", kB),
    Impl("n", kB),
    Impl("stream", kB),
    Impl("stream_options", kB),  // include_usage
    Impl("logprobs", kB),
    Impl("stop", kB),
    Impl("presence_penalty", kB),
    Impl("frequency_penalty", kB),
    Impl("logit_bias", kB),
    Impl("seed", kB),
    {"user", kB, FS::kIgnored, IgnoredString, "", R"("user-1")"},
    // Completions only.
    Impl("prompt", kC),
    {"suffix", kC, FS::kUnsupported, SuffixEmptyOnly, R"("tail")", R"("")"},
    {"best_of", kC, FS::kUnsupported, BestOfEqualToN, "3", "1"},
    Impl("echo", kC),
    // Chat only.
    Impl("messages", kH),
    Impl("max_completion_tokens", kH),
    Impl("top_logprobs", kH),
    {"store", kH, FS::kUnsupported, StoreFalseOnly, "true", "false"},
    {"metadata", kH, FS::kIgnored, IgnoredObject, "", R"({"k":"v"})"},
    {"service_tier", kH, FS::kUnsupported, ServiceTierAutoOrDefault, R"("flex")", R"("auto")"},
    {"reasoning_effort", kH, FS::kUnsupported, RefuseAny, R"("low")", ""},
    {"verbosity", kH, FS::kUnsupported, RefuseAny, R"("low")", ""},
    {"modalities", kH, FS::kUnsupported, TextModalityOnly, R"(["text","audio"])", R"(["text"])"},
    {"audio", kH, FS::kUnsupported, RefuseAny, R"({"voice":"alloy","format":"wav"})", ""},
    {"prediction", kH, FS::kUnsupported, RefuseAny, R"({"type":"content","content":"x"})", ""},
    {"web_search_options", kH, FS::kUnsupported, RefuseAny, "{}", ""},
    {"safety_identifier", kH, FS::kIgnored, IgnoredString, "", R"("u-1")"},
    {"prompt_cache_key", kH, FS::kIgnored, IgnoredString, "", R"("k")"},  // caching is automatic
    {"prompt_cache_retention", kH, FS::kUnsupported, CacheRetentionInMemory, R"("24h")",
     R"("in_memory")"},
    {"response_format", kH, FS::kNotYet, TextFormatOnly, R"({"type":"json_object"})",
     R"({"type":"text"})"},
    {"tools", kH, FS::kNotYet, EmptyArrayOnly, R"([{"type":"function","function":{"name":"f"}}])",
     "[]"},
    {"tool_choice", kH, FS::kNotYet, NoneOrAutoOnly, R"("required")", R"("none")"},
    {"parallel_tool_calls", kH, FS::kIgnored, IgnoredBool, "", "true"},  // only qualifies tools
    {"functions", kH, FS::kNotYet, EmptyArrayOnly, R"([{"name":"f"}])", "[]"},
    {"function_call", kH, FS::kNotYet, NoneOrAutoOnly, R"({"name":"f"})", R"("auto")"},
    // Extensions (Strata's and vLLM's).
    Impl("top_k", kB),
    Impl("min_p", kB),
    Impl("repetition_penalty", kB),
    Impl("ignore_eos", kB),
    Impl("stop_token_ids", kB),
    Impl("priority", kB),
    Impl("deadline_ms", kB),
    Impl("return_token_ids", kB),
    Impl("lora", kB),  // a LoRA adapter by name (Api::ResolveAdapter)
    Impl("chat_template_kwargs", kH),
    Impl("add_generation_prompt", kH),
};

}  // namespace

std::string_view FieldSupportName(FieldSupport s) {
  static constexpr auto kNames = EnumNames<FieldSupport::kNotYet>(
      "implemented", "ignored", "unsupported", "not supported yet");
  return EnumName(kNames, s);
}

std::span<const FieldSpec> RequestFieldTable() { return kFields; }

bool OnEndpoint(const FieldSpec& spec, Endpoint endpoint) {
  return (spec.endpoints & (endpoint == Endpoint::kChat ? kOnChat : kOnCompletions)) != 0;
}

ApiError CheckFieldSupport(Endpoint endpoint, const json& body) {
  const Fields fields(body);
  for (const FieldSpec& spec : kFields) {
    if (!spec.check || !OnEndpoint(spec, endpoint) || !fields.Has(spec.name)) continue;
    RETURN_IF_API_ERROR(spec.check(fields, spec.name));
  }
  return {};
}

http::ApiResult<std::vector<engine::sampler::LogitBias>> ParseLogitBias(const json& body,
                                                                        size_t n_vocab) {
  const Fields fields(body);
  const json* obj = nullptr;
  RETURN_IF_API_ERROR(fields.Object("logit_bias", &obj));
  std::vector<engine::sampler::LogitBias> out;
  if (!obj) return out;
  out.reserve(obj->size());
  for (const auto& [key, v] : obj->items()) {
    int64_t id = -1;
    auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (ec != std::errc() || end != key.data() + key.size())
      return fields.Error("logit_bias",
                          fmt::format("keys must be token ids (decimal integers), got '{}'", key));
    if (id < 0 || static_cast<uint64_t>(id) >= n_vocab)
      return fields.Error("logit_bias",
                          fmt::format("token id {} is out of the vocabulary [0, {})", id, n_vocab));
    // json-access: is_number checked first
    if (!v.is_number() || !std::isfinite(v.get<double>()) ||
        // json-access: is_number checked first
        std::fabs(v.get<double>()) > engine::sampler::kMaxLogitBias)
      return fields.Error("logit_bias",
                          fmt::format("the bias of token {} must be a number in [-100, 100]", id));
    // json-access: is_number checked
    out.push_back({.id = static_cast<int32_t>(id), .bias = static_cast<float>(v.get<double>())});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  return out;
}

}  // namespace strata::server
