#include "control/autoscaler.h"

#include <gtest/gtest.h>

#include <cmath>

namespace strata::control {
namespace {

using std::chrono::seconds;

PoolSpec Pool(int min, int max, double e2e_ms = 300) {
  PoolSpec p;
  p.name = "general";
  p.model = "tiny";
  p.version = "v1";
  p.replicas = {min, max};
  p.slo.e2e_p95_ms = e2e_ms;
  return p;
}

PoolObservation Obs(int current, double rate, int reporting = -1) {
  PoolObservation o;
  o.current_replicas = current;
  o.reporting_replicas = reporting < 0 ? current : reporting;
  o.arrival_rate = rate;
  return o;
}

struct Fixture : ::testing::Test {
  AutoscalingSpec policy;
  ReplicaProfile profile;
  Clock::time_point t0 = Clock::time_point{} + std::chrono::hours(1);
};

TEST_F(Fixture, PenaltyIsTheReferenceFormula) {
  SloSpec slo;
  slo.e2e_p95_ms = 300;
  slo.error_rate = 0.01;
  Prediction p;
  p.e2e_p95_s = 0.4;
  p.error_rate = 0.03;
  EXPECT_NEAR(Autoscaler::Penalty(slo, p, 1000), 100.0 * 100.0 + 1000 * 0.02, 1e-6);
  p.e2e_p95_s = 0.2;
  p.error_rate = 0.0;
  EXPECT_EQ(Autoscaler::Penalty(slo, p, 1000), 0);
  EXPECT_GT(Autoscaler::Penalty(slo, p, 1000, 0.5), 0);  // tightened SLO: 150 ms
}

TEST_F(Fixture, PicksTheSmallestZeroPenaltyCount) {
  Autoscaler a(policy, profile);
  const PoolSpec pool = Pool(1, 50);
  const double rate = 3.5 * profile.Capacity();
  // Start at the answer: it keeps it; one below: it goes up to it.
  int want = 0;
  for (int n = 1; n <= 50 && want == 0; ++n)
    if (Autoscaler::Penalty(pool.slo, Predict(profile, n, rate), 1000) == 0) want = n;
  ASSERT_GE(want, 4);
  EXPECT_EQ(a.Decide(pool, Obs(want, rate), t0).desired, want);
  const ScaleDecision d = a.Decide(pool, Obs(want - 1, rate), t0 + seconds(15));
  EXPECT_EQ(d.desired, want);
  EXPECT_TRUE(d.changed);
  EXPECT_EQ(d.predicted_penalty, 0);
  EXPECT_EQ(d.rule, "slo");
}

TEST_F(Fixture, ScaleUpAtMostDoublesPerInterval) {
  Autoscaler a(policy, profile);
  const PoolSpec pool = Pool(1, 100);
  const double rate = 40 * profile.Capacity();
  EXPECT_EQ(a.Decide(pool, Obs(1, rate), t0).desired, 2);
  EXPECT_EQ(a.Decide(pool, Obs(2, rate), t0 + seconds(15)).desired, 4);
  const ScaleDecision d = a.Decide(pool, Obs(3, rate), t0 + seconds(30));
  EXPECT_EQ(d.desired, 6);
  EXPECT_NE(d.reason.find("step cap"), std::string::npos) << d.reason;
  // At the max it stays there.
  EXPECT_EQ(a.Decide(pool, Obs(100, rate * 10), t0 + seconds(45)).desired, 100);
}

TEST_F(Fixture, ScaleDownWaitsForTheStabilisationWindow) {
  Autoscaler a(policy, profile);
  const PoolSpec pool = Pool(1, 20);
  const double high = 6 * profile.Capacity(), low = 0.2 * profile.Capacity();
  ScaleDecision d = a.Decide(pool, Obs(8, high), t0);
  EXPECT_EQ(d.desired, 8);
  int downs = 0;
  Clock::time_point last_down{};
  int cur = 8;
  for (int s = 15; s <= 1500; s += 15) {
    d = a.Decide(pool, Obs(cur, low), t0 + seconds(s));
    if (d.desired < cur) {
      EXPECT_GE(s, policy.scale_down_stabilization.count()) << "scaled down inside the window";
      if (downs > 0) {
        EXPECT_GE(t0 + seconds(s) - last_down, policy.scale_down_stabilization);
      }
      last_down = t0 + seconds(s);
      ++downs;
    } else if (s < policy.scale_down_stabilization.count()) {
      EXPECT_NE(d.reason.find("stabilizing"), std::string::npos) << d.reason;
    }
    cur = d.desired;
  }
  EXPECT_EQ(cur, 1);  // got there in the end
  EXPECT_GE(downs, 1);
}

TEST_F(Fixture, OneHighRecommendationInTheWindowBlocksScaleDown) {
  const PoolSpec pool = Pool(1, 20);
  const double low = 0.2 * profile.Capacity();
  // A rate whose smallest zero-penalty count (with the hysteresis) is exactly 4.
  double busy = 0;
  for (double r = profile.Capacity(); r < 6 * profile.Capacity() && busy == 0; r += 0.5) {
    const auto ok = [&](int n) {
      return Autoscaler::Penalty(pool.slo, Predict(profile, n, r), 1000, 1 - policy.hysteresis) ==
             0;
    };
    if (ok(4) && !ok(3)) busy = r;
  }
  ASSERT_GT(busy, 0);
  Autoscaler a(policy, profile);
  int cur = 4;
  for (int s = 0; s < 400; s += 15) cur = a.Decide(pool, Obs(cur, low), t0 + seconds(s)).desired;
  ASSERT_EQ(cur, 1);  // went down once the window had passed
  Autoscaler b(policy, profile);
  cur = 4;
  int down_at = -1;
  for (int s = 0; s < 900; s += 15) {
    const double rate = s == 240 ? busy : low;  // one busy interval late in the window
    cur = b.Decide(pool, Obs(cur, rate), t0 + seconds(s)).desired;
    if (cur < 4 && down_at < 0) down_at = s;
  }
  EXPECT_GE(down_at, 240 + policy.scale_down_stabilization.count());  // it held the window
  EXPECT_EQ(cur, 1);
}

TEST_F(Fixture, HysteresisKeepsACountJustInsideTheSlo) {
  const PoolSpec pool = Pool(1, 20);
  // A rate where 2 replicas meet the SLO but not the SLO tightened by the hysteresis.
  double rate = 0;
  for (double r = 0.5 * profile.Capacity(); r < 2 * profile.Capacity(); r += 0.01) {
    const Prediction p = Predict(profile, 2, r);
    if (Autoscaler::Penalty(pool.slo, p, 1000) == 0 &&
        Autoscaler::Penalty(pool.slo, p, 1000, 1 - policy.hysteresis) > 0) {
      rate = r;
      break;
    }
  }
  ASSERT_GT(rate, 0);
  Autoscaler a(policy, profile);
  int cur = 3;
  for (int s = 0; s <= 900; s += 15) {
    const ScaleDecision d = a.Decide(pool, Obs(cur, rate), t0 + seconds(s));
    EXPECT_EQ(d.desired, 3) << "left 3 at " << s << " s: " << d.reason;
    cur = d.desired;
  }
  Autoscaler b(policy, profile);
  EXPECT_EQ(b.Decide(pool, Obs(2, rate), t0).desired, 2);  // and 2 does not need to grow
  // Without hysteresis 3 would come down to 2 after the window.
  AutoscalingSpec none = policy;
  none.hysteresis = 0;
  Autoscaler c(none, profile);
  cur = 3;
  for (int s = 0; s <= 900; s += 15) cur = c.Decide(pool, Obs(cur, rate), t0 + seconds(s)).desired;
  EXPECT_EQ(cur, 2);
}

TEST_F(Fixture, NoDecisionWhileReplicasHaveNotReported) {
  Autoscaler a(policy, profile);
  const PoolSpec pool = Pool(1, 20);
  // 4 running, 2 reporting: a huge load would double, a zero load would shrink; neither happens.
  for (double rate : {0.0, 50 * profile.Capacity()}) {
    const ScaleDecision d = a.Decide(pool, Obs(4, rate, 2), t0 + seconds(400));
    EXPECT_EQ(d.desired, 4);
    EXPECT_FALSE(d.changed);
    EXPECT_EQ(d.rule, "not_reporting");
  }
  // Once they report it decides.
  EXPECT_EQ(a.Decide(pool, Obs(4, 50 * profile.Capacity()), t0 + seconds(415)).desired, 8);
  // A replica that never reports stops blocking after kMaxReportWaitIntervals intervals.
  Autoscaler b(policy, profile);
  ScaleDecision d;
  for (int i = 0; i <= kMaxReportWaitIntervals; ++i)
    d = b.Decide(pool, Obs(2, 50 * profile.Capacity(), 1), t0 + policy.interval * i);
  EXPECT_EQ(d.rule, "slo");
  EXPECT_EQ(d.desired, 4);
}

TEST_F(Fixture, ScalesToZeroAfterIdleAndBackToOneOnHeldRequests) {
  Autoscaler a(policy, profile);
  const PoolSpec pool = Pool(0, 4);
  const auto idle = policy.scale_to_zero_idle;
  ScaleDecision d = a.Decide(pool, Obs(1, 0), t0);
  EXPECT_EQ(d.desired, 1);
  d = a.Decide(pool, Obs(1, 0), t0 + idle - seconds(15));
  EXPECT_EQ(d.desired, 1) << "too early";
  d = a.Decide(pool, Obs(1, 0), t0 + idle);
  EXPECT_EQ(d.desired, 0);
  EXPECT_EQ(d.rule, "to_zero");
  // At zero with nothing held: stays.
  EXPECT_EQ(a.Decide(pool, Obs(0, 0), t0 + idle + seconds(15)).desired, 0);
  // A held request wakes it, to exactly one.
  PoolObservation held = Obs(0, 0);
  held.held_requests = 3;
  d = a.Decide(pool, held, t0 + idle + seconds(30));
  EXPECT_EQ(d.desired, 1);
  EXPECT_EQ(d.rule, "from_zero");
  // A min-1 pool never goes to zero.
  Autoscaler b(policy, profile);
  for (int s = 0; s <= 3 * idle.count(); s += 15)
    EXPECT_EQ(b.Decide(Pool(1, 4), Obs(1, 0), t0 + seconds(s)).desired, 1);
}

TEST_F(Fixture, NoFlappingBetweenZeroAndOne) {
  // Sparse traffic: one request every 5 minutes (shorter than the idle period) wakes the pool,
  // then the pool sees no arrivals in most intervals. It must not go 0 -> 1 -> 0 -> 1.
  Autoscaler a(policy, profile);
  const PoolSpec pool = Pool(0, 4);
  int cur = 0, changes = 0;
  for (int s = 0; s <= 7200; s += 15) {
    PoolObservation o = Obs(cur, 0);
    if (s % 300 == 0) {
      if (cur == 0)
        o.held_requests = 1;
      else
        o.arrival_rate = 1.0 / 60;  // the rate window still shows it
    }
    const ScaleDecision d = a.Decide(pool, o, t0 + seconds(s));
    if (d.changed) ++changes;
    cur = d.desired;
  }
  EXPECT_EQ(changes, 1) << "woken once, then kept";
  EXPECT_EQ(cur, 1);
  // When the traffic really stops it goes to zero once, after the idle period.
  int zero_at = -1;
  for (int s = 7215; s <= 7215 + 2 * 600; s += 15) {
    const ScaleDecision d = a.Decide(pool, Obs(cur, 0), t0 + seconds(s));
    if (d.changed && zero_at < 0) zero_at = s;
    cur = d.desired;
  }
  EXPECT_EQ(cur, 0);
  EXPECT_GE(zero_at - 7200, policy.scale_to_zero_idle.count());
}

TEST_F(Fixture, BoundsAndDisabled) {
  Autoscaler a(policy, profile);
  EXPECT_EQ(a.Decide(Pool(2, 4), Obs(0, 0), t0).desired, 2);
  EXPECT_EQ(a.Decide(Pool(2, 4), Obs(7, 0, 3), t0).desired, 4);  // even while not reporting
  AutoscalingSpec off = policy;
  off.enabled = false;
  Autoscaler b(off, profile);
  const ScaleDecision d = b.Decide(Pool(1, 8), Obs(2, 100 * profile.Capacity()), t0);
  EXPECT_EQ(d.desired, 2);
  EXPECT_EQ(d.rule, "disabled");
}

TEST_F(Fixture, CalibrationFollowsASlowerReplica) {
  // The replicas are really 2.5x slower than the profile says: the measured mean latency at the
  // measured batch pulls the profile there, and the count follows.
  Autoscaler a(policy, profile);
  const PoolSpec pool = Pool(1, 50);
  PoolObservation o = Obs(4, 0.1 * profile.Capacity());
  o.mean_running = 2;
  o.mean_e2e_s = 2.5 * profile.ServiceTime(3);  // joining 2 others
  for (int i = 0; i < 12; ++i) a.Decide(pool, o, t0 + seconds(15 * i));
  EXPECT_NEAR(a.Profile("general").ServiceTime(3), o.mean_e2e_s, 0.01);
  // 60 % of what the profile says one replica serves: enough for the profile, not for reality.
  const double rate = 0.6 * profile.Capacity();
  Autoscaler fresh(policy, profile);
  EXPECT_EQ(fresh.Decide(pool, Obs(1, rate), t0).desired, 1);
  EXPECT_EQ(a.Decide(pool, Obs(1, rate), t0 + seconds(200)).desired, 2);
}

}  // namespace
}  // namespace strata::control
