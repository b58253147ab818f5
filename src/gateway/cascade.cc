#include "gateway/cascade.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "http/json_fields.h"
#include "http/sse.h"

namespace strata::gateway {

using nlohmann::json;

namespace {
// Invalid UTF-8 (never in a parsed body, but never a throw either) becomes U+FFFD.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }
}  // namespace

namespace {

std::optional<double> Number(const json& v) {
  if (!v.is_number()) return std::nullopt;
  return v.get<double>();  // json-access: is_number checked
}

// Running sums of the signals.
struct SignalSums {
  int64_t tokens = 0, margin_tokens = 0;
  double sum = 0, min = std::numeric_limits<double>::infinity(), margin_sum = 0;

  void Token(const json& logprob) {
    std::optional<double> v = Number(logprob);
    if (!v) return;
    ++tokens;
    sum += *v;
    min = std::min(min, *v);
  }
  // `alts`: the alternatives' logprobs at one position, in any order.
  void Alternatives(std::vector<double> alts) {
    if (alts.size() < 2) return;
    std::partial_sort(alts.begin(), alts.begin() + 2, alts.end(), std::greater<>());
    ++margin_tokens;
    margin_sum += alts[0] - alts[1];
  }
};

// Completions: {"token_logprobs": [lp|null...], "top_logprobs": [{piece: lp}|null ...]}.
void AddCompletionLogprobs(const json& lp, SignalSums* s) {
  http::Fields f(lp);
  const json* values = nullptr;
  const json* tops = nullptr;
  if (f.Array("token_logprobs", &values).ok() && values)
    for (const json& v : *values) s->Token(v);
  if (!f.Array("top_logprobs", &tops).ok() || !tops) return;
  for (const json& top : *tops) {
    if (!top.is_object()) continue;
    std::vector<double> alts;
    for (const auto& [piece, v] : top.items())
      if (std::optional<double> d = Number(v)) alts.push_back(*d);
    s->Alternatives(std::move(alts));
  }
}

// Chat: {"content": [{"logprob": lp, "top_logprobs": [{"logprob": lp}, ...]}, ...]}.
void AddChatLogprobs(const json& lp, SignalSums* s) {
  const json* content = nullptr;
  if (!http::Fields(lp).Array("content", &content).ok() || !content) return;
  for (const json& entry : *content) {
    http::Fields e(entry);
    if (const json* v = e.Find("logprob")) s->Token(*v);
    const json* tops = nullptr;
    if (!e.Array("top_logprobs", &tops).ok() || !tops) continue;
    std::vector<double> alts;
    for (const json& t : *tops)
      if (const json* v = http::Fields(t).Find("logprob"))
        if (std::optional<double> d = Number(*v)) alts.push_back(*d);
    s->Alternatives(std::move(alts));
  }
}

// The choices array of an answer, or nullptr.
json* ChoicesOf(json* answer) {
  if (!answer->is_object()) return nullptr;
  auto it = answer->find("choices");
  return it != answer->end() && it->is_array() ? &*it : nullptr;
}

// Keeps the `k` likeliest alternatives of one completions position ({piece: lp}).
void TrimCompletionTop(json* top, int64_t k) {
  if (!top->is_object() || static_cast<int64_t>(top->size()) <= k) return;
  std::vector<std::pair<double, std::string>> alts;
  for (const auto& [piece, v] : top->items())
    alts.emplace_back(Number(v).value_or(-std::numeric_limits<double>::infinity()), piece);
  std::stable_sort(alts.begin(), alts.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = static_cast<size_t>(k); i < alts.size(); ++i) top->erase(alts[i].second);
}

void TrimLogprobs(Endpoint endpoint, int64_t k, json* lp) {
  if (!lp->is_object()) return;
  const char* key = endpoint == Endpoint::kChat ? "content" : "top_logprobs";
  auto it = lp->find(key);
  if (it == lp->end() || !it->is_array()) return;
  for (json& entry : *it) {
    if (endpoint != Endpoint::kChat) {
      TrimCompletionTop(&entry, k);
      continue;
    }
    if (!entry.is_object()) continue;
    auto tops = entry.find("top_logprobs");
    if (tops != entry.end() && tops->is_array() && static_cast<int64_t>(tops->size()) > k)
      tops->erase(tops->begin() + k, tops->end());  // the server lists them likeliest first
  }
}

// A chunk of the stream: the answer's id/created/model with `object` and `choices`.
json Chunk(const json& answer, std::string_view object, json choices) {
  json c = json::object();
  for (const char* key : {"id", "created", "model", "system_fingerprint"}) {
    auto it = answer.find(key);
    if (it != answer.end()) c[key] = *it;
  }
  c["object"] = object;
  c["choices"] = std::move(choices);
  return c;
}

// One choice's chunk: `delta` (chat) or `text` (completions), logprobs and finish_reason.
json ChoiceChunk(const CascadeAsk& ask, const json& choice) {
  json out = json::object();
  out["index"] = choice.contains("index") ? choice["index"] : json(0);
  out["logprobs"] = choice.contains("logprobs") ? choice["logprobs"] : json(nullptr);
  out["finish_reason"] = choice.contains("finish_reason") ? choice["finish_reason"] : json(nullptr);
  if (ask.endpoint != Endpoint::kChat) {
    out["text"] = choice.contains("text") ? choice["text"] : json("");
    return out;
  }
  json delta = json::object();
  auto msg = choice.find("message");
  if (msg != choice.end() && msg->is_object()) {
    for (const auto& [k, v] : msg->items()) {
      if (k == "role") continue;
      delta[k] = v;
    }
    auto calls = delta.find("tool_calls");  // a streamed tool call carries its index
    if (calls != delta.end() && calls->is_array())
      for (size_t i = 0; i < calls->size(); ++i)
        if ((*calls)[i].is_object() && !(*calls)[i].contains("index")) (*calls)[i]["index"] = i;
  }
  out["delta"] = std::move(delta);
  return out;
}

}  // namespace

http::ApiResult<CascadeFirstStage> FirstStageRequest(Endpoint endpoint, const json& body) {
  http::Fields f(body);
  if (!f.IsObject())
    return http::ApiError(Status::InvalidArgument("the request body must be a JSON object"));
  CascadeFirstStage out;
  CascadeAsk& ask = out.ask;
  ask.endpoint = endpoint;
  RETURN_IF_API_ERROR(f.Bool("stream", &ask.stream));
  const json* options = nullptr;
  RETURN_IF_API_ERROR(f.Object("stream_options", &options));
  if (options)
    RETURN_IF_API_ERROR(
        http::Fields(*options, "stream_options.").Bool("include_usage", &ask.include_usage));
  json rewritten = body;
  rewritten.erase("stream");
  rewritten.erase("stream_options");
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  if (endpoint == Endpoint::kChat) {
    RETURN_IF_API_ERROR(f.Bool("logprobs", &ask.logprobs));
    std::optional<int64_t> top;
    RETURN_IF_API_ERROR(f.Int("top_logprobs", 0, kMax, &top));
    ask.top_logprobs = ask.logprobs ? top.value_or(0) : 0;
    rewritten["logprobs"] = true;
    rewritten["top_logprobs"] = std::max(ask.top_logprobs, kCascadeTopLogprobs);
  } else {
    std::optional<int64_t> top;
    RETURN_IF_API_ERROR(f.Int("logprobs", 0, kMax, &top));
    RETURN_IF_API_ERROR(f.Bool("echo", &ask.echo));
    ask.logprobs = top.has_value();
    ask.top_logprobs = top.value_or(0);
    rewritten["logprobs"] = std::max(ask.top_logprobs, kCascadeTopLogprobs);
  }
  out.body = Dump(rewritten);
  return out;
}

Result<CascadeSignals> ComputeSignals(Endpoint endpoint, const json& answer) {
  http::Fields f(answer);
  const json* choices = nullptr;
  if (!f.IsObject() || !f.Array("choices", &choices).ok() || choices == nullptr)
    return Status::InvalidArgument("the first stage's answer has no `choices` array");
  SignalSums s;
  for (const json& choice : *choices) {
    const json* lp = nullptr;
    if (!http::Fields(choice).Object("logprobs", &lp).ok() || lp == nullptr) continue;
    if (endpoint == Endpoint::kChat)
      AddChatLogprobs(*lp, &s);
    else
      AddCompletionLogprobs(*lp, &s);
  }
  CascadeSignals out;
  out.tokens = s.tokens;
  out.margin_tokens = s.margin_tokens;
  if (s.tokens > 0) {
    out.mean_logprob = s.sum / static_cast<double>(s.tokens);
    out.min_logprob = s.min;
  }
  if (s.margin_tokens > 0) out.margin = s.margin_sum / static_cast<double>(s.margin_tokens);
  const json* usage = nullptr;
  if (f.Object("usage", &usage).ok() && usage) {
    int64_t n = -1;
    if (http::Fields(*usage, "usage.")
            .Int("completion_tokens", 0, std::numeric_limits<int64_t>::max(), &n)
            .ok())
      out.completion_tokens = n;
  }
  return out;
}

std::optional<double> SignalValue(const CascadeSignals& s, CascadeSignal which) {
  switch (which) {
    case CascadeSignal::kMeanLogprob:
      return s.tokens > 0 ? std::optional<double>(s.mean_logprob) : std::nullopt;
    case CascadeSignal::kMinLogprob:
      return s.tokens > 0 ? std::optional<double>(s.min_logprob) : std::nullopt;
    case CascadeSignal::kMargin:
      return s.margin_tokens > 0 ? std::optional<double>(s.margin) : std::nullopt;
  }
  return std::nullopt;
}

void StripLogprobs(const CascadeAsk& ask, json* answer) {
  json* choices = ChoicesOf(answer);
  if (!choices) return;
  for (json& choice : *choices) {
    if (!choice.is_object()) continue;
    auto lp = choice.find("logprobs");
    if (lp == choice.end()) continue;
    if (!ask.logprobs)
      *lp = nullptr;
    else if (ask.top_logprobs < kCascadeTopLogprobs)
      TrimLogprobs(ask.endpoint, ask.top_logprobs, &*lp);
  }
}

std::string AnswerAsSse(const CascadeAsk& ask, const json& answer) {
  const bool chat = ask.endpoint == Endpoint::kChat;
  const std::string_view object = chat ? "chat.completion.chunk" : "text_completion";
  json empty = json::array();
  const json* choices = &empty;
  if (answer.is_object()) {
    auto it = answer.find("choices");
    if (it != answer.end() && it->is_array()) choices = &*it;
  }
  std::string out;
  if (chat) {  // the assistant role of every choice first, as the server streams it
    json first = json::array();
    for (const json& c : *choices) {
      if (!c.is_object()) continue;
      first.push_back({{"index", c.contains("index") ? c["index"] : json(0)},
                       {"delta", {{"role", "assistant"}, {"content", ""}}},
                       {"logprobs", nullptr},
                       {"finish_reason", nullptr}});
    }
    out += http::SseEvent(Dump(Chunk(answer, object, std::move(first))));
  }
  for (const json& c : *choices) {
    if (!c.is_object()) continue;
    out += http::SseEvent(Dump(Chunk(answer, object, json::array({ChoiceChunk(ask, c)}))));
  }
  auto usage = answer.is_object() ? answer.find("usage") : answer.end();
  if (ask.include_usage && usage != answer.end()) {
    json chunk = Chunk(answer, object, json::array());
    chunk["usage"] = *usage;
    out += http::SseEvent(Dump(chunk));
  }
  out += http::kSseDone;
  return out;
}

}  // namespace strata::gateway
