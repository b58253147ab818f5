// gateway_metrics: the gateway's Prometheus families (prefix `strata_gateway:`, listed in
// docs/metrics.md) and its access log line — what is recorded for each request, each upstream
// call and each scrape.
//
// Thread contract: pure functions over a thread-safe MetricsRegistry.
// Errors: none.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "base/mutex.h"
#include "base/status.h"
#include "gateway/types.h"
#include "http/prometheus.h"
#include "trace/tracer.h"

namespace strata::gateway {

struct Snapshot;
class Admission;
struct UpstreamResult;

inline constexpr std::string_view kRequestsTotal = "strata_gateway:requests_total";
inline constexpr std::string_view kHttpRequestsTotal = "strata_gateway:http_requests_total";
inline constexpr std::string_view kInternalErrorsTotal = "strata_gateway:internal_errors_total";
inline constexpr std::string_view kTtftSeconds = "strata_gateway:time_to_first_token_seconds";
inline constexpr std::string_view kRequestSeconds = "strata_gateway:request_duration_seconds";
inline constexpr std::string_view kAdmissionSeconds = "strata_gateway:admission_wait_seconds";
inline constexpr std::string_view kUpstreamSeconds = "strata_gateway:upstream_duration_seconds";
inline constexpr std::string_view kUpstreamTtftSeconds =
    "strata_gateway:upstream_time_to_first_token_seconds";
inline constexpr std::string_view kUpstreamErrorsTotal = "strata_gateway:upstream_errors_total";
inline constexpr std::string_view kRetriesTotal = "strata_gateway:retries_total";
inline constexpr std::string_view kRejectionsTotal = "strata_gateway:rejections_total";
inline constexpr std::string_view kRoutingDecisionsTotal = "strata_gateway:routing_decisions_total";
inline constexpr std::string_view kCachedTokensTotal =
    "strata_gateway:predicted_cached_tokens_total";
inline constexpr std::string_view kPromptTokensTotal = "strata_gateway:prompt_tokens_total";
inline constexpr std::string_view kEjectionsTotal = "strata_gateway:ejections_total";
inline constexpr std::string_view kReplicaUp = "strata_gateway:replica_eligible";
inline constexpr std::string_view kReplicaInFlight = "strata_gateway:replica_in_flight";
inline constexpr std::string_view kPoolInFlight = "strata_gateway:pool_in_flight";
inline constexpr std::string_view kReloadsTotal = "strata_gateway:config_reloads_total";
inline constexpr std::string_view kPoolInfo = "strata_gateway:pool_info";
// Issue 17, part split: arms chosen on split routes, canary decisions and weights.
inline constexpr std::string_view kSplitRequestsTotal = "strata_gateway:split_requests_total";
inline constexpr std::string_view kCanaryDecisionsTotal = "strata_gateway:canary_decisions_total";
inline constexpr std::string_view kCanaryWeight = "strata_gateway:canary_weight";
// Shadow and cascade (issue 17, part cascade).
inline constexpr std::string_view kShadowRequestsTotal = "strata_gateway:shadow_requests_total";
inline constexpr std::string_view kShadowSeconds = "strata_gateway:shadow_duration_seconds";
inline constexpr std::string_view kCascadeRequestsTotal = "strata_gateway:cascade_requests_total";
inline constexpr std::string_view kCascadeTokensTotal = "strata_gateway:cascade_tokens_total";
inline constexpr std::string_view kCascadeStageSeconds =
    "strata_gateway:cascade_stage_duration_seconds";
// The cold-start hold (issue 18): requests held now for a pool with no eligible replica, and holds
// by how they ended (ready, timeout, cancelled, stopped, full). The gauge's name has no colon: it
// is the control plane's demand signal for a pool scaled to zero (control-design.md).
inline constexpr std::string_view kPoolHeldRequests = "strata_gateway_pool_held_requests";
inline constexpr std::string_view kPoolHoldsTotal = "strata_gateway:pool_holds_total";

// Tracing (gateway_trace.h): the span exporter's counters, present when --otlp-endpoint is set.
inline constexpr std::string_view kTraceSpansExportedTotal =
    "strata_gateway:trace_spans_exported_total";
inline constexpr std::string_view kTraceSpansDroppedTotal =
    "strata_gateway:trace_spans_dropped_total";
inline constexpr std::string_view kTraceSpansQueued = "strata_gateway:trace_spans_queued";

// What the gateway knows of a request when it ends (metrics and the access log).
struct RequestRecord {
  std::string_view tenant, route, pool, replica, path, model, reason;
  Priority priority = Priority::kSilver;
  int status = 0;    // the client's status (499: the client went away)
  int attempts = 0;  // upstream calls made (2: retried once)
  int64_t prompt_tokens = 0;
  bool prompt_estimated = false;
  int64_t cached_tokens = 0;  // what the balancer predicted the replica holds
  double cost_s = 0;          // the chosen replica's predicted seconds
  double total_s = 0, admission_s = 0;
  double ttft_s = -1;  // through the gateway; < 0 when no upstream answered
  const UpstreamResult* upstream = nullptr;
};

// Declares every family (once, at start-up).
void DeclareGatewayMetrics(http::MetricsRegistry* m);
// The tracer's families (declared only when the gateway traces) and their values at a scrape.
void DeclareTraceMetrics(http::MetricsRegistry* m);
void RefreshTraceMetrics(const trace::TracerStats& s, http::MetricsRegistry* m);
// A finished request: requests_total, latency histograms, prompt/cached tokens.
void ObserveRequest(const RequestRecord& rec, http::MetricsRegistry* m);
// One upstream call: upstream duration / TTFT, errors by kind.
void ObserveUpstream(std::string_view pool, std::string_view replica, const UpstreamResult& r,
                     http::MetricsRegistry* m);
// At scrape time: per replica eligibility and in-flight, per pool in-flight and ejections.
void RefreshPoolGauges(const Snapshot& snap, const Admission& admission, http::MetricsRegistry* m);
// One line (ending in '\n'): time, tenant, method path, route, pool, replica, status, latencies,
// tokens, attempts, reason — `key=value` pairs, values without spaces.
std::string AccessLogLine(const RequestRecord& rec, std::chrono::system_clock::time_point now);

// The access log: config `access_log` — "stderr", "off" / "" (none), or a file appended to.
// Thread-safe: Write is called from any thread (one mutex).
class AccessLog {
 public:
  AccessLog() = default;
  ~AccessLog();  // closes a file it opened
  AccessLog(const AccessLog&) = delete;
  AccessLog& operator=(const AccessLog&) = delete;

  // IoError naming the path when the file cannot be opened.
  Status Open(const std::string& where);
  // One AccessLogLine, flushed.
  void Write(const RequestRecord& rec);

 private:
  Mutex mu_;
  std::FILE* file_ GUARDED_BY(mu_) = nullptr;
  bool owned_ GUARDED_BY(mu_) = false;
};

}  // namespace strata::gateway
