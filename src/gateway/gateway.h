// Gateway: the service behind `strata gateway` — one OpenAI-compatible endpoint in front of many
// replicas. A request passes: auth (API key → tenant) → JSON body → route (the config's ordered
// decision list, by model, adapter, priority, tenant, headers and prompt length) → admission
// (tenant token/request buckets, concurrency, pool capacity; gold may wait) → the pool's
// ReplicaSet picks a replica by predicted seconds → Upstreams relays the call (SSE as it arrives)
// → a failure before the first byte reached the client is retried once on another replica.
// A route may mirror a fraction of its requests to a shadow pool (fire-and-forget, compared,
// never affecting the answer) or be a cascade (the first pool's buffered answer is returned when
// its logprob signal clears the threshold, else the request goes to the second pool).
//
// Configuration snapshots: the config, its pools' ReplicaSets and tokenizers form one immutable
// Snapshot; Reload() swaps it (SIGHUP). A request holds the snapshot it started with until it
// ends; ReplicaSets of pools that remain are updated in place, so their health and load state
// carry over.
//
// Ownership: Gateway owns the upstream I/O thread (Upstreams), the pools' polling, the admission
// state and the metrics registry.
// Thread contract: Handle() is called concurrently from the front HttpServer's I/O threads;
// Reload/Start/Stop/StartDraining from one controlling thread. Completion callbacks run on the
// upstream thread.
// Traffic management (issue 17): a split route's arm is chosen per request (split.h, header
// x-strata-arm); canaries are analysed on the ticker (canary.h); /admin/ (its own Bearer key,
// config admin.api_key; none configured → 403) lists and sets weights and drives canaries.
// Errors: every client error is an OpenAI error body (401 bad key, 400 bad body, 404 no route or
// unknown path, 429 over a limit with Retry-After, 502 upstream failure, 503 no healthy replica or
// draining); Create/Reload return InvalidArgument when a pool's tokenizer cannot be loaded.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "gateway/admission.h"
#include "gateway/canary.h"
#include "gateway/cascade.h"
#include "gateway/config.h"
#include "gateway/gateway_metrics.h"
#include "gateway/gateway_ui.h"
#include "gateway/pool_hold.h"
#include "gateway/prompt.h"
#include "gateway/proxy.h"
#include "gateway/replica_set.h"
#include "gateway/shadow.h"
#include "gateway/split.h"
#include "http/chain.h"
#include "http/prometheus.h"
#include "http/server.h"
#include "trace/tracer.h"

namespace strata::gateway {

// One configuration generation: immutable once built.
struct Snapshot {
  std::shared_ptr<const GatewayConfig> cfg;
  std::map<std::string, std::shared_ptr<ReplicaSet>, std::less<>> pools;
  // Pool name → its tokenizer (absent: prompt lengths are estimated from bytes).
  std::map<std::string, std::shared_ptr<const PoolTokenizer>, std::less<>> tokenizers;
  uint64_t generation = 0;
};

// Shadow calls in flight at most (over it a mirrored request is dropped and counted).
inline constexpr int kMaxShadowInFlight = 64;
// The primary's answer kept for the shadow comparison, at most (bytes).
inline constexpr size_t kMaxShadowCopy = 1u << 20;
// Stop() gives the tracer this long to send the last spans.
inline constexpr std::chrono::milliseconds kTracerFlushTimeout{1000};

class Gateway {
 public:
  static Result<std::unique_ptr<Gateway>> Create(std::shared_ptr<const GatewayConfig> cfg);
  ~Gateway();  // Stop()

  // Starts the upstream thread, the pools' health checks and polls, and the admission ticker.
  void Start();
  // Stops polling and the upstream thread (in-flight upstream calls end). Idempotent.
  void Stop();
  // New requests get 503 "draining"; in-flight ones finish.
  void StartDraining();
  // Swaps in a new configuration; in-flight requests keep theirs.
  Status Reload(std::shared_ptr<const GatewayConfig> cfg);

  void Handle(http::HttpRequest req, std::shared_ptr<http::Responder> out);
  // Told by the HTTP server's last-resort guard.
  void OnInternalError(std::string_view method, std::string_view path);

  int64_t in_flight() const { return in_flight_.load(); }
  uint64_t generation() const;
  std::shared_ptr<const Snapshot> snapshot() const;
  http::MetricsRegistry& metrics() { return metrics_; }
  // The span exporter (config `tracing` / --otlp-endpoint), or null when the gateway exports none.
  const trace::Tracer* tracer() const { return tracer_.get(); }

  struct Job;  // one proxied request (gateway.cc)

