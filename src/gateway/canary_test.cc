// gateway/canary with an injected clock and synthetic outcomes: a latency regression is rolled
// back within one analysis window, a healthy canary is promoted through every step,
// min_requests / min_duration hold decisions back, error-rate / TPOT / logprob breaches, the
// operator's actions, and what a reload keeps.
#include "gateway/canary.h"

#include <gtest/gtest.h>

namespace strata::gateway {
namespace {

using std::chrono::seconds;

GatewayConfig Config(std::vector<double> steps = {5, 25, 50, 100}) {
  GatewayConfig c;
  RouteConfig r;
  r.name = "chat";
  r.arms = {{"v1", 90}, {"v2", 10}};
  CanaryConfig cc;
  cc.baseline = "v1";
  cc.canary = "v2";
  cc.steps = std::move(steps);
  cc.min_requests = 20;
  cc.min_duration = seconds(60);
  cc.interval = seconds(10);
  r.canary = cc;
  c.routes.push_back(r);
  return c;
}

CanaryOutcome Ok(double ttft, double tpot = 0.01) { return {200, ttft, tpot, std::nullopt}; }

class CanaryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cfg_ = Config();
    weights_.Reconfigure(cfg_);
    ctl_.Reconfigure(cfg_, now_);
  }
  void Feed(int n, const CanaryOutcome& base, const CanaryOutcome& canary) {
    for (int i = 0; i < n; ++i) {
      ctl_.Observe("chat", "v1", base);
      ctl_.Observe("chat", "v2", canary);
    }
  }
  std::vector<CanaryDecision> At(int s) {
    now_ = t0_ + seconds(s);
    return ctl_.Tick(now_);
  }
  double CanaryWeight() { return weights_.Weights(cfg_.routes[0])[1]; }
  double BaselineWeight() { return weights_.Weights(cfg_.routes[0])[0]; }

  const Clock::time_point t0_ = Clock::time_point() + std::chrono::hours(1);
  Clock::time_point now_ = t0_;
  GatewayConfig cfg_;
  SplitWeights weights_;
  CanaryController ctl_{&weights_, t0_};
};

TEST_F(CanaryTest, StartsAtTheFirstStep) {
  EXPECT_EQ(CanaryWeight(), 5);
  EXPECT_EQ(BaselineWeight(), 95);
  ASSERT_EQ(ctl_.List(now_).size(), 1u);
  EXPECT_EQ(ctl_.List(now_)[0].state, CanaryState::kProgressing);
  EXPECT_TRUE(ctl_.Has("chat"));
  EXPECT_FALSE(ctl_.Has("other"));
}

TEST_F(CanaryTest, ALatencyRegressionIsRolledBackWithinOneWindow) {
  Feed(20, Ok(0.100), Ok(0.500));  // TTFT p95 5x the baseline's
  auto d = At(10);                 // the first analysis, long before min_duration
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].decision, "rollback");
  EXPECT_NE(d[0].reason.find("ttft_p95"), std::string::npos) << d[0].reason;
  EXPECT_DOUBLE_EQ(*d[0].canary.ttft_p95_s, 0.5);
  EXPECT_DOUBLE_EQ(*d[0].baseline.ttft_p95_s, 0.1);
  EXPECT_EQ(d[0].canary.requests, 20);
  EXPECT_EQ(d[0].weight, 0);
  EXPECT_EQ(CanaryWeight(), 0);
  EXPECT_EQ(BaselineWeight(), 100);
  EXPECT_EQ(ctl_.List(now_)[0].state, CanaryState::kRolledBack);
  Feed(20, Ok(0.1), Ok(0.1));
  EXPECT_TRUE(At(100).empty());  // rolled back: no more decisions
  ASSERT_EQ(ctl_.List(now_)[0].decisions.size(), 1u);
}

