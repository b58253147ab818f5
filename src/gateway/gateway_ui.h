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
// Thread contract: pure functions; ControlStatus is guarded by its owner (Gateway::ui_mu_).
#pragma once

#include <chrono>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/canary.h"
#include "gateway/config.h"

namespace strata::gateway {

struct Snapshot;
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

}  // namespace strata::gateway
