#include "control/queueing.h"

#include <gtest/gtest.h>

#include <cmath>

namespace strata::control {
namespace {

TEST(ErlangC, KnownValues) {
  EXPECT_NEAR(ErlangC(1, 0.5), 0.5, 1e-12);        // M/M/1: P(wait) = rho
  EXPECT_NEAR(ErlangC(2, 1.0), 1.0 / 3.0, 1e-12);  // textbook M/M/2 at a = 1
  EXPECT_DOUBLE_EQ(ErlangC(4, 4.0), 1.0);          // saturated
  EXPECT_DOUBLE_EQ(ErlangC(4, 0.0), 0.0);
}

TEST(Predict, MoreReplicasNeverSlower) {
  const ReplicaProfile p{};
  const double rate = 0.8 * p.Capacity() * 3;  // 3 replicas at 80 %
  double last = kInf;
  for (int n = 3; n <= 8; ++n) {
    const Prediction pr = Predict(p, n, rate);
    EXPECT_LE(pr.e2e_p95_s, last) << n;
    EXPECT_TRUE(std::isfinite(pr.e2e_p95_s)) << n;
    last = pr.e2e_p95_s;
  }
  // Far below capacity: the request alone, times the spread.
  const Prediction idle = Predict(p, 8, 1e-6);
  EXPECT_NEAR(idle.e2e_p95_s, p.ServiceTime(1) * p.p95_over_mean, 1e-5);
}

TEST(Predict, OverloadIsInfiniteAndSheds) {
  const ReplicaProfile p{};
  const Prediction pr = Predict(p, 2, 4 * p.Capacity());
  EXPECT_TRUE(std::isinf(pr.e2e_p95_s));
  EXPECT_NEAR(pr.error_rate, 0.5, 0.05);  // twice what two replicas serve
  EXPECT_TRUE(std::isinf(Predict(p, 0, 1).e2e_p95_s));
  EXPECT_EQ(Predict(p, 0, 0).e2e_p95_s, 0);
}

TEST(Predict, BatchFollowsLittlesLaw) {
  const ReplicaProfile p{};
  const double rate = 20;  // one replica
  const Prediction pr = Predict(p, 1, rate);
  ASSERT_TRUE(std::isfinite(pr.batch));
  EXPECT_NEAR(pr.batch, rate * p.ServiceTime(pr.batch + 1), 1e-9);
}

TEST(Calibrate, FitsAlphaKeepingTheRatio) {
  ReplicaProfile p{};
  const double ratio = p.beta_s / p.alpha_s;
  Calibrate(&p, 4, 0.5, 1.0);                 // measured: 0.5 s at batch 4
  EXPECT_NEAR(p.ServiceTime(5), 0.5, 1e-12);  // joining 4 others
  EXPECT_NEAR(p.beta_s / p.alpha_s, ratio, 1e-12);
  const ReplicaProfile before = p;
  Calibrate(&p, 100, 9, 1.0);  // above max_batch: queueing, ignored
  EXPECT_EQ(p.alpha_s, before.alpha_s);
  Calibrate(&p, 2, 0, 1.0);  // no time: ignored
  EXPECT_EQ(p.alpha_s, before.alpha_s);
}

}  // namespace
}  // namespace strata::control