TEST_F(CanaryTest, AHealthyCanaryIsPromotedThroughEveryStep) {
  // Steps 5, 25, 50, 100: 5 → 25 → 50 are steps; 50 → 100 is the promotion (a step of 100 % would
  // leave the baseline no traffic to compare with).
  const std::vector<double> expect = {25, 50};
  int t = 0;
  for (size_t i = 0; i < expect.size(); ++i) {
    Feed(25, Ok(0.100, 0.020), Ok(0.110, 0.021));  // within 1.2x
    t += 60;
    auto d = At(t);
    ASSERT_EQ(d.size(), 1u) << "step " << i;
    EXPECT_EQ(d[0].decision, "step");
    EXPECT_EQ(d[0].reason, "within bounds");
    EXPECT_EQ(d[0].step, i + 1);
    EXPECT_EQ(d[0].weight, expect[i]);
    EXPECT_EQ(CanaryWeight(), expect[i]);
    EXPECT_EQ(BaselineWeight(), 100 - expect[i]);
    EXPECT_EQ(ctl_.List(now_)[0].state, CanaryState::kProgressing);
    EXPECT_EQ(ctl_.List(now_)[0].canary_now.requests, 0);  // a new step: fresh windows
  }
  Feed(25, Ok(0.100), Ok(0.110));
  auto d = At(t + 60);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].decision, "promote");
  EXPECT_EQ(CanaryWeight(), 100);
  EXPECT_EQ(BaselineWeight(), 0);
  EXPECT_EQ(ctl_.List(now_)[0].state, CanaryState::kPromoted);
  EXPECT_EQ(ctl_.List(now_)[0].decisions.size(), 3u);
}

TEST_F(CanaryTest, MinRequestsAndMinDurationHoldDecisionsBack) {
  Feed(19, Ok(0.1), Ok(0.9));  // a breach, but 19 < min_requests
  EXPECT_TRUE(At(10).empty());
  EXPECT_TRUE(At(70).empty());
  EXPECT_EQ(CanaryWeight(), 5);
  ctl_.Observe("chat", "v1", Ok(0.1));  // baseline 20, canary still 19
  EXPECT_TRUE(At(80).empty());
  ctl_.Observe("chat", "v2", Ok(0.9));  // both 20: judged at the next interval
  EXPECT_TRUE(At(85).empty());          // not an interval after the last analysis
  auto d = At(90);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].decision, "rollback");
}

TEST_F(CanaryTest, AHealthyStepWaitsForMinDuration) {
  Feed(50, Ok(0.1), Ok(0.1));
  EXPECT_TRUE(At(10).empty());
  EXPECT_TRUE(At(50).empty());
  EXPECT_EQ(CanaryWeight(), 5);
  auto d = At(60);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].decision, "step");
  EXPECT_EQ(CanaryWeight(), 25);
  Feed(50, Ok(0.1), Ok(0.1));
  EXPECT_TRUE(At(110).empty());  // the new step began at 60
  EXPECT_EQ(At(120).size(), 1u);
}

TEST_F(CanaryTest, AnErrorRateBreachRollsBackAndClientErrorsDoNotCount) {
  for (int i = 0; i < 20; ++i) {
    ctl_.Observe("chat", "v1", Ok(0.1));
    ctl_.Observe("chat", "v2", i < 3 ? CanaryOutcome{503, -1, -1, {}} : Ok(0.1));
    ctl_.Observe("chat", "v2", CanaryOutcome{400, 0.1, -1, {}});  // the client's fault: ignored
    ctl_.Observe("chat", "v2", CanaryOutcome{499, -1, -1, {}});   // the client left: ignored
  }
  auto d = At(10);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].decision, "rollback");
  EXPECT_NE(d[0].reason.find("error_rate"), std::string::npos) << d[0].reason;
  EXPECT_EQ(d[0].canary.requests, 20);
  EXPECT_EQ(d[0].canary.errors, 3);
  EXPECT_DOUBLE_EQ(d[0].canary.error_rate, 0.15);
}

TEST_F(CanaryTest, AnErrorRateWithinTheDeltaPasses) {
  cfg_.routes[0].canary->guards.error_rate_max_delta = 0.2;
  weights_.Reconfigure(cfg_);
  ctl_.Reconfigure(cfg_, now_);
  for (int i = 0; i < 20; ++i) {
    ctl_.Observe("chat", "v1", Ok(0.1));
    ctl_.Observe("chat", "v2", i < 3 ? CanaryOutcome{500, -1, -1, {}} : Ok(0.1));
  }
  auto d = At(60);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].decision, "step");
}

