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
// Alerts (group "strata-slo"), per pool and objective set in its SloSpec, multi-window as in the
// SRE workbook: severity "page" when the short and the long window both breach (latency p95 over
// 5m and 1h above the objective; error ratio over 5m and 1h above 14.4 x the error budget), and
// "ticket" for the slow burn (30m and 6h; 6 x the budget). Names: StrataPoolE2eLatencySlo,
// StrataPoolTtftSlo, StrataPoolTpotSlo, StrataPoolErrorBudgetBurn.
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

// The autoscaler's instant queries, over a `window` of rates (a PromQL duration: "1m"). Names:
// replicas, replicas_reporting, arrival_rate, error_ratio, e2e_p95, ttft_p95, tpot_p95,
// mean_e2e, mean_running, waiting, held.
std::vector<NamedQuery> AutoscalerQueries(std::string_view window = "1m");

// The recording rules: name = the recorded series, expr = its expression.
std::vector<NamedQuery> RecordingRules();

// The alerting rules of `spec`'s pools: name = alert name, expr = its expression (over recorded
// series).
std::vector<NamedQuery> AlertRules(const DeploymentSpec& spec);

// The rules file (Prometheus 2.x `groups:` YAML) of RecordingRules() and AlertRules(spec).
std::string RulesYaml(const DeploymentSpec& spec);

}  // namespace strata::control
