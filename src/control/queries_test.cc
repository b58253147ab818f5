#include "control/queries.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

namespace strata::control {
namespace {

DeploymentSpec Spec() {
  DeploymentSpec s;
  s.name = "demo";
  PoolSpec gold;
  gold.name = "long-context";
  gold.slo.e2e_p95_ms = 100;
  gold.slo.ttft_p95_ms = 50;
  gold.slo.error_rate = 0.01;
  PoolSpec general;
  general.name = "general";
  general.slo.e2e_p95_ms = 500;
  general.slo.tpot_p95_ms = 20;
  general.slo.error_rate = 0.05;
  s.pools = {gold, general};
  return s;
}

// Runs `promtool check rules` on `yaml`; returns its exit status and output.
int Promtool(const std::string& yaml, std::string* output) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("strata-rules-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto file = dir / "rules.yml";
  std::ofstream(file) << yaml;
  const std::string cmd = "promtool check rules " + file.string() + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) output->append(buf, n);
  const int rc = ::pclose(p);
  std::filesystem::remove_all(dir);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

bool HavePromtool() { return std::system("command -v promtool > /dev/null 2>&1") == 0; }

TEST(Queries, AutoscalerQueriesCoverTheObservation) {
  std::set<std::string> names;
  for (const NamedQuery& q : AutoscalerQueries("2m")) {
    names.insert(q.name);
    EXPECT_NE(q.expr.find("by (pool"), std::string::npos) << q.name << ": " << q.expr;
  }
  for (const char* n : {"replicas", "replicas_reporting", "arrival_rate", "error_ratio", "e2e_p95",
                        "ttft_p95", "tpot_p95", "mean_e2e", "mean_running", "waiting", "held"})
    EXPECT_EQ(names.count(n), 1u) << n;
  EXPECT_NE(AutoscalerQueries("2m")[2].expr.find("[2m]"), std::string::npos);
}

TEST(Queries, RulesRecordEveryWindowAndAlertPerObjective) {
  const std::string y = RulesYaml(Spec());
  for (const char* w : {"1m", "5m", "30m", "1h", "6h"}) {
    EXPECT_NE(y.find(std::string("record: strata:pool_e2e_latency_seconds:p95_") + w),
              std::string::npos);
    EXPECT_NE(y.find(std::string("record: strata:pool_error_ratio:") + w), std::string::npos);
  }
  EXPECT_NE(y.find("record: strata:pool_desired_replicas"), std::string::npos);
  // Gold: e2e 100 ms + TTFT 50 ms + errors; general: e2e 500 ms + TPOT 20 ms + errors; two
  // windows pairs each.
  EXPECT_EQ(AlertRules(Spec()).size(), 12u);
  EXPECT_NE(y.find(R"(strata:pool_e2e_latency_seconds:p95_5m{pool="long-context"} > 0.1 and )"
                   R"(strata:pool_e2e_latency_seconds:p95_1h{pool="long-context"} > 0.1)"),
            std::string::npos)
      << y;
  EXPECT_NE(y.find(R"(strata:pool_error_ratio:5m{pool="general"} > 0.72)"), std::string::npos);
  int tpot = 0;
  for (const NamedQuery& a : AlertRules(Spec())) {
    if (a.name == "StrataPoolTpotSlo") {
      ++tpot;
      EXPECT_NE(a.expr.find(R"(pool="general")"), std::string::npos);  // gold sets no TPOT SLO
    }
  }
  EXPECT_EQ(tpot, 2);
  EXPECT_NE(y.find("severity: ticket"), std::string::npos);
}

TEST(Queries, PromtoolAcceptsTheRules) {
  if (!HavePromtool()) GTEST_SKIP() << "promtool not installed (scripts/install-deps.sh)";
  std::string out;
  EXPECT_EQ(Promtool(RulesYaml(Spec()), &out), 0) << out;
  EXPECT_NE(out.find("SUCCESS"), std::string::npos) << out;
  // A spec without objectives still gives a valid file (empty alert group).
  DeploymentSpec bare;
  bare.name = "bare";
  out.clear();
  EXPECT_EQ(Promtool(RulesYaml(bare), &out), 0) << out;
  // The check can fail: a broken expression is refused.
  out.clear();
  std::string broken = RulesYaml(Spec());
  broken.replace(broken.find("histogram_quantile(0.95,"), 24, "histogram_quantile(0.95 ");
  EXPECT_NE(Promtool(broken, &out), 0) << out;
}

TEST(Queries, PromtoolAcceptsTheExampleSpecsRules) {
  if (!HavePromtool()) GTEST_SKIP() << "promtool not installed (scripts/install-deps.sh)";
  auto spec = LoadDeploymentSpec(STRATA_EXAMPLE_DEPLOY_YAML);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  ASSERT_FALSE(AlertRules(*spec).empty());  // its pools have SLOs
  std::string out;
  EXPECT_EQ(Promtool(RulesYaml(*spec), &out), 0) << out;
  for (const PoolSpec& p : spec->pools)
    EXPECT_NE(RulesYaml(*spec).find("pool=\"" + p.name + "\""), std::string::npos) << p.name;
}

TEST(Queries, TheAutoscalerQueriesAreSignalsOfTheOneTable) {
  QueryScope s;
  s.window = "2m";
  for (const NamedQuery& q : AutoscalerQueries("2m"))
    EXPECT_EQ(q.expr, Signal(q.name, s)) << q.name;
  EXPECT_EQ(Signal("no_such_signal", s), "");
  EXPECT_EQ(Signal("e2e_p95", s),
            "histogram_quantile(0.95, sum by (pool, le) "
            "(rate(strata:e2e_request_latency_seconds_bucket{role=\"replica\"}[2m])))");
  s.per_replica = true;
  s.match = R"(pool=~"$pool")";
  EXPECT_EQ(
      Signal("running", s),
      R"(sum by (pool, replica) (strata:num_requests_running{role="replica",pool=~"$pool"}))");
  // Gateway series are never split per replica (their own `replica` label is the upstream URL).
  EXPECT_EQ(Signal("gateway_rejections", s),
            R"(sum by (pool, reason) (rate(strata_gateway:rejections_total{pool=~"$pool"}[2m])))");
  EXPECT_EQ(SignalNames().size(), Signals(s).size());
}

TEST(Queries, SloObjectivesAreRecordedPerPoolOnBucketBounds) {
  const std::vector<NamedQuery> rules = SloRecordingRules(Spec());
  // long-context: errors + e2e 100 ms + TTFT 50 ms; general: errors + e2e 500 ms + TPOT 20 ms;
  // each objective attainment + burn (latency) or burn (errors), five windows.
  EXPECT_EQ(rules.size(), 5u * (1 + 2 + 2 + 1 + 2 + 2));
  int attain = 0;
  for (const NamedQuery& r : rules) {
    if (r.name.find(":attainment_") == std::string::npos) continue;
    ++attain;
    const size_t at = r.expr.find(",le=\"");  // not role="
    ASSERT_NE(at, std::string::npos) << r.expr;
    const std::string le = r.expr.substr(at + 5, r.expr.find('"', at + 5) - at - 5);
    const double bound = std::stod(le);
    bool is_bucket = false;
    for (double b : LatencyBuckets()) is_bucket |= fmt::format("{}", b) == le;
    EXPECT_TRUE(is_bucket) << r.expr;
    EXPECT_GT(bound, 0);
  }
  EXPECT_EQ(attain, 5 * 4);
  const std::string y = RulesYaml(Spec());
  EXPECT_NE(y.find("name: strata-slo-objectives"), std::string::npos);
  EXPECT_NE(y.find(R"(strata:pool_error_ratio:5m{pool="general"} / 0.05)"), std::string::npos);
  EXPECT_NE(y.find(R"(le="0.1")"), std::string::npos);  // e2e 100 ms is a bucket bound
  // TTFT 50 ms is not (0.04, 0.06): the largest bound under it counts.
  EXPECT_NE(
      y.find(
          R"(strata:time_to_first_token_seconds_bucket{role="replica",pool="long-context",le="0.04"})"),
      std::string::npos);
  // 300 ms is not: the largest bound under it (250 ms) counts, never a bound above.
  DeploymentSpec silver = Spec();
  silver.pools[0].slo.e2e_p95_ms = 300;
  EXPECT_NE(RulesYaml(silver).find(R"(le="0.25")"), std::string::npos);
  EXPECT_EQ(RulesYaml(silver).find(R"(le="0.5",pool)"), std::string::npos);
}

}  // namespace
}  // namespace strata::control
