// gateway_admin: the gateway's admin API (/admin/, its own Bearer key, config admin.api_key; none
// configured → 403) and the canary's feed and decision reporting.
//
//   GET  /admin/routes                    every route, with a split's current and config weights
//   PUT  /admin/routes/<name>/weights     {"<pool>": weight, ...} for every arm (409 on a canary)
//   GET  /admin/canary                    every canary: state, step, weights, windows, decisions
//   POST /admin/canary/<route>/<action>   pause | resume | rollback | promote
//
// Ownership: AdminApi points at the Gateway's Snapshots and RequestServices, which outlive it.
// Thread contract: the handlers run concurrently on the front's I/O threads (SplitWeights and
// CanaryController are thread-safe); the free functions likewise.
// Errors: OpenAI error bodies — 401/403 (key), 404 (no such route or path), 400 (bad weights),
// 409 (a canary owns the weights, or the action does not apply in its state).
#pragma once

#include <optional>
#include <vector>

#include "gateway/canary.h"
#include "gateway/gateway_metrics.h"
#include "gateway/gateway_services.h"
#include "http/chain.h"

namespace strata::gateway {

class AdminApi {
 public:
  AdminApi(const Snapshots* snaps, RequestServices* sv) : snaps_(snaps), sv_(sv) {}

  http::HttpResponse Routes(http::Exchange& ex);
  http::HttpResponse SetWeights(http::Exchange& ex);
  http::HttpResponse Canary(http::Exchange& ex);
  http::HttpResponse CanaryAction(http::Exchange& ex);

 private:
  std::optional<http::HttpResponse> Auth(const http::Exchange& ex) const;

  const Snapshots* snaps_;
  RequestServices* sv_;
};

// A finished request on a split route: an outcome for its route's canary, if any.
void ObserveCanary(const RequestRecord& rec, CanaryController* canary);
// Every canary decision: a stderr line and canary_decisions_total.
void NoteCanary(const std::vector<CanaryDecision>& decisions, http::MetricsRegistry* metrics);
// At scrape time: canary_weight of both arms of every canary.
void RefreshCanaryGauges(const CanaryController& canary, http::MetricsRegistry* metrics);

}  // namespace strata::gateway
