// OtlpReceiver: see otlp_receiver.h.
#include "testing/otlp_receiver.h"

#include <charconv>
#include <utility>

#include "http/json_fields.h"

namespace strata::testing {
namespace {

using nlohmann::json;

std::optional<int64_t> ParseInt(const std::string& s) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// Reads a field that OTLP/JSON writes as a decimal string (64-bit integers).
Status ReadDecimal(const http::Fields& f, std::string_view key, int64_t* out) {
  std::string s;
  if (auto e = f.String(key, &s); !e.ok()) return e.status();
  if (s.empty()) return Status::Ok();
  auto v = ParseInt(s);
  if (!v) return Status::InvalidArgument(std::string(key) + ": not a decimal string");
  *out = *v;
  return Status::Ok();
}

Status ReadAttributes(const http::Fields& f, std::map<std::string, json>* out) {
  const json* list = nullptr;
  if (auto e = f.Array("attributes", &list); !e.ok()) return e.status();
  if (list == nullptr) return Status::Ok();
  for (const auto& item : *list) {
    http::Fields a(item, "attribute.");
    std::string key;
    const json* value = nullptr;
    if (auto e = a.String("key", &key); !e.ok()) return e.status();
    if (auto e = a.Object("value", &value); !e.ok()) return e.status();
    if (key.empty() || value == nullptr) return Status::InvalidArgument("attribute without key");
    (*out)[key] = *value;
  }
  return Status::Ok();
}

Status ReadEvents(const http::Fields& f, std::vector<ReceivedEvent>* out) {
  const json* list = nullptr;
  if (auto e = f.Array("events", &list); !e.ok()) return e.status();
  if (list == nullptr) return Status::Ok();
  for (const auto& item : *list) {
    http::Fields ev(item, "event.");
    ReceivedEvent event;
    if (auto e = ev.String("name", &event.name); !e.ok()) return e.status();
    if (Status s = ReadDecimal(ev, "timeUnixNano", &event.time_unix_ns); !s.ok()) return s;
    out->push_back(std::move(event));
  }
  return Status::Ok();
}

Status ReadSpan(const json& item, const std::string& service, ReceivedSpan* span) {
  http::Fields f(item, "span.");
  span->service = service;
  for (auto [key, out] : {std::pair{"traceId", &span->trace_id},
                          {"spanId", &span->span_id},
                          {"parentSpanId", &span->parent_span_id},
                          {"traceState", &span->trace_state},
                          {"name", &span->name}}) {
    if (auto e = f.String(key, out); !e.ok()) return e.status();
  }
  if (auto e = f.Int("kind", 0, 5, &span->kind); !e.ok()) return e.status();
  if (Status s = ReadDecimal(f, "startTimeUnixNano", &span->start_unix_ns); !s.ok()) return s;
  if (Status s = ReadDecimal(f, "endTimeUnixNano", &span->end_unix_ns); !s.ok()) return s;
  if (Status s = ReadAttributes(f, &span->attributes); !s.ok()) return s;
  if (Status s = ReadEvents(f, &span->events); !s.ok()) return s;
  const json* status = nullptr;
  if (auto e = f.Object("status", &status); !e.ok()) return e.status();
  if (status != nullptr) {
    http::Fields st(*status, "status.");
    if (auto e = st.Int("code", 0, 2, &span->status_code); !e.ok()) return e.status();
    if (auto e = st.String("message", &span->status_message); !e.ok()) return e.status();
  }
  if (span->trace_id.size() != 32 || span->span_id.size() != 16) {
    return Status::InvalidArgument("span ids of the wrong length");
  }
  return Status::Ok();
}

Status ReadResourceSpans(const json& rs, std::vector<ReceivedSpan>* out) {
  http::Fields f(rs, "resourceSpans.");
  const json* resource = nullptr;
  if (auto e = f.Object("resource", &resource); !e.ok()) return e.status();
  std::map<std::string, json> resource_attrs;
  if (resource != nullptr) {
    if (Status s = ReadAttributes(http::Fields(*resource), &resource_attrs); !s.ok()) return s;
  }
  std::string service;
  if (auto it = resource_attrs.find("service.name"); it != resource_attrs.end()) {
    if (auto e = http::Fields(it->second).String("stringValue", &service); !e.ok()) {
      return e.status();
    }
  }
  const json* scopes = nullptr;
  if (auto e = f.Array("scopeSpans", &scopes); !e.ok()) return e.status();
  if (scopes == nullptr) return Status::Ok();
  for (const auto& scope : *scopes) {
    const json* spans = nullptr;
    if (auto e = http::Fields(scope).Array("spans", &spans); !e.ok()) return e.status();
    if (spans == nullptr) continue;
    for (const auto& item : *spans) {
      ReceivedSpan span;
      if (Status s = ReadSpan(item, service, &span); !s.ok()) return s;
      out->push_back(std::move(span));
    }
  }
  return Status::Ok();
}

}  // namespace

std::optional<std::string> ReceivedSpan::Str(const std::string& key) const {
  auto it = attributes.find(key);
  if (it == attributes.end()) return std::nullopt;
  std::string v;
  if (!http::Fields(it->second).String("stringValue", &v).ok() ||
      !http::Fields(it->second).Has("stringValue")) {
    return std::nullopt;
  }
  return v;
}

std::optional<int64_t> ReceivedSpan::Int(const std::string& key) const {
  auto it = attributes.find(key);
  if (it == attributes.end()) return std::nullopt;
  std::string v;
  if (!http::Fields(it->second).String("intValue", &v).ok()) return std::nullopt;
  return ParseInt(v);
}

std::optional<double> ReceivedSpan::Double(const std::string& key) const {
  auto it = attributes.find(key);
  if (it == attributes.end()) return std::nullopt;
  double v = 0;
  http::Fields f(it->second);
  if (!f.Has("doubleValue") || !f.Double("doubleValue", http::Range{-1e300, 1e300}, &v).ok()) {
    return std::nullopt;
  }
  return v;
}

std::optional<bool> ReceivedSpan::Bool(const std::string& key) const {
  auto it = attributes.find(key);
  if (it == attributes.end()) return std::nullopt;
  bool v = false;
  http::Fields f(it->second);
  if (!f.Has("boolValue") || !f.Bool("boolValue", &v).ok()) return std::nullopt;
  return v;
}

std::optional<std::vector<std::string>> ReceivedSpan::StrArray(const std::string& key) const {
  auto it = attributes.find(key);
  if (it == attributes.end()) return std::nullopt;
  const json* arr = nullptr;
  if (!http::Fields(it->second).Object("arrayValue", &arr).ok() || arr == nullptr) {
    return std::nullopt;
  }
  const json* values = nullptr;
  if (!http::Fields(*arr).Array("values", &values).ok()) return std::nullopt;
  std::vector<std::string> out;
  if (values == nullptr) return out;
  for (const auto& v : *values) {
    std::string s;
    if (!http::Fields(v).String("stringValue", &s).ok()) return std::nullopt;
    out.push_back(std::move(s));
  }
  return out;
}

Result<std::vector<ReceivedSpan>> DecodeOtlpJson(const std::string& body) {
  json doc = json::parse(body, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return Status::InvalidArgument("not a JSON object");
  const json* list = nullptr;
  if (auto e = http::Fields(doc).Array("resourceSpans", &list); !e.ok()) return e.status();
  if (list == nullptr) return Status::InvalidArgument("resourceSpans: is required");
  std::vector<ReceivedSpan> out;
  for (const auto& rs : *list) {
    if (Status s = ReadResourceSpans(rs, &out); !s.ok()) return s;
  }
  return out;
}

Result<std::unique_ptr<OtlpReceiver>> OtlpReceiver::Start() {
  std::unique_ptr<OtlpReceiver> r(new OtlpReceiver());
  http::HttpServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.io_threads = 2;
  o.max_body_bytes = 64u << 20;
  OtlpReceiver* raw = r.get();
  auto server = http::HttpServer::Start(
      o, [raw](const http::HttpRequest& req, const std::shared_ptr<http::Responder>& out) {
        raw->Handle(req, out);
      });
  if (!server.ok()) return server.status();
  r->server_ = std::move(*server);
  return r;
}

OtlpReceiver::~OtlpReceiver() { Stop(); }

uint16_t OtlpReceiver::port() const { return server_ ? server_->port() : 0; }
std::string OtlpReceiver::endpoint() const { return "http://127.0.0.1:" + std::to_string(port()); }

void OtlpReceiver::Handle(const http::HttpRequest& req,
                          const std::shared_ptr<http::Responder>& out) {
  if (req.method != "POST" || req.path != "/v1/traces") {
    out->Respond(http::HttpResponse{404, "application/json", {}, "{}"});
    return;
  }
  auto decoded = DecodeOtlpJson(req.body);
  std::unique_lock lock(mu_);
  ++requests_;
  cv_.notify_all();
  if (!decoded.ok()) {
    ++bad_requests_;
    lock.unlock();
    out->Respond(http::HttpResponse{400, "application/json", {}, "{}"});
    return;
  }
  if (stall_) {
    held_.push_back(out);
    return;
  }
  int status = default_status_;
  if (!statuses_.empty()) {
    status = statuses_.front();
    statuses_.pop_front();
  }
  http::HttpResponse resp{status, "application/json", {}, "{}"};
  if (status >= 200 && status < 300) {
    batch_sizes_.push_back(decoded->size());
    for (auto& s : *decoded) spans_.push_back(std::move(s));
    cv_.notify_all();
  } else if (!retry_after_.empty()) {
    resp.headers.emplace_back("Retry-After", retry_after_);
  }
  lock.unlock();
  out->Respond(std::move(resp));
}

void OtlpReceiver::AnswerStatuses(std::vector<int> statuses, std::string retry_after) {
  std::lock_guard lock(mu_);
  statuses_.assign(statuses.begin(), statuses.end());
  retry_after_ = std::move(retry_after);
}

void OtlpReceiver::SetDefaultStatus(int status) {
  std::lock_guard lock(mu_);
  default_status_ = status;
}

void OtlpReceiver::Stall(bool on) {
  std::vector<std::shared_ptr<http::Responder>> held;
  {
    std::lock_guard lock(mu_);
    stall_ = on;
    if (!on) held.swap(held_);
  }
  for (auto& r : held) r->Respond(http::HttpResponse{200, "application/json", {}, "{}"});
}

void OtlpReceiver::Stop() {
  std::vector<std::shared_ptr<http::Responder>> held;
  {
    std::lock_guard lock(mu_);
    held.swap(held_);
  }
  held.clear();
  if (server_) server_->Stop();
}

std::vector<ReceivedSpan> OtlpReceiver::spans() const {
  std::lock_guard lock(mu_);
  return spans_;
}

int OtlpReceiver::requests() const {
  std::lock_guard lock(mu_);
  return requests_;
}

int OtlpReceiver::bad_requests() const {
  std::lock_guard lock(mu_);
  return bad_requests_;
}

std::vector<size_t> OtlpReceiver::batch_sizes() const {
  std::lock_guard lock(mu_);
  return batch_sizes_;
}

bool OtlpReceiver::WaitForSpans(size_t n, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return spans_.size() >= n; });
}

bool OtlpReceiver::WaitForRequests(int n, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return requests_ >= n; });
}

}  // namespace strata::testing
