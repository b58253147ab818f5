#include "control/loop.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "http/json_fields.h"

namespace strata::control {
namespace {

struct FakeSource : ObservationSource {
  QueryResults results;
  bool fail = false;
  Result<QueryResults> Observe() override {
    if (fail) return Status::Unavailable("prometheus down");
    return results;
  }
};

struct FakeActuator : Actuator {
  std::map<std::string, int> running;
  int calls = 0;
  bool refuse = false;
  std::optional<int> CurrentReplicas(const std::string& pool) override { return running[pool]; }
  Status SetReplicas(const std::string& pool, int n, const ScaleDecision& /*d*/) override {
    ++calls;
    if (refuse) return Status::Unavailable("no room");
    running[pool] = n;
    return Status::Ok();
  }
};

DeploymentSpec Spec() {
  DeploymentSpec s;
  s.name = "demo";
  PoolSpec p;
  p.name = "general";
  p.replicas = {1, 8};
  p.slo.e2e_p95_ms = 300;
  s.pools = {p};
  return s;
}

TEST(ObservationOf, ReadsEveryQueryAndDefaults) {
  QueryResults r;
  r["replicas"]["general"] = 3;
  r["replicas_reporting"]["general"] = 2;
  r["arrival_rate"]["general"] = 7.5;
  r["e2e_p95"]["general"] = 0.2;
  r["held"]["general"] = 4;
  r["mean_running"]["general"] = 1.5;
  PoolObservation o = ObservationOf(r, "general", std::nullopt);
  EXPECT_EQ(o.current_replicas, 3);
  EXPECT_EQ(o.reporting_replicas, 2);
  EXPECT_EQ(o.arrival_rate, 7.5);
  EXPECT_EQ(o.e2e_p95_s, 0.2);
  EXPECT_TRUE(std::isnan(o.ttft_p95_s));
  EXPECT_EQ(o.held_requests, 4);
  EXPECT_EQ(o.mean_running, 1.5);
  EXPECT_EQ(ObservationOf(r, "general", 5).current_replicas, 5);
  const PoolObservation none = ObservationOf(r, "other", std::nullopt);
  EXPECT_EQ(none.current_replicas, 0);
  EXPECT_EQ(none.arrival_rate, 0);
}

TEST(ControlLoop, DecidesActuatesAndExports) {
  FakeSource src;
  FakeActuator act;
  act.running["general"] = 1;
  ReplicaProfile prof;
  ControlLoop loop(Spec(), &src, &act, prof);
  src.results["replicas_reporting"]["general"] = 1;
  src.results["arrival_rate"]["general"] = 3 * prof.Capacity();
  const auto t0 = Clock::now();
  ASSERT_TRUE(loop.Tick(t0).ok());
  EXPECT_EQ(act.running["general"], 2);  // x2 step
  EXPECT_EQ(act.calls, 1);
  std::string m = loop.MetricsText();
  EXPECT_NE(m.find(R"(strata_control_desired_replicas{pool="general"} 2)"), std::string::npos) << m;
  EXPECT_NE(m.find(R"(strata_control_decisions_total{pool="general",direction="up"} 1)"),
            std::string::npos)
      << m;
  // The new replica has not reported: no decision, no actuation.
  ASSERT_TRUE(loop.Tick(t0 + std::chrono::seconds(15)).ok());
  EXPECT_EQ(act.calls, 1);
  EXPECT_EQ(loop.LastDecisions().at("general").rule, "not_reporting");
  m = loop.MetricsText();
  EXPECT_NE(m.find(R"(strata_control_decisions_total{pool="general",direction="hold"} 1)"),
            std::string::npos);
  // Status JSON.
  const auto j = nlohmann::json::parse(loop.StatusJson(), nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  const nlohmann::json* pools = nullptr;
  ASSERT_TRUE(http::Fields(j).Array("pools", &pools).ok());
  ASSERT_NE(pools, nullptr);
  ASSERT_EQ(pools->size(), 1u);
  int desired = 0;
  std::string rule;
  ASSERT_TRUE(http::Fields(pools->at(0)).Int("desired", 0, 1000, &desired).ok());
  ASSERT_TRUE(http::Fields(pools->at(0)).String("rule", &rule).ok());
  EXPECT_EQ(desired, 2);
  EXPECT_EQ(rule, "not_reporting");
}

TEST(ControlLoop, ObserveAndActuateErrorsAreCountedAndKeepCounts) {
  FakeSource src;
  FakeActuator act;
  act.running["general"] = 1;
  ReplicaProfile prof;
  ControlLoop loop(Spec(), &src, &act, prof);
  src.fail = true;
  EXPECT_FALSE(loop.Tick(Clock::now()).ok());
  EXPECT_EQ(act.calls, 0);
  EXPECT_NE(loop.MetricsText().find("strata_control_observe_errors_total 1"), std::string::npos);
  src.fail = false;
  act.refuse = true;
  src.results["replicas_reporting"]["general"] = 1;
  src.results["arrival_rate"]["general"] = 3 * prof.Capacity();
  const Status s = loop.Tick(Clock::now());
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("pool general"), std::string::npos) << s.message();
  EXPECT_EQ(act.running["general"], 1);
  EXPECT_NE(loop.MetricsText().find(R"(strata_control_actuate_errors_total{pool="general"} 1)"),
            std::string::npos);
}

TEST(ControlLoop, StartRunsTicksUntilStop) {
  FakeSource src;
  RecordingActuator act;
  DeploymentSpec spec = Spec();
  spec.autoscaling.interval = std::chrono::seconds(1);
  ControlLoop loop(spec, &src, &act);
  src.results["replicas"]["general"] = 0;  // none running: below min 1 -> 1
  loop.Start();
  for (int i = 0; i < 200 && act.counts().empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  loop.Stop();
  ASSERT_EQ(act.counts().count("general"), 1u);
  EXPECT_EQ(act.counts().at("general"), 1);
}

}  // namespace
}  // namespace strata::control
