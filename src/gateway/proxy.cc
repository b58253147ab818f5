#include "gateway/proxy.h"

#include <fmt/format.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <cstdio>
#include <exception>
#include <limits>
#include <nlohmann/json.hpp>

#include "base/ascii.h"
#include "base/capped_copy.h"
#include "base/enum_names.h"
#include "http/json_fields.h"
#include "http/openai_error.h"
#include "http/sse.h"

namespace strata::gateway {

namespace asio = boost::asio;
using Headers = std::vector<std::pair<std::string, std::string>>;

// ------------------------------------------------------------------------------------------------
// Cancel

void Cancel::Fire() {
  std::map<uint64_t, std::function<void()>> subs;
  {
    MutexLock lock(&mu_);
    if (fired_) return;
    fired_ = true;
    subs.swap(subs_);
  }
  for (auto& [id, fn] : subs) fn();
}

bool Cancel::fired() const {
  MutexLock lock(&mu_);
  return fired_;
}

uint64_t Cancel::Subscribe(std::function<void()> fn) {
  {
    MutexLock lock(&mu_);
    if (!fired_) {
      const uint64_t id = next_id_++;
      subs_.emplace(id, std::move(fn));
      return id;
    }
  }
  fn();
  return 0;
}

void Cancel::Unsubscribe(uint64_t id) {
  MutexLock lock(&mu_);
  subs_.erase(id);
}

std::string_view UpstreamKindName(UpstreamResult::Kind k) {
  static constexpr auto kNames = EnumNames<UpstreamResult::Kind::kClientGone>(
      "done", "retryable", "failed_mid_stream", "client_gone");
  return EnumName(kNames, k, "unknown");
}

namespace {

// Response headers passed from the replica to the client (content-type travels on its own).
bool Forwarded(std::string_view lower_name) {
  static constexpr std::string_view kNames[] = {"cache-control", "retry-after", "x-request-id"};
  for (std::string_view n : kNames)
    if (lower_name == n) return true;
  return false;
}

bool StartsWithNoCase(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (AsciiLower(s[i]) != prefix[i]) return false;
  }
  return true;
}

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Reads `usage.prompt_tokens` / `usage.completion_tokens` and the choices' non-null
// `finish_reason`s from a JSON text, when it has them.
void ParseUsage(std::string_view text, UpstreamResult* r) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return;
  http::Fields f(j);
  const nlohmann::json* choices = nullptr;
  if (f.Array("choices", &choices).ok() && choices != nullptr) {
    for (const nlohmann::json& c : *choices) {
      std::string reason;
      if (!http::Fields(c).String("finish_reason", &reason).ok() || reason.empty()) continue;
      if (r->finish_reasons.size() < kMaxFinishReasons) r->finish_reasons.push_back(reason);
    }
  }
  const nlohmann::json* usage = nullptr;
  if (!f.Object("usage", &usage).ok() || usage == nullptr) return;
  http::Fields u(*usage, "usage.");
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  int64_t prompt = -1, completion = -1;
  if (u.Int("prompt_tokens", 0, kMax, &prompt).ok()) r->prompt_tokens = prompt;
  if (u.Int("completion_tokens", 0, kMax, &completion).ok()) r->completion_tokens = completion;
}

// Whether an SSE event may carry usage or a finish reason (cheap test before a JSON parse: a
// finish_reason that is null is not one).
bool MayCarryAnswerFacts(std::string_view e) {
  return e.find("\"usage\"") != std::string_view::npos ||
         e.find("\"finish_reason\":\"") != std::string_view::npos;
}

std::string MidStreamErrorEvent(std::string_view message) {
  nlohmann::json e = {{"error",
                       {{"message", fmt::format("upstream failed mid-stream: {}", message)},
                        {"type", "server_error"},
                        {"param", nullptr},
                        {"code", "upstream_error"}}}};
  return http::SseEvent(e.dump());
}

