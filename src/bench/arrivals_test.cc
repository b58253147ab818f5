#include "bench/arrivals.h"

#include <gtest/gtest.h>

#include <cmath>

namespace strata::bench {
namespace {

struct GapStats {
  double mean = 0, cv = 0;
};

GapStats Gaps(const std::vector<double>& t) {
  std::vector<double> g;
  double prev = 0;
  for (double x : t) {
    g.push_back(x - prev);
    prev = x;
  }
  double m = 0;
  for (double x : g) m += x;
  m /= static_cast<double>(g.size());
  double var = 0;
  for (double x : g) var += (x - m) * (x - m);
  var /= static_cast<double>(g.size() - 1);
  return {m, std::sqrt(var) / m};
}

TEST(Arrivals, DeterministicBySeed) {
  auto a = ArrivalTimes(100, 5.0, 1.0, 42);
  auto b = ArrivalTimes(100, 5.0, 1.0, 42);
  auto c = ArrivalTimes(100, 5.0, 1.0, 43);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_NE(*a, *c);
  for (size_t i = 1; i < a->size(); ++i) EXPECT_GE((*a)[i], (*a)[i - 1]);
  EXPECT_GT((*a)[0], 0.0);
}

// Gamma(k, 1/(rate k)) gaps: mean 1/rate, coefficient of variation 1/sqrt(k) (exponential for k=1).
TEST(Arrivals, GammaStatisticsMatchTheory) {
  const int n = 40000;
  for (double k : {0.25, 1.0, 4.0}) {
    auto t = ArrivalTimes(n, 4.0, k, 7);
    ASSERT_TRUE(t.ok());
    GapStats s = Gaps(*t);
    EXPECT_NEAR(s.mean, 0.25, 0.25 * 0.04) << "burstiness " << k;
    EXPECT_NEAR(s.cv, 1.0 / std::sqrt(k), 0.06 / std::sqrt(k)) << "burstiness " << k;
  }
}

TEST(Arrivals, PoissonCountsPerSecondHaveVarianceEqualToMean) {
  auto t = ArrivalTimes(50000, 10.0, 1.0, 3);
  ASSERT_TRUE(t.ok());
  int seconds = static_cast<int>(t->back());
  std::vector<int> counts(static_cast<size_t>(seconds), 0);
  for (double x : *t)
    if (static_cast<int>(x) < seconds) ++counts[static_cast<size_t>(x)];
  double m = 0, v = 0;
  for (int c : counts) m += c;
  m /= counts.size();
  for (int c : counts) v += (c - m) * (c - m);
  v /= counts.size() - 1;
  EXPECT_NEAR(m, 10.0, 0.3);
  EXPECT_NEAR(v / m, 1.0, 0.12);  // index of dispersion of a Poisson process
}

TEST(Arrivals, InfiniteRateSendsAtOnceAndBadValuesFail) {
  auto t = ArrivalTimes(5, INFINITY, 1.0, 1);
  ASSERT_TRUE(t.ok());
  for (double x : *t) EXPECT_EQ(x, 0.0);
  EXPECT_FALSE(ArrivalTimes(5, 0.0, 1.0, 1).ok());
  EXPECT_FALSE(ArrivalTimes(5, -1.0, 1.0, 1).ok());
  EXPECT_FALSE(ArrivalTimes(5, NAN, 1.0, 1).ok());
  EXPECT_FALSE(ArrivalTimes(5, 1.0, 0.0, 1).ok());
  EXPECT_FALSE(ArrivalTimes(-1, 1.0, 1.0, 1).ok());
}

TEST(Rng, UniformIntCoversRangeUniformly) {
  Rng r(9);
  std::vector<int> hist(7, 0);
  for (int i = 0; i < 70000; ++i) {
    int64_t v = r.UniformInt(3, 9);
    ASSERT_GE(v, 3);
    ASSERT_LE(v, 9);
    ++hist[static_cast<size_t>(v - 3)];
  }
  for (int h : hist) EXPECT_NEAR(h, 10000, 400);
}

}  // namespace
}  // namespace strata::bench
