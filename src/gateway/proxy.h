// gateway/proxy: the gateway's upstream call layer — one io_context and one thread that own every
// outgoing connection, and the relay of one proxied request from a replica to the client.
//
// Ownership: Upstreams owns the upstream io_context, its thread and one http::HttpClient
// (keep-alive pool) per replica URL, created on first use. Cancel is shared (shared_ptr) between
// the front handler and the call.
// Thread contract: Cancel is thread-safe. Upstreams::Call may be called from any thread; the call
// itself, every HttpClient and `done` run on the upstream thread only (so nothing inside locks).
// Start/Stop from one controlling thread. io() is for other parts to co_spawn onto.
// Relay (README.md "Upstream calls"): a 2xx or 4xx response is relayed to the client; a response
// with a Content-Length up to max_buffered_body is sent whole with its status (Respond); any other
// 2xx (SSE, chunked, until-EOF, or larger) is streamed as 200 as it arrives — SSE in whole events,
// others piece by piece (Begin at the first complete event / body byte, then Write, End). 5xx, or a
// transport failure before anything was written, is not relayed (kRetryable). Headers passed on
// from the replica: content-type, cache-control, retry-after, x-request-id; never hop-by-hop ones.
// Fetch: the same call, but the whole response (status, forwarded headers, body up to
// max_buffered_body, SSE or not) is returned in the UpstreamResult instead of relayed — for the
// gateway's own requests (a cascade's first stage, a shadow copy).
// Errors: never thrown; every outcome (refused, timeout, malformed or oversized upstream response,
// client gone) is an UpstreamResult.
#pragma once

// clang-format off
#include <utility>  // std::exchange, used by Boost 1.74's awaitable.hpp: must come before it
// clang-format on

#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "gateway/types.h"
#include "http/client.h"
#include "http/server.h"

namespace strata::gateway {

// A one-shot signal (the client went away) with subscribers. Thread-safe.
class Cancel {
 public:
  void Fire();
  bool fired() const;
  // `fn` runs once: at Fire() (on the firing thread, outside the lock), or at once (inline) if
  // already fired — then the returned id is 0. Returns an id for Unsubscribe.
  uint64_t Subscribe(std::function<void()> fn);
  // After it returns, `id`'s fn will not start (it may be running on the firing thread).
  void Unsubscribe(uint64_t id);

 private:
  mutable Mutex mu_;
  bool fired_ GUARDED_BY(mu_) = false;
  uint64_t next_id_ GUARDED_BY(mu_) = 1;
  std::map<uint64_t, std::function<void()>> subs_ GUARDED_BY(mu_);
};

struct UpstreamCall {
  std::string url;                    // replica base URL, http://host:port
  std::string method = "POST", path;  // "/v1/completions"
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // forwarded (x-strata-tenant, ...)
  std::string api_key;                                       // upstream Bearer ("" = none)
  Clock::time_point deadline;  // default (epoch): now + UpstreamOptions::default_timeout
};

struct UpstreamResult {
  enum class Kind {
    kDone,             // a response (2xx or 4xx) was relayed to the client completely
    kRetryable,        // NOTHING was written to the client: connect/transport error before the
                       // response started, or a 5xx/503 (its status/headers/body kept here)
    kFailedMidStream,  // the upstream failed after the client response started (ended + closed)
    kClientGone        // the client disconnected; the upstream request was cancelled
  };
  Kind kind = Kind::kRetryable;
  int http_status = 0;  // the replica's status; 0 when no response header arrived
  Status status;        // OK for kDone; else what went wrong (Unavailable, DeadlineExceeded, ...)
  // kRetryable with a response header: what the replica sent (body of a 5xx up to
  // max_error_body), so the caller can relay it if it does not retry. Relay it only when
  // http_status >= 500; a kRetryable with a smaller http_status is a transport failure after the
  // header (a short or malformed body): answer 502 then.
  std::string content_type, body;
  std::vector<std::pair<std::string, std::string>> headers;  // the forwarded subset
  double header_s = 0, first_chunk_s = 0, total_s = 0;       // from the call's start (0 = never)
  int64_t prompt_tokens = -1, completion_tokens = -1;  // from `usage` (JSON body or SSE event)
  int64_t stream_chunks = 0;                           // SSE data events relayed (not [DONE])
  int64_t body_bytes = 0;                              // body bytes received from the replica
  // choices[].finish_reason (non-null), in choice order, at most kMaxFinishReasons (tracing).
  std::vector<std::string> finish_reasons;
};

inline constexpr size_t kMaxFinishReasons = 16;

std::string_view UpstreamKindName(UpstreamResult::Kind k);  // "done" | "retryable" | ...

// What to answer the client for a kRetryable result that will not be retried: the replica's 5xx
// as it was kept (status, content-type, forwarded headers, body), else 502 with the OpenAI error
// body naming the failure (504 when the deadline passed); `extra_headers` added either way.
http::HttpResponse KeptResponse(const UpstreamResult& r,
                                std::vector<std::pair<std::string, std::string>> extra_headers);

struct UpstreamOptions {
  size_t max_header_bytes = 64 << 10;    // larger upstream response header: kRetryable
  size_t max_error_body = 64 << 10;      // 5xx body kept up to this (the rest is not read)
  size_t max_buffered_body = 64u << 20;  // 4xx / Content-Length 2xx sent whole up to this
  std::chrono::milliseconds default_timeout{600000};  // for a call without a deadline
};

class Upstreams {
 public:
  Upstreams();
  explicit Upstreams(UpstreamOptions options);
  ~Upstreams();  // Stop()
  Upstreams(const Upstreams&) = delete;
  Upstreams& operator=(const Upstreams&) = delete;