// Where complete SSE events end in a byte stream split anywhere (LF, CR or CRLF line ends): an
// SSE stream is relayed event by event, so a failure mid-stream never leaves half an event in
// front of the error event.
class SseBoundary {
 public:
  // Scans the next bytes of the stream; returns how many of them end with the last complete
  // event among them (0: none completed).
  size_t Scan(std::string_view bytes) {
    size_t end = 0;
    for (size_t i = 0; i < bytes.size(); ++i) {
      const char c = bytes[i];
      if (c == '\n' && last_cr_) {  // the LF of a CRLF
        last_cr_ = false;
        if (cr_ended_event_) end = i + 1;
        continue;
      }
      last_cr_ = c == '\r';
      cr_ended_event_ = false;
      if (c == '\n' || c == '\r') {
        if (at_line_start_) {  // an empty line: the event is complete
          end = i + 1;
          cr_ended_event_ = last_cr_;
        }
        at_line_start_ = true;
      } else {
        at_line_start_ = false;
      }
    }
    return end;
  }

 private:
  bool at_line_start_ = true, last_cr_ = false, cr_ended_event_ = false;
};

// The state of one relayed response: what the replica sent, what reached the client.
class Relay {
 public:
  Relay(const UpstreamOptions& o, std::shared_ptr<http::Responder> out, Headers extra,
        Clock::time_point start)
      : o_(o), out_(std::move(out)), extra_(std::move(extra)), start_(start) {}

  Status OnHead(const http::ResponseHead& h);
  Status OnBody(std::string_view piece);
  UpstreamResult Finish(const http::HttpResult& hr, bool stopping, Clock::time_point deadline);

 private:
  enum class Mode { kBuffer, kStream, kCapture };
  Status Stream(std::string_view piece);
  // Writes bytes of the stream to the client (Begin first), counting SSE events and their usage.
  void Emit(std::string bytes);
  void BeginStream();
  Headers ClientHeaders() const;
  UpstreamResult Failed(const http::HttpResult& hr, bool stopping, Clock::time_point deadline);
  UpstreamResult Completed();

  const UpstreamOptions& o_;
  std::shared_ptr<http::Responder> out_;
  Headers extra_;
  Clock::time_point start_;
  UpstreamResult r_;
  Mode mode_ = Mode::kBuffer;
  bool sse_ = false, begun_ = false, capture_full_ = false, client_gone_ = false;
  bool copy_ok_ = true;  // non-SSE stream: `body_` holds a copy for the usage (until too large)
  std::string body_;
  http::SseParser sse_parser_{1u << 20};
  bool sse_ok_ = true;
  std::vector<std::string> events_;
  SseBoundary boundary_;
  std::string pending_;  // SSE bytes after the last complete event (not yet written)
  bool aligned_ = true;  // false after an event longer than kMaxPendingEvent: passed through
};

constexpr size_t kMaxPendingEvent = 1u << 20;

constexpr size_t kMaxUsageCopy = 1u << 20;

Status Relay::OnHead(const http::ResponseHead& h) {
  r_.http_status = h.status;
  r_.header_s = Since(start_);
  r_.content_type = std::string(h.Header("content-type"));
  for (const auto& [k, v] : h.headers)
    if (Forwarded(k)) r_.headers.emplace_back(k, v);
  sse_ = StartsWithNoCase(r_.content_type, "text/event-stream");
  const bool sized = h.content_length.has_value() && *h.content_length <= o_.max_buffered_body;
  const bool no_body = h.status == 204 || h.status == 304;  // sent whole, with their status
  if (h.status >= 500) {
    mode_ = Mode::kCapture;
  } else if (h.status >= 200 && h.status < 300 && !no_body && (sse_ || !sized)) {
    mode_ = Mode::kStream;
  } else {
    mode_ = Mode::kBuffer;
    if (h.content_length && *h.content_length > o_.max_buffered_body)
      return Status::ResourceExhausted(
          fmt::format("upstream {} response body of {} bytes is over the {}-byte bound", h.status,
                      *h.content_length, o_.max_buffered_body));
  }
  return Status::Ok();
}

Status Relay::OnBody(std::string_view piece) {
  r_.body_bytes += static_cast<int64_t>(piece.size());
  switch (mode_) {
    case Mode::kCapture:
      body_.append(piece.substr(0, o_.max_error_body - std::min(o_.max_error_body, body_.size())));
      if (body_.size() < o_.max_error_body) return Status::Ok();
      capture_full_ = true;  // enough to relay; the rest is not read
      return Status::ResourceExhausted("5xx body captured");
    case Mode::kBuffer:
      if (body_.size() + piece.size() > o_.max_buffered_body)
        return Status::ResourceExhausted(
            fmt::format("upstream response body over the {}-byte bound", o_.max_buffered_body));
      body_.append(piece);
      return Status::Ok();
    case Mode::kStream:
      return Stream(piece);
  }
  return Status::Ok();
}

