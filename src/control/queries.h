// control/queries: every PromQL expression the control plane evaluates, and the Prometheus rules
// file (recording rules + SLO alerts) that `strata up` loads (rule_files) and `strata render k8s`
// wraps in a PrometheusRule.
//
// Series: the replicas' own families (docs/metrics.md) on targets labelled pool, replica, version
// and role="replica" (control/up's file_sd and the Kubernetes relabelling both set them), and the
// gateway's `strata_gateway_pool_held_requests{pool}`. Every expression aggregates `by (pool)`, so
// an instant query answers one sample per pool (a pool without data has no sample: the caller
// reads it as 0 / no data).
//
// Recording rules (group "strata-pools"): windows 1m, 5m, 30m, 1h, 6h of
//   strata:pool_request_rate:<w>                 requests/s accepted by the pool's replicas
//   strata:pool_error_ratio:<w>                  5xx / all generation HTTP answers
//   strata:pool_e2e_latency_seconds:p95_<w>      p95 of strata:e2e_request_latency_seconds
//   strata:pool_ttft_seconds:p95_<w>             p95 of strata:time_to_first_token_seconds
//   strata:pool_tpot_seconds:p95_<w>             p95 of strata:inter_token_latency_seconds
// plus strata:pool_replicas_reporting, strata:pool_requests_running,
// strata:pool_requests_waiting and strata:pool_desired_replicas (the autoscaler's decision,
// max of strata_control_desired_replicas).
// Per-objective recording rules (group "strata-slo-objectives", from the spec, one rule per pool
// and objective it sets, windows as above):
//   strata:pool_error_budget_burn:<w>                error ratio / the pool's error budget
//   strata:pool_<e2e_latency|ttft|tpot>_seconds:attainment_<w>   share of requests within the
//       objective (counted in the largest latency bucket at or under it: conservative when the
//       objective is not a bucket bound)
//   strata:pool_<e2e_latency|ttft|tpot>_seconds:budget_burn_<w>  (1 - attainment) / 0.05 (a p95
//       objective leaves 5 % of the requests as its budget)
// A burn of 1 spends the budget exactly over the SLO period; the alerts page at 14.4.
// Alerts (group "strata-slo"), per pool and objective set in its SloSpec, multi-window as in the
// SRE workbook: severity "page" when the short and the long window both breach (latency p95 over
// 5m and 1h above the objective; error ratio over 5m and 1h above 14.4 x the error budget), and
// "ticket" for the slow burn (30m and 6h; 6 x the budget). Names: StrataPoolE2eLatencySlo,
// StrataPoolTtftSlo, StrataPoolTpotSlo, StrataPoolErrorBudgetBurn.
//
// The named expressions (Signals): one table the autoscaler, the recording rules and the Grafana
// dashboard (control/dashboard) all draw on; a QueryScope sets the rate window, the grouping (per
// pool, or per pool and replica) and extra matchers (the dashboard's pool=~"$pool").
//
// Thread contract: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "control/spec.h"

namespace strata::control {

struct NamedQuery {
  std::string name;  // what the loop fills from it (PoolObservation field) / the recorded series
  std::string expr;
};

// Where a signal aggregates. Replica series are selected by role="replica" plus `match`; gateway
// series by `match` alone (they carry `pool` of their own and are never split per replica).
struct QueryScope {
  std::string window = "1m";  // the rate window (a PromQL duration, or $__rate_interval)
  bool per_replica = false;   // group by (pool, replica) instead of (pool)
  std::string match;          // extra label matchers, e.g. pool=~"$pool" ("" = none)
};

// Every named expression in `scope` (names: SignalNames()).
std::vector<NamedQuery> Signals(const QueryScope& scope);
std::vector<std::string> SignalNames();
// The signal `name` in `scope`; "" when there is no such signal.
std::string Signal(std::string_view name, const QueryScope& scope);

// The latency buckets of the replicas' histograms (server/api.cc kLatencyBuckets; a copy, since
// control never links the server: queries_test checks the attainment rules use bucket bounds).
const std::vector<double>& LatencyBuckets();

// The autoscaler's instant queries, over a `window` of rates (a PromQL duration: "1m"). Names:
// replicas, replicas_reporting, arrival_rate, error_ratio, e2e_p95, ttft_p95, tpot_p95,
// mean_e2e, mean_running, waiting, held.
std::vector<NamedQuery> AutoscalerQueries(std::string_view window = "1m");

// The recording rules: name = the recorded series, expr = its expression.
std::vector<NamedQuery> RecordingRules();

// The per-objective recording rules of `spec`'s pools (group "strata-slo-objectives").
std::vector<NamedQuery> SloRecordingRules(const DeploymentSpec& spec);

// The alerting rules of `spec`'s pools: name = alert name, expr = its expression (over recorded
// series).
std::vector<NamedQuery> AlertRules(const DeploymentSpec& spec);

// The rules file (Prometheus 2.x `groups:` YAML) of RecordingRules(), SloRecordingRules(spec) and
// AlertRules(spec).
std::string RulesYaml(const DeploymentSpec& spec);

}  // namespace strata::control
