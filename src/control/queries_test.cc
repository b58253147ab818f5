#include "control/queries.h"

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

}  // namespace
}  // namespace strata::control
