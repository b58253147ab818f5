#include "control/dashboard.h"

#include <fmt/format.h>

#include <array>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>

#include "control/queries.h"

namespace strata::control {
namespace {

using J = nlohmann::ordered_json;

constexpr std::string_view kRate = "$__rate_interval";
constexpr std::string_view kPoolMatch = R"(pool=~"$pool")";
constexpr std::string_view kReplicaMatch = R"(pool=~"$pool",replica=~"$replica")";

QueryScope PoolScope() {
  QueryScope s;
  s.window = std::string(kRate);
  s.match = std::string(kPoolMatch);
  return s;
}
QueryScope ReplicaScope() {
  QueryScope s;
  s.window = std::string(kRate);
  s.per_replica = true;
  s.match = std::string(kReplicaMatch);
  return s;
}

// A target of the signal `name` (control/queries) in `scope`.
DashboardTarget Sig(std::string_view name, const QueryScope& scope, std::string legend) {
  return {"", Signal(name, scope), std::move(legend)};
}
// A target of a recorded series, filtered on the pool variable.
DashboardTarget Recorded(std::string_view series, std::string legend) {
  return {"", fmt::format("{}{{{}}}", series, kPoolMatch), std::move(legend)};
}

DashboardPanel Panel(std::string title, std::string type, std::string unit, std::string what,
                     std::vector<DashboardTarget> targets) {
  return {std::move(title), std::move(type), std::move(unit), std::move(what), std::move(targets)};
}

// p50 / p95 / p99 of one latency signal stem ("ttft", "tpot", "e2e").
std::vector<DashboardTarget> Quantiles(std::string_view stem, const QueryScope& scope,
                                       std::string_view who) {
  std::vector<DashboardTarget> out;
  out.reserve(3);
  for (std::string_view q : {"p50", "p95", "p99"})
    out.push_back(Sig(fmt::format("{}_{}", stem, q), scope, fmt::format("{} {}", who, q)));
  return out;
}

// The latency objectives: title, recorded stem (control/queries).
struct Objective {
  std::string_view title;
  std::string_view recorded;
};
constexpr std::array<Objective, 3> kObjectives = {{
    {"E2E", "strata:pool_e2e_latency_seconds"},
    {"TTFT", "strata:pool_ttft_seconds"},
    {"TPOT", "strata:pool_tpot_seconds"},
}};

DashboardRow SloRow(const DeploymentSpec* spec) {
  // With a spec, the per-objective series its rules record (an objective under the smallest
  // latency bucket records none); without, all of them.
  std::set<std::string> recorded;
  if (spec != nullptr)
    for (const NamedQuery& r : SloRecordingRules(*spec)) recorded.insert(r.name);
  const auto add = [&](std::vector<DashboardTarget>* to, const std::string& series,
                       std::string legend) {
    if (spec == nullptr || recorded.count(series) > 0)
      to->push_back(Recorded(series, std::move(legend)));
  };
  std::vector<DashboardTarget> attain;
  std::vector<DashboardTarget> burn;
  for (std::string_view w : {"5m", "1h"})
    add(&burn, fmt::format("strata:pool_error_budget_burn:{}", w),
        fmt::format("{{{{pool}}}} errors {}", w));
  for (const Objective& o : kObjectives) {
    add(&attain, fmt::format("{}:attainment_1h", o.recorded),
        fmt::format("{{{{pool}}}} {}", o.title));
    for (std::string_view w : {"5m", "1h"})
      add(&burn, fmt::format("{}:budget_burn_{}", o.recorded, w),
          fmt::format("{{{{pool}}}} {} {}", o.title, w));
  }
  DashboardRow row{"SLOs (per pool)", {}};
  if (!attain.empty())
    row.panels.push_back(Panel("SLO attainment (1h)", "stat", "percentunit",
                               "Share of the last hour's requests within each latency objective "
                               "(a p95 objective is met at 95 %).",
                               std::move(attain)));
  if (!burn.empty())
    row.panels.push_back(Panel("Error-budget burn", "timeseries", "short",
                               "Budget spent per unit of budget time over 5m and 1h: 1 spends "
                               "it exactly over the SLO period; the page alert fires at 14.4.",
                               std::move(burn)));
  row.panels.push_back(Panel("Error ratio", "timeseries", "percentunit",
                             "5xx share of the generation answers (recorded).",
                             {Recorded("strata:pool_error_ratio:5m", "{{pool}} 5m"),
                              Recorded("strata:pool_error_ratio:1h", "{{pool}} 1h")}));
  return row;
}

DashboardRow LatencyRow() {
  const QueryScope s = PoolScope();
  return {
      "Latency (per pool)",
      {Panel("TTFT", "timeseries", "s", "Time to first token.", Quantiles("ttft", s, "{{pool}}")),
       Panel("TPOT", "timeseries", "s", "Time per output token (gap between tokens).",
             Quantiles("tpot", s, "{{pool}}")),
       Panel("E2E latency", "timeseries", "s", "Request arrival to its last byte.",
             Quantiles("e2e", s, "{{pool}}"))}};
}

DashboardRow LoadRow() {
  const QueryScope s = PoolScope();
  return {
      "Throughput and load (per pool)",
      {Panel("Requests/s", "timeseries", "reqps",
             "Accepted by the engines, and finished by reason.",
             {Sig("arrival_rate", s, "{{pool}} accepted"),
              Sig("finished_rate", s, "{{pool}} {{finished_reason}}")}),
       Panel("Tokens/s", "timeseries", "short", "Generated and prompt tokens per second.",
             {Sig("generation_tokens_rate", s, "{{pool}} generated"),
              Sig("prompt_tokens_rate", s, "{{pool}} prompt")}),
       Panel("Running / waiting", "timeseries", "short",
             "Requests in the engines' batches and in their waiting queues.",
             {Sig("running", s, "{{pool}} running"), Sig("waiting", s, "{{pool}} waiting")}),
       Panel("KV-cache usage", "timeseries", "percentunit",
             "Mean share of KV blocks in use over the pool's replicas.",
             {Sig("kv_usage", s, "{{pool}}")}),
       Panel("Replicas", "stat", "short",
             "Ready (scraped and up), desired (the autoscaler), requests held at zero.",
             {Sig("replicas_reporting", s, "{{pool}} ready"),
              Sig("desired_replicas", s, "{{pool}} desired"), Sig("held", s, "{{pool}} held")})}};
}

DashboardRow CacheRow() {
  const QueryScope s = PoolScope();
  return {"Caches and preemption (per pool)",
          {Panel("Prefix-cache hit rate", "timeseries", "percentunit",
                 "Prompt tokens reused (engine pool + KV tiers) / looked up.",
                 {Sig("prefix_hit_rate", s, "{{pool}}")}),
           Panel("KV-tier hit rate", "timeseries", "percentunit",
                 "Block lookups found per tier (ram, disk, redis).",
                 {Sig("kv_tier_hit_rate", s, "{{pool}} {{kv_tier}}")}),
           Panel("Preemptions/s", "timeseries", "short", "Sequences preempted (KV pressure).",
                 {Sig("preemption_rate", s, "{{pool}}")})}};
}

DashboardRow BreakdownRow() {
  const QueryScope s = PoolScope();
  return {
      "Request breakdown (per pool)",
      {Panel("Mean time per phase", "timeseries", "s",
             "Queue (submit to first step), prefill (to first token), decode (to last "
             "token); inference = prefill + decode.",
             {Sig("queue_mean", s, "{{pool}} queue"), Sig("prefill_mean", s, "{{pool}} prefill"),
              Sig("decode_mean", s, "{{pool}} decode"),
              Sig("inference_mean", s, "{{pool}} inference")}),
       Panel("p95 per phase", "timeseries", "s", "The same phases' p95.",
             {Sig("queue_p95", s, "{{pool}} queue"), Sig("prefill_p95", s, "{{pool}} prefill"),
              Sig("decode_p95", s, "{{pool}} decode"),
              Sig("inference_p95", s, "{{pool}} inference")})}};
}

DashboardRow GatewayRow() {
  const QueryScope s = PoolScope();
  return {"Gateway",
          {Panel("Routing decisions/s", "timeseries", "short",
                 "The balancer's choices by reason: affinity, load, fallback, retry.",
                 {Sig("gateway_routing_decisions", s, "{{pool}} {{reason}}")}),
           Panel("429s/s by reason", "timeseries", "short",
                 "Gateway rejections (tenant limits, pool capacity) and replicas' displaced "
                 "requests.",
                 {Sig("gateway_rejections", s, "{{pool}} {{reason}}"),
                  Sig("displaced_rate", s, "{{pool}} displaced (replica)")}),
           Panel("Answers/s by code", "timeseries", "reqps", "Proxied requests as they ended.",
                 {Sig("gateway_request_rate", s, "{{pool}} {{code}}"),
                  Sig("deadline_exceeded_rate", s, "{{pool}} deadline exceeded (replica)")}),
           Panel("Gateway TTFT p95", "timeseries", "s",
                 "Arrival at the gateway to the first relayed byte.",
                 {Sig("gateway_ttft_p95", s, "{{pool}}")})}};
}

DashboardRow ReplicaRow() {
  const QueryScope s = ReplicaScope();
  constexpr std::string_view kWho = "{{replica}}";
  return {
      "Per replica",
      {Panel("TTFT per replica", "timeseries", "s", "", Quantiles("ttft", s, kWho)),
       Panel("TPOT per replica", "timeseries", "s", "", Quantiles("tpot", s, kWho)),
       Panel("E2E per replica", "timeseries", "s", "", Quantiles("e2e", s, kWho)),
       Panel("Throughput per replica", "timeseries", "short", "Requests/s and tokens/s.",
             {Sig("arrival_rate", s, "{{replica}} req/s"),
              Sig("generation_tokens_rate", s, "{{replica}} tok/s")}),
       Panel("Load per replica", "timeseries", "short", "",
             {Sig("running", s, "{{replica}} running"), Sig("waiting", s, "{{replica}} waiting")}),
       Panel("KV usage per replica", "timeseries", "percentunit", "",
             {Sig("kv_usage", s, "{{replica}}")})}};
}

DashboardRow TraceRow() {
  const QueryScope s = PoolScope();
  return {"Tracing (OTLP exporter)",
          {Panel("Spans/s exported", "timeseries", "short", "",
                 {Sig("trace_spans_exported_rate", s, "{{pool}} replicas"),
                  Sig("gateway_trace_spans_exported_rate", s, "gateway")}),
           Panel("Spans/s dropped", "timeseries", "short",
                 "Queue full or export failed (the collector down or slow).",
                 {Sig("trace_spans_dropped_rate", s, "{{pool}} {{reason}}"),
                  Sig("gateway_trace_spans_dropped_rate", s, "gateway {{reason}}")})}};
}

J Datasource() { return {{"type", "prometheus"}, {"uid", "${datasource}"}}; }

J PanelJson(const DashboardPanel& p, int id, int x, int y, int w) {
  J targets = J::array();
  for (const DashboardTarget& t : p.targets)
    targets.push_back({{"datasource", Datasource()},
                       {"refId", t.ref_id},
                       {"expr", t.expr},
                       {"legendFormat", t.legend},
                       {"range", true}});
  J options;
  if (p.type == "stat") {
    options = {{"reduceOptions", {{"calcs", {"lastNotNull"}}, {"fields", ""}, {"values", false}}},
               {"colorMode", "value"},
               {"graphMode", "area"},
               {"textMode", "auto"}};
  } else {
    options = {{"legend", {{"displayMode", "list"}, {"placement", "bottom"}, {"showLegend", true}}},
               {"tooltip", {{"mode", "multi"}, {"sort", "none"}}}};
  }
  return {{"id", id},
          {"type", p.type},
          {"title", p.title},
          {"description", p.description},
          {"datasource", Datasource()},
          {"gridPos", {{"h", 8}, {"w", w}, {"x", x}, {"y", y}}},
          {"fieldConfig", {{"defaults", {{"unit", p.unit}}}, {"overrides", J::array()}}},
          {"options", options},
          {"targets", targets}};
}

J Variable(std::string_view name, std::string_view label, std::string_view query) {
  const std::string q(query);
  return {{"name", name},
          {"label", label},
          {"type", "query"},
          {"datasource", Datasource()},
          {"definition", q},
          {"query", {{"query", q}, {"refId", std::string("var-") + std::string(name)}}},
          {"includeAll", true},
          {"multi", true},
          {"allValue", ".*"},
          {"current", {{"selected", true}, {"text", {"All"}}, {"value", {"$__all"}}}},
          {"refresh", 2},
          {"sort", 1}};
}

J Templating() {
  J ds = {{"name", "datasource"},
          {"label", "Data source"},
          {"type", "datasource"},
          {"query", "prometheus"},
          {"current", J::object()},
          {"refresh", 1},
          {"hide", 0}};
  return {{"list",
           {ds, Variable("pool", "Pool", R"(label_values(up{role="replica"}, pool))"),
            Variable("replica", "Replica",
                     R"(label_values(up{role="replica",pool=~"$pool"}, replica))")}}};
}

}  // namespace

std::vector<DashboardRow> DashboardRows(const DeploymentSpec* spec) {
  std::vector<DashboardRow> rows = {SloRow(spec),   LatencyRow(), LoadRow(),    CacheRow(),
                                    BreakdownRow(), GatewayRow(), ReplicaRow(), TraceRow()};
  for (DashboardRow& r : rows)
    for (DashboardPanel& p : r.panels)
      for (size_t i = 0; i < p.targets.size(); ++i)
        p.targets[i].ref_id = std::string(1, static_cast<char>('A' + i));
  return rows;
}

std::string GrafanaDashboardJson(const DeploymentSpec* spec) {
  const std::string name = spec == nullptr ? "strata" : spec->name;
  J panels = J::array();
  int id = 1;
  int y = 0;
  for (const DashboardRow& r : DashboardRows(spec)) {
    panels.push_back({{"id", id++},
                      {"type", "row"},
                      {"title", r.title},
                      {"collapsed", false},
                      {"gridPos", {{"h", 1}, {"w", 24}, {"x", 0}, {"y", y}}},
                      {"panels", J::array()}});
    y += 1;
    // Three panels a line (four in a row of exactly four).
    const int per_line = r.panels.size() == 4 ? 4 : 3;
    const int w = 24 / per_line;
    for (size_t i = 0; i < r.panels.size(); ++i) {
      const int col = static_cast<int>(i) % per_line;
      if (i > 0 && col == 0) y += 8;
      panels.push_back(PanelJson(r.panels[i], id++, col * w, y, w));
    }
    y += 8;
  }
  J d = {{"title", "Strata: " + name},
         {"uid", "strata-" + name},
         {"description",
          "Generated by `strata render grafana` from control/queries (the expressions the "
          "autoscaler and the Prometheus rules use)."},
         {"tags", {"strata", "llm-serving"}},
         {"editable", true},
         {"graphTooltip", 1},
         {"schemaVersion", 39},
         {"version", 1},
         {"time", {{"from", "now-1h"}, {"to", "now"}}},
         {"refresh", "30s"},
         {"timezone", ""},
         {"annotations", {{"list", J::array()}}},
         {"templating", Templating()},
         {"panels", panels}};
  return d.dump(2) + "\n";
}

std::string ExpandDashboardVariables(std::string expr, std::string_view window) {
  const std::pair<std::string_view, std::string> subs[] = {
      {"$__rate_interval", std::string(window)}, {"$replica", ".*"}, {"$pool", ".*"}};
  for (const auto& [from, to] : subs) {
    for (size_t at = expr.find(from); at != std::string::npos; at = expr.find(from, at + to.size()))
      expr.replace(at, from.size(), to);
  }
  return expr;
}

}  // namespace strata::control
