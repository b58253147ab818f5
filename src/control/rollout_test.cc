// control/rollout: the canary rollout's state machine driven by a fake clock and fake answers of
// the gateway's GET /admin/canary — starting until the whole new set is ready, a failed new
// replica fails it, promotion needs every split route promoted, any rollback ends it with the
// canary's reason, a gateway that never shows the canary is reported after the timeout, and the
// admin API's body is read strictly.
#include "control/rollout.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace strata::control {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Time = CanaryRollout::Time;

// One canary entry as gateway_admin.cc writes it.
nlohmann::json Entry(const std::string& route, const std::string& state, int step, double weight,
                     const std::string& decision = "", const std::string& reason = "",
                     const std::string& canary = "general.v2") {
  nlohmann::json decisions = nlohmann::json::array();
  if (!decision.empty())
    decisions.push_back({{"decision", decision}, {"reason", reason}, {"step", step}});
  return {{"route", route},
          {"baseline", "general"},
          {"canary", canary},
          {"state", state},
          {"step", step},
          {"steps", {10, 50, 100}},
          {"weight", weight},
          {"step_age_s", 1.5},
          {"window",
           {{"baseline", {{"requests", 12}, {"errors", 0}}},
            {"canary", {{"requests", 3}, {"errors", 0}}}}},
          {"decisions", decisions}};
}

Result<std::vector<CanaryRouteState>> Answer(const std::vector<nlohmann::json>& entries) {
  nlohmann::json body = {{"canaries", entries}};
  return ParseCanaryList(body.dump(), "general.v2");
}

class RolloutTest : public ::testing::Test {
 protected:
  Time At(double s) const { return t0_ + milliseconds(static_cast<int64_t>(s * 1000)); }
  CanaryRollout Make(std::vector<std::string> routes = {"default"}) const {
    return CanaryRollout("general", "v1", "v2", "general.v2", std::move(routes), seconds(30), t0_);
  }
  const Time t0_ = Time() + seconds(1000);
};

TEST_F(RolloutTest, StartsUntilTheWholeNewSetIsReadyThenSplits) {
  CanaryRollout r = Make();
  EXPECT_EQ(r.phase(), RolloutPhase::kStarting);
  EXPECT_TRUE(r.active());
  EXPECT_FALSE(r.splitting());
  r.ObserveReplicas({2, 0, ""}, At(1));
  r.ObserveReplicas({2, 1, ""}, At(2));
  EXPECT_EQ(r.phase(), RolloutPhase::kStarting);  // never split before all of the set is ready
  EXPECT_NE(r.Summary().find("starting general.v2 (1/2 ready)"), std::string::npos) << r.Summary();
  r.ObserveReplicas({2, 2, ""}, At(3));
  EXPECT_EQ(r.phase(), RolloutPhase::kCanary);
  EXPECT_TRUE(r.splitting());
  r.ObserveReplicas({2, 0, "general-9: exit 1"}, At(4));  // ignored once splitting
  EXPECT_EQ(r.phase(), RolloutPhase::kCanary);
  // Gateway answers before the split is loaded (no canary yet) keep it waiting.
  r.ObserveGateway(Answer({}), At(5));
  EXPECT_EQ(r.phase(), RolloutPhase::kCanary);
  EXPECT_NE(r.Summary().find("waiting for the gateway's canary"), std::string::npos);
}

TEST_F(RolloutTest, AFailedNewReplicaFailsTheRolloutAtOnce) {
  CanaryRollout r = Make();
  r.ObserveReplicas({1, 0, "general-3: exit status 2 (log /s/logs/general-3.log)"}, At(40));
  EXPECT_EQ(r.phase(), RolloutPhase::kFailed);
  EXPECT_TRUE(r.done());
  EXPECT_NE(r.reason().find("a replica of v2 failed: general-3: exit status 2"), std::string::npos)
      << r.reason();
  const nlohmann::json j = r.ToJson(At(50));
  EXPECT_EQ(j["phase"], "failed");
  EXPECT_DOUBLE_EQ(j["elapsed_s"].get<double>(), 40);  // frozen at the end
}

TEST_F(RolloutTest, StepsThenPromotionOfEveryRoute) {
  CanaryRollout r = Make({"default", "chat"});
  r.ObserveReplicas({1, 1, ""}, At(1));
  ASSERT_TRUE(r.splitting());
  r.ObserveGateway(Answer({Entry("default", "progressing", 0, 10)}), At(2));  // chat not yet
  EXPECT_EQ(r.phase(), RolloutPhase::kCanary);
  r.ObserveGateway(Answer({Entry("default", "progressing", 1, 50, "step", "within bounds"),
                           Entry("chat", "progressing", 0, 10),
                           Entry("other", "rolled_back", 0, 0, "rollback", "x", "gold.v3")}),
                   At(3));
  EXPECT_EQ(r.phase(), RolloutPhase::kCanary);  // another pool's canary is none of ours
  EXPECT_EQ(r.Summary(), "v1 -> v2 canary: step 2/3, canary 50 % (progressing)");
  nlohmann::json j = r.ToJson(At(3));
  EXPECT_EQ(j["step"], 2);
  EXPECT_EQ(j["weight"], 50);
  EXPECT_EQ(j["state"], "progressing");
  EXPECT_EQ(j["last_decision"]["decision"], "step");
  EXPECT_EQ(j["last_decision"]["reason"], "within bounds");
  ASSERT_EQ(j["routes"].size(), 2u);
  EXPECT_EQ(j["routes"][0]["baseline_requests"], 12);
  EXPECT_EQ(j["routes"][0]["canary_requests"], 3);
  // One route promoted is not enough.
  r.ObserveGateway(Answer({Entry("default", "promoted", 1, 100, "promote", "within bounds"),
                           Entry("chat", "progressing", 1, 50)}),
                   At(4));
  EXPECT_EQ(r.phase(), RolloutPhase::kCanary);
  r.ObserveGateway(Answer({Entry("default", "promoted", 1, 100, "promote", "within bounds"),
                           Entry("chat", "promoted", 1, 100, "promote", "within bounds")}),
                   At(5));
  EXPECT_EQ(r.phase(), RolloutPhase::kPromoted);
  EXPECT_EQ(r.reason(), "route default: canary promote: within bounds");
  EXPECT_EQ(r.ToJson(At(9))["phase"], "promoted");
  // Done: later answers change nothing.
  r.ObserveGateway(Answer({Entry("default", "rolled_back", 0, 0, "rollback", "late")}), At(6));
  EXPECT_EQ(r.phase(), RolloutPhase::kPromoted);
}

