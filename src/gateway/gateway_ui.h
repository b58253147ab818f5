// gateway/gateway_ui: the gateway's status page — `GET /ui` (one HTML page with its CSS and
// JavaScript embedded: no CDN, no external file; small live charts drawn as SVG by the page's own
// script) and `GET /ui/data` (the JSON it polls every 2 s):
//   {"generation", "draining", "time_s",
//    "pools": [{"name", "labels", "in_flight", "eligible", "replicas": [{"url", "eligible",
//               "healthy", "draining", "ejected", "in_flight", "running", "waiting",
//               "kv_usage", "metrics_valid", "ejections"}]}],
//    "routes": [{"name", "pools"}],
//    "canaries": [{"route", "baseline", "canary", "state", "step", "steps", "weight"}],
//    "control": <the control plane's status JSON, or null>, "control_url", "control_error",
//    "control_age_s"}
// The control plane's part (autoscaler decisions, SLO attainment, replicas as the supervisor sees
// them) comes from the gateway config's `ui.control_url` (config.h UiConfig): the gateway fetches
// it every 2 s on its upstream thread and keeps the last answer (at most kMaxControlStatusBytes);
// the page shows it as it is, whatever its fields (a table with a column per pool and a row per
// field, nested objects one level deep as "parent.key", an SLO objective {target, measured, met}
// as one "measured / target verdict" cell), plus a desired-replicas chart when its pools carry
// `desired`.
// The page is read-only and needs no key: it shows pool names, replica URLs and load, never API
// keys or tenants.
//
// Thread contract: pure functions; StatusPage's handlers run concurrently on the front's I/O
// threads, RefreshControl on the ticker (the fetch on the upstream thread); its ControlStatus is
// guarded by its mutex.
#pragma once

#include <chrono>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/mutex.h"
#include "gateway/canary.h"
#include "gateway/config.h"
#include "http/chain.h"

namespace strata::gateway {

struct Snapshot;
class Snapshots;
struct RequestServices;
class Admission;

inline constexpr size_t kMaxControlStatusBytes = 1 << 20;

// The last answer of ui.control_url.
struct ControlStatus {
  std::string body;   // the JSON text of the last 200 answer ("" = none yet)
  std::string error;  // why the last fetch failed ("" = it succeeded)
  std::chrono::steady_clock::time_point at{};  // when `body` arrived
};

// The page (text/html).
std::string_view UiHtml();

// The pools/routes part of /ui/data from a config snapshot.
nlohmann::json UiPoolsJson(const Snapshot& snap, const Admission& admission);
nlohmann::json UiRoutesJson(const GatewayConfig& cfg);
nlohmann::json UiCanariesJson(const std::vector<CanaryView>& canaries);
// The control part: "control" (parsed body, or null when absent/unparsable), "control_url",
// "control_error", "control_age_s" (null before the first answer).
nlohmann::json UiControlJson(const ControlStatus& status, std::string_view url,
                             std::chrono::steady_clock::time_point now);

// The routes /ui and /ui/data, and the control plane's status they show. Points at the Gateway's
// snapshots, readiness and services, which outlive it.
class StatusPage {
 public:
  StatusPage(const Snapshots* snaps, const http::Readiness* readiness, RequestServices* sv)
      : snaps_(snaps), readiness_(readiness), sv_(sv) {}

  http::HttpResponse Page(http::Exchange& ex);
  http::HttpResponse Data(http::Exchange& ex);
  // GETs ui.control_url (when set) on the upstream thread; the answer replaces the last one.
  void RefreshControl();

 private:
  const Snapshots* snaps_;
  const http::Readiness* readiness_;
  RequestServices* sv_;
  Mutex mu_;
  ControlStatus control_status_ GUARDED_BY(mu_);
};

}  // namespace strata::gateway
