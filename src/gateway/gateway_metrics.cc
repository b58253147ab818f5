#include "gateway/gateway_metrics.h"

#include <fmt/format.h>

#include <cctype>
#include <ctime>
#include <string>
#include <vector>

#include "gateway/admission.h"
#include "gateway/gateway_services.h"
#include "gateway/proxy.h"

namespace strata::gateway {
namespace {

using Type = http::MetricsRegistry::Type;

const std::vector<double> kLatencyBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                             0.5,   1,      2.5,   5,    10,    30,   60,  120};

struct Family {
  std::string_view name;
  Type type;
  std::string_view help;
  bool latency = false;
};

constexpr Family kFamilies[] = {
    {kRequestsTotal, Type::kCounter,
     "Proxied requests by route, pool, replica and the client's status code (499: client gone)."},
    {kHttpRequestsTotal, Type::kCounter,
     "Requests answered by the gateway itself (health, metrics, models, errors before routing)."},
    {kInternalErrorsTotal, Type::kCounter, "Exceptions caught by the HTTP server's last resort."},
    {kTtftSeconds, Type::kHistogram,
     "Time to first token through the gateway (arrival to the first relayed body byte).", true},
    {kRequestSeconds, Type::kHistogram, "End-to-end request time through the gateway.", true},
    {kAdmissionSeconds, Type::kHistogram, "Time a request waited in admission.", true},
    {kUpstreamSeconds, Type::kHistogram, "Duration of one upstream call.", true},
    {kUpstreamTtftSeconds, Type::kHistogram,
     "Upstream call start to its first body byte, per replica.", true},
    {kUpstreamErrorsTotal, Type::kCounter,
     "Upstream calls that failed, by kind (connect, 5xx, mid_stream)."},
    {kRetriesTotal, Type::kCounter,
     "Requests retried on another replica after failing before the first byte."},
    {kRejectionsTotal, Type::kCounter, "Requests refused with 429, by reason."},
    {kRoutingDecisionsTotal, Type::kCounter,
     "Replica choices by reason (affinity, load, fallback, retry)."},
    {kCachedTokensTotal, Type::kCounter,
     "Prompt tokens the balancer predicted the chosen replica had cached."},
    {kPromptTokensTotal, Type::kCounter, "Prompt tokens routed (measured or estimated)."},
    {kEjectionsTotal, Type::kCounter, "Replicas ejected by passive outlier detection."},
    {kReplicaUp, Type::kGauge,
     "1 when a replica takes new work (healthy, not ejected, not draining)."},
    {kReplicaInFlight, Type::kGauge, "Requests the gateway has in flight on a replica."},
    {kPoolInFlight, Type::kGauge, "Requests admitted to a pool and not yet finished."},
    {kReloadsTotal, Type::kCounter, "Configuration reloads (SIGHUP) by result."},
    {kPoolInfo, Type::kGauge, "1 per pool, labelled with the pool's configured labels."},
    {kSplitRequestsTotal, Type::kCounter, "Requests on split routes by the arm (pool) chosen."},
    {kCanaryDecisionsTotal, Type::kCounter,
     "Canary decisions by route and decision (step, promote, rollback, pause, resume, "
     "manual_rollback, manual_promote)."},
    {kCanaryWeight, Type::kGauge, "Current weight % of each arm of a canary route, by pool."},
    // Shadow and cascade (issue 17, part cascade).
    {kShadowRequestsTotal, Type::kCounter,
     "Mirrored requests by route, shadow pool and result (match, mismatch, uncompared, error, "
     "dropped)."},
    {kShadowSeconds, Type::kHistogram, "Duration of one shadow call (its Fetch).", true},
    {kCascadeRequestsTotal, Type::kCounter,
     "Requests on a cascade route by result (accepted, escalated, first_error, skipped)."},
    {kCascadeTokensTotal, Type::kCounter,
     "Tokens a cascade stage's pool served (stage first|then, kind prompt|completion)."},
    {kCascadeStageSeconds, Type::kHistogram, "Duration of one cascade stage's upstream call.",
     true},
    {kPoolHeldRequests, Type::kGauge,
     "Requests held now for a pool with no eligible replica (cold_start_hold_ms)."},
    {kPoolHoldsTotal, Type::kCounter,
     "Held requests by how the hold ended (ready, timeout, cancelled, stopped, full)."},
};

// A configured label as a Prometheus label: its name reduced to [a-zA-Z0-9_] (others become '_',
// a leading digit gets a '_'), prefixed `label_` so it never collides with `pool`.
std::string LabelName(std::string_view key) {
  std::string out = "label_";
  for (char c : key) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out;
}

}  // namespace

void DeclareGatewayMetrics(http::MetricsRegistry* m) {
  for (const Family& f : kFamilies)
    m->Declare(std::string(f.name), f.type, std::string(f.help),
               f.latency ? kLatencyBuckets : std::vector<double>{});
}

void DeclareTraceMetrics(http::MetricsRegistry* m) {
  using T = http::MetricsRegistry::Type;
  m->Declare(std::string(kTraceSpansExportedTotal), T::kCounter,
             "Spans the OTLP exporter delivered to the collector.");
  m->Declare(std::string(kTraceSpansDroppedTotal), T::kCounter,
             "Spans dropped: queue_full (the bounded queue was full) or export_failed (the "
             "collector refused them, was unreachable or out of retries).");
  m->Declare(std::string(kTraceSpansQueued), T::kGauge,
             "Spans waiting in the exporter's bounded queue now (at most tracing.queue_capacity).");
  RefreshTraceMetrics(trace::TracerStats{}, m);
}

