// OtlpReceiver: a small OTLP/HTTP JSON collector for tests (an http::HttpServer on 127.0.0.1 and
// a free port). POST /v1/traces bodies are decoded into ReceivedSpan values (service name from
// the resource, ids, parent, name, kind, times, attributes, events, status). It can be told to
// answer a given status (a queue of statuses, each used once, then `default_status`), to add a
// Retry-After header, or to stall: a stalled request is held unanswered until Unstall() or Stop().
// Requests answered with a non-2xx status are counted but their spans are not recorded (a real
// collector did not accept them).
// Thread contract: thread-safe (the server's I/O threads decode; tests read from any thread).
// Errors: Start returns the server's error; a body that does not decode is answered 400 and
// counted in bad_requests().
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "http/server.h"

namespace strata::testing {

struct ReceivedEvent {
  std::string name;
  int64_t time_unix_ns = 0;
};

struct ReceivedSpan {
  std::string service;                            // resource attribute service.name
  std::string trace_id, span_id, parent_span_id;  // hex; parent "" for a root
  std::string trace_state;
  std::string name;
  int kind = 0;
  int64_t start_unix_ns = 0, end_unix_ns = 0;
  std::map<std::string, nlohmann::json> attributes;  // key -> the OTLP AnyValue object
  std::vector<ReceivedEvent> events;
  int status_code = 0;
  std::string status_message;

  bool Has(const std::string& key) const { return attributes.count(key) != 0; }
  // Typed attribute reads; nullopt when absent or of another type.
  std::optional<std::string> Str(const std::string& key) const;
  std::optional<int64_t> Int(const std::string& key) const;  // intValue (a decimal string)
  std::optional<double> Double(const std::string& key) const;
  std::optional<bool> Bool(const std::string& key) const;
  std::optional<std::vector<std::string>> StrArray(const std::string& key) const;
  double duration_ms() const { return static_cast<double>(end_unix_ns - start_unix_ns) / 1e6; }
};

// Decodes one ExportTraceServiceRequest JSON body. InvalidArgument when it is not one.
Result<std::vector<ReceivedSpan>> DecodeOtlpJson(const std::string& body);

class OtlpReceiver {
 public:
  static Result<std::unique_ptr<OtlpReceiver>> Start();
  ~OtlpReceiver();  // Stop()

  uint16_t port() const;
  std::string endpoint() const;  // "http://127.0.0.1:<port>"

  // Answers the next requests with these statuses, one each, then default_status (200).
  void AnswerStatuses(std::vector<int> statuses, std::string retry_after = {});
  void SetDefaultStatus(int status);
  void Stall(bool on);  // hold requests unanswered (Stall(false) answers the held ones 200)
  void Stop();

  std::vector<ReceivedSpan> spans() const;
  int requests() const;                     // POSTs seen (any answer, stalled included)
  int bad_requests() const;                 // bodies that did not decode
  std::vector<size_t> batch_sizes() const;  // spans per accepted request, in arrival order
  // Waits until at least n spans were accepted; false on timeout.
  bool WaitForSpans(size_t n, std::chrono::milliseconds timeout) const;
  bool WaitForRequests(int n, std::chrono::milliseconds timeout) const;

 private:
  OtlpReceiver() = default;
  void Handle(const http::HttpRequest& req, const std::shared_ptr<http::Responder>& out);

  std::unique_ptr<http::HttpServer> server_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::vector<ReceivedSpan> spans_;
  std::vector<size_t> batch_sizes_;
  std::deque<int> statuses_;
  std::string retry_after_;
  int default_status_ = 200;
  bool stall_ = false;
  std::vector<std::shared_ptr<http::Responder>> held_;
  int requests_ = 0;
  int bad_requests_ = 0;
};

}  // namespace strata::testing
