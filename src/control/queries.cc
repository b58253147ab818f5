#include "control/queries.h"

#include <fmt/format.h>

#include <array>

namespace strata::control {
namespace {

constexpr std::string_view kReplica = R"(role="replica")";
constexpr std::string_view kGenerationRoutes = R"(route=~"/v1/(chat/)?completions")";
constexpr std::array<std::string_view, 5> kWindows = {"1m", "5m", "30m", "1h", "6h"};

// The replica latency histograms.
constexpr std::string_view kE2e = "strata:e2e_request_latency_seconds";
constexpr std::string_view kTtft = "strata:time_to_first_token_seconds";
constexpr std::string_view kTpot = "strata:inter_token_latency_seconds";
constexpr std::string_view kQueue = "strata:request_queue_time_seconds";
constexpr std::string_view kPrefill = "strata:request_prefill_time_seconds";
constexpr std::string_view kDecode = "strata:request_decode_time_seconds";
constexpr std::string_view kInference = "strata:request_inference_time_seconds";

// A latency family recorded as a per-pool p95.
struct Latency {
  std::string_view family;    // replica histogram
  std::string_view recorded;  // recorded-series stem
  std::string_view alert;
  double SloSpec::*objective;
};
constexpr std::array<Latency, 3> kLatencies = {{
    {kE2e, "strata:pool_e2e_latency_seconds", "StrataPoolE2eLatencySlo", &SloSpec::e2e_p95_ms},
    {kTtft, "strata:pool_ttft_seconds", "StrataPoolTtftSlo", &SloSpec::ttft_p95_ms},
    {kTpot, "strata:pool_tpot_seconds", "StrataPoolTpotSlo", &SloSpec::tpot_p95_ms},
}};

// The grouping labels of a replica expression.
std::string By(const QueryScope& s) { return s.per_replica ? "pool, replica" : "pool"; }
// The replica selector: role="replica" and the scope's matchers, then `extra`.
std::string Sel(const QueryScope& s, std::string_view extra = "") {
  std::string out(kReplica);
  if (!s.match.empty()) out += "," + s.match;
  if (!extra.empty()) out += "," + std::string(extra);
  return out;
}
// A gateway series' selector: the scope's matchers only ("" or "{...}").
std::string GwSel(const QueryScope& s, std::string_view extra = "") {
  std::string in = s.match;
  if (!extra.empty()) in += (in.empty() ? "" : ",") + std::string(extra);
  return in.empty() ? "" : "{" + in + "}";
}

std::string Quantile(double q, std::string_view family, const QueryScope& s) {
  return fmt::format("histogram_quantile({}, sum by ({}, le) (rate({}_bucket{{{}}}[{}])))", q,
                     By(s), family, Sel(s), s.window);
}
std::string P95(std::string_view family, std::string_view window) {
  QueryScope s;
  s.window = std::string(window);
  return Quantile(0.95, family, s);
}
// sum by (grouping[, extra_by]) (rate(family{selector}[window])).
std::string SumRate(std::string_view family, const QueryScope& s, std::string_view extra_by = "",
                    std::string_view extra_match = "") {
  return fmt::format("sum by ({}{}) (rate({}{{{}}}[{}]))", By(s),
                     extra_by.empty() ? "" : ", " + std::string(extra_by), family,
                     Sel(s, extra_match), s.window);
}
// Mean of a histogram: rate of its _sum over rate of its _count.
std::string Mean(std::string_view family, const QueryScope& s) {
  return SumRate(std::string(family) + "_sum", s) + " / " +
         SumRate(std::string(family) + "_count", s);
}
// Requests accepted by the replicas' engines (counted at acceptance, so it follows arrivals
// even while the replicas are saturated and finish fewer). Until issue 19 this was the count of
// strata:request_queue_time_seconds, which now ends at the first scheduled step.
std::string RequestRate(const QueryScope& s) {
  return SumRate("strata:requests_received_total", s);
}
std::string RequestRate(std::string_view window) {
  QueryScope s;
  s.window = std::string(window);
  return RequestRate(s);
}
std::string ErrorRatio(const QueryScope& s) {
  // `or 0 * all`: a pool whose replicas never answered a 5xx has no numerator series; it gets
  // a ratio of 0 (not "no data") wherever it has traffic.
  const std::string gen = Sel(s, kGenerationRoutes);
  return fmt::format(
      R"((sum by ({0}) (rate(strata:http_requests_total{{{1},status=~"5.."}}[{2}])) or )"
      "0 * sum by ({0}) (rate(strata:http_requests_total{{{1}}}[{2}]))) / "
      "sum by ({0}) (rate(strata:http_requests_total{{{1}}}[{2}]))",
      By(s), gen, s.window);
}
std::string ErrorRatio(std::string_view window) {
  QueryScope s;
  s.window = std::string(window);
  return ErrorRatio(s);
}
std::string Reporting(const QueryScope& s = {}) {
  return fmt::format("count by ({}) (up{{{}}} == 1)", By(s), Sel(s));
}
std::string Gauge(std::string_view agg, std::string_view family, const QueryScope& s) {
  return fmt::format("{} by ({}) ({}{{{}}})", agg, By(s), family, Sel(s));
}
std::string Running(std::string_view agg, const QueryScope& s = {}) {
  return Gauge(agg, "strata:num_requests_running", s);
}
std::string Waiting(const QueryScope& s = {}) {
  return Gauge("sum", "strata:num_requests_waiting", s);
}
// hits / lookups of the KV tiers, per tier.
std::string TierHitRate(const QueryScope& s) {
  const std::string hits = SumRate("strata:kv_tier_hits_total", s, "kv_tier");
  return hits + " / (" + hits + " + " + SumRate("strata:kv_tier_misses_total", s, "kv_tier") + ")";
}
// A gateway counter's rate by pool and `dimension`.
std::string GatewayRate(std::string_view family, std::string_view dimension, const QueryScope& s) {
  return fmt::format("sum by (pool, {}) (rate({}{}[{}]))", dimension, family, GwSel(s), s.window);
}

using Builder = std::string (*)(const QueryScope&);
// How a signal is built: one of the common shapes over `family` (a quantile, a mean, a replica
// rate, a gateway rate), or its own `build`.
enum class Shape { kQuantile, kMean, kRate, kGatewayRate, kOwn };
struct SignalDef {
  std::string_view name;
  Shape shape;
  std::string_view family = {};
  std::string_view by = {};  // kRate: an extra grouping label; kGatewayRate: the dimension
  double q = 0;              // kQuantile
  Builder build = nullptr;   // kOwn
};
constexpr SignalDef QuantileOf(std::string_view name, double q, std::string_view family) {
  return {name, Shape::kQuantile, family, {}, q};
}
constexpr SignalDef MeanOf(std::string_view name, std::string_view family) {
  return {name, Shape::kMean, family};
}
constexpr SignalDef RateOf(std::string_view name, std::string_view family,
                           std::string_view by = {}) {
  return {name, Shape::kRate, family, by};
}
constexpr SignalDef GatewayRateOf(std::string_view name, std::string_view family,
                                  std::string_view dimension) {
  return {name, Shape::kGatewayRate, family, dimension};
}
constexpr SignalDef Own(std::string_view name, Builder build) {
  return {name, Shape::kOwn, {}, {}, 0, build};
}

std::string Build(const SignalDef& d, const QueryScope& s) {
  switch (d.shape) {
    case Shape::kQuantile:
      return Quantile(d.q, d.family, s);
    case Shape::kMean:
      return Mean(d.family, s);
    case Shape::kRate:
      return SumRate(d.family, s, d.by);
    case Shape::kGatewayRate:
      return GatewayRate(d.family, d.by, s);
    case Shape::kOwn:
      break;
  }
  return d.build(s);
}

// The one table.
constexpr SignalDef kSignals[] = {
    Own("replicas", [](const QueryScope& s) { return Gauge("count", "up", s); }),
    Own("replicas_reporting", [](const QueryScope& s) { return Reporting(s); }),
    Own("desired_replicas",
        [](const QueryScope& s) {
          return "max by (pool) (strata_control_desired_replicas" + GwSel(s) + ")";
        }),
    Own("arrival_rate", [](const QueryScope& s) { return RequestRate(s); }),
    RateOf("finished_rate", "strata:request_success_total", "finished_reason"),
    RateOf("generation_tokens_rate", "strata:generation_tokens_total"),
    RateOf("prompt_tokens_rate", "strata:prompt_tokens_total"),
    Own("error_ratio", [](const QueryScope& s) { return ErrorRatio(s); }),
    QuantileOf("e2e_p50", 0.5, kE2e),
    QuantileOf("e2e_p95", 0.95, kE2e),
    QuantileOf("e2e_p99", 0.99, kE2e),
    QuantileOf("ttft_p50", 0.5, kTtft),
    QuantileOf("ttft_p95", 0.95, kTtft),
    QuantileOf("ttft_p99", 0.99, kTtft),
    QuantileOf("tpot_p50", 0.5, kTpot),
    QuantileOf("tpot_p95", 0.95, kTpot),
    QuantileOf("tpot_p99", 0.99, kTpot),
    MeanOf("mean_e2e", kE2e),
    MeanOf("queue_mean", kQueue),
    MeanOf("prefill_mean", kPrefill),
    MeanOf("decode_mean", kDecode),
    MeanOf("inference_mean", kInference),
    QuantileOf("queue_p95", 0.95, kQueue),
    QuantileOf("prefill_p95", 0.95, kPrefill),
    QuantileOf("decode_p95", 0.95, kDecode),
    QuantileOf("inference_p95", 0.95, kInference),
    Own("mean_running", [](const QueryScope& s) { return Running("avg", s); }),
    Own("running", [](const QueryScope& s) { return Running("sum", s); }),
    Own("waiting", [](const QueryScope& s) { return Waiting(s); }),
    Own("kv_usage",
        [](const QueryScope& s) { return Gauge("avg", "strata:kv_cache_usage_perc", s); }),
    Own("prefix_hit_rate",
        [](const QueryScope& s) {
          return SumRate("strata:prefix_cache_hits_total", s) + " / " +
                 SumRate("strata:prefix_cache_queries_total", s);
        }),
    Own("kv_tier_hit_rate", [](const QueryScope& s) { return TierHitRate(s); }),
    RateOf("preemption_rate", "strata:num_preemptions_total"),
    RateOf("deadline_exceeded_rate", "strata:requests_deadline_exceeded_total"),
    RateOf("displaced_rate", "strata:requests_displaced_total"),
    RateOf("trace_spans_exported_rate", "strata:trace_spans_exported_total"),
    RateOf("trace_spans_dropped_rate", "strata:trace_spans_dropped_total", "reason"),
    Own("held",
        [](const QueryScope& s) {
          return "sum by (pool) (strata_gateway_pool_held_requests" + GwSel(s) + ")";
        }),
    GatewayRateOf("gateway_request_rate", "strata_gateway:requests_total", "code"),
    GatewayRateOf("gateway_routing_decisions", "strata_gateway:routing_decisions_total", "reason"),
    GatewayRateOf("gateway_rejections", "strata_gateway:rejections_total", "reason"),
    Own("gateway_ttft_p95",
        [](const QueryScope& s) {
          return fmt::format(
              "histogram_quantile(0.95, sum by (pool, le) "
              "(rate(strata_gateway:time_to_first_token_seconds_bucket{}[{}])))",
              GwSel(s), s.window);
        }),
    // The gateway's exporter counters carry no pool (one gateway serves every pool).
    Own("gateway_trace_spans_exported_rate",
        [](const QueryScope& s) {
          return "sum(rate(strata_gateway:trace_spans_exported_total{role=\"gateway\"}[" +
                 s.window + "]))";
        }),
    Own("gateway_trace_spans_dropped_rate",
        [](const QueryScope& s) {
          return "sum by (reason) "
                 "(rate(strata_gateway:trace_spans_dropped_total{role=\"gateway\"}[" +
                 s.window + "]))";
        }),
};

// The largest latency bucket bound at or under `objective_s` (seconds); 0 when none (no
// objective, or one under the smallest bucket).
double WithinBucket(double objective_s) {
  double best = 0;
  for (double b : LatencyBuckets())
    if (b <= objective_s + 1e-12) best = b;
  return best;
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

std::vector<NamedQuery> Signals(const QueryScope& scope) {
  std::vector<NamedQuery> out;
  out.reserve(std::size(kSignals));
  for (const SignalDef& d : kSignals) out.push_back({std::string(d.name), Build(d, scope)});
  return out;
}

std::vector<std::string> SignalNames() {
  std::vector<std::string> out;
  out.reserve(std::size(kSignals));
  for (const SignalDef& d : kSignals) out.emplace_back(d.name);
  return out;
}

std::string Signal(std::string_view name, const QueryScope& scope) {
  for (const SignalDef& d : kSignals)
    if (d.name == name) return Build(d, scope);
  return "";
}

const std::vector<double>& LatencyBuckets() {
  static const std::vector<double> kBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08,
                                               0.1,   0.25,  0.5,  0.75, 1.0,  2.5,  5.0,
                                               7.5,   10.0,  20.0, 40.0, 80.0};
  return kBuckets;
}

std::vector<NamedQuery> AutoscalerQueries(std::string_view window) {
  QueryScope s;
  s.window = std::string(window);
  constexpr std::array<const char*, 11> kNames = {
      "replicas", "replicas_reporting", "arrival_rate", "error_ratio", "e2e_p95", "ttft_p95",
      "tpot_p95", "mean_e2e",           "mean_running", "waiting",     "held"};
  std::vector<NamedQuery> out;
  out.reserve(kNames.size());
  for (const char* name : kNames) out.push_back({name, Signal(name, s)});
  return out;
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
  out.push_back({"strata:pool_desired_replicas", Signal("desired_replicas", {})});
  return out;
}

namespace {

// A per-pool recorded rule: its pool goes into the rule's labels (the same record name for each
// pool must differ in its labels: promtool's duplicate-rule lint).
struct PoolRule {
  std::string pool;
  NamedQuery rule;
};

std::vector<PoolRule> SloRules(const DeploymentSpec& spec) {
  std::vector<PoolRule> out;
  for (const PoolSpec& pool : spec.pools) {
    for (std::string_view w : kWindows) {
      if (pool.slo.error_rate > 0)
        out.push_back({pool.name,
                       {fmt::format("strata:pool_error_budget_burn:{}", w),
                        fmt::format(R"(strata:pool_error_ratio:{}{{pool="{}"}} / {})", w, pool.name,
                                    pool.slo.error_rate)}});
      for (const Latency& l : kLatencies) {
        const double bound = WithinBucket(pool.slo.*l.objective / 1000);
        if (bound <= 0) continue;
        const std::string attainment = fmt::format("{}:attainment_{}", l.recorded, w);
        const std::string sel = fmt::format(R"({},pool="{}")", kReplica, pool.name);
        out.push_back(
            {pool.name,
             {attainment, fmt::format(R"(sum by (pool) (rate({0}_bucket{{{1},le="{2}"}}[{3}])) / )"
                                      "sum by (pool) (rate({0}_count{{{1}}}[{3}]))",
                                      l.family, sel, bound, w)}});
        out.push_back({pool.name,
                       {fmt::format("{}:budget_burn_{}", l.recorded, w),
                        fmt::format(R"((1 - {}{{pool="{}"}}) / 0.05)", attainment, pool.name)}});
      }
    }
  }
  return out;
}

}  // namespace

std::vector<NamedQuery> SloRecordingRules(const DeploymentSpec& spec) {
  std::vector<PoolRule> rules = SloRules(spec);
  std::vector<NamedQuery> out;
  out.reserve(rules.size());
  for (PoolRule& r : rules) out.push_back(std::move(r.rule));
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
  const std::vector<PoolRule> objectives = SloRules(spec);
  y += "  - name: strata-slo-objectives\n    rules:";
  y += objectives.empty() ? " []\n" : "\n";
  for (const PoolRule& r : objectives)
    y += fmt::format("      - record: {}\n        expr: {}\n        labels:\n          pool: {}\n",
                     r.rule.name, Quote(r.rule.expr), Quote(r.pool));
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
