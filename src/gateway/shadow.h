// gateway/shadow: the pieces of request mirroring (README.md "Shadow") — the shadow copy of a
// request (greedy, non-streaming), the answer texts of a completion / chat response (JSON or SSE)
// for the exact-match comparison, a Responder that relays to the client while keeping a bounded
// copy of what it sent (the primary's answer), and the bound on shadow calls in flight.
//
// The orchestration (when to mirror, the Fetch on the shadow pool, metrics) is in gateway.cc.
// Thread contract: the functions are pure; TeeResponder is as thread-safe as a Responder (one
// lock around the copy); ShadowSlots is thread-safe (atomics).
// Errors: a body whose `stream`/`temperature` has the wrong type → ApiError; texts that cannot be
// read (not an answer) → nullopt (the comparison counts an error).
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/capped_copy.h"
#include "base/mutex.h"
#include "gateway/prompt.h"
#include "http/openai_error.h"
#include "http/server.h"

namespace strata::gateway {

// The request for the shadow pool: the client's body with `temperature: 0` and `stream` /
// `stream_options` removed (a non-streaming greedy answer).
http::ApiResult<std::string> ShadowBody(const nlohmann::json& body);

// Whether the client asked for a greedy answer (`temperature` present and 0), so the primary's
// answer can be compared with the shadow's.
bool IsGreedy(const nlohmann::json& body);

// The texts of an answer's choices by `index` (completions `text`, chat `message.content`), or
// nullopt when `body` is not an answer with a `choices` array.
std::optional<std::vector<std::string>> AnswerTexts(Endpoint endpoint, std::string_view body);
// The same, reassembled from an SSE stream's chunks (completions `text`, chat `delta.content`);
// nullopt when the stream has no [DONE] (it did not finish) or a chunk is not JSON.
std::optional<std::vector<std::string>> StreamTexts(Endpoint endpoint, std::string_view sse);

// Relays every call to the client's Responder and keeps a copy of the body it carried (a whole
// response's body, or the streamed chunks), up to `max_copy` bytes (past it the copy is dropped
// and `complete()` is false).
class TeeResponder final : public http::Responder {
 public:
  TeeResponder(std::shared_ptr<http::Responder> out, size_t max_copy)
      : out_(std::move(out)), max_copy_(max_copy) {}

  void Respond(http::HttpResponse r) override;
  void Begin(std::string content_type,
             std::vector<std::pair<std::string, std::string>> headers) override;
  void Write(std::string chunk) override;
  void End() override;
  void OnClose(std::function<void()> cb) override { out_->OnClose(std::move(cb)); }
  bool closed() const override { return out_->closed(); }
  void Post(std::function<void()> fn) override { out_->Post(std::move(fn)); }

  // The copy: the body sent (JSON) or the stream's bytes (SSE); `streamed` says which.
  bool complete() const;
  bool streamed() const;
  int status() const;  // of a whole response; 200 for a stream; 0 before either
  std::string body() const;

 private:
  std::shared_ptr<http::Responder> out_;
  const size_t max_copy_;
  mutable Mutex mu_;
  CappedCopy copy_ GUARDED_BY(mu_);
  bool streamed_ GUARDED_BY(mu_) = false;
  int status_ GUARDED_BY(mu_) = 0;
};

// The bound on shadow calls in flight: a call that finds every slot taken is dropped (counted),
// never queued.
class ShadowSlots {
 public:
  explicit ShadowSlots(int max) : max_(max) {}
  bool TryAcquire();
  void Release() { in_flight_.fetch_sub(1); }
  int in_flight() const { return in_flight_.load(); }

 private:
  const int max_;
  std::atomic<int> in_flight_{0};
};

// The comparison's outcome (the `result` label of strata_gateway:shadow_requests_total).
enum class ShadowOutcome { kMatch, kMismatch, kUncompared, kError, kDropped };
std::string_view ShadowOutcomeName(ShadowOutcome o);  // "match" | "mismatch" | ...

// The outcome of a finished shadow call: kError for a failed call or an unreadable answer;
// kUncompared when `primary` is nullopt (not greedy, not 200, or its copy incomplete); else
// kMatch when every choice's text is equal.
ShadowOutcome CompareShadow(bool shadow_ok, const std::optional<std::vector<std::string>>& shadow,
                            const std::optional<std::vector<std::string>>& primary);

}  // namespace strata::gateway