void RefreshTraceMetrics(const trace::TracerStats& s, http::MetricsRegistry* m) {
  m->Set(kTraceSpansExportedTotal, "", static_cast<double>(s.spans_exported));
  m->Set(kTraceSpansDroppedTotal, http::Labels({{"reason", "queue_full"}}),
         static_cast<double>(s.dropped_queue_full));
  m->Set(kTraceSpansDroppedTotal, http::Labels({{"reason", "export_failed"}}),
         static_cast<double>(s.dropped_export_failed));
  m->Set(kTraceSpansQueued, "", static_cast<double>(s.queued));
}

void ObserveRequest(const RequestRecord& rec, http::MetricsRegistry* m) {
  const std::string code = std::to_string(rec.status);
  m->Add(kRequestsTotal,
         http::Labels(
             {{"route", rec.route}, {"pool", rec.pool}, {"replica", rec.replica}, {"code", code}}),
         1);
  const std::string rp = http::Labels({{"route", rec.route}, {"pool", rec.pool}});
  m->Observe(kRequestSeconds, rp, rec.total_s);
  m->Observe(kAdmissionSeconds, rp, rec.admission_s);
  if (rec.ttft_s >= 0 && rec.status >= 200 && rec.status < 300)
    m->Observe(kTtftSeconds, rp, rec.ttft_s);
  if (rec.attempts > 0) {  // cached first: a scrape whose prompt tokens count it sees both
    m->Add(kCachedTokensTotal, rp, static_cast<double>(rec.cached_tokens));
    m->Add(kPromptTokensTotal, rp, static_cast<double>(rec.prompt_tokens));
  }
}

void ObserveUpstream(std::string_view pool, std::string_view replica, const UpstreamResult& r,
                     http::MetricsRegistry* m) {
  const std::string labels = http::Labels({{"pool", pool}, {"replica", replica}});
  m->Observe(kUpstreamSeconds, labels, r.total_s);
  if (r.first_chunk_s > 0) m->Observe(kUpstreamTtftSeconds, labels, r.first_chunk_s);
  std::string_view kind;
  if (r.kind == UpstreamResult::Kind::kRetryable) kind = r.http_status > 0 ? "5xx" : "connect";
  if (r.kind == UpstreamResult::Kind::kFailedMidStream) kind = "mid_stream";
  if (!kind.empty())
    m->Add(kUpstreamErrorsTotal,
           http::Labels({{"pool", pool}, {"replica", replica}, {"kind", kind}}), 1);
}

void RefreshPoolGauges(const Snapshot& snap, const Admission& admission, http::MetricsRegistry* m) {
  for (const PoolConfig& pc : snap.cfg->pools) {
    std::string labels = http::Labels({{"pool", pc.name}});
    for (const auto& [k, v] : pc.labels) labels += "," + http::Labels({{LabelName(k), v}});
    m->Set(kPoolInfo, labels, 1);
  }
  for (const auto& [pool, set] : snap.pools) {
    m->Set(kPoolInFlight, http::Labels({{"pool", pool}}),
           static_cast<double>(admission.in_flight(pool)));
    for (const ReplicaView& v : set->Snapshot()) {
      const std::string labels = http::Labels({{"pool", pool}, {"replica", v.url}});
      m->Set(kReplicaUp, labels, v.eligible ? 1 : 0);
      m->Set(kReplicaInFlight, labels, static_cast<double>(v.in_flight));
      m->Set(kEjectionsTotal, labels, static_cast<double>(v.ejections));
    }
  }
}

std::string AccessLogLine(const RequestRecord& rec, std::chrono::system_clock::time_point now) {
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char ts[32];
  std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
  auto dash = [](std::string_view v) { return v.empty() ? std::string_view("-") : v; };
  const UpstreamResult* u = rec.upstream;
  return fmt::format(
      "{} gateway tenant={} path={} model={} priority={} route={} pool={} replica={} status={} "
      "total_ms={:.1f} ttft_ms={:.1f} admission_ms={:.1f} prompt_tokens={}{} cached_tokens={} "
      "completion_tokens={} attempts={} reason={} cost_s={:.4f}\n",
      ts, dash(rec.tenant), dash(rec.path), dash(rec.model), PriorityName(rec.priority),
      dash(rec.route), dash(rec.pool), dash(rec.replica), rec.status, rec.total_s * 1e3,
      rec.ttft_s >= 0 ? rec.ttft_s * 1e3 : -1.0, rec.admission_s * 1e3, rec.prompt_tokens,
      rec.prompt_estimated ? "~" : "", rec.cached_tokens,
      u && u->completion_tokens >= 0 ? u->completion_tokens : (u ? u->stream_chunks : 0),
      rec.attempts, dash(rec.reason), rec.cost_s);
}

AccessLog::~AccessLog() {
  MutexLock lock(&mu_);
  if (owned_ && file_) std::fclose(file_);
}

Status AccessLog::Open(const std::string& where) {
  MutexLock lock(&mu_);
  if (where == "stderr") {
    file_ = stderr;
  } else if (where != "off" && !where.empty()) {
    file_ = std::fopen(where.c_str(), "a");
    if (!file_) return Status::IoError("access_log: cannot open " + where);
    owned_ = true;
  }
  return Status::Ok();
}

void AccessLog::Write(const RequestRecord& rec) {
  MutexLock lock(&mu_);
  if (!file_) return;
  std::fputs(AccessLogLine(rec, std::chrono::system_clock::now()).c_str(), file_);
  std::fflush(file_);
}

}  // namespace strata::gateway
