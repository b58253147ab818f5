// The cold-start hold: PoolHolds' outcomes and bound, and a gateway whose pool has no replica
// holding a request until a reload adds one (served), or answering 503 when the hold runs out.
#include "gateway/pool_hold.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "gateway/config.h"
#include "gateway/fake_replica_test_util.h"
#include "gateway/gateway.h"
#include "gateway/gateway_front_test_util.h"
#include "integration/http_test_client.h"

namespace strata::gateway {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using strata::testing::HttpCall;
using strata::testing::HttpReply;
using testing::FakeReplica;

TEST(PoolHolds, ResumesReadyCancelledAndTimedOutEntriesAndKeepsTheRest) {
  PoolHolds h;
  const Clock::time_point t0 = Clock::now();
  std::vector<std::string> seen;
  auto note = [&seen](const std::string& tag) {
    return [&seen, tag](HoldOutcome o) {
      seen.push_back(tag + ":" + std::string(HoldOutcomeName(o)));
    };
  };
  bool gone = false;
  ASSERT_TRUE(h.Hold("a", 4, t0 + milliseconds(100), note("a1"), nullptr));
  ASSERT_TRUE(h.Hold("b", 4, t0 + milliseconds(100), note("b1"), [&gone] { return gone; }));
  ASSERT_TRUE(h.Hold("b", 4, t0 + milliseconds(500), note("b2"), nullptr));
  EXPECT_EQ(h.Counts().at("a"), 1);
  EXPECT_EQ(h.Counts().at("b"), 2);
  h.Tick(t0 + milliseconds(50), [](const std::string&) { return false; });
  EXPECT_TRUE(seen.empty());
  gone = true;
  h.Tick(t0 + milliseconds(200), [](const std::string&) { return false; });
  EXPECT_EQ(seen, (std::vector<std::string>{"a1:timeout", "b1:cancelled"}));
  h.Tick(t0 + milliseconds(300), [](const std::string& p) { return p == "b"; });
  EXPECT_EQ(seen.back(), "b2:ready");
  EXPECT_EQ(h.Counts().at("a"), 0);
  EXPECT_EQ(h.Counts().at("b"), 0);
}

TEST(PoolHolds, AFullPoolRefusesAndClearStopsEveryEntry) {
  PoolHolds h;
  int stopped = 0;
  auto count = [&stopped](HoldOutcome o) { stopped += o == HoldOutcome::kStopped; };
  const auto far = Clock::now() + std::chrono::hours(1);
  EXPECT_TRUE(h.Hold("p", 2, far, count, nullptr));
  EXPECT_TRUE(h.Hold("p", 2, far, count, nullptr));
  EXPECT_FALSE(h.Hold("p", 2, far, count, nullptr));
  EXPECT_TRUE(h.Hold("q", 2, far, count, nullptr));  // the bound is per pool
  h.Clear();
  EXPECT_EQ(stopped, 3);
  EXPECT_EQ(h.Counts().at("p"), 0);
}

TEST(PoolHoldConfig, AnEmptyReplicaListIsAPoolWithNoneYetAndTheHoldKeysAreBounded) {
  const std::string routes = "routes:\n  - {name: r, to: p}\n";
  auto ok = ParseGatewayConfig(
      "pools:\n  - {name: p, replicas: [], cold_start_hold_ms: 1500, "
      "cold_start_max_held: 3}\n" +
      routes);
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ((*ok)->pools[0].cold_start_hold, milliseconds(1500));
  EXPECT_EQ((*ok)->pools[0].cold_start_max_held, 3);
  auto empty = ParseGatewayConfig("pools:\n  - {name: p, replicas: []}\n" + routes);
  EXPECT_TRUE(empty.ok()) << empty.status().message();  // the control plane fills it in
  auto none = ParseGatewayConfig("pools:\n  - {name: p}\n" + routes);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("pools[0]: needs replicas: or dns:"), std::string::npos);
  auto neg =
      ParseGatewayConfig("pools:\n  - {name: p, replicas: [], cold_start_hold_ms: -1}\n" + routes);
  ASSERT_FALSE(neg.ok());
  EXPECT_NE(neg.status().message().find("pools[0].cold_start_hold_ms"), std::string::npos);
  auto zero = ParseGatewayConfig(
      "pools:\n  - {name: p, replicas: [], cold_start_hold_ms: 5, cold_start_max_held: 0}\n" +
      routes);
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("pools[0].cold_start_max_held"), std::string::npos);
}

