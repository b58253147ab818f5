// The dashboard and the rules as committed: deploy/grafana/strata.json and
// deploy/prometheus/strata-rules.yml equal what `strata render` writes for examples/deploy.yaml
// (byte for byte, so they cannot drift from control/queries); the dashboard JSON, loaded as
// Grafana would, has the datasource variable on every panel and target, at least one query per
// panel, unique refIds, and every expression (dashboard and rules) is well formed and reads only
// families Strata exports (or series its rules record).
#include "control/dashboard.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "control/queries.h"

namespace strata::control {
namespace {

using J = nlohmann::json;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

DeploymentSpec Example() {
  auto spec = LoadDeploymentSpec(STRATA_EXAMPLE_DEPLOY_YAML);
  EXPECT_TRUE(spec.ok()) << spec.status().message();
  return spec.ok() ? *spec : DeploymentSpec{};
}

// Every family a replica, the gateway or `strata up` exports (docs/metrics.md), and `up`.
// Histograms are listed by their base name.
const std::set<std::string>& ExportedFamilies() {
  static const std::set<std::string> kFamilies = {
      "up",
      // strata serve (server/api.cc)
      "strata:time_to_first_token_seconds", "strata:inter_token_latency_seconds",
      "strata:e2e_request_latency_seconds", "strata:request_queue_time_seconds",
      "strata:request_prompt_tokens", "strata:request_generation_tokens",
      "strata:num_requests_running", "strata:num_requests_waiting", "strata:kv_cache_usage_perc",
      "strata:prompt_tokens_total", "strata:generation_tokens_total",
      "strata:prefix_cache_queries_total", "strata:prefix_cache_hits_total",
      "strata:prefix_cache_pool_hits_total", "strata:num_preemptions_total",
      "strata:request_success_total", "strata:http_requests_total",
      "strata:requests_deadline_exceeded_total", "strata:requests_displaced_total",
      "strata:requests_cut_at_shutdown_total", "strata:internal_errors_total",
      "strata:kv_tier_hit_tokens_total", "strata:kv_tier_hits_total", "strata:kv_tier_misses_total",
      // issue 19: the breakdown histograms and the exporter counters (obs-design)
      "strata:request_prefill_time_seconds", "strata:request_decode_time_seconds",
      "strata:requests_received_total", "strata:request_inference_time_seconds",
      "strata:trace_spans_exported_total", "strata:trace_spans_dropped_total",
      // strata gateway (gateway/gateway_metrics.h)
      "strata_gateway:requests_total", "strata_gateway:time_to_first_token_seconds",
      "strata_gateway:routing_decisions_total", "strata_gateway:rejections_total",
      "strata_gateway_pool_held_requests", "strata_gateway:trace_spans_exported_total",
      "strata_gateway:trace_spans_dropped_total",
      // strata up / strata autoscaler
      "strata_control_desired_replicas"};
  return kFamilies;
}

std::set<std::string> KnownSeries() {
  std::set<std::string> known = ExportedFamilies();
  for (const NamedQuery& r : RecordingRules()) known.insert(r.name);
  for (const NamedQuery& r : SloRecordingRules(Example())) known.insert(r.name);
  return known;
}

bool Known(const std::set<std::string>& known, const std::string& name) {
  if (known.count(name) > 0) return true;
  for (std::string_view suffix : {"_bucket", "_sum", "_count"}) {
    if (name.size() > suffix.size() && name.ends_with(suffix) &&
        known.count(name.substr(0, name.size() - suffix.size())) > 0)
      return true;
  }
  return false;
}

// What is wrong with `expr` ("" = nothing): brackets that do not balance (outside strings), an
// unterminated string, or a metric name outside `known`. Metric names are the identifiers left
// once strings, label matchers and durations are cut out, that are not a function or aggregation
// (followed by "("), a keyword, or a label of a by/without/on/ignoring list.
std::string CheckExpr(const std::string& expr, const std::set<std::string>& known) {
  std::string bare;  // strings, {...} and [...] removed
  std::vector<char> open;
  bool in_string = false;
  for (size_t i = 0; i < expr.size(); ++i) {
    const char c = expr[i];
    if (in_string) {
      if (c == '\\') ++i;
      if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
      continue;
    }
    if (c == '(' || c == '{' || c == '[') open.push_back(c);
    if (c == ')' || c == '}' || c == ']') {
      const char want = c == ')' ? '(' : c == '}' ? '{' : '[';
      if (open.empty() || open.back() != want) return fmt::format("unbalanced '{}' at {}", c, i);
      open.pop_back();
      if (c != ')') continue;
    }
    const bool inside = std::find(open.begin(), open.end(), '{') != open.end() ||
                        std::find(open.begin(), open.end(), '[') != open.end();
    if (!inside && c != '{' && c != '[') bare += c;
  }
  if (in_string) return "unterminated string";
  if (!open.empty()) return fmt::format("{} bracket(s) left open", open.size());
  static const std::set<std::string> kKeywords = {"and", "or", "unless", "bool", "offset"};
  static const std::set<std::string> kLabelLists = {"by",       "without",    "on",
                                                    "ignoring", "group_left", "group_right"};
  const auto ident = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':';
  };
  for (size_t i = 0; i < bare.size();) {
    if (!ident(bare[i]) || std::isdigit(static_cast<unsigned char>(bare[i])) || bare[i] == '.') {
      // A number (0.95, 1e-3) is skipped whole.
      if (std::isdigit(static_cast<unsigned char>(bare[i])))
        while (i < bare.size() && (ident(bare[i]) || bare[i] == '.')) ++i;
      else
        ++i;
      continue;
    }
    size_t end = i;
    while (end < bare.size() && ident(bare[end])) ++end;
    const std::string word = bare.substr(i, end - i);
    size_t next = end;
    while (next < bare.size() && bare[next] == ' ') ++next;
    i = end;
    if (kLabelLists.count(word) > 0) {  // skip its "( labels )"
      if (next < bare.size() && bare[next] == '(') i = bare.find(')', next) + 1;
      continue;
    }
    if (kKeywords.count(word) > 0) continue;
    if (next < bare.size() && bare[next] == '(') continue;  // a function or an aggregation
    if (bare.compare(next, 3, "by ") == 0 || bare.compare(next, 8, "without ") == 0)
      continue;  // an aggregation: sum by (...) (...)
    if (!Known(known, word)) return "unknown series " + word;
  }
  return "";
}

TEST(Dashboard, TheCheckOfAnExpressionCanFail) {
  const std::set<std::string> known = KnownSeries();
  EXPECT_EQ(CheckExpr(Signal("e2e_p95", {}), known), "");
  EXPECT_EQ(CheckExpr(R"(sum by (pool) (rate(strata:prompt_tokens_total{pool="a(b"}[1m])))", known),
            "");
  EXPECT_NE(CheckExpr("sum(rate(strata:no_such_family[1m]))", known), "");
  EXPECT_NE(CheckExpr("sum(rate(strata:prompt_tokens_total[1m])", known), "");
  EXPECT_NE(CheckExpr("sum(rate(strata:prompt_tokens_total[1m)))", known), "");
  EXPECT_NE(CheckExpr(R"(up{role="replica})", known), "");
  EXPECT_NE(CheckExpr("vllm:num_requests_running", known), "");
}

TEST(Dashboard, TheCommittedFilesAreTheRenderedOnes) {
  const DeploymentSpec spec = Example();
  const std::string dir = std::string(STRATA_SOURCE_DIR) + "/deploy/";
  EXPECT_TRUE(ReadFile(dir + "grafana/strata.json") == GrafanaDashboardJson(&spec))
      << "deploy/grafana/strata.json is stale: strata render grafana -f examples/deploy.yaml "
         "-o deploy/grafana/strata.json";
  EXPECT_TRUE(ReadFile(dir + "prometheus/strata-rules.yml") == RulesYaml(spec))
      << "deploy/prometheus/strata-rules.yml is stale: strata render rules -f "
         "examples/deploy.yaml -o deploy/prometheus/strata-rules.yml";
}

TEST(Dashboard, PromtoolAcceptsTheCommittedRulesFile) {
  if (std::system("command -v promtool > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "promtool not installed (scripts/install-deps.sh)";
  const std::string file = std::string(STRATA_SOURCE_DIR) + "/deploy/prometheus/strata-rules.yml";
  EXPECT_EQ(std::system(("promtool check rules " + file + " > /dev/null 2>&1").c_str()), 0)
      << "promtool check rules " << file;
}

TEST(Dashboard, EveryPanelReadsTheDatasourceVariableAndWellFormedQueries) {
  const J d = J::parse(ReadFile(std::string(STRATA_SOURCE_DIR) + "/deploy/grafana/strata.json"),
                       nullptr, false);
  ASSERT_TRUE(d.is_object());
  EXPECT_EQ(d["schemaVersion"], 39);
  std::set<std::string> vars;
  for (const J& v : d["templating"]["list"]) vars.insert(v["name"].get<std::string>());
  EXPECT_EQ(vars, (std::set<std::string>{"datasource", "pool", "replica"}));
  const std::set<std::string> known = KnownSeries();
  int panels = 0;
  int rows = 0;
  std::set<int> ids;
  for (const J& p : d["panels"]) {
    EXPECT_TRUE(ids.insert(p["id"].get<int>()).second) << p.dump();
    if (p["type"] == "row") {
      ++rows;
      continue;
    }
    ++panels;
    const std::string title = p["title"].get<std::string>();
    EXPECT_TRUE(p["type"] == "timeseries" || p["type"] == "stat") << title;
    EXPECT_EQ(p["datasource"]["uid"], "${datasource}") << title;
    EXPECT_EQ(p["datasource"]["type"], "prometheus") << title;
    ASSERT_TRUE(p["targets"].is_array() && !p["targets"].empty()) << title;
    std::set<std::string> ref_ids;
    for (const J& t : p["targets"]) {
      EXPECT_EQ(t["datasource"]["uid"], "${datasource}") << title;
      EXPECT_TRUE(ref_ids.insert(t["refId"].get<std::string>()).second) << title;
      const std::string expr = t["expr"].get<std::string>();
      EXPECT_FALSE(expr.empty()) << title;
      EXPECT_FALSE(t["legendFormat"].get<std::string>().empty()) << title;
      EXPECT_EQ(CheckExpr(expr, known), "") << title << ": " << expr;
    }
  }
  EXPECT_GE(rows, 8);
  EXPECT_GE(panels, 25);
}

TEST(Dashboard, EveryRuleExpressionIsWellFormed) {
  const DeploymentSpec spec = Example();
  const std::set<std::string> known = KnownSeries();
  for (const auto& rules : {RecordingRules(), SloRecordingRules(spec), AlertRules(spec)})
    for (const NamedQuery& r : rules)
      EXPECT_EQ(CheckExpr(r.expr, known), "") << r.name << ": " << r.expr;
}

TEST(Dashboard, CoversEverySignalTheIssueNames) {
  std::string all;
  for (const DashboardRow& r : DashboardRows(nullptr))
    for (const DashboardPanel& p : r.panels)
      for (const DashboardTarget& t : p.targets) all += t.expr + "\n";
  for (const char* family : {"strata:time_to_first_token_seconds_bucket",
                             "strata:inter_token_latency_seconds_bucket",
                             "strata:e2e_request_latency_seconds_bucket",
                             "strata:generation_tokens_total",
                             "strata:num_requests_running",
                             "strata:num_requests_waiting",
                             "strata:kv_cache_usage_perc",
                             "strata:prefix_cache_hits_total",
                             "strata:kv_tier_hits_total",
                             "strata:num_preemptions_total",
                             "strata_gateway:routing_decisions_total",
                             "strata_gateway:rejections_total",
                             "strata_control_desired_replicas",
                             "strata:pool_error_budget_burn:5m",
                             "strata:pool_e2e_latency_seconds:attainment_1h",
                             "strata:request_prefill_time_seconds",
                             "strata:request_decode_time_seconds",
                             "strata:request_inference_time_seconds",
                             "strata:request_queue_time_seconds",
                             "strata:trace_spans_dropped_total",
                             "strata_gateway:trace_spans_dropped_total"})
    EXPECT_NE(all.find(family), std::string::npos) << family;
  // Per pool and per replica.
  EXPECT_NE(all.find(R"(sum by (pool, replica, le))"), std::string::npos);
  for (const char* q : {"0.5", "0.95", "0.99"})
    EXPECT_NE(all.find(std::string("histogram_quantile(") + q + ", sum by (pool, le)"),
              std::string::npos)
        << q;
}

TEST(Dashboard, ASpecShowsOnlyTheObjectivesItsPoolsSet) {
  const DeploymentSpec spec = Example();  // e2e and error objectives only
  const std::string with = GrafanaDashboardJson(&spec);
  EXPECT_NE(with.find("strata:pool_e2e_latency_seconds:attainment_1h"), std::string::npos);
  EXPECT_EQ(with.find("strata:pool_ttft_seconds:attainment_1h"), std::string::npos);
  EXPECT_NE(with.find("\"uid\": \"strata-reference\""), std::string::npos);
  const std::string all = GrafanaDashboardJson(nullptr);
  EXPECT_NE(all.find("strata:pool_ttft_seconds:attainment_1h"), std::string::npos);
  EXPECT_EQ(GrafanaDashboardJson(&spec), with);  // deterministic
}

TEST(Dashboard, VariablesExpandForAPlainQuery) {
  EXPECT_EQ(ExpandDashboardVariables(
                R"(rate(x{pool=~"$pool",replica=~"$replica"}[$__rate_interval]))", "30s"),
            R"(rate(x{pool=~".*",replica=~".*"}[30s]))");
}

}  // namespace
}  // namespace strata::control