Headers Relay::ClientHeaders() const {
  Headers h = r_.headers;
  h.insert(h.end(), extra_.begin(), extra_.end());
  return h;
}

void Relay::BeginStream() {
  begun_ = true;
  r_.first_chunk_s = Since(start_);
  out_->Begin(r_.content_type.empty() ? "application/octet-stream" : r_.content_type,
              ClientHeaders());
}

Status Relay::Stream(std::string_view piece) {
  if (out_->closed()) {
    client_gone_ = true;
    return Status::Unavailable("client disconnected");
  }
  if (!sse_) {
    if (copy_ok_ && body_.size() + piece.size() <= kMaxUsageCopy) {
      body_.append(piece);
    } else {
      copy_ok_ = false;
      body_.clear();
    }
    Emit(std::string(piece));  // at the first body byte: a failure before it stays retryable
    return Status::Ok();
  }
  if (!aligned_) {
    Emit(std::string(piece));
    return Status::Ok();
  }
  pending_.append(piece);
  const size_t end = boundary_.Scan(piece);
  if (end > 0) {
    const size_t n = pending_.size() - piece.size() + end;
    Emit(pending_.substr(0, n));
    pending_.erase(0, n);
  } else if (pending_.size() > kMaxPendingEvent) {
    aligned_ = false;  // a hostile or odd stream: relay it as it comes
    Emit(std::exchange(pending_, {}));
  }
  return Status::Ok();
}

void Relay::Emit(std::string bytes) {
  if (!begun_) BeginStream();
  if (sse_ && sse_ok_) {
    events_.clear();
    sse_ok_ = sse_parser_.Feed(bytes, &events_).ok();  // a hostile line: relayed, not parsed
    for (const std::string& e : events_) {
      if (e == "[DONE]") continue;
      ++r_.stream_chunks;
      if (MayCarryAnswerFacts(e)) ParseUsage(e, &r_);
    }
  }
  out_->Write(std::move(bytes));
}

UpstreamResult Relay::Failed(const http::HttpResult& hr, bool stopping,
                             Clock::time_point deadline) {
  Status why = hr.status;
  if (stopping) {
    why = Status::Unavailable("gateway stopping");
  } else if (Clock::now() >= deadline) {
    why =
        Status::DeadlineExceeded(fmt::format("upstream deadline passed: {}", hr.status.message()));
  }
  r_.status = why;
  if (begun_) {
    if (sse_) {  // the partial event in pending_ is dropped: the client's events stay whole
      out_->Write((aligned_ ? "" : "\n\n") + MidStreamErrorEvent(why.message()));
    }
    out_->End();
    r_.kind = UpstreamResult::Kind::kFailedMidStream;
    return std::move(r_);
  }
  r_.kind = UpstreamResult::Kind::kRetryable;
  if (mode_ != Mode::kCapture) r_.body.clear();
  return std::move(r_);
}

UpstreamResult Relay::Completed() {
  switch (mode_) {
    case Mode::kCapture:
      r_.kind = UpstreamResult::Kind::kRetryable;
      r_.status = Status::Unavailable(fmt::format("upstream answered {}", r_.http_status));
      r_.body = std::move(body_);
      return std::move(r_);
    case Mode::kBuffer: {
      ParseUsage(body_, &r_);
      http::HttpResponse resp;
      resp.status = r_.http_status;
      if (!r_.content_type.empty()) resp.content_type = r_.content_type;
      resp.headers = ClientHeaders();
      resp.body = std::move(body_);
      r_.first_chunk_s = Since(start_);
      out_->Respond(std::move(resp));
      break;
    }
    case Mode::kStream:
      if (!pending_.empty())
        Emit(std::exchange(pending_, {}));  // a last event without its blank line
      if (!begun_) BeginStream();
      out_->End();
      if (!sse_ && copy_ok_) ParseUsage(body_, &r_);
      break;
  }
  r_.kind = UpstreamResult::Kind::kDone;
  r_.status = Status::Ok();
  return std::move(r_);
}

