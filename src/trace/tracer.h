// trace/tracer: the span exporter — OTLP/HTTP with the protobuf-JSON encoding (POST
// {endpoint}/v1/traces, Content-Type application/json, an ExportTraceServiceRequest), batched,
// from a bounded queue drained by the tracer's own thread.
//
// Contract:
//   - Export() never blocks on I/O: it encodes the spans (OTLP JSON, on the caller's thread, into
//     a buffer of that thread's, so that no thread frees another's many small allocations) and
//     appends the bytes under the queue's lock to the open batch — a request body being written,
//     recycled once sent, so that the steady state allocates nothing large (glibc consolidates
//     its fast bins on an allocation of 1 KiB or more whenever they hold chunks, which a string
//     per request cost the request threads). Spans are dropped instead (counted as
//     dropped_queue_full, before any encoding) when the queue holds queue_capacity spans or
//     queue_bytes bytes. Callers on the request path (the gateway's and the server's I/O threads)
//     call it; the engine thread never does (the server builds the engine's spans from the
//     request's timeline when it ends).
//   - The exporter thread sends a batch when max_batch spans are queued or flush_interval passed.
//     A batch that fails is retried (exponential backoff from 100 ms, at most max_retries times,
//     honouring Retry-After) only where OTLP says so — HTTP 429, 502, 503, 504 and connection
//     failures; any other answer drops the batch (dropped_export_failed), as does running out of
//     retries. While a batch is retried new spans keep queueing (and drop when full).
//   - Sampling is head sampling, parent-based: a request with a valid traceparent follows its
//     sampled flag; otherwise the trace id decides against sample_ratio (the lowest 8 bytes of the
//     id as an integer below ratio * 2^64), so every service with the same ratio agrees.
//   - Shutdown (or the destructor) flushes what is queued within flush_timeout, then stops (a POST
//     still in flight at the deadline is aborted; what is left counts as dropped_export_failed).
//     Export after Shutdown drops the spans (counted as dropped_queue_full).
// Thread contract: thread-safe; one exporter thread per Tracer. Errors: Start returns
// InvalidArgument for a bad endpoint (not http://host[:port][/path]) or options out of range.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "trace/span.h"

namespace strata::trace {

struct TracerOptions {
  std::string endpoint;      // "http://127.0.0.1:4318" (OTLP/HTTP base; /v1/traces is appended)
  std::string service_name;  // resource attribute service.name ("strata-serve", "strata-gateway")
  // More resource attributes (service.instance.id, ...; their keys: see Attribute).
  std::vector<Attribute> resource;
  double sample_ratio = 1.0;     // [0, 1]
  size_t queue_capacity = 8192;  // spans
  // JSON bytes queued (spans are queued encoded): a bound on memory whatever the spans hold.
  size_t queue_bytes = size_t{64} << 20;
  size_t max_batch = 512;  // spans per export request
  std::chrono::milliseconds flush_interval{500};
  std::chrono::milliseconds export_timeout{2000};
  int max_retries = 3;
};

struct TracerStats {
  uint64_t spans_exported = 0;
  uint64_t dropped_queue_full = 0;
  uint64_t dropped_export_failed = 0;
  uint64_t export_requests = 0;  // POSTs sent, retries included
  uint64_t export_retries = 0;
  uint64_t queued = 0;  // now
};

class Tracer {
 public:
  static Result<std::unique_ptr<Tracer>> Start(TracerOptions options);
  ~Tracer();  // Shutdown(flush_interval)

  // Head sampling for a request that arrived with `parent` (nullopt: no or invalid traceparent).
  bool ShouldSample(const std::optional<TraceContext>& parent, const TraceId& trace_id) const;

  void Export(Span span);
  void Export(std::vector<Span> spans);

  TracerStats stats() const;
  void Shutdown(std::chrono::milliseconds flush_timeout);

 private:
  struct Impl;
  explicit Tracer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The ExportTraceServiceRequest JSON of `spans` under one resource (ids as hex strings, times as
// decimal strings of Unix nanoseconds, enums as numbers — OTLP's JSON mapping).
std::string EncodeOtlpJson(const std::vector<Attribute>& resource, const std::vector<Span>& spans);
// The same in two steps, as the exporter does it: AppendOtlpSpans writes spans' JSON objects,
// comma-separated, without brackets (a "span list"); EncodeOtlpJson wraps span lists (empty ones
// skipped) into one request.
void AppendOtlpSpans(std::string* out, std::span<const Span> spans);
std::string EncodeOtlpJson(const std::vector<Attribute>& resource,
                           std::span<const std::string_view> span_lists);
// A request is OtlpRequestHead(resource) + span lists joined by ',' + OtlpRequestTail(): the
// exporter writes span lists straight after a head it wrote once (EncodeOtlpJson is exactly this).
std::string OtlpRequestHead(const std::vector<Attribute>& resource);
std::string_view OtlpRequestTail();

}  // namespace strata::trace
