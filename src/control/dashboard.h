// control/dashboard: the Grafana dashboard of a deployment (`strata render grafana`,
// deploy/grafana/strata.json), built from the same named expressions as the autoscaler and the
// rules (control/queries: Signals and the recorded series).
//
// Layout: rows of panels (Grafana schemaVersion 39) — SLOs (attainment, error-budget burn, error
// ratio: the recorded series), latency per pool (TTFT / TPOT / E2E p50, p95, p99), throughput and
// load (requests/s, tokens/s, running / waiting, KV usage, replicas ready / desired / held),
// caches (prefix-cache and KV-tier hit rates, preemptions), the request breakdown (queue /
// prefill / decode / inference), the gateway (routing decisions, 429s by reason, answers by
// code, TTFT), per replica (latency quantiles, throughput, load) and tracing (spans exported /
// dropped). Every panel reads the `${datasource}` Prometheus template variable; its expressions
// filter on the `pool` (multi, All) and, in the replica row, `replica` template variables and
// rate over Grafana's `$__rate_interval`.
//
// With a spec, the SLO row shows only the per-objective series its rules record
// (SloRecordingRules: the objectives some pool sets) and the title / uid name the deployment;
// without one (nullptr), every objective and the name "strata".
//
// Thread contract: pure functions. Errors: none (the spec is already validated).
#pragma once

#include <string>
#include <vector>

#include "control/spec.h"

namespace strata::control {

struct DashboardTarget {
  std::string ref_id;  // A, B, ... unique within the panel
  std::string expr;    // PromQL, with $pool / $replica / $__rate_interval where they apply
  std::string legend;  // Grafana legendFormat ({{pool}}, ...)
};

struct DashboardPanel {
  std::string title;
  std::string type;  // "timeseries" | "stat"
  std::string unit;  // Grafana unit id: s, reqps, percentunit, short, ...
  std::string description;
  std::vector<DashboardTarget> targets;
};

struct DashboardRow {
  std::string title;
  std::vector<DashboardPanel> panels;
};

// The rows of the dashboard of `spec` (nullptr: every objective).
std::vector<DashboardRow> DashboardRows(const DeploymentSpec* spec);

// The Grafana dashboard JSON (pretty-printed, 2 spaces, ending in a newline): deterministic.
std::string GrafanaDashboardJson(const DeploymentSpec* spec);

// `expr` with the dashboard's template variables replaced for a plain Prometheus query: $pool and
// $replica match everything, $__rate_interval becomes `window`.
std::string ExpandDashboardVariables(std::string expr, std::string_view window);

}  // namespace strata::control
