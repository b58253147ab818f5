// trace/tracer: the bounded span queue and the exporter thread (see tracer.h).
#include "trace/tracer.h"

// clang-format off
#include <utility>  // std::exchange, used by Boost 1.74's awaitable.hpp: must come before it
// clang-format on

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <charconv>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <limits>
#include <mutex>
#include <thread>

#include "http/client.h"

namespace strata::trace {
namespace {

using Clock = std::chrono::steady_clock;
namespace asio = boost::asio;

constexpr std::chrono::milliseconds kFirstBackoff{100};
constexpr std::chrono::milliseconds kMaxBackoff{30000};
constexpr int kMaxRetriesLimit = 16;
constexpr std::chrono::milliseconds kWatchPeriod{20};

// What one POST came to.
enum class Outcome : uint8_t { kDelivered, kRetryable, kFatal };

Outcome Classify(const http::HttpResult& r) {
  if (!r.status.ok()) return Outcome::kRetryable;  // connection refused, reset, timeout
  if (r.http_status >= 200 && r.http_status < 300) return Outcome::kDelivered;
  switch (r.http_status) {
    case 429:
    case 502:
    case 503:
    case 504:
      return Outcome::kRetryable;
    default:
      return Outcome::kFatal;
  }
}

// Retry-After in seconds (the HTTP-date form is not used by collectors; it falls back to backoff).
std::optional<std::chrono::milliseconds> ParseRetryAfter(std::string_view v) {
  int64_t seconds = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), seconds);
  if (ec != std::errc() || end != v.data() + v.size() || seconds < 0) return std::nullopt;
  return std::min<std::chrono::milliseconds>(std::chrono::seconds(seconds), kMaxBackoff);
}

Status Validate(const TracerOptions& o) {
  if (!(o.sample_ratio >= 0.0 && o.sample_ratio <= 1.0)) {
    return Status::InvalidArgument("otlp sample ratio must be in [0, 1]");
  }
  if (o.queue_capacity == 0 || o.queue_bytes == 0 || o.max_batch == 0) {
    return Status::InvalidArgument("otlp queue capacity and batch size must be positive");
  }
  if (o.flush_interval.count() <= 0 || o.export_timeout.count() <= 0) {
    return Status::InvalidArgument("otlp flush interval and export timeout must be positive");
  }
  if (o.max_retries < 0 || o.max_retries > kMaxRetriesLimit) {
    return Status::InvalidArgument("otlp max retries must be in [0, 16]");
  }
  return Status::Ok();
}

}  // namespace

struct Tracer::Impl {
  TracerOptions options;
  http::Url url;
  std::vector<Attribute> resource;

  // Spans are queued encoded, as request bodies being written: `head` then span objects joined
  // by commas (the tail is appended when sent). Full batches wait in `ready`; `open` takes the
  // next spans. Sent bodies' buffers go back to `spare`, so that steady state allocates nothing.
  struct Batch {
    std::string json;
    size_t spans = 0;
  };
  std::string head;  // OtlpRequestHead(resource); const after Start
  mutable std::mutex mu;
  std::condition_variable cv;
  std::deque<Batch> ready;          // guarded by mu; batches of max_batch spans (or fewer)
  Batch open;                       // guarded by mu; the batch spans are appended to
  std::vector<std::string> spare;   // guarded by mu; cleared buffers of sent batches
  size_t queued_spans = 0;          // guarded by mu; the spans of `ready` and `open`
  size_t queued_bytes = 0;          // guarded by mu; the JSON bytes of `ready` and `open`
  bool stopping = false;            // guarded by mu
  Clock::time_point stop_deadline;  // guarded by mu; valid once stopping
  // The same deadline for the exporter's POST watch (steady ticks; max while not stopping).
  std::atomic<int64_t> stop_deadline_ns{std::numeric_limits<int64_t>::max()};

  std::atomic<uint64_t> exported{0};
  std::atomic<uint64_t> dropped_queue_full{0};
  std::atomic<uint64_t> dropped_export_failed{0};
  std::atomic<uint64_t> export_requests{0};
  std::atomic<uint64_t> export_retries{0};

  asio::io_context io;  // the exporter thread's only
  std::unique_ptr<http::HttpClient> client;
  std::thread thread;
  std::once_flag shutdown_once;

  void Run();
  // Takes the next batch (blocks until one is due or the tracer stops); no spans when done.
  Batch NextBatch();
  void Send(Batch* batch);
  // Encodes the spans (max_batch at a time) and appends them to the open batch.
  void Enqueue(std::span<const Span> spans);
  // Appends one encoded span list of `n` spans (requires mu); false when there is no room.
  bool AppendLocked(std::string_view list, size_t n);
  void Recycle(std::string json);
  http::HttpResult Post(std::string* body, std::optional<std::chrono::milliseconds>* retry_after);
  asio::awaitable<void> DoPost(std::string* body, http::HttpClient::RequestOptions ro,
                               http::HttpResult* out, bool* done, asio::steady_timer* watch);
  // Aborts the POST in flight once the shutdown's flush deadline passed.
  asio::awaitable<void> Watch(http::RequestAbort* abort, const bool* done,
                              asio::steady_timer* watch);
  // Sleeps `d`, cut short (returning false) when the stop deadline would pass first.
  bool Backoff(std::chrono::milliseconds d);
};