UpstreamResult Relay::Finish(const http::HttpResult& hr, bool stopping,
                             Clock::time_point deadline) {
  UpstreamResult r;
  const bool gone = client_gone_ || (hr.aborted && !stopping);
  if (gone) {
    if (begun_) out_->End();
    r_.kind = UpstreamResult::Kind::kClientGone;
    r_.status = Status::Unavailable("client disconnected");
    r = std::move(r_);
  } else if (!hr.status.ok() && !capture_full_) {
    r = Failed(hr, stopping, deadline);
  } else {
    r = Completed();
  }
  r.total_s = Since(start_);
  return r;
}

}  // namespace

http::HttpResponse KeptResponse(const UpstreamResult& r, Headers extra_headers) {
  http::HttpResponse resp;
  if (r.http_status >= 500) {
    resp.status = r.http_status;
    if (!r.content_type.empty()) resp.content_type = r.content_type;
    resp.headers = r.headers;
    resp.body = r.body;
  } else {
    const bool late = r.status.code() == StatusCode::kDeadlineExceeded;
    resp = http::ErrorResponse(late ? 504 : 502,
                               fmt::format("upstream replica failed: {}", r.status.message()));
  }
  resp.headers.insert(resp.headers.end(), extra_headers.begin(), extra_headers.end());
  return resp;
}

namespace {

// The client of a Fetch: keeps what the relay would have sent. Past `max_body` bytes it reports
// itself closed, so the relay stops reading (the call ends kClientGone, turned into kRetryable).
// Touched by the relay on the upstream thread only; the lock keeps the contract of Responder.
class CaptureResponder final : public http::Responder {
 public:
  explicit CaptureResponder(size_t max_body) : max_body_(max_body) {}

  void Respond(http::HttpResponse r) override {
    MutexLock lock(&mu_);
    body_.bytes = std::move(r.body);
  }
  void Begin(std::string, Headers) override {}
  void Write(std::string chunk) override {
    MutexLock lock(&mu_);
    body_.Append(chunk, max_body_);
  }
  void End() override {}
  void OnClose(std::function<void()>) override {}
  bool closed() const override {
    MutexLock lock(&mu_);
    return body_.over;
  }
  void Post(std::function<void()> fn) override { fn(); }

  bool over() const { return closed(); }
  std::string TakeBody() {
    MutexLock lock(&mu_);
    return std::exchange(body_.bytes, {});
  }

 private:
  const size_t max_body_;
  mutable Mutex mu_;
  CappedCopy body_ GUARDED_BY(mu_);
};

}  // namespace

// ------------------------------------------------------------------------------------------------
// Upstreams

Upstreams::Upstreams() : Upstreams(UpstreamOptions{}) {}

Upstreams::Upstreams(UpstreamOptions options) : options_(options) {}

Upstreams::~Upstreams() { Stop(); }

void Upstreams::Start() {
  if (running_.load() || stopping_.load()) return;
  work_ = std::make_unique<asio::executor_work_guard<asio::io_context::executor_type>>(
      io_.get_executor());
  running_.store(true);
  thread_ = std::thread([this] {
    for (;;) {
      try {
        io_.run();
        return;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "strata gateway: exception on the upstream thread: %s\n", e.what());
      } catch (...) {
        std::fputs("strata gateway: unknown exception on the upstream thread\n", stderr);
      }
    }
  });
}

