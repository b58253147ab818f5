#include "gateway/shadow.h"

#include <limits>
#include <utility>

#include "base/enum_names.h"
#include "http/json_fields.h"
#include "http/sse.h"

namespace strata::gateway {

using nlohmann::json;

namespace {
// Invalid UTF-8 (never in a parsed body, but never a throw either) becomes U+FFFD.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }
}  // namespace

http::ApiResult<std::string> ShadowBody(const json& body) {
  http::Fields f(body);
  if (!f.IsObject())
    return http::ApiError(Status::InvalidArgument("the request body must be a JSON object"));
  bool stream = false;
  RETURN_IF_API_ERROR(f.Bool("stream", &stream));
  json copy = body;
  copy.erase("stream");
  copy.erase("stream_options");
  copy["temperature"] = 0;
  return Dump(copy);
}

bool IsGreedy(const json& body) {
  double t = -1;
  const bool ok =
      http::Fields(body).Double("temperature", http::Range{0, 1e9}, &t).ok();  // absent: -1
  return ok && t == 0;
}

namespace {

// choices[i] → its index (the `index` field, else its position).
size_t IndexOf(const json& choice, size_t position) {
  int64_t index = static_cast<int64_t>(position);
  if (!http::Fields(choice).Int("index", 0, 1 << 20, &index).ok()) return position;
  return static_cast<size_t>(index);
}

// The text a choice (or a streamed chunk's choice) carries; "" when none.
std::string ChoiceText(Endpoint endpoint, const json& choice, const char* object_key) {
  std::string text;
  if (endpoint != Endpoint::kChat) {
    (void)http::Fields(choice).String("text", &text);
    return text;
  }
  const json* obj = nullptr;
  if (http::Fields(choice).Object(object_key, &obj).ok() && obj)
    (void)http::Fields(*obj).String("content", &text);
  return text;
}

// Appends the choices of one answer (or chunk) to `texts`; false when it has no choices array.
bool AddChoices(Endpoint endpoint, const json& j, const char* object_key,
                std::vector<std::string>* texts) {
  const json* choices = nullptr;
  if (!http::Fields(j).Array("choices", &choices).ok() || choices == nullptr) return false;
  for (size_t i = 0; i < choices->size(); ++i) {
    const json& c = (*choices)[i];
    if (!c.is_object()) continue;
    const size_t index = IndexOf(c, i);
    if (index >= texts->size()) texts->resize(index + 1);
    (*texts)[index] += ChoiceText(endpoint, c, object_key);
  }
  return true;
}

}  // namespace

std::optional<std::vector<std::string>> AnswerTexts(Endpoint endpoint, std::string_view body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  std::vector<std::string> texts;
  if (j.is_discarded() || !AddChoices(endpoint, j, "message", &texts)) return std::nullopt;
  return texts;
}

std::optional<std::vector<std::string>> StreamTexts(Endpoint endpoint, std::string_view sse) {
  http::SseParser parser(1u << 20);
  std::vector<std::string> events;
  if (!parser.Feed(sse, &events).ok()) return std::nullopt;
  std::vector<std::string> texts;
  bool done = false;
  for (const std::string& e : events) {
    if (e == "[DONE]") {
      done = true;
      continue;
    }
    json j = json::parse(e, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return std::nullopt;
    if (http::Fields(j).Has("error")) return std::nullopt;  // the stream failed
    (void)AddChoices(endpoint, j, "delta", &texts);
  }
  if (!done) return std::nullopt;
  return texts;
}

void TeeResponder::Respond(http::HttpResponse r) {
  {
    MutexLock lock(&mu_);
    if (status_ == 0) {
      status_ = r.status;
      copy_.Append(r.body, max_copy_);
    }
  }
  out_->Respond(std::move(r));
}

void TeeResponder::Begin(std::string content_type,
                         std::vector<std::pair<std::string, std::string>> headers) {
  {
    MutexLock lock(&mu_);
    if (status_ == 0) {
      status_ = 200;
      streamed_ = true;
    }
  }
  out_->Begin(std::move(content_type), std::move(headers));
}

void TeeResponder::Write(std::string chunk) {
  {
    MutexLock lock(&mu_);
    copy_.Append(chunk, max_copy_);
  }
  out_->Write(std::move(chunk));
}

void TeeResponder::End() { out_->End(); }

bool TeeResponder::complete() const {
  MutexLock lock(&mu_);
  return status_ != 0 && !copy_.over;
}

bool TeeResponder::streamed() const {
  MutexLock lock(&mu_);
  return streamed_;
}

int TeeResponder::status() const {
  MutexLock lock(&mu_);
  return status_;
}

std::string TeeResponder::body() const {
  MutexLock lock(&mu_);
  return copy_.bytes;
}

bool ShadowSlots::TryAcquire() {
  int n = in_flight_.load();
  while (n < max_)
    if (in_flight_.compare_exchange_weak(n, n + 1)) return true;
  return false;
}

std::string_view ShadowOutcomeName(ShadowOutcome o) {
  static constexpr auto kNames =
      EnumNames<ShadowOutcome::kDropped>("match", "mismatch", "uncompared", "error", "dropped");
  return EnumName(kNames, o, "unknown");
}

ShadowOutcome CompareShadow(bool shadow_ok, const std::optional<std::vector<std::string>>& shadow,
                            const std::optional<std::vector<std::string>>& primary) {
  if (!shadow_ok || !shadow) return ShadowOutcome::kError;
  if (!primary) return ShadowOutcome::kUncompared;
  return *shadow == *primary ? ShadowOutcome::kMatch : ShadowOutcome::kMismatch;
}

}  // namespace strata::gateway