TEST_F(RolloutTest, AnyRollbackEndsItWithTheCanarysReason) {
  CanaryRollout r = Make({"default", "chat"});
  r.ObserveReplicas({1, 1, ""}, At(1));
  r.ObserveGateway(Answer({Entry("default", "promoted", 1, 100, "promote", "within bounds"),
                           Entry("chat", "rolled_back", 0, 0, "rollback",
                                 "error_rate 0.5 > baseline 0 + 0.01")}),
                   At(2));
  EXPECT_EQ(r.phase(), RolloutPhase::kRolledBack);
  EXPECT_EQ(r.reason(), "route chat: canary rollback: error_rate 0.5 > baseline 0 + 0.01");
  EXPECT_NE(r.Summary().find("rolled_back: route chat"), std::string::npos);
  // An operator's rollback through the admin API reads the same way.
  CanaryRollout m = Make();
  m.ObserveReplicas({1, 1, ""}, At(1));
  m.ObserveGateway(Answer({Entry("default", "rolled_back", 0, 0, "manual_rollback", "operator")}),
                   At(2));
  EXPECT_EQ(m.phase(), RolloutPhase::kRolledBack);
  EXPECT_EQ(m.reason(), "route default: canary manual_rollback: operator");
  // A paused canary just waits.
  CanaryRollout p = Make();
  p.ObserveReplicas({1, 1, ""}, At(1));
  p.ObserveGateway(Answer({Entry("default", "paused", 0, 10, "pause", "operator")}), At(100));
  EXPECT_EQ(p.phase(), RolloutPhase::kCanary);
  EXPECT_EQ(p.ToJson(At(100))["state"], "paused");
}

TEST_F(RolloutTest, AGatewayThatNeverShowsTheCanaryFailsItAfterTheTimeout) {
  CanaryRollout r = Make();
  r.ObserveReplicas({1, 1, ""}, At(10));
  r.ObserveGateway(Status::Unavailable("connection refused"), At(20));
  EXPECT_EQ(r.phase(), RolloutPhase::kCanary);
  EXPECT_EQ(r.ToJson(At(20))["last_gateway_error"], "UNAVAILABLE: connection refused");
  r.ObserveGateway(Answer({}), At(39.9));
  EXPECT_EQ(r.phase(), RolloutPhase::kCanary);  // 29.9 s since the split began
  r.ObserveGateway(Answer({}), At(40));
  EXPECT_EQ(r.phase(), RolloutPhase::kFailed);
  EXPECT_NE(r.reason().find("did not show the canary of general.v2 on route(s) default for 30 s"),
            std::string::npos)
      << r.reason();
  // The timeout runs from the last answer that showed it (a gateway restart re-creates it).
  CanaryRollout k = Make();
  k.ObserveReplicas({1, 1, ""}, At(0));
  k.ObserveGateway(Answer({Entry("default", "progressing", 0, 10)}), At(25));
  k.ObserveGateway(Answer({}), At(50));
  EXPECT_EQ(k.phase(), RolloutPhase::kCanary);
  k.ObserveGateway(Answer({}), At(55));
  EXPECT_EQ(k.phase(), RolloutPhase::kFailed);
}

TEST(ParseCanaryList, ReadsTheAdminBodyStrictly) {
  auto ok = ParseCanaryList(R"({"canaries":[]})", "p.v2");
  ASSERT_TRUE(ok.ok());
  EXPECT_TRUE(ok->empty());
  for (const char* bad :
       {"", "[]", "{}", R"({"canaries":{}})", R"({"canaries":[1]})",
        R"({"canaries":[{"route":7}]})", R"({"canaries":[{"route":"r","step":"x"}]})",
        R"({"canaries":[{"route":"r","weight":900}]})",
        R"({"canaries":[{"route":"r","decisions":{}}]})"}) {
    auto r = ParseCanaryList(bad, "p.v2");
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    }
  }
  auto one = ParseCanaryList(
      R"({"canaries":[{"route":"r","baseline":"p","canary":"p.v2","state":"progressing",)"
      R"("step":1,"steps":[10,50,100],"weight":50,"decisions":[{"decision":"step","reason":"ok"}]}]})",
      "p.v2");
  ASSERT_TRUE(one.ok()) << one.status().message();
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].route, "r");
  EXPECT_EQ((*one)[0].step, 1);
  EXPECT_EQ((*one)[0].steps, (std::vector<double>{10, 50, 100}));
  EXPECT_DOUBLE_EQ((*one)[0].weight, 50);
  EXPECT_EQ((*one)[0].last_decision, "step");
  EXPECT_EQ((*one)[0].last_reason, "ok");
  EXPECT_EQ(RolloutPhaseName(RolloutPhase::kRolledBack), "rolled_back");
}

}  // namespace
}  // namespace strata::control