TEST_F(CanaryTest, TpotAndLogprobGuards) {
  Feed(20, Ok(0.1, 0.010), Ok(0.1, 0.030));
  auto d = At(10);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_NE(d[0].reason.find("tpot_p95"), std::string::npos) << d[0].reason;

  GatewayConfig c = Config();
  c.routes[0].canary->guards.mean_logprob_min_delta = -0.2;
  SplitWeights w;
  w.Reconfigure(c);
  CanaryController ctl(&w, t0_);
  ctl.Reconfigure(c, t0_);
  for (int i = 0; i < 20; ++i) {
    ctl.Observe("chat", "v1", {200, 0.1, 0.01, -0.5});
    ctl.Observe("chat", "v2", {200, 0.1, 0.01, -0.9});
  }
  auto e = ctl.Tick(t0_ + seconds(10));
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].decision, "rollback");
  EXPECT_NE(e[0].reason.find("mean_logprob"), std::string::npos) << e[0].reason;
  EXPECT_DOUBLE_EQ(*e[0].canary.mean_logprob, -0.9);
}

TEST_F(CanaryTest, OperatorActions) {
  using A = CanaryController::Action;
  ASSERT_TRUE(ctl_.Act("chat", A::kPause, now_).ok());
  EXPECT_EQ(ctl_.List(now_)[0].state, CanaryState::kPaused);
  Feed(20, Ok(0.1), Ok(0.9));
  EXPECT_TRUE(At(10).empty());  // paused: no decisions, weights stay
  EXPECT_EQ(CanaryWeight(), 5);
  EXPECT_EQ(ctl_.Act("chat", A::kPause, now_).status().code(), StatusCode::kInvalidArgument);
  auto r = ctl_.Act("chat", A::kResume, now_);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->decision, "resume");
  EXPECT_EQ(At(20).size(), 1u);  // the breach, now judged
  EXPECT_EQ(CanaryWeight(), 0);
  auto again = ctl_.Act("chat", A::kResume, now_);  // after a rollback: from step 1 again
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(CanaryWeight(), 5);
  EXPECT_EQ(ctl_.List(now_)[0].state, CanaryState::kProgressing);
  auto p = ctl_.Act("chat", A::kPromote, now_);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->decision, "manual_promote");
  EXPECT_EQ(CanaryWeight(), 100);
  EXPECT_EQ(ctl_.Act("chat", A::kPromote, now_).status().code(), StatusCode::kInvalidArgument);
  auto rb = ctl_.Act("chat", A::kRollback, now_);
  ASSERT_TRUE(rb.ok());
  EXPECT_EQ(rb->decision, "manual_rollback");
  EXPECT_EQ(CanaryWeight(), 0);
  EXPECT_EQ(ctl_.Act("nope", A::kPause, now_).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ctl_.List(now_)[0].decisions.size(), 6u);
}

TEST_F(CanaryTest, AReloadKeepsAnUnchangedCanaryAndRestartsAChangedOne) {
  Feed(20, Ok(0.1), Ok(0.1));
  ASSERT_EQ(At(60).size(), 1u);
  EXPECT_EQ(CanaryWeight(), 25);
  weights_.Reconfigure(cfg_);
  ctl_.Reconfigure(cfg_, now_);  // unchanged: step 2 stays
  EXPECT_EQ(CanaryWeight(), 25);
  EXPECT_EQ(ctl_.List(now_)[0].step, 1u);
  GatewayConfig changed = Config({10, 100});
  weights_.Reconfigure(changed);
  ctl_.Reconfigure(changed, now_);
  cfg_ = changed;
  EXPECT_EQ(CanaryWeight(), 10);
  EXPECT_EQ(ctl_.List(now_)[0].step, 0u);
  EXPECT_TRUE(ctl_.List(now_)[0].decisions.empty());
  GatewayConfig none;
  ctl_.Reconfigure(none, now_);
  EXPECT_TRUE(ctl_.List(now_).empty());
}

TEST(Percentile, NearestRank) {
  EXPECT_FALSE(Percentile({}, 95).has_value());
  EXPECT_EQ(*Percentile({3}, 95), 3);
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(101 - i);
  EXPECT_EQ(*Percentile(v, 95), 95);
  EXPECT_EQ(*Percentile(v, 100), 100);
  EXPECT_EQ(*Percentile(v, 0), 1);
}

}  // namespace
}  // namespace strata::gateway