 private:
  Gateway() = default;
  Result<std::shared_ptr<const Snapshot>> Build(std::shared_ptr<const GatewayConfig> cfg,
                                                const Snapshot* previous);
  http::Chain MakeChain();
  http::HttpResponse Health(http::Exchange& ex);
  http::HttpResponse Ready(http::Exchange& ex);
  http::HttpResponse Metrics(http::Exchange& ex);
  http::HttpResponse Models(http::Exchange& ex);
  http::HttpResponse Proxy(http::Exchange& ex);
  const std::string& PoolOf(const RouteConfig& route, const http::Exchange& ex, Job* job);
  static void AddArmHeader(const Job& job, std::vector<std::pair<std::string, std::string>>* h);
  void Admitted(const std::shared_ptr<Job>& job);
  void Dispatch(const std::shared_ptr<Job>& job);
  void OnUpstreamDone(const std::shared_ptr<Job>& job, const UpstreamResult& r);
  void Finish(const std::shared_ptr<Job>& job, int status, const UpstreamResult* r);
  void RespondError(const std::shared_ptr<Job>& job, http::HttpResponse resp);
  void AccessLog(const RequestRecord& rec);
  // Traffic management (issue 17, part split): the canary's feed and decisions, the admin API
  // (gateway_admin.cc).
  void ObserveCanary(const RequestRecord& rec);
  void NoteCanary(const std::vector<CanaryDecision>& decisions);
  void RefreshCanaryGauges();
  std::optional<http::HttpResponse> AdminAuth(const http::Exchange& ex) const;
  http::HttpResponse AdminRoutes(http::Exchange& ex);
  http::HttpResponse AdminSetWeights(http::Exchange& ex);
  http::HttpResponse AdminCanary(http::Exchange& ex);
  http::HttpResponse AdminCanaryAction(http::Exchange& ex);
  // Shadow and cascade (README.md "Shadow", "Cascade"): set up at routing, run from Dispatch /
  // the upstream callbacks, on the upstream thread.
  http::ApiError PrepareTraffic(const std::shared_ptr<Job>& job, const RouteConfig& route,
                                const nlohmann::json& body,
                                const std::function<const PromptInfo&(const PoolConfig&)>& measure);
  void OnFirstStageDone(const std::shared_ptr<Job>& job, const UpstreamResult& r);
  void AcceptFirstStage(const std::shared_ptr<Job>& job, const UpstreamResult& r,
                        nlohmann::json answer);
  void Escalate(const std::shared_ptr<Job>& job, std::string_view result);
  void NoteUpstream(const std::shared_ptr<Job>& job, const UpstreamResult& r);
  std::vector<std::pair<std::string, std::string>> ClientHeaders(const Job& job) const;
  void StartShadow(const std::shared_ptr<Job>& job, int status);
  void RefreshModels();
  void StartTicker();
  // The status page (gateway_ui.cc): /ui, /ui/data and the fetch of ui.control_url.
  http::HttpResponse UiPage(http::Exchange& ex);
  http::HttpResponse UiData(http::Exchange& ex);
  void RefreshControlStatus();
  // The cold-start hold (pool_hold.h).
  bool HoldForReplica(const std::shared_ptr<Job>& job);
  void TickHolds();
  void RefreshHoldGauges();

  mutable Mutex mu_;
  std::shared_ptr<const Snapshot> snap_ GUARDED_BY(mu_);
  std::unique_ptr<Upstreams> upstreams_;
  std::unique_ptr<Admission> admission_;
  SplitWeights splits_;  // the split routes' current weights (config, admin API, canary)
  std::unique_ptr<CanaryController> canary_;  // uses splits_
  std::unique_ptr<http::Chain> chain_;
  http::Readiness readiness_;
  http::MetricsRegistry metrics_;
  std::unique_ptr<trace::Tracer> tracer_;  // null: tracing off (set in Create, then read-only)
  std::atomic<int64_t> in_flight_{0};
  std::atomic<bool> stopped_{false};
  ShadowSlots shadow_slots_{kMaxShadowInFlight};
  PoolHolds holds_;  // requests waiting for a pool's first eligible replica
  bool started_ = false;
  // /v1/models: the union of the replicas' models, refreshed on the upstream thread.
  mutable Mutex models_mu_;
  std::string models_body_ GUARDED_BY(models_mu_);
  // The access log (stderr, a file, or none).
  Mutex log_mu_;
  std::FILE* log_ GUARDED_BY(log_mu_) = nullptr;
  bool log_owned_ GUARDED_BY(log_mu_) = false;
  // The control plane's last status (ui.control_url), written on the upstream thread.
  mutable Mutex ui_mu_;
  ControlStatus control_status_ GUARDED_BY(ui_mu_);
};

}  // namespace strata::gateway
