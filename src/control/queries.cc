#include "control/queries.h"

#include <fmt/format.h>

#include <array>

namespace strata::control {
namespace {

constexpr std::string_view kReplica = R"(role="replica")";
constexpr std::string_view kGeneration = R"(role="replica",route=~"/v1/(chat/)?completions")";
constexpr std::array<std::string_view, 5> kWindows = {"1m", "5m", "30m", "1h", "6h"};

// A latency family recorded as a per-pool p95.
struct Latency {
  std::string_view family;    // replica histogram
  std::string_view recorded;  // recorded-series stem
  std::string_view alert;
  double SloSpec::*objective;
};
constexpr std::array<Latency, 3> kLatencies = {{
    {"strata:e2e_request_latency_seconds", "strata:pool_e2e_latency_seconds",
     "StrataPoolE2eLatencySlo", &SloSpec::e2e_p95_ms},
    {"strata:time_to_first_token_seconds", "strata:pool_ttft_seconds", "StrataPoolTtftSlo",
     &SloSpec::ttft_p95_ms},
    {"strata:inter_token_latency_seconds", "strata:pool_tpot_seconds", "StrataPoolTpotSlo",
     &SloSpec::tpot_p95_ms},
}};

std::string P95(std::string_view family, std::string_view window) {
  return fmt::format("histogram_quantile(0.95, sum by (pool, le) (rate({}_bucket{{{}}}[{}])))",
                     family, kReplica, window);
}
// Requests accepted by the replicas' engines (counted at acceptance, so it follows arrivals
// even while the replicas are saturated and finish fewer).
std::string RequestRate(std::string_view window) {
  return fmt::format("sum by (pool) (rate(strata:request_queue_time_seconds_count{{{}}}[{}]))",
                     kReplica, window);
}
std::string ErrorRatio(std::string_view window) {
  // `or 0 * all`: a pool whose replicas never answered a 5xx has no numerator series; it gets
  // a ratio of 0 (not "no data") wherever it has traffic.
  return fmt::format(
      R"((sum by (pool) (rate(strata:http_requests_total{{{0},status=~"5.."}}[{1}])) or )"
      "0 * sum by (pool) (rate(strata:http_requests_total{{{0}}}[{1}]))) / "
      "sum by (pool) (rate(strata:http_requests_total{{{0}}}[{1}]))",
      kGeneration, window);
}
std::string Reporting() { return fmt::format("count by (pool) (up{{{}}} == 1)", kReplica); }
std::string Running(std::string_view agg) {
  return fmt::format("{} by (pool) (strata:num_requests_running{{{}}})", agg, kReplica);
}
std::string Waiting() {
  return fmt::format("sum by (pool) (strata:num_requests_waiting{{{}}})", kReplica);
}

// A YAML single-quoted scalar.
std::string Quote(std::string_view s) {
  std::string out = "'";
  for (char c : s) {
    out += c;
    if (c == '\'') out += '\'';
  }
  return out + "'";
}

struct Alert {
  std::string name, expr, severity, summary, for_duration;
  std::string pool;
};

void AddLatencyAlerts(const PoolSpec& pool, std::vector<Alert>* out) {
  for (const Latency& l : kLatencies) {
    const double slo_ms = pool.slo.*l.objective;
    if (slo_ms <= 0) continue;
    const double slo_s = slo_ms / 1000;
    const auto expr = [&](std::string_view a, std::string_view b) {
      return fmt::format(R"({0}:p95_{1}{{pool="{3}"}} > {4} and {0}:p95_{2}{{pool="{3}"}} > {4})",
                         l.recorded, a, b, pool.name, slo_s);
    };
    const std::string what =
        fmt::format("pool {} p95 of {} above its {} ms objective", pool.name, l.family, slo_ms);
    out->push_back(
        {std::string(l.alert), expr("5m", "1h"), "page", what + " (5m and 1h)", "2m", pool.name});
    out->push_back({std::string(l.alert), expr("30m", "6h"), "ticket", what + " (30m and 6h)",
                    "15m", pool.name});
  }
}

void AddErrorAlerts(const PoolSpec& pool, std::vector<Alert>* out) {
  const double budget = pool.slo.error_rate;
  if (budget <= 0) return;
  const auto expr = [&](std::string_view a, std::string_view b, double burn) {
    return fmt::format(
        R"(strata:pool_error_ratio:{0}{{pool="{2}"}} > {3} and strata:pool_error_ratio:{1}{{pool="{2}"}} > {3})",
        a, b, pool.name, burn * budget);
  };
  const std::string what =
      fmt::format("pool {} burns its error budget ({} error ratio)", pool.name, budget);
  out->push_back({"StrataPoolErrorBudgetBurn", expr("5m", "1h", 14.4), "page",
                  what + " at 14.4x (5m and 1h)", "2m", pool.name});
  out->push_back({"StrataPoolErrorBudgetBurn", expr("30m", "6h", 6), "ticket",
                  what + " at 6x (30m and 6h)", "15m", pool.name});
}

std::vector<Alert> Alerts(const DeploymentSpec& spec) {
  std::vector<Alert> out;
  for (const PoolSpec& pool : spec.pools) {
    AddLatencyAlerts(pool, &out);
    AddErrorAlerts(pool, &out);
  }
  return out;
}

}  // namespace

std::vector<NamedQuery> AutoscalerQueries(std::string_view window) {
  return {
      {"replicas", fmt::format("count by (pool) (up{{{}}})", kReplica)},
      {"replicas_reporting", Reporting()},
      {"arrival_rate", RequestRate(window)},
      {"error_ratio", ErrorRatio(window)},
      {"e2e_p95", P95("strata:e2e_request_latency_seconds", window)},
      {"ttft_p95", P95("strata:time_to_first_token_seconds", window)},
      {"tpot_p95", P95("strata:inter_token_latency_seconds", window)},
      {"mean_e2e",
       fmt::format("sum by (pool) (rate(strata:e2e_request_latency_seconds_sum{{{0}}}[{1}])) / "
                   "sum by (pool) (rate(strata:e2e_request_latency_seconds_count{{{0}}}[{1}]))",
                   kReplica, window)},
      {"mean_running", Running("avg")},
      {"waiting", Waiting()},
      {"held", "sum by (pool) (strata_gateway_pool_held_requests)"},
  };
}

std::vector<NamedQuery> RecordingRules() {
  std::vector<NamedQuery> out;
  for (std::string_view w : kWindows) {
    out.push_back({fmt::format("strata:pool_request_rate:{}", w), RequestRate(w)});
    out.push_back({fmt::format("strata:pool_error_ratio:{}", w), ErrorRatio(w)});
    for (const Latency& l : kLatencies)
      out.push_back({fmt::format("{}:p95_{}", l.recorded, w), P95(l.family, w)});
  }
  out.push_back({"strata:pool_replicas_reporting", Reporting()});
  out.push_back({"strata:pool_requests_running", Running("sum")});
  out.push_back({"strata:pool_requests_waiting", Waiting()});
  out.push_back(
      {"strata:pool_desired_replicas", "max by (pool) (strata_control_desired_replicas)"});
  return out;
}

std::vector<NamedQuery> AlertRules(const DeploymentSpec& spec) {
  std::vector<NamedQuery> out;
  for (const Alert& a : Alerts(spec)) out.push_back({a.name, a.expr});
  return out;
}

std::string RulesYaml(const DeploymentSpec& spec) {
  std::string y = fmt::format(
      "# Prometheus rules of deployment {} (generated by strata: control/queries).\n"
      "groups:\n  - name: strata-pools\n    rules:\n",
      spec.name);
  for (const NamedQuery& r : RecordingRules())
    y += fmt::format("      - record: {}\n        expr: {}\n", r.name, Quote(r.expr));
  y += "  - name: strata-slo\n    rules:\n";
  const std::vector<Alert> alerts = Alerts(spec);
  if (alerts.empty()) y.resize(y.size() - std::string_view("    rules:\n").size());
  if (alerts.empty()) y += "    rules: []\n";
  for (const Alert& a : alerts) {
    y += fmt::format(
        "      - alert: {}\n        expr: {}\n        for: {}\n        labels:\n"
        "          severity: {}\n          pool: {}\n        annotations:\n"
        "          summary: {}\n",
        a.name, Quote(a.expr), a.for_duration, a.severity, Quote(a.pool), Quote(a.summary));
  }
  return y;
}

}  // namespace strata::control