using Front = testing::GatewayFront;

std::string HoldYaml(const std::string& replicas, int hold_ms) {
  return "pools:\n  - {name: p, replicas: [" + replicas +
         "], cold_start_hold_ms: " + std::to_string(hold_ms) +
         "}\nroutes:\n  - {name: r, to: p}\nhealth: {interval_ms: 20}\naccess_log: \"off\"\n";
}

bool WaitFor(const std::function<bool()>& cond, double timeout_s) {
  const auto until = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (Clock::now() < until) {
    if (cond()) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return cond();
}

TEST(PoolHoldGateway, ARequestToAnEmptyPoolIsHeldUntilAReloadAddsAReplicaAndThenServed) {
  FakeReplica replica;
  ASSERT_TRUE(replica.ok());
  Front f(HoldYaml("", 20000));
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(HttpCall(f.port(), "GET", "/ready").status, 200);  // it holds: ready for traffic
  EXPECT_NE(f.Metrics().find("strata_gateway_pool_held_requests{pool=\"p\"} 0"), std::string::npos);
  auto answer = std::async(std::launch::async, [&f] {
    return HttpCall(f.port(), "POST", "/v1/completions", R"({"prompt":"hi","max_tokens":2})");
  });
  ASSERT_TRUE(WaitFor(
      [&f] {
        return f.Metrics().find("strata_gateway_pool_held_requests{pool=\"p\"} 1") !=
               std::string::npos;
      },
      10));
  EXPECT_EQ(answer.wait_for(milliseconds(200)), std::future_status::timeout);  // still held
  auto next = ParseGatewayConfig(HoldYaml(replica.url(), 20000));
  ASSERT_TRUE(next.ok());
  ASSERT_TRUE(f.gw().Reload(*next).ok());
  ASSERT_EQ(answer.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  const HttpReply r = answer.get();
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(replica.count("/v1/completions"), 1);
  const std::string m = f.Metrics();
  EXPECT_NE(m.find("strata_gateway_pool_held_requests{pool=\"p\"} 0"), std::string::npos);
  EXPECT_NE(m.find("strata_gateway:pool_holds_total{pool=\"p\",result=\"ready\"} 1"),
            std::string::npos)
      << m;
}

TEST(PoolHoldGateway, AHoldThatRunsOutAnswers503NamingTheBound) {
  Front f(HoldYaml("", 150));
  ASSERT_TRUE(f.ok());
  const auto t0 = Clock::now();
  const HttpReply r =
      HttpCall(f.port(), "POST", "/v1/completions", R"({"prompt":"hi","max_tokens":2})");
  const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_NE(r.body.find("cold_start_hold_ms 150"), std::string::npos) << r.body;
  EXPECT_GE(waited, 0.14);
  EXPECT_LT(waited, 5.0);
  EXPECT_NE(f.Metrics().find("strata_gateway:pool_holds_total{pool=\"p\",result=\"timeout\"} 1"),
            std::string::npos);
}

TEST(PoolHoldGateway, APoolWithoutAHoldStillAnswers503AtOnce) {
  FakeReplica replica;
  ASSERT_TRUE(replica.ok());
  replica.SetReady(503, R"({"status":"loading"})");
  Front f("pools:\n  - {name: p, replicas: [" + replica.url() +
          "]}\nroutes:\n  - {name: r, to: p}\nhealth: {interval_ms: 20}\naccess_log: \"off\"\n");
  ASSERT_TRUE(f.ok());
  const auto t0 = Clock::now();
  const HttpReply r =
      HttpCall(f.port(), "POST", "/v1/completions", R"({"prompt":"hi","max_tokens":2})");
  EXPECT_EQ(r.status, 503);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 1.0);
}

}  // namespace
}  // namespace strata::gateway