void Tracer::Impl::Run() {
  // Named so that per-thread tools (top -H, /proc/PID/task/*/comm) can tell the export's CPU from
  // the service's: scripts/bench_gateway.py reads it.
  pthread_setname_np(pthread_self(), "strata-otlp");
  client = std::make_unique<http::HttpClient>(io, url, "");
  while (true) {
    Batch batch = NextBatch();
    if (batch.spans == 0) break;
    Send(&batch);
    Recycle(std::move(batch.json));
  }
  client.reset();
}

Tracer::Impl::Batch Tracer::Impl::NextBatch() {
  std::unique_lock lock(mu);
  const auto due = Clock::now() + options.flush_interval;
  cv.wait_until(lock, due, [&] { return stopping || !ready.empty(); });
  while (ready.empty() && open.spans == 0 && !stopping) {
    cv.wait_for(lock, options.flush_interval, [&] { return stopping || !ready.empty(); });
  }
  if (stopping && Clock::now() >= stop_deadline) {
    dropped_export_failed += queued_spans;  // no time left to send them
    ready.clear();
    open = Batch{};
    queued_spans = queued_bytes = 0;
  }
  Batch batch;
  if (!ready.empty()) {
    batch = std::move(ready.front());
    ready.pop_front();
  } else if (open.spans > 0) {  // the flush interval passed: what there is
    batch = std::exchange(open, Batch{});
  }
  queued_spans -= batch.spans;
  queued_bytes -= batch.json.size();
  return batch;
}

void Tracer::Impl::Recycle(std::string json) {
  constexpr size_t kMaxSpareBytes = size_t{4} << 20;  // a buffer a rare huge batch grew is freed
  constexpr size_t kMaxSpares = 4;
  if (json.capacity() > kMaxSpareBytes) return;
  json.clear();
  std::lock_guard lock(mu);
  if (spare.size() < kMaxSpares) spare.push_back(std::move(json));
}

http::HttpResult Tracer::Impl::Post(std::string* body,
                                    std::optional<std::chrono::milliseconds>* retry_after) {
  http::HttpResult result;
  http::RequestAbort abort;
  http::HttpClient::RequestOptions ro;
  ro.abort = &abort;
  ro.on_head = [retry_after](const http::ResponseHead& head) {
    if (auto v = head.Header("retry-after"); !v.empty()) *retry_after = ParseRetryAfter(v);
    return Status::Ok();
  };
  bool done = false;
  asio::steady_timer watch(io);
  asio::co_spawn(io, DoPost(body, std::move(ro), &result, &done, &watch), asio::detached);
  asio::co_spawn(io, Watch(&abort, &done, &watch), asio::detached);
  io.restart();
  io.run();
  ++export_requests;
  return result;
}

asio::awaitable<void> Tracer::Impl::DoPost(std::string* body, http::HttpClient::RequestOptions ro,
                                           http::HttpResult* out, bool* done,
                                           asio::steady_timer* watch) {
  const auto deadline = Clock::now() + options.export_timeout;
  *out = co_await client->Request(
      "POST", "/v1/traces", body, deadline, [](std::string_view) { return Status::Ok(); },
      std::move(ro));
  *done = true;
  watch->cancel();
}

asio::awaitable<void> Tracer::Impl::Watch(http::RequestAbort* abort, const bool* done,
                                          asio::steady_timer* watch) {
  while (!*done) {
    watch->expires_after(kWatchPeriod);
    boost::system::error_code ec;
    co_await watch->async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (*done) break;
    const int64_t deadline = stop_deadline_ns.load();
    if (Clock::now().time_since_epoch().count() >= deadline) abort->Abort();  // flush time is up
  }
}

bool Tracer::Impl::Backoff(std::chrono::milliseconds d) {
  std::unique_lock lock(mu);
  const auto wake = Clock::now() + d;
  if (stopping && wake >= stop_deadline) return false;
  cv.wait_until(lock, wake, [&] { return stopping && stop_deadline <= wake; });
  return !(stopping && stop_deadline <= wake);
}

void Tracer::Impl::Send(Batch* batch) {
  batch->json.append(OtlpRequestTail());
  std::string* body = &batch->json;  // lent to each POST (no copy of the batch), given back
  const size_t spans = batch->spans;
  std::chrono::milliseconds backoff = kFirstBackoff;
  for (int attempt = 0;; ++attempt) {
    std::optional<std::chrono::milliseconds> retry_after;
    const Outcome outcome = Classify(Post(body, &retry_after));
    if (outcome == Outcome::kDelivered) {
      exported += spans;
      return;
    }
    if (outcome == Outcome::kFatal || attempt >= options.max_retries) break;
    if (!Backoff(retry_after.value_or(backoff))) break;
    backoff = std::min(backoff * 2, kMaxBackoff);
    ++export_retries;
  }
  dropped_export_failed += spans;
}