  boost::asio::io_context& io() { return io_; }
  // Starts the upstream thread. Idempotent.
  void Start();
  // Aborts the calls in flight (their `done` runs: kRetryable or kFailedMidStream with
  // Unavailable "gateway stopping"), waits for them (≤ 2 s), stops the io_context and joins the
  // thread. Work others spawned on io() is abandoned (stop it first). Idempotent; never call it
  // from the upstream thread. Start after Stop does nothing.
  void Stop();

  // Runs the call on the upstream thread. 2xx/4xx: relayed to `out` as they arrive (SSE and
  // chunked bodies chunk by chunk, no buffering), with `extra_headers` (x-strata-route,
  // x-strata-replica) and the upstream's content-type / retry-after / x-request-id headers.
  // 5xx or a transport failure before anything was written to `out`: not relayed, kRetryable.
  // `cancel` fired (client gone) → the upstream socket is closed at once (the replica sees the
  // disconnect and cancels), kClientGone. The caller wires out->OnClose to cancel->Fire. `done`
  // runs exactly once, on the upstream thread (inline on the caller's thread when not started or
  // stopped: kRetryable, Unavailable; or for a null `out`: InvalidArgument). `cancel` may be
  // null. `done` must not throw.
  void Call(UpstreamCall c, std::shared_ptr<http::Responder> out,
            std::vector<std::pair<std::string, std::string>> extra_headers,
            std::shared_ptr<Cancel> cancel, std::function<void(UpstreamResult)> done);

  // The same call as Call, but nothing is relayed: the response is returned in `done`'s result.
  // 2xx/4xx received completely (SSE and chunked bodies included) → kDone with http_status,
  // content_type, headers (the forwarded subset) and `body` (the whole body, at most
  // max_buffered_body; a larger one → kRetryable, ResourceExhausted). 5xx → kRetryable with the
  // body kept up to max_error_body, as for Call. A transport failure at any point → kRetryable
  // (Fetch never yields kFailedMidStream: nothing reached a client). `cancel` fired →
  // kClientGone. `done` runs exactly once, on the upstream thread (inline when not running).
  void Fetch(UpstreamCall c, std::shared_ptr<Cancel> cancel,
             std::function<void(UpstreamResult)> done);

  // Drops the keep-alive client of `url` (a replica that left the pool): its idle connections
  // close; calls in flight on it finish first. Any thread.
  void Forget(const std::string& url);

  // Calls running now (any thread).
  int in_flight() const { return in_flight_.load(); }

 private:
  boost::asio::awaitable<void> Run(UpstreamCall c, std::shared_ptr<http::Responder> out,
                                   std::vector<std::pair<std::string, std::string>> extra_headers,
                                   std::shared_ptr<Cancel> cancel,
                                   std::function<void(UpstreamResult)> done);
  // The keep-alive client of `url` (upstream thread only); an error for a malformed URL.
  Result<std::shared_ptr<http::HttpClient>> ClientFor(const std::string& url);

  UpstreamOptions options_;
  boost::asio::io_context io_;
  std::unique_ptr<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  std::thread thread_;
  std::atomic<bool> running_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<int> in_flight_{0};
  // Upstream thread only (declared after io_: destroyed before it).
  std::map<std::string, std::shared_ptr<http::HttpClient>> clients_;
  std::map<uint64_t, http::RequestAbort*> active_;
  uint64_t next_active_ = 1;
};

}  // namespace strata::gateway
