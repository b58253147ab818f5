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
// The parts (each file's header says more):
//   gateway_services.h  Snapshot and its holder Snapshots; RequestServices, what requests share
//   gateway_flow.h      RequestFlow: one proxied request's state machine (route → admit → pick →
//                       forward → retry / cascade / shadow → finish)
//   gateway_admin.h     AdminApi (/admin/) and the canary's feed
//   gateway_ui.h        StatusPage (/ui, /ui/data)
//   gateway_models.h    ModelsList (/v1/models)
//   gateway_metrics.h   the metric families, the access log
// Gateway itself wires them: the route chain, /health, /ready, /metrics, the ticker, Reload.
//
// Ownership: Gateway owns the upstream I/O thread (Upstreams), the pools' polling, the admission
// state and the metrics registry (in RequestServices), and the parts above.
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
#include <memory>
#include <string_view>

#include "base/status.h"
#include "gateway/config.h"
#include "gateway/gateway_admin.h"
#include "gateway/gateway_models.h"
#include "gateway/gateway_services.h"
#include "gateway/gateway_ui.h"
#include "http/chain.h"
#include "http/prometheus.h"
#include "http/server.h"
#include "trace/tracer.h"

namespace strata::gateway {

class Gateway {
 public:
  static Result<std::unique_ptr<Gateway>> Create(std::shared_ptr<const GatewayConfig> cfg);
  ~Gateway();  // Stop()
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

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

  int64_t in_flight() const { return sv_.in_flight.load(); }
  uint64_t generation() const;
  std::shared_ptr<const Snapshot> snapshot() const { return snaps_.current(); }
  http::MetricsRegistry& metrics() { return sv_.metrics; }
  // The span exporter (config `tracing` / --otlp-endpoint), or null when the gateway exports none.
  const trace::Tracer* tracer() const { return sv_.tracer.get(); }

 private:
  Gateway() = default;
  http::Chain MakeChain();
  http::HttpResponse Health(http::Exchange& ex);
  http::HttpResponse Ready(http::Exchange& ex);
  http::HttpResponse Metrics(http::Exchange& ex);
  http::HttpResponse Proxy(http::Exchange& ex);
  void StartTicker();
  // The cold-start hold (pool_hold.h): held requests dispatched once their pool has a replica,
  // and the held-requests gauge.
  void TickHolds();
  void RefreshHoldGauges();

  RequestServices sv_;
  Snapshots snaps_{&sv_.upstreams->io()};  // its pools live on the upstream io_context
  AdminApi admin_{&snaps_, &sv_};
  http::Readiness readiness_;
  StatusPage status_page_{&snaps_, &readiness_, &sv_};
  ModelsList models_{&sv_};
  std::unique_ptr<http::Chain> chain_;
  bool started_ = false;
};

}  // namespace strata::gateway