void Upstreams::Stop() {
  if (!running_.load() || stopping_.exchange(true)) return;
  asio::post(io_, [this] {
    for (auto& [id, abort] : active_) abort->Abort();
  });
  const auto until = Clock::now() + std::chrono::seconds(2);
  while (in_flight_.load() > 0 && Clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  work_.reset();
  io_.stop();
  if (thread_.joinable()) thread_.join();
  running_.store(false);
}

Result<std::shared_ptr<http::HttpClient>> Upstreams::ClientFor(const std::string& url) {
  auto it = clients_.find(url);
  if (it != clients_.end()) return it->second;
  Result<http::Url> u = http::ParseUrl(url);
  if (!u.ok()) return u.status();
  auto client = std::make_shared<http::HttpClient>(io_, *u, "");
  clients_.emplace(url, client);
  return client;
}

void Upstreams::Forget(const std::string& url) {
  asio::post(io_, [this, url] { clients_.erase(url); });
}

void Upstreams::Call(UpstreamCall c, std::shared_ptr<http::Responder> out, Headers extra_headers,
                     std::shared_ptr<Cancel> cancel, std::function<void(UpstreamResult)> done) {
  in_flight_.fetch_add(1);
  if (!running_.load() || stopping_.load() || out == nullptr) {
    in_flight_.fetch_sub(1);
    UpstreamResult r;
    r.kind = UpstreamResult::Kind::kRetryable;
    r.status = out == nullptr ? Status::InvalidArgument("Upstreams::Call: no responder")
                              : Status::Unavailable("gateway upstreams not running");
    done(std::move(r));
    return;
  }
  asio::co_spawn(io_,
                 Run(std::move(c), std::move(out), std::move(extra_headers), std::move(cancel),
                     std::move(done)),
                 asio::detached);
}

void Upstreams::Fetch(UpstreamCall c, std::shared_ptr<Cancel> cancel,
                      std::function<void(UpstreamResult)> done) {
  auto capture = std::make_shared<CaptureResponder>(options_.max_buffered_body);
  const size_t bound = options_.max_buffered_body;
  Call(std::move(c), capture, {}, cancel,
       [capture, cancel, bound, done = std::move(done)](UpstreamResult r) {
         using Kind = UpstreamResult::Kind;
         const bool gone = r.kind == Kind::kClientGone && cancel && cancel->fired();
         if (capture->over() && !gone) {  // whether or not the relay read further
           r.kind = Kind::kRetryable;
           r.status = Status::ResourceExhausted(
               fmt::format("upstream response body over the {}-byte bound", bound));
           r.body.clear();
         } else if (r.kind == Kind::kFailedMidStream) {
           r.kind = Kind::kRetryable;  // nothing reached a client
           r.body.clear();
         } else if (r.kind == Kind::kDone) {
           r.body = capture->TakeBody();
         }
         done(std::move(r));
       });
}

asio::awaitable<void> Upstreams::Run(UpstreamCall c, std::shared_ptr<http::Responder> out,
                                     Headers extra_headers, std::shared_ptr<Cancel> cancel,
                                     std::function<void(UpstreamResult)> done) {
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline =
      c.deadline == Clock::time_point{} ? start + options_.default_timeout : c.deadline;
  Relay relay(options_, out, std::move(extra_headers), start);
  auto abort = std::make_shared<http::RequestAbort>();
  const uint64_t key = next_active_++;
  active_.emplace(key, abort.get());
  if (stopping_.load()) abort->Abort();
  uint64_t sub = 0;
  if (cancel) {
    std::weak_ptr<http::RequestAbort> weak = abort;
    sub = cancel->Subscribe([ex = io_.get_executor(), weak] {
      asio::post(ex, [weak] {
        if (auto a = weak.lock()) a->Abort();
      });
    });
    if (cancel->fired()) abort->Abort();  // gone before the call started: never connect
  }
  http::HttpResult hr;
  Result<std::shared_ptr<http::HttpClient>> client = ClientFor(c.url);  // held: Forget may run
  if (!client.ok()) {
    hr.status = client.status();
  } else {
    http::HttpClient::RequestOptions ro;
    ro.headers = std::move(c.headers);
    if (!c.api_key.empty()) ro.headers.emplace_back("authorization", "Bearer " + c.api_key);
    ro.on_head = [&relay](const http::ResponseHead& h) { return relay.OnHead(h); };
    ro.deliver_error_body = true;
    ro.max_header_bytes = static_cast<uint32_t>(
        std::min<size_t>(options_.max_header_bytes, std::numeric_limits<uint32_t>::max()));
    ro.abort = abort.get();
    hr = co_await (*client)->Request(
        c.method, c.path, std::move(c.body), deadline,
        [&relay](std::string_view piece) { return relay.OnBody(piece); }, std::move(ro));
  }
  if (cancel) cancel->Unsubscribe(sub);
  active_.erase(key);
  UpstreamResult r = relay.Finish(hr, stopping_.load() && !(cancel && cancel->fired()), deadline);
  done(std::move(r));
  in_flight_.fetch_sub(1);
}

}  // namespace strata::gateway