Tracer::Tracer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Tracer::~Tracer() { Shutdown(impl_->options.flush_interval); }

Result<std::unique_ptr<Tracer>> Tracer::Start(TracerOptions options) {
  if (Status s = Validate(options); !s.ok()) return s;
  auto url = http::ParseUrl(options.endpoint);
  if (!url.ok()) return Status::InvalidArgument("otlp endpoint: " + url.status().message());
  auto impl = std::make_unique<Impl>();
  impl->url = std::move(*url);
  impl->resource.push_back(Attribute{
      "service.name", options.service_name.empty() ? "unknown_service" : options.service_name});
  for (const auto& a : options.resource) impl->resource.push_back(a);
  impl->head = OtlpRequestHead(impl->resource);
  impl->options = std::move(options);
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->Run(); });
  return std::unique_ptr<Tracer>(new Tracer(std::move(impl)));
}

bool Tracer::ShouldSample(const std::optional<TraceContext>& parent,
                          const TraceId& trace_id) const {
  if (parent.has_value()) return parent->sampled;
  const double ratio = impl_->options.sample_ratio;
  if (ratio >= 1.0) return true;
  if (ratio <= 0.0) return false;
  uint64_t low = 0;
  for (size_t i = 8; i < 16; ++i) low = low << 8 | trace_id.bytes[i];
  const double threshold = std::ldexp(ratio, 64);  // ratio * 2^64, below 2^64 for ratio < 1
  if (threshold >= std::ldexp(1.0, 64)) return true;
  return low < static_cast<uint64_t>(threshold);
}

void Tracer::Export(Span span) { impl_->Enqueue(std::span<const Span>(&span, 1)); }

void Tracer::Export(std::vector<Span> spans) { impl_->Enqueue(spans); }

void Tracer::Impl::Enqueue(std::span<const Span> spans) {
  // The room first, so that a full queue (a collector down or slow) costs no encoding.
  size_t take = 0;
  {
    std::lock_guard lock(mu);
    if (!stopping && queued_bytes < options.queue_bytes) {
      take = std::min(options.queue_capacity - queued_spans, spans.size());
    }
    dropped_queue_full += spans.size() - take;
  }
  if (take == 0) return;
  constexpr size_t kMaxScratchBytes = size_t{1} << 20;
  thread_local std::string scratch;  // this thread's encoding buffer, reused
  bool wake = false;
  for (size_t i = 0; i < take; i += options.max_batch) {
    const auto part = spans.subspan(i, std::min(options.max_batch, take - i));
    scratch.clear();
    AppendOtlpSpans(&scratch, part);
    std::lock_guard lock(mu);
    const bool had_ready = !ready.empty();
    if (!AppendLocked(scratch, part.size())) dropped_queue_full += part.size();
    wake = wake || (!had_ready && !ready.empty());
  }
  if (scratch.capacity() > kMaxScratchBytes) std::string().swap(scratch);
  if (wake) cv.notify_all();
}

bool Tracer::Impl::AppendLocked(std::string_view list, size_t n) {
  // Other threads may have filled the room since it was checked.
  if (stopping || queued_spans + n > options.queue_capacity ||
      queued_bytes >= options.queue_bytes) {
    return false;
  }
  if (open.spans > 0 && open.spans + n > options.max_batch) {
    ready.push_back(std::exchange(open, Batch{}));
  }
  const size_t before = open.json.size();
  if (open.spans == 0) {
    if (!spare.empty()) {
      open.json = std::move(spare.back());
      spare.pop_back();
    }
    open.json.append(head);
  } else {
    open.json.push_back(',');
  }
  open.json.append(list);
  open.spans += n;
  queued_spans += n;
  queued_bytes += open.json.size() - before;
  if (open.spans >= options.max_batch) ready.push_back(std::exchange(open, Batch{}));
  return true;
}

TracerStats Tracer::stats() const {
  TracerStats s;
  s.spans_exported = impl_->exported.load();
  s.dropped_queue_full = impl_->dropped_queue_full.load();
  s.dropped_export_failed = impl_->dropped_export_failed.load();
  s.export_requests = impl_->export_requests.load();
  s.export_retries = impl_->export_retries.load();
  std::lock_guard lock(impl_->mu);
  s.queued = impl_->queued_spans;
  return s;
}

void Tracer::Shutdown(std::chrono::milliseconds flush_timeout) {
  std::call_once(impl_->shutdown_once, [&] {
    {
      std::lock_guard lock(impl_->mu);
      impl_->stopping = true;
      impl_->stop_deadline = Clock::now() + flush_timeout;
      impl_->stop_deadline_ns = impl_->stop_deadline.time_since_epoch().count();
    }
    impl_->cv.notify_all();
    if (impl_->thread.joinable()) impl_->thread.join();
  });
}

}  // namespace strata::trace
